//! `nvsh doctor`: whether a 2-PE NVSHMEM run can work on this node, and what stands in the way
//! of multi-node runs ([`ib`]: InfiniBand ports, GPUDirect RDMA, NIC placement, transports).
//!
//! Two halves, so that the decisions can be tested without a GPU:
//! - [`gather`] collects facts into a plain [`Report`] (CUDA driver and GPUs through cudarc,
//!   NVLink/PCIe topology through NVML, NVSHMEM versions, MPI, environment). It never panics and
//!   never fails: whatever it cannot find is recorded as such.
//! - [`verdict`] is a pure function from a [`Report`] to [`Check`]s; a 2-PE run can work when no
//!   check is a [`Status::Fail`]. The multi-node checks only warn: one node needs no NIC.
//!
//! Messages name the fix and, where it has one, the row of INSTALL.md's troubleshooting table.

mod check;
pub mod ib;

pub use check::{Check, Status};
use nvshmem::result;
use nvshmem::tools::bootstrap;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::fmt::{self, Write as _};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use nvshmem::MIN_COMPUTE_CAPABILITY;

/// Open MPI's library soname: the MPI this project builds and launches with (INSTALL.md).
pub const LIBMPI_SONAME: &str = "libmpi.so.40";

/// Variables always listed, set or not: they decide where libraries come from and which
/// transports NVSHMEM uses. Every other `NVSHMEM_*` and `NVSH_*` variable is listed when set.
pub const LISTED_ENV: &[&str] = &[
    "CUDA_HOME",
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "NCCL_NVLS_ENABLE",
    "NVSHMEM_DISABLE_NVLS",
    "NVSHMEM_HOME",
    "NVSHMEM_REMOTE_TRANSPORT",
];

/// The launcher's per-process variables (see [`nvshmem::tools::bootstrap`]).
const LAUNCHER_ENV: &[&str] = &[
    bootstrap::ENV_RANK,
    bootstrap::ENV_LOCAL_RANK,
    bootstrap::ENV_WORLD_SIZE,
    bootstrap::ENV_LOCAL_WORLD_SIZE,
    bootstrap::ENV_UNIQUE_ID,
];

/// NVML's NVLINK_MAX_LINKS: links a GPU can have (18 on Hopper and Blackwell).
const NVML_MAX_NVLINKS: u32 = 18;

/// How long `mpirun --version` may take before it is given up on (a broken MPI can hang).
const MPIRUN_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Facts
// ---------------------------------------------------------------------------------------------

/// Everything the doctor found. Plain data: build one by hand to test [`verdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub cuda: Cuda,
    /// The NVIDIA Management Library, used for the link type between GPUs.
    pub nvml: Nvml,
    /// Set when the CUDA runtime found devices but the driver API could not describe them.
    pub gpu_error: Option<String>,
    /// Visible GPUs, in CUDA ordinal order.
    pub gpus: Vec<Gpu>,
    /// Every pair of visible GPUs, `a < b`.
    pub pairs: Vec<Pair>,
    pub nvshmem: NvshmemVersions,
    pub mpi: Mpi,
    /// Listed variables, sorted by name; `None` for unset.
    pub env: Vec<(String, Option<String>)>,
    /// Why `NVSH_BOOTSTRAP` cannot be used, when it is set to something unknown.
    pub bootstrap_error: Option<String>,
    /// What multi-node runs would use: NICs, GPUDirect RDMA, transport plugins.
    pub fabric: ib::Fabric,
}

/// What the CUDA runtime linked into this binary found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cuda {
    Found {
        /// CUDA version the driver supports, e.g. 13000.
        driver_version: i32,
        /// CUDA runtime version linked into this binary.
        runtime_version: i32,
    },
    /// No driver, a driver too old for the runtime, or no device: the error's message.
    Unavailable { error: String },
}

/// NVML, loaded at run time from the driver's `libnvidia-ml.so.1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nvml {
    Loaded {
        /// NVIDIA driver version, e.g. "570.124.06".
        driver_version: String,
    },
    Unavailable {
        error: String,
    },
}

/// One visible GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// CUDA ordinal (after CUDA_VISIBLE_DEVICES).
    pub ordinal: i32,
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    pub memory_bytes: u64,
    /// PCI address, used to find the same GPU in NVML (whose order can differ from CUDA's).
    pub pci: Option<PciAddr>,
}

/// A PCI address (domain, bus, device); function is always 0 for GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PciAddr {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.0",
            self.domain, self.bus, self.device
        )
    }
}

/// How two GPUs are connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// NVLink: `links` direct links between the two, or, through NVSwitch, the active links of
    /// the first GPU (all of which reach the switch fabric).
    NvLink { links: u32, via_switch: bool },
    /// No NVLink: PCIe, with the closest common point of the two GPUs' PCIe paths.
    Pcie { level: PcieLevel },
    /// Could not be determined (NVML missing or a query failed): why.
    Unknown { reason: String },
}

/// Closest common ancestor of two GPUs in the PCIe tree (NVML's topology levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PcieLevel {
    SameBoard,
    SameSwitch,
    MultipleSwitches,
    HostBridge,
    SameNumaNode,
    AcrossSockets,
}

impl PcieLevel {
    pub fn describe(self) -> &'static str {
        match self {
            PcieLevel::SameBoard => "same board",
            PcieLevel::SameSwitch => "same PCIe switch",
            PcieLevel::MultipleSwitches => "several PCIe switches, no host bridge",
            PcieLevel::HostBridge => "host bridge",
            PcieLevel::SameNumaNode => "across host bridges of one CPU socket",
            PcieLevel::AcrossSockets => "across CPU sockets",
        }
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Link::NvLink {
                links,
                via_switch: false,
            } => write!(f, "NVLink, {links} link(s)"),
            Link::NvLink {
                links,
                via_switch: true,
            } => write!(f, "NVLink through NVSwitch, {links} active link(s)"),
            Link::Pcie { level } => write!(f, "PCIe, {}", level.describe()),
            Link::Unknown { reason } => write!(f, "link type unknown ({reason})"),
        }
    }
}

/// Two GPUs, `a < b`, as CUDA ordinals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    pub a: i32,
    pub b: i32,
    /// cuDeviceCanAccessPeer(a, b); `None` when the query failed.
    pub peer_ab: Option<bool>,
    /// cuDeviceCanAccessPeer(b, a).
    pub peer_ba: Option<bool>,
    /// Native atomics between the two (CUDA's P2P attribute); `None` when unknown.
    pub native_atomics: Option<bool>,
    pub link: Link,
}

/// NVSHMEM host library (loaded at run time) against the version compiled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvshmemVersions {
    pub host: (i32, i32, i32),
    pub compiled: (i32, i32, i32),
    /// File the host library was loaded from, when the loader says.
    pub host_path: Option<String>,
}

/// What MPI this node has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mpi {
    /// `mpirun` on PATH.
    pub mpirun: Option<PathBuf>,
    /// First line of `mpirun --version`.
    pub mpirun_version: Option<String>,
    /// Whether [`LIBMPI_SONAME`] could be loaded, and from where (or why not).
    pub libmpi: Library,
    /// Whether this binary was built with the `mpi` feature (MPI bootstrap).
    pub bootstrap_compiled: bool,
}

/// Outcome of loading a shared library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Library {
    Loaded { path: Option<String> },
    Missing { error: String },
}

impl Report {
    /// Value of a listed environment variable (`None` when unset or not listed).
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

// ---------------------------------------------------------------------------------------------
// Decisions
// ---------------------------------------------------------------------------------------------

/// True when no check failed: a 2-PE run can work on this node.
pub fn can_run_two_pes(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.status != Status::Fail)
}

/// The first failed check, the one the last line of the output names.
pub fn first_failure(checks: &[Check]) -> Option<&Check> {
    checks.iter().find(|c| c.status == Status::Fail)
}

/// Decides from the facts alone. A 2-PE run uses GPUs 0 and 1 (local rank selects the GPU), so
/// problems with those are failures and problems with other GPUs are warnings.
pub fn verdict(report: &Report) -> Vec<Check> {
    let mut checks = Vec::new();
    check_cuda(report, &mut checks);
    checks.push(check_nvshmem(&report.nvshmem));
    checks.push(check_mpi(&report.mpi));
    checks.push(check_nvlink_multicast(report));
    checks.push(check_remote_transport(report));
    check_nvsh_env(report, &mut checks);
    checks.extend(ib::checks(&report.fabric, &report.env));
    checks
}

fn check_cuda(report: &Report, checks: &mut Vec<Check>) {
    match &report.cuda {
        Cuda::Unavailable { error } => {
            // Nothing GPU-related can be checked further.
            checks.push(Check::new("cuda driver", Status::Fail, error.clone()));
            return;
        }
        Cuda::Found {
            driver_version,
            runtime_version,
        } => {
            let nvidia = match &report.nvml {
                Nvml::Loaded { driver_version } => format!(" (NVIDIA driver {driver_version})"),
                Nvml::Unavailable { .. } => String::new(),
            };
            checks.push(Check::new(
                "cuda driver",
                Status::Ok,
                format!(
                    "driver supports CUDA {}{nvidia}, this binary's runtime is CUDA {}",
                    result::cuda_version_string(*driver_version),
                    result::cuda_version_string(*runtime_version)
                ),
            ));
        }
    }
    if let Some(e) = &report.gpu_error {
        checks.push(Check::new(
            "gpus",
            Status::Fail,
            format!(
                "the CUDA driver API could not describe the GPUs: {e}; check nvidia-smi and \
                 dmesg for driver errors"
            ),
        ));
        return;
    }
    for gpu in &report.gpus {
        checks.push(check_gpu(gpu));
    }
    checks.push(check_gpu_count(report));
    for pair in &report.pairs {
        checks.push(check_pair(pair));
    }
}

fn check_gpu(gpu: &Gpu) -> Check {
    let (major, minor) = gpu.compute_capability;
    let name = format!("gpu {}", gpu.ordinal);
    let what = format!("{}, compute capability {major}.{minor}", gpu.name);
    if (major, minor) < MIN_COMPUTE_CAPABILITY {
        // A 2-PE run only touches GPUs 0 and 1; a weak GPU further down matters for larger runs.
        let (status, scope) = if gpu.ordinal < 2 {
            (Status::Fail, "")
        } else {
            (Status::Warn, " (a 2-PE run uses GPUs 0 and 1 only)")
        };
        return Check::new(
            name,
            status,
            format!(
                "{what}: below 8.0, not supported. NVSHMEM device code here is built for sm_80 \
                 and sm_90, and NVSHMEM's device library needs 8.0 or newer; V100 (7.0) and T4 \
                 (7.5) are not supported. Use A100, H100, H200 or newer (INSTALL.md \
                 troubleshooting, compute capability row){scope}"
            ),
        );
    }
    if major >= 10 {
        // The build emits SASS only (no PTX), and sm_90 SASS does not run on 10.x or newer.
        return Check::new(
            name,
            Status::Warn,
            format!(
                "{what}: the default build has device code for sm_80 and sm_90 only, which \
                 cannot run on {major}.x; rebuild with NVSHMEM_RS_CUDA_ARCHS including \
                 {major}{minor} (ignore this if you did)"
            ),
        );
    }
    Check::new(name, Status::Ok, what)
}

fn check_gpu_count(report: &Report) -> Check {
    let n = report.gpus.len();
    // A narrow CUDA_VISIBLE_DEVICES is the most common reason for seeing fewer GPUs than exist.
    let hidden = match report.env("CUDA_VISIBLE_DEVICES") {
        Some(v) => format!(" (CUDA_VISIBLE_DEVICES={v} may hide others)"),
        None => String::new(),
    };
    match n {
        0 => Check::new(
            "gpu count",
            Status::Fail,
            format!("no GPU visible{hidden}; check nvidia-smi and CUDA_VISIBLE_DEVICES"),
        ),
        1 => Check::new(
            "gpu count",
            Status::Fail,
            format!(
                "only 1 GPU visible{hidden}: a 2-PE run needs 2 GPUs. 2 PEs on one GPU work for \
                 correctness tests only, not for bandwidth; run on a node with 2 GPUs"
            ),
        ),
        _ => Check::new(
            "gpu count",
            Status::Ok,
            format!("{n} GPUs visible; a 2-PE run uses GPUs 0 and 1"),
        ),
    }
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

fn check_pair(pair: &Pair) -> Check {
    let (a, b) = (pair.a, pair.b);
    let name = format!("gpus {a}-{b}");
    let decisive = (a, b) == (0, 1);
    let problem_status = if decisive { Status::Fail } else { Status::Warn };
    let scope = if decisive {
        ""
    } else {
        " (a 2-PE run uses GPUs 0 and 1 only)"
    };
    match (pair.peer_ab, pair.peer_ba) {
        (Some(true), Some(true)) => {}
        (None, _) | (_, None) => {
            return Check::new(
                name,
                problem_status,
                format!(
                    "peer access between GPU {a} and GPU {b} could not be queried \
                     ({a}->{b}: {}, {b}->{a}: {}); check nvidia-smi topo -p2p r{scope}",
                    yes_no(pair.peer_ab),
                    yes_no(pair.peer_ba)
                ),
            );
        }
        _ => {
            return Check::new(
                name,
                problem_status,
                format!(
                    "no peer access between GPU {a} and GPU {b} ({a}->{b}: {}, {b}->{a}: {}; \
                     {}): NVSHMEM on one node needs CUDA peer access over NVLink or PCIe. Use \
                     GPUs that share NVLink or a PCIe switch (CUDA_VISIBLE_DEVICES), and check \
                     nvidia-smi topo -p2p r (IOMMU or PCIe ACS settings can block P2P){scope}",
                    yes_no(pair.peer_ab),
                    yes_no(pair.peer_ba),
                    pair.link
                ),
            );
        }
    }
    match &pair.link {
        Link::NvLink { .. } => Check::new(
            name,
            Status::Ok,
            format!("peer access both ways over {}", pair.link),
        ),
        Link::Pcie { .. } => Check::new(
            name,
            Status::Warn,
            format!(
                "peer access both ways over {}, no NVLink: puts and gets work at PCIe \
                 bandwidth, and NVSHMEM atomics between these GPUs need NVLink (or InfiniBand \
                 with GPUDirect RDMA)",
                pair.link
            ),
        ),
        Link::Unknown { reason } => Check::new(
            name,
            Status::Warn,
            format!(
                "peer access both ways, link type unknown ({reason}): NVLink or PCIe cannot be \
                 told apart, so bandwidth and atomics support are unchecked; NVML \
                 (libnvidia-ml.so.1) comes with the NVIDIA driver"
            ),
        ),
    }
}

fn check_nvshmem(v: &NvshmemVersions) -> Check {
    let host = nvshmem::version_string(v.host);
    let compiled = nvshmem::version_string(v.compiled);
    let from = match &v.host_path {
        Some(p) => format!(" (from {p})"),
        None => String::new(),
    };
    if v.host == v.compiled {
        Check::new(
            "nvshmem version",
            Status::Ok,
            format!("host library {host}{from} is the version compiled in"),
        )
    } else {
        Check::new(
            "nvshmem version",
            Status::Fail,
            format!(
                "host library {host}{from} differs from {compiled} compiled in (device library): \
                 make LD_LIBRARY_PATH find the same NVSHMEM version as NVSHMEM_HOME at build \
                 time, or rebuild with --nvshmem set to the run-time version (INSTALL.md \
                 troubleshooting, host/device version row)"
            ),
        )
    }
}

fn check_mpi(mpi: &Mpi) -> Check {
    let install = "`nvsh run` needs no MPI; for mpirun launches install Open MPI \
                   (apt-get install openmpi-bin libopenmpi-dev, or scripts/setup_env.sh)";
    match (&mpi.mpirun, &mpi.libmpi) {
        (None, Library::Missing { .. }) => Check::new(
            "mpi",
            Status::Warn,
            format!("no mpirun on PATH and no {LIBMPI_SONAME}: {install}"),
        ),
        (None, Library::Loaded { .. }) => Check::new(
            "mpi",
            Status::Warn,
            format!(
                "{LIBMPI_SONAME} loads but there is no mpirun on PATH: {install}, or add its \
                 bin/ to PATH"
            ),
        ),
        (Some(path), Library::Missing { error }) => Check::new(
            "mpi",
            Status::Warn,
            format!(
                "{} found but {LIBMPI_SONAME} cannot be loaded ({error}): {install}",
                path.display()
            ),
        ),
        (Some(path), Library::Loaded { .. }) => {
            let version = mpi.mpirun_version.as_deref().unwrap_or("version unknown");
            // libmpi.so.40 is Open MPI's; an mpirun of another MPI would start PEs that never
            // find each other, each initialising alone.
            if version.contains("Open MPI") || version.contains("OpenRTE") {
                Check::new(
                    "mpi",
                    Status::Ok,
                    format!("{} ({version}) and {LIBMPI_SONAME}", path.display()),
                )
            } else {
                Check::new(
                    "mpi",
                    Status::Warn,
                    format!(
                        "{} reports {version:?}, not Open MPI, while {LIBMPI_SONAME} is Open \
                         MPI's: PEs it starts would each print `PE 0 of 1`. Put Open MPI's \
                         mpirun first on PATH (INSTALL.md troubleshooting, bootstrap mismatch \
                         row)",
                        path.display()
                    ),
                )
            }
        }
    }
}

fn check_nvlink_multicast(report: &Report) -> Check {
    let why = "NVLink multicast (NVLS) must stay off on shared hosts, where it can take the GPUs \
               out of service: export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 (.deps/env.sh \
               sets both)";
    let nvshmem_off = report
        .env("NVSHMEM_DISABLE_NVLS")
        .and_then(nvshmem::tools::parse_bool)
        == Some(true);
    let nccl_on = report
        .env("NCCL_NVLS_ENABLE")
        .and_then(nvshmem::tools::parse_bool)
        == Some(true);
    match report.env("NVSHMEM_DISABLE_NVLS") {
        None => Check::new(
            "nvlink multicast",
            Status::Warn,
            format!("NVSHMEM_DISABLE_NVLS is unset, so NVSHMEM may use it. {why}"),
        ),
        Some(v) if !nvshmem_off => Check::new(
            "nvlink multicast",
            Status::Warn,
            format!("NVSHMEM_DISABLE_NVLS={v} does not turn it off. {why}"),
        ),
        Some(_) if nccl_on => Check::new(
            "nvlink multicast",
            Status::Warn,
            format!("NVSHMEM has it off but NCCL_NVLS_ENABLE turns it on for NCCL. {why}"),
        ),
        Some(_) => Check::new(
            "nvlink multicast",
            Status::Ok,
            "off for NVSHMEM (NVSHMEM_DISABLE_NVLS)",
        ),
    }
}

fn check_remote_transport(report: &Report) -> Check {
    let fix = "on a single node without InfiniBand export NVSHMEM_REMOTE_TRANSPORT=none (in \
               .deps/env.sh unless --multi-node), or init can fail or hang in ibrc/ucx (INSTALL.md \
               troubleshooting, transport row); multi-node jobs need working InfiniBand instead";
    match report.env("NVSHMEM_REMOTE_TRANSPORT") {
        Some(v) if v.trim().eq_ignore_ascii_case("none") => Check::new(
            "remote transport",
            Status::Ok,
            "NVSHMEM_REMOTE_TRANSPORT=none: only NVLink/PCIe peer transport on this node",
        ),
        Some(v) => Check::new(
            "remote transport",
            Status::Warn,
            format!("NVSHMEM_REMOTE_TRANSPORT={v}: {fix}"),
        ),
        None => Check::new(
            "remote transport",
            Status::Warn,
            format!("NVSHMEM_REMOTE_TRANSPORT is unset (NVSHMEM tries InfiniBand): {fix}"),
        ),
    }
}

fn check_nvsh_env(report: &Report, checks: &mut Vec<Check>) {
    if let Some(e) = &report.bootstrap_error {
        checks.push(Check::new(
            "nvsh bootstrap",
            Status::Fail,
            format!("{e}; fix or unset {}", nvshmem::BOOTSTRAP_ENV),
        ));
    } else if let Some(v) = report.env(nvshmem::BOOTSTRAP_ENV) {
        if v == "single" {
            checks.push(Check::new(
                "nvsh bootstrap",
                Status::Warn,
                format!(
                    "{}=single: every process initialises alone as PE 0 of 1; unset it for \
                     multi-PE runs",
                    nvshmem::BOOTSTRAP_ENV
                ),
            ));
        }
    }
    let stray: Vec<&str> = LAUNCHER_ENV
        .iter()
        .copied()
        .filter(|n| report.env(n).is_some())
        .collect();
    if !stray.is_empty() {
        checks.push(Check::new(
            "launcher variables",
            Status::Warn,
            format!(
                "{} set in this shell: a program started here without `nvsh run` takes them as \
                 its place in a job and waits for PEs that never come; unset them",
                stray.join(", ")
            ),
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The facts, the checks and the last line, as `nvsh doctor` prints them.
pub fn render(report: &Report, checks: &[Check]) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = render_into(&mut s, report, checks);
    s
}

fn render_into(s: &mut String, report: &Report, checks: &[Check]) -> fmt::Result {
    writeln!(s, "CUDA")?;
    match &report.cuda {
        Cuda::Found {
            driver_version,
            runtime_version,
        } => writeln!(
            s,
            "  CUDA driver {}, runtime {}",
            result::cuda_version_string(*driver_version),
            result::cuda_version_string(*runtime_version)
        )?,
        Cuda::Unavailable { .. } => {
            writeln!(s, "  no usable CUDA driver or device (see the checks)")?
        }
    }
    match &report.nvml {
        Nvml::Loaded { driver_version } => writeln!(s, "  NVIDIA driver {driver_version} (NVML)")?,
        Nvml::Unavailable { error } => writeln!(s, "  NVML not available: {error}")?,
    }
    for g in &report.gpus {
        let pci = g.pci.map(|p| format!(", PCI {p}")).unwrap_or_default();
        writeln!(
            s,
            "  GPU {}: {}, compute capability {}.{}, {}{pci}",
            g.ordinal,
            g.name,
            g.compute_capability.0,
            g.compute_capability.1,
            gib(g.memory_bytes)
        )?;
    }
    if !report.pairs.is_empty() {
        writeln!(s, "Topology")?;
        for p in &report.pairs {
            writeln!(
                s,
                "  GPU {} <-> GPU {}: {}; peer access {}->{} {}, {}->{} {}; native atomics {}",
                p.a,
                p.b,
                p.link,
                p.a,
                p.b,
                yes_no(p.peer_ab),
                p.b,
                p.a,
                yes_no(p.peer_ba),
                yes_no(p.native_atomics)
            )?;
        }
    }
    writeln!(s, "NVSHMEM")?;
    // Same wording as `nvsh info`.
    writeln!(
        s,
        "  NVSHMEM {} (host library), compiled against {}",
        nvshmem::version_string(report.nvshmem.host),
        nvshmem::version_string(report.nvshmem.compiled)
    )?;
    if let Some(p) = &report.nvshmem.host_path {
        writeln!(s, "  host library file: {p}")?;
    }
    writeln!(s, "MPI")?;
    match &report.mpi.mpirun {
        Some(p) => writeln!(
            s,
            "  mpirun: {} ({})",
            p.display(),
            report
                .mpi
                .mpirun_version
                .as_deref()
                .unwrap_or("no version output")
        )?,
        None => writeln!(s, "  mpirun: not on PATH")?,
    }
    match &report.mpi.libmpi {
        Library::Loaded { path: Some(p) } => writeln!(s, "  {LIBMPI_SONAME}: {p}")?,
        Library::Loaded { path: None } => writeln!(s, "  {LIBMPI_SONAME}: loads")?,
        Library::Missing { error } => writeln!(s, "  {LIBMPI_SONAME}: not found ({error})")?,
    }
    writeln!(
        s,
        "  MPI bootstrap in this binary: {}",
        if report.mpi.bootstrap_compiled {
            "yes"
        } else {
            "no (feature `mpi` off; `nvsh run` works without it)"
        }
    )?;
    ib::render_into(s, &report.fabric)?;
    writeln!(s, "Environment")?;
    for (name, value) in &report.env {
        match value {
            Some(v) => writeln!(s, "  {name}={v}")?,
            None => writeln!(s, "  {name} unset")?,
        }
    }
    writeln!(s, "Checks")?;
    for c in checks {
        writeln!(s, "  {:<4} {}: {}", c.status.label(), c.name, c.message)?;
    }
    writeln!(s)?;
    writeln!(s, "{}", verdict_line(checks))
}

/// The last line of the output.
pub fn verdict_line(checks: &[Check]) -> String {
    match first_failure(checks) {
        None => "doctor: a 2-PE run can work on this node".to_string(),
        Some(c) => format!(
            "doctor: a 2-PE run cannot work here: {}: {}",
            c.name, c.message
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Gathering
// ---------------------------------------------------------------------------------------------

/// Collects the facts of this node. Never panics, needs no GPU: what is missing is recorded.
pub fn gather() -> Report {
    let nvml = NvmlSession::open();
    let mut report = Report {
        cuda: Cuda::Unavailable {
            error: String::new(),
        },
        nvml: match &nvml {
            Ok(n) => Nvml::Loaded {
                driver_version: n
                    .nvml
                    .sys_driver_version()
                    .unwrap_or_else(|e| format!("unknown ({e})")),
            },
            Err(e) => Nvml::Unavailable { error: e.clone() },
        },
        gpu_error: None,
        gpus: Vec::new(),
        pairs: Vec::new(),
        nvshmem: gather_nvshmem(),
        mpi: gather_mpi(),
        env: gather_env(),
        bootstrap_error: nvshmem::Bootstrap::from_env().err().map(|e| e.to_string()),
        fabric: ib::Fabric::default(),
    };
    match result::cuda_probe() {
        Err(e) => {
            report.cuda = Cuda::Unavailable {
                error: e.to_string(),
            }
        }
        Ok(info) => {
            report.cuda = Cuda::Found {
                driver_version: info.driver_version,
                runtime_version: info.runtime_version,
            };
            // cudarc panics where its library or a symbol is missing; the probe above makes that
            // unlikely, and catching the panic keeps the rest of the report.
            let gpus = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                gather_gpus(nvml.as_ref().ok())
            }));
            match gpus {
                Ok(Ok((gpus, pairs))) => {
                    report.gpus = gpus;
                    report.pairs = pairs;
                }
                Ok(Err(e)) => report.gpu_error = Some(e),
                Err(_) => {
                    report.gpu_error =
                        Some("the CUDA driver API panicked (message on stderr)".into())
                }
            }
        }
    }
    // After the GPUs: their PCI addresses place them on NUMA nodes.
    let gpus: Vec<(i32, String)> = report
        .gpus
        .iter()
        .filter_map(|g| Some((g.ordinal, g.pci?.to_string())))
        .collect();
    let driver = match &report.nvml {
        Nvml::Loaded { driver_version } => Some(driver_version.as_str()),
        Nvml::Unavailable { .. } => None,
    };
    report.fabric = ib::gather(
        &ib::FsRoot::system(),
        &gpus,
        driver,
        report.nvshmem.host_path.as_deref(),
        report.env("NVSHMEM_HOME"),
    );
    report
}

fn driver_error(call: &str, e: cudarc::driver::DriverError) -> String {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{e:?}"));
    let text = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{call} failed: {name} ({text})")
}

/// GPUs and their pairs through the CUDA driver API. Only called after the runtime probe found
/// a driver and devices.
fn gather_gpus(nvml: Option<&NvmlSession>) -> Result<(Vec<Gpu>, Vec<Pair>), String> {
    use cudarc::driver::result as drv;
    use cudarc::driver::sys;

    // SAFETY: only checks whether libcuda can be loaded; cudarc panics on first use otherwise.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda.so.1 could not be loaded by the driver API".into());
    }
    drv::init().map_err(|e| driver_error("cuInit", e))?;
    let count = drv::device::get_count().map_err(|e| driver_error("cuDeviceGetCount", e))?;
    let mut devices = Vec::new();
    let mut gpus = Vec::new();
    for ordinal in 0..count {
        let dev = drv::device::get(ordinal).map_err(|e| driver_error("cuDeviceGet", e))?;
        // SAFETY: `dev` comes from cuDeviceGet.
        let attr = |a: sys::CUdevice_attribute| unsafe { drv::device::get_attribute(dev, a) };
        use sys::CUdevice_attribute as A;
        let cc = (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                .map_err(|e| driver_error("cuDeviceGetAttribute", e))?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                .map_err(|e| driver_error("cuDeviceGetAttribute", e))?,
        );
        let pci = match (
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
        ) {
            (Ok(domain), Ok(bus), Ok(device)) => Some(PciAddr {
                domain: domain as u32,
                bus: bus as u32,
                device: device as u32,
            }),
            _ => None,
        };
        // SAFETY: `dev` comes from cuDeviceGet.
        let memory = unsafe { drv::device::total_mem(dev) }.unwrap_or(0) as u64;
        gpus.push(Gpu {
            ordinal,
            name: drv::device::get_name(dev).unwrap_or_else(|e| driver_error("cuDeviceGetName", e)),
            compute_capability: cc,
            memory_bytes: memory,
            pci,
        });
        devices.push(dev);
    }

    // SAFETY (both closures): devices come from cuDeviceGet; the out-pointer is valid.
    let can_access = |x: sys::CUdevice, y: sys::CUdevice| {
        let mut v = 0;
        unsafe { sys::cuDeviceCanAccessPeer(&mut v, x, y) }
            .result()
            .ok()
            .map(|()| v != 0)
    };
    let p2p_attr = |x: sys::CUdevice, y: sys::CUdevice, a: sys::CUdevice_P2PAttribute| {
        let mut v = 0;
        unsafe { sys::cuDeviceGetP2PAttribute(&mut v, a, x, y) }
            .result()
            .ok()
            .map(|()| v)
    };
    let mut pairs = Vec::new();
    for i in 0..gpus.len() {
        for j in i + 1..gpus.len() {
            let (da, db) = (devices[i], devices[j]);
            let link = match (nvml, gpus[i].pci, gpus[j].pci) {
                (Some(n), Some(pa), Some(pb)) => n.link(pa, pb),
                (None, _, _) => Link::Unknown {
                    reason: "NVML not available".into(),
                },
                _ => Link::Unknown {
                    reason: "PCI address of a GPU unknown".into(),
                },
            };
            pairs.push(Pair {
                a: gpus[i].ordinal,
                b: gpus[j].ordinal,
                peer_ab: can_access(da, db),
                peer_ba: can_access(db, da),
                native_atomics: p2p_attr(
                    da,
                    db,
                    sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
                )
                .map(|v| v != 0),
                link,
            });
        }
    }
    Ok((gpus, pairs))
}

/// NVML, loaded for the topology queries.
struct NvmlSession {
    nvml: nvml_wrapper::Nvml,
}

impl NvmlSession {
    fn open() -> Result<NvmlSession, String> {
        use nvml_wrapper::error::NvmlError;
        nvml_wrapper::Nvml::init()
            .map(|nvml| NvmlSession { nvml })
            .map_err(|e| match e {
                // The loader's message already names the file and the reason.
                NvmlError::LibloadingError(inner) => inner.to_string(),
                other => format!("libnvidia-ml.so.1: {other}"),
            })
    }

    /// The NVML device at a PCI address. NVML enumerates all GPUs, ignoring
    /// CUDA_VISIBLE_DEVICES and possibly in another order than CUDA, so match by address.
    fn device(&self, addr: PciAddr) -> Result<nvml_wrapper::Device<'_>, String> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| format!("NVML device count: {e}"))?;
        for i in 0..count {
            let Ok(dev) = self.nvml.device_by_index(i) else {
                continue;
            };
            if dev.pci_info().ok().map(|p| pci_of(&p)) == Some(addr) {
                return Ok(dev);
            }
        }
        Err(format!("no NVML device at PCI {addr}"))
    }

    fn link(&self, a: PciAddr, b: PciAddr) -> Link {
        match self.try_link(a, b) {
            Ok(link) => link,
            Err(reason) => Link::Unknown { reason },
        }
    }

    fn try_link(&self, a: PciAddr, b: PciAddr) -> Result<Link, String> {
        use nvml_wrapper::enum_wrappers::device::{P2pCapabilitiesIndex, P2pStatus};
        let dev_a = self.device(a)?;
        let dev_b = self.device(b)?;
        // Direct links: active links of GPU a whose far end is GPU b. Absent links answer
        // NotSupported or InvalidArg, which counts as inactive.
        let (mut direct, mut active) = (0, 0);
        for l in 0..NVML_MAX_NVLINKS {
            let link = dev_a.link_wrapper_for(l);
            if !matches!(link.is_active(), Ok(true)) {
                continue;
            }
            active += 1;
            if link.remote_pci_info().ok().map(|p| pci_of(&p)) == Some(b) {
                direct += 1;
            }
        }
        if direct > 0 {
            return Ok(Link::NvLink {
                links: direct,
                via_switch: false,
            });
        }
        // Through NVSwitch (HGX boards) the links end at the switch, not at GPU b; NVML's P2P
        // status over NVLink tells whether b is reachable that way.
        if active > 0 {
            match dev_a.p2p_status(&dev_b, P2pCapabilitiesIndex::NvLink) {
                Ok(P2pStatus::Ok) => {
                    return Ok(Link::NvLink {
                        links: active,
                        via_switch: true,
                    })
                }
                Ok(_) => {}
                // Active links that may or may not reach b: saying "PCIe" could be wrong.
                Err(e) => {
                    return Err(format!(
                        "GPU has {active} active NVLink(s) but NVML cannot tell whether they \
                         reach the other GPU: {e}"
                    ))
                }
            }
        }
        let level = dev_a
            .topology_common_ancestor(dev_b)
            .map_err(|e| format!("NVML topology query: {e}"))?;
        Ok(Link::Pcie {
            level: pcie_level(level),
        })
    }
}

/// NVML's common-ancestor level as the PCIe path between two GPUs.
fn pcie_level(level: nvml_wrapper::enum_wrappers::device::TopologyLevel) -> PcieLevel {
    use nvml_wrapper::enum_wrappers::device::TopologyLevel;
    match level {
        TopologyLevel::Internal => PcieLevel::SameBoard,
        TopologyLevel::Single => PcieLevel::SameSwitch,
        TopologyLevel::Multiple => PcieLevel::MultipleSwitches,
        TopologyLevel::HostBridge => PcieLevel::HostBridge,
        TopologyLevel::Node => PcieLevel::SameNumaNode,
        TopologyLevel::System => PcieLevel::AcrossSockets,
    }
}

fn pci_of(p: &nvml_wrapper::struct_wrappers::device::PciInfo) -> PciAddr {
    PciAddr {
        domain: p.domain,
        bus: p.bus,
        device: p.device,
    }
}

fn gather_nvshmem() -> NvshmemVersions {
    NvshmemVersions {
        host: result::host_library_version(),
        compiled: result::compiled_version(),
        host_path: loaded_library_path("libnvshmem_host.so.3", "nvshmemx_vendor_get_version_info"),
    }
}

fn dlerror_string() -> String {
    // SAFETY: dlerror returns a thread-local NUL-terminated string or null.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// File that defines `symbol` in the library behind `handle`, as the loader reports it.
///
/// # Safety
/// `handle` must be a live handle from dlopen.
unsafe fn symbol_file(handle: *mut libc::c_void, symbol: &str) -> Option<String> {
    let sym = CString::new(symbol).ok()?;
    let addr = libc::dlsym(handle, sym.as_ptr());
    if addr.is_null() {
        return None;
    }
    let mut info: libc::Dl_info = std::mem::zeroed();
    if libc::dladdr(addr, &mut info) == 0 || info.dli_fname.is_null() {
        return None;
    }
    Some(
        CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .into_owned(),
    )
}

/// Where an already loaded library came from (RTLD_NOLOAD: nothing new is loaded).
fn loaded_library_path(soname: &str, symbol: &str) -> Option<String> {
    let name = CString::new(soname).ok()?;
    // SAFETY: plain loader calls on a valid C string; the handle is closed after use, which only
    // drops the reference RTLD_NOLOAD added.
    unsafe {
        let h = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if h.is_null() {
            return None;
        }
        let path = symbol_file(h, symbol);
        libc::dlclose(h);
        path
    }
}

/// Loads a library to see whether it can be. Left loaded: unloading an MPI library can run
/// teardown code that expects MPI_Init to have happened.
fn try_load(soname: &str, symbol: &str) -> Library {
    let Ok(name) = CString::new(soname) else {
        return Library::Missing {
            error: "bad library name".into(),
        };
    };
    // SAFETY: plain loader calls on a valid C string.
    unsafe {
        let h = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if h.is_null() {
            return Library::Missing {
                error: dlerror_string(),
            };
        }
        Library::Loaded {
            path: symbol_file(h, symbol),
        }
    }
}

/// An executable file named `name` in a directory of PATH.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// First non-empty line a program prints (stdout, else stderr), given up on after `timeout`.
fn first_output_line(program: &Path, args: &[&str], timeout: Duration) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                // Hung or unwaitable: stop our own child and report no version.
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    // Version output is a few lines, far below a pipe's buffer: reading after exit is safe.
    let mut text = String::new();
    for stream in [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn Read>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut t = String::new();
        let mut stream = stream;
        let _ = stream.read_to_string(&mut t);
        if let Some(line) = t.lines().map(str::trim).find(|l| !l.is_empty()) {
            text = line.to_string();
            break;
        }
    }
    (!text.is_empty()).then_some(text)
}

fn gather_mpi() -> Mpi {
    let mpirun = find_in_path("mpirun");
    let mpirun_version = mpirun
        .as_deref()
        .and_then(|p| first_output_line(p, &["--version"], MPIRUN_TIMEOUT));
    Mpi {
        mpirun,
        mpirun_version,
        libmpi: try_load(LIBMPI_SONAME, "MPI_Init"),
        bootstrap_compiled: cfg!(feature = "mpi"),
    }
}

fn gather_env() -> Vec<(String, Option<String>)> {
    let mut vars: BTreeMap<String, Option<String>> = LISTED_ENV
        .iter()
        .map(|n| (n.to_string(), std::env::var(n).ok()))
        .collect();
    for (k, v) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("NVSHMEM_") || k.starts_with("NVSH_") {
            let mut v = v.to_string_lossy().into_owned();
            // The unique ID is 256 hex digits of noise; its presence is what matters.
            if k == bootstrap::ENV_UNIQUE_ID && v.chars().count() > 16 {
                v = v.chars().take(16).chain("...".chars()).collect();
            }
            vars.insert(k, Some(v));
        }
    }
    vars.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200(ordinal: i32) -> Gpu {
        Gpu {
            ordinal,
            name: "NVIDIA H200".into(),
            compute_capability: (9, 0),
            memory_bytes: 150_000_000_000,
            pci: Some(PciAddr {
                domain: 0,
                bus: 0x1b + ordinal as u32,
                device: 0,
            }),
        }
    }

    fn nvlink_pair(a: i32, b: i32) -> Pair {
        Pair {
            a,
            b,
            peer_ab: Some(true),
            peer_ba: Some(true),
            native_atomics: Some(true),
            link: Link::NvLink {
                links: 18,
                via_switch: true,
            },
        }
    }

    /// A node where a 2-PE run works with no warning: 2 NVLinked H200, matching versions, Open
    /// MPI, and the environment .deps/env.sh writes.
    fn good() -> Report {
        Report {
            cuda: Cuda::Found {
                driver_version: 13000,
                runtime_version: 13000,
            },
            nvml: Nvml::Loaded {
                driver_version: "580.65.06".into(),
            },
            gpu_error: None,
            gpus: vec![h200(0), h200(1)],
            pairs: vec![nvlink_pair(0, 1)],
            nvshmem: NvshmemVersions {
                host: (3, 4, 5),
                compiled: (3, 4, 5),
                host_path: Some("/opt/nvshmem/lib/libnvshmem_host.so.3".into()),
            },
            mpi: Mpi {
                mpirun: Some("/usr/bin/mpirun".into()),
                mpirun_version: Some("mpirun (Open MPI) 4.1.4".into()),
                libmpi: Library::Loaded {
                    path: Some("/usr/lib/x86_64-linux-gnu/libmpi.so.40".into()),
                },
                bootstrap_compiled: false,
            },
            env: vec![
                ("NCCL_NVLS_ENABLE".into(), Some("0".into())),
                ("NVSHMEM_DISABLE_NVLS".into(), Some("1".into())),
                ("NVSHMEM_REMOTE_TRANSPORT".into(), Some("none".into())),
            ],
            bootstrap_error: None,
            // One node, no NIC: the multi-node checks say so and pass.
            fabric: ib::Fabric {
                kernel: Some((6, 8)),
                driver: Some(580),
                lib_dir: Some("/opt/nvshmem/lib".into()),
                plugins: vec!["nvshmem_transport_ibrc.so.3".into()],
                ..ib::Fabric::default()
            },
        }
    }

    fn set_env(r: &mut Report, name: &str, value: Option<&str>) {
        r.env.retain(|(n, _)| n != name);
        r.env.push((name.into(), value.map(String::from)));
    }

    fn find<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no check {name:?} in {checks:#?}"))
    }

    #[test]
    fn good_node_passes_without_warnings() {
        let checks = verdict(&good());
        assert!(can_run_two_pes(&checks));
        for c in &checks {
            assert_eq!(c.status, Status::Ok, "{c:?}");
        }
        assert_eq!(
            verdict_line(&checks),
            "doctor: a 2-PE run can work on this node"
        );
        assert!(find(&checks, "gpus 0-1").message.contains("NVLink"));
    }

    #[test]
    fn no_driver_fails_and_still_checks_the_rest() {
        let mut r = good();
        r.cuda = Cuda::Unavailable {
            error: "no CUDA driver found (libcuda.so.1 could not be loaded); install ...".into(),
        };
        r.nvml = Nvml::Unavailable {
            error: "libnvidia-ml.so.1: not found".into(),
        };
        r.gpus.clear();
        r.pairs.clear();
        let checks = verdict(&r);
        assert!(!can_run_two_pes(&checks));
        let first = first_failure(&checks).unwrap();
        assert_eq!(first.name, "cuda driver");
        assert!(first.message.starts_with("no CUDA driver found"));
        // No GPU checks pile up behind the missing driver...
        assert!(!checks.iter().any(|c| c.name == "gpu count"));
        // ...but versions, MPI and environment are still judged.
        assert_eq!(find(&checks, "nvshmem version").status, Status::Ok);
        assert_eq!(find(&checks, "mpi").status, Status::Ok);
        assert!(verdict_line(&checks)
            .starts_with("doctor: a 2-PE run cannot work here: cuda driver: no CUDA driver"));
    }

    #[test]
    fn compute_capability_below_8_fails_and_says_why() {
        let mut r = good();
        r.gpus[0].name = "Tesla V100-SXM2-32GB".into();
        r.gpus[0].compute_capability = (7, 0);
        let checks = verdict(&r);
        let c = find(&checks, "gpu 0");
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.message.contains("compute capability 7.0"),
            "{}",
            c.message
        );
        assert!(c.message.contains("sm_80 and sm_90"), "{}", c.message);
        assert!(c
            .message
            .contains("V100 (7.0) and T4 (7.5) are not supported"));
        assert_eq!(find(&checks, "gpu 1").status, Status::Ok);
        assert!(!can_run_two_pes(&checks));
    }

    #[test]
    fn weak_gpu_outside_the_first_two_is_a_warning() {
        let mut r = good();
        let mut t4 = h200(2);
        t4.name = "Tesla T4".into();
        t4.compute_capability = (7, 5);
        r.gpus.push(t4);
        r.pairs.push(nvlink_pair(0, 2));
        r.pairs.push(nvlink_pair(1, 2));
        let checks = verdict(&r);
        assert_eq!(find(&checks, "gpu 2").status, Status::Warn);
        assert!(can_run_two_pes(&checks));
    }

    #[test]
    fn compute_capability_8_x_passes_and_10_x_warns() {
        let mut r = good();
        r.gpus[0].compute_capability = (8, 0);
        r.gpus[1].compute_capability = (8, 6);
        let checks = verdict(&r);
        assert_eq!(find(&checks, "gpu 0").status, Status::Ok);
        assert_eq!(find(&checks, "gpu 1").status, Status::Ok);
        r.gpus[1].compute_capability = (10, 0);
        let c = find(&verdict(&r), "gpu 1").clone();
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("NVSHMEM_RS_CUDA_ARCHS including 100"));
    }

    #[test]
    fn one_gpu_fails_for_two_pes() {
        let mut r = good();
        r.gpus.truncate(1);
        r.pairs.clear();
        let checks = verdict(&r);
        let c = find(&checks, "gpu count");
        assert_eq!(c.status, Status::Fail);
        assert!(c
            .message
            .contains("2 PEs on one GPU work for correctness tests only, not for bandwidth"));
        assert!(!can_run_two_pes(&checks));

        set_env(&mut r, "CUDA_VISIBLE_DEVICES", Some("3"));
        let c = find(&verdict(&r), "gpu count").clone();
        assert!(
            c.message.contains("CUDA_VISIBLE_DEVICES=3"),
            "{}",
            c.message
        );
    }

    #[test]
    fn no_peer_access_fails_for_gpus_0_and_1() {
        let mut r = good();
        r.pairs[0].peer_ba = Some(false);
        r.pairs[0].link = Link::Pcie {
            level: PcieLevel::AcrossSockets,
        };
        let checks = verdict(&r);
        let c = find(&checks, "gpus 0-1");
        assert_eq!(c.status, Status::Fail);
        assert!(c.message.contains("no peer access"), "{}", c.message);
        assert!(c.message.contains("1->0: no"), "{}", c.message);
        assert!(c.message.contains("across CPU sockets"), "{}", c.message);
        assert!(!can_run_two_pes(&checks));

        // An unanswered query is not taken as a yes.
        r.pairs[0].peer_ba = None;
        assert_eq!(find(&verdict(&r), "gpus 0-1").status, Status::Fail);
    }

    #[test]
    fn no_peer_access_between_other_gpus_is_a_warning() {
        let mut r = good();
        r.gpus.push(h200(2));
        r.pairs.push(nvlink_pair(0, 2));
        let mut p = nvlink_pair(1, 2);
        p.peer_ab = Some(false);
        r.pairs.push(p);
        let checks = verdict(&r);
        assert_eq!(find(&checks, "gpus 1-2").status, Status::Warn);
        assert!(can_run_two_pes(&checks));
    }

    #[test]
    fn pcie_only_pair_warns_about_atomics() {
        let mut r = good();
        r.pairs[0].link = Link::Pcie {
            level: PcieLevel::SameSwitch,
        };
        let checks = verdict(&r);
        let c = find(&checks, "gpus 0-1");
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message.contains("PCIe, same PCIe switch"),
            "{}",
            c.message
        );
        assert!(c.message.contains("atomics"), "{}", c.message);
        assert!(can_run_two_pes(&checks));
    }

    #[test]
    fn unknown_link_without_nvml_is_a_warning() {
        let mut r = good();
        r.nvml = Nvml::Unavailable {
            error: "libnvidia-ml.so.1: not found".into(),
        };
        r.pairs[0].link = Link::Unknown {
            reason: "NVML not available".into(),
        };
        let checks = verdict(&r);
        let c = find(&checks, "gpus 0-1");
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("link type unknown (NVML not available)"));
        assert!(can_run_two_pes(&checks));
    }

    #[test]
    fn version_mismatch_fails_with_the_install_md_fix() {
        let mut r = good();
        r.nvshmem.host = (3, 3, 9);
        let checks = verdict(&r);
        let c = find(&checks, "nvshmem version");
        assert_eq!(c.status, Status::Fail);
        assert!(c.message.contains("3.3.9"), "{}", c.message);
        assert!(c.message.contains("3.4.5 compiled in"), "{}", c.message);
        assert!(c.message.contains("LD_LIBRARY_PATH"), "{}", c.message);
        assert!(c.message.contains("--nvshmem"), "{}", c.message);
        assert!(c.message.contains("INSTALL.md"), "{}", c.message);
        assert!(!can_run_two_pes(&checks));
    }

    #[test]
    fn missing_mpi_is_only_a_warning() {
        let mut r = good();
        r.mpi.mpirun = None;
        r.mpi.mpirun_version = None;
        r.mpi.libmpi = Library::Missing {
            error: "libmpi.so.40: cannot open shared object file".into(),
        };
        let checks = verdict(&r);
        let c = find(&checks, "mpi");
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message.contains("`nvsh run` needs no MPI"),
            "{}",
            c.message
        );
        assert!(can_run_two_pes(&checks));
    }

    #[test]
    fn mpirun_of_another_mpi_warns_about_bootstrap_mismatch() {
        let mut r = good();
        r.mpi.mpirun_version = Some("HYDRA build details:".into());
        let c = find(&verdict(&r), "mpi").clone();
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("PE 0 of 1"), "{}", c.message);
    }

    #[test]
    fn nvls_unset_or_on_warns() {
        let mut r = good();
        set_env(&mut r, "NVSHMEM_DISABLE_NVLS", None);
        let c = find(&verdict(&r), "nvlink multicast").clone();
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("unset"), "{}", c.message);
        assert!(
            c.message
                .contains("NVLink multicast (NVLS) must stay off on shared hosts"),
            "{}",
            c.message
        );
        assert!(can_run_two_pes(&verdict(&r)));

        set_env(&mut r, "NVSHMEM_DISABLE_NVLS", Some("0"));
        assert_eq!(find(&verdict(&r), "nvlink multicast").status, Status::Warn);
        set_env(&mut r, "NVSHMEM_DISABLE_NVLS", Some("true"));
        assert_eq!(find(&verdict(&r), "nvlink multicast").status, Status::Ok);
        set_env(&mut r, "NCCL_NVLS_ENABLE", Some("1"));
        assert_eq!(find(&verdict(&r), "nvlink multicast").status, Status::Warn);
    }

    #[test]
    fn remote_transport_other_than_none_warns() {
        let mut r = good();
        set_env(&mut r, "NVSHMEM_REMOTE_TRANSPORT", Some("ibrc"));
        let checks = verdict(&r);
        let c = find(&checks, "remote transport");
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("NVSHMEM_REMOTE_TRANSPORT=ibrc"));
        assert!(c.message.contains("export NVSHMEM_REMOTE_TRANSPORT=none"));
        assert!(can_run_two_pes(&checks));

        set_env(&mut r, "NVSHMEM_REMOTE_TRANSPORT", None);
        let c = find(&verdict(&r), "remote transport").clone();
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("unset"));

        set_env(&mut r, "NVSHMEM_REMOTE_TRANSPORT", Some("NONE"));
        assert_eq!(find(&verdict(&r), "remote transport").status, Status::Ok);
    }

    #[test]
    fn nvsh_variables_are_judged() {
        let mut r = good();
        r.bootstrap_error = Some("environment variable NVSH_BOOTSTRAP=\"pmi\" is not valid".into());
        set_env(&mut r, "NVSH_BOOTSTRAP", Some("pmi"));
        assert_eq!(find(&verdict(&r), "nvsh bootstrap").status, Status::Fail);

        r.bootstrap_error = None;
        set_env(&mut r, "NVSH_BOOTSTRAP", Some("single"));
        assert_eq!(find(&verdict(&r), "nvsh bootstrap").status, Status::Warn);

        set_env(&mut r, "NVSH_RANK", Some("1"));
        let c = find(&verdict(&r), "launcher variables").clone();
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.starts_with("NVSH_RANK set"), "{}", c.message);
    }

    #[test]
    fn driver_api_failure_fails() {
        let mut r = good();
        r.gpu_error = Some("cuInit failed: CUDA_ERROR_UNKNOWN (unknown error)".into());
        let checks = verdict(&r);
        assert_eq!(find(&checks, "gpus").status, Status::Fail);
        assert!(!can_run_two_pes(&checks));
    }

    #[test]
    fn first_failure_is_named_on_the_last_line() {
        let mut r = good();
        r.gpus.truncate(1);
        r.pairs.clear();
        r.nvshmem.host = (3, 3, 9);
        let checks = verdict(&r);
        let line = verdict_line(&checks);
        assert!(
            line.starts_with("doctor: a 2-PE run cannot work here: gpu count: only 1 GPU"),
            "{line}"
        );
    }

    #[test]
    fn render_shows_every_section_and_the_pair_link() {
        let r = good();
        let checks = verdict(&r);
        let out = render(&r, &checks);
        for needle in [
            "CUDA driver 13.0, runtime 13.0",
            "NVIDIA driver 580.65.06 (NVML)",
            "GPU 0: NVIDIA H200, compute capability 9.0, 139.7 GiB, PCI 0000:1b:00.0",
            "GPU 0 <-> GPU 1: NVLink through NVSwitch, 18 active link(s); peer access 0->1 yes",
            "NVSHMEM 3.4.5 (host library), compiled against 3.4.5",
            "mpirun: /usr/bin/mpirun (mpirun (Open MPI) 4.1.4)",
            "NVSHMEM_DISABLE_NVLS=1",
            "  ok   nvshmem version: ",
            "Multi-node\n  no InfiniBand or RoCE device\n",
            "  ok   infiniband: no InfiniBand or RoCE device",
        ] {
            assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
        }
        assert!(out.ends_with("doctor: a 2-PE run can work on this node\n"));
    }

    #[test]
    fn unset_variables_render_as_unset() {
        let mut r = good();
        set_env(&mut r, "CUDA_VISIBLE_DEVICES", None);
        let out = render(&r, &verdict(&r));
        assert!(out.contains("  CUDA_VISIBLE_DEVICES unset\n"), "{out}");
    }

    #[test]
    fn links_and_addresses_print_plainly() {
        let a = PciAddr {
            domain: 0,
            bus: 0xcb,
            device: 0,
        };
        assert_eq!(a.to_string(), "0000:cb:00.0");
        assert_eq!(
            Link::NvLink {
                links: 4,
                via_switch: false
            }
            .to_string(),
            "NVLink, 4 link(s)"
        );
        assert_eq!(
            Link::Pcie {
                level: PcieLevel::HostBridge
            }
            .to_string(),
            "PCIe, host bridge"
        );
    }

    #[test]
    fn nvml_levels_map_to_pcie_paths() {
        use nvml_wrapper::enum_wrappers::device::TopologyLevel as T;
        assert_eq!(pcie_level(T::Single), PcieLevel::SameSwitch);
        assert_eq!(pcie_level(T::HostBridge), PcieLevel::HostBridge);
        assert_eq!(pcie_level(T::System), PcieLevel::AcrossSockets);
        assert_eq!(PcieLevel::SameSwitch.describe(), "same PCIe switch");
        assert_eq!(PcieLevel::AcrossSockets.describe(), "across CPU sockets");
    }

    #[test]
    fn gather_never_panics_and_reports_versions() {
        // Runs on any machine: without a driver it records the reason instead of failing.
        let r = gather();
        assert_eq!(r.nvshmem.compiled, result::compiled_version());
        assert!(r.env.iter().any(|(n, _)| n == "LD_LIBRARY_PATH"));
        if !Path::new("/dev/nvidiactl").exists() {
            assert!(matches!(r.cuda, Cuda::Unavailable { .. }), "{:?}", r.cuda);
            assert!(!can_run_two_pes(&verdict(&r)));
        }
    }
}
