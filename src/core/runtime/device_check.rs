//! Checks that this GPU and the loaded NVSHMEM library can run the binary's device code, and
//! the device state self-check.

use super::Nvshmem;
use crate::core::error::{Error, Result};
use crate::core::result;
use crate::core::MIN_COMPUTE_CAPABILITY;

impl Nvshmem {
    /// Runs one device thread that uses NVSHMEM's device API (my_pe, n_pes, a put to itself) and
    /// checks what it saw. Fails when the device state was not initialised for this binary's
    /// device-linked module.
    pub fn device_self_check(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: NVSHMEM is initialised while self lives; self is !Send, so this is the
        // thread that holds the handle; the check's allocation is collective like every
        // method that allocates (every PE calls it at the same point).
        let (pe, n, value) = unsafe { result::device_self_check() }?;
        let expected = (self.my_pe, self.n_pes, 1000 + self.my_pe);
        if (pe, n, value) == expected {
            Ok(())
        } else {
            Err(Error::DeviceStateMismatch {
                expected,
                seen: (pe, n, value),
            })
        }
    }
}

/// Refuses GPUs below [`MIN_COMPUTE_CAPABILITY`] before NVSHMEM touches them.
pub(super) fn check_compute_capability(device: i32) -> Result<()> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    cudarc::driver::result::init()?;
    let dev = cudarc::driver::result::device::get(device)?;
    // SAFETY: a device handle just obtained; plain attribute queries.
    let (major, minor) = unsafe {
        (
            cudarc::driver::result::device::get_attribute(
                dev,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            )?,
            cudarc::driver::result::device::get_attribute(
                dev,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            )?,
        )
    };
    compute_capability_supported(device, (major, minor), BUILT_ARCHS, || {
        cudarc::driver::result::device::get_name(dev).unwrap_or_else(|_| "unknown".into())
    })
}

/// The compute capabilities the device code was built for ("80,90"), as nvshmem-sys's build
/// script reported them (build.rs passes them on); None when it did not.
const BUILT_ARCHS: Option<&str> = option_env!("NVSHMEM_RS_BUILT_ARCHS");

/// The check behind [`check_compute_capability`], without a GPU: at least
/// [`MIN_COMPUTE_CAPABILITY`], and device code in the binary the GPU can run. A cubin for
/// sm_XY runs on GPUs of major X and minor Y or more (so sm_80 code runs on 8.6 and 8.9, but
/// neither sm_80 nor sm_90 code runs on 10.0 or 12.0).
fn compute_capability_supported(
    device: i32,
    (major, minor): (i32, i32),
    built: Option<&str>,
    name: impl FnOnce() -> String,
) -> Result<()> {
    if (major, minor) < MIN_COMPUTE_CAPABILITY {
        return Err(Error::ComputeCapability {
            device,
            name: name(),
            major,
            minor,
        });
    }
    let Some(built) = built else { return Ok(()) };
    let archs: Vec<i32> = built
        .split([',', ';'])
        .filter_map(|a| a.trim().parse().ok())
        .collect();
    if archs.iter().any(|&a| a / 10 == major && a % 10 <= minor) {
        return Ok(());
    }
    Err(Error::UnsupportedArchitecture {
        device,
        name: name(),
        major,
        minor,
        built: archs
            .iter()
            .map(|a| format!("sm_{a}"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Refuses to run with an NVSHMEM host library of another version than the headers and device
/// library the binary was built with: their device state layouts differ.
pub(super) fn check_library_version(
    compiled: (i32, i32, i32),
    loaded: (i32, i32, i32),
) -> Result<()> {
    if compiled == loaded {
        return Ok(());
    }
    Err(Error::LibraryVersion {
        compiled: crate::core::version_string(compiled),
        loaded: crate::core::version_string(loaded),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_below_compute_capability_8_are_refused() {
        let built = Some("80,90");
        assert!(compute_capability_supported(0, (8, 0), built, || "A100".into()).is_ok());
        assert!(compute_capability_supported(0, (9, 0), built, || "H200".into()).is_ok());
        let err =
            compute_capability_supported(1, (7, 0), built, || "Tesla V100".into()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("7.0") && text.contains("8.0") && text.contains("Tesla V100"),
            "{text}"
        );
    }

    #[test]
    fn gpus_without_device_code_in_the_binary_are_refused_at_init() {
        let built = Some("80,90");
        // sm_80 code runs on every 8.x GPU.
        assert!(compute_capability_supported(0, (8, 6), built, || "A40".into()).is_ok());
        assert!(compute_capability_supported(0, (8, 9), built, || "L40S".into()).is_ok());
        for (cc, name) in [((10, 0), "B200"), ((12, 0), "RTX PRO 6000")] {
            let err = compute_capability_supported(2, cc, built, || name.into()).unwrap_err();
            assert!(
                matches!(err, Error::UnsupportedArchitecture { .. }),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(
                text.contains("sm_80, sm_90")
                    && text.contains(name)
                    && text.contains("NVSHMEM_RS_CUDA_ARCHS"),
                "{text}"
            );
        }
        // A binary built for 9.0 alone does not run on 8.0.
        assert!(compute_capability_supported(0, (8, 0), Some("90"), || "A100".into()).is_err());
        // The build script of this very build said what it carries.
        assert!(
            BUILT_ARCHS.is_some_and(|a| a.contains("90")),
            "{BUILT_ARCHS:?}"
        );
    }

    #[test]
    fn another_nvshmem_library_version_is_refused_by_name() {
        assert!(check_library_version((3, 4, 5), (3, 4, 5)).is_ok());
        let err = check_library_version((3, 4, 5), (3, 3, 9)).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::LibraryVersion { .. }), "{err:?}");
        assert!(
            text.contains("3.4.5") && text.contains("3.3.9") && text.contains("LD_LIBRARY_PATH"),
            "{text}"
        );
    }
}
