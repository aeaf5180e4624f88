//! Top-k by magnitude and threshold compaction (device/sparse/select.cu).

use super::set::SparseSet;
use super::{index_code, value_code, SparseIndex, SparseValue};
use crate::core::error::{Error, Result};
use crate::core::result::cuda_check;
use crate::core::stream::raw_stream;
use crate::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use std::sync::Arc;

/// The reusable workspace of the selections over gradients of up to `max_len` elements: top-k
/// ([`TopK::run`]) and threshold compaction ([`TopK::threshold`]). Its memory (about 4 bytes
/// per element: a 32-bit index each, 64-bit past 2^32 elements, so any data fits, a few words
/// per 1024 and 96 KiB of histograms) is plain device memory, allocated once; every call
/// enqueues its kernels on the stream it is given and returns at once. Calls on one workspace
/// must not overlap: give each stream that runs selections concurrently a workspace of its own
/// (cudarc's event tracking orders calls on different streams, one after the other).
pub struct TopK {
    scratch: CudaSlice<u64>,
    max_len: usize,
}

const CREATE: &str = "TopK::new(stream, len)";

impl TopK {
    /// A workspace for gradients of up to `max_len` elements, allocated on `stream`.
    pub fn new(stream: &Arc<CudaStream>, max_len: usize) -> Result<Self> {
        // SAFETY: a host function of its argument only.
        let words = unsafe { sys::nvshmemrs_sparse_select_scratch_words(max_len as u64) };
        let words = usize::try_from(words).map_err(|_| Error::SizeOverflow {
            what: "TopK::new",
            detail: format!("{words} words of workspace"),
        })?;
        Ok(TopK {
            scratch: stream.alloc_zeros(words)?,
            max_len,
        })
    }

    /// The longest gradient this workspace takes.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Enqueues on `stream` the exact top-k of `grad` by magnitude into `out`: the `min(k, n)`
    /// elements of largest |g| (NaN above every number, -0 equal to +0; ties to the lower
    /// index), sorted by index, values bit for bit; `out`'s count becomes `min(k, n)` on the
    /// device. Returns that number (known without the device). `k = 0` or an empty gradient
    /// give an empty set; `k >= n` every element.
    ///
    /// `out` needs a capacity of at least `min(k, n)`, `grad` at most [`TopK::max_len`]
    /// elements, and with i32 indexes at most 2^31 elements ([`Error::IndexTooNarrow`]).
    pub fn run<T, I, G>(
        &mut self,
        grad: &G,
        k: usize,
        out: &mut SparseSet<T, I>,
        stream: &CudaStream,
    ) -> Result<usize>
    where
        T: SparseValue,
        I: SparseIndex,
        G: DevicePtr<T>,
    {
        let n = grad.len();
        check_input::<I>("top-k", n, self.max_len)?;
        let taken = k.min(n);
        if out.capacity() < taken {
            return Err(Error::SparseCapacity {
                what: "top-k",
                needed: taken,
                capacity: out.capacity(),
            });
        }
        let (set, _set_guards) = out.raw_mut(stream);
        let (g, _grad_guard) = grad.device_ptr(stream);
        // SAFETY: the gradient holds n elements and the set its capacity, ordered on `stream`
        // by the guards, which live until the kernels are enqueued.
        unsafe { self.launch::<T, I>((g, n), Select::TopK(k), set, stream)? };
        Ok(taken)
    }

    /// Enqueues on `stream` the threshold compaction of `grad` into `out`: every element with
    /// |g| >= `threshold` (compared in f32, exactly; NaN counts as above every threshold, and
    /// a threshold of 0 or less takes every element), sorted by index, values bit for bit.
    /// `out`'s count becomes how many there are on the device, even past its capacity: then
    /// `out` holds the `capacity` of largest magnitude among them (ties to the lower index;
    /// never the lowest indexes, which would starve whatever lies at the end of the gradient),
    /// sorted by index, and the count shows the overflow. An overflow costs a top-k search
    /// on top of the threshold's passes.
    ///
    /// `grad` at most [`TopK::max_len`] elements (with i32 indexes at most 2^31); a NaN
    /// threshold is [`Error::InvalidThreshold`].
    pub fn threshold<T, I, G>(
        &mut self,
        grad: &G,
        threshold: f32,
        out: &mut SparseSet<T, I>,
        stream: &CudaStream,
    ) -> Result<()>
    where
        T: SparseValue,
        I: SparseIndex,
        G: DevicePtr<T>,
    {
        check_input::<I>("threshold", grad.len(), self.max_len)?;
        if threshold.is_nan() {
            return Err(Error::InvalidThreshold { what: "threshold" });
        }
        let (set, _set_guards) = out.raw_mut(stream);
        let (g, _grad_guard) = grad.device_ptr(stream);
        // SAFETY: as in `run`.
        unsafe { self.launch::<T, I>((g, grad.len()), Select::Threshold(threshold), set, stream) }
    }

    /// [`TopK::run`] of the `len` elements at device address `grad` into a raw set (for sets
    /// in symmetric memory).
    ///
    /// # Safety
    /// `grad` is device memory of `len` elements, the set's pointers of its capacity (and a
    /// count word), all ordered on `stream`.
    pub(crate) unsafe fn run_raw<T: SparseValue, I: SparseIndex>(
        &mut self,
        grad: (u64, usize),
        k: usize,
        out: sys::nvshmemrs_sparse_set,
        stream: &CudaStream,
    ) -> Result<usize> {
        check_input::<I>("top-k", grad.1, self.max_len)?;
        let taken = k.min(grad.1);
        if (out.capacity as usize) < taken {
            return Err(Error::SparseCapacity {
                what: "top-k",
                needed: taken,
                capacity: out.capacity as usize,
            });
        }
        // SAFETY: this function's contract.
        unsafe { self.launch::<T, I>(grad, Select::TopK(k), out, stream)? };
        Ok(taken)
    }

    /// [`TopK::threshold`] into a raw set, with the threshold read on the device from
    /// `threshold` (a NaN there counts as +infinity).
    ///
    /// # Safety
    /// As [`TopK::run_raw`], and `threshold` is one f32 of device memory.
    pub(crate) unsafe fn threshold_at_raw<T: SparseValue, I: SparseIndex>(
        &mut self,
        grad: (u64, usize),
        threshold: *const f32,
        out: sys::nvshmemrs_sparse_set,
        stream: &CudaStream,
    ) -> Result<()> {
        check_input::<I>("threshold", grad.1, self.max_len)?;
        // SAFETY: this function's contract.
        unsafe { self.launch::<T, I>(grad, Select::AtDevice(threshold), out, stream) }
    }

    /// # Safety
    /// As [`TopK::run_raw`] (and a device threshold word where `how` has one).
    unsafe fn launch<T: SparseValue, I: SparseIndex>(
        &mut self,
        grad: (u64, usize),
        how: Select,
        out: sys::nvshmemrs_sparse_set,
        stream: &CudaStream,
    ) -> Result<()> {
        stream.context().bind_to_thread()?;
        let scratch_words = self.scratch.len() as u64;
        let (scratch, _scratch_guard) = self.scratch.device_ptr_mut(stream);
        let (k, threshold, device_threshold) = match how {
            Select::TopK(k) => (k, 0.0, std::ptr::null()),
            Select::Threshold(t) => (0, t, std::ptr::null()),
            Select::AtDevice(p) => (0, 0.0, p),
        };
        let topk = matches!(how, Select::TopK(_));
        let args = sys::nvshmemrs_sparse_select_args {
            grad: grad.0 as *const std::ffi::c_void,
            n: grad.1 as u64,
            k: k as u64,
            threshold,
            dtype: value_code::<T>(),
            index_type: index_code::<I>(),
            pad: 0,
            scratch: scratch as *mut u64,
            scratch_words,
            out,
            device_threshold,
        };
        let raw = raw_stream(stream);
        let code = if topk {
            // SAFETY: every pointer is device memory of the sizes in args (the gradient's
            // length, the workspace's words, the set's capacity), ordered on `stream`
            // (this function's contract; the workspace by its guard).
            unsafe { sys::nvshmemrs_sparse_topk(args, raw) }
        } else {
            // SAFETY: as for top-k.
            unsafe { sys::nvshmemrs_sparse_threshold(args, raw) }
        };
        cuda_check(
            code,
            if topk {
                "top-k kernel launch"
            } else {
                "threshold kernel launch"
            },
        )
    }
}

/// What a selection takes: the k largest, or a threshold from the host or the device.
#[derive(Clone, Copy)]
enum Select {
    TopK(usize),
    Threshold(f32),
    AtDevice(*const f32),
}

/// Checks a selection's input length against the workspace and the index type.
fn check_input<I: SparseIndex>(what: &'static str, len: usize, max_len: usize) -> Result<()> {
    if len > max_len {
        return Err(Error::WorkspaceTooSmall {
            what,
            len,
            max_len,
            create: CREATE,
        });
    }
    if len > 0 && (len - 1) as u64 > I::MAX_INDEX {
        return Err(Error::IndexTooNarrow {
            what,
            len,
            last: len - 1,
            index: I::NAME,
            max: I::MAX_INDEX,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_checked_against_the_workspace_and_the_index_type() {
        assert!(check_input::<i32>("top-k", 0, 0).is_ok());
        assert!(check_input::<i32>("top-k", 1 << 31, 1 << 31).is_ok());
        let err = check_input::<i32>("top-k", (1 << 31) + 1, usize::MAX).unwrap_err();
        assert!(matches!(
            err,
            Error::IndexTooNarrow { last, max, .. } if last == 1 << 31 && max == i32::MAX as u64
        ));
        assert!(err.to_string().contains("i64"), "{err}");
        assert!(check_input::<i64>("top-k", (1 << 31) + 1, usize::MAX).is_ok());
        let err = check_input::<i64>("threshold", 11, 10).unwrap_err();
        assert!(matches!(
            err,
            Error::WorkspaceTooSmall {
                len: 11,
                max_len: 10,
                ..
            }
        ));
    }
}
