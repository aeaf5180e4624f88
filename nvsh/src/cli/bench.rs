//! `nvsh bench ...`: benchmarks, run on every PE of a job; PE 0 prints the results.

use clap::{Args, Subcommand};
use nvsh::bench::allreduce::{self, AllreduceBenchOptions, BenchDtype, Candidate};
use nvsh::bench::family::{self, FamilyBenchOptions, Kind};
use nvsh::bench::harness::{self, Report};
use nvsh::bench::put::{self, PutBenchOptions};
use nvshmem::{Error, Nvshmem, ReduceOp, Result};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Device-initiated put bandwidth (PE 0 -> PE 1) per size, and one-way latency.
    Put(PutArgs),
    /// Allreduce: our algorithms, the automatic choice, NCCL and NVSHMEM's reduce, per size and
    /// dtype, with the time ratio ours (auto) / NCCL.
    Allreduce(AllreduceArgs),
    /// Broadcast from --root: ours and NCCL per size and dtype, with the time ratio ours / NCCL
    /// (size = each PE's buffer, bus factor 1, as nccl-tests).
    Broadcast(BroadcastArgs),
    /// Allgather: ours and NCCL per size and dtype, with the time ratio ours / NCCL (size = the
    /// n x count output, bus factor (n-1)/n, as nccl-tests).
    Allgather(FamilyArgs),
    /// Alltoall: ours and NCCL (grouped sends and receives) per size and dtype, with the time
    /// ratio ours / NCCL (size = the n x count input, bus factor (n-1)/n, as nccl-tests).
    Alltoall(FamilyArgs),
    /// Reduce-scatter: ours and NCCL per size and dtype, with the time ratio ours / NCCL
    /// (size = the n x count input, bus factor (n-1)/n, as nccl-tests).
    ReduceScatter(ReduceScatterArgs),
    /// Reduce to --root: ours and NCCL per size and dtype, with the time ratio ours / NCCL
    /// (size = each PE's buffer, bus factor 1, as nccl-tests); only the root's output is
    /// checked.
    Reduce(ReduceArgs),
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

/// The options every collective bench takes.
#[derive(Args)]
pub struct CollectiveArgs {
    /// Smallest message (bytes; K, M, G suffixes): nccl-tests' size, for allgather, alltoall
    /// and reduce-scatter the n x count buffer, count rounded down to 16 bytes.
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    min: usize,
    /// Largest message (sizes double from --min).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    max: usize,
    /// Element types, comma-separated: f32, bf16.
    #[arg(long, default_value = "f32,bf16", value_delimiter = ',', value_parser = BenchDtype::parse)]
    dtypes: Vec<BenchDtype>,
    /// Timed groups per size and candidate (the median is reported); every call is checked.
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Untimed calls before the groups.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write the results to this file (from PE 0) instead of standard output.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

/// The options of the reductions: allreduce, reduce-scatter and reduce.
#[derive(Args)]
pub struct ReductionArgs {
    /// Reduction: sum, prod, min, max or avg.
    #[arg(long, default_value = "sum", value_parser = allreduce::parse_op)]
    op: ReduceOp,
    /// Receive slot size of our workspace (2 x PEs slots).
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    slot: usize,
}

#[derive(Args)]
pub struct AllreduceArgs {
    #[command(flatten)]
    common: CollectiveArgs,
    #[command(flatten)]
    reduction: ReductionArgs,
    /// What to time, comma-separated: oneshot, twoshot, ring, rd, auto, nccl, nvshmem.
    #[arg(
        long,
        default_value = "oneshot,twoshot,ring,rd,auto,nccl,nvshmem",
        value_delimiter = ',',
        value_parser = Candidate::parse
    )]
    algos: Vec<Candidate>,
}

/// The options of the collectives beside allreduce (all of allgather's and alltoall's).
#[derive(Args)]
pub struct FamilyArgs {
    #[command(flatten)]
    common: CollectiveArgs,
    /// What to time, comma-separated: ours, nccl.
    #[arg(
        long,
        default_value = "ours,nccl",
        value_delimiter = ',',
        value_parser = family::Candidate::parse
    )]
    algos: Vec<family::Candidate>,
}

/// The root of broadcast and reduce.
#[derive(Args)]
pub struct RootArg {
    /// The root PE (a PE of the job).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..))]
    root: i32,
}

#[derive(Args)]
pub struct BroadcastArgs {
    #[command(flatten)]
    family: FamilyArgs,
    #[command(flatten)]
    root: RootArg,
}

#[derive(Args)]
pub struct ReduceScatterArgs {
    #[command(flatten)]
    family: FamilyArgs,
    #[command(flatten)]
    reduction: ReductionArgs,
}

#[derive(Args)]
pub struct ReduceArgs {
    #[command(flatten)]
    family: FamilyArgs,
    #[command(flatten)]
    reduction: ReductionArgs,
    #[command(flatten)]
    root: RootArg,
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
        BenchCommand::Broadcast(a) => family(Kind::Broadcast, &a.family, None, Some(&a.root)),
        BenchCommand::Allgather(a) => family(Kind::Allgather, &a, None, None),
        BenchCommand::Alltoall(a) => family(Kind::Alltoall, &a, None, None),
        BenchCommand::ReduceScatter(a) => {
            family(Kind::ReduceScatter, &a.family, Some(&a.reduction), None)
        }
        BenchCommand::Reduce(a) => {
            family(Kind::Reduce, &a.family, Some(&a.reduction), Some(&a.root))
        }
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
        let c = &self.common;
        AllreduceBenchOptions {
            min_bytes: c.min,
            max_bytes: c.max,
            dtypes: dedup(&c.dtypes),
            op: self.reduction.op,
            reps: c.reps,
            warmup: c.warmup,
            candidates: dedup(&self.algos),
            slot_bytes: self.reduction.slot,
        }
    }
}

/// The options of `kind`'s bench from its arguments (the reduction and the root where it takes
/// them; the defaults, unused, where it does not).
fn family_options(
    kind: Kind,
    args: &FamilyArgs,
    reduction: Option<&ReductionArgs>,
    root: Option<&RootArg>,
) -> FamilyBenchOptions {
    let c = &args.common;
    let mut o = FamilyBenchOptions::new(kind);
    o.min_bytes = c.min;
    o.max_bytes = c.max;
    o.dtypes = dedup(&c.dtypes);
    o.reps = c.reps;
    o.warmup = c.warmup;
    o.candidates = dedup(&args.algos);
    if let Some(r) = reduction {
        o.op = r.op;
        o.slot_bytes = r.slot;
    }
    if let Some(r) = root {
        o.root = r.root;
    }
    o
}

/// Initialises the PE, runs a collective bench and, on PE 0, prints its report and fails when
/// an output was wrong or a requested candidate could not run.
fn collective(
    common: &CollectiveArgs,
    bench: impl FnOnce(&Nvshmem) -> Result<Option<Report>>,
) -> Result<()> {
    check_min_max(common.min, common.max)?;
    let nv = Nvshmem::init()?;
    if let Some(report) = bench(&nv)? {
        let text = if common.json {
            harness::render_json(&report) + "\n"
        } else {
            harness::render_table(&report)
        };
        emit(&text, common.out.as_deref())?;
        // Printed first, so the table shows which results were wrong or missing; then the
        // exit status says so.
        report.verify()?;
    }
    Ok(())
}

fn allreduce(args: AllreduceArgs) -> Result<()> {
    let opts = args.options();
    collective(&args.common, |nv| allreduce::run(nv, &opts))
}

fn family(
    kind: Kind,
    args: &FamilyArgs,
    reduction: Option<&ReductionArgs>,
    root: Option<&RootArg>,
) -> Result<()> {
    let opts = family_options(kind, args, reduction, root);
    collective(&args.common, |nv| family::run(nv, &opts))
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
            _ => Err("parsed as another bench".into()),
        }
    }

    /// The options `nvsh bench <name> ARGS` runs with.
    fn family_opts(name: &str, args: &[&str]) -> std::result::Result<FamilyBenchOptions, String> {
        let argv = ["bench", name].into_iter().chain(args.iter().copied());
        Ok(
            match Cli::try_parse_from(argv).map_err(|e| e.to_string())?.bench {
                BenchCommand::Broadcast(a) => {
                    family_options(Kind::Broadcast, &a.family, None, Some(&a.root))
                }
                BenchCommand::Allgather(a) => family_options(Kind::Allgather, &a, None, None),
                BenchCommand::Alltoall(a) => family_options(Kind::Alltoall, &a, None, None),
                BenchCommand::ReduceScatter(a) => {
                    family_options(Kind::ReduceScatter, &a.family, Some(&a.reduction), None)
                }
                BenchCommand::Reduce(a) => {
                    family_options(Kind::Reduce, &a.family, Some(&a.reduction), Some(&a.root))
                }
                _ => return Err("parsed as another bench".into()),
            },
        )
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
        assert!(a.common.json && a.common.out.is_some());
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
    fn family_benches_default_as_allreduce_with_ours_and_nccl() {
        for kind in Kind::ALL {
            let o = family_opts(kind.name(), &[]).unwrap();
            assert_eq!(o.kind, kind);
            assert_eq!((o.min_bytes, o.max_bytes), (4 << 10, 256 << 20));
            assert_eq!(o.dtypes, vec![BenchDtype::F32, BenchDtype::Bf16]);
            assert_eq!(
                o.candidates,
                vec![family::Candidate::Ours, family::Candidate::Nccl]
            );
            assert_eq!((o.op, o.root, o.reps, o.warmup), (ReduceOp::Sum, 0, 20, 3));
            assert_eq!(o.slot_bytes, 8 << 20);
        }
    }

    #[test]
    fn family_options_parse_where_the_collective_takes_them() {
        let o = family_opts(
            "reduce",
            &[
                "--root",
                "1",
                "--op",
                "max",
                "--slot",
                "1M",
                "--algos",
                "nccl,ours,nccl",
                "--dtypes",
                "bf16",
                "--min",
                "64K",
                "--max",
                "1M",
                "--reps",
                "5",
            ],
        )
        .unwrap();
        assert_eq!((o.kind, o.root, o.op), (Kind::Reduce, 1, ReduceOp::Max));
        assert_eq!(o.slot_bytes, 1 << 20);
        assert_eq!(
            o.candidates,
            vec![family::Candidate::Nccl, family::Candidate::Ours]
        );
        assert_eq!(o.dtypes, vec![BenchDtype::Bf16]);
        assert_eq!((o.min_bytes, o.max_bytes, o.reps), (64 << 10, 1 << 20, 5));
        let o = family_opts("reduce-scatter", &["--op", "avg"]).unwrap();
        assert_eq!((o.kind, o.op), (Kind::ReduceScatter, ReduceOp::Avg));
        let o = family_opts("broadcast", &["--root", "3", "--json"]).unwrap();
        assert_eq!((o.kind, o.root), (Kind::Broadcast, 3));
        // Each takes only the options that mean something for it.
        for (name, bad) in [
            ("allgather", &["--op", "sum"][..]),
            ("alltoall", &["--root", "1"]),
            ("broadcast", &["--op", "max"]),
            ("reduce-scatter", &["--root", "1"]),
            ("allgather", &["--slot", "1M"]),
            ("reduce", &["--root", "-1"]),
            ("reduce", &["--algos", "auto"]),
            ("broadcast", &["--dtypes", "f16"]),
            ("reducescatter", &[]),
        ] {
            assert!(family_opts(name, bad).is_err(), "{name} {bad:?}");
        }
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
