//! `nvsh bench ...`: benchmarks, run on every PE of a job; PE 0 prints the results.

use clap::builder::PossibleValue;
use clap::{Args, Subcommand, ValueEnum};
use nvsh::bench::allreduce::{self, AllreduceBenchOptions, BenchDtype, Candidate};
use nvsh::bench::family::{self, FamilyBenchOptions, Kind};
use nvsh::bench::harness::{self, RatioOn, Report};
use nvsh::bench::probe::{self, ProbeOptions};
use nvsh::bench::put::{self, PutBenchOptions};
use nvsh::bench::render;
use nvsh::bench::sparse::{self, SparseBenchOptions};
use nvsh::error::ToolResult;
use nvshmem::tools::size_label;
use nvshmem::{Error, Nvshmem, ReduceOp, Result, SparseMethod};
use std::path::Path;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Device-initiated put bandwidth (PE 0 -> PE 1) per size, and one-way latency.
    Put(PutArgs),
    /// What our small allreduce costs, split into rungs launched as the low-latency one-shot:
    /// an empty kernel, one round of flags, the data as lines, the one-shot itself; each back
    /// to back and after a compute kernel, with the differences between rungs.
    Probe(ProbeArgs),
    /// Allreduce: our algorithms, the automatic choice, NCCL and NVSHMEM's reduce, per size and
    /// dtype, with the time ratio ours (auto) / NCCL.
    Allreduce(AllreduceArgs),
    /// The collectives beside allreduce, one subcommand per kind of the library's table
    /// ([`Kind::all`]): broadcast, reduce, allgather, ..., sendrecv-ring, sendrecv-all.
    #[command(flatten)]
    Family(FamilyCommand),
    /// Sparse gradient allreduce: per method, density and gradient size, the time of the whole
    /// call (selection included), the bytes each PE sends and the relative error against the
    /// exact sum of the selected elements; dense allreduce (ours and NCCL) alongside.
    Sparse(SparseArgs),
}

#[derive(Args)]
pub struct SparseArgs {
    /// Methods, comma-separated: topk, topk_aopt, gaussiank, gaussiank_concat, gtopk, oktopk,
    /// topk_sa, gaussiank_sa.
    #[arg(
        long,
        value_name = "METHODS",
        default_value = "topk,topk_aopt,gaussiank,gaussiank_concat,gtopk,oktopk,topk_sa,gaussiank_sa",
        value_delimiter = ',',
        value_parser = parse_method
    )]
    methods: Vec<SparseMethod>,
    /// Densities (the share each PE sends), comma-separated, each in (0, 1].
    #[arg(
        long,
        value_name = "DENSITIES",
        default_value = "0.001,0.01,0.1",
        value_delimiter = ',',
        value_parser = parse_density
    )]
    densities: Vec<f64>,
    /// Smallest gradient (bytes; K, M, G suffixes).
    #[arg(short = 'b', long = "min", default_value = "1M", value_parser = parse_size)]
    min: usize,
    /// Largest gradient: no size above it is run.
    #[arg(short = 'e', long = "max", default_value = "256M", value_parser = parse_size)]
    max: usize,
    /// Size growth factor, at least 2.
    #[arg(short = 'f', long = "factor", default_value = "4", value_parser = parse_factor)]
    factor: usize,
    /// bf16 gradients instead of f32.
    #[arg(long)]
    bf16: bool,
    /// Timed repetitions (groups of 3 calls); the median is reported.
    #[arg(short = 'n', long = "reps", default_value_t = 5)]
    reps: usize,
    /// Untimed calls first.
    #[arg(short = 'w', long = "warmup", default_value_t = 2)]
    warmup: usize,
    /// Time the sparse calls without error feedback.
    #[arg(long)]
    no_error_feedback: bool,
    /// Leave NCCL's dense allreduce out.
    #[arg(long)]
    no_nccl: bool,
    /// Leave the selection kernels' rows out (top-k, threshold, and a copy as memory speed).
    #[arg(long, conflicts_with = "select_only")]
    no_select: bool,
    /// Time only the selection kernels (one PE's work: no exchange, no dense allreduce).
    #[arg(long)]
    select_only: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write the results to this file (from PE 0) instead of standard output.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn parse_method(s: &str) -> std::result::Result<SparseMethod, String> {
    SparseMethod::from_name(s.trim()).map_err(|e| e.to_string())
}

fn parse_density(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(d) if d > 0.0 && d <= 1.0 => Ok(d),
        _ => Err(format!(
            "{s:?} is not a density in (0, 1]; pass e.g. 0.01 for 1%"
        )),
    }
}

fn sparse_bench(args: SparseArgs) -> Result<()> {
    check_min_max(args.min, args.max).unwrap_or_else(|e| e.exit());
    check_outputs(args.out.as_deref(), None)?;
    let opts = SparseBenchOptions {
        methods: dedup(&args.methods),
        densities: args.densities.clone(),
        min_bytes: args.min,
        max_bytes: args.max,
        factor: args.factor,
        bf16: args.bf16,
        reps: args.reps,
        warmup: args.warmup,
        error_feedback: !args.no_error_feedback,
        nccl: !args.no_nccl,
        select: !args.no_select,
        exchange: !args.select_only,
    };
    let nv = Nvshmem::init()?;
    let json = args.json;
    // With --out, the file holds the rows so far after every gradient size.
    let mut partial = rewriter(args.out.as_deref(), |r: &sparse::SparseBenchReport| {
        if json {
            sparse::render_json_partial(r) + "\n"
        } else {
            sparse::render_table(r)
        }
    });
    if let Some(report) = sparse::run(&nv, &opts, &mut partial)? {
        let text = if json {
            sparse::render_json(&report) + "\n"
        } else {
            sparse::render_table(&report)
        };
        emit(&text, args.out.as_deref())?;
    }
    Ok(())
}

// Flags follow nccl-tests (-b -e -f -n -w -c -d -o, with its long spellings as aliases), so
// that a command line of one runs the other's sizes and settings.

#[derive(Args)]
pub struct PutArgs {
    #[command(flatten)]
    sizes: SizeArgs,
    /// Also time a grid of launch shapes (blocks x threads) at 64K, 1M, 16M and 256M.
    #[arg(long)]
    sweep: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write the results to this file (from PE 0) instead of standard output.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Also draw the results as a PNG chart: time and bandwidth against message size, log
    /// axes, a line per candidate (from PE 0; the path is checked before the bench starts).
    #[arg(long, value_name = "FILE.png")]
    plot: Option<std::path::PathBuf>,
}

#[derive(Args)]
pub struct ProbeArgs {
    /// Message size (bytes; K, M suffixes): a multiple of 8, at most 256K (the low-latency
    /// one-shot's default limit at more than 2 PEs).
    #[arg(
        short = 'b',
        long = "bytes",
        value_name = "BYTES",
        default_value = "4K",
        value_parser = parse_probe_bytes
    )]
    bytes: usize,
    /// Timed groups per rung and timing; the median is reported.
    #[arg(short = 'n', long = "reps", default_value_t = 20)]
    reps: usize,
    /// Untimed calls before the groups (they also size them).
    #[arg(short = 'w', long = "warmup", default_value_t = 3)]
    warmup: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write the results to this file (from PE 0) instead of standard output.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

impl ProbeArgs {
    fn options(&self) -> ProbeOptions {
        ProbeOptions {
            bytes: self.bytes,
            reps: self.reps,
            warmup: self.warmup,
        }
    }
}

/// The probe's size: [`parse_size`], a multiple of 8 (its lines carry 8 bytes) and no more
/// than the size up to which the one-shot takes its low-latency path by default.
fn parse_probe_bytes(s: &str) -> std::result::Result<usize, String> {
    let bytes = parse_size(s)?;
    let max = nvshmem::tools::LL_MAX_DEFAULT_WIDE;
    if bytes % 8 != 0 {
        return Err(format!("{bytes} bytes is not a multiple of 8"));
    }
    if bytes > max {
        return Err(format!(
            "{} is above {}, where the one-shot leaves its low-latency path by default",
            size_label(bytes),
            size_label(max)
        ));
    }
    Ok(bytes)
}

fn probe_bench(args: ProbeArgs) -> ToolResult<()> {
    check_outputs(args.out.as_deref(), None)?;
    let nv = Nvshmem::init()?;
    if let Some(report) = probe::run(&nv, &args.options())? {
        let text = if args.json {
            probe::render_json(&report) + "\n"
        } else {
            probe::render_table(&report)
        };
        emit(&text, args.out.as_deref())?;
        // Printed first, so the table shows which rung failed; then the exit status says so.
        report.verify()?;
    }
    Ok(())
}

/// Sizes and repetitions, as every bench takes them.
#[derive(Args)]
pub struct SizeArgs {
    /// Smallest message (bytes; K, M, G suffixes): nccl-tests' size, for allgather, alltoall
    /// and reduce-scatter the n x count buffer, count rounded down to 16 bytes.
    #[arg(
        short = 'b',
        long = "min",
        visible_alias = "minbytes",
        value_name = "BYTES",
        default_value = "4K",
        value_parser = parse_size
    )]
    min: usize,
    /// Largest message: no size above it is run.
    #[arg(
        short = 'e',
        long = "max",
        visible_alias = "maxbytes",
        value_name = "BYTES",
        default_value = "256M",
        value_parser = parse_size
    )]
    max: usize,
    /// Size growth factor, a whole number of at least 2: sizes go --min, --min x F, --min x
    /// F^2, ... up to --max.
    #[arg(
        short = 'f',
        long = "factor",
        visible_alias = "stepfactor",
        value_name = "F",
        default_value = "2",
        value_parser = parse_factor
    )]
    factor: usize,
    /// Timed repetitions per size (for the collectives, groups of calls per size and
    /// candidate); the median is reported, and every timed call is checked.
    #[arg(
        short = 'n',
        long = "reps",
        visible_alias = "iters",
        default_value_t = 20
    )]
    reps: usize,
}

/// The options every collective bench takes.
#[derive(Args)]
pub struct CollectiveArgs {
    #[command(flatten)]
    sizes: SizeArgs,
    /// Element types, comma-separated, or `all` (every type the collective takes: the reductions
    /// all but u8). nccl-tests' and NCCL's names are taken too (float, half, double, bfloat16,
    /// int32, uint32, int64, uint64, uint8, ...).
    #[arg(
        short = 'd',
        long = "dtypes",
        visible_alias = "datatype",
        value_name = "DTYPES",
        default_value = "f32,bf16",
        value_delimiter = ',',
        ignore_case = true
    )]
    dtypes: Vec<DtypeArg>,
    /// Untimed calls before the groups.
    #[arg(
        short = 'w',
        long = "warmup",
        visible_alias = "warmup_iters",
        default_value_t = 3
    )]
    warmup: usize,
    /// nccl-tests' check flag: only 1 is taken, since every timed result is always checked.
    #[arg(
        short = 'c',
        long = "check",
        value_name = "0|1",
        default_value = "1",
        value_parser = parse_check
    )]
    // Parsed only to refuse -c 0 with a reason; there is nothing to switch.
    #[allow(dead_code)]
    check: u8,
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV instead of a table: a line per size and candidate (time, algbw, busbw,
    /// #wrong, status).
    #[arg(long)]
    csv: bool,
    /// The timing the ratio to NCCL (ours over the faster NCCL path at each size, and which
    /// path that is) is taken on; the ratio on the other timing is printed beside it, and both
    /// times always are.
    #[arg(
        long,
        value_name = "TIMING",
        default_value = "after-compute",
        ignore_case = true
    )]
    ratio_on: RatioOn,
    /// Write the results to this file (from PE 0) instead of standard output. The file is
    /// rewritten after every size and dtype with the rows so far, so a run cut short leaves what
    /// it measured; in JSON, "complete" is false until the last write.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Also draw the results as a PNG chart: time and bus bandwidth against message size, log
    /// axes, a line per candidate back to back and a dotted one after compute, two charts per
    /// dtype (from PE 0; the path is checked before the bench starts).
    #[arg(long, value_name = "FILE.png")]
    plot: Option<std::path::PathBuf>,
}

/// What `-d` takes: one element type, or `all` (nccl-tests' `-d all`), which stands for every
/// type the collective takes and so is resolved per bench ([`resolve_dtypes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DtypeArg {
    One(BenchDtype),
    All,
}

impl DtypeArg {
    const VARIANTS: [DtypeArg; 10] = [
        DtypeArg::One(BenchDtype::F32),
        DtypeArg::One(BenchDtype::Bf16),
        DtypeArg::One(BenchDtype::F16),
        DtypeArg::One(BenchDtype::F64),
        DtypeArg::One(BenchDtype::I32),
        DtypeArg::One(BenchDtype::U32),
        DtypeArg::One(BenchDtype::I64),
        DtypeArg::One(BenchDtype::U64),
        DtypeArg::One(BenchDtype::U8),
        DtypeArg::All,
    ];
}

// By hand rather than derived: the types' names and aliases stay BenchDtype's, with `all` added.
impl ValueEnum for DtypeArg {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::VARIANTS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        match self {
            DtypeArg::One(d) => d.to_possible_value(),
            DtypeArg::All => Some(PossibleValue::new("all")),
        }
    }
}

/// The types `-d` names for a collective (`all`: every type it takes), without repeats, in the
/// order given.
pub fn resolve_dtypes(args: &[DtypeArg], reduces: bool) -> Vec<BenchDtype> {
    let mut out: Vec<BenchDtype> = Vec::new();
    for a in args {
        let each: &[BenchDtype] = match a {
            DtypeArg::One(d) => std::slice::from_ref(d),
            DtypeArg::All => BenchDtype::taken_by(reduces),
        };
        for &d in each {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// A type the collective does not take is a usage error, reported as clap reports a bad flag
/// value (its exit status too), before the PE starts.
fn check_dtype_flag(
    collective: &str,
    reduces: bool,
    dtypes: &[BenchDtype],
) -> std::result::Result<(), clap::Error> {
    harness::check_dtypes(collective, reduces, dtypes).map_err(|why| {
        clap::Error::raw(
            clap::error::ErrorKind::InvalidValue,
            format!("--dtypes (-d): {why}\n"),
        )
    })
}

/// The reductions as the command line names them: the library's [`ReduceOp`] is not a clap
/// type, and this one lets `--help` list the names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OpArg {
    Sum,
    Prod,
    Min,
    Max,
    Avg,
}

impl From<OpArg> for ReduceOp {
    fn from(op: OpArg) -> ReduceOp {
        match op {
            OpArg::Sum => ReduceOp::Sum,
            OpArg::Prod => ReduceOp::Prod,
            OpArg::Min => ReduceOp::Min,
            OpArg::Max => ReduceOp::Max,
            OpArg::Avg => ReduceOp::Avg,
        }
    }
}

/// The options of the reductions: allreduce, reduce-scatter and reduce.
#[derive(Args)]
pub struct ReductionArgs {
    /// Reduction.
    #[arg(
        short = 'o',
        long = "op",
        value_name = "OP",
        default_value = "sum",
        ignore_case = true
    )]
    op: OpArg,
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
    /// What to time, comma-separated [default: all of them]. nccl-sym, which the default
    /// brings, is reported as n/a without failing the run where it cannot run (NCCL older than
    /// 2.27); named here, it fails the run like any other.
    #[arg(long, value_name = "ALGOS", value_delimiter = ',', ignore_case = true)]
    algos: Option<Vec<Candidate>>,
}

/// The options of the collectives beside allreduce (all of allgather's and alltoall's).
#[derive(Args)]
pub struct FamilyArgs {
    #[command(flatten)]
    common: CollectiveArgs,
    /// What to time, comma-separated [default: ours,nccl,nccl-sym]. nccl-sym, which the
    /// default brings, is reported as n/a without failing the run where it cannot run (NCCL
    /// older than 2.27); named here, it fails the run like any other. nvshmem (NVSHMEM's own
    /// collective, where it has one) runs only when named.
    #[arg(long, value_name = "ALGOS", value_delimiter = ',', ignore_case = true)]
    algos: Option<Vec<family::Candidate>>,
}

/// The root of broadcast and reduce.
#[derive(Args)]
pub struct RootArg {
    /// The root PE (a PE of the job).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..))]
    root: i32,
}

/// `nvsh bench <collective>` for a kind of the family bench: its options, with the op and
/// slot size where it reduces and the root where it takes one. Its subcommands come from the
/// table of collectives, so a new row brings its own.
pub struct FamilyCommand {
    kind: Kind,
    family: FamilyArgs,
    reduction: Option<ReductionArgs>,
    root: Option<RootArg>,
}

impl clap::FromArgMatches for FamilyCommand {
    fn from_arg_matches(m: &clap::ArgMatches) -> std::result::Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut m.clone())
    }

    fn from_arg_matches_mut(m: &mut clap::ArgMatches) -> std::result::Result<Self, clap::Error> {
        let missing = || clap::Error::new(clap::error::ErrorKind::MissingSubcommand);
        let (name, mut sub) = m.remove_subcommand().ok_or_else(missing)?;
        let kind = Kind::from_name(&name).ok_or_else(missing)?;
        Ok(FamilyCommand {
            kind,
            family: FamilyArgs::from_arg_matches_mut(&mut sub)?,
            reduction: kind
                .reduces()
                .then(|| ReductionArgs::from_arg_matches_mut(&mut sub))
                .transpose()?,
            root: kind
                .rooted()
                .then(|| RootArg::from_arg_matches_mut(&mut sub))
                .transpose()?,
        })
    }

    fn update_from_arg_matches(
        &mut self,
        m: &clap::ArgMatches,
    ) -> std::result::Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Subcommand for FamilyCommand {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        Kind::all().into_iter().fold(cmd, |cmd, kind| {
            let mut sub = FamilyArgs::augment_args(clap::Command::new(kind.name()));
            if kind.reduces() {
                sub = ReductionArgs::augment_args(sub);
            }
            if kind.rooted() {
                sub = RootArg::augment_args(sub);
            }
            // Last: each derived Args struct sets the command's help from its own doc comment.
            cmd.subcommand(sub.about(kind.about()))
        })
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_subcommands(cmd)
    }

    fn has_subcommand(name: &str) -> bool {
        Kind::from_name(name).is_some()
    }
}

impl FamilyCommand {
    /// The options it runs with.
    fn options(&self) -> FamilyBenchOptions {
        family_options(
            self.kind,
            &self.family,
            self.reduction.as_ref(),
            self.root.as_ref(),
        )
    }
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

/// The size growth factor (nccl-tests' -f): a whole number of at least 2, since 1 would never
/// reach --max.
pub fn parse_factor(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(f) if f >= 2 => Ok(f),
        Ok(f) => Err(format!(
            "a growth factor of {f} would not grow the sizes: give a whole number of at least \
             2 (2 doubles them)"
        )),
        Err(_) => Err(format!(
            "'{}' is not a whole number: give a growth factor of at least 2 (2 doubles the \
             sizes)",
            s.trim()
        )),
    }
}

/// nccl-tests' -c: 1 (check) is what always happens here, so it is taken; 0 (do not check) is
/// refused rather than ignored, so that nobody reads unchecked timings into a run.
pub fn parse_check(s: &str) -> std::result::Result<u8, String> {
    match s.trim() {
        "1" => Ok(1),
        "0" => Err(
            "every timed result is always checked here, so -c 0 (no checking) is not \
             offered; leave out -c, or pass -c 1"
                .into(),
        ),
        other => Err(format!(
            "'{other}' is not 0 or 1; only -c 1 is offered, since every timed result is always \
             checked here"
        )),
    }
}

pub fn run(cmd: BenchCommand) -> ToolResult<()> {
    match cmd {
        BenchCommand::Put(args) => put(args),
        BenchCommand::Probe(args) => probe_bench(args),
        BenchCommand::Allreduce(args) => allreduce(args),
        BenchCommand::Family(f) => family(f),
        BenchCommand::Sparse(a) => Ok(sparse_bench(a)?),
    }
}

/// --min above --max is a usage error, reported as clap reports a bad flag (its exit status
/// too), before the PE starts.
fn check_min_max(min: usize, max: usize) -> std::result::Result<(), clap::Error> {
    if min > max {
        return Err(clap::Error::raw(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "--min (-b) {} is larger than --max (-e) {}: give a smallest size no larger \
                 than the largest\n",
                size_label(min),
                size_label(max)
            ),
        ));
    }
    Ok(())
}

/// The results to --out, else standard output. The file is written whole or not at all
/// (through a temporary file renamed onto it), so an earlier result under that name survives a
/// failed write.
pub(crate) fn emit(text: &str, out: Option<&Path>) -> Result<()> {
    match out {
        Some(path) => nvsh_plot::write_atomic(path, text.as_bytes()).map_err(|e| Error::Io {
            what: format!("writing {}", path.display()),
            message: e.to_string(),
        }),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// Whether this process will be PE 0, the one that writes --out and --plot: rank 0 of `nvsh
/// run` or of an MPI-style launcher, or a process started alone. Read before NVSHMEM starts.
pub(crate) fn writes_results() -> bool {
    match nvshmem::launcher_env() {
        Ok(Some(l)) => l.rank == 0,
        _ => nvshmem::tools::bootstrap::step_env().is_none_or(|s| s.rank == 0),
    }
}

/// Checks --out and --plot before the bench starts, on the process that will write them: a
/// mistyped path must not cost a run (or overwrite the results with a chart).
pub(crate) fn check_outputs(out: Option<&Path>, plot: Option<&Path>) -> Result<()> {
    if !writes_results() {
        return Ok(());
    }
    check_output_paths(out, plot)
}

fn check_output_paths(out: Option<&Path>, plot: Option<&Path>) -> Result<()> {
    let refuse = |flag: &str, why: String| Error::Io {
        what: flag.to_string(),
        message: format!("{why}; checked before the bench, so nothing was run"),
    };
    if let (Some(o), Some(p)) = (out, plot) {
        if std::path::absolute(o).ok() == std::path::absolute(p).ok() {
            return Err(refuse(
                "--plot",
                format!(
                    "{} is also --out; give the chart a file of its own",
                    p.display()
                ),
            ));
        }
    }
    if let Some(o) = out {
        nvsh_plot::probe_writable(o).map_err(|why| refuse("--out", why))?;
    }
    if let Some(p) = plot {
        nvsh_plot::check_writable(p).map_err(|why| refuse("--plot", why))?;
    }
    Ok(())
}

/// Draws the results to --plot from the JSON they are written as, which is what `nvsh plot`
/// reads: a stored result draws as the live run did.
fn draw(json: &str, plot: &Path) -> Result<()> {
    let plotted =
        nvsh::bench::plot::plot_json(json, "the bench's results", plot).map_err(|why| {
            Error::Io {
                what: "--plot".into(),
                message: why,
            }
        })?;
    super::plot::tell(plot, &plotted);
    Ok(())
}

/// Fails with `verify`'s error first (wrong results matter more than a chart), then with the
/// chart's; both are printed.
fn verify_then(verify: ToolResult<()>, drawn: Result<()>) -> ToolResult<()> {
    if let (Err(_), Err(e)) = (&verify, &drawn) {
        eprintln!("nvsh: error: {e}");
    }
    verify.and(drawn.map_err(Into::into))
}

/// The candidates of `--algos` and the optional ones among them: the list as given (without
/// repeats) and none optional, else the default list and its `optional` ones.
fn chosen<T: PartialEq + Copy>(
    algos: Option<&[T]>,
    default: &[T],
    optional: &[T],
) -> (Vec<T>, Vec<T>) {
    match algos {
        Some(list) => (dedup(list), Vec::new()),
        None => (default.to_vec(), optional.to_vec()),
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
        let d = AllreduceBenchOptions::default();
        let (candidates, optional) = chosen(self.algos.as_deref(), &d.candidates, &d.optional);
        AllreduceBenchOptions {
            min_bytes: c.sizes.min,
            max_bytes: c.sizes.max,
            factor: c.sizes.factor,
            dtypes: resolve_dtypes(&c.dtypes, true),
            op: self.reduction.op.into(),
            reps: c.sizes.reps,
            warmup: c.warmup,
            candidates,
            optional,
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
    o.min_bytes = c.sizes.min;
    o.max_bytes = c.sizes.max;
    o.factor = c.sizes.factor;
    o.dtypes = resolve_dtypes(&c.dtypes, kind.reduces());
    o.reps = c.sizes.reps;
    o.warmup = c.warmup;
    (o.candidates, o.optional) = chosen(args.algos.as_deref(), &o.candidates, &o.optional);
    if let Some(r) = reduction {
        o.op = r.op.into();
        o.slot_bytes = r.slot;
    }
    if let Some(r) = root {
        o.root = r.root;
    }
    o
}

/// The report in the format the flags select; `complete` false for a report of the rows so
/// far (JSON's "complete").
fn rendered(common: &CollectiveArgs, report: &Report, complete: bool) -> String {
    let on = common.ratio_on;
    if common.json {
        let json = if complete {
            render::render_json(report, on)
        } else {
            render::render_json_partial(report, on)
        };
        json + "\n"
    } else if common.csv {
        render::render_csv(report, on)
    } else {
        render::render_table(report, on)
    }
}

/// What PE 0 does with the report of the rows so far: rewrites `out` with `render(report)`
/// (nothing without --out, since standard output cannot be rewritten). A failed write warns
/// once and the bench goes on: PE 0 stopping alone would leave the other PEs waiting, and the
/// end writes again.
fn rewriter<'a, R>(
    out: Option<&'a std::path::Path>,
    render: impl Fn(&R) -> String + 'a,
) -> impl FnMut(&R) + 'a {
    let mut warned = false;
    move |report: &R| {
        let Some(out) = out else {
            return;
        };
        if let Err(e) = emit(&render(report), Some(out)) {
            if !std::mem::replace(&mut warned, true) {
                eprintln!(
                    "nvsh: warning: {e}; the bench goes on, and tries again after each row and \
                     at its end"
                );
            }
        }
    }
}

/// [`rewriter`] for the collective benches, in the format the flags select.
fn partial_writer(common: &CollectiveArgs) -> impl FnMut(&Report) + '_ {
    rewriter(common.out.as_deref(), move |r: &Report| {
        rendered(common, r, false)
    })
}

/// Initialises the PE, runs a collective bench and, on PE 0, prints its report and fails when
/// an output was wrong or a requested candidate could not run. With --out, the file holds the
/// rows so far after every size and dtype ([`partial_writer`]).
fn collective(
    common: &CollectiveArgs,
    bench: impl FnOnce(&Nvshmem, &mut dyn FnMut(&Report)) -> Result<Option<Report>>,
) -> ToolResult<()> {
    check_min_max(common.sizes.min, common.sizes.max).unwrap_or_else(|e| e.exit());
    check_outputs(common.out.as_deref(), common.plot.as_deref())?;
    let nv = Nvshmem::init()?;
    if let Some(report) = bench(&nv, &mut partial_writer(common))? {
        emit(&rendered(common, &report, true), common.out.as_deref())?;
        // Printed (and drawn) first, so the table shows which results were wrong or missing;
        // then the exit status says so.
        let drawn = common.plot.as_deref().map_or(Ok(()), |p| {
            draw(&render::render_json(&report, common.ratio_on), p)
        });
        verify_then(report.verify(), drawn)?;
    }
    Ok(())
}

fn allreduce(args: AllreduceArgs) -> ToolResult<()> {
    let opts = args.options();
    check_dtype_flag("allreduce", true, &opts.dtypes).unwrap_or_else(|e| e.exit());
    collective(&args.common, |nv, partial| {
        allreduce::run_reporting(nv, &opts, partial)
    })
}

fn family(f: FamilyCommand) -> ToolResult<()> {
    let (kind, opts) = (f.kind, f.options());
    check_dtype_flag(kind.name(), kind.reduces(), &opts.dtypes).unwrap_or_else(|e| e.exit());
    collective(&f.family.common, |nv, partial| {
        family::run_reporting(nv, &opts, partial)
    })
}

impl PutArgs {
    fn options(&self) -> PutBenchOptions {
        PutBenchOptions {
            min_bytes: self.sizes.min,
            max_bytes: self.sizes.max,
            factor: self.sizes.factor,
            reps: self.sizes.reps,
            sweep: self.sweep,
            ..PutBenchOptions::default()
        }
    }
}

fn put(args: PutArgs) -> ToolResult<()> {
    check_min_max(args.sizes.min, args.sizes.max).unwrap_or_else(|e| e.exit());
    check_outputs(args.out.as_deref(), args.plot.as_deref())?;
    let nv = Nvshmem::init()?;
    let opts = args.options();
    if let Some(report) = put::run(&nv, &opts)? {
        let json = put::render_json(&report);
        let text = if args.json {
            json.clone() + "\n"
        } else {
            put::render_table(&report)
        };
        emit(&text, args.out.as_deref())?;
        if let Some(p) = args.plot.as_deref() {
            draw(&json, p)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use nvshmem::Collective as C;

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
                BenchCommand::Family(f) => f.options(),
                _ => return Err("parsed as another bench".into()),
            },
        )
    }

    fn sparse_args(args: &[&str]) -> std::result::Result<SparseArgs, String> {
        let argv = ["bench", "sparse"].iter().chain(args);
        match Cli::try_parse_from(argv).map_err(|e| e.to_string())?.bench {
            BenchCommand::Sparse(a) => Ok(a),
            _ => Err("parsed as another bench".into()),
        }
    }

    #[test]
    fn sparse_runs_every_method_by_default_and_takes_each_by_name() {
        assert_eq!(
            sparse_args(&[]).unwrap().methods,
            SparseMethod::ALL.to_vec()
        );
        let a = sparse_args(&["--methods", "oktopk,topk_sa,gaussiank_sa"]).unwrap();
        assert_eq!(
            a.methods,
            [
                SparseMethod::OkTopK,
                SparseMethod::TopKSa,
                SparseMethod::GaussianKSa
            ]
        );
        let err = sparse_args(&["--methods", "ok_topk"]).err().unwrap();
        assert!(err.contains("oktopk"), "{err}");
    }

    #[test]
    fn sparse_selection_rows_are_on_by_default_and_alone_on_request() {
        let a = sparse_args(&[]).unwrap();
        assert!(!a.no_select && !a.select_only);
        assert!(sparse_args(&["--select-only"]).unwrap().select_only);
        let err = sparse_args(&["--select-only", "--no-select"])
            .err()
            .unwrap();
        assert!(err.contains("cannot be used with"), "{err}");
    }

    #[test]
    fn allreduce_defaults_cover_everything() {
        let o = allreduce_args(&[]).unwrap().options();
        assert_eq!((o.min_bytes, o.max_bytes), (4 << 10, 256 << 20));
        assert_eq!(o.dtypes, vec![BenchDtype::F32, BenchDtype::Bf16]);
        assert_eq!(o.candidates, Candidate::ALL.to_vec());
        // Brought by the default only: its n/a fails no run.
        assert_eq!(o.optional, [Candidate::NcclSym]);
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
        assert_eq!(a.algos, Some(vec![Candidate::OneShot, Candidate::TwoShot]));
        // Named, nccl-sym is no longer optional: not running it fails the run.
        let o = allreduce_args(&["--algos", "auto,nccl-sym"])
            .unwrap()
            .options();
        assert_eq!(o.candidates, [Candidate::Auto, Candidate::NcclSym]);
        assert!(o.optional.is_empty());
    }

    /// A report of allreduce's first `rows` sizes (f32, from 4K), auto against nccl.
    fn report_of(rows: usize) -> Report {
        let timed = |us: f64| {
            harness::Outcome::Timed(harness::Timing {
                iters: 20,
                us,
                us_after_compute: us,
                algbw: 1.0,
                busbw: 1.5,
                host_us: 1.0,
                checked: 40,
                checked_pes: 2,
                wrong: 0,
                wrong_detail: None,
            })
        };
        Report {
            collective: "allreduce",
            n_pes: 2,
            gpu: "NVIDIA H100".into(),
            date: "2026-12-01".into(),
            op: Some(ReduceOp::Sum),
            reps: 2,
            warmup: 1,
            header: vec![],
            json_fields: vec![],
            candidates: vec!["auto", "nccl"],
            ratio: Some(("auto", harness::NCCL_BASELINES)),
            optional: vec![],
            note_column: None,
            checked_by: None,
            rows: (0..rows)
                .map(|i| harness::Row {
                    bytes: 4096 << i,
                    count: 1024 << i,
                    dtype: BenchDtype::F32,
                    tolerance: 0.0,
                    results: vec![("auto", timed(2.0)), ("nccl", timed(4.0))],
                    note: None,
                })
                .collect(),
        }
    }

    /// With --out, every row rewrites the file with the rows so far, in the format the flags
    /// select; in JSON "complete" is false until the final write, which is the report as
    /// before plus "complete": true. Without --out nothing is written; a write that fails
    /// only warns, so PE 0 does not stop alone.
    #[test]
    fn out_holds_the_rows_so_far_after_every_row() {
        let dir = std::env::temp_dir().join(format!("nvsh-bench-partial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        let json = dir.join("r.json");
        let a = allreduce_args(&["--json", "--out", json.to_str().unwrap()]).unwrap();
        let mut write = partial_writer(&a.common);
        for n in 1..=3 {
            write(&report_of(n));
            let v: serde_json::Value = serde_json::from_str(&read(&json)).unwrap();
            assert_eq!(v["complete"], false);
            assert_eq!(v["rows"].as_array().unwrap().len(), n);
        }
        let last = rendered(&a.common, &report_of(3), true);
        let v: serde_json::Value = serde_json::from_str(&last).unwrap();
        assert_eq!(v["complete"], true);
        assert_eq!(
            last,
            render::render_json(&report_of(3), RatioOn::AfterCompute) + "\n"
        );
        let partial: serde_json::Value = serde_json::from_str(&read(&json)).unwrap();
        let strip = |mut v: serde_json::Value| {
            v.as_object_mut().unwrap().remove("complete");
            v
        };
        assert_eq!(strip(partial), strip(v));
        // CSV and the table: the final rendering of the rows so far.
        for (flag, render) in [
            (
                "--csv",
                render::render_csv as fn(&Report, RatioOn) -> String,
            ),
            ("--ratio-on=after-compute", render::render_table),
        ] {
            let out = dir.join("r.txt");
            let a = allreduce_args(&[flag, "--out", out.to_str().unwrap()]).unwrap();
            partial_writer(&a.common)(&report_of(2));
            assert_eq!(read(&out), render(&report_of(2), RatioOn::AfterCompute));
            assert_eq!(rendered(&a.common, &report_of(2), false), read(&out));
        }
        // No --out: standard output gets the final report only.
        let a = allreduce_args(&["--json"]).unwrap();
        partial_writer(&a.common)(&report_of(1));
        // A directory that went away: the write fails, and the bench goes on.
        let gone = dir.join("gone").join("r.json");
        let a = allreduce_args(&["--json", "--out", gone.to_str().unwrap()]).unwrap();
        let mut write = partial_writer(&a.common);
        write(&report_of(1));
        write(&report_of(2));
        assert!(!gone.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn csv_or_json_not_both() {
        assert!(allreduce_args(&["--csv"]).unwrap().common.csv);
        let e = allreduce_args(&["--csv", "--json"]).err().unwrap();
        assert!(e.contains("cannot be used with"), "{e}");
    }

    /// `--ratio-on`: after compute unless told otherwise, for allreduce and the family alike;
    /// the help names both timings and the default.
    #[test]
    fn ratio_is_on_after_compute_by_default() {
        assert_eq!(
            allreduce_args(&[]).unwrap().common.ratio_on,
            RatioOn::AfterCompute
        );
        let a = allreduce_args(&["--ratio-on", "back-to-back"]).unwrap();
        assert_eq!(a.common.ratio_on, RatioOn::BackToBack);
        let a = allreduce_args(&["--ratio-on", "After-Compute"]).unwrap();
        assert_eq!(a.common.ratio_on, RatioOn::AfterCompute);
        let family = |args: &[&str]| {
            let argv = ["bench", "reduce-scatter"].iter().chain(args);
            match Cli::try_parse_from(argv).unwrap().bench {
                BenchCommand::Family(f) => f.family.common.ratio_on,
                _ => panic!("parsed as another bench"),
            }
        };
        assert_eq!(family(&[]), RatioOn::AfterCompute);
        assert_eq!(family(&["--ratio-on", "back-to-back"]), RatioOn::BackToBack);
        assert!(allreduce_args(&["--ratio-on", "compute"]).is_err());
        for name in ["allreduce", "broadcast"] {
            let help = clap_text(&[name, "-h"]);
            assert!(
                help.contains("[default: after-compute]")
                    && help.contains("[possible values: after-compute, back-to-back]"),
                "{help}"
            );
        }
    }

    #[test]
    fn allreduce_rejects_unknown_names() {
        for bad in [
            &["--dtypes", "int8"][..],
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
        for kind in Kind::all() {
            let o = family_opts(kind.name(), &[]).unwrap();
            assert_eq!(o.kind, kind);
            assert_eq!((o.min_bytes, o.max_bytes), (4 << 10, 256 << 20));
            assert_eq!(o.dtypes, vec![BenchDtype::F32, BenchDtype::Bf16]);
            assert_eq!(o.candidates, family::Candidate::DEFAULT);
            assert_eq!(o.optional, [family::Candidate::NcclSym]);
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
        assert_eq!(
            (o.kind, o.root, o.op),
            (Kind::of(C::Reduce), 1, ReduceOp::Max)
        );
        assert_eq!(o.slot_bytes, 1 << 20);
        assert_eq!(
            o.candidates,
            vec![family::Candidate::Nccl, family::Candidate::Ours]
        );
        assert!(o.optional.is_empty());
        assert_eq!(o.dtypes, vec![BenchDtype::Bf16]);
        assert_eq!((o.min_bytes, o.max_bytes, o.reps), (64 << 10, 1 << 20, 5));
        let o = family_opts("reduce-scatter", &["--op", "avg"]).unwrap();
        assert_eq!((o.kind, o.op), (Kind::of(C::ReduceScatter), ReduceOp::Avg));
        let o = family_opts("broadcast", &["--root", "3", "--json"]).unwrap();
        assert_eq!((o.kind, o.root), (Kind::of(C::Broadcast), 3));
        // Each takes only the options that mean something for it.
        for (name, bad) in [
            ("allgather", &["--op", "sum"][..]),
            ("alltoall", &["--root", "1"]),
            ("broadcast", &["--op", "max"]),
            ("reduce-scatter", &["--root", "1"]),
            ("allgather", &["--slot", "1M"]),
            ("reduce", &["--root", "-1"]),
            ("reduce", &["--algos", "auto"]),
            ("broadcast", &["--dtypes", "int8"]),
            ("reducescatter", &[]),
        ] {
            assert!(family_opts(name, bad).is_err(), "{name} {bad:?}");
        }
    }

    fn put_opts(args: &[&str]) -> std::result::Result<PutBenchOptions, String> {
        let argv = ["bench", "put"].iter().chain(args);
        match Cli::try_parse_from(argv).map_err(|e| e.to_string())?.bench {
            BenchCommand::Put(a) => Ok(a.options()),
            _ => Err("parsed as another bench".into()),
        }
    }

    fn probe_opts(args: &[&str]) -> std::result::Result<ProbeOptions, String> {
        let argv = ["bench", "probe"].iter().chain(args);
        match Cli::try_parse_from(argv).map_err(|e| e.to_string())?.bench {
            BenchCommand::Probe(a) => Ok(a.options()),
            _ => Err("parsed as another bench".into()),
        }
    }

    #[test]
    fn probe_takes_a_size_reps_and_warmup() {
        assert_eq!(probe_opts(&[]), Ok(ProbeOptions::default()));
        assert_eq!(
            probe_opts(&["-b", "64K", "-n", "5", "-w", "2"]),
            Ok(ProbeOptions {
                bytes: 64 << 10,
                reps: 5,
                warmup: 2
            })
        );
        assert_eq!(
            probe_opts(&["--bytes", "8", "--reps", "1"]).map(|o| (o.bytes, o.reps)),
            Ok((8, 1))
        );
        for (bad, why) in [
            ("12", "multiple of 8"),
            ("512K", "low-latency path"),
            ("0", "not a size"),
        ] {
            let err = probe_opts(&["--bytes", bad]).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let err = probe_opts(&["--min", "4K"]).unwrap_err();
        assert!(err.contains("--min"), "{err}");
    }

    /// The text clap prints for `nvsh bench ARGS`, which must fail (an error or the help).
    fn clap_text(args: &[&str]) -> String {
        match Cli::try_parse_from(["bench"].iter().chain(args)) {
            Ok(_) => panic!("{args:?} parsed"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn short_long_and_nccl_tests_flags_agree() {
        let short = [
            "-b", "64K", "-e", "16M", "-f", "4", "-n", "7", "-w", "2", "-c", "1", "-d", "bf16",
            "-o", "max",
        ];
        let long = [
            "--min", "64K", "--max", "16M", "--factor", "4", "--reps", "7", "--warmup", "2",
            "--check", "1", "--dtypes", "bf16", "--op", "max",
        ];
        let nccl_tests = [
            "--minbytes",
            "64K",
            "--maxbytes",
            "16M",
            "--stepfactor",
            "4",
            "--iters",
            "7",
            "--warmup_iters",
            "2",
            "--check",
            "1",
            "--datatype",
            "bf16",
            "--op",
            "max",
        ];
        let allreduce = |a: &[&str]| format!("{:?}", allreduce_args(a).unwrap().options());
        let reduce = |a: &[&str]| format!("{:?}", family_opts("reduce", a).unwrap());
        for parse in [&allreduce as &dyn Fn(&[&str]) -> String, &reduce] {
            assert_eq!(parse(&short), parse(&long));
            assert_eq!(parse(&nccl_tests), parse(&long));
        }
        let o = allreduce_args(&short).unwrap().options();
        assert_eq!(
            (o.min_bytes, o.max_bytes, o.factor, o.reps, o.warmup),
            (64 << 10, 16 << 20, 4, 7, 2)
        );
        assert_eq!((o.dtypes, o.op), (vec![BenchDtype::Bf16], ReduceOp::Max));
        // The family benches without a reduction take the same flags, -o aside.
        let o = family_opts("allgather", &short[..14]).unwrap();
        assert_eq!((o.min_bytes, o.factor, o.reps), (64 << 10, 4, 7));
        // put takes the size and repetition flags.
        let short = ["-b", "1K", "-e", "1M", "-f", "8", "-n", "5"];
        let long = ["--min", "1K", "--max", "1M", "--factor", "8", "--reps", "5"];
        let nccl_tests = [
            "--minbytes",
            "1K",
            "--maxbytes",
            "1M",
            "--stepfactor",
            "8",
            "--iters",
            "5",
        ];
        let put = |a: &[&str]| format!("{:?}", put_opts(a).unwrap());
        assert_eq!(put(&short), put(&long));
        assert_eq!(put(&nccl_tests), put(&long));
        let o = put_opts(&short).unwrap();
        assert_eq!(
            (o.min_bytes, o.max_bytes, o.factor, o.reps),
            (1 << 10, 1 << 20, 8, 5)
        );
        assert_eq!(put_opts(&[]).unwrap().factor, 2);
        // ...and not the ones that mean nothing for it.
        for bad in [["-w", "1"], ["-c", "1"], ["-d", "f32"], ["-o", "sum"]] {
            assert!(put_opts(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn factor_steps_sizes_up_to_max() {
        let sizes = |args: &[&str]| {
            let o = allreduce_args(args).unwrap().options();
            harness::size_steps(o.min_bytes, o.max_bytes, o.factor)
        };
        assert_eq!(
            sizes(&["-b", "4K", "-e", "1M", "-f", "4"]),
            vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
        );
        // A max between steps is never passed.
        assert_eq!(
            sizes(&["-b", "4K", "-e", "1000K", "-f", "4"]),
            vec![4 << 10, 16 << 10, 64 << 10, 256 << 10]
        );
        // The default doubles from 4K to 256M.
        let default = sizes(&[]);
        assert_eq!((default[0], default[1]), (4 << 10, 8 << 10));
        assert_eq!((default.len(), default[16]), (17, 256 << 20));
        let o = family_opts("alltoall", &["-f", "16"]).unwrap();
        let s = harness::size_steps(o.min_bytes, o.max_bytes, o.factor);
        assert_eq!(s, vec![4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]);
        // A factor that would not grow the sizes, or is no whole number, is refused.
        for f in ["1", "0"] {
            let err = clap_text(&["allreduce", "-f", f]);
            assert!(err.contains("at least 2"), "{err}");
            assert!(clap_text(&["put", "--factor", f]).contains("at least 2"));
        }
        for f in ["-2", "1.5", "x"] {
            assert!(allreduce_args(&["--factor", f]).is_err(), "{f}");
        }
    }

    #[test]
    fn check_flag_takes_only_1() {
        for args in [&["-c", "1"][..], &["--check", "1"], &[]] {
            assert!(allreduce_args(args).is_ok(), "{args:?}");
            assert!(family_opts("broadcast", args).is_ok(), "{args:?}");
        }
        for name in ["allreduce", "reduce-scatter"] {
            let err = clap_text(&[name, "-c", "0"]);
            assert!(
                err.contains("every timed result is always checked here")
                    && err.contains("-c 0 (no checking) is not offered"),
                "{err}"
            );
        }
        let err = clap_text(&["allreduce", "--check", "2"]);
        assert!(err.contains("'2' is not 0 or 1"), "{err}");
    }

    #[test]
    fn min_above_max_is_refused_in_the_flags_terms() {
        let err = check_min_max(1 << 30, 4 << 10).unwrap_err().to_string();
        assert!(
            err.contains(
                "--min (-b) 1G is larger than --max (-e) 4K: give a smallest size no larger \
                 than the largest"
            ),
            "{err}"
        );
        assert!(!err.contains("environment"), "{err}");
        let err = check_min_max(3000, 1000).unwrap_err().to_string();
        assert!(
            err.contains("--min (-b) 3000 is larger than --max (-e) 1000"),
            "{err}"
        );
        assert!(check_min_max(4 << 10, 4 << 10).is_ok());
    }

    #[test]
    fn enum_flags_take_any_case_and_the_aliases() {
        let o = allreduce_args(&["-d", "BF16,Float32,float,bfloat16", "-o", "AVG"])
            .unwrap()
            .options();
        assert_eq!(o.dtypes, vec![BenchDtype::Bf16, BenchDtype::F32]);
        assert_eq!(o.op, ReduceOp::Avg);
        let o = family_opts(
            "reduce",
            &[
                "--algos",
                "Ours,NCCL,Nccl-Sym,Ours-Staged,Ours-Registered,NVSHMEM",
                "-o",
                "Prod",
            ],
        )
        .unwrap();
        assert_eq!(o.candidates, family::Candidate::ALL.to_vec());
        assert_eq!(o.op, ReduceOp::Prod);
        for (op, want) in [
            (OpArg::Sum, ReduceOp::Sum),
            (OpArg::Prod, ReduceOp::Prod),
            (OpArg::Min, ReduceOp::Min),
            (OpArg::Max, ReduceOp::Max),
            (OpArg::Avg, ReduceOp::Avg),
        ] {
            assert_eq!(ReduceOp::from(op), want);
            // The command line's names are the report's.
            let name = op.to_possible_value().unwrap();
            assert_eq!(name.get_name(), allreduce::op_name(want));
        }
        for c in Candidate::ALL {
            assert_eq!(c.to_possible_value().unwrap().get_name(), c.name());
        }
        for c in family::Candidate::ALL {
            assert_eq!(c.to_possible_value().unwrap().get_name(), c.name());
        }
    }

    #[test]
    fn help_lists_the_values_of_enum_flags() {
        let help = clap_text(&["allreduce", "-h"]);
        for values in [
            "[possible values: f32, bf16, f16, f64, i32, u32, i64, u64, u8, all]",
            "[possible values: sum, prod, min, max, avg]",
            "[possible values: oneshot, twoshot, ring, rd, hier, auto, nccl, nccl-sym, nvshmem, ours-staged, \
             ours-registered]",
        ] {
            assert!(help.contains(values), "{values} not in\n{help}");
        }
        for flag in [
            "-b, --min",
            "-e, --max",
            "-f, --factor",
            "-n, --reps",
            "-w, --warmup",
            "-c, --check",
            "-d, --dtypes",
            "-o, --op",
            "--minbytes",
            "--iters",
        ] {
            assert!(help.contains(flag), "{flag} not in\n{help}");
        }
        // The long help describes each candidate.
        let help = clap_text(&["allreduce", "--help"]);
        assert!(
            help.contains("- rd:") && help.contains("- nvshmem:"),
            "{help}"
        );
        assert!(help.contains("- nccl-sym:"), "{help}");
        assert!(help.contains("[default: all of them]"), "{help}");
        let help = clap_text(&["reduce", "-h"]);
        assert!(
            help.contains(
                "[possible values: ours, nccl, nccl-sym, ours-staged, ours-registered, nvshmem]"
            ),
            "{help}"
        );
        assert!(
            help.contains("[possible values: f32, bf16, f16, f64, i32, u32, i64, u64, u8, all]"),
            "{help}"
        );
        let long = clap_text(&["broadcast", "--help"]);
        assert!(
            long.contains("- nvshmem:") && long.contains("NVSHMEM's collective on a stream"),
            "{long}"
        );
        let help = clap_text(&["put", "-h"]);
        assert!(
            help.contains("-f, --factor") && help.contains("--stepfactor"),
            "{help}"
        );
    }

    /// Each collective's subcommand says what it benches, in `nvsh bench --help` and in its own
    /// help, not the doc comment of an options struct it shares.
    #[test]
    fn each_collective_subcommand_has_its_own_help() {
        // clap wraps long lines: compare with runs of white space as one space.
        let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let list = flat(&clap_text(&["--help"]));
        for kind in Kind::all() {
            let about = kind.about();
            let first = flat(about.split(" (").next().unwrap_or(&about));
            assert!(list.contains(&first), "{}: {list}", kind.name());
            let own = flat(&clap_text(&[kind.name(), "--help"]));
            assert!(own.contains(&first), "{}: {own}", kind.name());
        }
        assert!(!list.contains("The root of broadcast and reduce"), "{list}");
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

    /// Every type and its nccl-tests / NCCL aliases reach the options, in any case; `all` is
    /// every type the collective takes.
    #[test]
    fn dtypes_take_every_type_its_aliases_and_all() {
        let all = "f32,bf16,f16,f64,i32,u32,i64,u64,u8";
        let o = family_opts("allgather", &["-d", all]).unwrap();
        assert_eq!(o.dtypes, BenchDtype::ALL);
        let aliases = "float,bfloat16,half,double,int32,uint32,int64,uint64,uint8";
        assert_eq!(
            family_opts("alltoall", &["-d", aliases]).unwrap().dtypes,
            BenchDtype::ALL
        );
        let o = family_opts("broadcast", &["--datatype", "FLOAT16,Float64,INT,uint8"]).unwrap();
        assert_eq!(
            o.dtypes,
            [
                BenchDtype::F16,
                BenchDtype::F64,
                BenchDtype::I32,
                BenchDtype::U8
            ]
        );
        // `all`: the reductions' eight, data movement's nine; with repeats dropped.
        let o = allreduce_args(&["-d", "all"]).unwrap().options();
        assert_eq!(o.dtypes, BenchDtype::REDUCIBLE);
        for name in ["reduce-scatter", "reduce"] {
            let o = family_opts(name, &["-d", "i64,all"]).unwrap();
            assert_eq!(o.dtypes[0], BenchDtype::I64);
            assert_eq!(o.dtypes.len(), 8, "{name}");
            assert!(!o.dtypes.contains(&BenchDtype::U8), "{name}");
        }
        for name in ["broadcast", "allgather", "alltoall"] {
            let o = family_opts(name, &["-d", "all,u8,f32"]).unwrap();
            assert_eq!(o.dtypes, BenchDtype::ALL, "{name}");
        }
        assert_eq!(
            resolve_dtypes(&[DtypeArg::One(BenchDtype::U8), DtypeArg::All], true)[..2],
            [BenchDtype::U8, BenchDtype::F32]
        );
    }

    /// u8 (named or not) is refused by the reductions before a PE starts, as a usage error in
    /// the flag's terms; data movement takes it.
    #[test]
    fn reductions_refuse_u8_in_the_flags_terms() {
        let want = |name: &str| {
            format!(
                "--dtypes (-d): {name} reduces f32, bf16, f16, f64, i32, u32, i64, u64; u8 is \
                 data movement only (broadcast, allgather and alltoall take it)"
            )
        };
        let o = allreduce_args(&["-d", "f32,uint8"]).unwrap().options();
        let err = check_dtype_flag("allreduce", true, &o.dtypes).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
        assert!(err.to_string().contains(&want("allreduce")), "{err}");
        for kind in [Kind::of(C::ReduceScatter), Kind::of(C::Reduce)] {
            let o = family_opts(kind.name(), &["-d", "u8"]).unwrap();
            let err = check_dtype_flag(kind.name(), kind.reduces(), &o.dtypes).unwrap_err();
            assert!(err.to_string().contains(&want(kind.name())), "{err}");
            // `all` never brings u8 into a reduction.
            let o = family_opts(kind.name(), &["-d", "all"]).unwrap();
            assert!(check_dtype_flag(kind.name(), true, &o.dtypes).is_ok());
        }
        for kind in [
            Kind::of(C::Broadcast),
            Kind::of(C::Allgather),
            Kind::of(C::Alltoall),
        ] {
            let o = family_opts(kind.name(), &["-d", "u8"]).unwrap();
            assert!(check_dtype_flag(kind.name(), kind.reduces(), &o.dtypes).is_ok());
        }
    }
}
