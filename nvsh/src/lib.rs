//! The `nvsh` tool's code, kept out of the runtime library: the launcher (`nvsh run`), the node
//! check (`nvsh doctor`), the benches with their shared harness and NCCL baseline, the soak,
//! the tuning sweep (`nvsh tune`) and the cost model (`nvsh model`). The binary (`src/main.rs`) parses arguments and prints; this crate does the work, so tests and
//! examples can call it.
//!
#![doc = include_str!("../../docs/benchmarks.md")]

pub mod bench;
pub mod doctor;
pub mod error;
pub mod launcher;
pub mod model;
pub mod nccl_baseline;
pub mod soak;
pub mod tune;
