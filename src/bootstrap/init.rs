//! The runtime's public entry points, `Nvshmem::init`, `init_single_pe` and `init_with`: the
//! chosen bootstrap places this process in the job, then the runtime ([`crate::core::runtime`],
//! the layer below, which knows no bootstrap) brings NVSHMEM up there.

use crate::bootstrap::{self, Bootstrap, LauncherEnv};
use crate::core::error::{Error, Result};
use crate::core::runtime::{Nvshmem, Placement};

impl Nvshmem {
    /// Initialises NVSHMEM with the bootstrap chosen by `NVSH_BOOTSTRAP` (default: automatic:
    /// launcher environment, then MPI environment, else a single PE).
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

/// Decides rank, size, local rank and where the unique ID comes from.
fn place(bootstrap: Bootstrap) -> Result<Placement> {
    let from_launcher = |env: LauncherEnv| Placement {
        rank: env.rank,
        n_pes: env.world_size,
        local_rank: env.local_rank,
        unique_id: Some(bootstrap::unique_id_from_bytes(&env.unique_id)),
        bootstrap: "launcher",
        job: None,
    };
    let single = || Placement {
        rank: 0,
        n_pes: 1,
        local_rank: 0,
        unique_id: None,
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
        Bootstrap::Auto => {
            if let Some(env) = bootstrap::launcher_env()? {
                return Ok(from_launcher(env));
            }
            match bootstrap::step_env() {
                Some(step) if step.size > 1 => {
                    step.check_mpi_capable()?;
                    place_mpi()
                }
                _ => Ok(single()),
            }
        }
    }
}

#[cfg(feature = "mpi")]
fn place_mpi() -> Result<Placement> {
    let (guard, rank, size, local_rank, id) = crate::bootstrap::mpi::exchange_unique_id()?;
    Ok(Placement {
        rank,
        n_pes: size,
        local_rank,
        unique_id: Some(bootstrap::unique_id_from_bytes(&id)),
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
        let placed = with_env(&vars, || place(Bootstrap::Auto)).map(|p| (p.rank, p.n_pes));
        assert_eq!(placed.ok(), Some((0, 1)));
        // Inside an srun step of 8 it is one of 8: refused without the `mpi` feature.
        let step = [("SLURM_STEP_NUM_TASKS", "8"), ("SLURM_PROCID", "3")];
        let err = with_env(&step, || place(Bootstrap::Auto).err()).expect("an error");
        assert!(err.to_string().contains("--features mpi"), "{err}");
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
