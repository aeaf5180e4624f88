//! Shared helpers of the GPU tests. Each GPU test initialises NVSHMEM in its own process:
//! scripts/gpu_test.sh runs tests named `pe1_*` alone and `peN_*` under `nvsh run -n N`.
#![allow(dead_code)]

use nvshmem::Nvshmem;
use std::io::Write;
use std::time::Duration;

/// Declares the GPU test `peN_NAME` for the function `NAME` (defined beside it as a plain
/// function, so that rustfmt formats it): `gpu_test!(2, every_op);` is the test `pe2_every_op`,
/// ignored by `cargo test` and run by scripts/gpu_test.sh under `nvsh run -n 2`. The PE count is
/// written once, so the name and the ignore reason cannot disagree. Two tests that differ only in
/// PE count need two functions (one name each).
#[allow(unused_macros)] // Some test crates include this module for other helpers.
macro_rules! gpu_test {
    (1, $name:ident) => {
        paste::paste! {
            #[test]
            #[ignore = "needs 1 PE (scripts/gpu_test.sh)"]
            fn [<pe1_ $name>]() {
                $name()
            }
        }
    };
    ($pes:literal, $name:ident) => {
        paste::paste! {
            #[test]
            #[ignore = concat!("needs ", $pes, " PEs (scripts/gpu_test.sh)")]
            fn [<pe $pes _ $name>]() {
                $name()
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use gpu_test;

/// The line scripts/gpu_test.sh reads to count a case as skipped rather than passed.
pub const SKIP_MARKER: &str = "NVSH_TEST_SKIP:";

/// Says that this test cannot do (all of) its work on this machine, and why: scripts/gpu_test.sh
/// counts the case as SKIP with `reason` instead of PASS. The caller returns after it. Written
/// straight to the stdout handle, which libtest does not capture (it captures `print!`), on a
/// line of its own (libtest may have left "test NAME ... " open).
pub fn skip(reason: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{SKIP_MARKER} {reason}");
    let _ = out.flush();
}

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
/// The runtime of `pes` PEs as pretend nodes of `g` (NVSH_PRETEND_NODE_SIZE, set here for this
/// process), or None after a skip line where the PEs share GPUs (init refuses pretend nodes
/// there).
pub fn pretend_runtime(pes: i32, g: i32) -> Option<Nvshmem> {
    use nvshmem::PRETEND_NODE_SIZE_ENV;
    std::env::set_var(PRETEND_NODE_SIZE_ENV, g.to_string());
    match Nvshmem::init() {
        Ok(nv) => {
            assert_eq!(
                nv.n_pes(),
                pes,
                "this test needs {pes} PE(s): run it through scripts/gpu_test.sh"
            );
            Some(nv)
        }
        Err(nvshmem::Error::InvalidEnv { var, expected, .. })
            if var == PRETEND_NODE_SIZE_ENV && expected.contains("share a GPU") =>
        {
            skip("pretend nodes need one GPU per PE");
            None
        }
        Err(e) => panic!("init: {e}"),
    }
}

pub mod data;
pub mod reference;
pub mod sm_hold;
pub mod table;
