//! Selection kernels of sparse gradient exchange: exact top-k by magnitude ([`TopK::run`]),
//! threshold compaction ([`TopK::threshold`]), the union of two sparse sets ([`SparseMerge`])
//! and scatter-add into a dense buffer ([`scatter_add`]), with their CPU reference
//! ([`reference`](mod@reference)). Local work on one stream (cudarc device memory, not
//! symmetric), with no host round trip: counts stay on the device ([`SparseSet`]), where later
//! kernels read them.
//! [`SparseAllreduce`] builds the sparse gradient allreduce (top-k, GaussianK, gTop-k, Ok-Topk
//! and the split-and-allgather methods, with error feedback) from them and the collectives.
//!
//! The order: the magnitude |g|, with NaN above every number (infinity included) and all NaNs
//! equal, so a diverging gradient is sent rather than dropped; -0 and +0 are equal. Ties go to
//! the lower index. Selected pairs come out sorted by index, values bit for bit as in the
//! gradient. Kernels in device/sparse/.
//!
//! ```no_run
//! use nvshmem::{Nvshmem, SparseSet, TopK};
//! # fn main() -> nvshmem::Result<()> {
//! let nv = Nvshmem::init()?;
//! let stream = nv.stream();
//! let grad = stream.clone_htod(&vec![0.5f32; 1 << 20])?;
//! let mut topk = TopK::new(stream, grad.len())?;
//! let mut out = SparseSet::<f32>::new(stream, 1 << 10)?;
//! topk.run(&grad, 1 << 10, &mut out, stream)?; // all equal: indexes 0 .. 1024
//! let host = out.to_host(stream)?;
//! assert_eq!(host.idx[..3], [0, 1, 2]);
//! # Ok(())
//! # }
//! ```

mod allreduce;
pub mod reference;
mod select;
mod set;
pub mod simulation;
mod sparse_ops;

pub use allreduce::{sparse_k, SparseAllreduce, SparseMethod, SparseOptions};
pub use select::TopK;
pub use set::{HostSparse, SparseSet};
pub use sparse_ops::{scatter_add, SparseMerge};

use crate::core::element::Element;
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use half::bf16;

mod private {
    pub trait Sealed {}
}

/// Value types of sparse gradients: f32 and bf16.
pub trait SparseValue:
    Element + crate::coll::op::Reducible + DeviceRepr + ValidAsZeroBits + private::Sealed + Unpin
{
    /// The value as f64 (exact).
    fn to_f64(self) -> f64;
    /// The value's bits, for exact comparisons (NaN payloads and the sign of zero included).
    fn to_bits64(self) -> u64;
    /// Whether the value is a NaN.
    fn is_nan_value(self) -> bool;
    /// `self + other` as the merge and scatter-add kernels compute it: f32 adds in f32; bf16
    /// adds in f32 and rounds once to bf16 (to nearest, ties to even).
    fn sparse_add(self, other: Self) -> Self;
    /// `v` in this type (bf16: rounded to nearest even).
    fn of_f32(v: f32) -> Self;
}

impl private::Sealed for f32 {}
impl SparseValue for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn to_bits64(self) -> u64 {
        self.to_bits() as u64
    }
    fn is_nan_value(self) -> bool {
        self.is_nan()
    }
    fn sparse_add(self, other: Self) -> Self {
        self + other
    }
    fn of_f32(v: f32) -> Self {
        v
    }
}

impl private::Sealed for bf16 {}
impl SparseValue for bf16 {
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn to_bits64(self) -> u64 {
        self.to_bits() as u64
    }
    fn is_nan_value(self) -> bool {
        self.is_nan()
    }
    fn sparse_add(self, other: Self) -> Self {
        // half's from_f32 rounds to nearest even, as __float2bfloat16_rn does.
        bf16::from_f32(self.to_f32() + other.to_f32())
    }
    fn of_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// Index types of sparse sets: i32 (gradients up to 2^31 elements) and i64.
pub trait SparseIndex:
    Element + DeviceRepr + ValidAsZeroBits + private::Sealed + Unpin + Ord
{
    /// The largest index the type holds.
    const MAX_INDEX: u64;
    /// The index `i` (at most MAX_INDEX; larger values wrap).
    fn from_index(i: usize) -> Self;
    /// The index as i64.
    fn to_i64(self) -> i64;
}

impl private::Sealed for i32 {}
impl SparseIndex for i32 {
    const MAX_INDEX: u64 = i32::MAX as u64;
    fn from_index(i: usize) -> Self {
        i as i32
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
}

impl private::Sealed for i64 {}
impl SparseIndex for i64 {
    const MAX_INDEX: u64 = i64::MAX as u64;
    fn from_index(i: usize) -> Self {
        i as i64
    }
    fn to_i64(self) -> i64 {
        self
    }
}

/// The kernel's code of an index type (abi.h NVSHMEMRS_DTYPE_I32 / _I64).
fn index_code<I: SparseIndex>() -> i32 {
    I::DTYPE as i32
}

/// The kernel's code of a value type (abi.h NVSHMEMRS_DTYPE_F32 / _BF16).
fn value_code<T: SparseValue>() -> i32 {
    T::DTYPE as i32
}
