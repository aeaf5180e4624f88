//! `nvsh doctor` end to end: without a driver it must still report versions and fail cleanly; on
//! a node with 2 GPUs it must pass and name the link between GPUs 0 and 1.

mod common;

use common::{gpu_test, has_nvidia_driver, run_nvsh, skip};

/// (exit code 0, stdout, stderr) of `nvsh doctor`.
fn nvsh_doctor() -> (bool, String, String) {
    run_nvsh(&["doctor"])
}

#[test]
fn doctor_without_driver_reports_and_fails() {
    if has_nvidia_driver() {
        skip("this machine has an NVIDIA driver; see pe1_doctor_passes_on_two_gpus");
        return;
    }
    let (ok, stdout, stderr) = nvsh_doctor();
    assert!(
        !ok,
        "nvsh doctor must exit non-zero without a GPU:\n{stdout}"
    );
    assert!(
        !stderr.contains("panicked"),
        "nvsh doctor panicked: {stderr}"
    );
    let compiled = nvshmem::version_string(nvshmem::result::compiled_version());
    assert!(
        stdout.contains(&format!("(host library), compiled against {compiled}")),
        "no NVSHMEM version line:\n{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.trim_start().starts_with("FAIL cuda driver: no CUDA")),
        "no FAIL line about the missing driver:\n{stdout}"
    );
    // The facts that need no GPU are still there.
    for section in ["MPI", "Environment", "Checks"] {
        assert!(
            stdout.lines().any(|l| l == section),
            "no {section} section:\n{stdout}"
        );
    }
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("doctor: a 2-PE run cannot work here: cuda driver: no CUDA"),
        "last line: {last}"
    );
}

gpu_test!(1, doctor_passes_on_two_gpus);
fn doctor_passes_on_two_gpus() {
    let gpus = cudarc::driver::result::init()
        .and_then(|()| cudarc::driver::result::device::get_count())
        .unwrap_or(0);
    if gpus < 2 {
        skip(&format!(
            "doctor's 2-PE verdict needs 2 GPUs; this machine has {gpus}"
        ));
        return;
    }
    let (ok, stdout, stderr) = nvsh_doctor();
    assert!(ok, "nvsh doctor failed:\n{stdout}\n{stderr}");
    let pair = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("GPU 0 <-> GPU 1:"))
        .unwrap_or_else(|| panic!("no line for the pair 0-1:\n{stdout}"));
    assert!(
        pair.contains("NVLink") || pair.contains("PCIe"),
        "pair 0-1 names neither NVLink nor PCIe: {pair}\n{stdout}"
    );
    assert!(
        stdout.contains("doctor: a 2-PE run can work on this node"),
        "{stdout}"
    );
}
