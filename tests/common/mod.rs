//! Shared helpers of the GPU tests. Each GPU test initialises NVSHMEM in its own process:
//! scripts/gpu_test.sh runs tests named `pe1_*` alone and `pe2_*` under `nvsh run -n 2`.
#![allow(dead_code)]

use nvshmem::Nvshmem;
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
