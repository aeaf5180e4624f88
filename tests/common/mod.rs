//! Shared helpers of the GPU tests. Each GPU test initialises NVSHMEM in its own process:
//! scripts/gpu_test.sh runs tests named `pe1_*` alone and `pe2_*` under `nvsh run -n 2`.
#![allow(dead_code)]

use nvshmem::Nvshmem;
use std::path::PathBuf;
use std::time::Duration;

/// How long a test waits for a peer before failing (never hang on a dead peer).
pub const WAIT: Duration = Duration::from_secs(20);

/// The runtime, with the job's bootstrap; the test needs exactly `pes` PEs.
pub fn runtime(pes: i32) -> Nvshmem {
    let nv = Nvshmem::init().expect("NVSHMEM init");
    assert_eq!(
        nv.n_pes(),
        pes,
        "this test needs {pes} PE(s): run it through scripts/gpu_test.sh"
    );
    nv
}

/// The nvsh binary: `NVSH_BIN`, else cargo's build of it, else the one beside this test
/// executable (how scripts/build_gpu_bins.sh lays them out for a GPU machine).
pub fn nvsh_path() -> PathBuf {
    if let Some(p) = std::env::var_os("NVSH_BIN") {
        return p.into();
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_nvsh"));
    if built.exists() {
        return built;
    }
    std::env::current_exe()
        .expect("current exe")
        .with_file_name("nvsh")
}

/// (exit status 0, stdout, stderr) of `nvsh ARGS`.
pub fn run_nvsh(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(nvsh_path())
        .args(args)
        .output()
        .expect("run nvsh");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// True where an NVIDIA driver is installed (its control device exists).
pub fn has_nvidia_driver() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
}
