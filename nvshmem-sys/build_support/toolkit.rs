//! Which CUDA a toolkit and an NVSHMEM install are for, and where NVSHMEM's system packages
//! put their files: pure functions of text and paths, shared by build.rs and its tests.

use std::path::{Path, PathBuf};

/// The CUDA major version `cuda.h` declares (`#define CUDA_VERSION 13000` is 13).
pub fn cuda_major_from_header(cuda_h: &str) -> Option<u32> {
    cuda_h.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("#define"), Some("CUDA_VERSION"), Some(v)) => {
                v.parse::<u32>().ok().map(|v| v / 1000)
            }
            _ => None,
        }
    })
}

/// The CUDA major version an NVSHMEM install was built for: from the toolkit path recorded in
/// `NVSHMEM_BUILD_VARS` (nvshmem_version.h: `CUDA_HOME=.../toolkit/r13.0/...`), else from the
/// install's own path (a `cu13` wheel, a `nvshmem/12` or `nvshmem_12` package directory).
pub fn nvshmem_cuda_major(version_h: &str, install: &Path) -> Option<u32> {
    let from_vars = version_h
        .lines()
        .find(|l| l.contains("NVSHMEM_BUILD_VARS"))
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("CUDA_HOME=")))
        .and_then(|home| {
            home.split('/').find_map(|part| {
                let v = part.strip_prefix('r')?;
                let major = v.split('.').next()?;
                (v.contains('.') && !major.is_empty())
                    .then(|| major.parse::<u32>().ok())
                    .flatten()
            })
        });
    from_vars.or_else(|| {
        install.components().rev().find_map(|c| {
            let part = c.as_os_str().to_str()?;
            let digits = |s: &str| s.parse::<u32>().ok().filter(|v| (10..100).contains(v));
            part.rsplit_once("-cu")
                .and_then(|(_, v)| digits(v))
                .or_else(|| part.strip_prefix("nvshmem_").and_then(digits))
                .or_else(|| digits(part))
        })
    })
}

/// The build's refusal when the toolkit and NVSHMEM were made for different CUDA majors (nvcc
/// of one would device-link the other's library), or None when they agree or one is unknown.
pub fn mismatch(
    cuda: Option<u32>,
    nvshmem: Option<u32>,
    cuda_home: &Path,
    nvshmem_lib: &Path,
) -> Option<String> {
    match (cuda, nvshmem) {
        (Some(c), Some(n)) if c != n => Some(format!(
            "the CUDA toolkit at {} is CUDA {c}, but the NVSHMEM at {} was built for CUDA {n}: \
             nvcc {c} cannot device-link it. Use one CUDA for both: set CUDA_HOME to a CUDA {n} \
             toolkit (or unload the CUDA {c} module), or NVSHMEM_HOME to an NVSHMEM for CUDA {c}",
            cuda_home.display(),
            nvshmem_lib.display()
        )),
        _ => None,
    }
}

/// Where headers and libraries sit for an NVSHMEM home: `home/include` and `home/lib` (tarballs,
/// wheels, the set-up prefix), or, for a system package's library directory
/// `.../nvshmem/<major>`, the headers in `<root>/include/nvshmem_<major>` and the libraries in
/// that directory itself.
pub fn layouts(home: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut out = vec![(home.join("include"), home.join("lib"))];
    let major = home
        .file_name()
        .and_then(|m| m.to_str())
        .filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()));
    let parent = home.parent();
    if let (Some(major), Some(parent)) = (major, parent) {
        if parent.file_name().and_then(|n| n.to_str()) == Some("nvshmem") {
            // /usr/lib/<triple>/nvshmem/<major> (Debian) or /usr/lib64/nvshmem/<major> (RPM):
            // the include root is the prefix of lib/ or lib64/.
            let prefix = parent
                .ancestors()
                .find(|a| {
                    a.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n == "lib" || n == "lib64")
                })
                .and_then(Path::parent);
            if let Some(prefix) = prefix {
                out.push((
                    prefix.join("include").join(format!("nvshmem_{major}")),
                    home.to_path_buf(),
                ));
            }
        }
    }
    out
}
