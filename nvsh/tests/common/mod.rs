//! Shared helpers of the nvsh tests: the library's GPU-test helpers, plus running the nvsh binary.
#![allow(dead_code)]

#[path = "../../../tests/common/mod.rs"]
mod library;

#[allow(unused_imports)]
pub use library::*;
use std::path::{Path, PathBuf};

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

/// The stored allreduce result the CPU tests read (tests/data/allreduce_2pe.json, written by
/// hand in the format `nvsh bench allreduce --json` writes).
pub fn allreduce_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/allreduce_2pe.json")
}

/// An empty folder of this process for test `name` of `suite` (removed first if left over).
pub fn workdir(suite: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nvsh-{suite}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A path as a command-line argument.
pub fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}
