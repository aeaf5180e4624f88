//! The collective benches' shared harness. A collective supplies its candidates (how to call
//! each), its buffer shapes, its input and expected-value functions and its bus-bandwidth factor
//! ([`Collective`]); this module sizes, times and checks, and [`crate::bench::render`] writes
//! the report.
//!
//! Sizes follow nccl-tests: the size asked for becomes the collective's count argument (for
//! allgather, reduce-scatter and alltoall a per-PE block, rounded down to 16 bytes), and the
//! reported size is the larger of the input and output buffers of that count.
//!
//! Checking: every timed call writes its own output buffer. Per message size there are `slots`
//! input/output buffer pairs; input buffer k holds a pattern hashed from (PE, element, salt k),
//! so consecutive calls move or reduce different data. Calls are timed in groups of at most
//! `slots` calls, call k of a group reading input k and writing output k; the outputs are
//! filled with NaN before the group and compared with the exact host reference after it,
//! outside the timed events. So no timed call goes unchecked, a call that writes nothing or
//! writes stale data (peer data of an earlier call) is caught, and the reported time is the
//! median over groups. A collective whose output is defined on some PEs only (reduce: the
//! root) says so ([`Collective::checks_output`]); the other PEs' outputs are not compared.
//!
//! A candidate that is NCCL's call on NCCL's own registered buffers (nccl-sym,
//! [`Collective::nccl_window`]) gets the same discipline on those: per dtype one pool of inputs
//! and one of outputs from `ncclMemAlloc`, each registered as a symmetric window, the same
//! inputs copied in, its outputs poisoned before each group and checked after it.
//!
//! A candidate that runs on the caller's own memory registered into the symmetric heap
//! (ours-registered, [`Collective::registered`]) gets the same: per dtype one input pool and
//! one output pool from `Nvshmem::alloc_registrable`, registered once before any timing, the
//! same inputs copied in, poisoned and checked alike; its calls get views of the registered
//! memory.
//!
//! One file per part: the element types (`dtype`), the input values (`pattern`) and their
//! threaded fill (`fill`), what a collective supplies (`collective`), the sizes (`plan`), the
//! results (`report`), and the measuring loop (`measure`) with its buffers (`slots`).

mod collective;
mod dtype;
mod fill;
mod measure;
mod pattern;
mod plan;
mod report;
mod slots;

pub use collective::{as_own, window_only, Collective};
pub use dtype::{check_dtypes, dtype_refusal, BenchDtype, BenchElement, Reduction};
pub use fill::{fill_parallel, fill_slots, fill_threads, threads_for, SlotShape, SlotValues};
pub use fill::{MAX_FILL_THREADS, MIN_FILL_CHUNK};
pub use measure::{failed_elsewhere, gpu_name_on_pe0, Harness, COMPUTE_BYTES};
pub use pattern::{integer_power_value, integer_value, movement_value, pattern_hash};
pub use pattern::{power_of_two_value, quarter_value, salt, QUARTER_MAX};
pub use plan::{iters_for, message_bytes, size_plan, size_steps, slots_for};
pub use plan::{MAX_ITERS, MIN_SLOTS, SLOT_BUDGET_BYTES};
pub use report::{after_compute_us, algbw_gbps, baseline_cell, time_ratio, NCCL_BASELINES};
pub use report::{GroupTime, Outcome, RatioOn, Report, Row, Timing};

/// The report fixtures that render's tests share, at their old path.
#[cfg(test)]
pub(crate) use report::tests;
