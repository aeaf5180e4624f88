//! `nvsh tune`: the tuning sweep, run on every PE of a job; writes this machine's tuning file
//! (from local rank 0 of each node) and, on PE 0, prints the chosen table with its re-bench.

use super::bench::{check_outputs, emit, parse_size, writes_results};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use nvsh::tune::{self, TuneOptions};
use nvshmem::tools::tuning as tuning_file;
use nvshmem::TUNING_FILE_ENV;
use nvshmem::{Collective, Error, Nvshmem, Result};
use std::path::PathBuf;

#[derive(Args)]
pub struct TuneArgs {
    /// Collectives to sweep, comma-separated (default: all): allreduce times its algorithms,
    /// the others their protocols (direct stores, NVSHMEM puts, low-latency lines, and split
    /// parts and the pull where they have them; the pull at 2 PEs only).
    #[arg(long, value_delimiter = ',', value_name = "LIST", value_parser = collective_parser())]
    collectives: Vec<Collective>,
    /// Smallest message (bytes; K, M, G suffixes), nccl-tests' size as the benches take it.
    #[arg(short = 'b', long = "min", default_value = "4K", value_parser = parse_size)]
    min: usize,
    /// Largest message.
    #[arg(short = 'e', long = "max", default_value = "256M", value_parser = parse_size)]
    max: usize,
    /// Timed runs per candidate and size (the median of each run's slowest PE counts).
    #[arg(short = 'n', long, default_value_t = 10)]
    runs: usize,
    /// Untimed runs per candidate and size first.
    #[arg(short = 'w', long, default_value_t = 2)]
    warmup: usize,
    /// The tuning file to write (this machine's entry; other machines' entries stay). Default:
    /// NVSH_TUNING_FILE, else ~/.cache/nvsh/tuning.json.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Do not write a tuning file (measure and print only).
    #[arg(long, conflicts_with = "out")]
    no_write: bool,
    /// Print the report as JSON (the tuned choice, every candidate's time and the re-bench).
    #[arg(long)]
    json: bool,
    /// Write the report (table or --json) to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Also draw the sweep as a PNG chart: per collective and dtype, each candidate's time
    /// against message size, and the tuned choice's re-bench dashed.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// Also measure online tuning (NVSH_TUNE=online): the wall time of tuning each size bucket
    /// of an f32 allreduce, and their median.
    #[arg(long)]
    online: bool,
}

/// `--collectives`' values: the swept rows of the library's table, by name.
fn collective_parser() -> impl TypedValueParser<Value = Collective> {
    let names = tune::tuned().into_iter().map(|c| c.name());
    // The parser accepts only these names, so each is a row of the table.
    PossibleValuesParser::new(names)
        .map(|name| Collective::from_name(&name).expect("a possible value is a collective's name"))
}

pub fn run(args: TuneArgs) -> Result<()> {
    if args.min > args.max {
        return Err(Error::Io {
            what: "nvsh tune".into(),
            message: format!("--min {} is above --max {}", args.min, args.max),
        });
    }
    if args.runs == 0 {
        return Err(Error::Io {
            what: "nvsh tune".into(),
            message: "--runs must be at least 1".into(),
        });
    }
    check_outputs(args.report.as_deref(), args.plot.as_deref())?;
    let opts = TuneOptions {
        collectives: if args.collectives.is_empty() {
            tune::tuned()
        } else {
            args.collectives.clone()
        },
        min_bytes: args.min,
        max_bytes: args.max,
        warmup: args.warmup,
        runs: args.runs,
        online: args.online,
    };
    let nv = Nvshmem::init()?;
    let report = tune::sweep(&nv, &opts)?;
    if !args.no_write && nv.local_rank() == 0 {
        let path = args
            .out
            .clone()
            .or_else(|| nv.tuning_path())
            .or_else(tuning_file::default_path)
            .ok_or(Error::Io {
                what: "nvsh tune".into(),
                message: format!(
                    "no tuning file path: pass --out, or set {TUNING_FILE_ENV} or HOME"
                ),
            })?;
        tuning_file::save(
            &path,
            &report.fingerprint,
            &report.table,
            Some(report.date.clone()),
        )?;
        if nv.my_pe() == 0 {
            eprintln!("nvsh: tune: wrote {}", path.display());
        }
    }
    if nv.my_pe() == 0 && writes_results() {
        let text = if args.json {
            tune::render_json(&report)
        } else {
            tune::render(&report)
        };
        emit(&text, args.report.as_deref())?;
        if let Some(p) = &args.plot {
            let fig = tune::figure(&report);
            let r = nvsh_plot::write(&fig, p).map_err(|e| Error::Io {
                what: "--plot".into(),
                message: e.to_string(),
            })?;
            eprintln!(
                "nvsh: plot: wrote {} ({}x{} pixels)",
                p.display(),
                r.width,
                r.height
            );
        }
    }
    Ok(())
}
