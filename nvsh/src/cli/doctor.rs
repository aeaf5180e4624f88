//! `nvsh doctor`: checks whether a 2-PE NVSHMEM run can work on this node.
//!
//! The facts and the decisions live in [`nvsh::doctor`] (unit-tested there without a GPU);
//! this is the printing and the exit code.

use nvsh::doctor;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct DoctorArgs {}

/// Prints the report and the checks; exits 0 only when no check failed.
pub fn run(_args: DoctorArgs) -> nvshmem::Result<ExitCode> {
    let report = doctor::gather();
    let checks = doctor::verdict(&report);
    print!("{}", doctor::render(&report, &checks));
    Ok(if doctor::can_run_two_pes(&checks) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
