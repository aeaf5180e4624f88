//! A collective bench's results: per size and dtype, each candidate's times, bandwidths and
//! checks, and the ratio to NCCL's faster path; [`crate::bench::render`] writes them out.

use super::dtype::BenchDtype;
use crate::bench::median;
use crate::error::{ToolError, ToolResult};
use nvshmem::tools::size_label;
use nvshmem::Error;
use nvshmem::ReduceOp;
use serde_json::Value;

/// One timed group ([`Harness::time_group`]), per call, microseconds.
///
/// [`Harness::time_group`]: super::Harness::time_group
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupTime {
    /// The group: of the calls alone, or after compute of the (compute kernel, call) pairs.
    pub us: f64,
    /// After compute: the compute kernels alone.
    pub compute_us: Option<f64>,
    /// Host time to enqueue the group, per call, microseconds: where it reaches `us`, the
    /// calls were bound by the host, not the GPU.
    pub host_us: f64,
}

/// The time of a call after a compute kernel from the groups' per-call times with it and of
/// the compute alone: the difference of their medians (never below 0), microseconds.
pub fn after_compute_us(with_compute: &[f64], compute_alone: &[f64]) -> f64 {
    (median(with_compute) - median(compute_alone)).max(0.0)
}

/// One candidate at one size, timed and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Calls per timed group.
    pub iters: usize,
    /// Median time of one call over the groups, microseconds.
    pub us: f64,
    /// Median time of one call when each call follows a compute kernel on the same stream (as
    /// in a training step, where a collective cannot overlap the previous one's tail): the
    /// group of (kernel, call) pairs less the group of kernels alone, per call, microseconds.
    pub us_after_compute: f64,
    /// Bytes / time, GB/s (1e9 bytes per second).
    pub algbw: f64,
    /// algbw times the collective's bus factor.
    pub busbw: f64,
    /// Median host time to enqueue one call back to back, microseconds ([`GroupTime`]).
    pub host_us: f64,
    /// Timed calls checked on each checking PE.
    pub checked: u64,
    /// PEs that compared their outputs (all but for reduce, whose only defined output is the
    /// root's).
    pub checked_pes: i32,
    /// Outputs found wrong, summed over PEs.
    pub wrong: u64,
    /// Each PE's first wrong output, when there was one.
    pub wrong_detail: Option<String>,
}

impl Timing {
    /// The time of one call on `on`'s timing.
    pub fn us_on(&self, on: RatioOn) -> f64 {
        match on {
            RatioOn::AfterCompute => self.us_after_compute,
            RatioOn::BackToBack => self.us,
        }
    }
}

/// Which of a candidate's two times the ratio to NCCL is taken on (`--ratio-on`); the ratio
/// on the other timing is reported beside it, and both times always are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum RatioOn {
    /// Each call after a compute kernel on the stream (`t|compute`): a training step's case,
    /// where a collective cannot overlap the tail of the one before.
    #[default]
    AfterCompute,
    /// Calls back to back (`time`), where a call may overlap the previous call's tail.
    BackToBack,
}

impl RatioOn {
    /// The flag's value, which is also the JSON's `ratio_on` and the CSV's.
    pub fn name(self) -> &'static str {
        match self {
            RatioOn::AfterCompute => "after-compute",
            RatioOn::BackToBack => "back-to-back",
        }
    }

    /// The timing the ratio is not taken on, reported beside it.
    pub fn other(self) -> RatioOn {
        match self {
            RatioOn::AfterCompute => RatioOn::BackToBack,
            RatioOn::BackToBack => RatioOn::AfterCompute,
        }
    }

    /// In the table's words.
    pub fn words(self) -> &'static str {
        match self {
            RatioOn::AfterCompute => "after compute",
            RatioOn::BackToBack => "back to back",
        }
    }

    /// The candidates' column of this time in the table.
    pub fn time_column(self) -> &'static str {
        match self {
            RatioOn::AfterCompute => "t|compute",
            RatioOn::BackToBack => "time",
        }
    }

    /// The table's heading of the ratio on this timing where it is the second ratio column.
    pub fn second_column(self) -> &'static str {
        match self {
            RatioOn::AfterCompute => "|compute",
            RatioOn::BackToBack => "|b2b",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Timed(Timing),
    /// Not run, and why (the same on every PE).
    Unavailable(String),
}

/// One size and dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// nccl-tests' size: bytes of the larger of a PE's input and output buffers.
    pub bytes: usize,
    /// The collective's count argument (nccl-tests' count column): elements per PE's input for
    /// allreduce, broadcast and reduce, per block for allgather, reduce-scatter and alltoall.
    pub count: usize,
    pub dtype: BenchDtype,
    /// How far a checked output element could be from the host reference and still count as
    /// right: 0 is exact (bit for bit for data movement), more only for float rounding.
    pub tolerance: f64,
    /// By candidate name, in the report's candidate order.
    pub results: Vec<(&'static str, Outcome)>,
    /// The collective's note for this row (allreduce: what auto picked).
    pub note: Option<&'static str>,
}

impl Row {
    pub fn outcome(&self, c: &str) -> Option<&Outcome> {
        self.results.iter().find(|(k, _)| *k == c).map(|(_, o)| o)
    }

    /// The timing of `c` if it ran and every checked output was right.
    pub fn timing(&self, c: &str) -> Option<&Timing> {
        match self.outcome(c) {
            Some(Outcome::Timed(t)) if t.wrong == 0 => Some(t),
            _ => None,
        }
    }

    /// `ours`'s time over `theirs`'s on `on`'s timing, where both ran correctly.
    pub fn ratio(&self, ours: &str, theirs: &str, on: RatioOn) -> Option<f64> {
        Some(time_ratio(
            self.timing(ours)?.us_on(on),
            self.timing(theirs)?.us_on(on),
        ))
    }

    /// The fastest of `baselines` that ran with every output right, by their times on `on`'s
    /// timing: its name and that time. The first listed wins a tie.
    pub fn fastest(&self, baselines: &[&'static str], on: RatioOn) -> Option<(&'static str, f64)> {
        let mut best: Option<(&'static str, f64)> = None;
        for &b in baselines {
            let Some(t) = self.timing(b) else { continue };
            let us = t.us_on(on);
            if !us.is_nan() && best.is_none_or(|(_, u)| us < u) {
                best = Some((b, us));
            }
        }
        best
    }

    /// `ours`'s time over the fastest of `baselines` ([`Row::fastest`]), both on `on`'s
    /// timing, and which baseline that was; None unless ours and one of them ran right.
    pub fn ratio_to_fastest(
        &self,
        ours: &str,
        baselines: &[&'static str],
        on: RatioOn,
    ) -> Option<(f64, &'static str)> {
        let mine = self.timing(ours)?.us_on(on);
        let (b, us) = self.fastest(baselines, on)?;
        Some((time_ratio(mine, us), b))
    }
}

/// NCCL's two paths, the baselines of every collective bench's ratio: its regular kernels on
/// the symmetric buffers, and its symmetric-memory kernels on NCCL's registered buffers. The
/// ratio takes the faster of them at each size.
pub const NCCL_BASELINES: &[&str] = &["nccl", "nccl-sym"];

/// The table's `vs` cell: which baseline the ratio used, and the second ratio (the other
/// timing) when that was another (`nccl|nccl-sym`).
pub fn baseline_cell(first: Option<&str>, second: Option<&str>) -> String {
    match (first, second) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (a, None) => a.unwrap_or("-").to_string(),
        (a, Some(b)) => format!("{}|{b}", a.unwrap_or("-")),
    }
}

/// PE 0's results of one collective bench.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// "allreduce", "broadcast", "reduce-scatter", ...
    pub collective: &'static str,
    pub n_pes: i32,
    pub gpu: String,
    /// When the bench ran: the UTC date, YYYY-MM-DD (the JSON's `date`, the charts' title).
    pub date: String,
    /// The reduction, for reductions.
    pub op: Option<ReduceOp>,
    pub reps: usize,
    pub warmup: usize,
    /// Lines of the collective's own (ours' settings, NCCL's version), printed after "# ".
    pub header: Vec<String>,
    /// Extra top-level JSON fields: name and value.
    pub json_fields: Vec<(&'static str, Value)>,
    pub candidates: Vec<&'static str>,
    /// (ours, baselines) for the ratio columns: ours's time over the fastest baseline that ran
    /// right at each size ([`Row::ratio_to_fastest`]), on the timing the rendering is given
    /// ([`RatioOn`]) and on the other; the column and JSON key are named after the first
    /// baseline ("ours/nccl").
    pub ratio: Option<(&'static str, &'static [&'static str])>,
    /// Candidates in the list only because the default list has them (nccl-sym): one that
    /// could not run is reported, but fails no run ([`Report::verify`]).
    pub optional: Vec<&'static str>,
    /// Heading and JSON key of the row note column (allreduce: "auto=", "auto_algo").
    pub note_column: Option<(&'static str, &'static str)>,
    /// Who compares outputs where not every PE does (reduce: the root), for the table's
    /// description of the check.
    pub checked_by: Option<String>,
    pub rows: Vec<Row>,
}

impl Report {
    /// The ratio's baselines that are among the candidates, in the ratio's order.
    pub fn ratio_baselines(&self) -> Vec<&'static str> {
        self.ratio.map_or(Vec::new(), |(_, bases)| {
            bases
                .iter()
                .copied()
                .filter(|b| self.candidates.contains(b))
                .collect()
        })
    }

    /// Whether the table names the baseline of each ratio (`vs`): where at some size more than
    /// one baseline ran right, so the ratio had a choice.
    pub fn shows_baseline_column(&self) -> bool {
        let Some((_, bases)) = self.ratio else {
            return false;
        };
        self.rows
            .iter()
            .any(|row| bases.iter().filter(|b| row.timing(b).is_some()).count() > 1)
    }

    /// The types that ran, each with its tolerance, in the rows' order: every output of every
    /// timed call of these was checked.
    pub fn checked_dtypes(&self) -> Vec<(BenchDtype, f64)> {
        let mut out: Vec<(BenchDtype, f64)> = Vec::new();
        for row in &self.rows {
            if !out.iter().any(|&(d, _)| d == row.dtype) {
                out.push((row.dtype, row.tolerance));
            }
        }
        out
    }

    /// "candidate dtype size: detail" for each candidate with wrong outputs.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for row in &self.rows {
            for (c, o) in &row.results {
                if let Outcome::Timed(t) = o {
                    if t.wrong > 0 {
                        out.push(format!(
                            "{c} {} {}: {} wrong output(s) of {} calls x {} PEs; {}",
                            row.dtype.name(),
                            size_label(row.bytes),
                            t.wrong,
                            t.checked,
                            t.checked_pes,
                            t.wrong_detail.as_deref().unwrap_or("")
                        ));
                    }
                }
            }
        }
        out
    }

    /// "candidate: why" for each candidate asked for by name that did not run (once per
    /// reason); the [`Report::optional`] ones are left out.
    pub fn not_run(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for row in &self.rows {
            for (c, o) in &row.results {
                if self.optional.contains(c) {
                    continue;
                }
                if let Outcome::Unavailable(why) = o {
                    let line = format!("{c}: {why}");
                    if !out.contains(&line) {
                        out.push(line);
                    }
                }
            }
        }
        out
    }

    /// An error when any output was wrong or any requested candidate could not run.
    pub fn verify(&self) -> ToolResult<()> {
        let failures = self.failures();
        if !failures.is_empty() {
            return Err(ToolError::DataMismatch {
                what: format!(
                    "{} benchmark: {} candidate(s) with wrong results: {}",
                    self.collective,
                    failures.len(),
                    failures.join("; ")
                ),
            });
        }
        let not_run = self.not_run();
        if !not_run.is_empty() {
            return Err(Error::Io {
                what: format!("{} benchmark", self.collective),
                message: format!(
                    "requested candidate(s) could not run: {} (leave them out with --algos)",
                    not_run.join("; ")
                ),
            }
            .into());
        }
        Ok(())
    }
}

/// Bytes / time in GB/s (1e9 bytes per second).
pub fn algbw_gbps(bytes: usize, us: f64) -> f64 {
    bytes as f64 / (us * 1e-6) / 1e9
}

/// Ours over theirs: below 1 means ours takes less time.
pub fn time_ratio(ours_us: f64, theirs_us: f64) -> f64 {
    ours_us / theirs_us
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn after_compute_is_the_difference_of_the_medians_never_negative() {
        assert_eq!(
            after_compute_us(&[10.0, 30.0, 12.0], &[4.0, 5.0, 100.0]),
            7.0
        );
        assert_eq!(after_compute_us(&[10.0, 12.0], &[4.0, 5.0]), 6.5);
        // Noise can put the compute alone above the pairs: the call then costs nothing.
        assert_eq!(after_compute_us(&[5.0], &[6.0]), 0.0);
    }

    fn timed(us: f64, after: f64, wrong: u64) -> Outcome {
        Outcome::Timed(Timing {
            iters: 20,
            us,
            us_after_compute: after,
            algbw: algbw_gbps(4096, us),
            busbw: algbw_gbps(4096, us),
            host_us: 1.0,
            checked: 40,
            checked_pes: 2,
            wrong,
            wrong_detail: None,
        })
    }

    /// The table's row of message size `size` ("4K"): the first line that starts with it.
    pub(crate) fn table_row<'t>(t: &'t str, size: &str) -> &'t str {
        t.lines()
            .find(|l| l.trim_start().starts_with(size))
            .unwrap()
    }

    /// A report of ours against NCCL's two paths: at 4K nccl-sym is the faster back to back
    /// but not after compute, at 8K nccl is the faster (nccl-sym ran, slower), at 16K
    /// nccl-sym's outputs were wrong and at 32K it did not run.
    pub(crate) fn two_baselines() -> Report {
        let row = |bytes: usize, results: Vec<(&'static str, Outcome)>| Row {
            bytes,
            count: bytes / 4,
            dtype: BenchDtype::F32,
            tolerance: 0.0,
            results,
            note: None,
        };
        Report {
            collective: "allgather",
            n_pes: 2,
            gpu: "NVIDIA H200".into(),
            date: "2026-12-01".into(),
            op: None,
            reps: 2,
            warmup: 1,
            header: vec![],
            json_fields: vec![],
            candidates: vec!["ours", "nccl", "nccl-sym"],
            ratio: Some(("ours", NCCL_BASELINES)),
            optional: vec!["nccl-sym"],
            note_column: None,
            checked_by: None,
            rows: vec![
                row(
                    4096,
                    vec![
                        ("ours", timed(4.0, 6.0, 0)),
                        ("nccl", timed(8.0, 10.0, 0)),
                        ("nccl-sym", timed(5.0, 12.0, 0)),
                    ],
                ),
                row(
                    8192,
                    vec![
                        ("ours", timed(9.0, 9.0, 0)),
                        ("nccl", timed(6.0, 6.0, 0)),
                        ("nccl-sym", timed(7.5, 7.5, 0)),
                    ],
                ),
                row(
                    16384,
                    vec![
                        ("ours", timed(10.0, 10.0, 0)),
                        ("nccl", timed(20.0, 20.0, 0)),
                        ("nccl-sym", timed(1.0, 1.0, 3)),
                    ],
                ),
                row(
                    32768,
                    vec![
                        ("ours", timed(10.0, 10.0, 0)),
                        ("nccl", timed(40.0, 40.0, 0)),
                        (
                            "nccl-sym",
                            Outcome::Unavailable("NCCL 2.26.2 has none".into()),
                        ),
                    ],
                ),
            ],
        }
    }

    /// The ratio takes the faster NCCL path that ran right, at each size and on each timing
    /// separately; a tie goes to the first listed (nccl).
    #[test]
    fn ratio_takes_the_faster_nccl_path_per_size() {
        use RatioOn::{AfterCompute as After, BackToBack as B2b};
        let r = two_baselines();
        let at = |i: usize, on: RatioOn| r.rows[i].ratio_to_fastest("ours", NCCL_BASELINES, on);
        // At 4K the two timings disagree on which NCCL path is the faster.
        assert_eq!(at(0, B2b), Some((0.8, "nccl-sym")));
        assert_eq!(at(0, After), Some((0.6, "nccl")));
        assert_eq!(
            r.rows[0].fastest(NCCL_BASELINES, B2b),
            Some(("nccl-sym", 5.0))
        );
        assert_eq!(
            r.rows[0].fastest(NCCL_BASELINES, After),
            Some(("nccl", 10.0))
        );
        assert_eq!(at(1, B2b), Some((1.5, "nccl")));
        // Wrong outputs and a path that did not run are never the baseline.
        assert_eq!(at(2, B2b), Some((0.5, "nccl")));
        assert_eq!(at(3, After), Some((0.25, "nccl")));
        // The single-baseline ratio, on either timing.
        assert_eq!(r.rows[0].ratio("ours", "nccl", B2b), Some(0.5));
        assert_eq!(r.rows[0].ratio("ours", "nccl", After), Some(0.6));
        assert_eq!(r.rows[0].ratio("ours", "nccl-sym", After), Some(0.5));
        let mut tie = r.rows[1].clone();
        tie.results[2] = ("nccl-sym", timed(6.0, 6.0, 0));
        assert_eq!(tie.fastest(NCCL_BASELINES, B2b), Some(("nccl", 6.0)));
        // Neither ran: no ratio; ours did not run: none either.
        let mut none = r.rows[3].clone();
        none.results[1] = ("nccl", Outcome::Unavailable("no NCCL".into()));
        assert_eq!(none.ratio_to_fastest("ours", NCCL_BASELINES, After), None);
        none.results = vec![("nccl", timed(1.0, 1.0, 0))];
        assert_eq!(none.ratio_to_fastest("ours", NCCL_BASELINES, After), None);
        assert_eq!(baseline_cell(Some("nccl"), Some("nccl")), "nccl");
        assert_eq!(
            baseline_cell(Some("nccl-sym"), Some("nccl")),
            "nccl-sym|nccl"
        );
        assert_eq!(baseline_cell(None, Some("nccl")), "-|nccl");
        assert_eq!(baseline_cell(Some("nccl"), None), "nccl");
        assert_eq!(baseline_cell(None, None), "-");
    }

    /// `--ratio-on` takes the two timings by name, after compute by default; the names are the
    /// JSON's and the CSV's.
    #[test]
    fn ratio_is_on_after_compute_unless_asked_otherwise() {
        use clap::ValueEnum;
        assert_eq!(RatioOn::default(), RatioOn::AfterCompute);
        for on in [RatioOn::AfterCompute, RatioOn::BackToBack] {
            assert_eq!(on.to_possible_value().unwrap().get_name(), on.name());
            assert_eq!(RatioOn::from_str(on.name(), true), Ok(on));
            assert_ne!(on.other(), on);
            assert_eq!(on.other().other(), on);
        }
        assert_eq!(RatioOn::value_variants().len(), 2);
        let t = Timing {
            us: 1.0,
            us_after_compute: 2.0,
            ..match timed(1.0, 2.0, 0) {
                Outcome::Timed(t) => t,
                _ => unreachable!(),
            }
        };
        assert_eq!(t.us_on(RatioOn::AfterCompute), 2.0);
        assert_eq!(t.us_on(RatioOn::BackToBack), 1.0);
    }
}
