//! A kernel that holds most of the GPU's SMs while a test runs, as another job's kernels would:
//! one block per SM, each taking all the shared memory a block may have, so that no other
//! kernel's block fits beside it. Written in PTX and loaded through the driver (no NVRTC, no
//! extra build step); it spins until released or until its time is up.

use cudarc::driver::sys::{self, CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{result, CudaContext, CudaStream};
use std::ffi::{c_void, CString};
use std::sync::Arc;
use std::time::Duration;

/// Spins until `*stop != 0` or `max_ns` of %globaltimer have passed.
const PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry hold_sms(.param .u64 stop_ptr, .param .u64 max_ns)
{
    .reg .pred %p;
    .reg .b32 %r;
    .reg .b64 %stop, %max, %t0, %t1, %d;
    ld.param.u64 %stop, [stop_ptr];
    ld.param.u64 %max, [max_ns];
    cvta.to.global.u64 %stop, %stop;
    mov.u64 %t0, %globaltimer;
SPIN:
    ld.volatile.global.u32 %r, [%stop];
    setp.ne.u32 %p, %r, 0;
    @%p bra DONE;
    mov.u64 %t1, %globaltimer;
    sub.u64 %d, %t1, %t0;
    setp.lt.u64 %p, %d, %max;
    @%p bra SPIN;
DONE:
    ret;
}
"#;

/// The running hold; [`SmHold::release`] (or drop) ends it.
pub struct SmHold {
    stream: Arc<CudaStream>,
    /// The stop word, raw: cudarc's slices would order the release's copy after the kernel.
    stop: sys::CUdeviceptr,
    released: bool,
    /// SMs the hold leaves to everything else.
    pub free_sms: i32,
}

impl SmHold {
    /// Holds all SMs but `free_sms` for at most `max`, on a stream of its own. Returns once
    /// the kernel is queued; give it a moment to become resident.
    pub fn start(ctx: &Arc<CudaContext>, free_sms: i32, max: Duration) -> SmHold {
        ctx.bind_to_thread().unwrap();
        let sms = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .unwrap();
        let smem = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .unwrap();
        let stream = ctx.new_stream().unwrap();
        // SAFETY: a 4-byte allocation, zeroed before the kernel may read it.
        let stop = unsafe {
            let p = result::malloc_sync(4).unwrap();
            result::memset_d8_sync(p, 0, 4).unwrap();
            p
        };
        let src = CString::new(PTX).unwrap();
        // SAFETY: a NUL-terminated PTX image; the module lives as long as the process (a test).
        let func = unsafe {
            let module = result::module::load_data(src.as_ptr() as *const c_void).unwrap();
            let f =
                result::module::get_function(module, CString::new("hold_sms").unwrap()).unwrap();
            result::function::set_function_attribute(
                f,
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem,
            )
            .unwrap();
            result::function::set_function_attribute(
                f,
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                100,
            )
            .unwrap();
            f
        };
        let blocks = (sms - free_sms).max(1) as u32;
        let mut stop_arg: sys::CUdeviceptr = stop;
        let mut max_ns: u64 = max.as_nanos() as u64;
        let mut params = [
            &mut stop_arg as *mut _ as *mut c_void,
            &mut max_ns as *mut _ as *mut c_void,
        ];
        // SAFETY: the kernel's two parameters, by address, as cuLaunchKernel takes them; the
        // stop word outlives the kernel (release synchronises before it is freed).
        unsafe {
            result::launch_kernel(
                func,
                (blocks, 1, 1),
                (32, 1, 1),
                smem as u32,
                stream.cu_stream(),
                &mut params,
            )
            .unwrap();
        }
        SmHold {
            stream,
            stop,
            released: false,
            free_sms: sms - blocks as i32,
        }
    }

    /// Ends the hold and waits for the kernel to finish. Returns whether it was still running
    /// (false: its time ran out first, so it did not hold the SMs all along).
    pub fn release(mut self) -> bool {
        self.release_inner()
    }

    fn release_inner(&mut self) -> bool {
        if self.released {
            return false;
        }
        self.released = true;
        // SAFETY: cuStreamQuery on a live stream.
        let running = unsafe { sys::cuStreamQuery(self.stream.cu_stream()) }
            == sys::CUresult::CUDA_ERROR_NOT_READY;
        // A copy on another stream: the hold's stream is busy with the kernel.
        let side = self.stream.context().new_stream().unwrap();
        let one = 1u32;
        // SAFETY: 4 bytes from a live host word into the stop word; synchronised before `one`
        // goes out of scope, and the kernel is done before the word is freed.
        unsafe {
            result::memcpy_htod_async(self.stop, std::slice::from_ref(&one), side.cu_stream())
                .unwrap();
            side.synchronize().unwrap();
            self.stream.synchronize().unwrap();
            result::free_sync(self.stop).unwrap();
        }
        running
    }
}

impl Drop for SmHold {
    fn drop(&mut self) {
        let _ = self.release_inner();
    }
}
