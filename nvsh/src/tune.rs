//! `nvsh tune`: sweeps every collective, message size and dtype class with the library's
//! [`Tuner`] (each candidate timed after a barrier, the slowest PE of each run counting, the
//! median of the runs), writes the winners as this machine's entry of a tuning file, and times
//! every point again (the re-bench) to show how the tuned choice compares with the best
//! candidate of that second run. With `--online` it also measures online tuning: the wall time
//! of the first `Auto` allreduce at each size bucket, which tunes that bucket.
//!
//! The collectives come from the library's table ([`nvshmem::COLLECTIVES`]): allreduce, whose
//! candidates are its algorithms, and every row whose `Auto` chooses between protocols, called
//! through [`TableCollective`].

use crate::bench::harness::{size_steps, BenchDtype};
use crate::bench::median;
use cudarc::driver::CudaStream;
use nvshmem::tools::size_label;
use nvshmem::tools::tuning::dtype_class;
use nvshmem::tools::{AnyCall, TableCollective};
use nvshmem::Element;
use nvshmem::Measurement;
use nvshmem::Reducible;
use nvshmem::SymmetricBuffer;
use nvshmem::{
    Allreduce, AllreduceAlgo, Collective, CollectiveRow, Error, FamilyProtocol, Nvshmem, ReduceOp,
    Result, ScratchKind, Shape, Tuner, COLLECTIVES,
};
use nvshmem::{Fingerprint, TuningTable};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// Whether `nvsh tune` sweeps the row: allreduce (its algorithms), and the collectives whose
/// workspace holds slots or lines only, whose `Auto` chooses one protocol per call. The
/// exchanges choose per pair and the barrier moves nothing, so neither has a choice to tune
/// (their [`TableCollective::protocols`] is empty). The sweep refuses a swept row whose
/// workspace offers no protocol, so this cannot drift from the library unnoticed.
pub fn tunes(row: &CollectiveRow) -> bool {
    matches!(
        row.scratch,
        ScratchKind::Allreduce | ScratchKind::Slots | ScratchKind::Lines
    )
}

/// The collectives `nvsh tune` sweeps, in the table's order (the default of `--collectives`).
pub fn tuned() -> Vec<Collective> {
    COLLECTIVES
        .iter()
        .filter(|r| tunes(r))
        .map(|r| r.collective)
        .collect()
}

/// Whether the collective's candidates are allreduce's algorithms (not family protocols).
fn is_allreduce(coll: Collective) -> bool {
    coll.row().scratch == ScratchKind::Allreduce
}

/// Whether the count argument is one block of a buffer holding one per PE (the size asked for
/// is then the n x count buffer, as the benches and nccl-tests count it).
fn per_pe_blocks(coll: Collective) -> bool {
    coll.row().shape != Shape::Whole
}

/// One dtype per class the collective takes: the reductions have no 8-bit type.
pub fn dtypes(coll: Collective) -> &'static [BenchDtype] {
    if coll.row().reduces {
        &[BenchDtype::Bf16, BenchDtype::F32, BenchDtype::F64]
    } else {
        &[
            BenchDtype::U8,
            BenchDtype::Bf16,
            BenchDtype::F32,
            BenchDtype::F64,
        ]
    }
}

/// Teams of up to this many PEs have the pull timed: it has passed its GPU tests at 2 PEs
/// only (3 PEs sharing 2 GPUs did not finish, and no 4-GPU machine has run it), so a tuning
/// file does not choose it where it is untested. `set_protocol` still forces it at any size.
pub const PULL_TUNED_PES: i32 = 2;

/// `protocols` (a workspace's [`TableCollective::protocols`]) at a point whose rank block is
/// `block_bytes`, on a workspace of `n_pes` whose lines take blocks up to `lines_max` bytes:
/// the lines only where the block fits them (above, a call asked for lines takes direct
/// stores, so timing "ll" there would only pick between two runs of one protocol and write
/// that noise into the tuning file); the pull up to [`PULL_TUNED_PES`].
pub fn protocols_at(
    protocols: &[FamilyProtocol],
    block_bytes: usize,
    lines_max: usize,
    n_pes: i32,
) -> Vec<FamilyProtocol> {
    protocols
        .iter()
        .copied()
        .filter(|&p| p != FamilyProtocol::LowLatency || block_bytes <= lines_max)
        .filter(|&p| p != FamilyProtocol::Pull || n_pes <= PULL_TUNED_PES)
        .collect()
}

/// The names of `protocols`, as the tuner's candidates.
fn protocol_names(protocols: &[FamilyProtocol]) -> Vec<&'static str> {
    protocols.iter().map(|p| p.name()).collect()
}

/// What to sweep.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    /// Rows of [`tuned`], in the order to sweep them.
    pub collectives: Vec<Collective>,
    pub min_bytes: usize,
    pub max_bytes: usize,
    pub warmup: usize,
    pub runs: usize,
    /// Also measure online tuning per size bucket (allreduce, f32).
    pub online: bool,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            collectives: tuned(),
            min_bytes: 4 << 10,
            max_bytes: 256 << 20,
            warmup: 2,
            runs: 10,
            online: false,
        }
    }
}

/// One candidate's time at a point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateUs {
    pub name: String,
    pub us: f64,
}

/// One (collective, dtype, size) of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TunePoint {
    pub collective: String,
    pub dtype: String,
    pub dtype_class: String,
    /// nccl-tests' size: the larger of a PE's input and output, bytes.
    pub bytes: usize,
    /// The tuning file's size: the count argument times the element size.
    pub key_bytes: usize,
    pub choice: String,
    /// The tuning's times (median over runs of each run's slowest PE).
    pub tuned: Vec<CandidateUs>,
    /// The same candidates timed again after the whole sweep.
    pub rebench: Vec<CandidateUs>,
}

impl TunePoint {
    fn time(list: &[CandidateUs], name: &str) -> Option<f64> {
        list.iter().find(|c| c.name == name).map(|c| c.us)
    }

    /// The re-bench's fastest candidate.
    pub fn rebench_best(&self) -> Option<&CandidateUs> {
        self.rebench.iter().min_by(|a, b| a.us.total_cmp(&b.us))
    }

    /// The tuned choice's re-bench time over the re-bench's best (1.0: the choice was best).
    pub fn ratio(&self) -> Option<f64> {
        let mine = Self::time(&self.rebench, &self.choice)?;
        let best = self.rebench_best()?.us;
        (best > 0.0).then(|| mine / best)
    }
}

/// Online tuning of one bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OnlinePoint {
    pub bytes: usize,
    pub choice: String,
    /// Wall time of the tuning on PE 0, milliseconds.
    pub ms: f64,
}

/// What `nvsh tune` measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneReport {
    pub fingerprint: Fingerprint,
    pub n_pes: i32,
    pub date: String,
    pub warmup: usize,
    pub runs: usize,
    pub points: Vec<TunePoint>,
    pub table: TuningTable,
    /// Wall time of the sweep and of the re-bench, seconds.
    pub sweep_s: f64,
    pub rebench_s: f64,
    pub online: Vec<OnlinePoint>,
}

impl TuneReport {
    /// Median wall time of an online tuning over the buckets, milliseconds.
    pub fn online_median_ms(&self) -> Option<f64> {
        let ms: Vec<f64> = self.online.iter().map(|p| p.ms).collect();
        (!ms.is_empty()).then(|| median(&ms))
    }

    /// The worst ratio of tuned choice to re-bench best, and its point.
    pub fn worst(&self) -> Option<(f64, &TunePoint)> {
        self.points
            .iter()
            .filter_map(|p| p.ratio().map(|r| (r, p)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    }
}

fn times(m: &Measurement) -> Vec<CandidateUs> {
    m.candidates
        .iter()
        .map(|c| CandidateUs {
            name: c.name.clone(),
            us: c.us,
        })
        .collect()
}

/// The swept collectives' workspaces, created once (collective over the world): allreduce's
/// own (its candidates are algorithms, timed by [`Tuner::tune_allreduce`]), and one per other
/// row, called through the table.
struct Workspaces<'nv> {
    allreduce: Option<Allreduce<'nv>>,
    rows: Vec<Box<dyn TableCollective<'nv> + 'nv>>,
}

/// Receive slots of the workspaces, as the benches use.
const SLOT_BYTES: usize = 8 << 20;

impl<'nv> Workspaces<'nv> {
    /// Those of `colls`, in the table's order (every PE creates the same ones).
    fn new(nv: &'nv Nvshmem, colls: &[Collective]) -> Result<Self> {
        let mut ws = Workspaces {
            allreduce: None,
            rows: Vec::new(),
        };
        for row in COLLECTIVES.iter().filter(|r| colls.contains(&r.collective)) {
            if !tunes(row) {
                return Err(not_tuned(row.name));
            }
            if is_allreduce(row.collective) {
                ws.allreduce = Some(nv.allreduce_workspace(SLOT_BYTES)?);
                continue;
            }
            let w = row.collective.world(nv, SLOT_BYTES)?;
            if w.protocols().is_empty() {
                // `tunes` took a row that has no choice: nothing to time.
                return Err(not_tuned(row.name));
            }
            ws.rows.push(w);
        }
        Ok(ws)
    }

    /// The workspace of a family row.
    fn row(&mut self, coll: Collective) -> Result<&mut Box<dyn TableCollective<'nv> + 'nv>> {
        self.rows
            .iter_mut()
            .find(|w| w.collective() == coll)
            .ok_or_else(|| not_tuned(coll.name()))
    }
}

/// The error of a collective `nvsh tune` has no candidates for.
fn not_tuned(name: &str) -> Error {
    Error::CollectiveShape {
        what: "nvsh tune",
        detail: format!("{name} has no candidates to tune"),
    }
}

/// A point to time: the collective, the count argument and the nccl-tests size.
#[derive(Debug, Clone, Copy)]
struct Plan {
    coll: Collective,
    count: usize,
    bytes: usize,
}

/// The points of `coll` for `elem`-byte elements on `n` PEs: per size asked for, the count
/// (for per-PE blocks the size over n, rounded down to 16 bytes), sizes with no element or a
/// repeated count left out.
fn plans(coll: Collective, sizes: &[usize], elem: usize, n: usize) -> Vec<Plan> {
    let mut out: Vec<Plan> = Vec::new();
    for &s in sizes {
        let count = if per_pe_blocks(coll) {
            let per16 = (16 / elem).max(1);
            s / n / elem / per16 * per16
        } else {
            s / elem
        };
        if count == 0 || out.last().is_some_and(|p| p.count == count) {
            continue;
        }
        let bytes = if per_pe_blocks(coll) {
            count * n * elem
        } else {
            count * elem
        };
        out.push(Plan { coll, count, bytes });
    }
    out
}

/// The element types `nvsh tune` runs: allreduce's points need [`Reducible`], which u8 is not
/// (its plans hold no reduction).
trait TuneElement: Element {
    fn allreduce(
        tuner: &mut Tuner<'_>,
        ar: &mut Allreduce<'_>,
        plan: Plan,
        input: &SymmetricBuffer<'_, Self>,
        output: &SymmetricBuffer<'_, Self>,
        stream: &CudaStream,
    ) -> Result<Measurement>;
}

macro_rules! reducible {
    ($($t:ty),*) => {$(
        impl TuneElement for $t {
            fn allreduce(
                tuner: &mut Tuner<'_>,
                ar: &mut Allreduce<'_>,
                plan: Plan,
                input: &SymmetricBuffer<'_, Self>,
                output: &SymmetricBuffer<'_, Self>,
                stream: &CudaStream,
            ) -> Result<Measurement> {
                allreduce_point(tuner, ar, plan, input, output, stream)
            }
        }
    )*};
}
reducible!(half::bf16, f32, f64);

impl TuneElement for u8 {
    fn allreduce(
        _: &mut Tuner<'_>,
        _: &mut Allreduce<'_>,
        plan: Plan,
        _: &SymmetricBuffer<'_, Self>,
        _: &SymmetricBuffer<'_, Self>,
        _: &CudaStream,
    ) -> Result<Measurement> {
        Err(Error::CollectiveShape {
            what: "nvsh tune",
            detail: format!("{} does not take u8", plan.coll.name()),
        })
    }
}

/// Times allreduce's algorithms at one point.
fn allreduce_point<T: Reducible>(
    tuner: &mut Tuner<'_>,
    ar: &mut Allreduce<'_>,
    plan: Plan,
    input: &SymmetricBuffer<'_, T>,
    output: &SymmetricBuffer<'_, T>,
    stream: &CudaStream,
) -> Result<Measurement> {
    let c = plan.count;
    let (i, o) = (input.view(0..c)?, output.view(0..c)?);
    tuner.tune_allreduce(
        ar,
        i,
        o,
        ReduceOp::Sum,
        &AllreduceAlgo::ALL,
        &mut [],
        stream,
    )
}

/// Times the candidates of one point on `input` / `output` (each at least the point's size):
/// allreduce's algorithms, or the row's protocols through the table (sum, root 0).
fn measure_point<T: TuneElement>(
    tuner: &mut Tuner<'_>,
    ws: &mut Workspaces<'_>,
    plan: Plan,
    input: &SymmetricBuffer<'_, T>,
    output: &SymmetricBuffer<'_, T>,
    stream: &CudaStream,
) -> Result<Measurement> {
    if is_allreduce(plan.coll) {
        let ar = ws
            .allreduce
            .as_mut()
            .ok_or_else(|| not_tuned(plan.coll.name()))?;
        return T::allreduce(tuner, ar, plan, input, output, stream);
    }
    let w = ws.row(plan.coll)?;
    let (row, n, c) = (plan.coll.row(), w.n_pes(), plan.count);
    let i = input.view(0..row.input_len(c, n))?;
    let o = output.view(0..row.output_len(c, n))?;
    let block = c * std::mem::size_of::<T>();
    let protocols = protocols_at(&w.protocols(), block, w.lines_max(), n);
    let names = protocol_names(&protocols);
    let m = tuner.measure(
        &names,
        |k, s| {
            w.set_protocol(protocols[k]);
            w.run_any(AnyCall::new(i, o), s)
        },
        stream,
    )?;
    w.set_protocol(FamilyProtocol::Auto);
    w.check()?;
    Ok(m)
}

/// Both passes over one dtype's points: the tuning, then the re-bench.
fn dtype_passes<T: TuneElement>(
    nv: &Nvshmem,
    tuner: &mut Tuner<'_>,
    ws: &mut Workspaces<'_>,
    plans: &[Plan],
    len: usize,
) -> Result<(Vec<Measurement>, Vec<Measurement>)> {
    let input = nv.alloc_zeroed::<T>(len)?;
    let output = nv.alloc_zeroed::<T>(len)?;
    let stream = nv.stream();
    let mut pass = || -> Result<Vec<Measurement>> {
        plans
            .iter()
            .map(|&p| measure_point(tuner, ws, p, &input, &output, stream))
            .collect()
    };
    let tuned = pass()?;
    let again = pass()?;
    Ok((tuned, again))
}

/// Runs the sweep (every PE), then the online measurement if asked. Every PE returns the same
/// report but for `online`'s wall times, which are its own.
pub fn sweep(nv: &Nvshmem, opts: &TuneOptions) -> Result<TuneReport> {
    let n = nv.n_pes() as usize;
    let sizes = size_steps(opts.min_bytes, opts.max_bytes, 2);
    let mut tuner = nv.tuner()?;
    tuner.set_runs(opts.warmup, opts.runs);
    let mut ws = Workspaces::new(nv, &opts.collectives)?;
    let mut points = Vec::new();
    let (mut sweep_s, mut rebench_s) = (0.0, 0.0);
    for dtype in [
        BenchDtype::U8,
        BenchDtype::Bf16,
        BenchDtype::F32,
        BenchDtype::F64,
    ] {
        let colls: Vec<Collective> = opts
            .collectives
            .iter()
            .copied()
            .filter(|&c| dtypes(c).contains(&dtype))
            .collect();
        if colls.is_empty() {
            continue;
        }
        let elem = dtype.size();
        // Reductions first, in their order, then data movement: one list of points per dtype.
        let mut all: Vec<Plan> = Vec::new();
        for &c in &colls {
            all.extend(plans(c, &sizes, elem, n));
        }
        let len = (opts.max_bytes / elem).max(1);
        let t0 = Instant::now();
        let (tuned, again) = match dtype {
            BenchDtype::U8 => dtype_passes::<u8>(nv, &mut tuner, &mut ws, &all, len)?,
            BenchDtype::Bf16 => dtype_passes::<half::bf16>(nv, &mut tuner, &mut ws, &all, len)?,
            BenchDtype::F32 => dtype_passes::<f32>(nv, &mut tuner, &mut ws, &all, len)?,
            _ => dtype_passes::<f64>(nv, &mut tuner, &mut ws, &all, len)?,
        };
        // The two passes take about as long each.
        let t = t0.elapsed().as_secs_f64();
        sweep_s += t / 2.0;
        rebench_s += t / 2.0;
        for ((p, m), r) in all.iter().zip(&tuned).zip(&again) {
            points.push(TunePoint {
                collective: p.coll.name().into(),
                dtype: dtype.name().into(),
                dtype_class: dtype_class(elem).into(),
                bytes: p.bytes,
                key_bytes: p.count * elem,
                choice: m.winner().name.clone(),
                tuned: times(m),
                rebench: times(r),
            });
        }
    }
    let table = table_of(&points);
    drop(ws);
    drop(tuner);
    let online = if opts.online {
        online_points(nv, &sizes, opts)?
    } else {
        Vec::new()
    };
    Ok(TuneReport {
        fingerprint: nv.tuning_fingerprint(),
        n_pes: nv.n_pes(),
        date: nvsh_plot::today(),
        warmup: opts.warmup,
        runs: opts.runs,
        points,
        table,
        sweep_s,
        rebench_s,
        online,
    })
}

/// The tuning table of the sweep's winners: per collective and dtype class, rows from the
/// sizes' choices.
pub fn table_of(points: &[TunePoint]) -> TuningTable {
    let mut groups: BTreeMap<(String, String), Vec<(u64, String)>> = BTreeMap::new();
    for p in points {
        groups
            .entry((p.collective.clone(), p.dtype_class.clone()))
            .or_default()
            .push((p.key_bytes as u64, p.choice.clone()));
    }
    let mut table = TuningTable::default();
    for ((coll, class), mut pts) in groups {
        pts.sort_by_key(|p| p.0);
        table
            .collectives
            .entry(coll)
            .or_default()
            .insert(class, TuningTable::rows_from_sweep(&pts));
    }
    table
}

/// Online tuning's wall time per size bucket: a fresh workspace that tunes online, the tuned
/// table emptied first (so every bucket is unseen), one `Auto` allreduce of f32 per size. The
/// runtime's table is left as it was.
fn online_points(nv: &Nvshmem, sizes: &[usize], opts: &TuneOptions) -> Result<Vec<OnlinePoint>> {
    let saved = (nv.tuning_table(), nv.tuning_source());
    nv.set_tuning_table(TuningTable::default(), "empty (nvsh tune --online)");
    let r = (|| -> Result<Vec<OnlinePoint>> {
        let mut ar = nv.allreduce_workspace_online(Some(&nv.team_world()), SLOT_BYTES)?;
        let len = (opts.max_bytes / 4).max(1);
        let input = nv.alloc_zeroed::<f32>(len)?;
        let output = nv.alloc_zeroed::<f32>(len)?;
        for &s in sizes {
            let c = (s / 4).max(1);
            ar.run(
                input.view(0..c)?,
                output.view(0..c)?,
                ReduceOp::Sum,
                AllreduceAlgo::Auto,
                nv.stream(),
            )?;
        }
        ar.sync(nv.stream())?;
        Ok(ar
            .online_tunings()
            .iter()
            .map(|t| OnlinePoint {
                bytes: t.bytes,
                choice: t.choice.name().into(),
                ms: t.wall.as_secs_f64() * 1e3,
            })
            .collect())
    })();
    nv.set_tuning_table(saved.0, &saved.1);
    r
}

/// The report as a table, per collective and dtype: size, choice, the tuning's times, the
/// re-bench's best and the ratio.
pub fn render(r: &TuneReport) -> String {
    let mut out = String::new();
    let fp = &r.fingerprint;
    out.push_str(&format!(
        "# nvsh tune: {}\n# {} warmup + {} timed runs per candidate; sweep {:.1} s, re-bench \
         {:.1} s\n",
        fp.describe(),
        r.warmup,
        r.runs,
        r.sweep_s,
        r.rebench_s
    ));
    let mut last = (String::new(), String::new());
    for p in &r.points {
        if (p.collective.clone(), p.dtype.clone()) != last {
            last = (p.collective.clone(), p.dtype.clone());
            out.push_str(&format!(
                "\n{} {} ({}):\n{:>10}  {:<10} {:>10}  {:<24} {:>7}  {}\n",
                p.collective,
                p.dtype,
                p.dtype_class,
                "size",
                "choice",
                "tuned us",
                "re-bench best",
                "ratio",
                "all candidates (us)"
            ));
        }
        let best = p
            .rebench_best()
            .map_or("n/a".to_string(), |b| format!("{} {:.2} us", b.name, b.us));
        let all = p
            .tuned
            .iter()
            .map(|c| format!("{} {:.2}", c.name, c.us))
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "{:>10}  {:<10} {:>10.2}  {:<24} {:>7}  {}\n",
            size_label(p.bytes),
            p.choice,
            TunePoint::time(&p.tuned, &p.choice).unwrap_or(f64::NAN),
            best,
            p.ratio().map_or("n/a".into(), |x| format!("{x:.3}")),
            all
        ));
    }
    let within = r
        .points
        .iter()
        .filter(|p| p.ratio().is_some_and(|x| x <= 1.03))
        .count();
    out.push_str(&format!(
        "\n{within} of {} points: the tuned choice within 3% of the re-bench's best",
        r.points.len()
    ));
    match r.worst() {
        Some((x, p)) => out.push_str(&format!(
            "; worst {x:.3} ({} {} {})\n",
            p.collective,
            p.dtype,
            size_label(p.bytes)
        )),
        None => out.push('\n'),
    }
    if let Some(ms) = r.online_median_ms() {
        let max = r.online.iter().map(|p| p.ms).fold(0.0, f64::max);
        out.push_str(&format!(
            "online tuning (allreduce f32, PE 0's wall time): median {ms:.2} ms per bucket over \
             {} buckets, most {max:.2} ms\n",
            r.online.len()
        ));
        for p in &r.online {
            out.push_str(&format!(
                "  {:>10}  {:<10} {:.2} ms\n",
                size_label(p.bytes),
                p.choice,
                p.ms
            ));
        }
    }
    out
}

/// The report as JSON.
pub fn render_json(r: &TuneReport) -> String {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "within_3_percent".into(),
            r.points
                .iter()
                .filter(|p| p.ratio().is_some_and(|x| x <= 1.03))
                .count()
                .into(),
        );
        o.insert("worst_ratio".into(), r.worst().map(|(x, _)| x).into());
        o.insert("online_median_ms".into(), r.online_median_ms().into());
    }
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

/// The chart: a panel per collective and dtype, each candidate's tuning time against message
/// size, and the re-bench time of the tuned choice dashed.
pub fn figure(r: &TuneReport) -> nvsh_plot::Figure {
    use crate::bench::plot::{log_axis, size_axis, PANEL_SIZE};
    use nvsh_plot::{Corner, Figure, Panel, Series, Stroke};
    let mut keys: Vec<(String, String)> = Vec::new();
    for p in &r.points {
        let k = (p.collective.clone(), p.dtype.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut panels = Vec::new();
    for (coll, dtype) in keys {
        let pts: Vec<&TunePoint> = r
            .points
            .iter()
            .filter(|p| p.collective == coll && p.dtype == dtype)
            .collect();
        let names: Vec<String> = pts
            .first()
            .map(|p| p.tuned.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default();
        let mut series: Vec<Series> = names
            .iter()
            .enumerate()
            .map(|(i, name)| Series {
                label: name.clone(),
                points: pts
                    .iter()
                    .filter_map(|p| TunePoint::time(&p.tuned, name).map(|us| (p.bytes as f64, us)))
                    .collect(),
                stroke: Stroke::Solid,
                color: i,
                markers: true,
            })
            .collect();
        series.push(Series {
            label: "tuned (re-bench)".into(),
            points: pts
                .iter()
                .filter_map(|p| {
                    TunePoint::time(&p.rebench, &p.choice).map(|us| (p.bytes as f64, us))
                })
                .collect(),
            stroke: Stroke::Dashed,
            color: names.len(),
            markers: false,
        });
        panels.push(Panel {
            title: format!("{coll} {dtype}: time per call"),
            x: size_axis(),
            y: log_axis("time (us)"),
            series,
            legend: Corner::UpperLeft,
            key: Vec::new(),
        });
    }
    Figure {
        title: format!(
            "nvsh tune, {} PE(s), {}, {}",
            r.n_pes, r.fingerprint.gpu, r.date
        ),
        panels,
        columns: 2,
        panel_size: PANEL_SIZE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(coll: &str, bytes: usize, choice: &str, rebench: &[(&str, f64)]) -> TunePoint {
        let list = |l: &[(&str, f64)]| {
            l.iter()
                .map(|&(n, us)| CandidateUs { name: n.into(), us })
                .collect()
        };
        TunePoint {
            collective: coll.into(),
            dtype: "f32".into(),
            dtype_class: "32-bit".into(),
            bytes,
            key_bytes: bytes,
            choice: choice.into(),
            tuned: list(rebench),
            rebench: list(rebench),
        }
    }

    #[test]
    fn the_swept_rows_are_allreduce_and_those_that_choose_a_protocol() {
        // From the table, not a list written here: the swept rows in its order, allreduce
        // among them, none an exchange or the barrier (they choose per pair, or nothing);
        // `--collectives` takes their names, which read back.
        let swept = tuned();
        let in_order: Vec<Collective> = COLLECTIVES
            .iter()
            .map(|r| r.collective)
            .filter(|c| swept.contains(c))
            .collect();
        assert_eq!(swept, in_order);
        assert!(swept.contains(&Collective::Allreduce));
        for c in &swept {
            let r = c.row();
            assert!(!matches!(
                r.scratch,
                ScratchKind::Exchange | ScratchKind::None
            ));
            assert_eq!(Collective::from_name(r.name), Some(*c));
        }
        assert!(COLLECTIVES
            .iter()
            .filter(|r| !swept.contains(&r.collective))
            .all(|r| matches!(r.scratch, ScratchKind::Exchange | ScratchKind::None)));
        assert_eq!(TuneOptions::default().collectives, tuned());
        assert!(is_allreduce(Collective::Allreduce) && !is_allreduce(Collective::Reduce));
        // Every family candidate's name reads back as the protocol it sets.
        for p in FamilyProtocol::ALL {
            assert_eq!(FamilyProtocol::parse(protocol_names(&[p])[0]).unwrap(), p);
        }
    }

    #[test]
    fn the_lines_where_the_block_fits_them_and_the_pull_at_two_pes() {
        use FamilyProtocol::{Direct, LowLatency, Pull, Put, Split};
        let max = 256 << 10;
        let rooted = FamilyProtocol::offered(nvshmem::Protocols::LINES_SPLIT_PULL);
        assert_eq!(
            protocols_at(&rooted, max, max, 2),
            [Direct, Put, LowLatency, Split, Pull]
        );
        assert_eq!(
            protocols_at(&rooted, max + 1, max, 2),
            [Direct, Put, Split, Pull]
        );
        assert_eq!(
            protocols_at(&rooted, max + 1, max, 3),
            [Direct, Put, Split],
            "the pull is timed at 2 PEs only"
        );
        let lines = FamilyProtocol::offered(nvshmem::Protocols::LINES);
        assert_eq!(protocols_at(&lines, 4096, 0, 2), [Direct, Put], "lines off");
        assert!(protocols_at(&[], 4096, max, 2).is_empty());
    }

    #[test]
    fn per_pe_blocks_round_down_and_repeats_are_left_out() {
        let sizes = size_steps(4 << 10, 64 << 10, 2);
        let p = plans(Collective::Allgather, &sizes, 4, 3);
        // 4K over 3 PEs: 1365 bytes, 341 f32, rounded down to 340 (16-byte blocks).
        assert_eq!(p[0].count, 340);
        assert_eq!(p[0].bytes, 340 * 3 * 4);
        let p = plans(Collective::Allreduce, &sizes, 4, 3);
        assert_eq!(
            p.iter().map(|p| p.count).collect::<Vec<_>>(),
            [1024, 2048, 4096, 8192, 16384]
        );
        let tiny = plans(Collective::Alltoall, &[16, 32, 48], 8, 4);
        assert!(tiny.is_empty(), "{tiny:?}");
        assert!(dtypes(Collective::Reduce).iter().all(|d| d.reducible()));
        assert!(dtypes(Collective::Broadcast).contains(&BenchDtype::U8));
    }

    #[test]
    fn ratios_and_the_table_follow_the_points() {
        let pts = vec![
            point(
                "allreduce",
                4096,
                "oneshot",
                &[("oneshot", 5.0), ("rd", 6.0)],
            ),
            point(
                "allreduce",
                8192,
                "oneshot",
                &[("oneshot", 5.2), ("rd", 5.0)],
            ),
            point(
                "allreduce",
                1 << 20,
                "rd",
                &[("oneshot", 50.0), ("rd", 20.0)],
            ),
        ];
        assert_eq!(pts[0].ratio(), Some(1.0));
        assert!((pts[1].ratio().unwrap() - 1.04).abs() < 1e-9);
        let table = table_of(&pts);
        assert_eq!(table.lookup("allreduce", 100, 4), Some("oneshot"));
        assert_eq!(table.lookup("allreduce", 8192, 4), Some("oneshot"));
        assert_eq!(table.lookup("allreduce", 8193, 4), Some("rd"));
        assert_eq!(table.lookup("allreduce", 1 << 30, 4), Some("rd"));
        let report = TuneReport {
            fingerprint: Fingerprint {
                gpu: "G".into(),
                gpus: 1,
                link: "same-gpu".into(),
                p2p_rank: -1,
                pes: 2,
                nvshmem: "3".into(),
                runtime: "0".into(),
            },
            n_pes: 2,
            date: "d".into(),
            warmup: 1,
            runs: 1,
            points: pts,
            table,
            sweep_s: 1.0,
            rebench_s: 1.0,
            online: vec![
                OnlinePoint {
                    bytes: 4096,
                    choice: "oneshot".into(),
                    ms: 1.0,
                },
                OnlinePoint {
                    bytes: 8192,
                    choice: "oneshot".into(),
                    ms: 3.0,
                },
                OnlinePoint {
                    bytes: 16384,
                    choice: "oneshot".into(),
                    ms: 2.0,
                },
            ],
        };
        assert_eq!(report.online_median_ms(), Some(2.0));
        let text = render(&report);
        assert!(text.contains("2 of 3 points"), "{text}");
        assert!(text.contains("worst 1.040"), "{text}");
        assert!(text.contains("median 2.00 ms"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&render_json(&report)).unwrap();
        assert_eq!(json["within_3_percent"], 2);
        assert_eq!(json["points"][2]["choice"], "rd");
        assert_eq!(figure(&report).panels.len(), 1);
        assert_eq!(figure(&report).panels[0].series.len(), 3);
    }
}
