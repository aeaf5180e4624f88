//! The `nvsh-gpt` binary end to end on the CPU (`--cpu`): training with a JSON log, pipeline
//! against single-PE logs through `nvsh-gpt compare`, `summary`, and the errors users see.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{run_gpt as run, text_of, workdir, QUIET_RUN_ARGS, TINY_MODEL_ARGS};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nvsh-gpt"))
}

fn tiny_train(data: &Path, log: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["train", "--cpu", "--data", data.to_str().unwrap()];
    args.extend_from_slice(TINY_MODEL_ARGS);
    args.extend_from_slice(&[
        "--steps",
        "8",
        "--warmup",
        "2",
        "--lr",
        "3e-3",
        "--val-every",
        "4",
        "--val-batches",
        "2",
        "--sample-tokens",
        "16",
        "--timeout-ms",
        "60000",
        "--log-json",
        log.to_str().unwrap(),
    ]);
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn cpu_pipeline_logs_compare_equal_to_a_single_pe() {
    let dir = workdir("cli-compare");
    let data = dir.join("data.txt");
    std::fs::write(&data, common::text(20_000, 9)).unwrap();
    let (one, two) = (dir.join("pp1.json"), dir.join("pp2.json"));
    let o = tiny_train(&data, &one, &[]);
    assert!(o.status.success(), "{}", text_of(&o));
    let out = text_of(&o);
    assert!(
        out.contains("step     8/8 (100.0%, <1s left) | loss"),
        "{out}"
    );
    assert!(out.contains("val loss"), "{out}");
    assert!(out.contains("sample (16 tokens"), "{out}");
    assert!(out.contains("summary: 8 steps"), "{out}");
    let o = tiny_train(&data, &two, &["--pp", "2", "--schedule", "gpipe"]);
    assert!(o.status.success(), "{}", text_of(&o));

    let log = std::fs::read_to_string(&one).unwrap();
    assert_eq!(log.lines().count(), 8);
    assert!(
        log.lines().nth(3).unwrap().contains("\"val_loss\":"),
        "{log}"
    );
    assert!(!log.lines().nth(2).unwrap().contains("val_loss"), "{log}");

    let c = run(&[
        "compare",
        one.to_str().unwrap(),
        two.to_str().unwrap(),
        "--rel",
        "1e-5",
        "--steps",
        "8",
    ]);
    assert!(c.status.success(), "{}", text_of(&c));
    assert!(text_of(&c).contains("PASS"));

    // A log whose step 5 is off by 1e-4 fails, naming the step.
    let bad = dir.join("bad.json");
    let lines: Vec<String> = log
        .lines()
        .map(|l| {
            let mut r = nvsh_gpt::log::StepRecord::from_json(l).unwrap();
            if r.step == 5 {
                r.loss *= 1.0 + 1e-4;
            }
            r.to_json()
        })
        .collect();
    std::fs::write(&bad, lines.join("\n")).unwrap();
    let c = run(&[
        "compare",
        one.to_str().unwrap(),
        bad.to_str().unwrap(),
        "--rel",
        "1e-5",
    ]);
    assert_eq!(c.status.code(), Some(1), "{}", text_of(&c));
    let t = text_of(&c);
    assert!(t.contains("worst step 5") && t.contains("FAIL"), "{t}");

    let s = run(&[
        "summary",
        one.to_str().unwrap(),
        "--skip",
        "1",
        "--val-below",
        "100",
    ]);
    assert!(s.status.success());
    let t = text_of(&s);
    assert!(
        t.contains("steps=7 ") && t.contains("tok_s=") && t.contains("best_val_loss="),
        "{t}"
    );
    // Validation ran at steps 4 and 8 (--val-every 4): step 4 is the first below anything.
    assert!(t.contains("first_val_below_step=4 "), "{t}");
    let s = run(&["summary", one.to_str().unwrap(), "--val-below", "0.001"]);
    assert!(
        text_of(&s).contains("first_val_below_step=none"),
        "{}",
        text_of(&s)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn user_errors_exit_with_status_1_and_say_what_to_do() {
    let dir = workdir("cli-errors");
    let data = dir.join("data.txt");
    std::fs::write(&data, common::text(20_000, 9)).unwrap();
    let log = dir.join("x.json");
    let o = tiny_train(&dir.join("missing.txt"), &log, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text_of(&o).contains("missing.txt"), "{}", text_of(&o));
    let o = run(&[
        "train",
        "--cpu",
        "--data",
        data.to_str().unwrap(),
        "--heads",
        "5",
        "--width",
        "16",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text_of(&o).contains("multiple of the head count"),
        "{}",
        text_of(&o)
    );
    let o = run(&["compare", "/nonexistent/a.json", "/nonexistent/b.json"]);
    assert_eq!(o.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without --cpu on a machine without a GPU: a typed error and status 1, no panic.
#[test]
fn gpu_training_without_a_gpu_fails_cleanly() {
    if Path::new("/dev/nvidiactl").exists() {
        common::skip("this machine has an NVIDIA driver");
        return;
    }
    let dir = workdir("cli-nogpu");
    let data = dir.join("data.txt");
    std::fs::write(&data, common::text(20_000, 9)).unwrap();
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--context",
        "8",
        "--steps",
        "1",
        "--timeout-ms",
        "1000",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text_of(&o));
    let t = text_of(&o);
    assert!(
        t.contains("nvsh-gpt: error:") && t.contains("no CUDA"),
        "{t}"
    );
    assert!(!t.contains("panicked"), "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tiny 2-stage CPU job of the interrupt test, with every step inside warm-up (so the
/// learning rate does not depend on --steps) and no validation or sample.
fn interrupt_job(data: &Path, steps: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.args([
        "train",
        "--cpu",
        "--pp",
        "2",
        "--data",
        data.to_str().unwrap(),
    ])
    .args(TINY_MODEL_ARGS)
    .args(["--steps", steps, "--warmup", "1000000", "--lr", "3e-3"])
    .args(QUIET_RUN_ARGS)
    .args(extra);
    c
}

/// The losses of a JSON step log, by step.
fn losses(log: &Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| {
            let r = nvsh_gpt::log::StepRecord::from_json(l).unwrap();
            (r.step, r.loss)
        })
        .collect()
}

/// Ctrl-C mid-run: both stages stop after the same step and save, the exit status is 130, and a
/// resume from those checkpoints trains the next step to the loss an uninterrupted run has.
#[test]
fn ctrl_c_saves_every_stage_and_the_resume_continues_the_run() {
    use std::io::{BufRead, BufReader, Read};
    let dir = workdir("cli-sigint");
    let data = dir.join("data.txt");
    std::fs::write(&data, common::text(20_000, 9)).unwrap();
    let prefix = dir.join("ck");
    // Far more steps than the test waits for: only the signal ends it.
    let mut child = interrupt_job(&data, "1000000", &["--save", prefix.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the run ended before step 3: {seen}"
        );
        seen.push_str(&line);
        if line.starts_with("step     3/") {
            break;
        }
    }
    // SAFETY: a signal to our own child, which has not been waited for (its pid is live).
    let killed = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(
        killed,
        0,
        "kill(SIGINT): {}",
        std::io::Error::last_os_error()
    );
    stdout.read_to_string(&mut seen).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{seen}{err}");
    let stop = seen
        .lines()
        .find(|l| l.starts_with("stopping: interrupted (Ctrl-C or SIGTERM) after step "))
        .unwrap_or_else(|| panic!("no stop line: {seen}"));
    assert!(
        stop.ends_with("; saving the checkpoints, then exiting"),
        "{stop}"
    );
    let step: u64 = stop
        .split_whitespace()
        .nth(7)
        .unwrap()
        .trim_end_matches(';')
        .parse()
        .unwrap();
    assert!(step >= 3, "{stop}");
    assert!(seen.contains("saved "), "{seen}");
    for s in 0..2 {
        let path = nvsh_gpt::checkpoint::resume_path(&prefix, s, 2).unwrap();
        let ck = nvsh_gpt::checkpoint::Checkpoint::load(&path).unwrap();
        assert_eq!(ck.header.step, step, "stage {s}");
    }

    // Resumed to one more step, against a run that never stopped.
    let next = (step + 1).to_string();
    let (resumed, straight) = (dir.join("resumed.json"), dir.join("straight.json"));
    let o = interrupt_job(
        &data,
        &next,
        &[
            "--resume",
            prefix.to_str().unwrap(),
            "--log-json",
            resumed.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text_of(&o));
    let o = interrupt_job(&data, &next, &["--log-json", straight.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text_of(&o));
    let want = *losses(&straight).last().unwrap();
    assert_eq!(want.0, step + 1);
    assert_eq!(losses(&resumed), vec![want]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without --data the run trains on the generated corpus, and says so.
#[test]
fn without_data_the_generated_corpus_is_used() {
    let mut args = vec!["train", "--cpu", "--steps", "2"];
    args.extend_from_slice(TINY_MODEL_ARGS);
    args.extend_from_slice(QUIET_RUN_ARGS);
    let o = run(&args);
    let t = text_of(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("data: no --data given: 1024 KiB of generated pseudo-English (seed "),
        "{t}"
    );
    assert!(t.contains("step     2/2"), "{t}");
}
