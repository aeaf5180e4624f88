//! `nvsh bench ...`: benchmarks, run on every PE of a job; PE 0 prints the results.

use clap::{Args, Subcommand};
use nvsh::bench::allreduce::{self, AllreduceBenchOptions, BenchDtype, Candidate};
use nvsh::bench::harness;
use nvsh::bench::put::{self, PutBenchOptions};
use nvshmem::{Error, Nvshmem, ReduceOp, Result};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Device-initiated put bandwidth (PE 0 -> PE 1) per size, and one-way latency.
    Put(PutArgs),
    /// Allreduce: our algorithms, the automatic choice, NCCL and NVSHMEM's reduce, per size and
    /// dtype, with the time ratio ours (auto) / NCCL.
    Allreduce(AllreduceArgs),
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

#[derive(Args)]
pub struct AllreduceArgs {
    /// Smallest message (bytes; K, M, G suffixes).
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    min: usize,
    /// Largest message (sizes double from --min).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    max: usize,
    /// Element types, comma-separated: f32, bf16.
    #[arg(long, default_value = "f32,bf16", value_delimiter = ',', value_parser = BenchDtype::parse)]
    dtypes: Vec<BenchDtype>,
    /// Reduction: sum, prod, min, max or avg.
    #[arg(long, default_value = "sum", value_parser = allreduce::parse_op)]
    op: ReduceOp,
    /// Timed groups per size and candidate (the median is reported); every call is checked.
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Untimed calls before the groups.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// What to time, comma-separated: oneshot, twoshot, ring, rd, auto, nccl, nvshmem.
    #[arg(
        long,
        default_value = "oneshot,twoshot,ring,rd,auto,nccl,nvshmem",
        value_delimiter = ',',
        value_parser = Candidate::parse
    )]
    algos: Vec<Candidate>,
    /// Receive slot size of our allreduce workspace (2 x PEs slots).
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    slot: usize,
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
        BenchCommand::Allreduce(args) => allreduce(args),
    }
}

fn check_min_max(min: usize, max: usize) -> Result<()> {
    if min > max {
        return Err(Error::InvalidEnv {
            var: "--min/--max",
            value: format!("{min} > {max}"),
            expected: "--min no larger than --max",
        });
    }
    Ok(())
}

/// The results to --out, else standard output.
fn emit(text: &str, out: Option<&std::path::Path>) -> Result<()> {
    match out {
        Some(path) => std::fs::write(path, text).map_err(|e| Error::Io {
            what: format!("writing {}", path.display()),
            message: e.to_string(),
        }),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// A list without repeats, first occurrence kept.
fn dedup<T: PartialEq + Copy>(list: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for &x in list {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

impl AllreduceArgs {
    fn options(&self) -> AllreduceBenchOptions {
        AllreduceBenchOptions {
            min_bytes: self.min,
            max_bytes: self.max,
            dtypes: dedup(&self.dtypes),
            op: self.op,
            reps: self.reps,
            warmup: self.warmup,
            candidates: dedup(&self.algos),
            slot_bytes: self.slot,
        }
    }
}

fn allreduce(args: AllreduceArgs) -> Result<()> {
    check_min_max(args.min, args.max)?;
    let nv = Nvshmem::init()?;
    if let Some(report) = allreduce::run(&nv, &args.options())? {
        let text = if args.json {
            harness::render_json(&report) + "\n"
        } else {
            harness::render_table(&report)
        };
        emit(&text, args.out.as_deref())?;
        // Printed first, so the table shows which results were wrong or missing; then the
        // exit status says so.
        report.verify()?;
    }
    Ok(())
}

fn put(args: PutArgs) -> Result<()> {
    check_min_max(args.min, args.max)?;
    let nv = Nvshmem::init()?;
    let opts = PutBenchOptions {
        min_bytes: args.min,
        max_bytes: args.max,
        reps: args.reps,
        sweep: args.sweep,
        ..PutBenchOptions::default()
    };
    if let Some(report) = put::run(&nv, &opts)? {
        let text = if args.json {
            put::render_json(&report) + "\n"
        } else {
            put::render_table(&report)
        };
        emit(&text, args.out.as_deref())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        bench: BenchCommand,
    }

    fn allreduce_args(args: &[&str]) -> std::result::Result<AllreduceArgs, String> {
        let argv = ["bench", "allreduce"].iter().chain(args);
        match Cli::try_parse_from(argv).map_err(|e| e.to_string())?.bench {
            BenchCommand::Allreduce(a) => Ok(a),
            BenchCommand::Put(_) => Err("parsed as put".into()),
        }
    }

    #[test]
    fn allreduce_defaults_cover_everything() {
        let o = allreduce_args(&[]).unwrap().options();
        assert_eq!((o.min_bytes, o.max_bytes), (4 << 10, 256 << 20));
        assert_eq!(o.dtypes, vec![BenchDtype::F32, BenchDtype::Bf16]);
        assert_eq!(o.candidates, Candidate::ALL.to_vec());
        assert_eq!((o.op, o.reps, o.warmup), (ReduceOp::Sum, 20, 3));
        assert_eq!(o.slot_bytes, 8 << 20);
    }

    #[test]
    fn allreduce_lists_parse_and_dedup() {
        let a = allreduce_args(&[
            "--dtypes",
            "bf16",
            "--algos",
            "nccl,auto,NCCL",
            "--op",
            "max",
            "--min",
            "1M",
            "--max",
            "16M",
            "--json",
            "--out",
            "r.json",
        ])
        .unwrap();
        assert!(a.json && a.out.is_some());
        let o = a.options();
        assert_eq!(o.dtypes, vec![BenchDtype::Bf16]);
        assert_eq!(o.candidates, vec![Candidate::Nccl, Candidate::Auto]);
        assert_eq!(
            (o.op, o.min_bytes, o.max_bytes),
            (ReduceOp::Max, 1 << 20, 16 << 20)
        );
        let a = allreduce_args(&["--algos", "oneshot", "--algos", "twoshot"]).unwrap();
        assert_eq!(a.algos, vec![Candidate::OneShot, Candidate::TwoShot]);
    }

    #[test]
    fn allreduce_rejects_unknown_names() {
        for bad in [
            &["--dtypes", "f16"][..],
            &["--algos", "butterfly"],
            &["--op", "xor"],
            &["--max", "x"],
        ] {
            assert!(allreduce_args(bad).is_err(), "{bad:?}");
        }
        assert!(check_min_max(2, 1).is_err() && check_min_max(1, 1).is_ok());
    }

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
