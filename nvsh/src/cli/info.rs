//! `nvsh info`: the smallest end-to-end check that the binary links, finds a driver and a GPU,
//! and initialises NVSHMEM.

use nvshmem::result::{compiled_version, cuda_version_string, host_library_version};
use nvshmem::{version_string, Nvshmem, Result};

pub fn run() -> Result<()> {
    let nv = Nvshmem::init_single_pe()?;
    let cuda = nv.cuda_info();
    println!(
        "CUDA driver {}, runtime {}, {} device(s), PE {} on device {}",
        cuda_version_string(cuda.driver_version),
        cuda_version_string(cuda.runtime_version),
        cuda.device_count,
        nv.my_pe(),
        nv.device()
    );
    println!(
        "NVSHMEM {} (host library), compiled against {}, {} PE(s)",
        version_string(host_library_version()),
        version_string(compiled_version()),
        nv.n_pes()
    );
    nv.device_self_check()?;
    println!(
        "device API check: PASS (a kernel put to its own PE through NVSHMEM and read it back)"
    );
    Ok(())
}
