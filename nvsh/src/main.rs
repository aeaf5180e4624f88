//! `nvsh`: the project's command-line tool.

mod cli;

use cli::{bench, compare, doctor, info, model, plot, run, soak, tune};

use clap::{Parser, Subcommand};
use nvsh::error::ToolResult;
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
    /// Start N local processes of a program as the PEs of one NVSHMEM job.
    Run(run::RunArgs),
    /// Benchmarks (run as a job: `nvsh run -n 2 -- nvsh bench put`).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Check this node: GPUs, driver, peer access and links, NVSHMEM versions, MPI, environment.
    Doctor(doctor::DoctorArgs),
    /// Long checked run of mixed allreduces, other collectives and channel transfers (run as a
    /// job: `nvsh run -n 2 -- nvsh soak --seconds 600`); with --die-pe, fault injection.
    Soak(soak::SoakArgs),
    /// Draw a bench result stored with --json as a PNG chart (no GPU needed): `nvsh plot
    /// allreduce.json --out allreduce.png`.
    Plot(plot::PlotArgs),
    /// Set runs of two builds of one collective bench side by side, medians over runs, from
    /// their --json files (no GPU needed): `nvsh compare new_*.json --before old_*.json`.
    Compare(compare::CompareArgs),
    /// Time every collective's candidates per size and dtype class and write this machine's
    /// tuning file, which `Auto` then follows (run as a job: `nvsh run -n 2 -- nvsh tune`).
    Tune(tune::TuneArgs),
    /// Predict collective times at scale from the alpha-beta cost model (no GPU needed):
    /// flat, hierarchical and NCCL, the sparse methods' crossover densities, the trainer's
    /// step (docs/scale.md).
    Model(model::ModelArgs),
}

fn main() -> ExitCode {
    // The library's warnings show by default; RUST_LOG=info or debug shows more.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nvsh: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command; the runtime's errors and the tool's own (failed checks) alike end in one
/// error line and a failure status.
fn dispatch(command: Command) -> ToolResult<ExitCode> {
    Ok(match command {
        Command::Info => info::run().map(|()| ExitCode::SUCCESS)?,
        Command::Run(args) => run::run(args)?,
        Command::Doctor(args) => doctor::run(args)?,
        Command::Bench(cmd) => bench::run(cmd).map(|()| ExitCode::SUCCESS)?,
        Command::Soak(args) => soak::run(args).map(|()| ExitCode::SUCCESS)?,
        Command::Plot(args) => plot::run(args).map(|()| ExitCode::SUCCESS)?,
        Command::Compare(args) => compare::run(args)?,
        Command::Tune(args) => tune::run(args).map(|()| ExitCode::SUCCESS)?,
        Command::Model(args) => model::run(args).map(|()| ExitCode::SUCCESS)?,
    })
}
