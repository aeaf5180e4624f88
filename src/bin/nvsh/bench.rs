//! `nvsh bench ...`: benchmarks, run on every PE of a job; PE 0 prints the results.

use clap::{Args, Subcommand};
use nvshmem::bench_put::{self, PutBenchOptions};
use nvshmem::{Error, Nvshmem, Result};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Device-initiated put bandwidth (PE 0 -> PE 1) per size, and one-way latency.
    Put(PutArgs),
}

#[derive(Args)]
pub struct PutArgs {
    /// Smallest message (bytes; K, M, G suffixes).
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    min: usize,
    /// Largest message.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    max: usize,
    /// Timed repetitions per size (the median is reported).
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Also time a grid of launch shapes (blocks x threads) at 64K, 1M, 16M and 256M.
    #[arg(long)]
    sweep: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write the results to this file (from PE 0) instead of standard output.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

/// "4K", "16M", "1G" or plain bytes.
pub fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let s = s.trim();
    let (digits, shift) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("'{s}' is not a size like 4096, 4K, 16M or 1G"))
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Put(args) => put(args),
    }
}

fn put(args: PutArgs) -> Result<()> {
    if args.min > args.max {
        return Err(Error::InvalidEnv {
            var: "--min/--max",
            value: format!("{} > {}", args.min, args.max),
            expected: "--min no larger than --max",
        });
    }
    let nv = Nvshmem::init()?;
    let opts = PutBenchOptions {
        min_bytes: args.min,
        max_bytes: args.max,
        reps: args.reps,
        sweep: args.sweep,
        ..PutBenchOptions::default()
    };
    if let Some(report) = bench_put::run(&nv, &opts)? {
        let text = if args.json {
            bench_put::render_json(&report) + "\n"
        } else {
            bench_put::render_table(&report)
        };
        match &args.out {
            Some(path) => std::fs::write(path, text).map_err(|e| Error::Io {
                what: format!("writing {}", path.display()),
                message: e.to_string(),
            })?,
            None => print!("{text}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
    }
}
