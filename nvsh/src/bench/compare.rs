//! Runs of two builds (or settings) of one collective bench set side by side, from the JSON
//! files `nvsh bench ... --json --out FILE` wrote (`nvsh compare AFTER.json... --before
//! BEFORE.json...`). The machines are noisy between processes, so each side is several runs,
//! alternated in one call, and a cell is the median over its side's runs of a candidate's time
//! per call, back to back and after compute: `after/before` is the ratio of those medians.
//! Against NCCL, each run's own ratio (the candidate over the fastest baseline of the same run,
//! as the bench takes it) and then the median of those: a baseline measured in the same
//! process is the only fair one.
//!
//! A cell with wrong outputs is left out of every median and its row says so; the caller fails
//! the command then.

use crate::bench::median;
use crate::bench::stored::{CollectiveJson, ResultJson};
use nvshmem::tools::size_label;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// One side's runs as read: each file's name (for messages) and its result.
pub struct Side {
    pub runs: Vec<(String, CollectiveJson)>,
}

/// Both timings of a candidate at one size: medians over the runs that timed it unharmed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub us: f64,
    /// None where a file has no after-compute column (older builds).
    pub us_after_compute: Option<f64>,
    /// How many runs the medians are over.
    pub runs: usize,
}

/// One size and dtype of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareRow {
    pub bytes: u64,
    pub dtype: String,
    pub after: Option<Timing>,
    pub before: Option<Timing>,
    /// Median over the after runs of the candidate over the fastest baseline of its run,
    /// back to back and after compute, with the baselines that were fastest.
    pub vs_baseline: Option<(f64, Option<f64>)>,
    pub baselines_fastest: BTreeSet<String>,
    /// Wrong outputs in this row's cells: the candidate's on both sides, the baselines' in the
    /// after runs (the only ones the ratio to them reads).
    pub wrong: u64,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub collective: String,
    pub op: Option<String>,
    pub n_pes: i32,
    pub candidate: String,
    pub baselines: Vec<String>,
    pub gpus: BTreeSet<String>,
    pub after_runs: usize,
    pub before_runs: usize,
    /// Outputs checked over every cell the comparison read (as [`CompareRow::wrong`] counts
    /// them; None where a file of an older build did not say), and those found wrong.
    pub checked: Option<u64>,
    pub wrong: u64,
    /// Files a run cut short left (`"complete": false`): their rows are used as far as they go.
    pub incomplete: Vec<String>,
    pub rows: Vec<CompareRow>,
}

/// Sets `after` beside `before` (which may have no runs: then only the ratio to the baseline)
/// for `candidate` (None: `auto` where the bench has it, allreduce's choice, else `ours`).
/// Refuses runs of different collectives, ops or PE counts, and a candidate a run lacks, naming
/// the files.
pub fn compare(after: &Side, before: &Side, candidate: Option<&str>) -> Result<Comparison, String> {
    let (first_name, first) = after
        .runs
        .first()
        .ok_or("no result files of the build under test")?;
    let candidate = match candidate {
        Some(c) => c.to_string(),
        None if first.candidates.iter().any(|c| c == "auto") => "auto".into(),
        None => "ours".into(),
    };
    let mut gpus = BTreeSet::new();
    let mut incomplete = Vec::new();
    for (name, r) in after.runs.iter().chain(&before.runs) {
        let same = r.collective == first.collective && r.op == first.op && r.n_pes == first.n_pes;
        if !same {
            return Err(format!(
                "{name} holds {} and {first_name} {}: compare runs of one collective, op and \
                 PE count",
                what(r),
                what(first)
            ));
        }
        if !r.candidates.contains(&candidate) {
            return Err(format!(
                "{name} has no candidate `{candidate}` (it has {}); name one with --candidate",
                r.candidates.join(", ")
            ));
        }
        gpus.insert(r.gpu.clone());
        if !r.complete {
            incomplete.push(name.clone());
        }
    }
    // The bench's own baselines (NCCL's paths), else every NCCL candidate.
    let mut baselines: Vec<String> = first.ratio_baselines.clone();
    if baselines.is_empty() {
        baselines = first
            .candidates
            .iter()
            .filter(|c| c.starts_with("nccl") && **c != candidate)
            .cloned()
            .collect();
    }
    // Rows as the bench wrote them: dtypes in the order they came, each by size.
    let mut dtypes: Vec<&str> = Vec::new();
    let mut keys: BTreeSet<(usize, u64)> = BTreeSet::new();
    for (_, r) in after.runs.iter().chain(&before.runs) {
        for row in &r.rows {
            let d = match dtypes.iter().position(|d| *d == row.dtype) {
                Some(d) => d,
                None => {
                    dtypes.push(&row.dtype);
                    dtypes.len() - 1
                }
            };
            keys.insert((d, row.bytes));
        }
    }
    let (mut checked, mut wrong) = (Some(0), 0);
    let count =
        |sum: &mut Option<u64>, c: &ResultJson| *sum = sum.zip(c.checked).map(|(a, b)| a + b);
    let mut rows = Vec::new();
    for (d, bytes) in keys {
        let dtype = dtypes[d].to_string();
        let mut row_wrong = 0;
        let mut side = |s: &Side| {
            let cells: Vec<&ResultJson> = s
                .runs
                .iter()
                .filter_map(|(_, r)| cell(r, &dtype, bytes, &candidate))
                .collect();
            for c in &cells {
                count(&mut checked, c);
                row_wrong += c.wrong;
            }
            timing(&cells)
        };
        let (a, b) = (side(after), side(before));
        let mut ratios = (Vec::new(), Vec::new());
        let mut fastest = BTreeSet::new();
        for (_, r) in &after.runs {
            let Some(ours) = cell(r, &dtype, bytes, &candidate) else {
                continue;
            };
            let theirs: Vec<(&String, &ResultJson)> = baselines
                .iter()
                .filter_map(|n| cell(r, &dtype, bytes, n).map(|c| (n, c)))
                .collect();
            for (_, c) in &theirs {
                count(&mut checked, c);
                row_wrong += c.wrong;
            }
            if ours.wrong > 0 || theirs.iter().any(|(_, c)| c.wrong > 0) {
                continue;
            }
            let best = |t: fn(&ResultJson) -> Option<f64>| {
                theirs
                    .iter()
                    .filter_map(|(n, c)| t(c).map(|v| (v, *n)))
                    .min_by(|x, y| x.0.total_cmp(&y.0))
            };
            let (Some(us), Some((base, name))) = (ours.us, best(|c| c.us)) else {
                continue;
            };
            ratios.0.push(us / base);
            fastest.insert(name.clone());
            if let (Some(t), Some((base, name))) =
                (ours.us_after_compute, best(|c| c.us_after_compute))
            {
                ratios.1.push(t / base);
                fastest.insert(name.clone());
            }
        }
        let vs_baseline = (!ratios.0.is_empty()).then(|| {
            let after_compute = (ratios.1.len() == ratios.0.len()).then(|| median(&ratios.1));
            (median(&ratios.0), after_compute)
        });
        wrong += row_wrong;
        rows.push(CompareRow {
            bytes,
            dtype,
            after: a,
            before: b,
            vs_baseline,
            baselines_fastest: fastest,
            wrong: row_wrong,
        });
    }
    Ok(Comparison {
        collective: first.collective.clone(),
        op: first.op.clone(),
        n_pes: first.n_pes,
        candidate,
        baselines,
        gpus,
        after_runs: after.runs.len(),
        before_runs: before.runs.len(),
        checked,
        wrong,
        incomplete,
        rows,
    })
}

fn what(r: &CollectiveJson) -> String {
    let op =
        r.op.as_deref()
            .map(|o| format!(" ({o})"))
            .unwrap_or_default();
    format!("{}{op} on {} PEs", r.collective, r.n_pes)
}

/// `name`'s result at one size and dtype of a run, where it timed one (not `na`).
fn cell<'a>(r: &'a CollectiveJson, dtype: &str, bytes: u64, name: &str) -> Option<&'a ResultJson> {
    r.rows
        .iter()
        .find(|row| row.dtype == dtype && row.bytes == bytes)
        .and_then(|row| row.results.get(name))
        .filter(|c| c.us.is_some())
}

/// The medians over the cells without wrong outputs.
fn timing(cells: &[&ResultJson]) -> Option<Timing> {
    let good: Vec<&&ResultJson> = cells.iter().filter(|c| c.wrong == 0).collect();
    let us: Vec<f64> = good.iter().filter_map(|c| c.us).collect();
    if us.is_empty() {
        return None;
    }
    let after: Vec<f64> = good.iter().filter_map(|c| c.us_after_compute).collect();
    Some(Timing {
        us: median(&us),
        us_after_compute: (after.len() == us.len()).then(|| median(&after)),
        runs: us.len(),
    })
}

fn pair(x: Option<f64>, y: Option<f64>, digits: usize) -> String {
    let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    format!("{} ({})", f(x), f(y))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).map(|(a, b)| a / b)
}

/// The table: a header saying what was read and checked, then a line per size and dtype.
pub fn render_table(c: &Comparison) -> String {
    let op = c.op.as_deref().map(|o| format!(" {o}")).unwrap_or_default();
    let gpus: Vec<&str> = c.gpus.iter().map(String::as_str).collect();
    let mut s = format!(
        "# nvsh compare: {}{op}, {} PEs, {}; candidate `{}`, us back to back (after compute), \
         medians over runs\n",
        c.collective,
        c.n_pes,
        gpus.join(" and "),
        c.candidate
    );
    if c.gpus.len() > 1 {
        s += "# warning: the runs are of different GPUs; a ratio between them says little\n";
    }
    s += &format!(
        "# after: {} run(s); before: {} run(s); every timed call of the bench was checked \
         against the CPU: {}, {} wrong (cells with wrong outputs are left out)\n",
        c.after_runs,
        c.before_runs,
        c.checked
            .map_or("outputs not counted in files of older builds".into(), |n| {
                format!("{n} outputs read here")
            }),
        c.wrong
    );
    if !c.baselines.is_empty() {
        s += &format!(
            "# vs {}: the median over the after runs of each run's `{}` over the fastest of \
             {} in that run (< 1: faster)\n",
            c.baselines.join("|"),
            c.candidate,
            c.baselines.join(" and ")
        );
    }
    for name in &c.incomplete {
        s += &format!("# {name}: a run cut short (\"complete\": false): its rows so far\n");
    }
    // Columns only for what was read: a side with no runs, or runs with no baseline, has none.
    let (with_before, with_base) = (c.before_runs > 0, !c.baselines.is_empty());
    let line = |cells: [String; 7]| {
        let mut l = format!("{:>7} {:>5}", cells[0], cells[1]);
        for (k, width, shown) in [
            (2, 19, with_before),
            (3, 19, true),
            (4, 15, with_before),
            (5, 15, with_base),
        ] {
            if shown {
                l += &format!(" {:>width$}", cells[k]);
            }
        }
        l + &format!(" {:>5}\n", cells[6])
    };
    let head = [
        "size",
        "dtype",
        "before",
        "after",
        "after/before",
        "vs baseline",
        "wrong",
    ];
    s += &line(head.map(String::from));
    for r in &c.rows {
        let t = |t: Option<Timing>| (t.map(|t| t.us), t.and_then(|t| t.us_after_compute));
        let (a, b) = (t(r.after), t(r.before));
        let base = (r.vs_baseline.map(|v| v.0), r.vs_baseline.and_then(|v| v.1));
        s += &line([
            size_label(r.bytes as usize),
            r.dtype.clone(),
            pair(b.0, b.1, 2),
            pair(a.0, a.1, 2),
            pair(ratio(a.0, b.0), ratio(a.1, b.1), 3),
            pair(base.0, base.1, 3),
            r.wrong.to_string(),
        ]);
    }
    s
}

/// The comparison as one JSON object: what was compared, then a row per size and dtype.
pub fn render_json(c: &Comparison) -> String {
    let timing = |t: &Option<Timing>| {
        t.map_or(
            Value::Null,
            |t| json!({"us": t.us, "us_after_compute": t.us_after_compute, "runs": t.runs}),
        )
    };
    let rows: Vec<Value> = c
        .rows
        .iter()
        .map(|r| {
            let (a, b) = (r.after, r.before);
            json!({
                "bytes": r.bytes,
                "dtype": r.dtype,
                "after": timing(&a),
                "before": timing(&b),
                "after_over_before": ratio(a.map(|t| t.us), b.map(|t| t.us)),
                "after_over_before_after_compute":
                    ratio(a.and_then(|t| t.us_after_compute), b.and_then(|t| t.us_after_compute)),
                "vs_baseline": r.vs_baseline.map(|v| v.0),
                "vs_baseline_after_compute": r.vs_baseline.and_then(|v| v.1),
                "baselines_fastest": r.baselines_fastest,
                "wrong": r.wrong,
            })
        })
        .collect();
    let all = json!({
        "collective": c.collective,
        "op": c.op,
        "n_pes": c.n_pes,
        "candidate": c.candidate,
        "baselines": c.baselines,
        "gpus": c.gpus,
        "after_runs": c.after_runs,
        "before_runs": c.before_runs,
        "checked": c.checked,
        "wrong": c.wrong,
        "incomplete": c.incomplete,
        "rows": rows,
    });
    serde_json::to_string_pretty(&all).expect("plain values serialise")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stored::{parse_bench_json, BenchJson};

    /// A family bench's run: `ours` and NCCL's two paths at 64K and 1M (bf16), times as given
    /// (back to back, after compute).
    fn run(
        ours: [(f64, f64); 2],
        nccl: [(f64, f64); 2],
        sym: [(f64, f64); 2],
        wrong: u64,
    ) -> String {
        let cell = |(t, a): (f64, f64), w: u64| {
            format!(r#"{{"us":{t},"us_after_compute":{a},"busbw":1.0,"checked":100,"wrong":{w}}}"#)
        };
        let row = |i: usize, bytes: u64| {
            format!(
                r#"{{"bytes":{bytes},"dtype":"bf16","results":{{"ours":{},"nccl":{},"nccl-sym":{}}}}}"#,
                cell(ours[i], if i == 1 { wrong } else { 0 }),
                cell(nccl[i], 0),
                cell(sym[i], 0)
            )
        };
        format!(
            r#"{{"schema":1,"complete":true,"collective":"alltoall","n_pes":2,"gpu":"NVIDIA H200",
            "op":null,"candidates":["ours","nccl","nccl-sym"],"ratio_baselines":["nccl","nccl-sym"],
            "rows":[{},{}]}}"#,
            row(0, 65536),
            row(1, 1 << 20)
        )
    }

    fn side(prefix: &str, texts: &[String]) -> Side {
        Side {
            runs: texts
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let BenchJson::Collective(c) = parse_bench_json(t).unwrap() else {
                        panic!("a collective result")
                    };
                    (format!("{prefix}{i}.json"), c)
                })
                .collect(),
        }
    }

    const NCCL: [(f64, f64); 2] = [(10.0, 12.0), (20.0, 24.0)];
    const SYM: [(f64, f64); 2] = [(8.0, 16.0), (30.0, 30.0)];

    #[test]
    fn medians_of_each_side_and_each_runs_own_ratio_to_the_fastest_baseline() {
        let after = side(
            "new",
            &[
                run([(4.0, 6.0), (10.0, 12.0)], NCCL, SYM, 0),
                run([(6.0, 9.0), (20.0, 24.0)], NCCL, SYM, 0),
                run([(5.0, 30.0), (30.0, 36.0)], NCCL, SYM, 0),
            ],
        );
        let before = side(
            "old",
            &[
                run([(8.0, 12.0), (40.0, 48.0)], NCCL, SYM, 0),
                run([(12.0, 12.0), (40.0, 48.0)], NCCL, SYM, 0),
            ],
        );
        let c = compare(&after, &before, None).unwrap();
        assert_eq!(c.candidate, "ours");
        assert_eq!(c.baselines, ["nccl", "nccl-sym"]);
        assert_eq!((c.after_runs, c.before_runs, c.wrong), (3, 2, 0));
        // 5 runs x 2 sizes of ours, 3 after runs x 2 sizes x 2 baselines, 100 outputs each.
        assert_eq!(c.checked, Some((10 + 12) * 100));
        let r = &c.rows[0];
        assert_eq!(r.bytes, 65536);
        let a = r.after.unwrap();
        assert_eq!((a.us, a.us_after_compute, a.runs), (5.0, Some(9.0), 3));
        let b = r.before.unwrap();
        assert_eq!((b.us, b.us_after_compute), (10.0, Some(12.0)));
        // Back to back nccl-sym (8) is the fastest: 4/8, 6/8, 5/8; after compute nccl (12):
        // 6/12, 9/12, 30/12.
        assert_eq!(r.vs_baseline, Some((5.0 / 8.0, Some(9.0 / 12.0))));
        assert_eq!(
            r.baselines_fastest,
            ["nccl", "nccl-sym"].map(String::from).into()
        );
        let t = render_table(&c);
        assert!(
            t.contains(
                "    64K  bf16       10.00 (12.00)         5.00 (9.00)   0.500 (0.750)   0.625 \
                 (0.750)     0\n"
            ),
            "{t}"
        );
        assert!(t.contains("# after: 3 run(s); before: 2 run(s);"), "{t}");
        let v: Value = serde_json::from_str(&render_json(&c)).unwrap();
        assert_eq!(v["rows"][1]["after_over_before"], json!(0.5));
        assert_eq!(v["rows"][1]["vs_baseline"], json!(1.0));
    }

    #[test]
    fn a_cell_with_wrong_outputs_is_left_out_and_counted() {
        let after = side(
            "new",
            &[
                run([(4.0, 6.0), (10.0, 12.0)], NCCL, SYM, 3),
                run([(6.0, 9.0), (20.0, 24.0)], NCCL, SYM, 0),
            ],
        );
        let c = compare(&after, &Side { runs: vec![] }, None).unwrap();
        assert_eq!(c.wrong, 3);
        let r = &c.rows[1];
        assert_eq!(r.wrong, 3);
        // Only the second run's 1M cell counts.
        assert_eq!(r.after.unwrap().runs, 1);
        assert_eq!(r.after.unwrap().us, 20.0);
        assert_eq!(r.vs_baseline, Some((1.0, Some(1.0))));
        assert_eq!(r.before, None);
        // No before runs: no before columns.
        let t = render_table(&c);
        assert!(
            t.contains("   size dtype               after     vs baseline wrong\n"),
            "{t}"
        );
        assert!(
            t.contains("     1M  bf16       20.00 (24.00)   1.000 (1.000)     3\n"),
            "{t}"
        );
    }

    #[test]
    fn runs_of_another_collective_or_a_missing_candidate_are_refused_by_name() {
        let a = run([(4.0, 6.0), (10.0, 12.0)], NCCL, SYM, 0);
        let other = a.replace("\"alltoall\"", "\"allgather\"");
        let e = compare(
            &side("new", std::slice::from_ref(&a)),
            &side("old", &[other]),
            None,
        )
        .err()
        .unwrap();
        assert!(
            e.contains("old0.json holds allgather on 2 PEs and new0.json alltoall on 2 PEs"),
            "{e}"
        );
        let e = compare(
            &side("new", std::slice::from_ref(&a)),
            &side("new", &[]),
            Some("auto"),
        )
        .err()
        .unwrap();
        assert!(
            e.contains("no candidate `auto` (it has ours, nccl, nccl-sym)"),
            "{e}"
        );
        let e = compare(&side("new", &[]), &side("old", &[a]), None)
            .err()
            .unwrap();
        assert!(e.contains("no result files"), "{e}");
    }

    #[test]
    fn another_gpu_is_warned_of_and_a_cut_short_run_named() {
        let a = run([(4.0, 6.0), (10.0, 12.0)], NCCL, SYM, 0);
        let b = a
            .replace("NVIDIA H200", "NVIDIA H100 80GB HBM3")
            .replace("\"complete\":true", "\"complete\":false")
            .replace("\"checked\":100,", "");
        let c = compare(&side("new", &[a]), &side("old", &[b]), None).unwrap();
        assert_eq!(c.incomplete, ["old0.json"]);
        let t = render_table(&c);
        assert!(t.contains("NVIDIA H100 80GB HBM3 and NVIDIA H200;"), "{t}");
        assert!(
            t.contains("# warning: the runs are of different GPUs"),
            "{t}"
        );
        assert!(t.contains("# old0.json: a run cut short"), "{t}");
        // An older build's file says nothing of how many outputs it checked.
        assert_eq!(c.checked, None);
        assert!(
            t.contains("outputs not counted in files of older builds, 0 wrong"),
            "{t}"
        );
    }
}
