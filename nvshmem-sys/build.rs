//! Build script of nvshmem-sys.
//!
//! 1. Finds NVSHMEM and CUDA (see `find_nvshmem` / `find_cuda` for the search order).
//! 2. Generates bindings for NVSHMEM's host API and the project's shim (`device/nvshmem_rs.h`).
//! 3. Compiles every `device/*.cu` with `nvcc -rdc=true`, device-links them once together with
//!    `libnvshmem_device.a`, archives the result and links it, the CUDA runtime (static) and
//!    `libnvshmem_host.so.3` into every binary that uses this crate.
//!
//! Everything that calls NVSHMEM device functions must sit in that single device link: NVSHMEM's
//! init registers the device state of the module it is linked into.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

/// Where `scripts/setup_env.sh` writes its env file, relative to the workspace root.
const SETUP_ENV_FILE: &str = ".deps/env.sh";
const SETUP_HINT: &str =
    "run `scripts/setup_env.sh` (or `scripts/setup_env.sh --system` to use an \
                          existing install) and `source .deps/env.sh`";
const DEFAULT_ARCHS: &str = "80,90";
/// Install places of NVIDIA's tarballs and Debian/Ubuntu packages.
const USUAL_NVSHMEM_HOMES: [&str; 4] = [
    "/usr/local/nvshmem",
    "/opt/nvidia/nvshmem",
    "/usr/lib/x86_64-linux-gnu/nvshmem/13",
    "/usr/lib/x86_64-linux-gnu/nvshmem/12",
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir
        .parent()
        .expect("nvshmem-sys sits inside the workspace")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let device_dir = root.join("device");

    for var in [
        "NVSHMEM_HOME",
        "CUDA_HOME",
        "CUDA_PATH",
        "NVSHMEM_RS_NVCC",
        "NVSHMEM_RS_CUDA_ARCHS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-env-changed=NVCC_CCBIN");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", device_dir.display());

    let setup = SetupFile::read(&root.join(SETUP_ENV_FILE));
    let nvshmem = find_nvshmem(&setup).unwrap_or_else(|msg| fail(&msg));
    let cuda = find_cuda(&setup).unwrap_or_else(|msg| fail(&msg));
    for path in [
        nvshmem.include.join("non_abi/nvshmem_version.h"),
        nvshmem.lib.join("libnvshmem_device.a"),
        cuda.nvcc.clone(),
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }

    let archs = cuda_archs().unwrap_or_else(|msg| fail(&msg));
    generate_bindings(&device_dir, &nvshmem, &cuda, &out_dir);
    let objects = compile_device_code(&device_dir, &nvshmem, &cuda, &archs, &out_dir);
    archive(&objects, &out_dir.join("libnvshmem_rs_device.a"));
    emit_link_directives(&nvshmem, &cuda, &out_dir);
    // For crates that compile their own (non-NVSHMEM) kernels with the same compiler and
    // architectures: DEP_NVSHMEM_NVCC and DEP_NVSHMEM_CUDA_ARCHS in their build scripts.
    println!("cargo:nvcc={}", cuda.nvcc.display());
    let archs: Vec<String> = archs.iter().map(u32::to_string).collect();
    println!("cargo:cuda_archs={}", archs.join(","));
}

/// Prints one build error and stops. Cargo shows the build script's stderr.
fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    exit(1);
}

/// `KEY="value"` exports from the env file of `scripts/setup_env.sh`, if it was run.
struct SetupFile {
    path: PathBuf,
    vars: Vec<(String, String)>,
}

impl SetupFile {
    fn read(path: &Path) -> SetupFile {
        let text = fs::read_to_string(path).unwrap_or_default();
        if !text.is_empty() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
        let vars = text
            .lines()
            .filter_map(|line| line.trim().strip_prefix("export "))
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches(['"', '\'']).to_string()))
            .collect();
        SetupFile {
            path: path.to_path_buf(),
            vars,
        }
    }

    fn get(&self, key: &str) -> Option<PathBuf> {
        self.vars
            .iter()
            .find(|(k, v)| k == key && !v.contains('$'))
            .map(|(_, v)| PathBuf::from(v))
    }
}

struct Nvshmem {
    include: PathBuf,
    lib: PathBuf,
}

struct Cuda {
    include: PathBuf,
    lib: PathBuf,
    nvcc: PathBuf,
}

fn env_path(var: &str) -> Option<PathBuf> {
    env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// NVSHMEM: `NVSHMEM_HOME`, else the set-up prefix, else the usual install places.
fn find_nvshmem(setup: &SetupFile) -> Result<Nvshmem, String> {
    if let Some(home) = env_path("NVSHMEM_HOME") {
        return nvshmem_at(&home).map_err(|why| {
            format!(
                "NVSHMEM_HOME={} is not a usable NVSHMEM install: {why}. Point it at an NVSHMEM \
                 install, or unset it and {SETUP_HINT}.",
                home.display()
            )
        });
    }
    let candidates = setup
        .get("NVSHMEM_HOME")
        .into_iter()
        .chain(USUAL_NVSHMEM_HOMES.map(PathBuf::from));
    for home in candidates {
        if let Ok(found) = nvshmem_at(&home) {
            return Ok(found);
        }
    }
    Err(format!(
        "NVSHMEM not found (looked at $NVSHMEM_HOME, {} and {}). Set NVSHMEM_HOME to an NVSHMEM \
         install (with include/nvshmem.h and lib/libnvshmem_device.a), or {SETUP_HINT}.",
        setup.path.display(),
        USUAL_NVSHMEM_HOMES.join(", ")
    ))
}

fn nvshmem_at(home: &Path) -> Result<Nvshmem, String> {
    let include = home.join("include");
    let lib = home.join("lib");
    for needed in [
        include.join("nvshmem.h"),
        lib.join("libnvshmem_device.a"),
        lib.join("libnvshmem_host.so.3"),
    ] {
        if !needed.exists() {
            return Err(format!("{} is missing", needed.display()));
        }
    }
    Ok(Nvshmem { include, lib })
}

/// CUDA: `CUDA_HOME` (or `CUDA_PATH`), else `nvcc` on PATH, else the set-up prefix, else
/// /usr/local/cuda. `NVSHMEM_RS_NVCC` names the compiler when it lives outside that toolkit
/// (`setup_env.sh --cuda 12`: PyPI ships no CUDA 12 nvcc).
fn find_cuda(setup: &SetupFile) -> Result<Cuda, String> {
    let nvcc_override = env_path("NVSHMEM_RS_NVCC").or_else(|| setup.get("NVSHMEM_RS_NVCC"));
    let explicit = env_path("CUDA_HOME").or_else(|| env_path("CUDA_PATH"));
    let from_path = || {
        println!("cargo:rerun-if-env-changed=PATH");
        which("nvcc")
            .and_then(|nvcc| fs::canonicalize(nvcc).ok())
            .and_then(|nvcc| nvcc.parent()?.parent().map(Path::to_path_buf))
    };
    let home = match explicit {
        Some(home) => home,
        None => from_path()
            .or_else(|| setup.get("CUDA_HOME"))
            .or_else(|| Some(PathBuf::from("/usr/local/cuda")).filter(|p| p.exists()))
            .ok_or_else(|| {
                format!(
                    "CUDA toolkit not found (looked at $CUDA_HOME, nvcc on PATH, {} and \
                     /usr/local/cuda). Set CUDA_HOME to a CUDA 12 or 13 toolkit, or {SETUP_HINT}.",
                    setup.path.display()
                )
            })?,
    };
    let include = home.join("include");
    let nvcc = nvcc_override.unwrap_or_else(|| home.join("bin/nvcc"));
    let lib = ["lib64", "lib"]
        .map(|d| home.join(d))
        .into_iter()
        .find(|d| d.join("libcudart_static.a").exists());
    let unusable = |why: String| {
        format!(
            "the CUDA toolkit at {} is not usable: {why}. Set CUDA_HOME to a CUDA 12 or 13 \
             toolkit, or {SETUP_HINT}.",
            home.display()
        )
    };
    if !include.join("cuda_runtime.h").exists() {
        return Err(unusable(format!(
            "{}/cuda_runtime.h is missing",
            include.display()
        )));
    }
    if !nvcc.exists() {
        return Err(unusable(format!("{} is missing", nvcc.display())));
    }
    let lib = lib.ok_or_else(|| unusable("no lib64/ or lib/ with libcudart_static.a".into()))?;
    Ok(Cuda { include, lib, nvcc })
}

fn which(program: &str) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Compute capabilities to build for: `NVSHMEM_RS_CUDA_ARCHS` ("80,90" or "80;90"), default sm_80
/// (A100) and sm_90 (H100/H200). NVSHMEM needs 7.0 or newer; the project supports 8.0 and newer.
fn cuda_archs() -> Result<Vec<u32>, String> {
    let spec = env::var("NVSHMEM_RS_CUDA_ARCHS").unwrap_or_else(|_| DEFAULT_ARCHS.into());
    let archs: Result<Vec<u32>, _> = spec
        .split([',', ';', ' '])
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_start_matches("sm_").parse::<u32>())
        .collect();
    match archs {
        Ok(a) if !a.is_empty() && a.iter().all(|&x| x >= 80) => Ok(a),
        _ => Err(format!(
            "NVSHMEM_RS_CUDA_ARCHS={spec:?} is not a list of compute capabilities >= 80 \
             (e.g. \"80,90\")"
        )),
    }
}

fn gencode_flags(archs: &[u32]) -> Vec<String> {
    archs
        .iter()
        .map(|a| format!("-gencode=arch=compute_{a},code=sm_{a}"))
        .collect()
}

fn generate_bindings(device_dir: &Path, nvshmem: &Nvshmem, cuda: &Cuda, out_dir: &Path) {
    // One wrapper over every header in device/: each .cu file declares its entry points in a
    // header of the same name.
    let mut headers: Vec<PathBuf> = fs::read_dir(device_dir)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", device_dir.display())))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "h"))
        .collect();
    headers.sort();
    let wrapper: String = headers
        .iter()
        .map(|h| format!("#include \"{}\"\n", h.display()))
        .collect();
    let bindings = bindgen::Builder::default()
        .header_contents("nvshmem_rs_wrapper.h", &wrapper)
        // NVSHMEM's host headers are C++ (bool, static_assert); the entry points bound here are
        // all extern "C".
        .clang_args(["-x", "c++", "-std=c++17"])
        .clang_arg(format!("-I{}", nvshmem.include.display()))
        .clang_arg(format!("-I{}", cuda.include.display()))
        .allowlist_function("nvshmem_.*|nvshmemx_.*|nvshmemrs_.*")
        // `flags` is the unnamed-looking enum of NVSHMEMX_INIT_* init flags.
        .allowlist_type("nvshmem_.*|nvshmemx_.*|flags")
        .allowlist_var("NVSHMEM_.*|NVSHMEMX_.*|NVSHMEMRS_.*")
        // Device-only and inline entry points are not in the host library.
        .blocklist_function("nvshmemi_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .parse_callbacks(Box::new(
            bindgen::CargoCallbacks::new().rerun_on_header_files(false),
        ))
        .generate()
        .unwrap_or_else(|e| {
            fail(&format!(
                "bindgen could not parse the NVSHMEM headers in {}: {e}",
                nvshmem.include.display()
            ))
        });
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("write bindings.rs");
}

/// Compiles each `device/*.cu` to a relocatable object, then device-links all of them once with
/// libnvshmem_device.a. Returns the host objects plus the device-link object.
fn compile_device_code(
    device_dir: &Path,
    nvshmem: &Nvshmem,
    cuda: &Cuda,
    archs: &[u32],
    out_dir: &Path,
) -> Vec<PathBuf> {
    let mut sources: Vec<PathBuf> = fs::read_dir(device_dir)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", device_dir.display())))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    let gencode = gencode_flags(archs);
    let obj_dir = out_dir.join("device");
    fs::create_dir_all(&obj_dir).unwrap();

    let mut objects = Vec::new();
    for src in &sources {
        let obj = obj_dir.join(src.file_stem().unwrap()).with_extension("o");
        let mut cmd = nvcc(cuda);
        cmd.args([
            "-rdc=true",
            "-c",
            "-O3",
            "-std=c++17",
            "-Xcompiler",
            "-fPIC",
        ])
        .args(&gencode)
        .arg(format!("-I{}", nvshmem.include.display()))
        .arg(format!("-I{}", device_dir.display()))
        .arg("-o")
        .arg(&obj)
        .arg(src);
        run(
            &mut cmd,
            &format!("nvcc could not compile {}", src.display()),
        );
        objects.push(obj);
    }

    let dlink = obj_dir.join("nvshmem_rs_dlink.o");
    let mut cmd = nvcc(cuda);
    cmd.args(["-dlink", "-Xcompiler", "-fPIC"])
        .args(&gencode)
        .args(&objects)
        .arg(format!("-L{}", nvshmem.lib.display()))
        .arg("-lnvshmem_device")
        .arg("-o")
        .arg(&dlink);
    run(
        &mut cmd,
        "nvcc could not device-link device/*.cu with libnvshmem_device.a",
    );
    objects.push(dlink);
    objects
}

fn nvcc(cuda: &Cuda) -> Command {
    // nvcc uses its own toolkit's headers: its front end and crt headers must match (with
    // NVSHMEM_RS_NVCC the runtime linked later may be an older CUDA 12 one).
    let mut cmd = Command::new(&cuda.nvcc);
    if let Ok(ccbin) = env::var("NVCC_CCBIN") {
        cmd.arg(format!("-ccbin={ccbin}"));
    }
    cmd
}

fn run(cmd: &mut Command, what: &str) {
    eprintln!("running: {cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => fail(&format!("{what} ({s}); the command is printed above")),
        Err(e) => fail(&format!(
            "{what}: cannot start {:?}: {e}",
            cmd.get_program()
        )),
    }
}

fn archive(objects: &[PathBuf], lib: &Path) {
    let _ = fs::remove_file(lib);
    let mut ar = cc::Build::new().get_archiver();
    ar.arg("crs").arg(lib).args(objects);
    run(&mut ar, "could not archive the device objects");
}

fn emit_link_directives(nvshmem: &Nvshmem, cuda: &Cuda, out_dir: &Path) {
    println!("cargo:rustc-link-search=native={}", out_dir.display());
    println!("cargo:rustc-link-search=native={}", nvshmem.lib.display());
    println!("cargo:rustc-link-search=native={}", cuda.lib.display());
    println!("cargo:rustc-link-lib=static=nvshmem_rs_device");
    println!("cargo:rustc-link-lib=static=nvshmem_device");
    println!("cargo:rustc-link-lib=static=cudadevrt");
    println!("cargo:rustc-link-lib=static=cudart_static");
    // The wheels ship only the versioned name, so name the file itself.
    println!("cargo:rustc-link-lib=dylib:+verbatim=libnvshmem_host.so.3");
    for lib in ["stdc++", "dl", "rt", "pthread"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    // Dependents (DEP_NVSHMEM_LIB_DIR) add the rpath to their binaries: a library crate's
    // rustc-link-arg does not reach its dependents' links.
    println!("cargo:lib_dir={}", nvshmem.lib.display());
}
