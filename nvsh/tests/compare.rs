//! `nvsh compare` on the CPU, over the stored allreduce result (tests/data/allreduce_2pe.json)
//! and copies of it changed here: the ratios it prints against the ones the bench wrote, a
//! wrong output failing the command, and files it cannot compare refused by name.

mod common;

use common::{allreduce_fixture, arg as s, run_nvsh};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    allreduce_fixture()
}

fn workdir(name: &str) -> PathBuf {
    common::workdir("compare", name)
}

/// The fixture with `change` applied to every row's `auto` cell, written to `dir/name`.
fn changed(dir: &Path, name: &str, change: impl Fn(&mut Value)) -> PathBuf {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(fixture()).unwrap()).unwrap();
    for row in v["rows"].as_array_mut().unwrap() {
        change(&mut row["results"]["auto"]);
    }
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

/// Against a copy whose `auto` took twice as long: 0.500 at every size; against NCCL, each
/// row's ratio as the bench itself wrote it (`ratio_auto_over_nccl`).
#[test]
fn ratios_against_a_slower_copy_and_against_the_benchs_own() {
    let dir = workdir("ratios");
    let slow = changed(&dir, "slow.json", |c| {
        c["us"] = (c["us"].as_f64().unwrap() * 2.0).into();
    });
    let (ok, out, err) = run_nvsh(&["compare", s(&fixture()), "--before", s(&slow)]);
    assert!(ok, "{err}");
    assert!(
        out.contains("# nvsh compare: allreduce sum, 2 PEs, NVIDIA H200; candidate `auto`"),
        "{out}"
    );
    assert!(out.contains("0 wrong"), "{out}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .collect();
    let bench: Value = serde_json::from_str(&std::fs::read_to_string(fixture()).unwrap()).unwrap();
    let want = bench["rows"].as_array().unwrap();
    assert_eq!(rows.len(), want.len(), "{out}");
    for (line, row) in rows.iter().zip(want) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // size dtype before (c) after (c) after/before (c) vs (c) wrong
        assert_eq!(cols[1], row["dtype"].as_str().unwrap(), "{line}");
        assert_eq!(cols[6], "0.500", "{line}");
        let ratio: f64 = cols[8].parse().unwrap();
        let theirs = row["ratio_auto_over_nccl"].as_f64().unwrap();
        assert!((ratio - theirs).abs() < 6e-4, "{line}: bench said {theirs}");
        assert_eq!(cols[10], "0", "{line}");
    }
    let (ok, json, err) = run_nvsh(&["compare", s(&fixture()), "--before", s(&slow), "--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["baselines"], serde_json::json!(["nccl"]));
    assert_eq!(v["rows"][0]["after_over_before"], serde_json::json!(0.5));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run with wrong outputs: its cells are left out, the count is said and the command fails.
#[test]
fn wrong_outputs_fail_the_command() {
    let dir = workdir("wrong");
    let bad = changed(&dir, "bad.json", |c| c["wrong"] = 2.into());
    let (ok, out, err) = run_nvsh(&["compare", s(&bad), "--before", s(&fixture())]);
    assert!(!ok, "{out}");
    assert!(err.contains("wrong outputs in the files read"), "{err}");
    assert!(
        out.contains(" wrong (cells with wrong outputs are left out)"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What cannot be compared is refused, naming the file.
#[test]
fn other_collectives_and_put_results_are_refused_by_name() {
    let dir = workdir("refused");
    let text = std::fs::read_to_string(fixture()).unwrap();
    let other = dir.join("other.json");
    std::fs::write(&other, text.replace("\"n_pes\":2", "\"n_pes\":4")).unwrap();
    let (ok, _, err) = run_nvsh(&["compare", s(&fixture()), "--before", s(&other)]);
    assert!(!ok);
    assert!(
        err.contains("other.json holds allreduce (sum) on 4 PEs"),
        "{err}"
    );
    let put = dir.join("put.json");
    std::fs::write(
        &put,
        r#"{"schema":1,"n_pes":2,"gpu":"x","bandwidth":[{"bytes":4096,"us_per_put":1.0,"gbps":4.0}]}"#,
    )
    .unwrap();
    let (ok, _, err) = run_nvsh(&["compare", s(&put)]);
    assert!(!ok);
    assert!(err.contains("put.json is a put bench's result"), "{err}");
    let (ok, _, err) = run_nvsh(&["compare", s(&fixture()), "--candidate", "ring2"]);
    assert!(!ok);
    assert!(err.contains("has no candidate `ring2`"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
