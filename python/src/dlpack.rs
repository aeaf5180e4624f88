//! DLPack export of symmetric memory: the C structs of dlpack.h (v1.0, and the unversioned
//! form that older consumers take), written out here as the header has them, and the capsules
//! that `__dlpack__` returns.
//!
//! The exported tensor owns what keeps its memory allocated (the manager context: memory.rs
//! passes an `Arc` of the allocation), so the memory stays while any consumer's tensor over it
//! lives; the consumer's deleter call drops it. A capsule that no consumer took releases its
//! tensor when Python collects it.

use crate::dtypes::parse_dtype;
use nvshmem::Dtype;
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `kDLCUDA`: memory of a CUDA device.
pub(crate) const DEVICE_CUDA: i32 = 2;

/// The capsule names the DLPack protocol fixes (consumers rename a capsule they take to
/// "used_dltensor" / "used_dltensor_versioned").
const LEGACY_NAME: &CStr = c"dltensor";
const VERSIONED_NAME: &CStr = c"dltensor_versioned";

/// The DLPack version of the versioned struct written here.
const VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 0 };

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DLDataType {
    /// kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4.
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
pub(crate) struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub(crate) struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
pub(crate) struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// DLPACK_FLAG_BITMASK_READ_ONLY (1), _IS_COPIED (2): neither here.
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

// The sizes and offsets of dlpack.h on 64-bit targets, so that a slip here fails the build.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
};

/// DLPack's type of a library dtype. Exhaustive, as the torch names are.
pub(crate) fn data_type(dtype: Dtype) -> DLDataType {
    let (code, bits) = match dtype {
        Dtype::F32 => (2, 32),
        Dtype::F64 => (2, 64),
        Dtype::F16 => (2, 16),
        Dtype::Bf16 => (4, 16),
        Dtype::I32 => (0, 32),
        Dtype::I64 => (0, 64),
        Dtype::U32 => (1, 32),
        Dtype::U64 => (1, 64),
        Dtype::U8 => (1, 8),
    };
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

/// A compact row-major tensor to export.
pub(crate) struct Export<'a> {
    /// Device address of element 0.
    pub data: usize,
    /// Its CUDA device.
    pub device: i32,
    pub dtype: Dtype,
    pub shape: &'a [i64],
}

/// What the exported tensor keeps alive: its shape and strides (the DLTensor points into
/// them) and the owner of its memory.
struct Context {
    shape: Vec<i64>,
    strides: Vec<i64>,
    _owner: Box<dyn Send + Sync>,
}

impl Context {
    fn new(shape: &[i64], owner: Box<dyn Send + Sync>) -> Context {
        // Row-major and compact: stride of dim d is the product of the dims after it.
        let mut strides = vec![1i64; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1];
        }
        Context {
            shape: shape.to_vec(),
            strides,
            _owner: owner,
        }
    }

    /// The DLTensor over the allocation. Explicit strides: DLPack 1.x consumers may not
    /// accept null ones.
    fn tensor(&mut self, export: &Export<'_>) -> DLTensor {
        DLTensor {
            data: export.data as *mut c_void,
            device: DLDevice {
                device_type: DEVICE_CUDA,
                device_id: export.device,
            },
            ndim: self.shape.len() as i32,
            dtype: data_type(export.dtype),
            shape: self.shape.as_mut_ptr(),
            strides: self.strides.as_mut_ptr(),
            byte_offset: 0,
        }
    }
}

/// The unversioned export: the managed tensor first, so that its address is the box's.
#[repr(C)]
struct Legacy {
    managed: DLManagedTensor,
    ctx: Context,
}

#[repr(C)]
struct Versioned {
    managed: DLManagedTensorVersioned,
    ctx: Context,
}

/// The consumer's (or the unused capsule's) release of an unversioned export.
unsafe extern "C" fn delete_legacy(p: *mut DLManagedTensor) {
    if !p.is_null() {
        // A panic must not cross the C boundary; the drop only logs on failure.
        let _ = std::panic::catch_unwind(|| {
            // SAFETY: p is the first field of a Legacy made by Box::into_raw in `capsule`,
            // released once (the protocol: by the consumer, or by the capsule it never took).
            drop(unsafe { Box::from_raw(p.cast::<Legacy>()) });
        });
    }
}

unsafe extern "C" fn delete_versioned(p: *mut DLManagedTensorVersioned) {
    if !p.is_null() {
        let _ = std::panic::catch_unwind(|| {
            // SAFETY: as in delete_legacy, for a Versioned.
            drop(unsafe { Box::from_raw(p.cast::<Versioned>()) });
        });
    }
}

/// The capsule's destructor: a capsule still under its own name was never consumed, so its
/// tensor is released here; a consumed one ("used_...") belongs to its consumer.
unsafe extern "C" fn destroy_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: Python passes the capsule being destroyed; IsValid sets no error.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY_NAME.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, LEGACY_NAME.as_ptr());
            delete_legacy(p.cast());
        }
    }
}

unsafe extern "C" fn destroy_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: as in destroy_legacy.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED_NAME.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, VERSIONED_NAME.as_ptr());
            delete_versioned(p.cast());
        }
    }
}

/// Whether a consumer that offered `max_version` takes the versioned struct (DLPack 1.x).
pub(crate) fn wants_versioned(max_version: Option<(u32, u32)>) -> bool {
    matches!(max_version, Some((major, _)) if major >= VERSION.major)
}

/// A DLPack capsule of `export`, versioned when the consumer takes it; the tensor holds
/// `owner` (what keeps the memory allocated) until it is released.
pub(crate) fn capsule(
    py: Python<'_>,
    export: Export<'_>,
    owner: impl Send + Sync + 'static,
    versioned: bool,
) -> PyResult<Py<PyAny>> {
    let mut ctx = Context::new(export.shape, Box::new(owner));
    let dl_tensor = ctx.tensor(&export);
    let (ptr, name, destructor): (*mut c_void, &CStr, ffi::PyCapsule_Destructor) = if versioned {
        let boxed = Box::into_raw(Box::new(Versioned {
            managed: DLManagedTensorVersioned {
                version: VERSION,
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_versioned),
                flags: 0,
                dl_tensor,
            },
            ctx,
        }));
        // SAFETY: just allocated; the context is the box itself.
        unsafe { (*boxed).managed.manager_ctx = boxed.cast() };
        (boxed.cast(), VERSIONED_NAME, destroy_versioned)
    } else {
        let boxed = Box::into_raw(Box::new(Legacy {
            managed: DLManagedTensor {
                dl_tensor,
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_legacy),
            },
            ctx,
        }));
        // SAFETY: as above.
        unsafe { (*boxed).managed.manager_ctx = boxed.cast() };
        (boxed.cast(), LEGACY_NAME, destroy_legacy)
    };
    // SAFETY: a valid pointer, a static name, a destructor that matches the pointer's type.
    let raw = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(destructor)) };
    if raw.is_null() {
        // SAFETY: the capsule was not made, so the box is still ours to release.
        unsafe {
            if versioned {
                delete_versioned(ptr.cast());
            } else {
                delete_legacy(ptr.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference just returned by PyCapsule_New.
    Ok(unsafe { Bound::from_owned_ptr(py, raw) }.unbind())
}

/// How many probe tensors ([`_dlpack_probe`]) have been released.
static PROBES_RELEASED: AtomicUsize = AtomicUsize::new(0);

/// The owner of a probe tensor: counts its release.
struct Probe;

impl Drop for Probe {
    fn drop(&mut self) {
        PROBES_RELEASED.fetch_add(1, Ordering::SeqCst);
    }
}

/// For the CPU tests: a capsule as `SymmetricBuffer.__dlpack__` makes it, over no memory (data
/// null, device 0), whose release the tests count ([`_dlpack_probes_released`]): they read
/// its layout with ctypes and release it both ways (the consumer's deleter, or the unused
/// capsule's destructor) without a GPU.
#[pyfunction]
#[pyo3(signature = (shape, dtype, versioned = false))]
pub(crate) fn _dlpack_probe(
    py: Python<'_>,
    shape: Vec<i64>,
    dtype: &Bound<'_, PyAny>,
    versioned: bool,
) -> PyResult<Py<PyAny>> {
    let export = Export {
        data: 0,
        device: 0,
        dtype: parse_dtype("_dlpack_probe", dtype)?,
        shape: &shape,
    };
    capsule(py, export, Probe, versioned)
}

/// How many probe tensors have been released so far.
#[pyfunction]
pub(crate) fn _dlpack_probes_released() -> usize {
    PROBES_RELEASED.load(Ordering::SeqCst)
}
