//! The `Nvshmem` runtime handle: initialises NVSHMEM once per process and finalises it on Drop.

use crate::error::{Error, Result};
use crate::result::{self, CudaInfo};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set while a handle exists; NVSHMEM supports one init per process.
static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// An initialised NVSHMEM runtime. Dropping it finalises NVSHMEM exactly once.
#[derive(Debug)]
pub struct Nvshmem {
    my_pe: i32,
    n_pes: i32,
    device: i32,
    cuda: CudaInfo,
}

impl Nvshmem {
    /// Initialises this process as the only PE, on CUDA device 0.
    ///
    /// Fails with a typed error (never aborts) when there is no driver or device, when NVSHMEM
    /// is already initialised, or when NVSHMEM's own init fails.
    pub fn init_single_pe() -> Result<Nvshmem> {
        let cuda = result::cuda_probe()?;
        if INITIALIZED.swap(true, Ordering::SeqCst) {
            return Err(Error::AlreadyInitialized);
        }
        let device = 0;
        let init = || -> Result<()> {
            // NVSHMEM binds to the current device: set it first (INSTALL.md, illegal address).
            result::cuda_set_device(device)?;
            let id = result::get_unique_id()?;
            result::init_with_unique_id(0, 1, &id)
        };
        if let Err(e) = init() {
            INITIALIZED.store(false, Ordering::SeqCst);
            return Err(e);
        }
        Ok(Nvshmem {
            my_pe: result::my_pe(),
            n_pes: result::n_pes(),
            device,
            cuda,
        })
    }

    /// This PE's number, 0 ..= n_pes - 1.
    pub fn my_pe(&self) -> i32 {
        self.my_pe
    }

    /// Number of PEs in the job.
    pub fn n_pes(&self) -> i32 {
        self.n_pes
    }

    /// The CUDA device this PE runs on.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// Runs one device thread that uses NVSHMEM's device API (my_pe, n_pes, a put to itself) and
    /// checks what it saw. Fails when the device state was not initialised for this binary's
    /// device-linked module.
    pub fn device_self_check(&self) -> Result<()> {
        let (pe, n, value) = result::device_self_check()?;
        if (pe, n, value) == (self.my_pe, self.n_pes, 1000 + self.my_pe) {
            Ok(())
        } else {
            Err(Error::DeviceStateMismatch {
                expected: (self.my_pe, self.n_pes, 1000 + self.my_pe),
                seen: (pe, n, value),
            })
        }
    }

    /// Driver and runtime versions found at init.
    pub fn cuda_info(&self) -> CudaInfo {
        self.cuda
    }
}

impl Drop for Nvshmem {
    fn drop(&mut self) {
        // SAFETY: the handle exists only after a successful init, and Drop runs once.
        unsafe { result::finalize() };
        INITIALIZED.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_without_gpu_returns_error_and_can_be_retried() {
        if std::path::Path::new("/dev/nvidiactl").exists() {
            eprintln!("skipped: this machine has an NVIDIA driver");
            return;
        }
        for _ in 0..2 {
            let err = Nvshmem::init_single_pe().unwrap_err();
            assert!(err.to_string().contains("no CUDA"), "{err}");
        }
        assert!(!INITIALIZED.load(Ordering::SeqCst));
    }
}
