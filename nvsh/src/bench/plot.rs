//! The benches' results as charts: time per call and bus bandwidth against message size, log
//! axes, a line per candidate (ours per algorithm, NCCL, NVSHMEM's reduce), back to back and
//! (dotted, in the same colour) after a compute kernel, and a row of two charts per dtype.
//! `nvsh bench ... --plot FILE.png` draws the run it just made, and `nvsh plot RESULT.json
//! --out FILE.png` one stored with `--json` (no GPU needed): both read the bench's JSON
//! ([`crate::bench::stored`]), so a stored file and a live run draw the same.

use crate::bench::stored::{parse_bench_json, BenchJson, CollectiveJson, PutJson, PutRowJson};
use nvsh_plot::{Axis, Corner, Figure, Panel, Scale, Series, Stroke};
use nvshmem::tools::size_label;
use std::path::Path;

/// Pixels of one chart; two side by side.
pub const PANEL_SIZE: (u32, u32) = (760, 480);

fn bytes_tick(v: f64) -> String {
    size_label(v.round() as usize)
}

pub(crate) fn size_axis() -> Axis {
    Axis {
        label: "message size (bytes)".into(),
        scale: Scale::Log2,
        format: bytes_tick,
    }
}

pub(crate) fn log_axis(label: &str) -> Axis {
    Axis {
        label: label.into(),
        scale: Scale::Log10,
        format: nvsh_plot::short_number,
    }
}

fn pes(n: i32) -> String {
    format!("{n} PE{}", if n == 1 { "" } else { "s" })
}

/// A chart's title line: what ran, on how many PEs, which GPU, when.
fn title(what: &str, n_pes: i32, gpu: &str, date: Option<&str>) -> String {
    format!(
        "{what}, {}, {gpu}, {}",
        pes(n_pes),
        date.unwrap_or("date not recorded")
    )
}

/// What [`BenchJson::figure`] left out, for the user.
pub type Notes = Vec<String>;

impl BenchJson {
    /// The charts: for a collective a row per dtype (time, bus bandwidth); for put one row
    /// (time per put, bandwidth), per call and in kernel. Results with wrong outputs and
    /// candidates that did not run have no points; the notes say which.
    pub fn figure(&self) -> (Figure, Notes) {
        match self {
            BenchJson::Collective(c) => collective_figure(c),
            BenchJson::Put(p) => (put_figure(p), Vec::new()),
        }
    }
}

fn collective_figure(c: &CollectiveJson) -> (Figure, Notes) {
    let mut dtypes: Vec<&str> = Vec::new();
    for r in &c.rows {
        if !dtypes.contains(&r.dtype.as_str()) {
            dtypes.push(&r.dtype);
        }
    }
    // Files of older builds have no times after compute: their charts stay as they were.
    let after = c
        .rows
        .iter()
        .any(|r| r.results.values().any(|x| x.us_after_compute.is_some()));
    let key = if after {
        vec![
            ("back to back".to_string(), Stroke::Solid),
            ("after a compute kernel".to_string(), Stroke::Dotted),
        ]
    } else {
        Vec::new()
    };
    let mut notes: Notes = Vec::new();
    let mut panels = Vec::new();
    for dtype in &dtypes {
        let (mut time, mut bw) = (Vec::new(), Vec::new());
        let (mut time_after, mut bw_after) = (Vec::new(), Vec::new());
        for (i, cand) in c.candidates.iter().enumerate() {
            let (mut t, mut b) = (Vec::new(), Vec::new());
            let (mut ta, mut ba) = (Vec::new(), Vec::new());
            for row in c.rows.iter().filter(|r| r.dtype == *dtype) {
                let Some(res) = row.results.get(cand) else {
                    continue;
                };
                if res.wrong > 0 {
                    notes.push(format!(
                        "{cand} {dtype} {}: left out, {} wrong output(s)",
                        size_label(row.bytes as usize),
                        res.wrong
                    ));
                    continue;
                }
                if let Some(why) = &res.na {
                    let note = format!("{cand}: not run ({why})");
                    if !notes.contains(&note) {
                        notes.push(note);
                    }
                    continue;
                }
                let x = row.bytes as f64;
                if let Some(us) = res.us {
                    t.push((x, us));
                }
                if let Some(busbw) = res.busbw {
                    b.push((x, busbw));
                }
                if let Some(us_after) = res.us_after_compute {
                    ta.push((x, us_after));
                    // The same bytes and bus factor over the time after compute.
                    if let (Some(us), Some(busbw)) = (res.us, res.busbw) {
                        ba.push((x, busbw * us / us_after));
                    }
                }
            }
            // Allreduce's auto runs one of the other lines' algorithms at each size: dashed,
            // so that the line it lies on still shows.
            let stroke = if cand == "auto" {
                Stroke::Dashed
            } else {
                Stroke::Solid
            };
            let series = |points| Series {
                label: cand.clone(),
                points,
                stroke,
                color: i,
                markers: true,
            };
            time.push(series(t));
            bw.push(series(b));
            // The candidate's colour, dotted, without a legend entry of its own: the key's
            // dotted entry says what it is.
            let dotted = |points| Series {
                label: String::new(),
                points,
                stroke: Stroke::Dotted,
                color: i,
                markers: false,
            };
            time_after.push(dotted(ta));
            bw_after.push(dotted(ba));
        }
        // After every back-to-back line, so that candidate k's line is series k either way.
        if after {
            time.extend(time_after);
            bw.extend(bw_after);
        }
        panels.push(Panel {
            title: format!("{dtype}: time per call"),
            x: size_axis(),
            y: log_axis("time (us)"),
            series: time,
            legend: Corner::UpperLeft,
            key: key.clone(),
        });
        panels.push(Panel {
            title: format!("{dtype}: bus bandwidth"),
            x: size_axis(),
            y: log_axis("busbw (GB/s)"),
            series: bw,
            legend: Corner::UpperLeft,
            key: key.clone(),
        });
    }
    let what = match &c.op {
        Some(op) => format!("{} ({op})", c.collective),
        None => c.collective.clone(),
    };
    let fig = Figure {
        title: title(&what, c.n_pes, &c.gpu, c.date.as_deref()),
        panels,
        columns: 2,
        panel_size: PANEL_SIZE,
    };
    (fig, notes)
}

fn put_figure(p: &PutJson) -> Figure {
    let x = |r: &PutRowJson| r.bytes as f64;
    let series = |label: &str, color, points| Series {
        label: label.into(),
        points,
        stroke: Stroke::Solid,
        color,
        markers: true,
    };
    let per_call_t = p.bandwidth.iter().map(|r| (x(r), r.us_per_put)).collect();
    let per_call_b = p.bandwidth.iter().map(|r| (x(r), r.gbps)).collect();
    // In kernel: the same bytes at the in-kernel bandwidth (GB/s = 1e3 bytes per us).
    let in_kernel_t = p
        .bandwidth
        .iter()
        .filter_map(|r| r.gbps_in_kernel.map(|g| (x(r), x(r) / (g * 1e3))))
        .collect();
    let in_kernel_b = p
        .bandwidth
        .iter()
        .filter_map(|r| r.gbps_in_kernel.map(|g| (x(r), g)))
        .collect();
    Figure {
        title: title(
            "device-initiated put, PE 0 -> PE 1",
            p.n_pes,
            &p.gpu,
            p.date.as_deref(),
        ),
        panels: vec![
            Panel {
                title: "time per put".into(),
                x: size_axis(),
                y: log_axis("time (us)"),
                series: vec![
                    series("per call", 0, per_call_t),
                    series("in kernel", 1, in_kernel_t),
                ],
                legend: Corner::UpperLeft,
                key: Vec::new(),
            },
            Panel {
                title: "bandwidth".into(),
                x: size_axis(),
                y: log_axis("GB/s"),
                series: vec![
                    series("per call", 0, per_call_b),
                    series("in kernel", 1, in_kernel_b),
                ],
                legend: Corner::UpperLeft,
                key: Vec::new(),
            },
        ],
        columns: 2,
        panel_size: PANEL_SIZE,
    }
}

/// What [`plot_json`] drew: the image's size, the notes on what was left out, and a warning
/// when the chart has no text (no font).
#[derive(Debug, Clone)]
pub struct Plotted {
    pub width: u32,
    pub height: u32,
    pub notes: Notes,
    pub warning: Option<String>,
}

/// Draws a bench's JSON text (`source` names it in errors) to `out` as PNG.
pub fn plot_json(text: &str, source: &str, out: &Path) -> Result<Plotted, String> {
    let bench = parse_bench_json(text).map_err(|p| format!("{source}: {}", p.why))?;
    plot_bench(&bench, out)
}

/// Draws a bench result to `out` as PNG.
pub fn plot_bench(bench: &BenchJson, out: &Path) -> Result<Plotted, String> {
    let (fig, notes) = bench.figure();
    let r = nvsh_plot::write(&fig, out).map_err(|e| e.to_string())?;
    Ok(Plotted {
        width: r.width,
        height: r.height,
        notes,
        warning: r.warning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUT: &str = r#"{"schema":1,"n_pes":2,"gpu":"NVIDIA H200","date":"2026-11-22",
        "bandwidth":[{"bytes":65536,"blocks":4,"threads":256,"iters":1000,"us_per_put":2.7,
        "gbps":24.3,"gbps_min":20.0,"gbps_max":25.0,"gbps_in_kernel":165.1},
        {"bytes":1048576,"blocks":64,"threads":512,"iters":512,"us_per_put":5.08,
        "gbps":206.4,"gbps_min":200.0,"gbps_max":210.0}],
        "sweep":[],"latency":{"one_way_us":1.25,"one_way_us_min":1.2,"one_way_us_max":1.4,
        "iters":1000,"reps":20}}"#;

    #[test]
    fn put_results_draw_per_call_and_in_kernel_lines() {
        let BenchJson::Put(p) = parse_bench_json(PUT).unwrap() else {
            panic!("not put")
        };
        let fig = put_figure(&p);
        assert_eq!(
            fig.title,
            "device-initiated put, PE 0 -> PE 1, 2 PEs, NVIDIA H200, 2026-11-22"
        );
        let time = &fig.panels[0].series;
        assert_eq!(time[0].points, vec![(65536.0, 2.7), (1048576.0, 5.08)]);
        // Only the row that has an in-kernel bandwidth: 64 KiB at 165.1 GB/s.
        assert_eq!(time[1].points.len(), 1);
        assert!((time[1].points[0].1 - 65536.0 / 165.1e3).abs() < 1e-9);
        assert_eq!(fig.panels[1].series[1].points, vec![(65536.0, 165.1)]);
    }

    const ALLGATHER: &str = r#"{"schema":1,"collective":"allgather","n_pes":2,
        "gpu":"NVIDIA H200","op":null,"date":"2026-12-01","candidates":["ours","nccl"],
        "ratio_on":"after-compute","rows":[
        {"bytes":4096,"dtype":"f32","results":{
            "ours":{"us":4.0,"us_after_compute":6.0,"busbw":0.5,"wrong":0},
            "nccl":{"us":8.0,"us_after_compute":10.0,"busbw":0.25,"wrong":0}}},
        {"bytes":8192,"dtype":"f32","results":{
            "ours":{"us":5.0,"us_after_compute":0.0,"busbw":0.8,"wrong":0},
            "nccl":{"na":"no NCCL"}}}]}"#;

    /// Each candidate has a line back to back and a dotted one after compute in its colour,
    /// in both charts; the key says which is which, and the dotted lines have no entries of
    /// their own.
    #[test]
    fn collective_results_draw_after_compute_dotted_beside_back_to_back() {
        let (fig, notes) = parse_bench_json(ALLGATHER).unwrap().figure();
        assert_eq!(notes, ["nccl: not run (no NCCL)"]);
        let key = [
            ("back to back".to_string(), Stroke::Solid),
            ("after a compute kernel".to_string(), Stroke::Dotted),
        ];
        let [time, bw] = &fig.panels[..] else {
            panic!("{} panels", fig.panels.len())
        };
        for p in [time, bw] {
            assert_eq!(p.key, key);
            let shape: Vec<(&str, Stroke, usize)> = p
                .series
                .iter()
                .map(|s| (s.label.as_str(), s.stroke, s.color))
                .collect();
            assert_eq!(
                shape,
                [
                    ("ours", Stroke::Solid, 0),
                    ("nccl", Stroke::Solid, 1),
                    ("", Stroke::Dotted, 0),
                    ("", Stroke::Dotted, 1)
                ]
            );
        }
        assert_eq!(time.series[0].points, [(4096.0, 4.0), (8192.0, 5.0)]);
        assert_eq!(time.series[2].points, [(4096.0, 6.0), (8192.0, 0.0)]);
        assert_eq!(time.series[3].points, [(4096.0, 10.0)]);
        // The same bytes and bus factor over the time after compute: 0.5 x 4 / 6. A time of
        // 0 (compute alone took as long) gives no drawable bandwidth.
        assert_eq!(bw.series[2].points[0], (4096.0, 0.5 * 4.0 / 6.0));
        assert!(bw.series[2].points[1].1.is_infinite());
        assert_eq!(bw.series[3].points, [(4096.0, 0.25 * 8.0 / 10.0)]);
        // A file of an older build, without times after compute: the chart as before.
        let old = ALLGATHER.replace("\"us_after_compute\"", "\"was_after_compute\"");
        let (fig, _) = parse_bench_json(&old).unwrap().figure();
        assert!(fig.panels.iter().all(|p| p.key.is_empty()));
        assert!(fig.panels.iter().all(|p| p.series.len() == 2));
    }

    #[test]
    fn what_is_not_a_bench_result_is_refused_with_where_and_why() {
        let p = parse_bench_json("{\"schema\":1,\n\"collective\":\"allreduce\",\n\"n_pes\":}")
            .unwrap_err();
        assert_eq!((p.line, p.column), (3, 9));
        assert!(p.why.starts_with("expected value"), "{p:?}");
        let p = parse_bench_json(&PUT.replace("\"schema\":1", "\"schema\":2")).unwrap_err();
        assert!(
            p.why.contains("schema 2; this nvsh reads schema 1"),
            "{p:?}"
        );
        let p = parse_bench_json("{\"step\":1,\"loss\":2.0}").unwrap_err();
        assert!(p.why.contains("no \"schema\" field"), "{p:?}");
        let p = parse_bench_json("{\"schema\":1,\"gpu\":\"x\"}").unwrap_err();
        assert!(p.why.contains("neither"), "{p:?}");
        // A field of the wrong type: where it is.
        let p = parse_bench_json(&PUT.replace("\"n_pes\":2", "\"n_pes\":\"two\"")).unwrap_err();
        assert_eq!(p.line, 1, "{p:?}");
        assert!(p.why.contains("invalid type"), "{p:?}");
    }
}
