//! The multi-node half of `nvsh doctor`: InfiniBand/RoCE ports, GPUDirect RDMA, which NIC sits
//! near which GPU, NVSHMEM's remote transport plugin, and IBGDA's driver settings.
//!
//! Files only (sysfs, procfs, modprobe.d and NVSHMEM's lib folder), every one read through an
//! [`FsRoot`], so that tests point it at a fake tree in a temporary folder. [`gather`] turns the
//! files into a plain [`Fabric`]; [`checks`] judges it. These checks warn and never fail: the
//! doctor's exit code says whether a 2-PE run works on this node, and that needs no NIC.

use super::check::{Check, Status};
use nvshmem::tools::parse_bool;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

/// Where the machine's files are read from: `/`, or a fake tree in tests.
#[derive(Debug, Clone)]
pub struct FsRoot {
    root: PathBuf,
}

impl FsRoot {
    /// This machine's files.
    pub fn system() -> FsRoot {
        FsRoot::at("/")
    }

    /// Files under `root`, which stands for `/`.
    pub fn at(root: impl Into<PathBuf>) -> FsRoot {
        FsRoot { root: root.into() }
    }

    /// The real location of an absolute path such as `/proc/version`.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// A small file's text, trimmed; `None` when it cannot be read.
    fn read(&self, abs: &str) -> Option<String> {
        std::fs::read_to_string(self.path(abs))
            .ok()
            .map(|s| s.trim().to_string())
    }

    fn exists(&self, abs: &str) -> bool {
        self.path(abs).exists()
    }

    /// Names in a folder, sorted; empty when it cannot be listed.
    fn list(&self, abs: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(abs))
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Last component of a symlink's target (sysfs names a device's driver this way).
    fn link_name(&self, abs: &str) -> Option<String> {
        let target = std::fs::read_link(self.path(abs)).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    }
}

// ---------------------------------------------------------------------------------------------
// Facts
// ---------------------------------------------------------------------------------------------

/// What the files say about this node's links to other nodes. Plain data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fabric {
    /// InfiniBand and RoCE devices (/sys/class/infiniband), by name.
    pub devices: Vec<IbDevice>,
    /// The visible GPUs' NUMA nodes, in CUDA order.
    pub gpus: Vec<GpuNuma>,
    /// The GPUDirect RDMA module loaded (`nvidia_peermem`, or Mellanox's older `nv_peer_mem`).
    pub peermem: Option<String>,
    /// Kernel version (major, minor), from /proc/version.
    pub kernel: Option<(u32, u32)>,
    /// NVIDIA driver major version, e.g. 580.
    pub driver: Option<u32>,
    /// IBGDA's driver settings; `None` when neither the running driver's nor a configured value
    /// could be read.
    pub driver_params: Option<DriverParams>,
    /// The folder of libnvshmem_host, where NVSHMEM looks for its transport plugins.
    pub lib_dir: Option<String>,
    /// `nvshmem_transport_*` files in that folder, sorted.
    pub plugins: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbDevice {
    pub name: String,
    /// Kernel driver, e.g. `mlx5_core`.
    pub driver: Option<String>,
    /// `None` where the kernel reports none (-1: one socket, or a VM).
    pub numa_node: Option<i32>,
    pub ports: Vec<IbPort>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbPort {
    pub port: u32,
    /// Logical state without its number: `ACTIVE`, `INIT`, `ARMED`, `DOWN`.
    pub state: String,
    /// Physical state without its number: `LinkUp`, `Polling`, `Disabled`, ...
    pub phys_state: String,
    /// As sysfs writes it: `400 Gb/sec (4X NDR)`.
    pub rate: String,
    /// `InfiniBand`, or `Ethernet` for RoCE.
    pub link_layer: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuNuma {
    pub ordinal: i32,
    /// PCI address as sysfs names it: `0000:1b:00.0`.
    pub bus_id: String,
    pub numa_node: Option<i32>,
}

/// The two NVIDIA driver settings IBGDA needs, and where they were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverParams {
    /// `/proc/driver/nvidia/params` (the running driver) or a modprobe.d file (the next load).
    pub source: String,
    pub stream_mem_ops: bool,
    pub peer_mapping_override: bool,
}

const IB_CLASS: &str = "/sys/class/infiniband";
const DRIVER_PARAMS: &str = "/proc/driver/nvidia/params";
const MODPROBE_D: &str = "/etc/modprobe.d";

/// Reads the facts. `gpus`: (CUDA ordinal, PCI address) of the visible GPUs; `driver_version`:
/// NVML's, when it loaded; `host_lib`: the file libnvshmem_host was loaded from;
/// `nvshmem_home`: NVSHMEM_HOME, for the lib folder when `host_lib` is unknown.
pub fn gather(
    root: &FsRoot,
    gpus: &[(i32, String)],
    driver_version: Option<&str>,
    host_lib: Option<&str>,
    nvshmem_home: Option<&str>,
) -> Fabric {
    let devices = root
        .list(IB_CLASS)
        .into_iter()
        .map(|name| read_device(root, name))
        .collect();
    let gpus = gpus
        .iter()
        .map(|(ordinal, bus_id)| GpuNuma {
            ordinal: *ordinal,
            bus_id: bus_id.clone(),
            numa_node: numa(root.read(&format!("/sys/bus/pci/devices/{bus_id}/numa_node"))),
        })
        .collect();
    let lib_dir = host_lib
        .and_then(|p| Path::new(p).parent())
        .map(|d| d.to_string_lossy().into_owned())
        .or_else(|| nvshmem_home.map(|h| format!("{}/lib", h.trim_end_matches('/'))));
    let plugins = lib_dir
        .as_deref()
        .map(|d| {
            root.list(d)
                .into_iter()
                .filter(|n| n.starts_with("nvshmem_transport_"))
                .collect()
        })
        .unwrap_or_default();
    Fabric {
        devices,
        gpus,
        peermem: peermem(root),
        kernel: root.read("/proc/version").and_then(|v| kernel_version(&v)),
        driver: driver_version.and_then(driver_major).or_else(|| {
            root.read("/proc/driver/nvidia/version")
                .and_then(|v| driver_major(&v))
        }),
        driver_params: driver_params(root),
        lib_dir,
        plugins,
    }
}

fn read_device(root: &FsRoot, name: String) -> IbDevice {
    let dev = format!("{IB_CLASS}/{name}");
    let ports = root
        .list(&format!("{dev}/ports"))
        .into_iter()
        .filter_map(|p| p.parse::<u32>().ok())
        .map(|port| {
            let file = |f: &str| root.read(&format!("{dev}/ports/{port}/{f}"));
            IbPort {
                port,
                state: file("state").map(|s| strip_number(&s)).unwrap_or_default(),
                phys_state: file("phys_state")
                    .map(|s| strip_number(&s))
                    .unwrap_or_default(),
                rate: file("rate").unwrap_or_default(),
                link_layer: file("link_layer").unwrap_or_default(),
            }
        })
        .collect();
    IbDevice {
        driver: root.link_name(&format!("{dev}/device/driver")),
        numa_node: numa(root.read(&format!("{dev}/device/numa_node"))),
        ports,
        name,
    }
}

/// sysfs writes states as `4: ACTIVE`; the name is what users see in ibstat.
fn strip_number(s: &str) -> String {
    s.split_once(':')
        .map_or(s, |(_, name)| name)
        .trim()
        .to_string()
}

/// A sysfs numa_node; -1 means the kernel does not know.
fn numa(s: Option<String>) -> Option<i32> {
    s?.parse::<i32>().ok().filter(|n| *n >= 0)
}

fn peermem(root: &FsRoot) -> Option<String> {
    let modules = root.read("/proc/modules").unwrap_or_default();
    ["nvidia_peermem", "nv_peer_mem"]
        .into_iter()
        .find(|m| {
            root.exists(&format!("/sys/module/{m}"))
                || modules
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(m))
        })
        .map(String::from)
}

/// `Linux version 6.8.0-45-generic (...)` -> (6, 8).
fn kernel_version(text: &str) -> Option<(u32, u32)> {
    let release = text.split_whitespace().nth(2)?;
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Driver major version from NVML's `580.65.06`, or from the first line of
/// /proc/driver/nvidia/version (`NVRM version: NVIDIA UNIX ... Kernel Module  580.65.06  ...`).
fn driver_major(text: &str) -> Option<u32> {
    text.lines().next()?.split_whitespace().find_map(|t| {
        let (major, rest) = t.split_once('.')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if digits(major) && rest.split('.').all(digits) {
            major.parse().ok()
        } else {
            None
        }
    })
}

/// The running driver's values, else those a modprobe.d file sets for the next load.
fn driver_params(root: &FsRoot) -> Option<DriverParams> {
    if let Some(text) = root.read(DRIVER_PARAMS) {
        let value = |key: &str| {
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim().trim_matches('"').to_string())
        };
        // PeerMappingOverride is a registry key, set through NVreg_RegistryDwords.
        let registry = value("RegistryDwords").unwrap_or_default();
        return Some(DriverParams {
            source: DRIVER_PARAMS.into(),
            stream_mem_ops: value("EnableStreamMemOPs").as_deref() == Some("1"),
            peer_mapping_override: registry_sets(&registry, "PeerMappingOverride")
                || value("PeerMappingOverride").as_deref() == Some("1"),
        });
    }
    for name in root.list(MODPROBE_D) {
        if !name.ends_with(".conf") {
            continue;
        }
        let file = format!("{MODPROBE_D}/{name}");
        let text = root.read(&file).unwrap_or_default();
        let options: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("options nvidia "))
            .collect();
        if options.is_empty() {
            continue;
        }
        let all = options.join(" ");
        return Some(DriverParams {
            source: file,
            stream_mem_ops: all.contains("NVreg_EnableStreamMemOPs=1"),
            peer_mapping_override: registry_sets(&all, "PeerMappingOverride"),
        });
    }
    None
}

/// Whether a RegistryDwords string (`A=1;B=0`) sets `key` to 1.
fn registry_sets(registry: &str, key: &str) -> bool {
    registry
        .split(|c: char| c == ';' || c == '"' || c.is_whitespace())
        .any(|kv| kv.trim() == format!("{key}=1"))
}

// ---------------------------------------------------------------------------------------------
// Decisions
// ---------------------------------------------------------------------------------------------

/// The multi-node checks, from the facts and the listed environment (name, value).
pub fn checks(f: &Fabric, env: &[(String, Option<String>)]) -> Vec<Check> {
    let var = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    };
    let transport = var("NVSHMEM_REMOTE_TRANSPORT")
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty());
    let ibgda = var("NVSHMEM_IB_ENABLE_IBGDA").and_then(parse_bool) == Some(true);
    let no_dmabuf = var("NVSHMEM_IB_DISABLE_DMABUF").and_then(parse_bool) == Some(true);

    let mut out = check_ports(f);
    out.push(check_gpudirect(f, no_dmabuf));
    if let Some(c) = check_affinity(f) {
        out.push(c);
    }
    out.push(check_plugins(f, transport.as_deref(), ibgda));
    if ibgda {
        out.push(check_ibgda(f));
    }
    out
}

fn check_ports(f: &Fabric) -> Vec<Check> {
    if f.devices.is_empty() {
        return vec![Check::new(
            "infiniband",
            Status::Ok,
            "no InfiniBand or RoCE device: runs on this node need none; multi-node runs need an \
             InfiniBand or RoCE NIC with its driver loaded (rdma-core or MLNX_OFED; ibv_devinfo \
             lists what the verbs library sees)",
        )];
    }
    let mut out = Vec::new();
    for d in &f.devices {
        if d.ports.is_empty() {
            out.push(Check::new(
                format!("ib {}", d.name),
                Status::Warn,
                "no ports listed: the driver is loaded but the device is not usable; check \
                 ibv_devinfo and dmesg",
            ));
        }
        for p in &d.ports {
            let name = format!("ib {} port {}", d.name, p.port);
            let facts = format!(
                "{}, {}, {}, {}",
                p.state,
                p.phys_state,
                if p.rate.is_empty() {
                    "rate unknown"
                } else {
                    p.rate.as_str()
                },
                if p.link_layer == "Ethernet" {
                    "RoCE (Ethernet)"
                } else {
                    p.link_layer.as_str()
                }
            );
            let numa = match d.numa_node {
                Some(n) => format!(", NUMA node {n}"),
                None => String::new(),
            };
            if p.state == "ACTIVE" {
                out.push(Check::new(name, Status::Ok, format!("{facts}{numa}")));
                continue;
            }
            // INIT or ARMED: the cable and the peer are fine, the fabric is not configured.
            let fix = if p.phys_state == "LinkUp" && p.link_layer != "Ethernet" {
                "the link is up but no subnet manager has brought the port to ACTIVE: run one on \
                 the fabric (opensm, or the switch's), then check ibstat"
            } else {
                "check the cable and the switch port (ibstat; ip link for RoCE), or leave this \
                 port out with NVSHMEM_HCA_LIST"
            };
            out.push(Check::new(
                name,
                Status::Warn,
                format!("{facts}{numa}: multi-node runs cannot use this port; {fix}"),
            ));
        }
    }
    out
}

/// Which way NVSHMEM would register GPU memory with the NIC: dma-buf first where the kernel
/// and driver allow it and it is not turned off, else the peermem module.
pub fn gpudirect_method(f: &Fabric, no_dmabuf: bool) -> Option<&str> {
    let dmabuf = f.kernel.is_some_and(|k| k >= (5, 12)) && f.driver.is_some_and(|d| d >= 515);
    if dmabuf && !no_dmabuf {
        Some("dma-buf")
    } else {
        f.peermem.as_deref()
    }
}

fn check_gpudirect(f: &Fabric, no_dmabuf: bool) -> Check {
    let kernel = f
        .kernel
        .map_or("unknown".into(), |(a, b)| format!("{a}.{b}"));
    let driver = f.driver.map_or("unknown".into(), |d| d.to_string());
    let facts = format!(
        "kernel {kernel}, driver {driver}, {}{}",
        match &f.peermem {
            Some(m) => format!("{m} loaded"),
            None => "nvidia_peermem not loaded".into(),
        },
        if no_dmabuf {
            ", NVSHMEM_IB_DISABLE_DMABUF set"
        } else {
            ""
        }
    );
    match gpudirect_method(f, no_dmabuf) {
        Some(m) => Check::new(
            "gpudirect rdma",
            Status::Ok,
            format!("NVSHMEM would register GPU memory with the NIC through {m} ({facts})"),
        ),
        None if f.devices.is_empty() => Check::new(
            "gpudirect rdma",
            Status::Ok,
            format!(
                "not available ({facts}), not needed without a NIC; multi-node runs need \
                 nvidia_peermem loaded or dma-buf (kernel 5.12+ and driver 515+)"
            ),
        ),
        None => Check::new(
            "gpudirect rdma",
            Status::Warn,
            format!(
                "neither nvidia_peermem nor dma-buf ({facts}): NVSHMEM cannot register GPU \
                 memory with the NIC, so multi-node runs fail at init; sudo modprobe \
                 nvidia_peermem (it ships with the driver), or use kernel 5.12+ with driver 515+ \
                 for dma-buf"
            ),
        ),
    }
}

fn check_affinity(f: &Fabric) -> Option<Check> {
    if f.devices.is_empty() || f.gpus.is_empty() {
        return None;
    }
    let nics_on = |node: i32| -> Vec<&str> {
        f.devices
            .iter()
            .filter(|d| d.numa_node == Some(node))
            .map(|d| d.name.as_str())
            .collect()
    };
    let known_nics = f.devices.iter().any(|d| d.numa_node.is_some());
    if !known_nics || f.gpus.iter().all(|g| g.numa_node.is_none()) {
        return Some(Check::new(
            "nic affinity",
            Status::Ok,
            "the kernel reports no NUMA node for the GPUs or the NICs (one socket, or a VM): \
             nothing to match",
        ));
    }
    let mut near = Vec::new();
    let mut far = Vec::new();
    for g in &f.gpus {
        let Some(node) = g.numa_node else { continue };
        let nics = nics_on(node);
        if nics.is_empty() {
            far.push(format!(
                "GPU {} ({}) on NUMA node {node}",
                g.ordinal, g.bus_id
            ));
        } else {
            near.push(format!(
                "GPU {}: node {node}, {}",
                g.ordinal,
                nics.join(" ")
            ));
        }
    }
    if far.is_empty() {
        return Some(Check::new(
            "nic affinity",
            Status::Ok,
            format!("every GPU has a NIC on its NUMA node ({})", near.join("; ")),
        ));
    }
    let nics: Vec<String> = f
        .devices
        .iter()
        .map(|d| match d.numa_node {
            Some(n) => format!("{} on node {n}", d.name),
            None => format!("{} on no node", d.name),
        })
        .collect();
    Some(Check::new(
        "nic affinity",
        Status::Warn,
        format!(
            "{} without a NIC on that node (NICs: {}): traffic to other nodes crosses the CPU \
             interconnect, at lower bandwidth; use GPUs near a NIC (nvidia-smi topo -m shows \
             GPU-NIC paths) or choose NICs with NVSHMEM_HCA_LIST",
            far.join(", "),
            nics.join(", ")
        ),
    ))
}

fn check_plugins(f: &Fabric, transport: Option<&str>, ibgda: bool) -> Check {
    let shown = match transport {
        Some(t) => format!("NVSHMEM_REMOTE_TRANSPORT={t}"),
        None => "NVSHMEM_REMOTE_TRANSPORT unset (ibrc)".into(),
    };
    let transport = transport.unwrap_or("ibrc");
    let mut wanted = Vec::new();
    if transport != "none" {
        wanted.push(transport);
    }
    if ibgda {
        wanted.push("ibgda");
    }
    let present = |t: &str| {
        let prefix = format!("nvshmem_transport_{t}.so");
        f.plugins.iter().find(|p| p.starts_with(&prefix))
    };
    let available: Vec<&str> = f
        .plugins
        .iter()
        .filter_map(|p| p.strip_prefix("nvshmem_transport_")?.split('.').next())
        .collect();
    let available = if available.is_empty() {
        "none".to_string()
    } else {
        available.join(", ")
    };
    if wanted.is_empty() {
        return Check::new(
            "transport plugin",
            Status::Ok,
            format!(
                "{shown}: no remote transport is loaded, which suits one node; multi-node runs \
                 need one: unset it for ibrc (setup_env.sh --multi-node leaves it out); plugins \
                 here: {available}"
            ),
        );
    }
    let Some(dir) = &f.lib_dir else {
        return Check::new(
            "transport plugin",
            Status::Warn,
            format!(
                "{shown}: NVSHMEM's lib folder is unknown (libnvshmem_host not loaded, \
                 NVSHMEM_HOME unset), so nvshmem_transport_{}.so.* was not looked for; source \
                 .deps/env.sh",
                wanted.join(" and ")
            ),
        );
    };
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|t| present(t).is_none())
        .collect();
    if missing.is_empty() {
        let files: Vec<&str> = wanted
            .iter()
            .filter_map(|t| present(t).map(String::as_str))
            .collect();
        return Check::new(
            "transport plugin",
            Status::Ok,
            format!(
                "{shown}: NVSHMEM would load {} from {dir}",
                files.join(" and ")
            ),
        );
    }
    let files: Vec<String> = missing
        .iter()
        .map(|t| format!("nvshmem_transport_{t}.so.*"))
        .collect();
    Check::new(
        "transport plugin",
        Status::Warn,
        format!(
            "{shown}{}: no {} in {dir}, so NVSHMEM cannot reach PEs on other nodes; install an \
             NVSHMEM that ships it (scripts/setup_env.sh installs one with every transport) or \
             choose one that is here: {available}",
            if ibgda {
                ", NVSHMEM_IB_ENABLE_IBGDA=1"
            } else {
                ""
            },
            files.join(" or ")
        ),
    )
}

fn check_ibgda(f: &Fabric) -> Check {
    let fix = "add `options nvidia NVreg_EnableStreamMemOPs=1 \
               NVreg_RegistryDwords=\"PeerMappingOverride=1;\"` to a file in /etc/modprobe.d, \
               then update-initramfs -u and reboot (or reload the nvidia modules)";
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    match &f.driver_params {
        None => problems.push(
            "the NVIDIA driver's parameters cannot be read (no /proc/driver/nvidia/params, no \
             options nvidia in /etc/modprobe.d)"
                .to_string(),
        ),
        Some(p) => {
            let mut unset = Vec::new();
            if !p.stream_mem_ops {
                unset.push("EnableStreamMemOPs=1");
            }
            if !p.peer_mapping_override {
                unset.push("PeerMappingOverride=1");
            }
            if !unset.is_empty() {
                problems.push(format!("{} lacks {}", p.source, unset.join(" and ")));
            } else if p.source != DRIVER_PARAMS {
                // Configured for the next load only: the running driver's values are unknown.
                problems.push(format!(
                    "{} sets both but the running driver's values are unknown",
                    p.source
                ));
            }
        }
    }
    if !problems.is_empty() {
        fixes.push(fix);
    }
    let mlx5: Vec<&str> = f
        .devices
        .iter()
        .filter(|d| d.driver.as_deref() == Some("mlx5_core") || d.name.starts_with("mlx5"))
        .map(|d| d.name.as_str())
        .collect();
    if mlx5.is_empty() {
        problems.push("no mlx5 (ConnectX) device".into());
        fixes.push("IBGDA drives ConnectX NICs (mlx5) directly: run on a node with one");
    }
    if problems.is_empty() {
        return Check::new(
            "ibgda",
            Status::Ok,
            format!(
                "EnableStreamMemOPs=1 and PeerMappingOverride=1 ({DRIVER_PARAMS}), mlx5 \
                 devices: {}",
                mlx5.join(", ")
            ),
        );
    }
    Check::new(
        "ibgda",
        Status::Warn,
        format!(
            "NVSHMEM_IB_ENABLE_IBGDA=1 but {}: IBGDA cannot start; {}",
            problems.join("; "),
            fixes.join("; ")
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

/// The facts as `nvsh doctor` lists them, under "Multi-node".
pub fn render_into(s: &mut String, f: &Fabric) -> fmt::Result {
    writeln!(s, "Multi-node")?;
    if f.devices.is_empty() {
        writeln!(s, "  no InfiniBand or RoCE device")?;
    }
    for d in &f.devices {
        let numa = d.numa_node.map_or("unknown".into(), |n| n.to_string());
        let driver = d.driver.as_deref().unwrap_or("driver unknown");
        writeln!(s, "  {} ({driver}, NUMA node {numa})", d.name)?;
        for p in &d.ports {
            writeln!(
                s,
                "    port {}: {}, {}, {}, {}",
                p.port, p.state, p.phys_state, p.rate, p.link_layer
            )?;
        }
    }
    for g in &f.gpus {
        let numa = g.numa_node.map_or("unknown".into(), |n| n.to_string());
        writeln!(s, "  GPU {} ({}): NUMA node {numa}", g.ordinal, g.bus_id)?;
    }
    writeln!(
        s,
        "  peermem module: {}",
        f.peermem.as_deref().unwrap_or("not loaded")
    )?;
    if let Some(dir) = &f.lib_dir {
        let plugins = if f.plugins.is_empty() {
            "none".to_string()
        } else {
            f.plugins.join(" ")
        };
        writeln!(s, "  transport plugins in {dir}: {plugins}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fake filesystem root in the temporary folder, removed on drop.
    struct Tree {
        dir: PathBuf,
    }

    impl Tree {
        fn new(name: &str) -> Tree {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "nvsh-doctor-ib-{}-{}-{name}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Tree { dir }
        }

        fn root(&self) -> FsRoot {
            FsRoot::at(&self.dir)
        }

        fn file(&self, abs: &str, text: &str) -> &Tree {
            let p = self.root().path(abs);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("{text}\n")).unwrap();
            self
        }

        /// An InfiniBand device with one port, its PCI device a folder of its own.
        fn nic(&self, name: &str, numa: i32, state: &str, phys: &str, rate: &str) -> &Tree {
            let dev = format!("{IB_CLASS}/{name}");
            self.file(&format!("{dev}/device/numa_node"), &numa.to_string());
            let port = format!("{dev}/ports/1");
            self.file(&format!("{port}/state"), state)
                .file(&format!("{port}/phys_state"), phys)
                .file(&format!("{port}/rate"), rate)
                .file(&format!("{port}/link_layer"), "InfiniBand");
            let drivers = self.root().path("/sys/bus/pci/drivers/mlx5_core");
            std::fs::create_dir_all(&drivers).unwrap();
            std::os::unix::fs::symlink(&drivers, self.root().path(&format!("{dev}/device/driver")))
                .unwrap();
            self
        }

        /// A node's usual files: kernel 6.8, the transports NVSHMEM 3.4.5 ships, GPUs 0 and 1
        /// on NUMA nodes 0 and 1.
        fn base(&self) -> &Tree {
            self.file(
                "/proc/version",
                "Linux version 6.8.0-45-generic (buildd@lcy02) (gcc 13.2.0) #45-Ubuntu SMP",
            )
            .file(
                "/proc/modules",
                "nvidia_uvm 1 0 - Live 0x0\nnvidia 2 1 - Live 0x0",
            )
            .file("/sys/bus/pci/devices/0000:1b:00.0/numa_node", "0")
            .file("/sys/bus/pci/devices/0000:9b:00.0/numa_node", "1");
            for t in ["ibrc", "ibgda", "ucx", "libfabric"] {
                self.file(&format!("/opt/nvshmem/lib/nvshmem_transport_{t}.so.3"), "");
            }
            self
        }

        fn gather(&self, driver: &str) -> Fabric {
            gather(
                &self.root(),
                &[(0, "0000:1b:00.0".into()), (1, "0000:9b:00.0".into())],
                Some(driver),
                Some("/opt/nvshmem/lib/libnvshmem_host.so.3"),
                None,
            )
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn env(vars: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
        vars.iter()
            .map(|(n, v)| (n.to_string(), Some(v.to_string())))
            .collect()
    }

    fn find<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no check {name:?} in {checks:#?}"))
    }

    fn assert_has(c: &Check, words: &[&str]) {
        for w in words {
            assert!(c.message.contains(w), "{w:?} not in {:?}", c.message);
        }
    }

    const NDR: &str = "400 Gb/sec (4X NDR)";

    #[test]
    fn no_ib_device_is_a_note_not_a_failure() {
        let t = Tree::new("none");
        t.base();
        let f = t.gather("580.65.06");
        assert!(f.devices.is_empty());
        let checks = checks(&f, &env(&[("NVSHMEM_REMOTE_TRANSPORT", "none")]));
        let c = find(&checks, "infiniband");
        assert_eq!(c.status, Status::Ok);
        assert_has(c, &["no InfiniBand or RoCE device", "multi-node runs need"]);
        // Without a NIC neither GPUDirect nor the NIC's NUMA node matters.
        assert_eq!(find(&checks, "gpudirect rdma").status, Status::Ok);
        assert!(!checks.iter().any(|c| c.name == "nic affinity"));
        let p = find(&checks, "transport plugin");
        assert_eq!(p.status, Status::Ok);
        assert_has(
            p,
            &[
                "NVSHMEM_REMOTE_TRANSPORT=none",
                "plugins here: ibgda, ibrc, libfabric, ucx",
            ],
        );
        assert!(checks.iter().all(|c| c.status == Status::Ok), "{checks:#?}");
    }

    #[test]
    fn active_400g_port_is_ok() {
        let t = Tree::new("active");
        t.base().nic("mlx5_0", 0, "4: ACTIVE", "5: LinkUp", NDR);
        let f = t.gather("580.65.06");
        assert_eq!(f.devices[0].driver.as_deref(), Some("mlx5_core"));
        assert_eq!(f.devices[0].ports[0].state, "ACTIVE");
        let checks = checks(&f, &[]);
        let c = find(&checks, "ib mlx5_0 port 1");
        assert_eq!(c.status, Status::Ok);
        assert_eq!(
            c.message,
            "ACTIVE, LinkUp, 400 Gb/sec (4X NDR), InfiniBand, NUMA node 0"
        );
        // Unset transport means ibrc, whose plugin is there.
        let p = find(&checks, "transport plugin");
        assert_eq!(p.status, Status::Ok);
        assert_has(
            p,
            &[
                "unset (ibrc)",
                "would load nvshmem_transport_ibrc.so.3 from /opt/nvshmem/lib",
            ],
        );
    }

    #[test]
    fn down_port_warns_with_the_cable_fix() {
        let t = Tree::new("down");
        t.base()
            .nic("mlx5_0", 0, "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)")
            .nic("mlx5_1", 1, "2: INIT", "5: LinkUp", NDR);
        let checks = checks(&t.gather("580.65.06"), &[]);
        let down = find(&checks, "ib mlx5_0 port 1");
        assert_eq!(down.status, Status::Warn);
        assert_has(
            down,
            &[
                "DOWN, Disabled",
                "cannot use this port",
                "cable",
                "NVSHMEM_HCA_LIST",
            ],
        );
        // INIT with the link up: the subnet manager is what is missing, not a cable.
        let init = find(&checks, "ib mlx5_1 port 1");
        assert_eq!(init.status, Status::Warn);
        assert_has(init, &["INIT, LinkUp", "subnet manager", "opensm"]);
        assert!(!init.message.contains("cable"));
    }

    #[test]
    fn peermem_loaded_vs_not() {
        // Kernel 5.4 rules out dma-buf, so the module decides.
        let t = Tree::new("peermem");
        t.base()
            .nic("mlx5_0", 0, "4: ACTIVE", "5: LinkUp", NDR)
            .file(
                "/proc/version",
                "Linux version 5.4.0-150-generic (gcc 9.4.0) #1",
            );
        let c = find(&checks(&t.gather("535.104.05"), &[]), "gpudirect rdma").clone();
        assert_eq!(c.status, Status::Warn);
        assert_has(
            &c,
            &[
                "neither nvidia_peermem nor dma-buf",
                "kernel 5.4, driver 535",
                "sudo modprobe nvidia_peermem",
            ],
        );

        t.file(
            "/proc/modules",
            "nvidia_peermem 16384 0 - Live 0x0\nnvidia 2 1 - Live 0x0",
        );
        let f = t.gather("535.104.05");
        assert_eq!(f.peermem.as_deref(), Some("nvidia_peermem"));
        let c = find(&checks(&f, &[]), "gpudirect rdma").clone();
        assert_eq!(c.status, Status::Ok);
        assert_has(&c, &["through nvidia_peermem", "nvidia_peermem loaded"]);

        // A newer kernel makes dma-buf NVSHMEM's first choice, unless turned off.
        t.file(
            "/proc/version",
            "Linux version 6.8.0-45-generic (gcc 13.2.0) #45",
        );
        let f = t.gather("535.104.05");
        assert_eq!(gpudirect_method(&f, false), Some("dma-buf"));
        assert_eq!(gpudirect_method(&f, true), Some("nvidia_peermem"));
        let off = env(&[("NVSHMEM_IB_DISABLE_DMABUF", "1")]);
        assert_has(
            find(&checks(&f, &off), "gpudirect rdma"),
            &["through nvidia_peermem", "NVSHMEM_IB_DISABLE_DMABUF set"],
        );
    }

    #[test]
    fn gpu_and_nic_on_different_numa_nodes_warns() {
        let t = Tree::new("numa");
        t.base().nic("mlx5_0", 0, "4: ACTIVE", "5: LinkUp", NDR);
        let f = t.gather("580.65.06");
        assert_eq!(f.gpus[1].numa_node, Some(1));
        let c = find(&checks(&f, &[]), "nic affinity").clone();
        assert_eq!(c.status, Status::Warn);
        assert_has(
            &c,
            &[
                "GPU 1 (0000:9b:00.0) on NUMA node 1 without a NIC",
                "mlx5_0 on node 0",
                "nvidia-smi topo -m",
                "NVSHMEM_HCA_LIST",
            ],
        );
        assert!(!c.message.contains("GPU 0"), "{}", c.message);

        t.nic("mlx5_1", 1, "4: ACTIVE", "5: LinkUp", NDR);
        let c = find(&checks(&t.gather("580.65.06"), &[]), "nic affinity").clone();
        assert_eq!(c.status, Status::Ok);
        assert_has(&c, &["GPU 0: node 0, mlx5_0", "GPU 1: node 1, mlx5_1"]);
    }

    #[test]
    fn ibgda_requested_without_the_driver_params_warns() {
        let t = Tree::new("ibgda");
        t.base()
            .nic("mlx5_0", 0, "4: ACTIVE", "5: LinkUp", NDR)
            .file(
                DRIVER_PARAMS,
                "EnableMSI: 1\nEnableStreamMemOPs: 0\nRegistryDwords: \"\"",
            );
        let want = env(&[("NVSHMEM_IB_ENABLE_IBGDA", "1")]);
        let c = find(&checks(&t.gather("580.65.06"), &want), "ibgda").clone();
        assert_eq!(c.status, Status::Warn);
        assert_has(
            &c,
            &[
                "lacks EnableStreamMemOPs=1 and PeerMappingOverride=1",
                "NVreg_EnableStreamMemOPs=1",
                "/etc/modprobe.d",
                "reboot",
            ],
        );
        // Not asked for: no IBGDA check at all.
        assert!(!checks(&t.gather("580.65.06"), &[])
            .iter()
            .any(|c| c.name == "ibgda"));

        t.file(
            DRIVER_PARAMS,
            "EnableStreamMemOPs: 1\nRegistryDwords: \"PeerMappingOverride=1;\"",
        );
        let c = find(&checks(&t.gather("580.65.06"), &want), "ibgda").clone();
        assert_eq!(c.status, Status::Ok, "{}", c.message);
        assert_has(&c, &["mlx5 devices: mlx5_0"]);
    }

    #[test]
    fn missing_transport_plugin_warns() {
        let t = Tree::new("plugin");
        t.base();
        std::fs::remove_file(
            t.root()
                .path("/opt/nvshmem/lib/nvshmem_transport_ibrc.so.3"),
        )
        .unwrap();
        let f = t.gather("580.65.06");
        let c = find(&checks(&f, &[]), "transport plugin").clone();
        assert_eq!(c.status, Status::Warn);
        assert_has(
            &c,
            &[
                "NVSHMEM_REMOTE_TRANSPORT unset (ibrc)",
                "no nvshmem_transport_ibrc.so.* in /opt/nvshmem/lib",
                "cannot reach PEs on other nodes",
                "here: ibgda, libfabric, ucx",
            ],
        );
        let ucx = env(&[("NVSHMEM_REMOTE_TRANSPORT", "UCX")]);
        assert_eq!(
            find(&checks(&f, &ucx), "transport plugin").status,
            Status::Ok
        );
    }

    #[test]
    fn proc_and_modprobe_files_parse() {
        assert_eq!(
            kernel_version("Linux version 5.15.0-91-generic (buildd@x) #101"),
            Some((5, 15))
        );
        assert_eq!(kernel_version("Linux version"), None);
        assert_eq!(driver_major("580.65.06"), Some(580));
        assert_eq!(driver_major("unknown (NVML error)"), None);
        // NVML missing: the open kernel module's banner still gives the version.
        let t = Tree::new("parse");
        t.file(
            "/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release \
             Build  (dvs-builder@U16)\nGCC version:  gcc version 12.3.0",
        )
        .file(
            "/etc/modprobe.d/nvidia.conf",
            "# IBGDA\noptions nvidia NVreg_EnableStreamMemOPs=1 \
             NVreg_RegistryDwords=\"PeerMappingOverride=1;\"",
        );
        let f = gather(&t.root(), &[], None, None, Some("/opt/nvshmem/"));
        assert_eq!(f.driver, Some(570));
        assert_eq!(f.lib_dir.as_deref(), Some("/opt/nvshmem/lib"));
        assert_eq!(strip_number("4: ACTIVE"), "ACTIVE");
        // No running driver's params: the modprobe.d options, flagged as not yet applied.
        let p = f.driver_params.clone().unwrap();
        assert_eq!(p.source, "/etc/modprobe.d/nvidia.conf");
        assert!(p.stream_mem_ops && p.peer_mapping_override);
        let want = env(&[("NVSHMEM_IB_ENABLE_IBGDA", "1")]);
        let c = find(&checks(&f, &want), "ibgda").clone();
        assert_eq!(c.status, Status::Warn);
        assert_has(&c, &["running driver's values are unknown", "no mlx5"]);
    }
}
