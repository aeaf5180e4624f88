//! The runtime's public entry points, `Nvshmem::init`, `init_single_pe` and `init_with`: the
//! chosen bootstrap places this process in the job, then the runtime ([`crate::core::runtime`],
//! the layer below, which knows no bootstrap) brings NVSHMEM up there.

use crate::bootstrap::{self, pmi, Bootstrap, LauncherEnv, Lookup};
use crate::core::error::{Error, Result};
use crate::core::runtime::{Nvshmem, Placement, Rendezvous, Seat};

impl Nvshmem {
    /// Initialises NVSHMEM with the bootstrap chosen by `NVSH_BOOTSTRAP` (default: automatic:
    /// launcher environment, then MPI or the launcher's PMI, else a single PE; see
    /// [`Bootstrap::Auto`]).
    pub fn init() -> Result<Nvshmem> {
        Self::init_with(Bootstrap::from_env()?)
    }

    /// Initialises this process as the only PE.
    pub fn init_single_pe() -> Result<Nvshmem> {
        Self::init_with(Bootstrap::Single)
    }

    /// Initialises NVSHMEM with the given bootstrap. Selects the CUDA device for the local rank
    /// before init. Fails with a typed error (never aborts) when there is no driver or device,
    /// when NVSHMEM is already initialised, or when NVSHMEM's own init fails.
    ///
    /// NVSHMEM comes up once per process: after the handle is dropped (finalised), a further
    /// init is refused with [`Error::InitAfterFinalize`]; an init that fails before NVSHMEM's
    /// own init may be retried.
    pub fn init_with(bootstrap: Bootstrap) -> Result<Nvshmem> {
        Nvshmem::init_placed(|| place(bootstrap))
    }
}

/// Decides rank, size, local rank and how NVSHMEM finds the other PEs.
fn place(bootstrap: Bootstrap) -> Result<Placement> {
    let from_launcher = |env: LauncherEnv| Placement {
        seat: Seat {
            rank: env.rank,
            n_pes: env.world_size,
            local_rank: env.local_rank,
        },
        rendezvous: Rendezvous::UniqueId(bootstrap::unique_id_from_bytes(&env.unique_id)),
        bootstrap: "launcher",
        job: None,
    };
    let single = || Placement {
        seat: Seat {
            rank: 0,
            n_pes: 1,
            local_rank: 0,
        },
        rendezvous: Rendezvous::Alone,
        bootstrap: "single PE",
        job: None,
    };
    match bootstrap {
        Bootstrap::Single => Ok(single()),
        Bootstrap::Launcher => bootstrap::launcher_env()?
            .map(from_launcher)
            .ok_or_else(|| Error::BootstrapUnavailable {
                reason: "the launcher bootstrap was chosen but NVSH_RANK is not set: start the \
                         program with `nvsh run -n N -- prog`"
                    .into(),
            }),
        Bootstrap::Mpi => place_mpi(),
        Bootstrap::Pmi => place_pmi(&bootstrap::process_env),
        Bootstrap::Auto => place(bootstrap::auto_choice(
            &bootstrap::process_env,
            cfg!(feature = "mpi"),
        )?),
    }
}

/// The PMI bootstrap's placement: rank, size and local rank as the launcher announced them,
/// and NVSHMEM's PMI plugin selected once it is known to load. Nothing of NVSHMEM runs before
/// the checks, so a missing plugin or library is an error here, not inside NVSHMEM's init.
fn place_pmi(env: Lookup) -> Result<Placement> {
    let step = bootstrap::step_env_in(env).ok_or_else(|| Error::BootstrapUnavailable {
        reason: "the PMI bootstrap was chosen, but no launcher announced this process's rank and \
                 the job's size (SLURM_PROCID and SLURM_STEP_NUM_TASKS of an srun step, PMI_RANK \
                 and PMI_SIZE, OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE): start the program \
                 with srun (`srun --mpi=pmix`) or another PMI launcher, or with `nvsh run -n N`"
            .into(),
    })?;
    let flavour = pmi::flavour(env, Some((step.launcher, step.size)), cfg!(feature = "mpi"))?;
    let plugin = pmi::load_plugin(flavour, env)?;
    if step.local_rank_var.is_none() && step.size > 1 {
        log::warn!(
            "{} set no local rank variable (SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, \
             MPI_LOCALRANKID, PMI_LOCAL_RANK): the GPU is picked by the global rank, which is \
             right on one node only",
            step.launcher
        );
    }
    log::info!(
        "PMI bootstrap: NVSHMEM's {} plugin {plugin}, rank {} of {} ({})",
        flavour.label(),
        step.rank,
        step.size,
        step.launcher
    );
    pmi::select_in_nvshmem(flavour, &plugin);
    let seat = Seat {
        rank: step.rank,
        n_pes: step.size,
        local_rank: step.local_rank,
    };
    let label = flavour.label();
    Ok(Placement {
        seat,
        rendezvous: Rendezvous::Environment {
            check_size: Box::new(move |got| step.check_size(label, got)),
        },
        bootstrap: label,
        job: None,
    })
}

#[cfg(feature = "mpi")]
fn place_mpi() -> Result<Placement> {
    let (guard, rank, size, local_rank, id) = crate::bootstrap::mpi::exchange_unique_id()?;
    Ok(Placement {
        seat: Seat {
            rank,
            n_pes: size,
            local_rank,
        },
        rendezvous: Rendezvous::UniqueId(bootstrap::unique_id_from_bytes(&id)),
        bootstrap: "mpi",
        job: Some(Box::new(guard)),
    })
}

#[cfg(not(feature = "mpi"))]
fn place_mpi() -> Result<Placement> {
    let (launcher, size) =
        bootstrap::step_env().map_or(("an MPI launcher", 0), |s| (s.launcher, s.size));
    Err(Error::BootstrapUnavailable {
        reason: format!(
            "started by {launcher} ({size} processes) but this program was built without \
             the `mpi` feature, so every process would be a separate 1-PE job; rebuild with \
             `--features mpi`, or start it with `nvsh run -n N`"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "mpi"))]
    #[test]
    fn mpi_launch_without_the_mpi_feature_is_refused_not_split_into_single_pes() {
        use crate::bootstrap::tests::with_env;
        let vars = [("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")];
        let err = with_env(&vars, || place(Bootstrap::Auto).err()).expect("an error");
        assert!(err.to_string().contains("--features mpi"), "{err}");
    }

    #[cfg(not(feature = "mpi"))]
    #[test]
    fn a_plain_run_inside_an_sbatch_script_is_one_pe() {
        use crate::bootstrap::tests::with_env;
        // `sbatch -n 8` sets these for the batch script itself; no launcher started ./prog.
        let vars = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "0"),
        ];
        let placed =
            with_env(&vars, || place(Bootstrap::Auto)).map(|p| (p.seat.rank, p.seat.n_pes));
        assert_eq!(placed.ok(), Some((0, 1)));
        // Inside an srun step of 8 it is one of 8: refused without the `mpi` feature.
        let step = [("SLURM_STEP_NUM_TASKS", "8"), ("SLURM_PROCID", "3")];
        let err = with_env(&step, || place(Bootstrap::Auto).err()).expect("an error");
        assert!(err.to_string().contains("--features mpi"), "{err}");
    }

    #[cfg(not(feature = "mpi"))]
    #[test]
    fn srun_with_pmi2_places_by_the_launcher_and_selects_nvshmems_plugin() {
        use crate::bootstrap::tests::with_env;
        // Task 3 of `srun --mpi=pmi2 -n 4 --ntasks-per-node=2`.
        let vars = [
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_PROCID", "3"),
            ("SLURM_LOCALID", "1"),
            ("PMI_FD", "7"),
            ("PMI_RANK", "3"),
            ("PMI_SIZE", "4"),
        ];
        let (placed, nvshmem_env) = with_env(&vars, || {
            let placed = place(Bootstrap::Auto);
            let nvshmem_env = ["NVSHMEM_BOOTSTRAP", "NVSHMEM_BOOTSTRAP_PMI"]
                .map(|v| std::env::var(v).unwrap_or_default());
            (placed, nvshmem_env)
        });
        let placed = placed.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            placed.seat,
            Seat {
                rank: 3,
                n_pes: 4,
                local_rank: 1
            }
        );
        assert_eq!(placed.bootstrap, "PMI-2");
        assert!(placed.job.is_none());
        assert_eq!(nvshmem_env, ["PMI", "PMI-2"]);
        // NVSHMEM finding a job of 1 (PMI not reached) is refused in srun's terms.
        let Rendezvous::Environment { check_size } = placed.rendezvous else {
            panic!("the PMI bootstrap leaves the rendezvous to NVSHMEM");
        };
        let err = check_size(1).unwrap_err().to_string();
        assert!(err.contains("PMI-2 found 1 process(es) but"), "{err}");
    }

    #[test]
    fn the_pmi_bootstrap_without_a_launcher_says_how_to_start() {
        use crate::bootstrap::tests::with_env;
        let err = with_env(&[], || place(Bootstrap::Pmi).err()).expect("an error");
        let text = err.to_string();
        assert!(
            text.contains("no launcher announced") && text.contains("srun --mpi=pmix"),
            "{text}"
        );
    }

    #[test]
    fn torchrun_is_refused_not_split_into_single_pes() {
        use crate::bootstrap::tests::with_env;
        let vars = [("RANK", "1"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1")];
        let err = with_env(&vars, || place(Bootstrap::Auto).err()).expect("an error");
        assert!(err.to_string().contains("torchrun"), "{err}");
    }

    #[test]
    fn launcher_bootstrap_without_launcher_variables_says_how_to_start() {
        use crate::bootstrap::tests::with_env;
        let err = with_env(&[], || place(Bootstrap::Launcher).err()).expect("an error");
        assert!(err.to_string().contains("nvsh run -n N"), "{err}");
    }
}
