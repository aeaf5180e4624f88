//! `nvsh doctor`: checks whether a 2-PE NVSHMEM run can work on this node.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct DoctorArgs {}

pub fn run(_args: DoctorArgs) -> nvshmem::Result<ExitCode> {
    unimplemented!("nvsh doctor")
}
