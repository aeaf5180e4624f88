//! The collective benches' reports as text: the table, the JSON and the CSV of a
//! [`Report`], and the wordings their headers share (what was checked, which types, how the
//! ratio is taken). The harness ([`crate::bench::harness`]) measures; this file only writes.

use crate::bench::harness::{
    baseline_cell, BenchDtype, Outcome, RatioOn, Report, Row, COMPUTE_BYTES,
};
use nvshmem::tools::size_label;
use nvshmem::ReduceOp;
use serde_json::{json, Map, Value};

/// What the table and README say is checked; `checked_by` names who compares outputs where
/// not every PE does ([`Report::checked_by`]).
pub fn checked_wording(checked_by: Option<&str>) -> String {
    format!(
        "# checked: every timed call writes its own output buffer (one per call of a group, \
         filled before it with a value no correct output holds: NaN, or an integer outside the \
         data's range) from inputs hashed from (PE, element, salt), the salt different for \
         every call of a group; after each group, outside the timed events, {} compares every \
         output with the exact host reference; #wrong counts wrong outputs summed over PEs",
        checked_by.unwrap_or("every PE")
    )
}

/// The table's line on which types were checked and how closely: "types checked: f32 exact,
/// bf16 exact, i32 exact" (a float type whose results round says "within" its tolerance).
pub fn dtypes_wording(checked: &[(BenchDtype, f64)]) -> String {
    let each: Vec<String> = checked
        .iter()
        .map(|&(d, tol)| {
            if tol == 0.0 {
                format!("{} exact", d.name())
            } else {
                format!("{} within {tol:.2e}", d.name())
            }
        })
        .collect();
    format!("# types checked: {}", each.join(", "))
}

/// How integer averages round, for reports of an avg over integer types. NCCL's rounding was
/// read in NCCL 2.28.9's source (hostToDevRedOp in src/enqueue.cc maps ncclAvg on integers to
/// FuncSumPostDiv, whose divide() in src/device/reduce_kernel.h divides the magnitude and
/// restores the sign); it is ours too, so one reference checks both.
pub const INTEGER_AVG_WORDING: &str = "# integer avg: the sum divided by the PE count, \
     truncated toward zero (-7 over 2 PEs is -3), as our ReduceOp::Avg documents; NCCL 2.28's \
     ncclAvg on integers rounds the same way, so both are checked against the same values";

/// Width of one candidate's group of columns.
const GROUP: usize = 42;

/// The report as a table: one row per size and dtype, time / algbw / busbw / #wrong /
/// t|compute per candidate, then the ratio on `on`'s timing, the ratio on the other, and the
/// row note.
pub fn render_table(r: &Report, on: RatioOn) -> String {
    let op = r.op.map_or("none", ReduceOp::name);
    let title = match r.op {
        Some(_) => format!("{} ({op})", r.collective),
        None => r.collective.to_string(),
    };
    let mut s = format!("# {title} on {} PE(s), {}\n", r.n_pes, r.gpu);
    for line in &r.header {
        s += &format!("# {line}\n");
    }
    s += &format!(
        "# time: us per call, median over {} timed groups of back-to-back calls on one stream \
         (CUDA events around each group; `calls` per group in the JSON), after {} warm-up \
         calls\n",
        r.reps, r.warmup
    );
    s += &format!(
        "# t|compute: us per call when each call follows a compute kernel on the stream (a \
         {} memset, as a training step's work before its collective): median of the groups of \
         (kernel, call) less median of the kernels alone\n",
        size_label(COMPUTE_BYTES)
    );
    s += "# algbw = bytes / time, busbw = algbw * bus factor, GB/s (1e9 B/s)\n";
    let show_vs = r.shows_baseline_column();
    if let Some((ours, bases)) = r.ratio {
        s += &ratio_wording(ours, &r.ratio_baselines(), bases[0], show_vs, on);
        s += "\n";
    }
    s += &checked_wording(r.checked_by.as_deref());
    s += "\n";
    let checked = r.checked_dtypes();
    if !checked.is_empty() {
        s += &dtypes_wording(&checked);
        s += "\n";
    }
    if r.op == Some(ReduceOp::Avg) && checked.iter().any(|(d, _)| !d.is_float()) {
        s += INTEGER_AVG_WORDING;
        s += "\n";
    }
    s += &format!("{:>10} {:>11} {:>5} {:>5}", "", "", "", "");
    for c in &r.candidates {
        s += &format!(" {:-^GROUP$}", format!(" {c} "));
    }
    s += "\n";
    s += &format!(
        "{:>10} {:>11} {:>5} {:>5}",
        "size", "count", "type", "redop"
    );
    for _ in &r.candidates {
        s += &format!(
            " {:>9} {:>7} {:>7} {:>6} {:>9}",
            "time", "algbw", "busbw", "#wrong", "t|compute"
        );
    }
    let ratio_head = r.ratio.map(|(a, b)| format!("{a}/{}", b[0]));
    if let Some(h) = &ratio_head {
        s += &format!(" {h:>9} {:>9}", on.other().second_column());
        if show_vs {
            s += &format!(" {:>13}", "vs");
        }
    }
    if let Some((head, _)) = r.note_column {
        s += &format!(" {head:>7}");
    }
    s += "\n";
    let mut notes: Vec<String> = Vec::new();
    for row in &r.rows {
        s += &format!(
            "{:>10} {:>11} {:>5} {op:>5}",
            size_label(row.bytes),
            row.count,
            row.dtype.name()
        );
        for &c in &r.candidates {
            s += &match row.outcome(c) {
                Some(Outcome::Timed(t)) => format!(
                    " {:>9.2} {:>7.1} {:>7.1} {:>6} {:>9.2}",
                    t.us, t.algbw, t.busbw, t.wrong, t.us_after_compute
                ),
                Some(Outcome::Unavailable(why)) => {
                    let mut note = format!("# {c}: n/a ({why})");
                    if r.optional.contains(&c) {
                        note += "; in the default list only, so no failure (name it in --algos \
                                 to make it one)";
                    }
                    if !notes.contains(&note) {
                        notes.push(note);
                    }
                    format!(" {:>9} {:>7} {:>7} {:>6} {:>9}", "n/a", "-", "-", "-", "-")
                }
                None => format!(" {:>9} {:>7} {:>7} {:>6} {:>9}", "-", "-", "-", "-", "-"),
            };
        }
        if let Some((ours, bases)) = r.ratio {
            let first = row.ratio_to_fastest(ours, bases, on);
            let second = row.ratio_to_fastest(ours, bases, on.other());
            let shown =
                |x: Option<(f64, &str)>| x.map_or("-".to_string(), |x| format!("{:.2}", x.0));
            s += &format!(" {:>9} {:>9}", shown(first), shown(second));
            if show_vs {
                let vs = baseline_cell(first.map(|x| x.1), second.map(|x| x.1));
                s += &format!(" {vs:>13}");
            }
        }
        if r.note_column.is_some() {
            s += &format!(" {:>7}", row.note.unwrap_or("-"));
        }
        s += "\n";
    }
    for note in notes {
        s += &note;
        s += "\n";
    }
    let failures = r.failures();
    if failures.is_empty() {
        s += "# every timed call of every candidate that ran was checked: none wrong\n";
    } else {
        for f in failures {
            s += &format!("# WRONG RESULT: {f}\n");
        }
    }
    s
}

/// The table header's line on the ratio: which timing it is taken on (`on`), `ours`'s time
/// over `named`'s (the ratio's baselines among the candidates; `label` names the column), over
/// the faster of them at each size where there are several, and the second column's timing.
pub fn ratio_wording(
    ours: &str,
    named: &[&str],
    label: &str,
    show_vs: bool,
    on: RatioOn,
) -> String {
    let theirs = match named {
        [] | [_] => format!("{}'s", named.first().copied().unwrap_or(label)),
        _ => format!("the faster of {} at each size", named.join(" and ")),
    };
    let other = on.other();
    let mut s = format!(
        "# ratio on {} (--ratio-on {}): {ours}/{label} = {ours}'s {} over {theirs} (< 1: \
         ours is faster); {}: the same on the {} columns",
        on.words(),
        on.name(),
        on.time_column(),
        other.second_column(),
        other.time_column()
    );
    if show_vs && named.len() > 1 {
        s += &format!(
            "; vs = which (a|b: a for {ours}/{label}, b for {})",
            other.second_column()
        );
    }
    s
}

/// The report header's line on the nccl-sym candidate.
pub const NCCL_SYM_WORDING: &str = "nccl-sym: NCCL's call on its own buffers (ncclMemAlloc, \
     registered with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)), the same inputs, checked \
     alike; NCCL runs its symmetric kernels where it has them (2.28: allgather, allreduce and \
     reduce-scatter sums of f32, f16 and bf16, one node) and its regular ones otherwise";

/// The ratios the JSON and CSV carry, with their keys: on `on`'s timing (plain `ratio`, what
/// `ratio_on` names), then back to back and after compute by name, so that a reader wanting one
/// timing need not look at `ratio_on`.
fn ratio_keys(on: RatioOn) -> [(RatioOn, &'static str); 3] {
    [
        (on, "ratio"),
        (RatioOn::BackToBack, "ratio_back_to_back"),
        (RatioOn::AfterCompute, "ratio_after_compute"),
    ]
}

/// Version of the benches' JSON (its `"schema"` field), for whoever reads the files.
pub const BENCH_SCHEMA: u32 = 1;

/// `x` to `digits` decimals, as the JSON shows it (timings are not more exact); NaN is null.
pub fn rounded(x: f64, digits: i32) -> Value {
    let f = 10f64.powi(digits);
    json!((x * f).round() / f)
}

/// The finished report as JSON (`"complete": true`); `ratio_on` says which timing the rows'
/// `ratio_*_over_*` and `ratio_baseline` are on, and both timings' ratios are there by name as
/// well.
pub fn render_json(r: &Report, on: RatioOn) -> String {
    json_report(r, on, true)
}

/// [`render_json`] of a report written while the bench still runs, holding the rows measured
/// so far: `"complete": false`, so that a file left by a run cut short says so.
pub fn render_json_partial(r: &Report, on: RatioOn) -> String {
    json_report(r, on, false)
}

/// The JSON of [`render_json`] and [`render_json_partial`]; `complete` is the top-level
/// `"complete"`, true only once every size and dtype ran.
fn json_report(r: &Report, on: RatioOn, complete: bool) -> String {
    let outcome = |o: &Outcome| match o {
        Outcome::Timed(t) => json!({
            "us": rounded(t.us, 3),
            "us_after_compute": rounded(t.us_after_compute, 3),
            "algbw": rounded(t.algbw, 3),
            "busbw": rounded(t.busbw, 3),
            "host_us": rounded(t.host_us, 3),
            "calls": t.iters,
            "checked": t.checked,
            "wrong": t.wrong,
            "wrong_detail": t.wrong_detail,
            "checked_pes": t.checked_pes,
        }),
        Outcome::Unavailable(why) => json!({ "na": why }),
    };
    let row = |row: &Row| {
        let mut m = Map::new();
        m.insert("bytes".into(), json!(row.bytes));
        m.insert("count".into(), json!(row.count));
        m.insert("dtype".into(), json!(row.dtype.name()));
        m.insert("tolerance".into(), json!(row.tolerance));
        if let Some((_, key)) = r.note_column {
            m.insert(key.into(), json!(row.note));
        }
        if let Some((ours, bases)) = r.ratio {
            for (timing, key) in ratio_keys(on) {
                let best = row.ratio_to_fastest(ours, bases, timing);
                let value = best.map_or(Value::Null, |(x, _)| rounded(x, 4));
                m.insert(format!("{key}_{ours}_over_{}", bases[0]), value);
                m.insert(format!("{key}_baseline"), json!(best.map(|(_, b)| b)));
            }
        }
        let results = row
            .results
            .iter()
            .map(|(c, o)| (c.to_string(), outcome(o)))
            .collect();
        m.insert("results".into(), Value::Object(results));
        Value::Object(m)
    };
    let mut m = Map::new();
    m.insert("schema".into(), json!(BENCH_SCHEMA));
    m.insert("complete".into(), json!(complete));
    m.insert("collective".into(), json!(r.collective));
    m.insert("n_pes".into(), json!(r.n_pes));
    m.insert("gpu".into(), json!(r.gpu));
    m.insert("op".into(), json!(r.op.map(ReduceOp::name)));
    m.insert("date".into(), json!(r.date));
    m.insert("reps".into(), json!(r.reps));
    m.insert("warmup".into(), json!(r.warmup));
    for (k, v) in &r.json_fields {
        m.insert(k.to_string(), v.clone());
    }
    // Every output of every timed call of these types was checked (per-row tolerances).
    let checked: Vec<&str> = r.checked_dtypes().iter().map(|(d, _)| d.name()).collect();
    m.insert("dtypes".into(), json!(checked));
    m.insert("candidates".into(), json!(r.candidates));
    // Ours over the fastest of these at each size (a row's `ratio_baseline` says which).
    m.insert("ratio_baselines".into(), json!(r.ratio_baselines()));
    m.insert("ratio_on".into(), json!(on.name()));
    m.insert("optional".into(), json!(r.optional));
    m.insert(
        "rows".into(),
        Value::Array(r.rows.iter().map(row).collect()),
    );
    Value::Object(m).to_string()
}

/// The report as CSV: a header line, then one line per size, dtype and candidate with
/// nccl-tests' columns (size, count, type, redop, time, algbw, busbw, #wrong) and the
/// candidate, its calls per group, outputs checked, status ("ok", "wrong" or "n/a: why") and
/// the tolerance the type's outputs were checked with (0: exact), its time after a compute
/// kernel, then the timing the ratio is on (`on`), the row's ratio of ours over the fastest
/// NCCL path on it, and the same back to back and after compute by name, each with the
/// baseline it used (the same on every line of a size and dtype; empty where none).
pub fn render_csv(r: &Report, on: RatioOn) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let header = [
        "collective",
        "size",
        "count",
        "type",
        "redop",
        "candidate",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
        "wrong",
        "calls",
        "checked",
        "status",
        "tolerance",
        "time_after_compute_us",
        "ratio_on",
        "ratio",
        "ratio_baseline",
        "ratio_back_to_back",
        "ratio_back_to_back_baseline",
        "ratio_after_compute",
        "ratio_after_compute_baseline",
    ];
    // Writing into a Vec cannot fail; a field count off by one would be a bug here.
    w.write_record(header).expect("CSV header");
    let redop = r.op.map_or("none", ReduceOp::name);
    for row in &r.rows {
        let ratios: Vec<String> = std::iter::once(on.name().to_string())
            .chain(ratio_keys(on).into_iter().flat_map(|(timing, _)| {
                let best = r
                    .ratio
                    .and_then(|(ours, bases)| row.ratio_to_fastest(ours, bases, timing));
                [
                    best.map_or(String::new(), |(x, _)| format!("{x:.4}")),
                    best.map_or(String::new(), |(_, b)| b.to_string()),
                ]
            }))
            .collect();
        for (c, o) in &row.results {
            let fixed = [
                r.collective.to_string(),
                row.bytes.to_string(),
                row.count.to_string(),
                row.dtype.name().to_string(),
                redop.to_string(),
                c.to_string(),
            ];
            let rest = match o {
                Outcome::Timed(t) => [
                    format!("{:.3}", t.us),
                    format!("{:.3}", t.algbw),
                    format!("{:.3}", t.busbw),
                    t.wrong.to_string(),
                    t.iters.to_string(),
                    t.checked.to_string(),
                    if t.wrong == 0 { "ok" } else { "wrong" }.to_string(),
                ],
                Outcome::Unavailable(why) => {
                    let mut v: [String; 7] = Default::default();
                    v[6] = format!("n/a: {why}");
                    v
                }
            };
            let tolerance = row.tolerance.to_string();
            let after = match o {
                Outcome::Timed(t) => format!("{:.3}", t.us_after_compute),
                Outcome::Unavailable(_) => String::new(),
            };
            w.write_record(
                fixed
                    .iter()
                    .chain(rest.iter())
                    .chain([&tolerance, &after])
                    .chain(ratios.iter()),
            )
            .expect("CSV row");
        }
    }
    String::from_utf8(w.into_inner().expect("CSV buffer")).expect("CSV is UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::tests::{table_row, two_baselines};
    use crate::bench::harness::*;

    #[test]
    fn table_puts_the_ratio_on_after_compute_first() {
        let r = two_baselines();
        let t = render_table(&r, RatioOn::default());
        assert!(
            t.contains(
                "\n# ratio on after compute (--ratio-on after-compute): ours/nccl = ours's \
                 t|compute over the faster of nccl and nccl-sym at each size (< 1: ours is \
                 faster); |b2b: the same on the time columns; vs = which (a|b: a for ours/nccl, \
                 b for |b2b)\n"
            ),
            "{t}"
        );
        let header = t.lines().find(|l| l.contains("redop")).unwrap();
        assert!(
            header.ends_with(" ours/nccl      |b2b            vs"),
            "{header}"
        );
        let line = |size: &str| table_row(&t, size);
        // 4K: 6 / 10 (nccl) after compute, 4 / 5 (nccl-sym) back to back.
        assert!(line("4K").ends_with(" 0.60      0.80 nccl|nccl-sym"), "{t}");
        assert!(line("8K").ends_with(" 1.50      1.50          nccl"), "{t}");
        assert_eq!(header.len(), line("4K").len(), "{header}\n{}", line("4K"));
        // Both time columns stay, in their places.
        assert!(
            line("4K").contains("      4.00     1.0     1.0      0      6.00"),
            "{t}"
        );
    }

    #[test]
    fn table_names_the_baseline_of_each_ratio() {
        let r = two_baselines();
        let t = render_table(&r, RatioOn::BackToBack);
        assert!(
            t.contains(
                "\n# ratio on back to back (--ratio-on back-to-back): ours/nccl = ours's time \
                 over the faster of nccl and nccl-sym at each size (< 1: ours is faster); \
                 |compute: the same on the t|compute columns; vs = which (a|b: a for \
                 ours/nccl, b for |compute)\n"
            ),
            "{t}"
        );
        let header = t.lines().find(|l| l.contains("redop")).unwrap();
        assert!(
            header.ends_with(" ours/nccl  |compute            vs"),
            "{header}"
        );
        let line = |size: &str| table_row(&t, size);
        assert!(line("4K").ends_with(" 0.80      0.60 nccl-sym|nccl"), "{t}");
        assert!(line("8K").ends_with(" 1.50      1.50          nccl"), "{t}");
        assert_eq!(header.len(), line("4K").len(), "{header}\n{}", line("4K"));
        assert!(
            t.contains(
                "# nccl-sym: n/a (NCCL 2.26.2 has none); in the default list only, so no failure"
            ),
            "{t}"
        );
        // nccl-sym's wrong outputs fail the run; its n/a alone would not.
        assert!(r.verify().is_err());
        let mut ok = r.clone();
        ok.rows.remove(2);
        assert!(ok.verify().is_ok());
        assert!(ok.not_run().is_empty());
        // Named in --algos, its n/a fails the run.
        ok.optional.clear();
        let err = ok.verify().unwrap_err().to_string();
        assert!(err.contains("nccl-sym: NCCL 2.26.2 has none"), "{err}");
        // With one NCCL path among the candidates: no vs column.
        let mut one = two_baselines();
        one.candidates = vec!["ours", "nccl"];
        for row in &mut one.rows {
            row.results.truncate(2);
        }
        assert!(!one.shows_baseline_column());
        let t = render_table(&one, RatioOn::AfterCompute);
        assert!(t.contains(
            "\n# ratio on after compute (--ratio-on after-compute): ours/nccl = ours's \
             t|compute over nccl's (< 1: ours is faster); |b2b: the same on the time columns\n"
        ));
        let header = t.lines().find(|l| l.contains("redop")).unwrap();
        assert!(header.ends_with("ours/nccl      |b2b"), "{header}");
        assert_eq!(
            ratio_wording("auto", &["nccl-sym"], "nccl", false, RatioOn::BackToBack),
            "# ratio on back to back (--ratio-on back-to-back): auto/nccl = auto's time over \
             nccl-sym's (< 1: ours is faster); |compute: the same on the t|compute columns"
        );
    }

    #[test]
    fn json_and_csv_carry_the_ratio_and_its_baseline() {
        let r = two_baselines();
        let v: Value = serde_json::from_str(&render_json(&r, RatioOn::default())).unwrap();
        assert_eq!(v["ratio_on"], "after-compute");
        assert_eq!(v["ratio_baselines"], json!(["nccl", "nccl-sym"]));
        assert_eq!(v["optional"], json!(["nccl-sym"]));
        let row = &v["rows"][0];
        // The ratio is after compute's, against nccl; back to back's was nccl-sym.
        assert_eq!(row["ratio_ours_over_nccl"], json!(0.6));
        assert_eq!(row["ratio_baseline"], "nccl");
        assert_eq!(row["ratio_after_compute_ours_over_nccl"], json!(0.6));
        assert_eq!(row["ratio_after_compute_baseline"], "nccl");
        assert_eq!(row["ratio_back_to_back_ours_over_nccl"], json!(0.8));
        assert_eq!(row["ratio_back_to_back_baseline"], "nccl-sym");
        assert_eq!(row["results"]["nccl-sym"]["us"], json!(5.0));
        assert_eq!(row["results"]["nccl-sym"]["us_after_compute"], json!(12.0));
        assert_eq!(row["results"]["nccl-sym"]["host_us"], json!(1.0));
        assert_eq!(
            v["rows"][3]["results"]["nccl-sym"]["na"],
            "NCCL 2.26.2 has none"
        );
        // Back to back: the plain keys follow it; the named ones do not move.
        let v: Value = serde_json::from_str(&render_json(&r, RatioOn::BackToBack)).unwrap();
        assert_eq!(v["ratio_on"], "back-to-back");
        let row = &v["rows"][0];
        assert_eq!(row["ratio_ours_over_nccl"], json!(0.8));
        assert_eq!(row["ratio_baseline"], "nccl-sym");
        assert_eq!(row["ratio_after_compute_ours_over_nccl"], json!(0.6));
        assert_eq!(row["ratio_back_to_back_baseline"], "nccl-sym");
        let mut lone = r.clone();
        lone.rows[0].results.truncate(1);
        let v: Value = serde_json::from_str(&render_json(&lone, RatioOn::default())).unwrap();
        assert_eq!(v["rows"][0]["ratio_ours_over_nccl"], Value::Null);
        assert_eq!(v["rows"][0]["ratio_baseline"], Value::Null);

        let text = render_csv(&r, RatioOn::default());
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let head: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(
            head[14..],
            [
                "time_after_compute_us",
                "ratio_on",
                "ratio",
                "ratio_baseline",
                "ratio_back_to_back",
                "ratio_back_to_back_baseline",
                "ratio_after_compute",
                "ratio_after_compute_baseline"
            ]
        );
        let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 12);
        // Every line of a size carries the size's ratios.
        for line in &rows[..3] {
            assert_eq!(
                line.iter().skip(15).collect::<Vec<_>>(),
                [
                    "after-compute",
                    "0.6000",
                    "nccl",
                    "0.8000",
                    "nccl-sym",
                    "0.6000",
                    "nccl"
                ]
            );
        }
        assert_eq!(&rows[2][5], "nccl-sym");
        assert_eq!(&rows[11][12], "n/a: NCCL 2.26.2 has none");
        assert_eq!(&rows[11][17], "nccl");
        let text = render_csv(&r, RatioOn::BackToBack);
        let line = text.lines().nth(1).unwrap();
        assert!(
            line.ends_with(",back-to-back,0.8000,nccl-sym,0.8000,nccl-sym,0.6000,nccl"),
            "{line}"
        );
    }

    #[test]
    fn types_line_names_each_type_and_its_tolerance() {
        assert_eq!(
            dtypes_wording(&[
                (BenchDtype::F32, 0.0),
                (BenchDtype::Bf16, 0.125),
                (BenchDtype::U8, 0.0)
            ]),
            "# types checked: f32 exact, bf16 within 1.25e-1, u8 exact"
        );
        assert!(checked_wording(None).contains("NaN, or an integer outside the data's range"));
    }

    #[test]
    fn json_says_whether_the_report_is_complete() {
        let r = two_baselines();
        let done: Value = serde_json::from_str(&render_json(&r, RatioOn::default())).unwrap();
        let part: Value =
            serde_json::from_str(&render_json_partial(&r, RatioOn::default())).unwrap();
        assert_eq!(done["complete"], json!(true));
        assert_eq!(part["complete"], json!(false));
        let keys: Vec<&String> = done.as_object().unwrap().keys().take(2).collect();
        assert_eq!(keys, ["schema", "complete"]);
        let without = |mut v: Value| {
            v.as_object_mut().unwrap().remove("complete");
            v
        };
        assert_eq!(without(done), without(part));
    }
}
