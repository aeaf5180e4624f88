//! Symmetric allocations held from Python: `alloc()` and the `SymmetricBuffer` class, which
//! exports its memory by DLPack (`torch.from_dlpack(buf)` is a zero-copy CUDA tensor).
//!
//! The library's `SymmetricBuffer` borrows the runtime handle, which lives on the thread that
//! called init (runtime.rs). So the typed buffers stay in a registry beside the handle
//! (state.rs), and Python holds an [`Allocation`]: a thread-safe record whose last reference
//! (the Python object, or a consumer's DLPack tensor) queues the buffer for an agreed release
//! (release.rs): it is freed, collectively as the Rust drop frees it, at the next collection
//! point after every PE has released it, whatever order and thread the PEs released in.
//! At finalize the buffers still referenced are forgotten, not freed (NVSHMEM releases them
//! with the heap), and `finalize()` warns that tensors over them must not be used.

use crate::dlpack;
use crate::dtypes::{parse_dtype, torch_name};
use crate::error::{raise, runtime_error};
use crate::release::ENDED;
use crate::runtime::with_collected_state;
use crate::state::RegEntry;
use nvshmem::Dtype;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Runs `$body` with `$T` the element type of `$dtype`.
macro_rules! with_element {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            nvshmem::Dtype::F32 => {
                type $T = f32;
                $body
            }
            nvshmem::Dtype::F64 => {
                type $T = f64;
                $body
            }
            nvshmem::Dtype::F16 => {
                type $T = half::f16;
                $body
            }
            nvshmem::Dtype::Bf16 => {
                type $T = half::bf16;
                $body
            }
            nvshmem::Dtype::I32 => {
                type $T = i32;
                $body
            }
            nvshmem::Dtype::I64 => {
                type $T = i64;
                $body
            }
            nvshmem::Dtype::U32 => {
                type $T = u32;
                $body
            }
            nvshmem::Dtype::U64 => {
                type $T = u64;
                $body
            }
            nvshmem::Dtype::U8 => {
                type $T = u8;
                $body
            }
        }
    };
}
pub(crate) use with_element;

/// One symmetric allocation as Python holds it. Send and Sync: a DLPack consumer may release
/// it on any thread.
pub(crate) struct Allocation {
    id: u64,
    addr: usize,
    len: usize,
    dtype: Dtype,
    device: i32,
}

impl Allocation {
    pub(crate) fn addr(&self) -> usize {
        self.addr
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn dtype(&self) -> Dtype {
        self.dtype
    }
    pub(crate) fn device(&self) -> i32 {
        self.device
    }

    /// An error when the runtime has ended (the memory went with the heap).
    pub(crate) fn alive(&self, py: Python<'_>, what: &str) -> PyResult<()> {
        if ENDED.load(Ordering::SeqCst) {
            return Err(raise(
                py,
                "Finalized",
                format!(
                    "{what}: this symmetric buffer was released with the heap at finalize(); \
                     it holds no memory any more"
                ),
            ));
        }
        Ok(())
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // Frees nothing here: queued for the next collection point, where every PE frees what
        // every PE has released, in one order (release.rs). Any thread, any time.
        crate::release::queue(self.id);
    }
}

/// Symmetric memory of this PE: the same allocation on every PE, which peers address. Made by
/// `nvshmem_rs.alloc()`; `torch.from_dlpack(buf)` views it as a CUDA tensor without a copy.
/// The memory stays allocated while this object or any tensor over it lives, and is freed
/// (collectively, as every symmetric free) when the last of them goes, on the runtime's thread.
#[pyclass(frozen, module = "nvshmem_rs", name = "SymmetricBuffer")]
pub(crate) struct SymmetricBuffer {
    alloc: Arc<Allocation>,
    shape: Vec<i64>,
}

impl SymmetricBuffer {
    pub(crate) fn allocation(&self) -> &Arc<Allocation> {
        &self.alloc
    }
}

#[pymethods]
impl SymmetricBuffer {
    /// The DLPack capsule of this buffer (the array API's `__dlpack__`): versioned (DLPack 1.0)
    /// when the consumer offers `max_version` 1 or more. `stream` is accepted and needs no
    /// wait: the buffer has no work of its own pending (alloc() waits for its zeroing).
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = stream;
        self.alloc.alive(py, "__dlpack__")?;
        if copy == Some(true) {
            return Err(PyBufferError::new_err(
                "__dlpack__: a symmetric buffer is exported as it is; copy=True is not \
                 supported (copy the tensor afterwards)",
            ));
        }
        let here = self.__dlpack_device__();
        if let Some(device) = dl_device {
            if device != here {
                return Err(PyBufferError::new_err(format!(
                    "__dlpack__: the buffer is on device {here:?} (kDLCUDA, its GPU); it cannot \
                     be exported to {device:?}"
                )));
            }
        }
        let a = &self.alloc;
        let tensor = dlpack::Export {
            data: a.addr,
            device: a.device,
            dtype: a.dtype,
            shape: &self.shape,
        };
        dlpack::capsule(
            py,
            tensor,
            self.alloc.clone(),
            dlpack::wants_versioned(max_version),
        )
    }

    /// (kDLCUDA, this PE's GPU).
    fn __dlpack_device__(&self) -> (i32, i32) {
        (dlpack::DEVICE_CUDA, self.alloc.device)
    }

    /// Device address of element 0 on this PE.
    fn data_ptr(&self) -> usize {
        self.alloc.addr
    }

    /// Number of elements.
    fn numel(&self) -> usize {
        self.alloc.len
    }

    /// The shape it was allocated with.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// The library's dtype name ("f32", "bf16", ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.alloc.dtype.name()
    }

    /// PyTorch's name of the dtype ("float32", ...).
    #[getter]
    fn torch_dtype(&self) -> &'static str {
        torch_name(self.alloc.dtype)
    }

    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.alloc.len * self.alloc.dtype.size()
    }

    /// The CUDA device it is on.
    #[getter]
    fn device(&self) -> i32 {
        self.alloc.device
    }

    /// False once the runtime has ended (the memory went with the heap).
    #[getter]
    fn is_alive(&self) -> bool {
        !ENDED.load(Ordering::SeqCst)
    }

    fn __repr__(&self) -> String {
        format!(
            "SymmetricBuffer(shape={:?}, dtype={}, device=cuda:{}, data_ptr={:#x}{})",
            self.shape,
            self.alloc.dtype.name(),
            self.alloc.device,
            self.alloc.addr,
            if self.is_alive() { "" } else { ", freed" }
        )
    }
}

/// A shape as Python gives it: an int or a sequence of ints, each at least 0.
fn parse_shape(shape: &Bound<'_, PyAny>) -> PyResult<(Vec<i64>, usize)> {
    let dims: Vec<i64> = if let Ok(n) = shape.extract::<i64>() {
        vec![n]
    } else {
        shape.extract::<Vec<i64>>().map_err(|_| {
            PyTypeError::new_err(format!(
                "alloc: shape must be an int or a sequence of ints, not {}",
                shape
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?
    };
    let mut numel: usize = 1;
    for &d in &dims {
        let d = usize::try_from(d).map_err(|_| {
            PyValueError::new_err(format!("alloc: shape {dims:?} has a negative dimension"))
        })?;
        numel = numel.checked_mul(d).ok_or_else(|| {
            PyValueError::new_err(format!(
                "alloc: shape {dims:?} holds more than 2^64 elements"
            ))
        })?;
    }
    if numel == 0 {
        return Err(PyValueError::new_err(format!(
            "alloc: shape {dims:?} holds no elements; a symmetric allocation holds at least one"
        )));
    }
    Ok((dims, numel))
}

/// Allocates `shape` elements of `dtype` on every PE's symmetric heap (collective: every PE
/// calls it with the same shape and dtype, in the same order), zero-filled on every PE before
/// any returns unless `zeroed` is False. `dtype` is a library name ("f32"), a torch name
/// ("float32") or a torch.dtype.
///
/// With `registered`, the memory is this PE's own (CUDA VMM, as NVSHMEM makes its heap; the
/// library's `alloc_registrable`, rounded up to the registration granularity) registered into
/// the symmetric heap (`register_symmetric`, collective): a buffer for a tensor reused many
/// times, which the collectives then move without staging, outside the heap's size.
#[pyfunction]
#[pyo3(signature = (shape, dtype = None, zeroed = true, registered = false))]
pub(crate) fn alloc(
    py: Python<'_>,
    shape: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    zeroed: bool,
    registered: bool,
) -> PyResult<SymmetricBuffer> {
    let (shape, len) = parse_shape(shape)?;
    let dtype = match dtype {
        Some(d) => parse_dtype("alloc", d)?,
        None => Dtype::F32,
    };
    let alloc = with_collected_state(py, "alloc", |nv, state| {
        with_element!(dtype, T => {
            let (id, addr) = if registered {
                let own = nv
                    .alloc_registrable::<T>(len)
                    .map_err(|e| runtime_error(py, e))?;
                let addr = own.as_device_ptr() as usize;
                let entry = RegEntry::register(nv, own).map_err(|e| runtime_error(py, e))?;
                if zeroed {
                    if let Some(reg) = &entry.reg {
                        reg.as_view().zero().map_err(|e| runtime_error(py, e))?;
                    }
                    // Zero everywhere before any PE's peers write into it.
                    nv.barrier_all().map_err(|e| runtime_error(py, e))?;
                }
                let id = crate::release::next_seq();
                state.buffers.insert_registered(id, entry);
                (id, addr)
            } else {
                let buf = if zeroed {
                    nv.alloc_zeroed::<T>(len)
                } else {
                    nv.alloc::<T>(len)
                }
                .map_err(|e| runtime_error(py, e))?;
                let addr = buf.as_device_ptr() as usize;
                let id = crate::release::next_seq();
                state.buffers.insert(id, buf);
                (id, addr)
            };
            Ok(Allocation {
                id,
                addr,
                len,
                dtype,
                device: nv.device(),
            })
        })
    })?;
    Ok(SymmetricBuffer {
        alloc: Arc::new(alloc),
        shape,
    })
}
