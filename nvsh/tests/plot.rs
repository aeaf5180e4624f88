//! Charts of bench results on the CPU: `nvsh plot` draws a stored `--json` result
//! (tests/data/allreduce_2pe.json, written by hand in the format `nvsh bench allreduce --json`
//! writes), refuses what is not one naming the file and line, and `nvsh bench ... --plot`
//! checks its path before the bench starts.

mod common;

use common::{allreduce_fixture, arg as s, run_nvsh};
use nvsh::bench::family::Kind;
use nvsh::bench::stored::read_bench_json;
use std::path::PathBuf;

fn fixture() -> PathBuf {
    allreduce_fixture()
}

fn workdir(name: &str) -> PathBuf {
    common::workdir("plot", name)
}

/// The stored result draws as a PNG of two charts (time, busbw) per dtype, each with its
/// candidates' lines inside its plotting area; the title band holds text, not lines.
#[test]
fn a_stored_bench_result_draws_a_chart_per_dtype_and_measure() {
    let dir = workdir("stored");
    let png = dir.join("allreduce.png");
    let (ok, out, err) = run_nvsh(&["plot", s(&fixture()), "--out", s(&png)]);
    assert!(ok, "{out}\n{err}");
    assert!(err.contains("wrote") && err.contains("1520x1008"), "{err}");
    let img = nvsh_plot::read_png(&png).expect("a PNG");
    // f32 and bf16: 2 rows of two 760 x 480 charts under a 48-pixel title band.
    assert_eq!((img.width, img.height), (1520, 1008));
    let (fig, notes) = read_bench_json(&fixture()).unwrap().figure();
    assert_eq!(fig.size(), (img.width, img.height));
    assert!(notes.is_empty(), "{notes:?}");
    let titles: Vec<&str> = fig.panels.iter().map(|p| p.title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "f32: time per call",
            "f32: bus bandwidth",
            "bf16: time per call",
            "bf16: bus bandwidth"
        ]
    );
    assert_eq!(fig.title, "allreduce (sum), 2 PEs, NVIDIA H200, 2026-11-22");
    for (i, panel) in fig.panels.iter().enumerate() {
        // Seven candidates, nine sizes each.
        assert_eq!(panel.series.len(), 7);
        assert!(panel.series.iter().all(|s| s.points.len() == 9));
        let (xr, yr) = fig.plot_area(i);
        let coloured = img.count_coloured(xr, yr);
        assert!(coloured > 3000, "panel {i}: {coloured} coloured pixels");
        // Every candidate's colour is there: every line was drawn.
        let mut colours = std::collections::HashSet::new();
        for y in yr.0..yr.1.min(img.height) {
            for x in xr.0..xr.1.min(img.width) {
                colours.insert(img.pixel(x, y));
            }
        }
        for (c, series) in panel.series.iter().enumerate() {
            let rgb = nvsh_plot::series_rgb(series.color);
            assert!(
                colours.contains(&rgb),
                "panel {i}: no {} line",
                panel.series[c].label
            );
        }
    }
    let font = matches!(nvsh_plot::font(), nvsh_plot::FontState::Loaded(_));
    let title = img.count_unlike(
        (0, img.width),
        (0, nvsh_plot::TITLE_HEIGHT),
        nvsh_plot::BACKGROUND,
    );
    if font {
        assert!(title > 300, "title band: {title} pixels of text");
    } else {
        assert!(err.contains("no usable font"), "{err}");
    }
    assert_eq!(img.count_coloured((0, img.width), (0, 40)), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without a font (here: NVSH_PLOT_FONT names a missing file) the chart is drawn without
/// text, with a warning saying why and what to install; the lines are all there.
#[test]
fn without_a_font_the_chart_has_its_lines_and_no_text() {
    let dir = workdir("nofont");
    let png = dir.join("a.png");
    let out = std::process::Command::new(common::nvsh_path())
        .args(["plot", s(&fixture()), "--out", s(&png)])
        .env(nvsh_plot::FONT_ENV, dir.join("missing.ttf"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("nvsh: warning: no usable font")
            && err.contains("fonts-dejavu-core")
            && err.contains("missing.ttf"),
        "{err}"
    );
    let img = nvsh_plot::read_png(&png).unwrap();
    assert_eq!((img.width, img.height), (1520, 1008));
    let (fig, _) = read_bench_json(&fixture()).unwrap().figure();
    for i in 0..fig.panels.len() {
        let (xr, yr) = fig.plot_area(i);
        assert!(img.count_coloured(xr, yr) > 3000, "panel {i}");
    }
    // No title: the band above the charts is blank.
    let title = img.count_unlike(
        (0, img.width),
        (0, nvsh_plot::TITLE_HEIGHT),
        nvsh_plot::BACKGROUND,
    );
    assert_eq!(title, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A broken file is refused naming the file, line and column; nothing is written.
#[test]
fn a_file_that_is_not_a_bench_result_is_refused_naming_file_and_line() {
    let dir = workdir("bad");
    let bad = dir.join("broken.json");
    // Spread over lines as a person might edit it; line 3's value is missing, which the parser
    // finds at the start of line 4.
    let text = std::fs::read_to_string(fixture()).unwrap();
    let broken = text
        .replacen("\"collective\"", "\n\"collective\"", 1)
        .replacen("\"n_pes\":2", "\n\"n_pes\":\n", 1);
    std::fs::write(&bad, broken).unwrap();
    let png = dir.join("out.png");
    let (ok, _, err) = run_nvsh(&["plot", s(&bad), "--out", s(&png)]);
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "{}:4:1: not a result of `nvsh bench",
            bad.display()
        )),
        "{err}"
    );
    assert!(!png.exists());
    // Another program's JSON, and a missing file.
    std::fs::write(&bad, "{\"step\":1,\"loss\":2.5}\n").unwrap();
    let (ok, _, err) = run_nvsh(&["plot", s(&bad), "--out", s(&png)]);
    assert!(!ok && err.contains("no \"schema\" field"), "{err}");
    let (ok, _, err) = run_nvsh(&["plot", s(&dir.join("none.json")), "--out", s(&png)]);
    assert!(
        !ok && err.contains("cannot read") && err.contains("none.json"),
        "{err}"
    );
    assert!(!png.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// --out of `nvsh plot` must be a writable PNG path; a refusal leaves the JSON alone.
#[test]
fn plot_refuses_an_output_that_is_not_a_writable_png() {
    let dir = workdir("out");
    let copy = dir.join("r.json");
    std::fs::copy(fixture(), &copy).unwrap();
    let (ok, _, err) = run_nvsh(&["plot", s(&copy), "--out", s(&copy)]);
    assert!(!ok && err.contains("does not end in .png"), "{err}");
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        std::fs::read(fixture()).unwrap()
    );
    let (ok, _, err) = run_nvsh(&["plot", s(&copy), "--out", s(&dir.join("no/dir/x.png"))]);
    assert!(!ok && err.contains("--out: cannot write"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every bench takes --plot and checks it before NVSHMEM starts: on this machine (no GPU
/// needed) a bad path is reported as such, not as a missing driver.
#[test]
fn every_bench_checks_its_plot_path_before_it_starts() {
    let dir = workdir("bench");
    let missing = dir.join("no/such/dir/chart.png");
    // The family's subcommands come from the table of collectives: every one of them.
    let family = Kind::all();
    let benches = ["put", "allreduce"]
        .into_iter()
        .chain(family.iter().map(|k| k.name()));
    for bench in benches {
        let (ok, _, err) = run_nvsh(&["bench", bench, "--plot", s(&missing)]);
        assert!(!ok, "{bench}");
        assert!(
            err.contains("--plot: cannot write") && err.contains("nothing was run"),
            "{bench}: {err}"
        );
        let (ok, _, err) = run_nvsh(&["bench", bench, "--plot", s(&dir.join("r.json"))]);
        assert!(
            !ok && err.contains("does not end in .png"),
            "{bench}: {err}"
        );
        // --out is checked the same way, and may not be the chart's file.
        let (ok, _, err) = run_nvsh(&["bench", bench, "--json", "--out", s(&missing)]);
        assert!(!ok && err.contains("--out: cannot write"), "{bench}: {err}");
        let png = dir.join("same.png");
        let (ok, _, err) = run_nvsh(&["bench", bench, "--out", s(&png), "--plot", s(&png)]);
        assert!(!ok && err.contains("is also --out"), "{bench}: {err}");
    }
    // Nothing was left behind by the checks.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
