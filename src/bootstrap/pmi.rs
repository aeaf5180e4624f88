//! PMI bootstrap: NVSHMEM's own PMI plugins find rank and size through the PMI server of the
//! launcher that started the process (`srun --mpi=pmix` or `--mpi=pmi2`, MPICH's or Intel MPI's
//! Hydra, Open MPI's mpirun), so that srun starts a job without MPI and without `nvsh run`.
//!
//! NVSHMEM 3.4.5 selects the plugin from its environment: `NVSHMEM_BOOTSTRAP=PMI` and
//! `NVSHMEM_BOOTSTRAP_PMI` = `PMIX`, `PMI-2` or `PMI`; the plugin file is
//! `NVSHMEM_BOOTSTRAP_{PMIX,PMI2,PMI}_PLUGIN` (default `nvshmem_bootstrap_{pmix,pmi2,pmi}.so.3`,
//! searched as `dlopen` searches). The PMIx plugin links the PMIx client library
//! (`libpmix.so.2`); the PMI-1 and PMI-2 plugins carry their own client of the PMI wire protocol
//! and need only the launcher's `PMI_FD` (or `PMI_PORT`). A missing file makes NVSHMEM's init
//! fail deep inside, so the plugin is loaded here first and its absence reported in the user's
//! terms.
//!
//! `NVSH_PMI` (`pmix`, `pmi2`, `pmi1`) overrides the flavour; without it `NVSHMEM_BOOTSTRAP_PMI`
//! counts, then what the launcher offers.

use super::lookup::Lookup;
use crate::core::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Overrides the PMI flavour: `pmix`, `pmi2` or `pmi1`.
pub const ENV_PMI: &str = "NVSH_PMI";
const NVSHMEM_BOOTSTRAP: &str = "NVSHMEM_BOOTSTRAP";
const NVSHMEM_BOOTSTRAP_PMI: &str = "NVSHMEM_BOOTSTRAP_PMI";
/// NVSHMEM's host library, whose directory holds the plugins it ships.
const HOST_LIBRARY: &str = "libnvshmem_host.so";
/// The names [`PmiFlavour::parse`] accepts, as errors list them.
const FLAVOUR_NAMES: &str = "pmix, pmi2 or pmi1";

/// The PMI version a launcher serves and NVSHMEM has a plugin for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmiFlavour {
    /// PMIx: `srun --mpi=pmix`, Open MPI's mpirun (PMIX_RANK, PMIX_NAMESPACE).
    Pmix,
    /// PMI-2: `srun --mpi=pmi2` (PMI_FD).
    Pmi2,
    /// PMI-1: MPICH's and Intel MPI's Hydra (PMI_FD or PMI_PORT).
    Pmi1,
}

impl PmiFlavour {
    /// The value of `NVSHMEM_BOOTSTRAP_PMI` that selects it.
    pub fn nvshmem_name(self) -> &'static str {
        match self {
            PmiFlavour::Pmix => "PMIX",
            PmiFlavour::Pmi2 => "PMI-2",
            PmiFlavour::Pmi1 => "PMI",
        }
    }

    /// Its name in messages and the log.
    pub fn label(self) -> &'static str {
        match self {
            PmiFlavour::Pmix => "PMIx",
            PmiFlavour::Pmi2 => "PMI-2",
            PmiFlavour::Pmi1 => "PMI-1",
        }
    }

    /// NVSHMEM's variable naming the plugin file.
    pub fn plugin_var(self) -> &'static str {
        match self {
            PmiFlavour::Pmix => "NVSHMEM_BOOTSTRAP_PMIX_PLUGIN",
            PmiFlavour::Pmi2 => "NVSHMEM_BOOTSTRAP_PMI2_PLUGIN",
            PmiFlavour::Pmi1 => "NVSHMEM_BOOTSTRAP_PMI_PLUGIN",
        }
    }

    /// The plugin file NVSHMEM 3 loads when `plugin_var` is unset.
    pub fn default_plugin(self) -> &'static str {
        match self {
            PmiFlavour::Pmix => "nvshmem_bootstrap_pmix.so.3",
            PmiFlavour::Pmi2 => "nvshmem_bootstrap_pmi2.so.3",
            PmiFlavour::Pmi1 => "nvshmem_bootstrap_pmi.so.3",
        }
    }

    /// The client library the plugin links, if any (the PMI-1 and PMI-2 plugins link none).
    pub fn client_library(self) -> Option<&'static str> {
        match self {
            PmiFlavour::Pmix => Some("libpmix.so.2"),
            PmiFlavour::Pmi2 | PmiFlavour::Pmi1 => None,
        }
    }

    /// The srun option that serves it, for advice.
    fn srun_option(self) -> &'static str {
        match self {
            PmiFlavour::Pmix => "srun --mpi=pmix",
            PmiFlavour::Pmi2 | PmiFlavour::Pmi1 => "srun --mpi=pmi2",
        }
    }

    /// `pmix`, `pmi2` / `pmi-2`, `pmi` / `pmi1` / `pmi-1`, any case (NVSHMEM's own spellings
    /// included); [`Error::UnknownName`] names the accepted ones. Also `str::parse`.
    pub fn parse(value: &str) -> Result<PmiFlavour> {
        Ok(match value.trim().to_ascii_lowercase().as_str() {
            "pmix" => PmiFlavour::Pmix,
            "pmi2" | "pmi-2" => PmiFlavour::Pmi2,
            "pmi" | "pmi1" | "pmi-1" => PmiFlavour::Pmi1,
            _ => {
                return Err(Error::UnknownName {
                    what: "PMI version",
                    name: value.to_string(),
                    expected: FLAVOUR_NAMES,
                })
            }
        })
    }
}

impl std::str::FromStr for PmiFlavour {
    type Err = Error;
    fn from_str(s: &str) -> Result<PmiFlavour> {
        PmiFlavour::parse(s)
    }
}

/// The PMI server the launcher gave this process, if any: PMIx when `PMIX_RANK` and
/// `PMIX_NAMESPACE` are set; else, with `PMI_FD` or `PMI_PORT`, PMI-2 under an srun step (Slurm's
/// mpi/pmi2 sets `PMI_FD` and the same rank and size as srun) and PMI-1 otherwise (Hydra serves
/// PMI-1 to any client; inside a Slurm allocation its SLURM_* variables describe its proxies,
/// not the ranks).
pub fn offered(env: Lookup) -> Option<PmiFlavour> {
    let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
    if set("PMIX_RANK") && set("PMIX_NAMESPACE") {
        return Some(PmiFlavour::Pmix);
    }
    if !(set("PMI_FD") || set("PMI_PORT")) {
        return None;
    }
    let same =
        |a: &str, b: &str| env(a).is_some_and(|x| env(b).is_some_and(|y| x.trim() == y.trim()));
    if same("PMI_SIZE", "SLURM_STEP_NUM_TASKS") && same("PMI_RANK", "SLURM_PROCID") {
        Some(PmiFlavour::Pmi2)
    } else {
        Some(PmiFlavour::Pmi1)
    }
}

/// Whether the launcher gave this process a server of `flavour` to talk to: without one the
/// plugin would start a job of 1 or fail.
fn served(env: Lookup, flavour: PmiFlavour) -> bool {
    let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
    match flavour {
        PmiFlavour::Pmix => set("PMIX_RANK") && set("PMIX_NAMESPACE"),
        PmiFlavour::Pmi2 | PmiFlavour::Pmi1 => set("PMI_FD") || set("PMI_PORT"),
    }
}

/// Which launcher started how many processes, for messages (see `StepEnv`).
pub type Started<'a> = Option<(&'a str, i32)>;

/// The flavour to use: `NVSH_PMI`, else `NVSHMEM_BOOTSTRAP_PMI`, else what the launcher offers.
/// An error when the choice is not a PMI version or the launcher serves none (or not the one
/// chosen); `step` names the launcher in the message, `mpi_built` says whether the build has the
/// `mpi` feature to fall back on.
pub fn flavour(env: Lookup, step: Started, mpi_built: bool) -> Result<PmiFlavour> {
    let chosen = |var: &'static str| -> Result<Option<PmiFlavour>> {
        match env(var) {
            None => Ok(None),
            Some(v) if v.trim().is_empty() => Ok(None),
            Some(v) => PmiFlavour::parse(&v)
                .map(Some)
                .map_err(|_| Error::InvalidEnv {
                    var,
                    value: v,
                    expected: FLAVOUR_NAMES,
                }),
        }
    };
    let (flavour, from) = match (chosen(ENV_PMI)?, chosen(NVSHMEM_BOOTSTRAP_PMI)?) {
        (Some(f), _) => (f, Some(ENV_PMI)),
        (None, Some(f)) => (f, Some(NVSHMEM_BOOTSTRAP_PMI)),
        (None, None) => match offered(env) {
            Some(f) => (f, None),
            None => return Err(not_served(step, mpi_built)),
        },
    };
    if let (Some(var), false) = (from, served(env, flavour)) {
        let (launcher, size) = step.unwrap_or(("the launcher", 0));
        let contact = match flavour {
            PmiFlavour::Pmix => "PMIX_RANK or PMIX_NAMESPACE is unset",
            PmiFlavour::Pmi2 | PmiFlavour::Pmi1 => "neither PMI_FD nor PMI_PORT is set",
        };
        return Err(Error::BootstrapUnavailable {
            reason: format!(
                "{var} asks for {}, but {launcher} ({size} processes) did not serve it to this \
                 process ({contact}); start it with `{}` (see `srun --mpi=list`), or \
                 unset {var} to use what the launcher offers",
                flavour.label(),
                flavour.srun_option()
            ),
        });
    }
    Ok(flavour)
}

/// The error when a launcher started this process as one of several but serves no PMI;
/// `mpi_built`: whether MPI is there to fall back on.
pub fn not_served(step: Started, mpi_built: bool) -> Error {
    let (launcher, size) = step.unwrap_or(("the launcher", 0));
    let (mpi, mpi_advice) = if mpi_built {
        ("", "unset NVSH_BOOTSTRAP and NVSH_PMI to use MPI")
    } else {
        (
            " and this program was built without the `mpi` feature",
            "rebuild with `--features mpi`",
        )
    };
    Error::BootstrapUnavailable {
        reason: format!(
            "started by {launcher} ({size} processes) without a PMI server (none of PMIX_RANK, \
             PMI_FD, PMI_PORT is set){mpi}, so the processes cannot find each other; start it \
             with `srun --mpi=pmix` (or `--mpi=pmi2`; `srun --mpi=list` shows what the cluster \
             has), {mpi_advice}, or start it with `nvsh run -n N`"
        ),
    }
}

/// Loads `flavour`'s plugin as NVSHMEM will (which also loads the client library it links) and
/// returns the file NVSHMEM should load: the one found here. A name without `/` is looked up in
/// NVSHMEM's library directory first (NVSHMEM's loader searches its own `$ORIGIN` rpath first),
/// then as `dlopen` searches.
pub fn load_plugin(flavour: PmiFlavour, env: Lookup) -> Result<String> {
    let set_by_user = env(flavour.plugin_var()).filter(|v| !v.trim().is_empty());
    let name = set_by_user
        .clone()
        .unwrap_or_else(|| flavour.default_plugin().to_string());
    let mut candidates = Vec::new();
    if !name.contains('/') {
        if let Some(dir) = nvshmem_library_dir() {
            candidates.push(dir.join(&name).to_string_lossy().into_owned());
        }
    }
    candidates.push(name.clone());
    let mut failures = Vec::new();
    for candidate in candidates {
        // SAFETY: NVSHMEM's init loads this same file (RTLD_NOW) and runs its initialisers; the
        // handle is closed again here, NVSHMEM loads it anew.
        let loaded = unsafe {
            libloading::os::unix::Library::open(
                Some(&candidate),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
            )
        };
        match loaded {
            Ok(_) => return Ok(candidate),
            Err(e) => failures.push((candidate, loader_text(&e))),
        }
    }
    // The most telling failure: that of a file that exists (its dependency is missing), else the
    // search by name.
    let (tried, why) = failures
        .iter()
        .find(|(c, _)| Path::new(c).exists())
        .or(failures.last())
        .cloned()
        .unwrap_or_default();
    Err(plugin_error(flavour, &tried, set_by_user.is_some(), &why))
}

/// The loader's own words (dlerror) for a failed load.
fn loader_text(e: &libloading::Error) -> String {
    std::error::Error::source(e).map_or_else(|| e.to_string(), ToString::to_string)
}

/// The error when `plugin` (named by the user's variable when `user_named`) did not load, with
/// the loader's reason `why`: its client library is missing or of another make than the plugin
/// was built against, or the plugin itself is missing.
pub fn plugin_error(flavour: PmiFlavour, plugin: &str, user_named: bool, why: &str) -> Error {
    let label = flavour.label();
    let client = flavour.client_library();
    if let (Some(lib), true) = (client, why.contains("undefined symbol")) {
        // The plugin and its library were found, but the library lacks a symbol the plugin was
        // linked against: Debian 12's PMIx 4.2.2 does this to NVSHMEM 3.4.5's PMIx plugin
        // (pmix_value_load), and Ubuntu 24.04's 5.0.1; Debian 11's 4.0.0 has it (measured).
        let known = if why.contains("pmix_value_load") {
            " (PMIx 4.0 has the symbol, 4.2 and 5.0 do not: with a PMIx 4.0 client library \
             first on LD_LIBRARY_PATH, and PMIX_MCA_mca_base_component_path naming its own \
             lib/pmix plugins, the plugin ran under Open MPI 4.1.6's mpirun)"
        } else {
            ""
        };
        return Error::BootstrapUnavailable {
            reason: format!(
                "NVSHMEM's {label} plugin {plugin} cannot use the {label} client library {lib} \
                 that the loader found ({why}): that library is not the {label} the plugin was \
                 built for{known}; put a compatible one first on LD_LIBRARY_PATH, or use `srun \
                 --mpi=pmi2` (NVSHMEM's PMI-2 plugin needs no library), rebuild with `--features \
                 mpi`, or start it with `nvsh run -n N`"
            ),
        };
    }
    if let Some(lib) = client.filter(|lib| why.contains(lib)) {
        return Error::BootstrapUnavailable {
            reason: format!(
                "the {label} bootstrap needs the {label} client library {lib}, which NVSHMEM's \
                 plugin {plugin} could not load ({why}); install it (the PMIx that Slurm was \
                 built with) or put its directory on LD_LIBRARY_PATH, or use `srun --mpi=pmi2` \
                 (NVSHMEM's PMI-2 plugin needs no library), rebuild with `--features mpi`, or \
                 start it with `nvsh run -n N`"
            ),
        };
    }
    let named = if user_named {
        format!("named by {}", flavour.plugin_var())
    } else {
        format!(
            "NVSHMEM's default, expected next to {HOST_LIBRARY}.3 or on LD_LIBRARY_PATH; \
             {} names another file",
            flavour.plugin_var()
        )
    };
    Error::BootstrapUnavailable {
        reason: format!(
            "the {label} bootstrap needs NVSHMEM's plugin {plugin} ({named}), which could not be \
             loaded ({why}); install NVSHMEM's bootstrap plugins (they ship in its lib \
             directory), or rebuild with `--features mpi`, or start it with `nvsh run -n N`"
        ),
    }
}

/// The directory of the NVSHMEM host library this process loaded, from the loader's map.
fn nvshmem_library_dir() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| {
            Path::new(path)
                .file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with(HOST_LIBRARY))
        })
        .and_then(|path| Path::new(path).parent().map(Path::to_path_buf))
}

/// Selects the PMI bootstrap in NVSHMEM's environment, which NVSHMEM reads at init: its
/// bootstrap, the flavour, and the plugin file `load_plugin` found (unless the user named one).
/// Called on the init thread before NVSHMEM starts; other threads that read the environment
/// through C's `getenv` meanwhile are not synchronised with it.
pub fn select_in_nvshmem(flavour: PmiFlavour, plugin: &str) {
    if let Ok(old) = std::env::var(NVSHMEM_BOOTSTRAP) {
        if !old.eq_ignore_ascii_case("PMI") {
            log::warn!("{NVSHMEM_BOOTSTRAP}={old} replaced by PMI for the PMI bootstrap");
        }
    }
    std::env::set_var(NVSHMEM_BOOTSTRAP, "PMI");
    std::env::set_var(NVSHMEM_BOOTSTRAP_PMI, flavour.nvshmem_name());
    if std::env::var_os(flavour.plugin_var()).is_none() {
        std::env::set_var(flavour.plugin_var(), plugin);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::{auto_choice, step_env_in, tests::with_env, Bootstrap, StepEnv};

    /// A fixed environment: `vars` set, everything else unset.
    fn table(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    /// What Auto picks without and with the `mpi` feature, the PMI version, and the step's rank,
    /// size, local rank and the variable it came from.
    #[allow(clippy::type_complexity)]
    fn decide(
        vars: &[(&str, &str)],
    ) -> (
        Result<Bootstrap>,
        Result<Bootstrap>,
        Result<PmiFlavour>,
        Option<(i32, i32, i32, Option<&'static str>)>,
    ) {
        let env = table(vars);
        let step = step_env_in(&env);
        (
            auto_choice(&env, false),
            auto_choice(&env, true),
            flavour(&env, started(step.as_ref()), false),
            step.map(|s| (s.rank, s.size, s.local_rank, s.local_rank_var)),
        )
    }

    // What `srun --mpi=pmix -n 8 --ntasks-per-node=4` gives task 5 (node 1, local 1).
    const SRUN_PMIX: &[(&str, &str)] = &[
        ("SLURM_STEP_NUM_TASKS", "8"),
        ("SLURM_PROCID", "5"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NTASKS", "8"),
        ("PMIX_RANK", "5"),
        ("PMIX_NAMESPACE", "slurm.pmix.1234.0"),
        (
            "PMIX_SERVER_URI41",
            "pmix-server.1234;tcp4://10.0.0.2:41313",
        ),
    ];

    // What `srun --mpi=pmi2 -n 4 --ntasks-per-node=2` gives task 3 (Slurm's mpi/pmi2).
    const SRUN_PMI2: &[(&str, &str)] = &[
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_PROCID", "3"),
        ("SLURM_LOCALID", "1"),
        ("PMI_FD", "7"),
        ("PMI_JOBID", "1234.0"),
        ("PMI_RANK", "3"),
        ("PMI_SIZE", "4"),
    ];

    #[test]
    fn srun_with_pmix_starts_the_pmix_bootstrap_on_slurm_localid() {
        let (auto, auto_mpi, flavour, step) = decide(SRUN_PMIX);
        assert_eq!(auto.unwrap(), Bootstrap::Pmi);
        // A build with MPI keeps MPI, as before.
        assert_eq!(auto_mpi.unwrap(), Bootstrap::Mpi);
        assert_eq!(flavour.unwrap(), PmiFlavour::Pmix);
        assert_eq!(step, Some((5, 8, 1, Some("SLURM_LOCALID"))));
    }

    #[test]
    fn srun_with_pmi2_starts_the_pmi2_bootstrap() {
        let (auto, _, flavour, step) = decide(SRUN_PMI2);
        assert_eq!(auto.unwrap(), Bootstrap::Pmi);
        assert_eq!(flavour.unwrap(), PmiFlavour::Pmi2);
        assert_eq!(step, Some((3, 4, 1, Some("SLURM_LOCALID"))));
    }

    #[test]
    fn hydra_starts_the_pmi1_bootstrap_on_its_own_local_rank() {
        // MPICH's mpiexec inside a Slurm allocation: its proxies run as a 2-task srun step, so
        // the SLURM_* variables describe proxy 1, not rank 6.
        let hydra = [
            ("PMI_FD", "9"),
            ("PMI_RANK", "6"),
            ("PMI_SIZE", "8"),
            ("MPI_LOCALRANKID", "2"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_PROCID", "1"),
            ("SLURM_LOCALID", "0"),
        ];
        let (auto, _, flavour, step) = decide(&hydra);
        assert_eq!(auto.unwrap(), Bootstrap::Pmi);
        assert_eq!(flavour.unwrap(), PmiFlavour::Pmi1);
        assert_eq!(step, Some((6, 8, 2, Some("MPI_LOCALRANKID"))));
        // Intel MPI's Hydra names the local rank PMI_LOCAL_RANK.
        let intel = [
            ("PMI_PORT", "node1:4242"),
            ("PMI_RANK", "3"),
            ("PMI_SIZE", "4"),
            ("PMI_LOCAL_RANK", "1"),
        ];
        let (_, _, flavour, step) = decide(&intel);
        assert_eq!(flavour.unwrap(), PmiFlavour::Pmi1);
        assert_eq!(step, Some((3, 4, 1, Some("PMI_LOCAL_RANK"))));
    }

    #[test]
    fn open_mpi_mpirun_without_mpi_uses_its_pmix_server() {
        let ompi = [
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("PMIX_RANK", "2"),
            ("PMIX_NAMESPACE", "prterun-node1-4242@1"),
        ];
        let (auto, auto_mpi, flavour, step) = decide(&ompi);
        assert_eq!(auto.unwrap(), Bootstrap::Pmi);
        assert_eq!(auto_mpi.unwrap(), Bootstrap::Mpi);
        assert_eq!(flavour.unwrap(), PmiFlavour::Pmix);
        assert_eq!(step, Some((2, 4, 0, Some("OMPI_COMM_WORLD_LOCAL_RANK"))));
    }

    #[test]
    fn torchrun_local_rank_is_read_but_torchrun_is_refused() {
        let torchrun = [("RANK", "3"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1")];
        let (auto, auto_mpi, flavour, step) = decide(&torchrun);
        assert_eq!(step, Some((3, 4, 1, Some("LOCAL_RANK"))));
        for err in [auto.unwrap_err(), auto_mpi.unwrap_err()] {
            let text = err.to_string();
            assert!(
                text.contains("torchrun") && text.contains("srun --mpi=pmix"),
                "{text}"
            );
        }
        assert!(flavour
            .unwrap_err()
            .to_string()
            .contains("without a PMI server"));
    }

    #[test]
    fn a_launcher_without_a_local_rank_variable_falls_back_to_the_rank() {
        let step = step_env_in(&table(&[("PMI_RANK", "3"), ("PMI_SIZE", "4")])).unwrap();
        assert_eq!((step.local_rank, step.local_rank_var), (3, None));
    }

    #[test]
    fn srun_without_pmi_is_refused_with_what_to_do() {
        // `srun -n 4 prog` where MpiDefault=none: no PMI server for the step.
        let srun = [
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
        ];
        let (auto, auto_mpi, flavour, _) = decide(&srun);
        let text = auto.unwrap_err().to_string();
        for part in [
            "started by srun (4 processes) without a PMI server",
            "built without the `mpi` feature",
            "srun --mpi=pmix",
            "--mpi=pmi2",
            "--features mpi",
            "nvsh run -n N",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
        assert_eq!(auto_mpi.unwrap(), Bootstrap::Mpi);
        assert!(flavour.is_err());
        // With MPI built, the advice is to use it, not to rebuild.
        let env = table(&srun);
        let step = step_env_in(&env);
        let text = flavour_err(&env, step.as_ref(), true);
        assert!(
            text.contains("to use MPI") && !text.contains("--features mpi"),
            "{text}"
        );
    }

    fn flavour_err(env: Lookup, step: Option<&StepEnv>, mpi_built: bool) -> String {
        flavour(env, started(step), mpi_built)
            .unwrap_err()
            .to_string()
    }

    fn started(step: Option<&StepEnv>) -> Started<'_> {
        step.map(|s| (s.launcher, s.size))
    }

    #[test]
    fn one_process_and_sbatch_scripts_stay_single() {
        let one = [
            ("SLURM_STEP_NUM_TASKS", "1"),
            ("SLURM_PROCID", "0"),
            ("PMIX_RANK", "0"),
            ("PMIX_NAMESPACE", "slurm.pmix.1.0"),
        ];
        assert_eq!(auto_choice(&table(&one), false).unwrap(), Bootstrap::Single);
        let batch = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "8")];
        assert_eq!(
            auto_choice(&table(&batch), false).unwrap(),
            Bootstrap::Single
        );
    }

    #[test]
    fn nvsh_run_wins_over_a_pmi_launcher() {
        let mut vars = SRUN_PMIX.to_vec();
        vars.push(("NVSH_RANK", "0"));
        assert_eq!(
            auto_choice(&table(&vars), true).unwrap(),
            Bootstrap::Launcher
        );
    }

    #[test]
    fn the_pmi_version_can_be_overridden_but_only_to_one_that_is_served() {
        // PMIx and PMI-2 both served: NVSH_PMI picks, and makes Auto prefer PMI over MPI.
        let mut both = SRUN_PMI2.to_vec();
        both.extend([("PMIX_RANK", "3"), ("PMIX_NAMESPACE", "slurm.pmix.1234.0")]);
        assert_eq!(
            flavour(&table(&both), None, false).unwrap(),
            PmiFlavour::Pmix
        );
        let mut pick = both.clone();
        pick.push((ENV_PMI, "PMI2"));
        assert_eq!(
            flavour(&table(&pick), None, false).unwrap(),
            PmiFlavour::Pmi2
        );
        assert_eq!(auto_choice(&table(&pick), true).unwrap(), Bootstrap::Pmi);
        // NVSHMEM's own variable counts when NVSH_PMI is unset.
        let mut nvshmem = both.clone();
        nvshmem.push((NVSHMEM_BOOTSTRAP_PMI, "PMI-2"));
        assert_eq!(
            flavour(&table(&nvshmem), None, false).unwrap(),
            PmiFlavour::Pmi2
        );
        // Asking for PMI-2 where srun serves only PMIx names the variable and the fix.
        let mut wrong = SRUN_PMIX.to_vec();
        wrong.push((ENV_PMI, "pmi2"));
        let env = table(&wrong);
        let text = flavour_err(&env, step_env_in(&env).as_ref(), false);
        for part in [
            "NVSH_PMI asks for PMI-2",
            "srun (8 processes)",
            "neither PMI_FD nor PMI_PORT is set",
            "srun --mpi=pmi2",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
        // Not a PMI version at all.
        let mut bogus = SRUN_PMIX.to_vec();
        bogus.push((ENV_PMI, "pmi3"));
        match flavour(&table(&bogus), None, false) {
            Err(Error::InvalidEnv { var, .. }) => assert_eq!(var, ENV_PMI),
            other => panic!("expected InvalidEnv for NVSH_PMI, got {other:?}"),
        }
    }

    #[test]
    fn flavours_map_to_nvshmem_names_plugins_and_libraries() {
        for (spelling, f) in [
            ("PMIX", PmiFlavour::Pmix),
            ("pmi-2", PmiFlavour::Pmi2),
            ("Pmi2", PmiFlavour::Pmi2),
            ("PMI", PmiFlavour::Pmi1),
            ("pmi1", PmiFlavour::Pmi1),
        ] {
            assert_eq!(PmiFlavour::parse(spelling).unwrap(), f, "{spelling}");
            assert_eq!(spelling.parse::<PmiFlavour>().unwrap(), f, "{spelling}");
            // NVSHMEM's own spelling reads back as the same flavour.
            assert_eq!(PmiFlavour::parse(f.nvshmem_name()).unwrap(), f);
        }
        let err = PmiFlavour::parse("mpi").unwrap_err();
        assert!(matches!(err, Error::UnknownName { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "no PMI version named \"mpi\": expected pmix, pmi2 or pmi1"
        );
        assert_eq!(PmiFlavour::Pmix.client_library(), Some("libpmix.so.2"));
        assert_eq!(PmiFlavour::Pmi2.client_library(), None);
        assert_eq!(
            PmiFlavour::Pmi1.default_plugin(),
            "nvshmem_bootstrap_pmi.so.3"
        );
    }

    #[test]
    fn nvshmems_shipped_pmi_plugins_load_from_its_lib_directory() {
        // The PMI-1 and PMI-2 plugins link no PMI library: they load wherever NVSHMEM is.
        for f in [PmiFlavour::Pmi2, PmiFlavour::Pmi1] {
            let path = load_plugin(f, &table(&[])).unwrap_or_else(|e| panic!("{f:?}: {e}"));
            assert!(
                path.starts_with('/') && path.ends_with(f.default_plugin()),
                "{f:?}: {path}"
            );
        }
        // The PMIx plugin needs libpmix.so.2, and one it was built for (Debian 12's PMIx 4.2.2
        // lacks a symbol it uses): where it does not load, the error names the library and the
        // way around it.
        // SAFETY: loading the PMIx client library runs only its initialisers.
        let pmix = unsafe { libloading::Library::new("libpmix.so.2") };
        match load_plugin(PmiFlavour::Pmix, &table(&[])) {
            Ok(path) => {
                assert!(pmix.is_ok(), "the plugin loaded without libpmix.so.2");
                assert!(path.ends_with("nvshmem_bootstrap_pmix.so.3"), "{path}");
            }
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.contains("client library libpmix.so.2")
                        && text.contains("srun --mpi=pmi2"),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn a_missing_plugin_is_an_error_naming_the_file_and_variable() {
        let env = table(&[("NVSHMEM_BOOTSTRAP_PMI2_PLUGIN", "/nonexistent/pmi2.so")]);
        let text = load_plugin(PmiFlavour::Pmi2, &env).unwrap_err().to_string();
        for part in [
            "PMI-2 bootstrap needs NVSHMEM's plugin /nonexistent/pmi2.so",
            "named by NVSHMEM_BOOTSTRAP_PMI2_PLUGIN",
            "nvsh run -n N",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
        // The default name, not found: where it is expected and how to name another.
        let text = plugin_error(
            PmiFlavour::Pmi1,
            "nvshmem_bootstrap_pmi.so.3",
            false,
            "nvshmem_bootstrap_pmi.so.3: cannot open shared object file: No such file or directory",
        )
        .to_string();
        assert!(
            text.contains("next to libnvshmem_host.so.3")
                && text.contains("NVSHMEM_BOOTSTRAP_PMI_PLUGIN names another file"),
            "{text}"
        );
    }

    #[test]
    fn a_missing_pmix_library_is_named_with_what_to_do() {
        // What dlopen reports for the PMIx plugin on a node without PMIx.
        let why = "libpmix.so.2: cannot open shared object file: No such file or directory";
        let err = plugin_error(
            PmiFlavour::Pmix,
            "/opt/nvshmem/lib/nvshmem_bootstrap_pmix.so.3",
            false,
            why,
        );
        assert!(matches!(err, Error::BootstrapUnavailable { .. }));
        let text = err.to_string();
        for part in [
            "PMIx bootstrap needs the PMIx client library libpmix.so.2",
            why,
            "LD_LIBRARY_PATH",
            "srun --mpi=pmi2",
            "--features mpi",
            "nvsh run -n N",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
    }

    #[test]
    fn a_pmix_library_the_plugin_was_not_built_for_is_named() {
        // What dlopen reports for NVSHMEM 3.4.5's PMIx plugin next to Debian 12's PMIx 4.2.2.
        let why = "/opt/nvshmem/lib/nvshmem_bootstrap_pmix.so.3: undefined symbol: pmix_value_load";
        let text = plugin_error(
            PmiFlavour::Pmix,
            "/opt/nvshmem/lib/nvshmem_bootstrap_pmix.so.3",
            false,
            why,
        )
        .to_string();
        for part in [
            "cannot use the PMIx client library libpmix.so.2",
            "undefined symbol: pmix_value_load",
            "PMIx 4.0 has the symbol",
            "srun --mpi=pmi2",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
        // The PMI-2 plugin links no library: the same words blame the plugin.
        let text = plugin_error(PmiFlavour::Pmi2, "p.so", true, why).to_string();
        assert!(text.contains("needs NVSHMEM's plugin p.so"), "{text}");
    }

    #[test]
    fn a_pmi_job_of_another_size_is_refused_in_the_launchers_terms() {
        let step = step_env_in(&table(SRUN_PMIX)).unwrap();
        assert!(step.check_size("PMIx", 8).is_ok());
        let text = step.check_size("PMIx", 1).unwrap_err().to_string();
        assert!(
            text.contains("PMIx found 1 process(es) but srun started 8 (SLURM_STEP_NUM_TASKS=8)")
                && text.contains("srun --mpi=list"),
            "{text}"
        );
    }

    #[test]
    fn selecting_pmi_sets_nvshmems_variables_and_keeps_a_users_plugin() {
        let got = with_env(&[("NVSHMEM_BOOTSTRAP", "UID")], || {
            select_in_nvshmem(PmiFlavour::Pmix, "/x/nvshmem_bootstrap_pmix.so.3");
            [
                "NVSHMEM_BOOTSTRAP",
                "NVSHMEM_BOOTSTRAP_PMI",
                "NVSHMEM_BOOTSTRAP_PMIX_PLUGIN",
            ]
            .map(|v| std::env::var(v).ok())
        });
        assert_eq!(
            got,
            [
                Some("PMI".to_string()),
                Some("PMIX".to_string()),
                Some("/x/nvshmem_bootstrap_pmix.so.3".to_string())
            ]
        );
        let kept = with_env(&[("NVSHMEM_BOOTSTRAP_PMI2_PLUGIN", "mine.so")], || {
            select_in_nvshmem(PmiFlavour::Pmi2, "/x/nvshmem_bootstrap_pmi2.so.3");
            std::env::var("NVSHMEM_BOOTSTRAP_PMI2_PLUGIN").ok()
        });
        assert_eq!(kept.as_deref(), Some("mine.so"));
    }
}
