//! Per-step records (`--log-json FILE`: one JSON object per line) and the tools that read them:
//! `nvsh-gpt compare` (loss parity between two runs) and `nvsh-gpt summary`.

use crate::error::{GptError, Result};
use serde::{Deserialize, Deserializer, Serialize};
use std::path::Path;

/// The version of the step-record format, written into every record as `"schema"`. Readers
/// refuse another version; records without the field (written before it existed) have the
/// same fields and are read as this version.
pub const LOG_SCHEMA: u32 = 1;

/// One training step as logged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRecord {
    /// [`LOG_SCHEMA`] when written by this version.
    #[serde(default = "current_schema")]
    pub schema: u32,
    /// 1-based step.
    pub step: u64,
    /// Mean training loss of the step (before its update).
    #[serde(deserialize_with = "nan_for_null")]
    pub loss: f64,
    /// Validation loss, on the steps where it was computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f64>,
    #[serde(deserialize_with = "nan_for_null")]
    pub lr: f64,
    /// Wall time of the step (ms).
    #[serde(deserialize_with = "nan_for_null")]
    pub ms: f64,
    /// Training tokens per second of the step (all replicas).
    #[serde(deserialize_with = "nan_for_null")]
    pub tok_s: f64,
    /// Seconds since training started, at the end of the step.
    #[serde(deserialize_with = "nan_for_null")]
    pub elapsed_s: f64,
    /// Global gradient norm before clipping.
    #[serde(deserialize_with = "nan_for_null")]
    pub grad_norm: f64,
    /// Share of the step the stages' compute streams waited on receives (mean over stages):
    /// `bubble_pct + transfer_pct`.
    #[serde(deserialize_with = "nan_for_null")]
    pub wait_pct: f64,
    /// Of that wait, the share spent before the sender had the data (the schedule's idle time).
    #[serde(deserialize_with = "nan_for_null")]
    pub bubble_pct: f64,
    /// Of that wait, the share the messages spent being sent (measured on the senders).
    #[serde(deserialize_with = "nan_for_null")]
    pub transfer_pct: f64,
    /// Sparse averaging (the logging PE's): the pairs its selection found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_selected: Option<u64>,
    /// Sparse averaging: the k the density asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_k: Option<u64>,
    /// Sparse averaging: the local threshold (Gaussian methods, topk_aopt, Ok-Topk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_threshold: Option<f64>,
    /// Sparse averaging, gTop-k: the logging PE's pairs that made the global set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_included: Option<u64>,
    /// Sparse averaging with --sparse-clip: the factor the logging PE's local clipping scaled
    /// its gradient by (1: within the norm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_clip_factor: Option<f64>,
}

fn current_schema() -> u32 {
    LOG_SCHEMA
}

/// JSON has no NaN: serde_json writes a non-finite number as `null`, read back as NaN.
fn nan_for_null<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl StepRecord {
    /// The record as one line of JSON (no newline), with [`LOG_SCHEMA`].
    pub fn to_json(&self) -> String {
        let rec = StepRecord {
            schema: LOG_SCHEMA,
            ..self.clone()
        };
        // A struct of numbers always serialises.
        serde_json::to_string(&rec).unwrap_or_default()
    }

    /// Parses one line written by [`StepRecord::to_json`].
    pub fn from_json(line: &str) -> std::result::Result<StepRecord, String> {
        let r: StepRecord = serde_json::from_str(line).map_err(|e| e.to_string())?;
        if r.schema != LOG_SCHEMA {
            return Err(format!(
                "a record of schema {} (this nvsh-gpt reads schema {LOG_SCHEMA})",
                r.schema
            ));
        }
        Ok(r)
    }
}

/// Reads the step records of a `--log-json` file. Blank lines are skipped; any other line
/// that is not a step record is an error naming the file and the line.
pub fn read_log(path: &Path) -> Result<Vec<StepRecord>> {
    let text = std::fs::read_to_string(path).map_err(|source| GptError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut recs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let rec = StepRecord::from_json(line).map_err(|e| {
            GptError::Data(format!(
                "{}:{}: not a step record of nvsh-gpt --log-json ({e})",
                path.display(),
                i + 1
            ))
        })?;
        recs.push(rec);
    }
    if recs.is_empty() {
        return Err(GptError::Data(format!(
            "{}: no step records (is it a --log-json file of nvsh-gpt?)",
            path.display()
        )));
    }
    Ok(recs)
}

/// The outcome of comparing two runs' losses step by step.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// Steps compared.
    pub compared: usize,
    /// The step with the largest relative difference, its two losses and the difference.
    pub worst: Option<(u64, f64, f64, f64)>,
    /// Steps of the first `steps` present in only one log.
    pub missing: Vec<u64>,
    pub ok: bool,
}

/// Relative difference |a - b| / max(|a|, |b|) (0 when both are 0; infinite for NaN).
pub fn rel_diff(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::INFINITY;
    }
    let scale = a.abs().max(b.abs());
    if scale == 0.0 {
        0.0
    } else {
        (a - b).abs() / scale
    }
}

/// Compares the losses of steps 1..=`steps` (all steps of `a` when None): every one must be in
/// both logs and agree within `rel`.
pub fn compare(a: &[StepRecord], b: &[StepRecord], rel: f64, steps: Option<u64>) -> Comparison {
    let last = steps.unwrap_or_else(|| a.iter().map(|r| r.step).max().unwrap_or(0));
    let find = |recs: &[StepRecord], s: u64| recs.iter().find(|r| r.step == s).map(|r| r.loss);
    let mut worst: Option<(u64, f64, f64, f64)> = None;
    let mut missing = Vec::new();
    let mut compared = 0;
    for s in 1..=last {
        match (find(a, s), find(b, s)) {
            (Some(x), Some(y)) => {
                compared += 1;
                let d = rel_diff(x, y);
                if worst.is_none_or(|w| d > w.3) {
                    worst = Some((s, x, y, d));
                }
            }
            _ => missing.push(s),
        }
    }
    let ok = compared > 0 && missing.is_empty() && worst.is_some_and(|w| w.3 <= rel);
    Comparison {
        compared,
        worst,
        missing,
        ok,
    }
}

/// Throughput and time shares of a run, skipping the first `skip` steps (warm-up).
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub steps: usize,
    pub mean_ms: f64,
    /// Tokens of the steps over their total time.
    pub tok_s: f64,
    /// Shares of the steps' total time (each step's share weighted by its time).
    pub wait_pct: f64,
    pub bubble_pct: f64,
    pub transfer_pct: f64,
    /// Lowest validation loss and the elapsed seconds when it was logged.
    pub best_val: Option<(f64, f64)>,
    pub last_loss: f64,
}

/// The first record whose validation loss is below `limit`.
pub fn first_val_below(recs: &[StepRecord], limit: f64) -> Option<&StepRecord> {
    recs.iter().find(|r| r.val_loss.is_some_and(|v| v < limit))
}

pub fn summarize(recs: &[StepRecord], skip: usize) -> Summary {
    let used: Vec<&StepRecord> = recs
        .iter()
        .skip(skip.min(recs.len().saturating_sub(1)))
        .collect();
    let n = used.len().max(1) as f64;
    let mean = |f: &dyn Fn(&StepRecord) -> f64| used.iter().map(|r| f(r)).sum::<f64>() / n;
    // Over the total time, not a mean of per-step rates (which slow steps would count less).
    let total_ms = used.iter().map(|r| r.ms).sum::<f64>();
    let over_time = |f: &dyn Fn(&StepRecord) -> f64| {
        if total_ms > 0.0 {
            used.iter().map(|r| f(r) * r.ms).sum::<f64>() / total_ms
        } else {
            0.0
        }
    };
    let best_val = recs
        .iter()
        .filter_map(|r| r.val_loss.map(|v| (v, r.elapsed_s)))
        .filter(|(v, _)| v.is_finite())
        .min_by(|a, b| a.0.total_cmp(&b.0));
    Summary {
        steps: used.len(),
        mean_ms: mean(&|r| r.ms),
        tok_s: over_time(&|r| r.tok_s),
        wait_pct: over_time(&|r| r.wait_pct),
        bubble_pct: over_time(&|r| r.bubble_pct),
        transfer_pct: over_time(&|r| r.transfer_pct),
        best_val,
        last_loss: recs.last().map_or(f64::NAN, |r| r.loss),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::test_dir;

    fn rec(step: u64, loss: f64) -> StepRecord {
        StepRecord {
            step,
            loss,
            lr: 1e-3,
            ms: 10.0,
            tok_s: 1000.0,
            ..Default::default()
        }
    }

    #[test]
    fn json_round_trip_keeps_full_precision() {
        let r = StepRecord {
            schema: LOG_SCHEMA,
            step: 12,
            loss: 2.345_678_901_234_567,
            val_loss: Some(1.999_999_999),
            lr: 6.0e-4,
            ms: 31.25,
            tok_s: 524_288.5,
            elapsed_s: 3.5,
            grad_norm: 0.75,
            wait_pct: 1.5,
            bubble_pct: 1.25,
            transfer_pct: 0.25,
            sparse_selected: Some(1234),
            sparse_k: Some(1000),
            sparse_threshold: Some(0.001953125),
            sparse_included: Some(777),
            sparse_clip_factor: Some(0.25),
        };
        let line = r.to_json();
        assert!(
            line.starts_with("{\"schema\":1,\"step\":12,\"loss\":2.345678901234567,\"val_loss\":"),
            "{line}"
        );
        assert_eq!(StepRecord::from_json(&line), Ok(r.clone()));
        assert!(
            line.contains("\"sparse_selected\":1234,\"sparse_k\":1000"),
            "{line}"
        );
        // A dense step writes no sparse field.
        let dense = StepRecord {
            sparse_selected: None,
            sparse_k: None,
            sparse_threshold: None,
            sparse_included: None,
            sparse_clip_factor: None,
            ..r
        };
        assert!(!dense.to_json().contains("sparse"), "{}", dense.to_json());
        // Values of a GPU run whose 17 significant digits serde_json's default parser read
        // back one unit in the last place off (its float_roundtrip feature reads them exactly).
        for ms in [197.33279100000001, 1.9050079999999998, 1.7858559999999999] {
            let mut hard = rec(2, 5.0);
            hard.schema = LOG_SCHEMA;
            hard.ms = ms;
            hard.tok_s = 210.00273200429166;
            assert_eq!(StepRecord::from_json(&hard.to_json()), Ok(hard));
        }
        let mut nan = rec(1, f64::NAN);
        nan.val_loss = None;
        let back = StepRecord::from_json(&nan.to_json()).unwrap();
        assert!(back.loss.is_nan() && back.val_loss.is_none());
        assert!(StepRecord::from_json("{\"summary\":1}").is_err());
        assert!(StepRecord::from_json("not json").is_err());
        // A record from before the schema field reads; another schema does not.
        let old = "{\"step\":3,\"loss\":2.5,\"lr\":0.001,\"ms\":10,\"tok_s\":1,\"elapsed_s\":1,\
                   \"grad_norm\":1,\"wait_pct\":0,\"bubble_pct\":0,\"transfer_pct\":0}";
        assert_eq!(StepRecord::from_json(old).unwrap().step, 3);
        let newer = line.replacen("\"schema\":1", "\"schema\":2", 1);
        assert!(StepRecord::from_json(&newer)
            .unwrap_err()
            .contains("schema 2"));
    }

    #[test]
    fn a_line_that_is_not_a_record_is_an_error_naming_file_and_line() {
        let dir = test_dir("log");
        let path = dir.join("run.json");
        let good = rec(1, 3.0).to_json();
        std::fs::write(&path, format!("{good}\n\n{{\"step\":2,\"loss\":\n")).unwrap();
        let e = read_log(&path).unwrap_err().to_string();
        assert!(e.contains("run.json:3:"), "{e}");
        std::fs::write(&path, format!("{good}\n")).unwrap();
        assert_eq!(read_log(&path).unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn compare_finds_the_worst_step_and_fails_beyond_the_tolerance() {
        let a: Vec<_> = (1..=20).map(|s| rec(s, 5.0 - s as f64 * 0.1)).collect();
        let mut b = a.clone();
        b[6].loss *= 1.0 + 5e-6;
        b[11].loss *= 1.0 - 2e-5;
        let c = compare(&a, &b, 1e-5, Some(20));
        assert!(!c.ok);
        assert_eq!(c.compared, 20);
        assert_eq!(c.worst.unwrap().0, 12);
        assert!((c.worst.unwrap().3 - 2e-5).abs() < 1e-9);
        assert!(compare(&a, &b, 3e-5, Some(20)).ok);
        // Steps beyond the window do not count; missing steps fail.
        assert!(compare(&a, &b, 1e-5, Some(6)).ok);
        let short = &b[..10];
        let c = compare(&a, short, 1.0, Some(20));
        assert!(!c.ok && c.missing == (11..=20).collect::<Vec<_>>());
        // A NaN loss never passes.
        let mut n = a.clone();
        n[0].loss = f64::NAN;
        assert!(!compare(&a, &n, 1.0, None).ok);
    }

    #[test]
    fn summary_skips_warm_up_and_finds_the_best_validation() {
        let mut recs: Vec<_> = (1..=10).map(|s| rec(s, 3.0)).collect();
        recs[0].ms = 1000.0;
        recs[0].tok_s = 1.0;
        recs[4].val_loss = Some(2.0);
        recs[4].elapsed_s = 50.0;
        recs[9].val_loss = Some(1.5);
        recs[9].elapsed_s = 100.0;
        let s = summarize(&recs, 1);
        assert_eq!(first_val_below(&recs, 1.7).map(|r| r.step), Some(10));
        assert_eq!(first_val_below(&recs, 2.5).map(|r| r.step), Some(5));
        assert!(first_val_below(&recs, 1.5).is_none());
        assert_eq!(s.steps, 9);
        assert_eq!(s.mean_ms, 10.0);
        assert_eq!(s.tok_s, 1000.0);
        assert_eq!(s.best_val, Some((1.5, 100.0)));
    }

    #[test]
    fn summary_rate_is_total_tokens_over_total_time() {
        // 1000 tokens in 10 ms, then 1000 tokens in 30 ms: 2000 tokens in 40 ms is 50,000 tok/s
        // (the mean of the two step rates would say 66,667).
        let mut recs: Vec<_> = (1..=2).map(|s| rec(s, 3.0)).collect();
        (recs[0].ms, recs[0].tok_s, recs[0].wait_pct) = (10.0, 100_000.0, 40.0);
        (recs[1].ms, recs[1].tok_s, recs[1].wait_pct) = (30.0, 1000.0 / 0.03, 0.0);
        let s = summarize(&recs, 0);
        assert!((s.tok_s - 50_000.0).abs() < 1e-6, "{}", s.tok_s);
        // 4 ms of waiting in 40 ms.
        assert!((s.wait_pct - 10.0).abs() < 1e-9, "{}", s.wait_pct);
    }
}
