//! Compiles every `kernels/*.cu` into a fat binary (one per file, for the architectures
//! nvshmem-sys builds for) and generates `kernels.rs`, which embeds them. These kernels call no
//! NVSHMEM device functions, so they are plain modules loaded with cuModuleLoadData, outside
//! nvshmem-sys's device link.
use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let kernel_dir = manifest.join("kernels");
    println!("cargo:rerun-if-changed={}", kernel_dir.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=NVCC_CCBIN");

    let nvcc = env::var("DEP_NVSHMEM_NVCC").expect("nvshmem-sys exports the nvcc it found");
    let archs = env::var("DEP_NVSHMEM_CUDA_ARCHS").expect("nvshmem-sys exports its CUDA archs");

    let mut sources: Vec<PathBuf> = fs::read_dir(&kernel_dir)
        .expect("gpt/kernels exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    sources.sort();

    let mut table = String::from("/// (module name, fat binary) for every `kernels/*.cu`.\n");
    table.push_str("pub const FATBINS: &[(&str, &[u8])] = &[\n");
    for src in &sources {
        println!("cargo:rerun-if-changed={}", src.display());
        let stem = src.file_stem().unwrap().to_str().unwrap().to_string();
        let out = out_dir.join(format!("{stem}.fatbin"));
        let mut cmd = Command::new(&nvcc);
        if let Ok(ccbin) = env::var("NVCC_CCBIN") {
            cmd.arg(format!("-ccbin={ccbin}"));
        }
        cmd.args(["--fatbin", "-O3", "-std=c++17", "-lineinfo"]);
        for arch in archs.split(',') {
            cmd.arg(format!("-gencode=arch=compute_{arch},code=sm_{arch}"));
        }
        cmd.arg("-I").arg(&kernel_dir);
        cmd.arg("-o").arg(&out).arg(src);
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("cannot run {nvcc}: {e}"));
        assert!(status.success(), "nvcc failed on {}", src.display());
        table.push_str(&format!(
            "    ({stem:?}, include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{stem}.fatbin\"))),\n"
        ));
    }
    table.push_str("];\n");
    fs::write(out_dir.join("kernels.rs"), table).unwrap();

    // Same rpath as the runtime crate's binaries (see ../build.rs).
    if let Ok(dir) = env::var("DEP_NVSHMEM_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
