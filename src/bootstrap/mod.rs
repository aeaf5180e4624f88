//! How a process learns its place in the job: from our launcher (`nvsh run`), from MPI, or alone.
//!
//! The launcher contract (what `nvsh run` sets in each child's environment):
//!
//! | variable | meaning |
//! |---|---|
//! | `NVSH_RANK` | this process's rank, 0 ..= world size - 1 |
//! | `NVSH_LOCAL_RANK` | rank among the processes on this node (selects the GPU) |
//! | `NVSH_WORLD_SIZE` | number of processes in the job |
//! | `NVSH_LOCAL_WORLD_SIZE` | number of processes on this node |
//! | `NVSH_UNIQUE_ID` | NVSHMEM unique ID for the UID bootstrap, hex-encoded |
//!
//! `NVSH_BOOTSTRAP` (`auto`, `launcher`, `mpi`, `pmi`, `single`) overrides the automatic choice
//! ([`auto_choice`]); `NVSH_PMI` (`pmix`, `pmi2`, `pmi1`) the PMI version ([`pmi`]).

use crate::core::error::{Error, Result};
use crate::sys;
use std::env;

mod init;
mod lookup;
#[cfg(feature = "mpi")]
pub(crate) mod mpi;
pub mod pmi;

pub use lookup::{process_env, Lookup};

/// This process's rank, 0 ..= world size - 1 (set by `nvsh run`).
pub const ENV_RANK: &str = "NVSH_RANK";
/// Rank among the processes on this node, which selects the GPU (set by `nvsh run`).
pub const ENV_LOCAL_RANK: &str = "NVSH_LOCAL_RANK";
/// Number of processes in the job (set by `nvsh run`).
pub const ENV_WORLD_SIZE: &str = "NVSH_WORLD_SIZE";
/// Number of processes on this node (set by `nvsh run`).
pub const ENV_LOCAL_WORLD_SIZE: &str = "NVSH_LOCAL_WORLD_SIZE";
/// NVSHMEM unique ID for the UID bootstrap, hex-encoded (set by `nvsh run`).
pub const ENV_UNIQUE_ID: &str = "NVSH_UNIQUE_ID";
/// Overrides the bootstrap choice: `auto`, `launcher`, `mpi`, `pmi` or `single`.
pub const ENV_BOOTSTRAP: &str = "NVSH_BOOTSTRAP";

/// Size of NVSHMEM's unique ID in bytes.
pub const UNIQUE_ID_BYTES: usize = std::mem::size_of::<sys::nvshmemx_uniqueid_t>();

/// Which bootstrap initialises NVSHMEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrap {
    /// Launcher environment if present; else, when a launcher started several processes, MPI
    /// (with the `mpi` feature) or the launcher's PMI; else a single PE.
    Auto,
    /// `nvsh run`'s environment (see the module docs).
    Launcher,
    /// MPI: rank 0 takes a unique ID and broadcasts it over MPI_COMM_WORLD (feature `mpi`).
    Mpi,
    /// NVSHMEM's PMI bootstrap through the launcher's PMI server (`srun --mpi=pmix` or
    /// `--mpi=pmi2`, Hydra, Open MPI's mpirun), without MPI ([`PmiFlavour`](pmi::PmiFlavour)).
    Pmi,
    /// This process alone, as PE 0 of 1.
    Single,
}

impl Bootstrap {
    /// The choice from `NVSH_BOOTSTRAP`, `Auto` when unset.
    pub fn from_env() -> Result<Bootstrap> {
        Self::from_lookup(&process_env)
    }

    /// The choice from `NVSH_BOOTSTRAP` as `env` has it.
    pub fn from_lookup(env: Lookup) -> Result<Bootstrap> {
        match env(ENV_BOOTSTRAP).as_deref() {
            None | Some("") | Some("auto") => Ok(Bootstrap::Auto),
            Some("launcher") => Ok(Bootstrap::Launcher),
            Some("mpi") => Ok(Bootstrap::Mpi),
            Some("pmi") => Ok(Bootstrap::Pmi),
            Some("single") => match step_env_in(env) {
                // A leftover NVSH_BOOTSTRAP=single would make every process of the job a
                // separate PE 0 of 1, all on GPU 0.
                Some(step) if step.size > 1 => Err(Error::BootstrapUnavailable {
                    reason: format!(
                        "{ENV_BOOTSTRAP}=single, but {} started this process as one of {} \
                         ({}={}), so each would run alone as PE 0 of 1; unset {ENV_BOOTSTRAP} \
                         (or set it to mpi or pmi)",
                        step.launcher, step.size, step.size_var, step.size
                    ),
                }),
                _ => Ok(Bootstrap::Single),
            },
            Some(other) => Err(Error::InvalidEnv {
                var: ENV_BOOTSTRAP,
                value: other.to_string(),
                expected: "auto, launcher, mpi, pmi or single",
            }),
        }
    }
}

/// What `Auto` resolves to in `env`; `mpi_built`: whether this build has the `mpi` feature.
///
/// `nvsh run`'s environment wins. A launcher that started this process as one of several
/// (see [`step_env`]) gets MPI when the build has it, unless `NVSH_PMI` asks for PMI; else PMI
/// when the launcher serves it; else an error saying what to do, so that the processes never
/// run as separate 1-PE jobs. Anything else is a single PE.
pub fn auto_choice(env: Lookup, mpi_built: bool) -> Result<Bootstrap> {
    if env(ENV_RANK).is_some() {
        return Ok(Bootstrap::Launcher);
    }
    let Some(step) = step_env_in(env).filter(|s| s.size > 1) else {
        return Ok(Bootstrap::Single);
    };
    step.check_mpi_capable()?;
    if env(pmi::ENV_PMI).is_some() {
        return Ok(Bootstrap::Pmi);
    }
    if mpi_built {
        return Ok(Bootstrap::Mpi);
    }
    if pmi::offered(env).is_some() {
        return Ok(Bootstrap::Pmi);
    }
    Err(pmi::not_served(Some((step.launcher, step.size)), mpi_built))
}

/// What the launcher told this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherEnv {
    /// This process's rank ([`ENV_RANK`]).
    pub rank: i32,
    /// Rank among the processes on this node ([`ENV_LOCAL_RANK`]; the rank when unset).
    pub local_rank: i32,
    /// Number of processes in the job ([`ENV_WORLD_SIZE`]).
    pub world_size: i32,
    /// Number of processes on this node ([`ENV_LOCAL_WORLD_SIZE`]; the world size when unset).
    pub local_world_size: i32,
    /// The NVSHMEM unique ID, decoded ([`ENV_UNIQUE_ID`]; [`UNIQUE_ID_BYTES`] long).
    pub unique_id: Vec<u8>,
}

fn env_int(var: &'static str) -> Result<Option<i32>> {
    match env::var(var) {
        Err(_) => Ok(None),
        Ok(v) => v
            .trim()
            .parse::<i32>()
            .map(Some)
            .map_err(|_| Error::InvalidEnv {
                var,
                value: v,
                expected: "an integer",
            }),
    }
}

/// Reads the launcher's variables. `Ok(None)` when `NVSH_RANK` is absent (not launched by
/// `nvsh run`); an error when they are present but incomplete or inconsistent.
pub fn launcher_env() -> Result<Option<LauncherEnv>> {
    let Some(rank) = env_int(ENV_RANK)? else {
        return Ok(None);
    };
    let missing = |var: &'static str| Error::InvalidEnv {
        var,
        value: String::new(),
        expected: "set by `nvsh run` together with NVSH_RANK",
    };
    let world_size = env_int(ENV_WORLD_SIZE)?.ok_or_else(|| missing(ENV_WORLD_SIZE))?;
    let local_rank = env_int(ENV_LOCAL_RANK)?.unwrap_or(rank);
    let local_world_size = env_int(ENV_LOCAL_WORLD_SIZE)?.unwrap_or(world_size);
    let hex = env::var(ENV_UNIQUE_ID).map_err(|_| missing(ENV_UNIQUE_ID))?;
    let unique_id = decode_hex(&hex).ok_or_else(|| Error::InvalidEnv {
        var: ENV_UNIQUE_ID,
        value: hex.chars().take(16).collect::<String>() + "...",
        expected: "the hex-encoded NVSHMEM unique ID that `nvsh run` generates",
    })?;
    if world_size < 1 || !(0..world_size).contains(&rank) || !(0..world_size).contains(&local_rank)
    {
        return Err(Error::InvalidEnv {
            var: ENV_RANK,
            value: format!("rank {rank}, local rank {local_rank}, world size {world_size}"),
            expected: "0 <= rank, local rank < world size",
        });
    }
    if unique_id.len() != UNIQUE_ID_BYTES {
        return Err(Error::InvalidEnv {
            var: ENV_UNIQUE_ID,
            value: format!("{} bytes", unique_id.len()),
            expected: "the 128-byte NVSHMEM unique ID (launcher and program built against different NVSHMEM versions?)",
        });
    }
    Ok(Some(LauncherEnv {
        rank,
        local_rank,
        world_size,
        local_world_size,
        unique_id,
    }))
}

/// What a launcher that started this process as one of a job's processes announced in the
/// environment: `mpirun`, `srun` or `torchrun` (not `nvsh run`, see [`launcher_env`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepEnv {
    /// The launcher, for messages: "mpirun (Open MPI)", "srun", ...
    pub launcher: &'static str,
    /// The variable that announced the size, for messages.
    pub size_var: &'static str,
    /// This process's rank in the job.
    pub rank: i32,
    /// Number of processes in the job.
    pub size: i32,
    /// Rank among the processes on this node: picks the GPU.
    pub local_rank: i32,
    /// The variable the local rank came from; None: none was set, and the local rank is the
    /// rank (right on one node only).
    pub local_rank_var: Option<&'static str>,
}

/// What a job step's launcher announced, if this process was started by one (Open MPI's
/// mpirun, a PMI launcher such as MPICH's or Intel MPI's, Slurm's srun, torchrun).
///
/// Only variables that a launcher sets for the processes it starts count. `SLURM_PROCID` and
/// `SLURM_NTASKS` alone do not: they are also set in the batch script of `sbatch -n 8`, where a
/// plain `./prog` is one process. A variable that is not an integer counts as absent.
pub fn step_env() -> Option<StepEnv> {
    step_env_in(&process_env)
}

/// [`step_env`] as `env` has it.
pub fn step_env_in(env: Lookup) -> Option<StepEnv> {
    let int = |name: &str| env(name)?.trim().parse::<i32>().ok();
    // (launcher, size variable, rank variable, local rank variables). The local rank picks the
    // GPU on each node: Slurm's SLURM_LOCALID, Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, Hydra's
    // MPI_LOCALRANKID (MPICH) or PMI_LOCAL_RANK, torchrun's LOCAL_RANK. Hydra inside a Slurm
    // allocation starts its proxies with srun, so there SLURM_LOCALID counts the proxy, not the
    // rank: Hydra's own variables come first.
    const LAUNCHERS: [(&str, &str, &str, &[&str]); 4] = [
        (
            "mpirun (Open MPI)",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_RANK",
            &["OMPI_COMM_WORLD_LOCAL_RANK"],
        ),
        (
            "a PMI launcher (MPICH, Intel MPI, srun --mpi=pmi2)",
            "PMI_SIZE",
            "PMI_RANK",
            &["MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"],
        ),
        (
            "srun",
            "SLURM_STEP_NUM_TASKS",
            "SLURM_PROCID",
            &["SLURM_LOCALID"],
        ),
        ("torchrun", "WORLD_SIZE", "RANK", &["LOCAL_RANK"]),
    ];
    LAUNCHERS
        .iter()
        .find_map(|&(launcher, size_var, rank_var, local_vars)| {
            let size = int(size_var)?;
            let rank = int(rank_var)?;
            let local = local_vars.iter().find_map(|&v| Some((int(v)?, v)));
            Some(StepEnv {
                launcher,
                size_var,
                rank,
                size,
                local_rank: local.map_or(rank, |(l, _)| l),
                local_rank_var: local.map(|(_, v)| v),
            })
        })
}

impl StepEnv {
    /// Refuses launchers whose processes cannot agree on a unique ID without `nvsh run`'s
    /// environment: torchrun's rendezvous is not MPI, so each process would be a 1-PE job.
    pub fn check_mpi_capable(&self) -> Result<()> {
        if self.launcher != "torchrun" {
            return Ok(());
        }
        Err(Error::BootstrapUnavailable {
            reason: format!(
                "started by torchrun as rank {} of {} (WORLD_SIZE), but NVSHMEM cannot be \
                 bootstrapped from torchrun's rendezvous, so every process would be a separate \
                 1-PE job; start it with `nvsh run -n {} -- prog`, with `srun --mpi=pmix`, or \
                 with mpirun/srun and a build with the `mpi` feature",
                self.rank, self.size, self.size
            ),
        })
    }

    /// Compares the number of processes a bootstrap found with the launcher's announcement.
    /// They differ when the processes did not join one job: an MPI library without Slurm's PMI
    /// under srun, or a program built against another MPI than the mpirun that started it. Each
    /// process then sees a world of 1.
    pub fn check_size(&self, bootstrap: &str, got: i32) -> Result<()> {
        if got == self.size {
            return Ok(());
        }
        let advice = if bootstrap.starts_with("PMI") {
            // NVSHMEM's PMI plugins start a job of 1 when they reach no PMI server.
            "The launcher's PMI server did not serve NVSHMEM: under srun choose the PMI that \
             the cluster has (`srun --mpi=list`; srun --mpi=pmix or --mpi=pmi2) and let \
             NVSH_PMI and NVSHMEM_BOOTSTRAP_PMI unset or matching it"
        } else {
            "Under srun the program's MPI must support Slurm's PMI (try srun --mpi=pmix or \
             --mpi=pmi2), and under mpirun the program must be built against that mpirun's MPI \
             (check `mpirun --version` and the MPI the build found)"
        };
        Err(Error::BootstrapUnavailable {
            reason: format!(
                "{bootstrap} found {got} process(es) but {} started {} ({}={}): the processes \
                 did not join one job. {advice}",
                self.launcher, self.size, self.size_var, self.size
            ),
        })
    }
}

/// Lower-case hex of `bytes`.
pub fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of a hex string; None when it is not hex or has odd length.
pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The raw bytes of a unique ID (to hand to other processes).
pub fn unique_id_bytes(id: &sys::nvshmemx_uniqueid_t) -> Vec<u8> {
    // SAFETY: nvshmemx_uniqueid_t is plain old data of UNIQUE_ID_BYTES bytes.
    unsafe {
        std::slice::from_raw_parts(
            (id as *const sys::nvshmemx_uniqueid_t).cast::<u8>(),
            UNIQUE_ID_BYTES,
        )
    }
    .to_vec()
}

/// A unique ID from bytes made by [`unique_id_bytes`].
pub fn unique_id_from_bytes(bytes: &[u8]) -> Result<sys::nvshmemx_uniqueid_t> {
    if bytes.len() != UNIQUE_ID_BYTES {
        return Err(Error::InvalidEnv {
            var: ENV_UNIQUE_ID,
            value: format!("{} bytes", bytes.len()),
            expected: "a 128-byte NVSHMEM unique ID",
        });
    }
    let mut id = sys::nvshmemx_uniqueid_t::default();
    // SAFETY: sizes checked; the type is plain old data.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            (&mut id as *mut sys::nvshmemx_uniqueid_t).cast::<u8>(),
            UNIQUE_ID_BYTES,
        )
    };
    Ok(id)
}

/// Longest error text rank 0 sends the others.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
const FAILURE_TEXT_MAX: usize = 4096;

/// Rank 0's error as it travels: UTF-8, at most FAILURE_TEXT_MAX bytes, never empty (an empty
/// text would read as success).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn failure_text(message: &str) -> Vec<u8> {
    let mut end = message.len().min(FAILURE_TEXT_MAX);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let text = &message[..end];
    if text.is_empty() {
        b"(no message)".to_vec()
    } else {
        text.as_bytes().to_vec()
    }
}

/// The error every rank returns when rank 0 could not take the unique ID.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn rank0_failed(text: &[u8]) -> Error {
    Error::Mpi {
        message: format!(
            "rank 0 could not take an NVSHMEM unique ID, so no rank can start NVSHMEM: {}",
            String::from_utf8_lossy(text)
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Serialises the tests that change the process environment.
    pub(crate) static ENV_LOCK: Mutex<()> = Mutex::new(());

    const ALL: &[&str] = &[
        ENV_RANK,
        ENV_LOCAL_RANK,
        ENV_WORLD_SIZE,
        ENV_LOCAL_WORLD_SIZE,
        ENV_UNIQUE_ID,
        ENV_BOOTSTRAP,
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "PMI_RANK",
        "PMI_SIZE",
        "PMI_LOCAL_RANK",
        "PMIX_RANK",
        "PMIX_NAMESPACE",
        "PMI_FD",
        "PMI_PORT",
        "PMI_JOBID",
        pmi::ENV_PMI,
        "NVSHMEM_BOOTSTRAP",
        "NVSHMEM_BOOTSTRAP_PMI",
        "NVSHMEM_BOOTSTRAP_PMI_PLUGIN",
        "NVSHMEM_BOOTSTRAP_PMI2_PLUGIN",
        "NVSHMEM_BOOTSTRAP_PMIX_PLUGIN",
        "MPI_LOCALRANKID",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
        "SLURM_STEP_NUM_TASKS",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        crate::coll::allreduce::ALGO_ENV,
        crate::coll::allreduce::LL_MAX_ENV,
        crate::coll::allreduce::DIRECT_MIN_ENV,
        crate::coll::allreduce::PUSH_MIN_ENV,
        crate::coll::allreduce::PUSH_ROUNDS_ENV,
        crate::coll::allreduce::DIRECT_THREADS_ENV,
        crate::coll::allreduce::DIRECT_BLOCKS_ENV,
        crate::coll::allreduce::DIRECT_BLOCK_BYTES_ENV,
        crate::proto::checked::CHECKED_ENV,
        crate::proto::family::FAMILY_LL_MAX_ENV,
        crate::proto::family::FAMILY_SPLIT_MIN_ENV,
        crate::core::tuning::TUNE_ENV,
        crate::core::tuning::TUNING_FILE_ENV,
        crate::core::tuning::TUNE_BUDGET_ENV,
        "XDG_CACHE_HOME",
        "HOME",
    ];

    /// Runs `f` with exactly `vars` set among the variables the bootstraps (and the allreduce
    /// override) read.
    pub(crate) fn with_env<R>(vars: &[(&str, &str)], f: impl FnOnce() -> R) -> R {
        let _guard = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let saved: Vec<_> = ALL.iter().map(|k| (*k, env::var_os(k))).collect();
        for k in ALL {
            env::remove_var(k);
        }
        for (k, v) in vars {
            env::set_var(k, v);
        }
        let out = f();
        for (k, v) in saved {
            match v {
                Some(v) => env::set_var(k, v),
                None => env::remove_var(k),
            }
        }
        out
    }

    fn id_hex() -> String {
        encode_hex(&[7u8; UNIQUE_ID_BYTES])
    }

    #[test]
    fn no_launcher_variables_means_no_launcher() {
        assert_eq!(with_env(&[], launcher_env).unwrap(), None);
    }

    #[test]
    fn complete_launcher_variables_are_read() {
        let id = id_hex();
        let env = with_env(
            &[
                (ENV_RANK, "1"),
                (ENV_LOCAL_RANK, "1"),
                (ENV_WORLD_SIZE, "2"),
                (ENV_LOCAL_WORLD_SIZE, "2"),
                (ENV_UNIQUE_ID, &id),
            ],
            launcher_env,
        )
        .unwrap()
        .unwrap();
        assert_eq!((env.rank, env.local_rank, env.world_size), (1, 1, 2));
        assert_eq!(env.unique_id, vec![7u8; UNIQUE_ID_BYTES]);
    }

    #[test]
    fn broken_launcher_variables_are_errors_naming_the_variable() {
        let id = id_hex();
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (vec![(ENV_RANK, "0"), (ENV_UNIQUE_ID, &id)], ENV_WORLD_SIZE),
            (vec![(ENV_RANK, "0"), (ENV_WORLD_SIZE, "2")], ENV_UNIQUE_ID),
            (
                vec![(ENV_RANK, "x"), (ENV_WORLD_SIZE, "2"), (ENV_UNIQUE_ID, &id)],
                ENV_RANK,
            ),
            (
                vec![(ENV_RANK, "2"), (ENV_WORLD_SIZE, "2"), (ENV_UNIQUE_ID, &id)],
                ENV_RANK,
            ),
            (
                vec![
                    (ENV_RANK, "0"),
                    (ENV_WORLD_SIZE, "2"),
                    (ENV_UNIQUE_ID, "zz"),
                ],
                ENV_UNIQUE_ID,
            ),
            (
                vec![
                    (ENV_RANK, "0"),
                    (ENV_WORLD_SIZE, "2"),
                    (ENV_UNIQUE_ID, "0a0b"),
                ],
                ENV_UNIQUE_ID,
            ),
        ];
        for (vars, culprit) in cases {
            let err = with_env(&vars, launcher_env).unwrap_err();
            match &err {
                Error::InvalidEnv { var, .. } => assert_eq!(*var, culprit, "{vars:?}: {err}"),
                other => panic!("{vars:?}: expected InvalidEnv, got {other:?}"),
            }
        }
    }

    #[test]
    fn bootstrap_choice_from_the_environment() {
        assert_eq!(with_env(&[], Bootstrap::from_env).unwrap(), Bootstrap::Auto);
        for (v, b) in [
            ("mpi", Bootstrap::Mpi),
            ("launcher", Bootstrap::Launcher),
            ("pmi", Bootstrap::Pmi),
            ("single", Bootstrap::Single),
        ] {
            assert_eq!(
                with_env(&[(ENV_BOOTSTRAP, v)], Bootstrap::from_env).unwrap(),
                b
            );
        }
        let err = with_env(&[(ENV_BOOTSTRAP, "pmix")], Bootstrap::from_env).unwrap_err();
        assert!(
            err.to_string()
                .contains("auto, launcher, mpi, pmi or single"),
            "{err}"
        );
    }

    fn step(vars: &[(&str, &str)]) -> Option<(&'static str, i32, i32, i32)> {
        with_env(vars, step_env).map(|s| (s.launcher, s.rank, s.size, s.local_rank))
    }

    #[test]
    fn open_mpi_variables_are_recognised() {
        let got = step(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ]);
        assert_eq!(got, Some(("mpirun (Open MPI)", 3, 4, 1)));
        assert_eq!(step(&[]), None);
    }

    #[test]
    fn an_sbatch_script_is_not_a_launch_but_an_srun_step_is() {
        // What the batch script of `sbatch -n 8` has: a plain ./prog there is one process.
        let batch = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "0"),
        ];
        assert_eq!(step(&batch), None);
        let mut srun = batch.to_vec();
        srun.extend([("SLURM_STEP_NUM_TASKS", "8"), ("SLURM_PROCID", "5")]);
        srun[2] = ("SLURM_LOCALID", "1");
        assert_eq!(step(&srun), Some(("srun", 5, 8, 1)));
    }

    #[test]
    fn torchrun_variables_are_recognised_and_refused() {
        let vars = [("RANK", "2"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "0")];
        let got = with_env(&vars, step_env).expect("torchrun's variables");
        assert_eq!(
            (got.launcher, got.rank, got.size, got.local_rank),
            ("torchrun", 2, 4, 0)
        );
        let err = got.check_mpi_capable().unwrap_err().to_string();
        assert!(
            err.contains("torchrun") && err.contains("nvsh run -n 4"),
            "{err}"
        );
        let pmi = with_env(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")], step_env).unwrap();
        assert!(pmi.check_mpi_capable().is_ok());
    }

    #[test]
    fn a_world_of_another_size_than_announced_is_refused() {
        let vars = [("SLURM_STEP_NUM_TASKS", "4"), ("SLURM_PROCID", "1")];
        let srun = with_env(&vars, step_env).unwrap();
        assert!(srun.check_size("MPI", 4).is_ok());
        let err = srun.check_size("MPI", 1).unwrap_err().to_string();
        assert!(
            err.contains("MPI found 1 process(es) but srun started 4 (SLURM_STEP_NUM_TASKS=4)")
                && err.contains("--mpi=pmix"),
            "{err}"
        );
    }

    #[test]
    fn a_leftover_single_bootstrap_under_a_multi_process_launch_is_refused() {
        let vars = [
            (ENV_BOOTSTRAP, "single"),
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ];
        let err = with_env(&vars, Bootstrap::from_env)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("NVSH_BOOTSTRAP=single") && err.contains("one of 4"),
            "{err}"
        );
        // One process, or no launcher at all: single is fine.
        let one = [
            (ENV_BOOTSTRAP, "single"),
            ("OMPI_COMM_WORLD_SIZE", "1"),
            ("OMPI_COMM_WORLD_RANK", "0"),
        ];
        assert_eq!(
            with_env(&one, Bootstrap::from_env).unwrap(),
            Bootstrap::Single
        );
    }

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(decode_hex(&encode_hex(&bytes)).unwrap(), bytes);
        assert_eq!(decode_hex("0a0B"), Some(vec![10, 11]));
        assert_eq!(decode_hex("abc"), None);
        assert_eq!(decode_hex("zz"), None);
    }

    #[test]
    fn unique_id_round_trips_through_bytes() {
        let id = crate::core::result::get_unique_id().expect("unique id (needs no GPU)");
        let bytes = unique_id_bytes(&id);
        assert_eq!(bytes.len(), 128);
        assert_ne!(bytes, vec![0u8; 128], "a real ID is not all zeros");
        assert_eq!(
            unique_id_bytes(&unique_id_from_bytes(&bytes).unwrap()),
            bytes
        );
        assert!(unique_id_from_bytes(&bytes[..100]).is_err());
    }

    #[test]
    fn every_rank_gets_rank_0s_unique_id_error_in_words() {
        let text = failure_text("nvshmemx_get_uniqueid failed (status 7): bootstrap: no interface");
        let msg = rank0_failed(&text).to_string();
        assert!(
            msg.contains("rank 0 could not take an NVSHMEM unique ID")
                && msg.contains("status 7): bootstrap: no interface"),
            "{msg}"
        );
        // Never empty (0 bytes means success on the wire), never past the limit, whole chars.
        assert_eq!(failure_text(""), b"(no message)".to_vec());
        let long = "\u{e9}".repeat(FAILURE_TEXT_MAX);
        let cut = failure_text(&long);
        assert!(cut.len() <= FAILURE_TEXT_MAX && std::str::from_utf8(&cut).is_ok());
    }
}
