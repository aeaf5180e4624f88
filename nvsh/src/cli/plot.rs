//! `nvsh plot RESULT.json --out FILE.png`: draws a bench result stored with `--json` (no GPU
//! needed), as `nvsh bench ... --plot` draws the run it makes.

use clap::Args;
use nvsh::bench::plot::{plot_bench, Plotted};
use nvsh::bench::stored::read_bench_json;
use nvshmem::{Error, Result};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct PlotArgs {
    /// A result of `nvsh bench ... --json --out FILE` (any bench).
    #[arg(value_name = "RESULT.json")]
    json: PathBuf,
    /// The PNG to write: time and bandwidth against message size, log axes, a line per
    /// candidate (and a dotted one after a compute kernel, where the file has those times),
    /// two charts per dtype.
    #[arg(long, value_name = "FILE.png")]
    out: PathBuf,
}

pub fn run(args: PlotArgs) -> Result<()> {
    let io = |what: String| move |message: String| Error::Io { what, message };
    nvsh_plot::check_writable(&args.out).map_err(io("--out".into()))?;
    let bench = read_bench_json(&args.json).map_err(io("plot".into()))?;
    let plotted = plot_bench(&bench, &args.out).map_err(io("plot".into()))?;
    tell(&args.out, &plotted);
    Ok(())
}

/// Says what was written, what was left out of the chart and, when there is no font, that the
/// chart has no text (on standard error: standard output may be carrying the results).
pub fn tell(path: &Path, p: &Plotted) {
    eprintln!(
        "nvsh: plot: wrote {} ({}x{} pixels)",
        path.display(),
        p.width,
        p.height
    );
    for note in &p.notes {
        eprintln!("nvsh: plot: {note}");
    }
    if let Some(w) = &p.warning {
        eprintln!("nvsh: warning: {w}");
    }
}
