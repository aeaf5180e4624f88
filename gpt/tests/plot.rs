//! `nvsh-gpt plot` end to end on the CPU: a tiny `--cpu` run's `--log-json` and a second log
//! drawn on one chart, and the errors users see (a broken log named by file and line, an
//! output that cannot take a PNG, refused before any log is read).

mod common;

use common::{run_gpt as run, text_of, workdir, TINY_MODEL_ARGS};
use nvsh_gpt::log::{read_log, StepRecord};
use std::collections::HashSet;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The distinct non-grey colours of a rectangle of the image.
fn colours(img: &nvsh_plot::Image, (x0, x1): (u32, u32), (y0, y1): (u32, u32)) -> HashSet<[u8; 3]> {
    let mut set = HashSet::new();
    for y in y0..y1.min(img.height) {
        for x in x0..x1.min(img.width) {
            let [r, g, b] = img.pixel(x, y);
            if !(r == g && g == b) {
                set.insert([r, g, b]);
            }
        }
    }
    set
}

#[test]
fn a_trained_log_and_another_draw_as_loss_curves() {
    let dir = workdir("plot");
    let data = dir.join("data.txt");
    std::fs::write(&data, common::text(20_000, 9)).unwrap();
    let log = dir.join("tiny.json");
    let mut args = vec!["train", "--cpu", "--data", s(&data)];
    args.extend_from_slice(TINY_MODEL_ARGS);
    args.extend_from_slice(&[
        "--steps",
        "8",
        "--warmup",
        "2",
        "--lr",
        "3e-3",
        "--val-every",
        "2",
        "--val-batches",
        "2",
        "--sample-tokens",
        "0",
        "--timeout-ms",
        "60000",
        "--log-json",
        s(&log),
    ]);
    let o = run(&args);
    assert!(o.status.success(), "{}", text_of(&o));
    // A second run's log: the same steps, the loss a little higher.
    let other = dir.join("other.json");
    let lines: Vec<String> = read_log(&log)
        .unwrap()
        .into_iter()
        .map(|r| {
            StepRecord {
                loss: r.loss + 0.3,
                val_loss: r.val_loss.map(|v| v + 0.3),
                ..r
            }
            .to_json()
        })
        .collect();
    std::fs::write(&other, lines.join("\n") + "\n").unwrap();

    let png = dir.join("loss.png");
    let o = run(&["plot", s(&log), s(&other), "--out", s(&png)]);
    assert!(o.status.success(), "{}", text_of(&o));
    assert!(
        text_of(&o).contains("(1100x668 pixels, 2 log(s))"),
        "{}",
        text_of(&o)
    );
    let img = nvsh_plot::read_png(&png).expect("a PNG");
    // One 1100 x 620 chart under the 48-pixel title band.
    assert_eq!((img.width, img.height), (1100, 668));
    let logs = vec![
        ("tiny.json".to_string(), read_log(&log).unwrap()),
        ("other.json".to_string(), read_log(&other).unwrap()),
    ];
    let fig = nvsh_gpt::plot::figure(&logs);
    assert_eq!(fig.size(), (img.width, img.height));
    // Training and validation of each log: 4 lines, validation at steps 2, 4, 6, 8.
    let series = &fig.panels[0].series;
    assert_eq!(series.len(), 4);
    assert_eq!(series[0].points.len(), 8);
    assert_eq!(series[1].points.len(), 4);
    let (xr, yr) = fig.plot_area(0);
    let n = img.count_coloured(xr, yr);
    assert!(n > 2000, "{n} coloured pixels in the plot area");
    // The two logs' colours are both there, and nothing coloured is in the title band.
    let c = colours(&img, xr, yr);
    for i in 0..2 {
        assert!(
            c.contains(&nvsh_plot::series_rgb(i)),
            "log {i}'s colour missing"
        );
    }
    assert_eq!(img.count_coloured((0, img.width), (0, 40)), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plot_errors_name_the_file_and_line_and_the_output_is_checked_first() {
    let dir = workdir("plot-errors");
    let good = StepRecord {
        step: 1,
        loss: 3.0,
        ..Default::default()
    }
    .to_json();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, format!("{good}\n{{\"step\":2,\"loss\":\n")).unwrap();
    let png = dir.join("out.png");
    let o = run(&["plot", s(&bad), "--out", s(&png)]);
    assert_eq!(o.status.code(), Some(1));
    let t = text_of(&o);
    assert!(t.contains("bad.json:2: not a step record"), "{t}");
    assert!(!png.exists());
    // An output that cannot be written is refused before the (missing) log is read.
    let o = run(&[
        "plot",
        "/nonexistent/log.json",
        "--out",
        s(&dir.join("no/dir/x.png")),
    ]);
    let t = text_of(&o);
    assert!(t.contains("--out: cannot write"), "{t}");
    assert!(!t.contains("log.json"), "{t}");
    // Not a .png name: a typo must not overwrite a log with an image.
    let o = run(&["plot", s(&bad), "--out", s(&bad)]);
    assert!(
        text_of(&o).contains("does not end in .png"),
        "{}",
        text_of(&o)
    );
    assert!(std::fs::read_to_string(&bad).unwrap().starts_with(&good));
    // No log at all is a usage error.
    let o = run(&["plot", "--out", s(&png)]);
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
