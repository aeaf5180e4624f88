//! Build script of nvshmem-sys.
//!
//! 1. Finds NVSHMEM and CUDA (see `find_nvshmem` / `find_cuda` for the search order).
//! 2. Generates bindings for NVSHMEM's host API and the project's own entry points: `device/abi.h`
//!    (codes, limits and structs shared with Rust), the other `.h` files under `device/`, and the
//!    `extern "C"` definitions in `.cu` files that no header declares (build_support/entries.rs).
//! 3. Compiles every `.cu` under `device/` (`device/bench/` only with the `bench` feature) with
//!    `nvcc -rdc=true`, one nvcc per job slot, skipping objects that are still current;
//!    device-links them once together with `libnvshmem_device.a`, archives the result and links
//!    it, the CUDA runtime (static) and `libnvshmem_host.so.3` into every binary that uses this
//!    crate.
//!
//! Everything that calls NVSHMEM device functions must sit in that single device link: NVSHMEM's
//! init registers the device state of the module it is linked into.

use std::collections::BTreeSet;
use std::env;
use std::ffi::OsString;
use std::fs;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{exit, Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;

#[path = "build_support/entries.rs"]
mod entries;
#[path = "build_support/toolkit.rs"]
mod toolkit;

/// Where `scripts/setup_env.sh` writes its env file, relative to the workspace root.
const SETUP_ENV_FILE: &str = ".deps/env.sh";
const SETUP_HINT: &str =
    "run `scripts/setup_env.sh` (or `scripts/setup_env.sh --system` to use an \
                          existing install) and `source .deps/env.sh`";
const DEFAULT_ARCHS: &str = "80,90";
/// Tool code under `device/`, compiled only with the `bench` feature.
const BENCH_DIR: &str = "bench";
/// Install places of NVIDIA's tarballs and of its Debian/Ubuntu and RPM packages (whose headers
/// sit apart, in /usr/include/nvshmem_<major>: toolkit::layouts).
const USUAL_NVSHMEM_HOMES: [&str; 8] = [
    "/usr/local/nvshmem",
    "/opt/nvidia/nvshmem",
    "/usr/lib/x86_64-linux-gnu/nvshmem/13",
    "/usr/lib/x86_64-linux-gnu/nvshmem/12",
    "/usr/lib/aarch64-linux-gnu/nvshmem/13",
    "/usr/lib/aarch64-linux-gnu/nvshmem/12",
    "/usr/lib64/nvshmem/13",
    "/usr/lib64/nvshmem/12",
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
        "NVSHMEM_RS_JOBS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-env-changed=NVCC_CCBIN");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", device_dir.display());
    let device_files = files_under(&device_dir);
    for file in &device_files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    // Tool code stays out of the library unless asked for.
    let bench = env::var_os("CARGO_FEATURE_BENCH").is_some();
    let used: Vec<&Path> = device_files
        .iter()
        .map(PathBuf::as_path)
        .filter(|f| bench || !f.starts_with(device_dir.join(BENCH_DIR)))
        .collect();
    let with_ext = |ext: &str| -> Vec<&Path> {
        used.iter()
            .copied()
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .collect()
    };

    let setup = SetupFile::read(&root.join(SETUP_ENV_FILE));
    let nvshmem = find_nvshmem(&setup).unwrap_or_else(|msg| fail(&msg));
    let cuda = find_cuda(&setup).unwrap_or_else(|msg| fail(&msg));
    if let Some(msg) = cuda_mismatch(&cuda, &nvshmem) {
        fail(&msg);
    }
    for path in [
        nvshmem.include.join("non_abi/nvshmem_version.h"),
        nvshmem.lib.join("libnvshmem_device.a"),
        cuda.nvcc.clone(),
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }

    let archs = cuda_archs().unwrap_or_else(|msg| fail(&msg));
    let jobs = jobs().unwrap_or_else(|msg| fail(&msg));
    generate_bindings(
        &device_dir,
        (&with_ext("h"), &with_ext("cu")),
        &nvshmem,
        &cuda,
        &out_dir,
    );
    let objects = compile_device_code(
        &device_dir,
        &with_ext("cu"),
        &nvshmem,
        &cuda,
        &archs,
        jobs,
        &out_dir,
    );
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

/// The NVSHMEM at `home`, in any of its layouts (toolkit::layouts); the first layout's missing
/// file is the error.
fn nvshmem_at(home: &Path) -> Result<Nvshmem, String> {
    let mut first_missing = None;
    for (include, lib) in toolkit::layouts(home) {
        let missing = [
            include.join("nvshmem.h"),
            lib.join("libnvshmem_device.a"),
            lib.join("libnvshmem_host.so.3"),
        ]
        .into_iter()
        .find(|needed| !needed.exists());
        match missing {
            None => return Ok(Nvshmem { include, lib }),
            Some(m) => {
                first_missing.get_or_insert(m);
            }
        }
    }
    Err(format!("{} is missing", first_missing.unwrap().display()))
}

/// The refusal when the toolkit and NVSHMEM are for different CUDA majors (a CUDA 12 module
/// loaded over a CUDA 13 set-up, say), judged from cuda.h and NVSHMEM's version header.
fn cuda_mismatch(cuda: &Cuda, nvshmem: &Nvshmem) -> Option<String> {
    let cuda_major = fs::read_to_string(cuda.include.join("cuda.h"))
        .ok()
        .and_then(|text| toolkit::cuda_major_from_header(&text));
    let version_h =
        fs::read_to_string(nvshmem.include.join("non_abi/nvshmem_version.h")).unwrap_or_default();
    let nvshmem_major = toolkit::nvshmem_cuda_major(&version_h, &nvshmem.lib);
    let home = cuda.include.parent().unwrap_or(&cuda.include);
    toolkit::mismatch(cuda_major, nvshmem_major, home, &nvshmem.lib)
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

/// How many nvcc run at once: `NVSHMEM_RS_JOBS`, else cargo's job count (`NUM_JOBS`), else the
/// machine's available parallelism.
fn jobs() -> Result<usize, String> {
    if let Ok(v) = env::var("NVSHMEM_RS_JOBS") {
        return match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!(
                "NVSHMEM_RS_JOBS={v:?} is not a number of parallel nvcc jobs >= 1 (e.g. \"2\")"
            )),
        };
    }
    let cargo_jobs = env::var("NUM_JOBS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0);
    Ok(cargo_jobs.unwrap_or_else(|| thread::available_parallelism().map_or(1, NonZeroUsize::get)))
}

/// Every file under `dir`, recursively, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let entries =
            fs::read_dir(&d).unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", d.display())));
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn gencode_flags(archs: &[u32]) -> Vec<String> {
    archs
        .iter()
        .map(|a| format!("-gencode=arch=compute_{a},code=sm_{a}"))
        .collect()
}

fn generate_bindings(
    device_dir: &Path,
    (headers, sources): (&[&Path], &[&Path]),
    nvshmem: &Nvshmem,
    cuda: &Cuda,
    out_dir: &Path,
) {
    // One wrapper over every header (.h) under device/: abi.h and the headers that declare entry
    // points. The .cuh files are device code.
    let mut wrapper: String = headers
        .iter()
        .map(|h| format!("#include \"{}\"\n", h.display()))
        .collect();
    // Then the entry points that no header declares (the family's), from their definitions:
    // a new collective's .cu needs no header line.
    let read = |p: &Path| {
        fs::read_to_string(p).unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", p.display())))
    };
    let header_text: Vec<String> = headers.iter().map(|h| read(h)).collect();
    wrapper.push_str("#include <cuda_runtime.h>\nextern \"C\" {\n");
    for src in sources {
        for (name, decl) in entries::definitions(&read(src)) {
            if !header_text.iter().any(|h| entries::declares(h, &name)) {
                wrapper.push_str(&decl);
                wrapper.push('\n');
            }
        }
    }
    wrapper.push_str("}\n");
    let bindings = bindgen::Builder::default()
        .header_contents("nvshmem_rs_wrapper.h", &wrapper)
        // NVSHMEM's host headers are C++ (bool, static_assert); the entry points bound here are
        // all extern "C".
        .clang_args(["-x", "c++", "-std=c++17"])
        .clang_arg(format!("-I{}", nvshmem.include.display()))
        .clang_arg(format!("-I{}", cuda.include.display()))
        // The headers include abi.h relative to device/, as nvcc sees them.
        .clang_arg(format!("-I{}", device_dir.display()))
        .allowlist_function("nvshmem_.*|nvshmemx_.*|nvshmemrs_.*")
        // `flags` is the unnamed-looking enum of NVSHMEMX_INIT_* init flags.
        .allowlist_type("nvshmem_.*|nvshmemx_.*|nvshmemrs_.*|flags")
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

/// Compiles each source (a `.cu` under `device/`) to a relocatable object, `jobs` nvcc at a time,
/// then device-links all of them once with libnvshmem_device.a. Returns the host objects plus the
/// device-link object.
fn compile_device_code(
    device_dir: &Path,
    sources: &[&Path],
    nvshmem: &Nvshmem,
    cuda: &Cuda,
    archs: &[u32],
    jobs: usize,
    out_dir: &Path,
) -> Vec<PathBuf> {
    let gencode = gencode_flags(archs);
    let obj_dir = out_dir.join("device");
    fs::create_dir_all(&obj_dir).unwrap();
    // Objects and stamps from an earlier run with other nvcc or NVSHMEM headers are stale even
    // where the sources are not.
    let toolchain = [
        cuda.nvcc.clone(),
        nvshmem.include.join("non_abi/nvshmem_version.h"),
    ];

    let mut steps = Vec::new();
    let mut names = BTreeSet::new();
    for &src in sources {
        // coll/oneshot.cu -> coll_oneshot.o: sources of the same name in different folders
        // must not share an object.
        let rel = src.strip_prefix(device_dir).unwrap_or(src);
        let name: Vec<String> = rel
            .with_extension("o")
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        let obj = obj_dir.join(name.join("_"));
        if !names.insert(obj.clone()) {
            fail(&format!(
                "two sources under {} map to the object {}: rename one",
                device_dir.display(),
                obj.display()
            ));
        }
        let mut args: Vec<OsString> = [
            "-rdc=true",
            "-c",
            "-O3",
            "-std=c++17",
            "-Xcompiler",
            "-fPIC",
        ]
        .map(OsString::from)
        .into();
        args.extend(gencode.iter().map(OsString::from));
        args.push(format!("-I{}", nvshmem.include.display()).into());
        args.push(format!("-I{}", device_dir.display()).into());
        args.extend(["-o".into(), obj.clone().into(), src.into()]);
        let mut inputs = BTreeSet::new();
        inputs.insert(src.to_path_buf());
        local_includes(src, device_dir, &mut inputs);
        inputs.extend(toolchain.iter().cloned());
        steps.push(Step {
            args,
            inputs: inputs.into_iter().collect(),
            output: obj,
            what: format!("nvcc could not compile {}", src.display()),
        });
    }
    run_parallel(cuda, &steps, jobs);

    let mut objects: Vec<PathBuf> = steps.iter().map(|s| s.output.clone()).collect();
    let dlink = obj_dir.join("nvshmem_rs_dlink.o");
    let mut args: Vec<OsString> = ["-dlink", "-Xcompiler", "-fPIC"].map(OsString::from).into();
    args.extend(gencode.iter().map(OsString::from));
    args.extend(objects.iter().map(OsString::from));
    args.push(format!("-L{}", nvshmem.lib.display()).into());
    args.extend(["-lnvshmem_device".into(), "-o".into(), dlink.clone().into()]);
    let mut inputs = objects.clone();
    inputs.push(nvshmem.lib.join("libnvshmem_device.a"));
    inputs.extend(toolchain.iter().cloned());
    let link = Step {
        args,
        inputs,
        output: dlink.clone(),
        what: "nvcc could not device-link device/*.cu with libnvshmem_device.a".into(),
    };
    run_parallel(cuda, std::slice::from_ref(&link), 1);
    objects.push(dlink);
    objects
}

/// The files under `device/` that `file` includes with `#include "..."`, directly or through
/// others, added to `found`. Resolved as nvcc does: next to the including file, then in
/// `device/` (its -I). Includes inside `#if` count too: a needless rebuild at worst.
fn local_includes(file: &Path, device_dir: &Path, found: &mut BTreeSet<PathBuf>) {
    let text = fs::read_to_string(file).unwrap_or_default();
    for line in text.lines() {
        let Some(directive) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let Some(rest) = directive.trim_start().strip_prefix("include") else {
            continue;
        };
        // Once one header of a unit has skipped NVSHMEM's device collectives, <nvshmem.h>
        // would pull in headers that need them (see core/nvshmem_device.cuh).
        let system = rest
            .trim_start()
            .strip_prefix('<')
            .and_then(|r| r.split('>').next());
        if matches!(system, Some("nvshmem.h" | "nvshmemx.h")) {
            fail(&format!(
                "{} includes <{}>: device code includes \"core/nvshmem_device.cuh\" instead \
                 (the NVSHMEM API without its device collectives, which no kernel here calls)",
                file.display(),
                system.unwrap_or_default()
            ));
        }
        let Some(name) = rest
            .trim_start()
            .strip_prefix('"')
            .and_then(|r| r.split('"').next())
        else {
            continue;
        };
        let here = file.parent().unwrap_or(device_dir).join(name);
        let header = if here.is_file() {
            here
        } else {
            device_dir.join(name)
        };
        if header.is_file() && found.insert(header.clone()) {
            local_includes(&header, device_dir, found);
        }
    }
}

/// One nvcc run: `args`, producing `output` from `inputs`.
struct Step {
    args: Vec<OsString>,
    inputs: Vec<PathBuf>,
    output: PathBuf,
    /// The error message if it fails.
    what: String,
}

impl Step {
    /// What the output was made from: the command and every input's modification time. The
    /// output is current while this is what its stamp file says.
    fn fingerprint(&self, cuda: &Cuda) -> String {
        let mut text = format!("{:?}\n", self.command(cuda));
        for input in &self.inputs {
            let mtime = fs::metadata(input).and_then(|m| m.modified()).ok();
            text.push_str(&format!("{} {mtime:?}\n", input.display()));
        }
        text
    }

    fn stamp(&self) -> PathBuf {
        let mut name = self.output.clone().into_os_string();
        name.push(".stamp");
        PathBuf::from(name)
    }

    fn command(&self, cuda: &Cuda) -> Command {
        let mut cmd = nvcc(cuda);
        cmd.args(&self.args);
        cmd
    }
}

/// Runs the steps whose output is not current, `jobs` at a time; stops (after the running ones)
/// at the first failure. nvcc's output is printed whole after each run, so that parallel runs do
/// not interleave.
fn run_parallel(cuda: &Cuda, steps: &[Step], jobs: usize) {
    // Taken before running, so that a source edited during its compile is compiled again.
    let todo: Vec<(&Step, String)> = steps
        .iter()
        .map(|s| (s, s.fingerprint(cuda)))
        .filter(|(s, print)| {
            !(s.output.exists() && fs::read_to_string(s.stamp()).is_ok_and(|old| old == *print))
        })
        .collect();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error = Mutex::new(None::<String>);
    let print = Mutex::new(());
    thread::scope(|scope| {
        for _ in 0..jobs.min(todo.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= todo.len() || failed.load(Ordering::Relaxed) {
                    return;
                }
                let (step, fingerprint) = &todo[i];
                let _ = fs::remove_file(step.stamp());
                let mut cmd = step.command(cuda);
                {
                    let _lock = print.lock().unwrap();
                    eprintln!("running: {cmd:?}");
                }
                let result = cmd.output();
                let _lock = print.lock().unwrap();
                let error = match result {
                    Ok(Output {
                        status,
                        stdout,
                        stderr,
                    }) => {
                        if !stdout.is_empty() || !stderr.is_empty() {
                            eprintln!("output of: {cmd:?}");
                            eprint!("{}", String::from_utf8_lossy(&stdout));
                            eprint!("{}", String::from_utf8_lossy(&stderr));
                        }
                        if status.success() {
                            fs::write(step.stamp(), fingerprint).unwrap_or_else(|e| {
                                fail(&format!("cannot write {}: {e}", step.stamp().display()))
                            });
                            None
                        } else {
                            Some(format!(
                                "{} ({status}); the command is printed above",
                                step.what
                            ))
                        }
                    }
                    Err(e) => Some(format!(
                        "{}: cannot start {:?}: {e}",
                        step.what,
                        cmd.get_program()
                    )),
                };
                if let Some(msg) = error {
                    failed.store(true, Ordering::Relaxed);
                    first_error.lock().unwrap().get_or_insert(msg);
                }
            });
        }
    });
    if let Some(msg) = first_error.into_inner().unwrap() {
        fail(&msg);
    }
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
