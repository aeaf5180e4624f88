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
//! `NVSH_BOOTSTRAP` (`auto`, `launcher`, `mpi`, `single`) overrides the automatic choice.

use crate::core::error::{Error, Result};
use crate::sys;
use std::env;

#[cfg(feature = "mpi")]
pub(crate) mod mpi;

pub const ENV_RANK: &str = "NVSH_RANK";
pub const ENV_LOCAL_RANK: &str = "NVSH_LOCAL_RANK";
pub const ENV_WORLD_SIZE: &str = "NVSH_WORLD_SIZE";
pub const ENV_LOCAL_WORLD_SIZE: &str = "NVSH_LOCAL_WORLD_SIZE";
pub const ENV_UNIQUE_ID: &str = "NVSH_UNIQUE_ID";
pub const ENV_BOOTSTRAP: &str = "NVSH_BOOTSTRAP";

/// Size of NVSHMEM's unique ID in bytes.
pub const UNIQUE_ID_BYTES: usize = std::mem::size_of::<sys::nvshmemx_uniqueid_t>();

/// Which bootstrap initialises NVSHMEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrap {
    /// Launcher environment if present, else MPI environment (with the `mpi` feature), else a
    /// single PE.
    Auto,
    /// `nvsh run`'s environment (see the module docs).
    Launcher,
    /// MPI: rank 0 takes a unique ID and broadcasts it over MPI_COMM_WORLD (feature `mpi`).
    Mpi,
    /// This process alone, as PE 0 of 1.
    Single,
}

impl Bootstrap {
    /// The choice from `NVSH_BOOTSTRAP`, `Auto` when unset.
    pub fn from_env() -> Result<Bootstrap> {
        match env::var(ENV_BOOTSTRAP).ok().as_deref() {
            None | Some("") | Some("auto") => Ok(Bootstrap::Auto),
            Some("launcher") => Ok(Bootstrap::Launcher),
            Some("mpi") => Ok(Bootstrap::Mpi),
            Some("single") => Ok(Bootstrap::Single),
            Some(other) => Err(Error::InvalidEnv {
                var: ENV_BOOTSTRAP,
                value: other.to_string(),
                expected: "auto, launcher, mpi or single",
            }),
        }
    }
}

/// What the launcher told this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherEnv {
    pub rank: i32,
    pub local_rank: i32,
    pub world_size: i32,
    pub local_world_size: i32,
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

/// Rank, size and local rank that common MPI launchers put in the environment, if any
/// (Open MPI, MPICH/Hydra and Slurm's PMI).
pub fn mpi_env() -> Option<(i32, i32, i32)> {
    let pick = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| env::var(n).ok()?.trim().parse::<i32>().ok())
    };
    let rank = pick(&[
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
    ])?;
    let size = pick(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"])?;
    let local = pick(&[
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "SLURM_LOCALID",
    ])
    .unwrap_or(rank);
    Some((rank, size, local))
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Serialises the tests that change the process environment.
    pub(crate) static ENV_LOCK: Mutex<()> = Mutex::new(());

    const ALL: [&str; 18] = [
        ENV_RANK,
        ENV_LOCAL_RANK,
        ENV_WORLD_SIZE,
        ENV_LOCAL_WORLD_SIZE,
        ENV_UNIQUE_ID,
        ENV_BOOTSTRAP,
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        crate::coll::allreduce::ALGO_ENV,
        crate::coll::allreduce::LL_MAX_ENV,
        crate::coll::allreduce::DIRECT_MIN_ENV,
        crate::coll::allreduce::PUSH_MIN_ENV,
        crate::coll::allreduce::PUSH_ROUNDS_ENV,
        crate::coll::allreduce::DIRECT_THREADS_ENV,
        crate::coll::allreduce::DIRECT_BLOCKS_ENV,
        crate::coll::allreduce::DIRECT_BLOCK_BYTES_ENV,
        crate::proto::checked::CHECKED_ENV,
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
            ("single", Bootstrap::Single),
        ] {
            assert_eq!(
                with_env(&[(ENV_BOOTSTRAP, v)], Bootstrap::from_env).unwrap(),
                b
            );
        }
        let err = with_env(&[(ENV_BOOTSTRAP, "pmi")], Bootstrap::from_env).unwrap_err();
        assert!(
            err.to_string().contains("auto, launcher, mpi or single"),
            "{err}"
        );
    }

    #[test]
    fn open_mpi_variables_are_recognised() {
        let got = with_env(
            &[
                ("OMPI_COMM_WORLD_RANK", "3"),
                ("OMPI_COMM_WORLD_SIZE", "4"),
                ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ],
            mpi_env,
        );
        assert_eq!(got, Some((3, 4, 1)));
        assert_eq!(with_env(&[], mpi_env), None);
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
}
