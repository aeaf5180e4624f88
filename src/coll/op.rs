//! Reductions: the op and the element types the reduction kernels take.

use crate::core::element::{Dtype, Element};
use crate::core::error::Error;
use crate::sys;

/// The reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ReduceOp {
    /// Sum over the PEs.
    Sum = sys::NVSHMEMRS_REDOP_SUM as i32,
    /// Product over the PEs.
    Prod = sys::NVSHMEMRS_REDOP_PROD as i32,
    /// Smallest value.
    Min = sys::NVSHMEMRS_REDOP_MIN as i32,
    /// Largest value.
    Max = sys::NVSHMEMRS_REDOP_MAX as i32,
    /// Sum divided by the PE count. For integer types the division truncates toward zero
    /// (as Rust's `/`), after summing in the type itself (wrapping on overflow).
    Avg = sys::NVSHMEMRS_REDOP_AVG as i32,
}

impl ReduceOp {
    /// Every op, in code order.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    /// "sum", "prod", "min", "max" or "avg".
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }

    /// Whether reducing in steps (over groups of the members, then over the groups' results,
    /// as the node-aware algorithms do) gives this op over `dtype` as one flat reduction does:
    /// an average of group averages is the average only where dividing twice rounds as
    /// dividing once (floats, to within their rounding); integer averages truncate twice, and
    /// unsigned ones wrap their partial sums apart.
    pub fn reduces_in_steps(self, dtype: Dtype) -> bool {
        self != ReduceOp::Avg || matches!(dtype, Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::Bf16)
    }
}

/// The error of call `what` that asked for `steps` (the node-aware algorithm) where they would
/// average `dtype` apart from a flat call ([`ReduceOp::reduces_in_steps`]).
pub(crate) fn refused_in_steps(what: &'static str, steps: &str, dtype: Dtype) -> Error {
    Error::CollectiveShape {
        what,
        detail: format!(
            "{steps} average {} only by truncating twice (and wrap unsigned partial sums \
             apart); ask for a flat one (auto takes one)",
            dtype.name()
        ),
    }
}

/// Types the reduction kernels take (every [`Element`] but u8).
pub trait Reducible: Element {}
impl Reducible for f32 {}
impl Reducible for f64 {}
impl Reducible for half::f16 {}
impl Reducible for half::bf16 {}
impl Reducible for i32 {}
impl Reducible for i64 {}
impl Reducible for u32 {}
impl Reducible for u64 {}
