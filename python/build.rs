//! Gives the extension module an rpath to the NVSHMEM library directory that nvshmem-sys linked
//! against, so that `import nvshmem_rs` finds libnvshmem_host.so.3 without LD_LIBRARY_PATH on
//! the build machine. Elsewhere LD_LIBRARY_PATH (searched first) points at that machine's NVSHMEM.
fn main() {
    if let Ok(dir) = std::env::var("DEP_NVSHMEM_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
