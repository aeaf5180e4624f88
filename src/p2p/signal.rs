//! Signal operations and comparisons, as NVSHMEM defines them.

use crate::sys;

/// How a put-with-signal updates the signal word on the target PE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// signal = value
    Set,
    /// signal += value
    Add,
}

impl SignalOp {
    pub(crate) fn raw(self) -> i32 {
        (match self {
            SignalOp::Set => sys::NVSHMEM_SIGNAL_SET,
            SignalOp::Add => sys::NVSHMEM_SIGNAL_ADD,
        }) as i32
    }
}

/// Comparison for signal waits: wait until `signal <cmp> value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Ge,
    /// Less than.
    Lt,
    /// Less than or equal.
    Le,
}

impl Cmp {
    pub(crate) fn raw(self) -> i32 {
        (match self {
            Cmp::Eq => sys::NVSHMEM_CMP_EQ,
            Cmp::Ne => sys::NVSHMEM_CMP_NE,
            Cmp::Gt => sys::NVSHMEM_CMP_GT,
            Cmp::Ge => sys::NVSHMEM_CMP_GE,
            Cmp::Lt => sys::NVSHMEM_CMP_LT,
            Cmp::Le => sys::NVSHMEM_CMP_LE,
        }) as i32
    }

    /// Whether `signal <cmp> value` holds.
    pub fn holds(self, signal: u64, value: u64) -> bool {
        match self {
            Cmp::Eq => signal == value,
            Cmp::Ne => signal != value,
            Cmp::Gt => signal > value,
            Cmp::Ge => signal >= value,
            Cmp::Lt => signal < value,
            Cmp::Le => signal <= value,
        }
    }
}
