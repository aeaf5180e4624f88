//! `nvsh`: the project's command-line tool.

mod info;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "nvsh", version, about = "NVSHMEM runtime tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Initialise one PE and print the NVSHMEM version and PE count (a link and driver check).
    Info,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Info => info::run(),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvsh: error: {e}");
            ExitCode::FAILURE
        }
    }
}
