//! Allreduce cost probe behind `nvsh bench probe`: splits the time of our small allreduce (the
//! low-latency one-shot, device/coll/oneshot_ll.cu) into rungs that each add one part of it, all
//! launched as the one-shot is (its grid and threads, programmatic dependent launch):
//!
//! - a. `empty`: an empty kernel, only the wait for the previous kernel: the launch floor;
//! - b. `flags`: a. plus the one-shot's state read, its table of peer addresses and one round of
//!   the low-latency protocol without data: every PE stores one 16-byte line with the step's flag
//!   into its slot on every other PE and polls its own slots until every peer's line is there;
//! - c. `lines`: b. with the message as lines (8 payload bytes each) read from an input buffer,
//!   each received line checked, no reduction;
//! - d. `oneshot`: the library's one-shot itself (`Allreduce::run`, `AllreduceAlgo::OneShot`, f32
//!   sum), through the allreduce bench, which checks every timed call against the CPU.
//!
//! Each is timed back to back and after the collective benches' compute kernel (a memset), with
//! the harness's groups ([`Harness::group_size`], [`Harness::time_group`]); the differences
//! between rungs are the launch floor, the flag round trip, the data and the reduction with the
//! rest (the library's host path, its waiter and its output stores).
//!
//! Checking: the kernels of b. and c. (device/bench/probe.cu) compare every line they receive with
//! what its sender must have sent and count the wrong ones; a wait that times out is counted and
//! ends every later launch at once; each complete launch advances a step count. So after each
//! rung every PE's counts must be 0 wrong, 0 timed out, and as many steps as launches: a rung
//! whose data did not arrive cannot report a time without a failure beside it.

use crate::bench::allreduce::{self, AllreduceBenchOptions, BenchDtype, Candidate};
use crate::bench::harness::{
    after_compute_us, gpu_name_on_pe0, GroupTime, Harness, Outcome, COMPUTE_BYTES,
};
use crate::bench::median;
use crate::bench::render::{rounded, BENCH_SCHEMA};
use crate::error::{ToolError, ToolResult};
use nvshmem::result::cuda_check;
use nvshmem::sys;
use nvshmem::tools::low_latency_shape;
use nvshmem::tools::raw_stream;
use nvshmem::tools::size_label;
use nvshmem::LaunchShape;
use nvshmem::Nvshmem;
use nvshmem::ReduceOp;
use nvshmem::SymmetricBuffer;
use nvshmem::{Error, Result};
use serde_json::{json, Value};
use std::mem::{offset_of, size_of};

/// How long a probe kernel waits for a peer's line before it counts a timeout.
const TIMEOUT_NS: u64 = 10_000_000_000;

/// What to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Message size, bytes: a multiple of 8 (f32 elements in lines of 8 bytes).
    pub bytes: usize,
    /// Timed groups per rung and timing (the median is reported).
    pub reps: usize,
    /// Untimed calls first (they also size the groups).
    pub warmup: usize,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            bytes: 4 << 10,
            reps: 20,
            warmup: 3,
        }
    }
}

/// The rungs, in the order they add to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    Empty,
    Flags,
    Lines,
    OneShot,
}

impl Rung {
    pub const ALL: [Rung; 4] = [Rung::Empty, Rung::Flags, Rung::Lines, Rung::OneShot];

    pub fn name(self) -> &'static str {
        match self {
            Rung::Empty => "empty",
            Rung::Flags => "flags",
            Rung::Lines => "lines",
            Rung::OneShot => "oneshot",
        }
    }

    /// Its letter in the list and in the table.
    pub fn letter(self) -> char {
        match self {
            Rung::Empty => 'a',
            Rung::Flags => 'b',
            Rung::Lines => 'c',
            Rung::OneShot => 'd',
        }
    }

    pub fn what(self) -> &'static str {
        match self {
            Rung::Empty => "empty kernel, the one-shot's launch",
            Rung::Flags => "a + state, peer table, one flagged line to and from each peer",
            Rung::Lines => "b + the message as lines, checked, no reduction",
            Rung::OneShot => "the library's one-shot, f32 sum, checked against the CPU",
        }
    }

    /// What the time it adds to the rung before it (to nothing, for the first) is.
    pub fn adds(self) -> &'static str {
        match self {
            Rung::Empty => "launch floor",
            Rung::Flags => "flag round trip",
            Rung::Lines => "data",
            Rung::OneShot => "reduction and the rest",
        }
    }

    /// The rung before it, which it adds to.
    pub fn before(self) -> Option<Rung> {
        match self {
            Rung::Empty => None,
            Rung::Flags => Some(Rung::Empty),
            Rung::Lines => Some(Rung::Flags),
            Rung::OneShot => Some(Rung::Lines),
        }
    }
}

/// One rung, timed and checked (all counts summed over PEs).
#[derive(Debug, Clone, PartialEq)]
pub struct RungResult {
    pub rung: Rung,
    /// Calls per timed group.
    pub iters: usize,
    /// Median time of one call back to back, microseconds.
    pub us: f64,
    /// Median time of one call after the compute kernel ((kernel + call) - kernel alone).
    pub us_after_compute: f64,
    /// b, c: lines received and compared; d: timed calls compared with the CPU reference.
    pub checked: u64,
    /// Lines (b, c) or calls (d) found wrong.
    pub wrong: u64,
    /// Lines whose flag never came (b, c).
    pub timeouts: u64,
    /// Launches that did not complete their round (b, c): launches less steps counted.
    pub missing: u64,
    /// Where it went wrong, or why the rung did not run.
    pub detail: Option<String>,
    /// False when the rung could not run (its times are then meaningless).
    pub ran: bool,
}

impl RungResult {
    /// Whether it ran and every check passed.
    pub fn ok(&self) -> bool {
        self.ran && self.wrong == 0 && self.timeouts == 0 && self.missing == 0
    }
}

/// The time one rung adds to the one before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    pub rung: Rung,
    pub us: f64,
    pub us_after_compute: f64,
}

/// PE 0's results.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeReport {
    pub n_pes: i32,
    pub gpu: String,
    /// When the probe ran: the UTC date, YYYY-MM-DD.
    pub date: String,
    pub bytes: usize,
    /// The launch of every rung: the one-shot's at this size.
    pub shape: LaunchShape,
    pub reps: usize,
    pub warmup: usize,
    /// The library's allreduce settings ([`nvshmem::Allreduce::settings`]), where known.
    pub settings: Option<String>,
    pub rungs: Vec<RungResult>,
}

impl ProbeReport {
    /// What each rung adds to the one before it, for the rungs that ran and passed with their
    /// predecessor: a rung beside a failed one splits nothing.
    pub fn splits(&self) -> Vec<Split> {
        let find = |r: Rung| self.rungs.iter().find(|x| x.rung == r && x.ok());
        self.rungs
            .iter()
            .filter(|x| x.ok())
            .filter_map(|x| match x.rung.before() {
                None => Some(Split {
                    rung: x.rung,
                    us: x.us,
                    us_after_compute: x.us_after_compute,
                }),
                Some(b) => find(b).map(|b| Split {
                    rung: x.rung,
                    us: x.us - b.us,
                    us_after_compute: x.us_after_compute - b.us_after_compute,
                }),
            })
            .collect()
    }

    /// Ok when every rung ran and passed; else the rungs that did not.
    pub fn verify(&self) -> ToolResult<()> {
        let failed: Vec<String> = self
            .rungs
            .iter()
            .filter(|r| !r.ok())
            .map(|r| format!("{} {}: {}", r.rung.letter(), r.rung.name(), problem(r)))
            .collect();
        if failed.is_empty() {
            return Ok(());
        }
        Err(ToolError::DataMismatch {
            what: format!("allreduce probe: {}", failed.join("; ")),
        })
    }
}

/// A failed rung's problem in words.
fn problem(r: &RungResult) -> String {
    let mut parts = Vec::new();
    if !r.ran {
        parts.push("did not run".to_string());
    }
    for (n, what) in [
        (r.wrong, "wrong"),
        (r.timeouts, "timed out"),
        (r.missing, "launches incomplete"),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    if let Some(d) = &r.detail {
        parts.push(d.clone());
    }
    parts.join(", ")
}

/// Word `j` (32 bits) of PE `pe`'s payload, as device/bench/probe.cu's probe_word computes it
/// (NVSHMEMRS_PROBE_WORD_A and _B of device/bench/probe.h).
pub fn probe_word(pe: i32, j: usize) -> u32 {
    ((pe + 1) as u32).wrapping_mul(sys::NVSHMEMRS_PROBE_WORD_A)
        ^ (j as u32).wrapping_mul(sys::NVSHMEMRS_PROBE_WORD_B)
}

/// One PE's counters of the line rungs (device/bench/probe.h nvshmemrs_probe_state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineCounters {
    pub steps: u64,
    pub wrong: u64,
    pub timeouts: u64,
}

impl LineCounters {
    /// From the state's words as the device holds them.
    fn from_words(words: &[u64]) -> LineCounters {
        let at = |offset: usize| words.get(offset / 8).copied().unwrap_or(0);
        LineCounters {
            steps: at(offset_of!(sys::nvshmemrs_probe_state, step)
                + offset_of!(sys::nvshmemrs_allreduce_state, steps)),
            wrong: at(offset_of!(sys::nvshmemrs_probe_state, wrong)),
            timeouts: at(offset_of!(sys::nvshmemrs_probe_state, timeouts)),
        }
    }

    /// What a rung of `launches` launches did between `before` and `self`: (wrong, timed out,
    /// launches that did not complete).
    pub fn since(&self, before: &LineCounters, launches: u64) -> (u64, u64, u64) {
        let steps = self.steps.saturating_sub(before.steps);
        (
            self.wrong.saturating_sub(before.wrong),
            self.timeouts.saturating_sub(before.timeouts),
            launches.saturating_sub(steps),
        )
    }
}

/// Times of one rung on this PE (the medians of PE 0 are reported).
struct RungTime {
    iters: usize,
    us: f64,
    us_after_compute: f64,
    /// Calls made, warm-up included.
    launches: u64,
}

/// Times `call` as the harness times a candidate: warm-up calls size the groups, then `reps`
/// groups back to back and `reps` after compute. Collective.
fn time_rung(h: &Harness<'_>, call: &mut dyn FnMut() -> Result<()>) -> Result<RungTime> {
    let mut launches = 0u64;
    let mut counted = |_k: usize| {
        launches += 1;
        call()
    };
    let group = h.group_size(&mut counted)?;
    let (mut us, mut with_compute, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    for after in [false, true] {
        for _ in 0..h.reps {
            match h.time_group(group, after, &mut counted)? {
                GroupTime {
                    us: t,
                    compute_us: Some(c),
                    ..
                } => {
                    with_compute.push(t);
                    alone.push(c);
                }
                GroupTime { us: t, .. } => us.push(t),
            }
        }
    }
    Ok(RungTime {
        iters: group,
        us: median(&us),
        us_after_compute: after_compute_us(&with_compute, &alone),
        launches,
    })
}

/// What the line rungs share: the slots, the input and the state.
struct LineRungs<'nv> {
    state: SymmetricBuffer<'nv, u64>,
    slots: SymmetricBuffer<'nv, u8>,
    slot_bytes: usize,
    input: SymmetricBuffer<'nv, u32>,
}

impl LineRungs<'_> {
    fn counters(&self) -> Result<LineCounters> {
        Ok(LineCounters::from_words(&self.state.to_vec()?))
    }

    /// One launch of the line kernel: `bytes` 0 for flags only.
    fn launch(&self, nv: &Nvshmem, bytes: usize, shape: LaunchShape) -> Result<()> {
        // SAFETY: the state, slots (2 x n_pes x slot_bytes) and input (bytes) are this probe's
        // symmetric buffers, allocated on every PE; the kernel checks the sizes it is given.
        let code = unsafe {
            sys::nvshmemrs_probe_lines(
                self.state.as_device_ptr().cast(),
                self.slots.as_device_ptr().cast(),
                self.slot_bytes,
                self.input.as_device_ptr().cast(),
                bytes,
                nv.my_pe(),
                nv.n_pes(),
                TIMEOUT_NS,
                shape.blocks as i32,
                shape.threads as i32,
                raw_stream(nv.stream()),
            )
        };
        cuda_check(code, "probe line kernel launch")
    }
}

/// Runs the probe on every PE (needs at least 2, each peer mapped). Returns the report on PE 0,
/// None on the others. Failed checks are in the report: call [`ProbeReport::verify`] after
/// printing it.
pub fn run(nv: &Nvshmem, opts: &ProbeOptions) -> ToolResult<Option<ProbeReport>> {
    let n = nv.n_pes();
    if n < 2 {
        return Err(ToolError::NeedsPes {
            what: "the allreduce probe",
            needed: 2,
            have: n,
            hint: "run it as `nvsh run -n 2 -- nvsh bench probe`",
        });
    }
    let refuse = |message: String| Error::Io {
        what: "allreduce probe".into(),
        message,
    };
    if n as u32 > sys::NVSHMEMRS_PROBE_MAX_PES {
        return Err(refuse(format!(
            "takes at most {} PEs, this job has {n}",
            sys::NVSHMEMRS_PROBE_MAX_PES
        ))
        .into());
    }
    if opts.bytes == 0 || opts.bytes % 8 != 0 {
        return Err(refuse(format!(
            "the size must be a positive multiple of 8 bytes, not {}",
            opts.bytes
        ))
        .into());
    }
    let h = Harness::new(nv, opts.reps, opts.warmup)?;
    let shape = low_latency_shape(opts.bytes);
    let lines = opts.bytes / 8;
    let slot_bytes = 16 * lines;
    let words = size_of::<sys::nvshmemrs_probe_state>().div_ceil(8);
    let rungs = LineRungs {
        state: nv.alloc_zeroed::<u64>(words)?,
        slots: nv.alloc_zeroed::<u8>(2 * n as usize * slot_bytes)?,
        slot_bytes,
        input: nv.alloc::<u32>(opts.bytes / 4)?,
    };
    // The one-shot's low-latency path needs every peer mapped; so do these kernels.
    let mapped =
        (0..n)
            .filter(|&pe| pe != nv.my_pe())
            .try_for_each(|pe| match rungs.slots.peer_ptr(pe) {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err(refuse(format!(
                    "PE {} cannot map PE {pe}'s memory (nvshmem_ptr): the probe, like the \
                 low-latency one-shot, needs every peer on NVLink or PCIe",
                    nv.my_pe()
                ))),
                Err(e) => Err(e),
            });
    if let Err(why) = h.agree("peer mappings", mapped)? {
        return Err(refuse(why).into());
    }
    let me = nv.my_pe();
    let payload: Vec<u32> = (0..opts.bytes / 4).map(|j| probe_word(me, j)).collect();
    rungs.input.copy_from_host(&payload)?;
    // A synchronous copy from pageable memory may return before the data lands.
    nv.context().synchronize()?;
    nv.barrier_all()?;

    let mut results = Vec::new();
    let t = time_rung(&h, &mut || {
        // SAFETY: an empty kernel; the stream is the runtime's.
        let code = unsafe {
            sys::nvshmemrs_probe_empty(
                shape.blocks as i32,
                shape.threads as i32,
                raw_stream(nv.stream()),
            )
        };
        cuda_check(code, "probe empty kernel launch")
    })?;
    results.push(RungResult {
        rung: Rung::Empty,
        iters: t.iters,
        us: t.us,
        us_after_compute: t.us_after_compute,
        checked: 0,
        wrong: 0,
        timeouts: 0,
        missing: 0,
        detail: None,
        ran: true,
    });
    for (rung, bytes, lines_per_peer) in [(Rung::Flags, 0, 1), (Rung::Lines, opts.bytes, lines)] {
        let before = rungs.counters()?;
        let t = time_rung(&h, &mut || rungs.launch(nv, bytes, shape))?;
        nv.context().synchronize()?;
        let (wrong, timeouts, missing) = rungs.counters()?.since(&before, t.launches);
        let (totals, detail) = gather_counts(&h, [wrong, timeouts, missing])?;
        let complete = t.launches - missing;
        results.push(RungResult {
            rung,
            iters: t.iters,
            us: t.us,
            us_after_compute: t.us_after_compute,
            // Lines each PE received in the launches that completed, summed over PEs (PE 0's
            // launch count is every PE's).
            checked: complete * (n as u64 - 1) * lines_per_peer as u64 * n as u64,
            wrong: totals[0],
            timeouts: totals[1],
            missing: totals[2],
            detail,
            ran: true,
        });
    }
    let (oneshot, settings) = oneshot_rung(nv, opts)?;
    results.extend(oneshot);
    let gpu = gpu_name_on_pe0(nv);
    nv.barrier_all()?;
    if me != 0 {
        return Ok(None);
    }
    Ok(Some(ProbeReport {
        n_pes: n,
        gpu,
        date: nvsh_plot::today(),
        bytes: opts.bytes,
        shape,
        reps: opts.reps.max(1),
        warmup: opts.warmup.max(1),
        settings,
        rungs: results,
    }))
}

/// Every PE's (wrong, timed out, incomplete) counts: the totals and which PEs had any.
fn gather_counts(h: &Harness<'_>, mine: [u64; 3]) -> Result<([u64; 3], Option<String>)> {
    let bytes: Vec<u8> = mine.iter().flat_map(|c| c.to_le_bytes()).collect();
    let all = h.exchange.all_gather(&bytes)?;
    let mut totals = [0u64; 3];
    let mut details = Vec::new();
    for (pe, b) in all.iter().enumerate() {
        let c: Vec<u64> = b
            .chunks_exact(8)
            .take(3)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
            .collect();
        for (t, v) in totals.iter_mut().zip(&c) {
            *t += v;
        }
        if c.iter().any(|&v| v > 0) {
            details.push(format!(
                "PE {pe}: {} wrong, {} timed out, {} incomplete",
                c[0], c[1], c[2]
            ));
        }
    }
    Ok((totals, (!details.is_empty()).then(|| details.join("; "))))
}

/// Rung d through the allreduce bench (its checked groups, the same compute kernel), with the
/// library's settings; the rung on PE 0 only. Collective.
fn oneshot_rung(nv: &Nvshmem, opts: &ProbeOptions) -> Result<(Option<RungResult>, Option<String>)> {
    let bench = AllreduceBenchOptions {
        min_bytes: opts.bytes,
        max_bytes: opts.bytes,
        dtypes: vec![BenchDtype::F32],
        op: ReduceOp::Sum,
        reps: opts.reps,
        warmup: opts.warmup,
        candidates: vec![Candidate::OneShot],
        optional: vec![],
        ..AllreduceBenchOptions::default()
    };
    let Some(report) = allreduce::run(nv, &bench)? else {
        return Ok((None, None));
    };
    let settings = report
        .json_fields
        .iter()
        .find(|(k, _)| *k == "settings")
        .and_then(|(_, v)| v.as_str().map(str::to_string));
    let outcome = report.rows.first().and_then(|r| r.results.first());
    let rung = match outcome {
        Some((_, Outcome::Timed(t))) => RungResult {
            rung: Rung::OneShot,
            iters: t.iters,
            us: t.us,
            us_after_compute: t.us_after_compute,
            checked: t.checked * t.checked_pes as u64,
            wrong: t.wrong,
            timeouts: 0,
            missing: 0,
            detail: t.wrong_detail.clone(),
            ran: true,
        },
        Some((_, Outcome::Unavailable(why))) => not_run(Rung::OneShot, why.clone()),
        None => not_run(Rung::OneShot, "the allreduce bench timed nothing".into()),
    };
    Ok((Some(rung), settings))
}

fn not_run(rung: Rung, why: String) -> RungResult {
    RungResult {
        rung,
        iters: 0,
        us: f64::NAN,
        us_after_compute: f64::NAN,
        checked: 0,
        wrong: 0,
        timeouts: 0,
        missing: 0,
        detail: Some(why),
        ran: false,
    }
}

/// The report as a table: the rungs, then what each adds to the one before it.
pub fn render_table(r: &ProbeReport) -> String {
    let mut s = format!(
        "# allreduce cost probe: {}, {} PEs, {}; every rung launched as the low-latency \
         one-shot at this size: {} with programmatic dependent launch\n",
        size_label(r.bytes),
        r.n_pes,
        r.gpu,
        r.shape
    );
    s += &format!(
        "# median of {} groups per rung and timing ({} warm-up calls size the groups); time: \
         back to back; t|compute: each call after a {} memset, (memset + call) - (memset alone)\n",
        r.reps,
        r.warmup,
        size_label(COMPUTE_BYTES)
    );
    if let Some(settings) = &r.settings {
        s += &format!("# ours: {settings}\n");
    }
    s += "# checked: b, c every line received (over all PEs), d every timed call against the \
          CPU (over all PEs); bad: wrong + timed out + incomplete launches\n";
    s += &format!(
        "{:<10} {:>9} {:>10} {:>6} {:>10} {:>5}  {}\n",
        "rung", "time us", "t|compute", "iters", "checked", "bad", "what"
    );
    for x in &r.rungs {
        let bad = x.wrong + x.timeouts + x.missing;
        let (t, c) = if x.ran {
            (format!("{:.2}", x.us), format!("{:.2}", x.us_after_compute))
        } else {
            ("n/a".to_string(), "n/a".to_string())
        };
        s += &format!(
            "{:<10} {:>9} {:>10} {:>6} {:>10} {:>5}  {}\n",
            format!("{} {}", x.rung.letter(), x.rung.name()),
            t,
            c,
            x.iters,
            x.checked,
            bad,
            x.rung.what()
        );
    }
    s += &format!(
        "{:<34} {:>9} {:>10}\n",
        "# what each rung adds", "time us", "t|compute"
    );
    for sp in r.splits() {
        let label = match sp.rung.before() {
            None => format!("{} ({})", sp.rung.adds(), sp.rung.letter()),
            Some(b) => format!("{} ({} - {})", sp.rung.adds(), sp.rung.letter(), b.letter()),
        };
        s += &format!(
            "{:<34} {:>9.2} {:>10.2}\n",
            label, sp.us, sp.us_after_compute
        );
    }
    for x in r.rungs.iter().filter(|x| !x.ok()) {
        s += &format!(
            "# FAILED {} {}: {}\n",
            x.rung.letter(),
            x.rung.name(),
            problem(x)
        );
    }
    s
}

/// The report as JSON.
pub fn render_json(r: &ProbeReport) -> String {
    let time = |ran: bool, us: f64| if ran { rounded(us, 3) } else { Value::Null };
    let rungs: Vec<Value> = r
        .rungs
        .iter()
        .map(|x| {
            json!({
                "rung": x.rung.name(),
                "letter": x.rung.letter().to_string(),
                "what": x.rung.what(),
                "ran": x.ran,
                "iters": x.iters,
                "us": time(x.ran, x.us),
                "us_after_compute": time(x.ran, x.us_after_compute),
                "checked": x.checked,
                "wrong": x.wrong,
                "timeouts": x.timeouts,
                "missing": x.missing,
                "detail": x.detail,
            })
        })
        .collect();
    let splits: Vec<Value> = r
        .splits()
        .iter()
        .map(|sp| {
            json!({
                "adds": sp.rung.adds(),
                "rung": sp.rung.name(),
                "from": sp.rung.before().map(Rung::name),
                "us": rounded(sp.us, 3),
                "us_after_compute": rounded(sp.us_after_compute, 3),
            })
        })
        .collect();
    json!({
        "schema": BENCH_SCHEMA,
        "bench": "probe",
        "n_pes": r.n_pes,
        "gpu": r.gpu,
        "date": r.date,
        "bytes": r.bytes,
        "blocks": r.shape.blocks,
        "threads": r.shape.threads,
        "reps": r.reps,
        "warmup": r.warmup,
        "compute_bytes": COMPUTE_BYTES,
        "settings": r.settings,
        "ok": r.verify().is_ok(),
        "rungs": rungs,
        "splits": splits,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rung(rung: Rung, us: f64, after: f64) -> RungResult {
        RungResult {
            rung,
            iters: 200,
            us,
            us_after_compute: after,
            checked: 1000,
            wrong: 0,
            timeouts: 0,
            missing: 0,
            detail: None,
            ran: true,
        }
    }

    fn sample() -> ProbeReport {
        ProbeReport {
            n_pes: 4,
            gpu: "NVIDIA H100 80GB HBM3".into(),
            date: "2026-11-27".into(),
            bytes: 4096,
            shape: low_latency_shape(4096),
            reps: 20,
            warmup: 3,
            settings: Some("low-latency one-shot up to 256K".into()),
            rungs: vec![
                rung(Rung::Empty, 2.0, 3.0),
                rung(Rung::Flags, 3.5, 5.0),
                rung(Rung::Lines, 4.0, 5.75),
                rung(Rung::OneShot, 5.25, 6.875),
            ],
        }
    }

    #[test]
    fn splits_are_the_differences_between_rungs() {
        let s = sample().splits();
        let got: Vec<(Rung, f64, f64)> = s
            .iter()
            .map(|x| (x.rung, x.us, x.us_after_compute))
            .collect();
        assert_eq!(
            got,
            vec![
                (Rung::Empty, 2.0, 3.0),
                (Rung::Flags, 1.5, 2.0),
                (Rung::Lines, 0.5, 0.75),
                (Rung::OneShot, 1.25, 1.125),
            ]
        );
        // The parts add up to the one-shot's time.
        let sum: f64 = s.iter().map(|x| x.us_after_compute).sum();
        assert_eq!(sum, 6.875);
    }

    #[test]
    fn a_failed_rung_splits_nothing_and_fails_verify() {
        let mut r = sample();
        assert!(r.verify().is_ok());
        r.rungs[2].wrong = 3;
        r.rungs[2].detail = Some("PE 1: 3 wrong, 0 timed out, 0 incomplete".into());
        // Neither what c adds to b nor what d adds to c.
        let split: Vec<Rung> = r.splits().iter().map(|x| x.rung).collect();
        assert_eq!(split, vec![Rung::Empty, Rung::Flags]);
        let err = r.verify().unwrap_err().to_string();
        assert!(err.contains("c lines: 3 wrong, PE 1"), "{err}");
        for (field, words) in [
            (1, "timed out"),
            (2, "launches incomplete"),
            (3, "did not run"),
        ] {
            let mut r = sample();
            match field {
                1 => r.rungs[1].timeouts = 1,
                2 => r.rungs[1].missing = 2,
                _ => r.rungs[1] = not_run(Rung::Flags, "no".into()),
            }
            let err = r.verify().unwrap_err().to_string();
            assert!(err.contains(words), "{err}");
            assert!(render_table(&r).contains("# FAILED b flags"));
        }
    }

    #[test]
    fn table_has_every_rung_and_split() {
        let t = render_table(&sample());
        for needle in [
            "4K, 4 PEs, NVIDIA H100 80GB HBM3",
            "1x512 with programmatic dependent launch",
            "64M memset",
            "ours: low-latency one-shot up to 256K",
            "a empty",
            "d oneshot",
            "launch floor (a)",
            "flag round trip (b - a)",
            "data (c - b)",
            "reduction and the rest (d - c)",
            "6.88",
            "1.12",
        ] {
            assert!(t.contains(needle), "{needle}\n{t}");
        }
        assert!(!t.contains("FAILED"), "{t}");
    }

    #[test]
    fn json_is_well_formed() {
        let mut r = sample();
        r.rungs[3] = not_run(Rung::OneShot, "workspace \"x\"".into());
        let j = render_json(&r);
        let v: Value = serde_json::from_str(&j).expect("valid JSON");
        assert_eq!(v["bench"], "probe");
        assert_eq!(v["blocks"], 1);
        assert_eq!(v["threads"], 512);
        assert_eq!(v["ok"], false);
        assert_eq!(v["rungs"][1]["us_after_compute"], 5.0);
        assert_eq!(v["rungs"][3]["us"], Value::Null);
        assert_eq!(v["rungs"][3]["detail"], "workspace \"x\"");
        assert_eq!(v["splits"].as_array().map(Vec::len), Some(3));
        assert_eq!(v["splits"][1]["from"], "empty");
        assert_eq!(v["splits"][2]["us"], 0.5);
    }

    #[test]
    fn counters_count_what_a_rung_left_wrong_or_undone() {
        let before = LineCounters {
            steps: 10,
            wrong: 1,
            timeouts: 0,
        };
        let after = LineCounters {
            steps: 30,
            wrong: 1,
            timeouts: 0,
        };
        assert_eq!(after.since(&before, 20), (0, 0, 0));
        assert_eq!(after.since(&before, 25), (0, 0, 5));
        let bad = LineCounters {
            steps: 12,
            wrong: 4,
            timeouts: 2,
        };
        assert_eq!(bad.since(&before, 20), (3, 2, 18));
        // The fields are read where the device struct holds them.
        let mut words = vec![0u64; size_of::<sys::nvshmemrs_probe_state>().div_ceil(8)];
        words[offset_of!(sys::nvshmemrs_probe_state, wrong) / 8] = 7;
        words[offset_of!(sys::nvshmemrs_probe_state, timeouts) / 8] = 8;
        words[(offset_of!(sys::nvshmemrs_probe_state, step)
            + offset_of!(sys::nvshmemrs_allreduce_state, steps))
            / 8] = 9;
        assert_eq!(
            LineCounters::from_words(&words),
            LineCounters {
                steps: 9,
                wrong: 7,
                timeouts: 8
            }
        );
    }

    #[test]
    fn payload_words_differ_by_pe_and_position() {
        // The constants are the device's (probe.h); pinned so that a change on one side shows.
        assert_eq!(sys::NVSHMEMRS_PROBE_WORD_A, 0x9E37_79B1);
        assert_eq!(sys::NVSHMEMRS_PROBE_WORD_B, 0x85EB_CA77);
        assert_eq!(probe_word(0, 0), 0x9E37_79B1);
        assert_eq!(
            probe_word(1, 1),
            0x9E37_79B1u32.wrapping_mul(2) ^ 0x85EB_CA77
        );
        let words: std::collections::HashSet<u32> = (0..8)
            .flat_map(|pe| (0..1024).map(move |j| probe_word(pe, j)))
            .collect();
        assert_eq!(words.len(), 8 * 1024);
    }
}
