//! Thin layer over [`crate::sys`]: each function makes one raw call and turns its status into a
//! [`Result`]. No state, no ownership; the RAII types build on these.
//!
//! Calls with preconditions the types cannot check are `unsafe` here; the safe surface is the
//! RAII layer ([`crate::Nvshmem`]). A second init from safe code does not compile:
//!
//! ```compile_fail,E0133
//! let id = nvshmem::result::get_unique_id().unwrap();
//! nvshmem::result::init_with_unique_id(0, 1, &id).unwrap();
//! ```
//!
//! nor does the device self check, which allocates symmetric memory collectively:
//!
//! ```compile_fail,E0133
//! let _ = nvshmem::result::device_self_check();
//! ```

use crate::core::error::{Error, Result};
use crate::sys;
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::raw::c_char;

/// CUDA runtime error codes the probe tells apart (driver_types.h).
const CUDA_ERROR_INSUFFICIENT_DRIVER: i32 = 35;
const CUDA_ERROR_NO_DEVICE: i32 = 100;
const CUDA_ERROR_STUB_LIBRARY: i32 = 34;

/// What the CUDA runtime reports about this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaInfo {
    /// Number of visible devices (at least 1: the probe fails otherwise).
    pub device_count: i32,
    /// Driver API version, e.g. 13000 for CUDA 13.0.
    pub driver_version: i32,
    /// Version of the CUDA runtime linked into this binary.
    pub runtime_version: i32,
}

/// A CUDA version number (e.g. 13000) as "13.0".
pub fn cuda_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the CUDA runtime returns static NUL-terminated strings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The call nvshmemrs_cuda_probe's `failed_call` names.
fn probe_call(failed_call: i32) -> &'static str {
    match failed_call {
        1 => "cudaDriverGetVersion",
        2 => "cudaRuntimeGetVersion",
        _ => "cudaGetDeviceCount",
    }
}

/// Counts CUDA devices. Fails with [`Error::NoCudaDriver`] or [`Error::NoCudaDevice`] when there is
/// nothing to run on; needs no driver to answer.
pub fn cuda_probe() -> Result<CudaInfo> {
    let (mut count, mut driver, mut runtime, mut failed_call) = (0, 0, 0, 0);
    let (mut name, mut message) = (std::ptr::null(), std::ptr::null());
    // SAFETY: all out-pointers are valid for writes.
    let code = unsafe {
        sys::nvshmemrs_cuda_probe(
            &mut count,
            &mut driver,
            &mut runtime,
            &mut failed_call,
            &mut name,
            &mut message,
        )
    };
    let detail = format!("{}: {}", c_str(name), c_str(message));
    match code {
        0 if count > 0 => Ok(CudaInfo {
            device_count: count,
            driver_version: driver,
            runtime_version: runtime,
        }),
        0 | CUDA_ERROR_NO_DEVICE => Err(Error::NoCudaDevice { detail }),
        CUDA_ERROR_INSUFFICIENT_DRIVER | CUDA_ERROR_STUB_LIBRARY if driver == 0 => {
            Err(Error::NoCudaDriver {
                detail: "libcuda.so.1 could not be loaded".into(),
            })
        }
        CUDA_ERROR_INSUFFICIENT_DRIVER => Err(Error::NoCudaDriver {
            detail: format!(
                "driver supports CUDA {}, this binary's runtime needs CUDA {}",
                cuda_version_string(driver),
                cuda_version_string(runtime)
            ),
        }),
        _ => Err(Error::Cuda {
            call: probe_call(failed_call),
            code,
            name: c_str(name),
            message: c_str(message),
        }),
    }
}

/// Turns a cudaError_t returned by `call` (a runtime call or a kernel launch) into a Result.
pub fn cuda_check(code: i32, call: &'static str) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let (mut name, mut text) = (std::ptr::null(), std::ptr::null());
    // SAFETY: out-pointers are valid; the runtime returns static strings for any code.
    unsafe { sys::nvshmemrs_cuda_error_strings(code, &mut name, &mut text) };
    Err(Error::Cuda {
        call,
        code,
        name: c_str(name),
        message: c_str(text),
    })
}

/// Makes `device` current for this host thread (NVSHMEM binds to it at init).
pub fn cuda_set_device(device: i32) -> Result<()> {
    // SAFETY: plain runtime call.
    cuda_check(
        unsafe { sys::nvshmemrs_cuda_set_device(device) },
        "cudaSetDevice",
    )
}

/// What a device kernel saw through NVSHMEM's device API: (my_pe, n_pes, value it put to itself,
/// which is 1000 + my_pe when the device state is right). The safe form is
/// [`crate::Nvshmem::device_self_check`].
///
/// # Safety
/// NVSHMEM must be initialised, and the call made on the thread that holds the
/// [`crate::Nvshmem`] handle (NVSHMEM runs THREAD_SERIALIZED): it allocates and frees symmetric
/// memory, which is collective, so every PE must make the call at the same point.
pub unsafe fn device_self_check() -> Result<(i32, i32, i32)> {
    let (mut pe, mut n, mut value) = (-1, -1, -1);
    // SAFETY: out-pointers are valid; the caller holds an initialised runtime (see # Safety).
    let code = unsafe { sys::nvshmemrs_device_self_check(&mut pe, &mut n, &mut value) };
    cuda_check(code, "nvshmemrs_device_self_check")?;
    Ok((pe, n, value))
}

/// NVSHMEM version (major, minor, patch) of the headers and device library compiled in.
pub fn compiled_version() -> (i32, i32, i32) {
    let (mut a, mut b, mut c) = (0, 0, 0);
    // SAFETY: out-pointers are valid.
    unsafe { sys::nvshmemrs_compiled_version(&mut a, &mut b, &mut c) };
    (a, b, c)
}

/// NVSHMEM version (major, minor, patch) of the host library loaded at run time.
pub fn host_library_version() -> (i32, i32, i32) {
    let (mut a, mut b, mut c) = (0, 0, 0);
    // SAFETY: out-pointers are valid; the call only reads constants of the library.
    unsafe { sys::nvshmemx_vendor_get_version_info(&mut a, &mut b, &mut c) };
    (a, b, c)
}

/// A fresh unique ID for the UID bootstrap (taken on one PE, shared with the others).
pub fn get_unique_id() -> Result<sys::nvshmemx_uniqueid_t> {
    let mut id = MaybeUninit::<sys::nvshmemx_uniqueid_t>::zeroed();
    // SAFETY: id is a valid out-pointer of the right type.
    let status = unsafe { sys::nvshmemx_get_uniqueid(id.as_mut_ptr()) };
    if status != 0 {
        return Err(Error::Bootstrap {
            call: "nvshmemx_get_uniqueid",
            status,
        });
    }
    // SAFETY: written by nvshmemx_get_uniqueid on success.
    Ok(unsafe { id.assume_init() })
}

/// NVSHMEM's thread levels (nvshmem_constants.h): the runtime asks for SERIALIZED.
pub(crate) const THREAD_SERIALIZED: i32 = 2;

/// Refuses a thread level below what the runtime asked for: NVSHMEM would then assume calls come
/// from one thread only (or the main thread), which the runtime does not promise.
pub(crate) fn check_thread_level(provided: i32) -> Result<()> {
    if provided >= THREAD_SERIALIZED {
        return Ok(());
    }
    Err(Error::ThreadLevel {
        requested: THREAD_SERIALIZED,
        provided,
    })
}

/// Initialises NVSHMEM through the unique-ID bootstrap as PE `rank` of `n_pes`, with thread level
/// SERIALIZED (refused with [`Error::ThreadLevel`] if NVSHMEM provides less). The safe way in is
/// [`crate::Nvshmem::init`].
///
/// # Safety
/// NVSHMEM must not be initialised in this process (it supports one init; a second one
/// re-initialises a live runtime under the handle that owns it), and the CUDA device NVSHMEM
/// should bind to must be current on this thread.
pub unsafe fn init_with_unique_id(
    rank: i32,
    n_pes: i32,
    id: &sys::nvshmemx_uniqueid_t,
) -> Result<()> {
    let mut attr = MaybeUninit::<sys::nvshmemx_init_attr_t>::zeroed();
    // SAFETY: attr is a valid out-pointer; id outlives the init call.
    unsafe {
        sys::nvshmemrs_init_attr_default(attr.as_mut_ptr());
        let status = sys::nvshmemx_set_attr_uniqueid_args(rank, n_pes, id, attr.as_mut_ptr());
        if status != 0 {
            return Err(Error::Bootstrap {
                call: "nvshmemx_set_attr_uniqueid_args",
                status,
            });
        }
        init_attr(sys::NVSHMEMX_INIT_WITH_UNIQUEID as u32, attr.as_mut_ptr())
    }
}

/// Initialises NVSHMEM through the bootstrap its own environment variables select
/// (`NVSHMEM_BOOTSTRAP`, `NVSHMEM_BOOTSTRAP_PMI`, default PMI), with thread level SERIALIZED as
/// [`init_with_unique_id`]. NVSHMEM finds rank and size through that bootstrap (a PMI server).
///
/// # Safety
/// As [`init_with_unique_id`].
pub unsafe fn init_from_environment() -> Result<()> {
    let mut attr = MaybeUninit::<sys::nvshmemx_init_attr_t>::zeroed();
    // SAFETY: attr is a valid out-pointer; flags 0 asks for no attribute but the versions.
    unsafe {
        sys::nvshmemrs_init_attr_default(attr.as_mut_ptr());
        init_attr(0, attr.as_mut_ptr())
    }
}

/// NVSHMEM's init with `flags` and `attr`, and the thread-level check.
///
/// # Safety
/// As [`init_with_unique_id`]; `attr` is valid for the call.
unsafe fn init_attr(flags: u32, attr: *mut sys::nvshmemx_init_attr_t) -> Result<()> {
    let mut provided = 0;
    // SAFETY: the caller's promises; provided is a valid out-pointer.
    let status = unsafe { sys::nvshmemrs_init_attr(flags, attr, &mut provided) };
    if status != 0 {
        return Err(Error::InitFailed { status });
    }
    if let Err(e) = check_thread_level(provided) {
        // The runtime is up but unusable as asked: end it before reporting.
        // SAFETY: NVSHMEM came up just above.
        unsafe { sys::nvshmemrs_finalize() };
        return Err(e);
    }
    Ok(())
}

/// Ends NVSHMEM in this process.
///
/// # Safety
/// NVSHMEM must be initialised and no symmetric memory may be used afterwards.
pub unsafe fn finalize() {
    sys::nvshmemrs_finalize();
}

/// This PE's number.
pub fn my_pe() -> i32 {
    // SAFETY: valid after init; returns -1 before.
    unsafe { sys::nvshmem_my_pe() }
}

/// Number of PEs.
pub fn n_pes() -> i32 {
    // SAFETY: valid after init; returns -1 before.
    unsafe { sys::nvshmem_n_pes() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_version_query_is_named_not_taken_for_the_device_count() {
        assert_eq!(probe_call(0), "cudaGetDeviceCount");
        assert_eq!(probe_call(1), "cudaDriverGetVersion");
        assert_eq!(probe_call(2), "cudaRuntimeGetVersion");
    }

    #[test]
    fn a_thread_level_below_serialized_is_refused() {
        assert!(check_thread_level(THREAD_SERIALIZED).is_ok());
        assert!(check_thread_level(3).is_ok()); // MULTIPLE
        let err = check_thread_level(0).unwrap_err();
        assert!(
            matches!(
                err,
                Error::ThreadLevel {
                    requested: 2,
                    provided: 0
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("SERIALIZED"), "{err}");
    }

    #[test]
    fn cuda_versions_print_as_major_minor() {
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(12090), "12.9");
        assert_eq!(cuda_version_string(12040), "12.4");
    }

    #[test]
    fn compiled_version_matches_the_headers_bindgen_read() {
        let (major, minor, patch) = compiled_version();
        assert_eq!(major, sys::NVSHMEM_VENDOR_MAJOR_VERSION as i32);
        assert_eq!(minor, sys::NVSHMEM_VENDOR_MINOR_VERSION as i32);
        assert_eq!(patch, sys::NVSHMEM_VENDOR_PATCH_VERSION as i32);
        assert!(
            major >= 3,
            "NVSHMEM 3.x or newer is required, built against {major}"
        );
    }

    #[test]
    fn host_library_loaded_is_the_compiled_version() {
        // The host library is linked (not dlopened): no driver is needed to ask its version.
        assert_eq!(host_library_version(), compiled_version());
    }

    #[test]
    fn probe_without_driver_is_an_error_not_an_abort() {
        if std::path::Path::new("/dev/nvidiactl").exists() {
            eprintln!("skipped: this machine has an NVIDIA driver");
            return;
        }
        let err = cuda_probe().unwrap_err();
        assert!(
            matches!(err, Error::NoCudaDriver { .. } | Error::NoCudaDevice { .. }),
            "{err:?}"
        );
    }
}
