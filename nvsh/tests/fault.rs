//! Fault injection on the GPU: one of two PEs kills itself (SIGKILL) in the middle of a loop of
//! checked allreduces or channel transfers (`nvsh soak --die-pe 1`), under
//! `nvsh run --on-failure wait`, so that the survivor is not stopped by the launcher but has to
//! notice by itself. It must end within its deadline with an error that names the dead PE,
//! and no process may be left behind.
//!
//! The tests start their own 2-PE job, so scripts/gpu_test.sh runs them alone (`pe1_`).

mod common;

use common::gpu_test;

use std::process::Command;
use std::time::{Duration, Instant};

/// The survivor's deadline in these tests.
const TIMEOUT_MS: u64 = 3000;

/// Pids of processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) && name != std::process::id().to_string() {
                found.push(format!("{name}: {cmdline}"));
            }
        }
    }
    found
}

fn kill_one_pe_during(workload: &str) {
    let nvsh = common::nvsh_path();
    // A seed no other job uses: it marks this job's processes in /proc.
    let seed = format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_007
    );
    let start = Instant::now();
    let out = Command::new(&nvsh)
        .args([
            "run",
            "-n",
            "2",
            "--on-failure",
            "wait",
            "--wait-secs",
            "60",
            "--",
        ])
        .arg(&nvsh)
        .args([
            "soak",
            "--workload",
            workload,
            "--seconds",
            "300",
            "--max-bytes",
            "1M",
            "--max-message",
            "65536",
            "--die-pe",
            "1",
            "--die-after",
            "200",
            "--seed",
            &seed,
        ])
        .env("NVSH_TIMEOUT_MS", TIMEOUT_MS.to_string())
        .output()
        .expect("start nvsh run");
    let took = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    eprintln!("{all}\n--- took {took:?}");
    // The job's status is the first failure's: PE 1 killed by SIGKILL.
    assert_eq!(out.status.code(), Some(128 + 9), "{all}");
    assert!(
        stderr.contains("rank 1 was killed by signal 9 (SIGKILL)"),
        "the launcher names the dead rank: {all}"
    );
    // The survivor ended by itself with a timeout naming PE 1, not killed by the launcher.
    let survivor: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("[0]") && l.contains("soak failed"))
        .collect();
    assert_eq!(survivor.len(), 1, "one failure line from PE 0: {all}");
    let line = survivor[0];
    assert!(line.contains("timed out after"), "{line}");
    assert!(line.contains("PE 1"), "the error names the dead PE: {line}");
    assert!(
        !stderr.contains("killed (SIGKILL)"),
        "nothing was left to kill: {all}"
    );
    // Within the deadline: the failed wait took about TIMEOUT_MS.
    let waited: u64 = line
        .split("timed out after ")
        .nth(1)
        .and_then(|r| r.split(" ms").next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no waited time in {line}"));
    // The deadline counts from the kernel's start, the wait's own clock a little later.
    assert!(
        (TIMEOUT_MS - 100..TIMEOUT_MS + 2000).contains(&waited),
        "waited {waited} ms for a {TIMEOUT_MS} ms deadline: {line}"
    );
    assert!(took < Duration::from_secs(120), "the job took {took:?}");
    let left = processes_with(&seed);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

// Needs 1 GPU (2 PEs; one per GPU where there are 2).
gpu_test!(
    1,
    killing_a_pe_mid_allreduce_loop_ends_the_survivor_with_a_timeout_naming_it
);
fn killing_a_pe_mid_allreduce_loop_ends_the_survivor_with_a_timeout_naming_it() {
    kill_one_pe_during("allreduce");
}

// Needs 1 GPU (2 PEs; one per GPU where there are 2).
gpu_test!(
    1,
    killing_a_pe_mid_channel_loop_ends_the_survivor_with_a_timeout_naming_it
);
fn killing_a_pe_mid_channel_loop_ends_the_survivor_with_a_timeout_naming_it() {
    kill_one_pe_during("channel");
}

// Needs 1 GPU (2 PEs; one per GPU where there are 2).
gpu_test!(1, a_short_mixed_soak_checks_every_result);
fn a_short_mixed_soak_checks_every_result() {
    let nvsh = common::nvsh_path();
    let out = Command::new(&nvsh)
        .args(["run", "-n", "2", "--"])
        .arg(&nvsh)
        .args([
            "soak",
            "--seconds",
            "15",
            "--max-bytes",
            "4M",
            "--report-every",
            "5",
        ])
        .output()
        .expect("start nvsh run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    eprintln!("{all}");
    assert!(out.status.success(), "{all}");
    for pe in 0..2 {
        let done = stdout
            .lines()
            .find(|l| l.contains(&format!("PE {pe}: soak done")))
            .unwrap_or_else(|| panic!("no summary from PE {pe}: {all}"));
        assert!(done.contains(" 0 mismatches"), "{done}");
        assert!(!done.contains(" 0 allreduces"), "{done}");
    }
}
