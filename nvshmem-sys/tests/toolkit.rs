//! The build script's CUDA and NVSHMEM discovery rules (nvshmem-sys/build_support/toolkit.rs).

#[path = "../build_support/toolkit.rs"]
mod toolkit;

use std::path::{Path, PathBuf};
use toolkit::*;

#[test]
fn cuda_h_names_its_major_version() {
    let text = "/* cuda.h */\n#define CUDA_VERSION 13000\n#define __CUDA_API_VERSION 1\n";
    assert_eq!(cuda_major_from_header(text), Some(13));
    assert_eq!(
        cuda_major_from_header("#define CUDA_VERSION 12040"),
        Some(12)
    );
    assert_eq!(cuda_major_from_header("#define CUDA_VERSION_X 1"), None);
}

#[test]
fn nvshmem_says_which_cuda_it_was_built_for() {
    let vars = "#define NVSHMEM_BUILD_VARS \"NVSHMEM_DEBUG=OFF CUDA_HOME=/dvs/p4/build/sw/rel/\
                gpgpu/toolkit/r13.0/build/cuda GDRCOPY_HOME=/x\"";
    assert_eq!(
        nvshmem_cuda_major(vars, Path::new("/opt/whatever")),
        Some(13)
    );
    // No build vars: the install's path says it (wheel, Debian package, RPM package).
    let none = "#define NVSHMEM_VENDOR_MAJOR_VERSION 3";
    for (path, major) in [
        ("/x/.deps/nvshmem-3.4.5-cu12/nvidia/nvshmem", Some(12)),
        ("/usr/lib/x86_64-linux-gnu/nvshmem/13", Some(13)),
        ("/usr/include/nvshmem_12", Some(12)),
        ("/usr/local/nvshmem", None),
    ] {
        assert_eq!(nvshmem_cuda_major(none, Path::new(path)), major, "{path}");
    }
}

#[test]
fn a_cuda_12_toolkit_with_a_cuda_13_nvshmem_is_refused_in_words() {
    let (cuda, lib) = (
        Path::new("/usr/local/cuda-12.4"),
        Path::new("/x/nvshmem/lib"),
    );
    let err = mismatch(Some(12), Some(13), cuda, lib).unwrap();
    assert!(
        err.contains("/usr/local/cuda-12.4 is CUDA 12")
            && err.contains("built for CUDA 13")
            && err.contains("CUDA_HOME to a CUDA 13 toolkit"),
        "{err}"
    );
    assert_eq!(mismatch(Some(13), Some(13), cuda, lib), None);
    assert_eq!(mismatch(None, Some(13), cuda, lib), None);
}

#[test]
fn system_packages_keep_headers_apart_from_libraries() {
    let p = |s: &str| PathBuf::from(s);
    assert_eq!(
        layouts(Path::new("/usr/lib/x86_64-linux-gnu/nvshmem/12")),
        vec![
            (
                p("/usr/lib/x86_64-linux-gnu/nvshmem/12/include"),
                p("/usr/lib/x86_64-linux-gnu/nvshmem/12/lib")
            ),
            (
                p("/usr/include/nvshmem_12"),
                p("/usr/lib/x86_64-linux-gnu/nvshmem/12")
            ),
        ]
    );
    assert_eq!(
        layouts(Path::new("/usr/lib64/nvshmem/13"))[1],
        (p("/usr/include/nvshmem_13"), p("/usr/lib64/nvshmem/13"))
    );
    assert_eq!(layouts(Path::new("/usr/local/nvshmem")).len(), 1);
}
