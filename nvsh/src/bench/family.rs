//! Benchmarks of the collectives beside allreduce, behind `nvsh bench broadcast | allgather |
//! alltoall | allgatherv | alltoallv | reduce-scatter | reduce`: ours against NCCL's regular
//! path, per message size and dtype, in one run on the same GPUs, stream and symmetric buffers,
//! against NCCL's symmetric-memory path on buffers of NCCL's own (`nccl-sym`), and against
//! NVSHMEM's own collectives on the same buffers ([`crate::bench::nvshmem_coll`], `nvshmem`).
//! The v forms run with equal counts (host counts, the exchange path), against NCCL's allgather
//! and grouped send/recv alltoall. Grouped send/recv ([`P2pGroup`]) runs as a ring (each PE
//! sends to the next and receives from the previous) and as all pairs (a send and a receive
//! per PE, itself included, as nccl-tests' alltoall), against the same pattern of NCCL's
//! grouped `ncclSend`/`ncclRecv`.
//!
//! Sizes, counts and bus factors are nccl-tests' (see [`Kind`]); the inputs and the exact
//! expected outputs are built from allreduce's patterns, so the reductions are checked as
//! exactly as allreduce is (over its eight reducible types) and data movement bit for bit
//! (over those and u8). The shared harness ([`crate::bench::harness`]) times every candidate
//! and checks every timed call; for reduce, whose output is defined at the root only, only the
//! root compares.

use crate::bench::allreduce;
use crate::bench::harness::{
    self, check_dtypes, dtype_refusal, movement_value, pattern_hash, size_steps, window_only,
    BenchDtype, Collective, Harness, Report, SlotValues, NCCL_BASELINES,
};
pub use crate::bench::kind::Kind;
use crate::bench::nvshmem_coll::{
    describe_nvshmem, family_refusal, reduce_scratch, shared_gpu_refusal, NvshmemElement,
    NvshmemFamily,
};
use crate::bench::render::NCCL_SYM_WORDING;
use crate::nccl_baseline::{bench_baselines, nccl_label, NcclBaseline, NcclCall};
use cudarc::driver::CudaStream;
use nvshmem::tools::check_root;
use nvshmem::tools::size_label;
use nvshmem::tools::{AnyCall, Expected, Source, TableCollective};
use nvshmem::Nvshmem;
use nvshmem::ReduceOp;
use nvshmem::SymView;
use nvshmem::{Error, Result};
use nvshmem::{ScratchKind, Shape};

/// What is timed. The names are the command line's (clap lists them in `--help`, each with
/// the `help` given here rather than the doc comment, which is written for rustdoc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Candidate {
    /// Ours: the library's collective, through the table ([`nvshmem::COLLECTIVES`]).
    #[value(name = "ours", help = "our collective")]
    Ours,
    /// NCCL's call through [`NcclBaseline`].
    #[value(name = "nccl", help = "NCCL's collective")]
    Nccl,
    /// NVSHMEM's own host collective on the stream over the world team
    /// ([`NvshmemFamily::call`]): broadcast, allgather (fcollect), alltoall, reduce-scatter.
    #[value(
        name = "nvshmem",
        help = "NVSHMEM's collective on a stream over the world team (broadcast, allgather, \
                alltoall, reduce-scatter)"
    )]
    /// NCCL's call on NCCL's registered symmetric memory ([`crate::nccl_baseline::NcclWindow`]).
    #[value(
        name = "nccl-sym",
        help = "NCCL's collective on its own symmetric memory (ncclMemAlloc buffers registered \
                as windows: its symmetric kernels); in the default list, not running is no \
                failure unless named here"
    )]
    NcclSym,
    /// Ours with the buffers passed as the caller's own (non-symmetric) memory, so that the
    /// call stages them through its workspace: the staging's cost beside `ours`. On request
    /// only (not in [`Candidate::DEFAULT`]).
    #[value(
        name = "ours-staged",
        help = "our collective on buffers passed as your own memory (staged)"
    )]
    OursStaged,
    /// Ours on the caller's own memory registered into the symmetric heap once before timing
    /// (`Nvshmem::alloc_registrable`, `register_symmetric`): zero-copy, so its time beside
    /// `ours` and `ours-staged` is what registration saves. On request only.
    #[value(
        name = "ours-registered",
        help = "our collective on your own memory registered as symmetric once (zero-copy)"
    )]
    OursRegistered,
    /// NVSHMEM's own host collective on the stream over the world team
    /// ([`NvshmemFamily::call`]): broadcast, allgather (fcollect), alltoall, reduce-scatter.
    #[value(
        name = "nvshmem",
        help = "NVSHMEM's collective on a stream over the world team (broadcast, allgather, \
                alltoall, reduce-scatter)"
    )]
    Nvshmem,
}

impl Candidate {
    pub const ALL: [Candidate; 6] = [
        Candidate::Ours,
        Candidate::Nccl,
        Candidate::NcclSym,
        Candidate::OursStaged,
        Candidate::OursRegistered,
        Candidate::Nvshmem,
    ];

    /// The default list: `ours-staged`, `ours-registered` and `nvshmem` are asked for by name.
    pub const DEFAULT: [Candidate; 3] = [Candidate::Ours, Candidate::Nccl, Candidate::NcclSym];

    /// The name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Candidate::Ours => "ours",
            Candidate::Nccl => "nccl",
            Candidate::Nvshmem => "nvshmem",
            Candidate::NcclSym => "nccl-sym",
            Candidate::OursStaged => "ours-staged",
            Candidate::OursRegistered => "ours-registered",
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct FamilyBenchOptions {
    pub kind: Kind,
    /// Smallest message asked for, bytes (nccl-tests' size; see [`Kind::count_for`]).
    pub min_bytes: usize,
    /// Largest message asked for, bytes (no size above it is run).
    pub max_bytes: usize,
    /// Growth factor of the sizes, at least 2: min, min * factor, ... up to max
    /// ([`size_steps`]).
    pub factor: usize,
    pub dtypes: Vec<BenchDtype>,
    /// The reduction (reduce-scatter and reduce; ignored by the others).
    pub op: ReduceOp,
    /// The root PE (broadcast and reduce; ignored by the others).
    pub root: i32,
    /// Timed groups per size (the median is reported).
    pub reps: usize,
    /// Untimed calls first (they also size the groups).
    pub warmup: usize,
    /// Columns of the report, in this order.
    pub candidates: Vec<Candidate>,
    /// Those of `candidates` that the default list brought, not the user: not running them is
    /// no failure ([`Report::optional`]).
    pub optional: Vec<Candidate>,
    /// Receive slot size of our reduce-scatter and reduce workspaces.
    pub slot_bytes: usize,
}

impl FamilyBenchOptions {
    /// The defaults for `kind`, as `nvsh bench allreduce`'s: 4K to 256M doubling, f32 and
    /// bf16, sum, root 0, 20 groups after 3 warm-up calls, ours and NCCL's two paths (the
    /// symmetric-memory one optional), 8M slots.
    pub fn new(kind: Kind) -> Self {
        FamilyBenchOptions {
            kind,
            min_bytes: 4 << 10,
            max_bytes: 256 << 20,
            factor: 2,
            dtypes: BenchDtype::DEFAULT.to_vec(),
            op: ReduceOp::Sum,
            root: 0,
            reps: 20,
            warmup: 3,
            candidates: Candidate::DEFAULT.to_vec(),
            optional: vec![Candidate::NcclSym],
            slot_bytes: 8 << 20,
        }
    }
}

/// Element `i` of PE `pe`'s input with salt `salt` for element type `dtype`: allreduce's
/// pattern for the reductions (so results are exact); for data movement, where any value exact
/// in the dtype will do, [`movement_value`] (quarter-integers for floats, integers over most of
/// the type's bits).
pub fn input_value(
    kind: Kind,
    op: ReduceOp,
    dtype: BenchDtype,
    pe: i32,
    i: usize,
    salt: u64,
) -> f64 {
    if kind.reduces() {
        allreduce::input_value(op, dtype, pe, i, salt)
    } else {
        movement_value(dtype, pattern_hash(pe, i, salt))
    }
}

/// The exact value of element `i` of PE `pe`'s output for count argument `count` on `n_pes`
/// PEs, when every PE's input used `salt` (the inputs of [`input_value`]).
#[allow(clippy::too_many_arguments)]
pub fn expected_value(
    kind: Kind,
    op: ReduceOp,
    dtype: BenchDtype,
    root: i32,
    pe: i32,
    i: usize,
    count: usize,
    salt: u64,
    n_pes: i32,
) -> f64 {
    // The library's reference says where the element comes from (equal parts: the bench's v
    // forms are timed with equal counts).
    let call = Expected {
        n: n_pes.max(1) as usize,
        count,
        root: root as usize,
        peers: kind.peers,
        parts: None,
    };
    match call.source(kind.row(), pe as usize, i) {
        Source::Input { pe: src, index } => input_value(kind, op, dtype, src as i32, index, salt),
        Source::Reduced { index } => allreduce::expected_value(op, dtype, index, salt, n_pes),
        Source::Kept => 0.0,
    }
}

/// How far a correct output may be from [`expected_value`]: 0 for data movement (bit for bit),
/// allreduce's bound for the reductions (the same values reduced over the same PEs).
pub fn tolerance(kind: Kind, op: ReduceOp, dtype: BenchDtype, n_pes: i32) -> f64 {
    if kind.reduces() {
        allreduce::tolerance(op, dtype, n_pes)
    } else {
        0.0
    }
}

/// Whether PE `pe`'s output is defined: everywhere but for a rooted reduction (reduce), where
/// only the root's is.
pub fn checks_output(kind: Kind, root: i32, pe: i32) -> bool {
    kind.checks_output(root, pe)
}

/// Our collective of a [`Kind`], through the library's table.
type Ours<'nv> = Box<dyn TableCollective<'nv> + 'nv>;

/// Our collective of `kind` over the world.
fn new_ours(nv: &Nvshmem, kind: Kind, slot_bytes: usize) -> Result<Ours<'_>> {
    kind.collective.world(nv, slot_bytes)
}

/// Reserves the staging area for calls up to `max_bytes` where calls cannot grow it (the
/// exchanges, whose sizes differ between PEs or whose calls not every PE takes part in; the
/// others grow it at their first call of a size). Collective.
fn reserve_staging(ours: &mut Ours<'_>, kind: Kind, max_bytes: usize) -> Result<()> {
    if kind.row().scratch != ScratchKind::Exchange {
        return Ok(());
    }
    ours.reserve_staging(2 * max_bytes + (64 << 10))
}

/// A collective's inputs and expected outputs ([`input_value`], [`expected_value`]) for the
/// harness's host threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilyValues {
    pub kind: Kind,
    pub op: ReduceOp,
    pub root: i32,
}

impl SlotValues for FamilyValues {
    fn input_value(&self, dtype: BenchDtype, pe: i32, i: usize, salt: u64, _n_pes: i32) -> f64 {
        input_value(self.kind, self.op, dtype, pe, i, salt)
    }

    fn expected_value(
        &self,
        dtype: BenchDtype,
        pe: i32,
        i: usize,
        count: usize,
        salt: u64,
        n_pes: i32,
    ) -> f64 {
        expected_value(
            self.kind, self.op, dtype, self.root, pe, i, count, salt, n_pes,
        )
    }
}

/// One of the collectives as the harness sees it.
struct FamilyBench<'nv> {
    kind: Kind,
    op: ReduceOp,
    root: i32,
    ours: std::result::Result<Ours<'nv>, String>,
    /// Ours of its own for `ours-staged`.
    staged: std::result::Result<Ours<'nv>, String>,
    /// Ours of its own for `ours-registered`.
    registered: std::result::Result<Ours<'nv>, String>,
    nccl: std::result::Result<NcclBaseline<'nv>, String>,
    nvshmem: std::result::Result<NvshmemFamily, String>,
    /// Whether nccl-sym can run, or why not.
    nccl_sym: std::result::Result<(), String>,
}

impl FamilyBench<'_> {
    /// NCCL's call for this collective (the v forms as their equal-count NCCL counterparts).
    fn nccl_call(&self) -> Option<NcclCall> {
        NcclCall::of(self.kind.collective, self.kind.peers, self.op, self.root)
    }
}

/// A candidate's state, or why it cannot run, as the error the harness records.
fn ready<S>(state: &mut std::result::Result<S, String>) -> Result<&mut S> {
    state.as_mut().map_err(|why| Error::Driver {
        message: why.clone(),
    })
}

impl<T: NvshmemElement> Collective<T> for FamilyBench<'_> {
    type Candidate = Candidate;

    fn name(&self, c: Candidate) -> &'static str {
        c.name()
    }

    // Decided from state every PE shares, so every PE skips the same candidates.
    fn available(&self, c: Candidate) -> std::result::Result<(), String> {
        // run() refuses such types first; this keeps the report's reason in the user's terms.
        if let Some(why) = dtype_refusal(self.kind.name(), self.kind.reduces(), T::BENCH_DTYPE) {
            return Err(why);
        }
        match c {
            Candidate::Ours => self.ours.as_ref().map(|_| ()).map_err(Clone::clone),
            Candidate::OursStaged => self.staged.as_ref().map(|_| ()).map_err(Clone::clone),
            Candidate::OursRegistered => self.registered.as_ref().map(|_| ()).map_err(Clone::clone),
            Candidate::Nccl | Candidate::NcclSym if self.nccl_call().is_none() => {
                Err(no_nccl(self.kind).to_string())
            }
            Candidate::Nccl => self.nccl.as_ref().map(|_| ()).map_err(Clone::clone),
            Candidate::Nvshmem => {
                let refusal = family_refusal(self.kind, self.op, T::BENCH_DTYPE);
                refusal.map_or(Ok(()), Err)?;
                self.nvshmem.as_ref().map(|_| ()).map_err(Clone::clone)
            }
            Candidate::NcclSym => self.nccl_sym.clone(),
        }
    }

    fn nccl_window(&self, c: Candidate) -> Option<(&NcclBaseline<'_>, NcclCall)> {
        match (c, &self.nccl) {
            (Candidate::NcclSym, Ok(nccl)) => Some((nccl, self.nccl_call()?)),
            _ => None,
        }
    }

    fn registered(&self, c: Candidate) -> bool {
        c == Candidate::OursRegistered
    }

    fn call(
        &mut self,
        c: Candidate,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        stream: &CudaStream,
    ) -> Result<Option<&'static str>> {
        let (op, root, peers) = (self.op, self.root, self.kind.peers);
        // ours-registered: the harness passes views of the registered memory, which go to the
        // call as symmetric views (nothing staged).
        let ws = match c {
            Candidate::OursStaged => &mut self.staged,
            Candidate::OursRegistered => &mut self.registered,
            _ => &mut self.ours,
        };
        let done = match c {
            Candidate::Ours | Candidate::OursStaged | Candidate::OursRegistered => {
                let ours = ready(ws)?;
                let (input, output) = harness::as_own(input, output, c == Candidate::OursStaged);
                let call = AnyCall::new(input, output).op(op).root(root).peers(peers);
                ours.run_any(call, stream)
            }
            Candidate::Nccl => {
                let call = self.nccl_call().ok_or_else(|| no_nccl(self.kind))?;
                ready(&mut self.nccl)?.run(call, input, output)
            }
            Candidate::Nvshmem => {
                let shmem = ready(&mut self.nvshmem)?;
                shmem.call(self.kind, op, root, input, output, stream)
            }
            Candidate::NcclSym => Err(window_only(c.name())),
        };
        done?;
        // What ours ran, for the report's ours= column.
        Ok(match (c, &self.ours) {
            (Candidate::Ours, Ok(ours)) => ours.last_protocol().map(|p| p.name()),
            _ => None,
        })
    }

    fn count_for(&self, elems: usize, elem_bytes: usize, n_pes: i32) -> usize {
        self.kind.count_for(elems, elem_bytes, n_pes)
    }

    fn input_len(&self, count: usize, n_pes: i32) -> usize {
        self.kind.input_len(count, n_pes)
    }

    fn output_len(&self, count: usize, n_pes: i32) -> usize {
        self.kind.output_len(count, n_pes)
    }

    type Values = FamilyValues;

    fn values(&self) -> FamilyValues {
        FamilyValues {
            kind: self.kind,
            op: self.op,
            root: self.root,
        }
    }

    fn tolerance(&self, dtype: BenchDtype, n_pes: i32) -> f64 {
        tolerance(self.kind, self.op, dtype, n_pes)
    }

    fn checks_output(&self, pe: i32, _n_pes: i32) -> bool {
        checks_output(self.kind, self.root, pe)
    }

    fn busbw_factor(&self, n_pes: i32) -> f64 {
        self.kind.busbw_factor(n_pes)
    }
}

/// The error of a collective NCCL has no call for.
fn no_nccl(kind: Kind) -> Error {
    Error::Io {
        what: "nccl".into(),
        message: format!("NCCL has no call for {}", kind.name()),
    }
}

/// Runs the benchmark on every PE (collective; any PE count). Returns the report on PE 0, None
/// on the others. Wrong results and candidates that could not run are recorded in the report,
/// not returned as errors: call [`Report::verify`] after printing it. A root outside the job
/// is an error on every PE before anything runs.
pub fn run(nv: &Nvshmem, opts: &FamilyBenchOptions) -> Result<Option<Report>> {
    run_reporting(nv, opts, &mut |_| {})
}

/// [`run`], handing PE 0's report of the rows so far to `partial` (on PE 0 only) after every
/// size and dtype, so that a run cut short can leave what it measured.
pub fn run_reporting(
    nv: &Nvshmem,
    opts: &FamilyBenchOptions,
    partial: &mut dyn FnMut(&Report),
) -> Result<Option<Report>> {
    let kind = opts.kind;
    // The same options on every PE, so every PE refuses alike, before anything collective.
    check_dtypes(kind.name(), kind.reduces(), &opts.dtypes).map_err(|why| Error::Io {
        what: format!("{} benchmark, --dtypes", kind.name()),
        message: why,
    })?;
    if kind.rooted() {
        // Named after the option: the world's ranks are the job's PEs.
        check_root("--root", opts.root, nv.n_pes())?;
    }
    let h = Harness::new(nv, opts.reps, opts.warmup)?;
    let ours = if opts.candidates.contains(&Candidate::Ours) {
        h.agree("our workspace", new_ours(nv, kind, opts.slot_bytes))?
    } else {
        Err("not requested".into())
    };
    let staged = if opts.candidates.contains(&Candidate::OursStaged) {
        h.agree(
            "our workspace for ours-staged",
            new_ours(nv, kind, opts.slot_bytes).and_then(|mut o| {
                reserve_staging(&mut o, kind, opts.max_bytes)?;
                Ok(o)
            }),
        )?
    } else {
        Err("not requested".into())
    };
    let registered = if opts.candidates.contains(&Candidate::OursRegistered) {
        h.agree(
            "our workspace for ours-registered",
            new_ours(nv, kind, opts.slot_bytes),
        )?
    } else {
        Err("not requested".into())
    };
    let (nccl, nccl_sym) = bench_baselines(
        nv,
        &h.stream,
        opts.candidates.contains(&Candidate::Nccl),
        opts.candidates.contains(&Candidate::NcclSym),
    );
    let nccl_version = nccl.as_ref().ok().map(NcclBaseline::version_string);
    let nvshmem = if !opts.candidates.contains(&Candidate::Nvshmem) {
        Err("not requested".into())
    } else if let Some(why) = shared_gpu_refusal(nv.shares_gpus()) {
        Err(why)
    } else {
        Ok(NvshmemFamily {
            team: nv.team_world().handle(),
            n_pes: nv.n_pes(),
            reduce_scratch: reduce_scratch(
                std::env::var("NVSHMEM_REDUCE_SCRATCH_SIZE").ok().as_deref(),
            ),
        })
    };
    let settings = ours.as_ref().ok().and_then(|o| o.settings());
    // The workspace rounds the slot size; report what ran.
    let shape = OursShape {
        slot_bytes: kind.reduces().then(|| {
            ours.as_ref()
                .ok()
                .and_then(|o| o.slot_bytes())
                .unwrap_or(opts.slot_bytes)
        }),
        lines_max: ours.as_ref().ok().map(|o| o.lines_max()),
        settings,
    };
    let mut bench = FamilyBench {
        kind,
        op: opts.op,
        root: opts.root,
        ours,
        staged,
        registered,
        nccl,
        nvshmem,
        nccl_sym,
    };
    let list = size_steps(opts.min_bytes, opts.max_bytes, opts.factor);
    // PE 0's report of `rows` on `gpu`: the partial reports' and the final one.
    let nvls = std::env::var("NCCL_NVLS_ENABLE").ok();
    let full = |rows: Vec<harness::Row>, gpu: String| {
        let mut r = report(
            nv.n_pes(),
            gpu,
            opts,
            shape.clone(),
            nccl_version.clone(),
            nvls.clone(),
            rows,
        );
        if opts.candidates.contains(&Candidate::Nvshmem) {
            describe_nvshmem(&mut r);
        }
        r
    };
    h.run_reported(
        &mut bench,
        &opts.candidates,
        &list,
        &opts.dtypes,
        &full,
        partial,
    )
}

/// What our workspace ran with, for the report: its receive slot size (the reductions) and
/// the largest block or pair its calls could move as low-latency lines (0: none; None: ours
/// did not run), and what its `Auto` chooses from (the collectives that choose).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct OursShape {
    slot_bytes: Option<usize>,
    lines_max: Option<usize>,
    settings: Option<String>,
}

/// The header line that says whether `ours` had low-latency lines (`lines_max` bytes; 0:
/// none), and up to what size: `ours` is timed as the library chooses, and the lines are what
/// it chooses for small calls.
fn lines_text(kind: Kind, lines_max: usize) -> String {
    let exchange = kind.row().scratch == ScratchKind::Exchange;
    let (env, what, otherwise) = if exchange && kind.row().shape == Shape::Gather {
        // Host counts: one launch of every part (src/coll/allgatherv.rs), no pairs.
        (
            nvshmem::EXCHANGE_LL_MAX_ENV,
            "every part",
            "allgather's blocks (the mailbox past 16 PEs)",
        )
    } else if exchange && kind.collective == nvshmem::Collective::Alltoallv && lines_max > 0 {
        // Host counts: one launch of every part (src/coll/alltoallv.rs), no pairs; without
        // lines, the exchange's mailbox.
        (
            nvshmem::EXCHANGE_LL_MAX_ENV,
            "pairs (two PEs, one direction)",
            "the receiver's handshake in the same launch (the mailbox past 16 PEs)",
        )
    } else if exchange {
        (
            nvshmem::EXCHANGE_LL_MAX_ENV,
            "pairs (two PEs, one direction)",
            "the mailbox",
        )
    } else {
        (nvshmem::FAMILY_LL_MAX_ENV, "blocks", "the handshake")
    };
    match lines_max {
        0 => format!(
            "ours: no low-latency lines ({env}=0, or a PE not mapped): {otherwise} at every size"
        ),
        max => format!(
            "ours: low-latency lines for {what} up to {} ({env}), {otherwise} above",
            size_label(max)
        ),
    }
}

/// The harness report with the collective's header lines, JSON fields and the ours/nccl ratio;
/// with `shape.settings` (what ours' `Auto` chooses from, where it chooses), a line saying them
/// and the ours= column of what each row's ours ran, else the lines' limit.
fn report(
    n_pes: i32,
    gpu: String,
    opts: &FamilyBenchOptions,
    shape: OursShape,
    nccl_version: Option<String>,
    nccl_nvls_enable: Option<String>,
    rows: Vec<harness::Row>,
) -> Report {
    let kind = opts.kind;
    let mut first = nccl_label(nccl_version.as_deref(), nccl_nvls_enable.as_deref());
    if let Some(slot) = shape.slot_bytes {
        first += &format!("; our receive slots {}", size_label(slot));
    }
    if kind.rooted() {
        first += &format!("; root PE {}", opts.root);
    }
    let mut header = vec![
        first,
        format!(
            "{} (nccl-tests' definitions); bus factor {}",
            kind.size_text(),
            kind.busbw_text()
        ),
        kind.expected_text().to_string(),
    ];
    if let Some(s) = &shape.settings {
        header.push(format!("ours: {s}; ours= what ours ran"));
    } else if let Some(max) = shape.lines_max {
        header.push(lines_text(kind, max));
    }
    if opts.candidates.contains(&Candidate::NcclSym) {
        header.push(NCCL_SYM_WORDING.to_string());
    }
    let mut json_fields: Vec<(&'static str, serde_json::Value)> = Vec::new();
    if let Some(slot) = shape.slot_bytes {
        json_fields.push(("slot_bytes", slot.into()));
    }
    if let Some(s) = &shape.settings {
        json_fields.push(("settings", s.clone().into()));
    }
    if kind.rooted() {
        json_fields.push(("root", opts.root.into()));
    }
    json_fields.push(("nccl_version", nccl_version.into()));
    json_fields.push(("nccl_nvls_enable", nccl_nvls_enable.into()));
    if let Some(max) = shape.lines_max {
        json_fields.push(("lines_max", max.into()));
    }
    Report {
        collective: kind.name(),
        n_pes,
        gpu,
        date: nvsh_plot::today(),
        op: kind.reduces().then_some(opts.op),
        reps: opts.reps.max(1),
        warmup: opts.warmup.max(1),
        header,
        json_fields,
        candidates: opts.candidates.iter().map(|c| c.name()).collect(),
        ratio: Some(("ours", NCCL_BASELINES)),
        optional: optional_names(&opts.candidates, &opts.optional),
        note_column: shape
            .settings
            .is_some()
            .then_some(("ours=", "ours_protocol")),
        checked_by: kind.root_only().then(|| {
            format!(
                "the root (PE {}), the only PE whose output is defined,",
                opts.root
            )
        }),
        rows,
    }
}

/// The report's names of the `optional` candidates among `candidates`.
fn optional_names(candidates: &[Candidate], optional: &[Candidate]) -> Vec<&'static str> {
    candidates
        .iter()
        .filter(|c| optional.contains(c))
        .map(|c| c.name())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::{algbw_gbps, salt, size_plan, Outcome, RatioOn, Row, Timing};
    use crate::bench::render::{render_json, render_table};
    use nvshmem::tools::Peers;
    use nvshmem::Collective as C;
    use nvshmem::COLLECTIVES;

    /// The bench as the harness sees it, with neither candidate usable (no GPU here).
    fn bench(kind: Kind, op: ReduceOp, root: i32) -> FamilyBench<'static> {
        FamilyBench {
            kind,
            op,
            root,
            ours: Err("no GPU".into()),
            staged: Err("no GPU".into()),
            registered: Err("no GPU".into()),
            nccl: Err("no GPU".into()),
            nvshmem: Err("no GPU".into()),
            nccl_sym: Err("no GPU".into()),
        }
    }

    #[test]
    fn bus_factors_are_nccl_tests() {
        for n in [2, 4, 8] {
            assert_eq!(Kind::of(C::Broadcast).busbw_factor(n), 1.0);
            assert_eq!(Kind::of(C::Reduce).busbw_factor(n), 1.0);
            let blocked = (n as f64 - 1.0) / n as f64;
            for k in [
                Kind::of(C::Allgather),
                Kind::of(C::ReduceScatter),
                Kind::of(C::Alltoall),
            ] {
                assert_eq!(k.busbw_factor(n), blocked, "{k:?} {n}");
            }
        }
        assert_eq!(Kind::of(C::Allgather).busbw_factor(2), 0.5);
        assert_eq!(Kind::of(C::Alltoall).busbw_factor(8), 0.875);
        assert_eq!(Kind::of(C::ReduceScatter).busbw_factor(1), 0.0);
        assert_eq!(Kind::of(C::Broadcast).busbw_factor(0), 0.0);
        // The harness's busbw is algbw times the factor: 1 MiB in 10 us on 8 PEs.
        let b = bench(Kind::of(C::Allgather), ReduceOp::Sum, 0);
        let f = <FamilyBench<'_> as Collective<f32>>::busbw_factor(&b, 8);
        assert!((algbw_gbps(1 << 20, 10.0) * f - 91.7504).abs() < 1e-9);
    }

    #[test]
    fn sizes_and_counts_are_nccl_tests() {
        let plan = |kind: Kind, sizes: &[usize], elem: usize, n: i32| {
            let b = bench(kind, ReduceOp::Sum, 0);
            if elem == 4 {
                size_plan::<f32, _>(&b, sizes, elem, n)
            } else {
                size_plan::<half::bf16, _>(&b, sizes, elem, n)
            }
        };
        // Broadcast, reduce and the send/recv ring: the size asked for is each PE's buffer.
        for k in [
            Kind::of(C::Broadcast),
            Kind::of(C::Reduce),
            Kind::of(C::Group).with(Peers::Ring),
        ] {
            assert_eq!(
                plan(k, &[4096, 1 << 20], 4, 3),
                vec![(1024, 4096), (1 << 18, 1 << 20)]
            );
            assert_eq!((k.input_len(10, 4), k.output_len(10, 4)), (10, 10));
        }
        // The others: a block per PE, and the size is the n x count buffer.
        for k in [
            Kind::of(C::Allgather),
            Kind::of(C::Alltoall),
            Kind::of(C::ReduceScatter),
            Kind::of(C::Group),
        ] {
            assert_eq!(plan(k, &[4096], 4, 2), vec![(512, 4096)], "{k:?}");
            assert_eq!(plan(k, &[1 << 20], 2, 8), vec![(1 << 16, 1 << 20)], "{k:?}");
            // 3 PEs: 4K of f32 is 341 elements each, down to 340 (16 bytes), 4080 bytes.
            assert_eq!(plan(k, &[4096], 4, 3), vec![(340, 4080)], "{k:?}");
            // bf16 blocks are multiples of 8 elements: 4K over 3 is 682, down to 680.
            assert_eq!(plan(k, &[4096], 2, 3), vec![(680, 4080)], "{k:?}");
            // Too small for a 16-byte block per PE: left out.
            assert_eq!(plan(k, &[64, 128], 4, 8), vec![(4, 128)], "{k:?}");
        }
        assert_eq!(
            (
                Kind::of(C::Allgather).input_len(5, 4),
                Kind::of(C::Allgather).output_len(5, 4)
            ),
            (5, 20)
        );
        assert_eq!(
            (
                Kind::of(C::Alltoall).input_len(5, 4),
                Kind::of(C::Alltoall).output_len(5, 4)
            ),
            (20, 20)
        );
        assert_eq!(
            (
                Kind::of(C::Group).input_len(5, 4),
                Kind::of(C::Group).output_len(5, 4)
            ),
            (20, 20)
        );
        assert_eq!(Kind::of(C::Group).with(Peers::Ring).busbw_factor(4), 1.0);
        assert_eq!(Kind::of(C::Group).busbw_factor(4), 0.75);
        assert_eq!(
            (
                Kind::of(C::ReduceScatter).input_len(5, 4),
                Kind::of(C::ReduceScatter).output_len(5, 4)
            ),
            (20, 5)
        );
        // A size that is no whole element, or whose count repeats, is left out.
        assert_eq!(
            plan(Kind::of(C::Broadcast), &[3, 4096, 4096], 2, 2).len(),
            1
        );
    }

    /// `x` as `dtype` holds it: rounded for floats (as the device stores each partial result),
    /// unchanged for integers (whose patterns are exact).
    fn stored(dtype: BenchDtype, x: f64) -> f64 {
        match dtype {
            BenchDtype::F32 => x as f32 as f64,
            BenchDtype::Bf16 => half::bf16::from_f64(x).to_f64(),
            BenchDtype::F16 => half::f16::from_f64(x).to_f64(),
            _ => x,
        }
    }

    /// Each PE's output computed by moving and reducing host vectors, as the collective's
    /// definition says, in rank order and in the dtype (integer avg truncated toward zero).
    fn simulate(
        kind: Kind,
        op: ReduceOp,
        dtype: BenchDtype,
        root: i32,
        n: i32,
        count: usize,
        s: u64,
    ) -> Vec<Vec<f64>> {
        let r = |x: f64| stored(dtype, x);
        let inputs: Vec<Vec<f64>> = (0..n)
            .map(|pe| {
                (0..kind.input_len(count, n))
                    .map(|i| r(input_value(kind, op, dtype, pe, i, s)))
                    .collect()
            })
            .collect();
        let fold = |vals: Vec<f64>| -> f64 {
            let acc = vals[1..].iter().fold(vals[0], |acc, &v| {
                r(match op {
                    ReduceOp::Sum | ReduceOp::Avg => acc + v,
                    ReduceOp::Prod => acc * v,
                    ReduceOp::Min => acc.min(v),
                    ReduceOp::Max => acc.max(v),
                })
            });
            match op {
                ReduceOp::Avg if dtype.is_float() => acc / n as f64,
                ReduceOp::Avg => (acc / n as f64).trunc(),
                _ => acc,
            }
        };
        let block = |pe: i32, b: usize| inputs[pe as usize][b * count..(b + 1) * count].to_vec();
        (0..n)
            .map(|pe| {
                if kind.is_ring() {
                    // What the previous PE sent.
                    return inputs[((pe + n - 1) % n) as usize].clone();
                }
                match (kind.row().shape, kind.reduces()) {
                    (Shape::Whole, false) => inputs[root as usize].clone(),
                    (Shape::Gather, _) => inputs.concat(),
                    (Shape::Exchange, _) => (0..n).flat_map(|s| block(s, pe as usize)).collect(),
                    (Shape::Scatter, _) => (0..count)
                        .map(|j| fold((0..n).map(|s| block(s, pe as usize)[j]).collect()))
                        .collect(),
                    (Shape::Whole, true) => (0..count)
                        .map(|i| fold((0..n).map(|s| inputs[s as usize][i]).collect()))
                        .collect(),
                    (Shape::Empty, _) => Vec::new(),
                }
            })
            .collect()
    }

    /// The expected values are each collective's definition, exactly, in every type a
    /// collective takes: floats for sum, prod, min and max (avg rounds, see allreduce's
    /// tolerance tests), integers for every op, avg truncated toward zero.
    #[test]
    fn expected_values_are_the_collectives_definitions_exactly_in_every_type() {
        for kind in Kind::all() {
            for &dtype in BenchDtype::taken_by(kind.reduces()) {
                let ops: &[ReduceOp] = if !kind.reduces() {
                    &[ReduceOp::Sum]
                } else if dtype.is_float() {
                    &[ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max]
                } else {
                    &ReduceOp::ALL
                };
                for n in [1, 2, 3, 8] {
                    for root in [0, n - 1] {
                        for &op in ops {
                            let count = 24;
                            let s = salt(count * 2, 1);
                            let want = simulate(kind, op, dtype, root, n, count, s);
                            for pe in 0..n {
                                if !checks_output(kind, root, pe) {
                                    continue;
                                }
                                let got: Vec<f64> = (0..kind.output_len(count, n))
                                    .map(|i| {
                                        expected_value(kind, op, dtype, root, pe, i, count, s, n)
                                    })
                                    .collect();
                                assert_eq!(
                                    got, want[pe as usize],
                                    "{kind:?} {dtype:?} {op:?} n={n} pe={pe}"
                                );
                                if op != ReduceOp::Avg {
                                    assert_eq!(tolerance(kind, op, dtype, n), 0.0);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Data movement of integers fills most of each type's bits, so every byte carries data,
    /// and never produces the value outputs are poisoned with.
    #[test]
    fn integer_data_movement_spreads_over_the_bytes_and_avoids_the_poison() {
        let values = |dtype: BenchDtype| -> Vec<f64> {
            (0..4096)
                .map(|i| input_value(Kind::of(C::Alltoall), ReduceOp::Sum, dtype, 1, i, 7))
                .collect()
        };
        for (dtype, lo, hi) in [
            (BenchDtype::U8, 0.0, 254.0),
            (BenchDtype::U32, 0.0, (u32::MAX - 1) as f64),
            (BenchDtype::I32, -(2f64.powi(30)), 2f64.powi(30) - 1.0),
            (BenchDtype::U64, 0.0, 2f64.powi(53) - 1.0),
            (BenchDtype::I64, -(2f64.powi(52)), 2f64.powi(52) - 1.0),
        ] {
            let v = values(dtype);
            assert!(v
                .iter()
                .all(|&x| (lo..=hi).contains(&x) && x.fract() == 0.0));
            // The top quarter and the bottom quarter of the range both occur.
            let quarter = (hi - lo) / 4.0;
            assert!(v.iter().any(|&x| x > hi - quarter), "{dtype:?}");
            assert!(v.iter().any(|&x| x < lo + quarter), "{dtype:?}");
        }
        // Reductions still take allreduce's small integers.
        let v: Vec<f64> = (0..64)
            .map(|i| {
                input_value(
                    Kind::of(C::ReduceScatter),
                    ReduceOp::Sum,
                    BenchDtype::I64,
                    1,
                    i,
                    7,
                )
            })
            .collect();
        assert!(v.iter().all(|x| x.abs() <= 32.0));
    }

    /// Each collective takes the types the library gives it: reductions the eight reducible
    /// ones, data movement u8 too; the refusal says so in the command line's terms.
    #[test]
    fn reductions_refuse_u8_and_data_movement_takes_every_type() {
        for kind in Kind::all() {
            let taken = BenchDtype::taken_by(kind.reduces());
            assert_eq!(taken.len(), if kind.reduces() { 8 } else { 9 }, "{kind:?}");
            assert_eq!(check_dtypes(kind.name(), kind.reduces(), taken), Ok(()));
        }
        assert_eq!(
            dtype_refusal("reduce-scatter", true, BenchDtype::U8).unwrap(),
            "reduce-scatter reduces f32, bf16, f16, f64, i32, u32, i64, u64; u8 is data \
             movement only (broadcast, allgather and alltoall take it)"
        );
        assert_eq!(
            check_dtypes("reduce", true, &[BenchDtype::I64, BenchDtype::U8])
                .unwrap_err()
                .split(';')
                .next(),
            Some("reduce reduces f32, bf16, f16, f64, i32, u32, i64, u64")
        );
        assert_eq!(dtype_refusal("broadcast", false, BenchDtype::U8), None);
        // The bench as the harness sees it gives the same reason as its n/a.
        let b = bench(Kind::of(C::Reduce), ReduceOp::Sum, 0);
        let why = <FamilyBench<'_> as Collective<u8>>::available(&b, Candidate::Ours);
        assert!(why.unwrap_err().starts_with("reduce reduces f32"));
        let b = bench(Kind::of(C::Allgather), ReduceOp::Sum, 0);
        let why = <FamilyBench<'_> as Collective<u8>>::available(&b, Candidate::Ours);
        assert_eq!(why.unwrap_err(), "no GPU");
    }

    #[test]
    fn misrouted_or_stale_data_does_not_match() {
        let (n, count) = (4, 64);
        let s = salt(4096, 0);
        let e = |kind: Kind, root: i32, pe: i32, i: usize, s: u64| {
            expected_value(
                kind,
                ReduceOp::Sum,
                BenchDtype::F32,
                root,
                pe,
                i,
                count,
                s,
                n,
            )
        };
        let differ = |a: &dyn Fn(usize) -> f64, b: &dyn Fn(usize) -> f64, len: usize| {
            (0..len).filter(|&i| a(i) != b(i)).count() > len / 2
        };
        let len = n as usize * count;
        // Another PE's output (where PEs' outputs differ), another call's salt, another root.
        for kind in Kind::all() {
            if [C::Alltoall, C::ReduceScatter]
                .map(Kind::of)
                .contains(&kind)
            {
                assert!(differ(
                    &|i| e(kind, 0, 1, i, s),
                    &|i| e(kind, 0, 2, i, s),
                    count
                ));
            }
            assert!(differ(
                &|i| e(kind, 0, 0, i, s),
                &|i| e(kind, 0, 0, i, s + 1),
                count
            ));
        }
        assert!(differ(
            &|i| e(Kind::of(C::Broadcast), 0, 1, i, s),
            &|i| e(Kind::of(C::Broadcast), 1, 1, i, s),
            count
        ));
        // Alltoall: block s of PE r's output is block r of PE s's input, not block s.
        assert!(differ(
            &|i| e(Kind::of(C::Alltoall), 0, 1, i, s),
            &|i| {
                let pe = (i / count) as i32;
                input_value(
                    Kind::of(C::Alltoall),
                    ReduceOp::Sum,
                    BenchDtype::F32,
                    pe,
                    i,
                    s,
                )
            },
            len
        ));
        // Allgather: block r is PE r's input, not the receiving PE's.
        assert!(differ(
            &|i| e(Kind::of(C::Allgather), 0, 2, i, s),
            &|i| input_value(
                Kind::of(C::Allgather),
                ReduceOp::Sum,
                BenchDtype::F32,
                2,
                i % count,
                s
            ),
            len
        ));
    }

    #[test]
    fn only_reduce_leaves_outputs_unchecked_and_only_off_the_root() {
        for kind in Kind::all() {
            for pe in 0..4 {
                assert_eq!(
                    checks_output(kind, 2, pe),
                    kind != Kind::of(C::Reduce) || pe == 2,
                    "{kind:?} {pe}"
                );
            }
        }
        let b = bench(Kind::of(C::Reduce), ReduceOp::Sum, 1);
        assert!(!<FamilyBench<'_> as Collective<f32>>::checks_output(
            &b, 0, 2
        ));
        assert!(<FamilyBench<'_> as Collective<f32>>::checks_output(
            &b, 1, 2
        ));
        // Reductions share allreduce's tolerance; data movement is bit for bit.
        for (kind, op) in [
            (Kind::of(C::Reduce), ReduceOp::Avg),
            (Kind::of(C::ReduceScatter), ReduceOp::Avg),
        ] {
            assert_eq!(
                tolerance(kind, op, BenchDtype::F32, 4),
                allreduce::tolerance(op, BenchDtype::F32, 4)
            );
        }
        assert_eq!(
            tolerance(Kind::of(C::Alltoall), ReduceOp::Avg, BenchDtype::Bf16, 16),
            0.0
        );
    }

    #[test]
    fn names_parse_back() {
        use clap::ValueEnum;
        for c in Candidate::ALL {
            assert_eq!(Candidate::from_str(c.name(), true), Ok(c));
        }
        assert_eq!(Candidate::from_str("NCCL", true), Ok(Candidate::Nccl));
        assert!(Candidate::from_str("auto", true).is_err());
        // From the table, not a list written here: every row that moves data, but allreduce
        // (its own bench), is a kind, twice where the caller picks the pairs (ring, all pairs);
        // each name parses back to its kind and names no other.
        let kinds = Kind::all();
        for (i, k) in kinds.iter().enumerate() {
            assert_eq!(Kind::from_name(k.name()), Some(*k));
            assert!(kinds[i + 1..].iter().all(|o| o.name() != k.name()));
        }
        for r in COLLECTIVES.iter() {
            let want = if r.scratch == ScratchKind::Allreduce || r.shape == Shape::Empty {
                0
            } else if r.placement == nvshmem::Placement::Peers {
                2
            } else {
                1
            };
            let have = kinds.iter().filter(|k| k.collective == r.collective);
            assert_eq!(have.count(), want, "{}", r.name);
        }
        // In the table's order, the ring of sends before all pairs.
        let at = |k: &Kind| {
            COLLECTIVES
                .iter()
                .position(|r| r.collective == k.collective)
        };
        for w in kinds.windows(2) {
            assert!(
                at(&w[0]) <= at(&w[1]),
                "{} before {}",
                w[0].name(),
                w[1].name()
            );
            if w[0].collective == w[1].collective {
                assert!(w[0].is_ring() && !w[1].is_ring(), "{}", w[0].name());
            }
        }
        assert!(Kind::of(C::Reduce).reduces() && Kind::of(C::Reduce).rooted());
        assert!(!Kind::of(C::Alltoall).reduces() && !Kind::of(C::Alltoall).rooted());
    }

    fn timing(us: f64, bytes: usize, kind: Kind, n: i32, checked_pes: i32) -> Outcome {
        let algbw = algbw_gbps(bytes, us);
        Outcome::Timed(Timing {
            iters: 20,
            us,
            // After a compute kernel, as if the tail no longer overlapped: 2 us more.
            us_after_compute: us + 2.0,
            algbw,
            busbw: algbw * kind.busbw_factor(n),
            host_us: 1.0,
            checked: 400,
            checked_pes,
            wrong: 0,
            wrong_detail: None,
        })
    }

    fn sample(kind: Kind, n: i32, root: i32) -> Report {
        sample_with(kind, n, root, None)
    }

    /// [`sample`] with ours' `settings`: its rows say ours ran "direct", then "split".
    fn sample_with(kind: Kind, n: i32, root: i32, settings: Option<&str>) -> Report {
        let mut opts = FamilyBenchOptions::new(kind);
        opts.root = root;
        let pes = if kind == Kind::of(C::Reduce) { 1 } else { n };
        let row = |bytes: usize, count: usize, wrong: u64| {
            let mut ours = timing(8.0, bytes, kind, n, pes);
            if let Outcome::Timed(t) = &mut ours {
                t.wrong = wrong;
            }
            Row {
                bytes,
                count,
                dtype: BenchDtype::F32,
                tolerance: 0.0,
                results: vec![("ours", ours), ("nccl", timing(10.0, bytes, kind, n, pes))],
                note: settings.map(|_| if bytes < 1 << 20 { "direct" } else { "split" }),
            }
        };
        report(
            n,
            "NVIDIA H200".into(),
            &opts,
            OursShape {
                slot_bytes: kind.reduces().then_some(8 << 20),
                lines_max: Some(if kind == Kind::of(C::Alltoallv) {
                    0
                } else {
                    256 << 10
                }),
                settings: settings.map(str::to_string),
            },
            Some("2.27.3".into()),
            Some("0".into()),
            vec![row(4080, 340, 0), row(1 << 20, 1 << 16, 2)],
        )
    }

    #[test]
    fn reports_say_what_ours_ran_where_it_chooses() {
        let settings = "auto takes split from 1M at 3 or more PEs, else the handshake";
        let r = sample_with(Kind::of(C::Broadcast), 4, 0, Some(settings));
        let t = render_table(&r, RatioOn::BackToBack);
        assert!(
            t.contains(&format!("# ours: {settings}; ours= what ours ran\n")),
            "{t}"
        );
        let header = t.lines().find(|l| l.contains("redop")).unwrap();
        assert!(header.ends_with("  ours="), "{header}");
        let row = |start: &str| {
            t.lines()
                .find(|l| l.trim_start().starts_with(start))
                .unwrap()
                .to_string()
        };
        assert!(row("4080").ends_with(" direct"), "{t}");
        assert!(row("1M").ends_with("  split"), "{t}");
        assert_eq!(header.len(), row("1M").len(), "{t}");
        let j = render_json(&r, RatioOn::BackToBack);
        assert!(j.contains(&format!("\"settings\":\"{settings}\"")), "{j}");
        assert!(j.contains("\"ours_protocol\":\"split\""), "{j}");
    }

    #[test]
    fn reports_say_what_was_measured_and_checked() {
        let t = render_table(&sample(Kind::of(C::Allgather), 3, 0), RatioOn::BackToBack);
        assert!(
            t.starts_with("# allgather on 3 PE(s), NVIDIA H200\n"),
            "{t}"
        );
        assert!(t.contains("# NCCL 2.27.3 (NCCL_NVLS_ENABLE=0)\n"), "{t}");
        assert!(
            t.contains(
                "size = the output, n x count (nccl-tests' definitions); bus factor (n-1)/n"
            ),
            "{t}"
        );
        assert!(
            t.contains("block r of every output = PE r's input, bit for bit"),
            "{t}"
        );
        assert!(t.contains("every PE compares every output"), "{t}");
        let header = t.lines().find(|l| l.contains("redop")).unwrap();
        assert!(header.ends_with("ours/nccl  |compute"), "{header}");
        let row = t
            .lines()
            .find(|l| l.trim_start().starts_with("4080"))
            .unwrap();
        assert!(row.contains(" 340 ") && row.contains(" none "), "{row}");
        assert!(row.ends_with(" 0.80      0.83"), "{row}");
        assert_eq!(header.len(), row.len(), "{header}\n{row}");

        let r = sample(Kind::of(C::Reduce), 4, 2);
        let t = render_table(&r, RatioOn::BackToBack);
        assert!(t.starts_with("# reduce (sum) on 4 PE(s)"), "{t}");
        assert!(t.contains("our receive slots 8M; root PE 2\n"), "{t}");
        assert!(t.contains("bus factor 1\n"), "{t}");
        assert!(
            t.contains(
                "the root (PE 2), the only PE whose output is defined, compares every output"
            ),
            "{t}"
        );
        // Wrong outputs are counted on the one checking PE.
        assert!(t.contains("2 wrong output(s) of 400 calls x 1 PEs"), "{t}");
        assert!(r.verify().is_err());
        let j = render_json(&r, RatioOn::BackToBack);
        assert!(
            j.starts_with(
                "{\"schema\":1,\"complete\":true,\"collective\":\"reduce\",\"n_pes\":4,\"gpu\":\"NVIDIA H200\",\"op\":\"sum\""
            ),
            "{j}"
        );
        assert!(
            j.contains("\"slot_bytes\":8388608,\"root\":2,\"nccl_version\":\"2.27.3\""),
            "{j}"
        );
        assert!(j.contains("\"checked_pes\":1}"), "{j}");
        assert!(j.contains("\"ratio_ours_over_nccl\":0.8,"), "{j}");
        assert!(j.contains("\"ratio_ours_over_nccl\":null"), "{j}");

        let j = render_json(&sample(Kind::of(C::Broadcast), 2, 1), RatioOn::BackToBack);
        assert!(j.contains("\"op\":null") && j.contains("\"root\":1"), "{j}");
        assert!(!j.contains("slot_bytes"), "{j}");
        let j = render_json(
            &sample(Kind::of(C::ReduceScatter), 2, 0),
            RatioOn::BackToBack,
        );
        assert!(
            j.contains("\"slot_bytes\"") && !j.contains("\"root\""),
            "{j}"
        );
    }

    #[test]
    fn reports_say_whether_ours_had_lines() {
        let t = render_table(
            &sample(Kind::of(C::Allgatherv), 4, 0),
            RatioOn::AfterCompute,
        );
        assert!(
            t.contains(
                "ours: low-latency lines for every part up to 256K (NVSH_EXCHANGE_LL_MAX), \
                 allgather's blocks (the mailbox past 16 PEs) above\n"
            ),
            "{t}"
        );
        let t = render_table(&sample(Kind::of(C::Alltoallv), 4, 0), RatioOn::AfterCompute);
        assert!(
            t.contains(
                "ours: no low-latency lines (NVSH_EXCHANGE_LL_MAX=0, or a PE not mapped): the \
                 mailbox at every size\n"
            ),
            "{t}"
        );
        assert_eq!(
            lines_text(Kind::of(C::Alltoallv), 256 << 10),
            "ours: low-latency lines for pairs (two PEs, one direction) up to 256K \
             (NVSH_EXCHANGE_LL_MAX), the receiver's handshake in the same launch (the mailbox \
             past 16 PEs) above"
        );
        let t = render_table(&sample(Kind::of(C::Broadcast), 2, 0), RatioOn::BackToBack);
        assert!(
            t.contains("lines for blocks up to 256K (NVSH_FAMILY_LL_MAX), the handshake above"),
            "{t}"
        );
        let j = render_json(
            &sample(Kind::of(C::Group).with(Peers::Ring), 2, 0),
            RatioOn::BackToBack,
        );
        assert!(j.contains("\"lines_max\":262144"), "{j}");
    }
}
