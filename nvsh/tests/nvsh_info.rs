//! `nvsh info`, the smallest end-to-end binary: it links NVSHMEM and the device module, and
//! either initialises one PE (GPU machine) or says in one line that there is no driver/GPU.

mod common;

use common::{gpu_test, has_nvidia_driver, run_nvsh, skip};

fn nvsh_info() -> (bool, String, String) {
    run_nvsh(&["info"])
}

#[test]
fn info_without_gpu_fails_with_one_line() {
    if has_nvidia_driver() {
        skip("this machine has an NVIDIA driver; see pe1_info_initialises_one_pe");
        return;
    }
    let (ok, stdout, stderr) = nvsh_info();
    assert!(!ok, "nvsh info must fail without a GPU; stdout: {stdout}");
    assert_eq!(stdout, "", "nothing on stdout without a GPU");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "exactly one line on stderr, got: {stderr:?}"
    );
    assert!(
        lines[0].starts_with("nvsh: error: no CUDA driver found")
            || lines[0].starts_with("nvsh: error: no CUDA device found"),
        "unexpected message: {}",
        lines[0]
    );
}

gpu_test!(1, info_initialises_one_pe);
fn info_initialises_one_pe() {
    let (ok, stdout, stderr) = nvsh_info();
    assert!(ok, "nvsh info failed: {stderr}");
    let compiled = nvshmem::version_string(nvshmem::result::compiled_version());
    assert!(
        stdout.contains(&format!(
            "NVSHMEM {compiled} (host library), compiled against {compiled}, 1 PE(s)"
        )),
        "unexpected output: {stdout}"
    );
    assert!(stdout.contains("device API check: PASS"), "{stdout}");
}
