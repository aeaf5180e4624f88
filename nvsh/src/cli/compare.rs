//! `nvsh compare AFTER.json... --before BEFORE.json...`: runs of two builds (or settings) of
//! one collective bench set side by side (no GPU needed); see [`nvsh::bench::compare`].

use clap::Args;
use nvsh::bench::compare::{compare, render_json, render_table, Side};
use nvsh::bench::stored::{read_bench_json, BenchJson};
use nvshmem::{Error, Result};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct CompareArgs {
    /// Results of the build under test, one file per run (`nvsh bench <collective> --json
    /// --out FILE`), of one collective, op and PE count.
    #[arg(value_name = "AFTER.json", required = true)]
    after: Vec<PathBuf>,
    /// Results of the build to compare against, one file per run, run in the same call as the
    /// others and alternating with them (the machines drift between processes). Without it,
    /// only the ratio to NCCL's fastest path.
    #[arg(long, value_name = "BEFORE.json", num_args = 1..)]
    before: Vec<PathBuf>,
    /// The candidate to compare (default: `auto` where the bench has it, as allreduce's,
    /// else `ours`).
    #[arg(long, value_name = "NAME")]
    candidate: Option<String>,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// Prints the comparison; exit status 1 when a cell read had wrong outputs (those cells are
/// left out of the medians).
pub fn run(args: CompareArgs) -> Result<ExitCode> {
    let io = |message: String| Error::Io {
        what: "compare".into(),
        message,
    };
    let read = |paths: &[PathBuf]| -> Result<Side> {
        let mut runs = Vec::new();
        for p in paths {
            match read_bench_json(p).map_err(io)? {
                BenchJson::Collective(c) => runs.push((p.display().to_string(), c)),
                BenchJson::Put(_) => {
                    return Err(io(format!(
                        "{} is a put bench's result; compare reads the collective benches' \
                         (`nvsh bench <collective> --json --out FILE`)",
                        p.display()
                    )))
                }
            }
        }
        Ok(Side { runs })
    };
    let (after, before) = (read(&args.after)?, read(&args.before)?);
    let c = compare(&after, &before, args.candidate.as_deref()).map_err(io)?;
    if args.json {
        println!("{}", render_json(&c));
    } else {
        print!("{}", render_table(&c));
    }
    if c.wrong > 0 {
        eprintln!(
            "nvsh: compare: {} wrong outputs in the files read (their cells left out); the \
             results of those runs are not to be trusted",
            c.wrong
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
