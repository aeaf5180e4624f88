//! `nvsh-gpt plot LOG.json... --out FILE.png`: the loss curves of one or more `--log-json`
//! files (read with [`read_log`]) on one chart: training loss solid, validation loss dashed,
//! a colour per log, x the step.

use crate::error::{GptError, Result};
use crate::log::{read_log, StepRecord};
use nvsh_plot::{Axis, Corner, Figure, Panel, Rendered, Scale, Series, Stroke};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Pixels of the chart.
pub const PANEL_SIZE: (u32, u32) = (1100, 620);

/// One log's records by step. A resumed run appends to its log, and a resume from an earlier
/// save logs some steps again: the last record of a step is the one the run continued from.
pub fn by_step(recs: &[StepRecord]) -> Vec<&StepRecord> {
    let mut m: BTreeMap<u64, &StepRecord> = BTreeMap::new();
    for r in recs {
        m.insert(r.step, r);
    }
    m.into_values().collect()
}

/// The legend's name of each log: its file name, or the path as given where two logs share a
/// file name (run1/log.json, run2/log.json).
pub fn log_names(paths: &[PathBuf]) -> Vec<String> {
    let file = |p: &PathBuf| {
        p.file_name()
            .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
    };
    paths
        .iter()
        .map(|p| {
            let name = file(p);
            if paths.iter().filter(|q| file(q) == name).count() > 1 {
                p.display().to_string()
            } else {
                name
            }
        })
        .collect()
}

fn step_tick(v: f64) -> String {
    format!("{}", v.round() as i64)
}

/// The chart of `logs` (legend name, records).
pub fn figure(logs: &[(String, Vec<StepRecord>)]) -> Figure {
    let mut series = Vec::new();
    for (i, (name, recs)) in logs.iter().enumerate() {
        let recs = by_step(recs);
        series.push(Series {
            label: format!("{name} train"),
            points: recs.iter().map(|r| (r.step as f64, r.loss)).collect(),
            stroke: Stroke::Solid,
            color: i,
            // A point per step: a dense curve, clearer without dots.
            markers: false,
        });
        let val: Vec<(f64, f64)> = recs
            .iter()
            .filter_map(|r| r.val_loss.map(|v| (r.step as f64, v)))
            .collect();
        if !val.is_empty() {
            series.push(Series {
                label: format!("{name} validation"),
                points: val,
                stroke: Stroke::Dashed,
                color: i,
                // Validation comes every --val-every steps: each point shown.
                markers: true,
            });
        }
    }
    let last = logs
        .iter()
        .flat_map(|(_, r)| r.iter().map(|r| r.step))
        .max()
        .unwrap_or(0);
    Figure {
        title: format!(
            "nvsh-gpt loss: {} log{}, up to step {last} (training solid, validation dashed)",
            logs.len(),
            if logs.len() == 1 { "" } else { "s" }
        ),
        panels: vec![Panel {
            title: "loss against step".into(),
            x: Axis {
                label: "step".into(),
                scale: Scale::Linear,
                format: step_tick,
            },
            y: Axis {
                label: "loss (nats per token)".into(),
                scale: Scale::Linear,
                format: nvsh_plot::short_number,
            },
            series,
            // Losses fall from the upper left: the upper right stays empty.
            legend: Corner::UpperRight,
            key: Vec::new(),
        }],
        columns: 1,
        panel_size: PANEL_SIZE,
    }
}

/// Reads the logs and draws them to `out`, which is checked first (a path that cannot take a
/// PNG is refused before any log is read).
pub fn plot_logs(paths: &[PathBuf], out: &Path) -> Result<Rendered> {
    nvsh_plot::check_writable(out).map_err(|why| GptError::Config(format!("--out: {why}")))?;
    if paths.is_empty() {
        return Err(GptError::Config(
            "no log to plot: give one or more --log-json files of nvsh-gpt train".into(),
        ));
    }
    let mut logs = Vec::new();
    for (path, name) in paths.iter().zip(log_names(paths)) {
        logs.push((name, read_log(path)?));
    }
    nvsh_plot::write(&figure(&logs), out).map_err(|e| GptError::Config(format!("--out: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(step: u64, loss: f64, val: Option<f64>) -> StepRecord {
        StepRecord {
            step,
            loss,
            val_loss: val,
            ..Default::default()
        }
    }

    #[test]
    fn a_log_gives_a_solid_training_line_and_a_dashed_validation_line_in_one_colour() {
        let a = vec![
            rec(1, 5.0, None),
            rec(2, 4.0, Some(4.2)),
            rec(3, 3.0, None),
            rec(4, 2.5, Some(2.9)),
        ];
        // A resumed run logged steps 3 and 4 again: the later records count.
        let mut b = a.clone();
        b.push(rec(3, 3.1, None));
        b.push(rec(4, 2.4, Some(2.8)));
        let only_train = vec![rec(1, 5.5, None), rec(2, 5.0, None)];
        let fig = figure(&[
            ("a.json".into(), a),
            ("b.json".into(), b),
            ("c.json".into(), only_train),
        ]);
        let s = &fig.panels[0].series;
        let labels: Vec<&str> = s.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "a.json train",
                "a.json validation",
                "b.json train",
                "b.json validation",
                "c.json train"
            ]
        );
        assert_eq!(s[1].points, vec![(2.0, 4.2), (4.0, 2.9)]);
        assert_eq!((s[1].stroke, s[1].color), (Stroke::Dashed, 0));
        assert_eq!((s[2].stroke, s[2].color), (Stroke::Solid, 1));
        assert_eq!(
            s[2].points,
            vec![(1.0, 5.0), (2.0, 4.0), (3.0, 3.1), (4.0, 2.4)]
        );
        assert!(fig.title.contains("3 logs, up to step 4"), "{}", fig.title);
    }

    #[test]
    fn logs_of_the_same_file_name_are_told_apart_by_their_paths() {
        let names = log_names(&[
            PathBuf::from("run1/log.json"),
            PathBuf::from("run2/log.json"),
            PathBuf::from("x/other.json"),
        ]);
        assert_eq!(names, ["run1/log.json", "run2/log.json", "other.json"]);
    }
}
