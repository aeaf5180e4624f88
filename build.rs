//! Gives this crate's binaries, examples and tests an rpath to the NVSHMEM library directory that
//! nvshmem-sys linked against, so they start without LD_LIBRARY_PATH on the build machine.
//! Elsewhere LD_LIBRARY_PATH (searched first) points at that machine's NVSHMEM.
//! It also passes on the compute capabilities nvshmem-sys built device code for
//! (NVSHMEM_RS_BUILT_ARCHS), so that init refuses a GPU the binary has no kernels for.
fn main() {
    if let Ok(archs) = std::env::var("DEP_NVSHMEM_CUDA_ARCHS") {
        println!("cargo:rustc-env=NVSHMEM_RS_BUILT_ARCHS={archs}");
    }
    if let Ok(dir) = std::env::var("DEP_NVSHMEM_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
