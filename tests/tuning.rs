//! Autotuning (issue 23) on GPUs: the tuner's maximum over PEs, a stalled PE, user candidates,
//! online tuning (and its refusal under graph capture), tuning files for other machines,
//! corrupt files and PEs that disagree. Run by scripts/gpu_test.sh (tests named peN_* run as
//! N-PE jobs; several PEs may share one GPU: nothing here depends on speed beyond sleeps of
//! many milliseconds).
//!
//! Results are checked against a CPU reference: small integers in f32, whose sums are exact.

mod common;

use common::{gpu_test, runtime, WAIT};
use nvshmem::tools::select;
use nvshmem::tools::tuning;
use nvshmem::{
    AllreduceAlgo, Broadcast, Dtype, Error, Nvshmem, ReduceOp, SymmetricBuffer, UserCandidate,
};
use nvshmem::{Fingerprint, Loaded, TuneMode, TuningTable, TUNE_ENV, TUNING_FILE_ENV};
use std::cell::Cell;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn value(pe: usize, i: usize, salt: usize) -> f32 {
    ((pe * 7 + i * 3 + salt * 11) % 17) as f32
}

fn fill(nv: &Nvshmem, buf: &SymmetricBuffer<'_, f32>, count: usize, salt: usize) {
    let me = nv.my_pe() as usize;
    let data: Vec<f32> = (0..count).map(|i| value(me, i, salt)).collect();
    buf.view(0..count).unwrap().copy_from_host(&data).unwrap();
}

/// Checks the first `count` elements of `buf` against the sum over PEs (the CPU reference).
fn check_sum(nv: &Nvshmem, buf: &SymmetricBuffer<'_, f32>, count: usize, salt: usize, what: &str) {
    let n = nv.n_pes() as usize;
    let got = buf.view(0..count).unwrap().to_vec().unwrap();
    for (i, g) in got.iter().enumerate() {
        let want: f32 = (0..n).map(|p| value(p, i, salt)).sum();
        assert_eq!(*g, want, "{what}: element {i} of {count}");
    }
}

fn poison(buf: &SymmetricBuffer<'_, f32>, count: usize) {
    buf.view(0..count)
        .unwrap()
        .copy_from_host(&vec![f32::NAN; count])
        .unwrap();
}

/// A line libtest does not capture (as common::skip writes).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{line}");
    let _ = out.flush();
}

/// A file of this process's own (PEs of a job may share /tmp).
fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "nvsh-tuning-test-{}-{name}.json",
        std::process::id()
    ))
}

/// The built-in table's choice for `bytes` of f32 on `n` PEs.
fn builtin(n: i32, bytes: usize) -> AllreduceAlgo {
    select(nvshmem::tools::SELECTION, n, bytes, Dtype::F32).unwrap()
}

/// The same value on every PE: its maximum equals its minimum (through our allreduce).
fn assert_same_everywhere(nv: &Nvshmem, v: f64, what: &str) {
    let buf = nv.alloc::<f64>(2).unwrap();
    buf.copy_from_host(&[v, -v]).unwrap();
    let mut ar = nv.allreduce_workspace(4096).unwrap();
    ar.run_in_place(&buf, ReduceOp::Max, AllreduceAlgo::OneShot, nv.stream())
        .unwrap();
    ar.sync(nv.stream()).unwrap();
    let got = buf.to_vec().unwrap();
    assert_eq!(got[0], -got[1], "{what} differs between PEs: {got:?}");
}

gpu_test!(2, the_slowest_pe_of_each_run_sets_the_time);
fn the_slowest_pe_of_each_run_sets_the_time() {
    slowest_pe_sets_the_time(2);
}

gpu_test!(3, the_slowest_of_three_pes_sets_the_time);
fn the_slowest_of_three_pes_sets_the_time() {
    slowest_pe_sets_the_time(3);
}

/// The last PE sleeps inside one candidate's runs (between its start and stop events); the
/// others do nothing there. Every PE must report that candidate at the sleeper's time, while
/// their own clocks saw next to nothing.
fn slowest_pe_sets_the_time(pes: i32) {
    let nv = runtime(pes);
    let me = nv.my_pe();
    let slow = pes - 1;
    let stall = Duration::from_millis(20);
    let mut tuner = nv.tuner().unwrap();
    tuner.set_runs(1, 3);
    tuner.set_timeout(WAIT);
    let m = tuner
        .measure(
            &["even", "slow-on-one-pe"],
            |k, _| {
                if k == 1 && me == slow {
                    std::thread::sleep(stall);
                }
                Ok(())
            },
            nv.stream(),
        )
        .unwrap();
    let half = stall.as_secs_f64() * 1e6 / 2.0;
    let slow_us = m.time_of("slow-on-one-pe").unwrap();
    assert!(
        slow_us >= half,
        "PE {me}: the slow PE's {stall:?} must dominate, got {slow_us} us"
    );
    assert!(
        m.candidates[1].runs_us.iter().all(|&us| us >= half),
        "{m:?}"
    );
    if me != slow {
        assert!(
            m.candidates[1].local_us < half,
            "PE {me} did not sleep, yet its own clock says {} us",
            m.candidates[1].local_us
        );
    }
    assert_eq!(m.winner().name, "even");
    assert_same_everywhere(&nv, slow_us, "the slow candidate's time");
    assert_same_everywhere(&nv, m.best as f64, "the winner");
}

gpu_test!(2, a_stalled_pe_ends_tuning_in_a_timeout_naming_it);
fn a_stalled_pe_ends_tuning_in_a_timeout_naming_it() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let mut tuner = nv.tuner().unwrap();
    let timeout = Duration::from_millis(500);
    tuner.set_runs(0, 3);
    tuner.set_timeout(timeout);
    let started = Instant::now();
    let first = Cell::new(true);
    // PE 1 stalls in its first run for 6 timeouts: PE 0's next barrier gives up on it, and PE
    // 1, back, finds PE 0's later barriers never arrive.
    let stall = timeout * 6;
    let r = tuner.measure(
        &["candidate"],
        |_, _| {
            if me == 1 && first.replace(false) {
                std::thread::sleep(stall);
            }
            Ok(())
        },
        nv.stream(),
    );
    let took = started.elapsed();
    // Both stay alive until both have failed: a process that exits takes its memory with it,
    // and a peer's stores into that would fail otherwise than by the timeout under test.
    std::thread::sleep((stall + timeout * 4).saturating_sub(took));
    let err = r.expect_err("a stalled peer must end the tuning in an error");
    let text = err.to_string();
    let other = 1 - me;
    assert!(
        matches!(err, Error::Timeout { .. } | Error::PeerFailed { .. }),
        "PE {me}: {err:?}"
    );
    assert!(
        text.contains(&format!("PE {other}")),
        "PE {me}: the error must name PE {other}: {text}"
    );
    assert!(took < Duration::from_secs(30), "PE {me} took {took:?}");
}

gpu_test!(2, a_user_candidate_is_timed_and_can_win);
fn a_user_candidate_is_timed_and_can_win() {
    let nv = runtime(2);
    let stream = nv.stream();
    let count = 4 << 20; // 16 MiB of f32: every algorithm of ours takes tens of microseconds
    let input = nv.alloc::<f32>(count).unwrap();
    let output = nv.alloc::<f32>(count).unwrap();
    fill(&nv, &input, count, 1);
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    let mut tuner = nv.tuner().unwrap();
    let (warmup, runs) = (1, 4);
    tuner.set_runs(warmup, runs);
    tuner.set_timeout(WAIT);
    let (noop_calls, slow_calls) = (Cell::new(0), Cell::new(0));
    let big = std::cell::RefCell::new(stream.alloc_zeros::<u8>(1 << 30).unwrap());
    let mut user = [
        UserCandidate::new("noop", |_| {
            noop_calls.set(noop_calls.get() + 1);
            Ok(())
        }),
        // Slow GPU work in stream order (what the tuner times; a host sleep is not timed once
        // the stream has a backlog): 16 memsets of 1 GiB, milliseconds on any GPU.
        // (On `stream`, the one the tuner is given and passes on.)
        UserCandidate::new("slow", |_| {
            slow_calls.set(slow_calls.get() + 1);
            for _ in 0..16 {
                stream.memset_zeros(&mut *big.borrow_mut())?;
            }
            Ok(())
        }),
    ];
    let m = tuner
        .tune_allreduce(
            &mut ar,
            &input,
            &output,
            ReduceOp::Sum,
            &AllreduceAlgo::ALL,
            &mut user,
            stream,
        )
        .unwrap();
    assert_eq!(m.candidates.len(), 6);
    assert_eq!(noop_calls.get(), warmup + runs);
    assert_eq!(slow_calls.get(), warmup + runs);
    assert_eq!(m.winner().name, "noop", "{m:?}");
    assert!(m.time_of("slow").unwrap() >= 1000.0, "{m:?}");
    for a in AllreduceAlgo::ALL {
        assert!(m.time_of(a.name()).unwrap() > 0.0, "{m:?}");
    }
    assert_same_everywhere(&nv, m.time_of("twoshot").unwrap(), "twoshot's time");
    // The tuning left the workspace sound: every algorithm still sums right.
    for (k, a) in AllreduceAlgo::ALL.into_iter().enumerate() {
        poison(&output, count);
        ar.run(&input, &output, ReduceOp::Sum, a, stream).unwrap();
        ar.sync(stream).unwrap();
        check_sum(
            &nv,
            &output,
            count,
            1,
            &format!("{} after tuning ({k})", a.name()),
        );
    }
}

/// Sets what init reads for tuning (before init: each test is a process of its own).
fn tuning_env(mode: Option<&str>, file: Option<&str>) {
    match mode {
        Some(m) => std::env::set_var(TUNE_ENV, m),
        None => std::env::remove_var(TUNE_ENV),
    }
    // Never the user's cache: a tuning file there would change what these tests see.
    std::env::set_var(TUNING_FILE_ENV, file.unwrap_or("none"));
}

gpu_test!(2, online_tuning_tunes_each_bucket_once_and_sums_stay_right);
fn online_tuning_tunes_each_bucket_once_and_sums_stay_right() {
    tuning_env(Some("online"), None);
    let nv = runtime(2);
    assert_eq!(nv.tune_mode(), TuneMode::Online);
    let stream = nv.stream();
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    assert!(ar.tunes_online());
    let max = 4 << 20;
    let input = nv.alloc::<f32>(max).unwrap();
    let output = nv.alloc::<f32>(max).unwrap();
    // (f32 count, in place, new bucket?)
    let calls = [
        (1024, false, true),      // 4 KiB
        (1024, false, false),     // again
        (700, false, false),      // 2800 bytes: the same (2K, 4K] bucket
        (16 << 10, false, true),  // 64 KiB
        (64 << 10, true, true),   // 256 KiB, in place: the data must survive the tuning
        (256 << 10, false, true), // 1 MiB
        (4 << 20, false, true),   // 16 MiB: several segments
        (4 << 20, true, false),
    ];
    let mut tuned = 0;
    for (salt, &(count, in_place, new)) in calls.iter().enumerate() {
        fill(&nv, &input, count, salt);
        let used = if in_place {
            ar.run_in_place(
                input.view(0..count).unwrap(),
                ReduceOp::Sum,
                AllreduceAlgo::Auto,
                stream,
            )
            .unwrap()
        } else {
            poison(&output, count);
            ar.run(
                input.view(0..count).unwrap(),
                output.view(0..count).unwrap(),
                ReduceOp::Sum,
                AllreduceAlgo::Auto,
                stream,
            )
            .unwrap()
        };
        ar.sync(stream).unwrap();
        let what = format!("call {salt}: {count} f32 by {}", used.name());
        check_sum(
            &nv,
            if in_place { &input } else { &output },
            count,
            salt,
            &what,
        );
        tuned += new as usize;
        assert_eq!(ar.online_tunings().len(), tuned, "{what}");
        let last = ar.online_tunings().last().unwrap();
        if new {
            assert_eq!(last.choice, used, "{what}");
            assert_eq!(last.bytes, count * 4);
        }
        // The choice is in the runtime's table, where choose() and a save find it.
        let bytes = count * 4;
        let table = nv.tuning_table();
        assert_eq!(
            table.lookup("allreduce", bytes, 4),
            Some(used.name()),
            "{what}"
        );
        assert_eq!(ar.choose(bytes, Dtype::F32), used, "{what}");
        assert_same_everywhere(
            &nv,
            AllreduceAlgo::ALL.iter().position(|&a| a == used).unwrap() as f64,
            &what,
        );
    }
    let walls: Vec<f64> = ar
        .online_tunings()
        .iter()
        .map(|t| t.wall.as_secs_f64() * 1e3)
        .collect();
    let mut sorted = walls.clone();
    sorted.sort_by(f64::total_cmp);
    say(&format!(
        "online tuning on PE {}: {} buckets, wall ms {:?}, median {:.2} ms",
        nv.my_pe(),
        walls.len(),
        walls,
        sorted[sorted.len() / 2]
    ));
    // Saved and read back: the same table for this machine.
    let path = temp_file("online");
    let written = nv.save_tuning(Some(&path)).unwrap();
    assert_eq!(written, path);
    assert_eq!(
        tuning::load(&path, &nv.tuning_fingerprint()),
        Loaded::Table(nv.tuning_table())
    );
    let _ = std::fs::remove_file(&path);
}

gpu_test!(2, graph_capture_with_online_tuning_on_uses_the_table);
fn graph_capture_with_online_tuning_on_uses_the_table() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    tuning_env(Some("online"), None);
    let nv = runtime(2);
    let n = nv.n_pes();
    let stream = nv.stream().clone();
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    let count = 64 << 10; // 256 KiB of f32
    let input = nv.alloc::<f32>(count).unwrap();
    let output = nv.alloc::<f32>(count).unwrap();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let used = ar
        .run(&input, &output, ReduceOp::Sum, AllreduceAlgo::Auto, &stream)
        .unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph was captured");
    assert_eq!(
        used,
        builtin(n, count * 4),
        "under capture the built-in table answers"
    );
    assert!(ar.online_tunings().is_empty(), "no tuning under capture");
    assert!(nv.tuning_table().is_empty());
    for it in 0..3 {
        fill(&nv, &input, count, it);
        poison(&output, count);
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        ar.check().unwrap();
        check_sum(&nv, &output, count, it, &format!("replay {it}"));
    }
    // Outside capture the same call tunes its bucket.
    fill(&nv, &input, count, 9);
    poison(&output, count);
    ar.run(&input, &output, ReduceOp::Sum, AllreduceAlgo::Auto, &stream)
        .unwrap();
    ar.sync(&stream).unwrap();
    check_sum(&nv, &output, count, 9, "after capture");
    assert_eq!(ar.online_tunings().len(), 1);
}

/// A tuning file whose one entry is `fp`'s, with every allreduce size on `algo` and every
/// broadcast on puts.
fn file_for(fp: &Fingerprint, algo: AllreduceAlgo) -> String {
    let mut table = TuningTable::default();
    for elem in [2, 4, 8] {
        table.insert("allreduce", elem, 0, u64::MAX, algo.name());
    }
    table.insert("broadcast", 4, 0, u64::MAX, "put");
    let file = tuning::TuningFile {
        format: tuning::FORMAT_VERSION,
        entries: vec![tuning::TuningEntry {
            fingerprint: fp.clone(),
            created: None,
            tables: table,
        }],
    };
    serde_json::to_string_pretty(&file).unwrap()
}

/// An algorithm the built-in table never picks at 4 KiB on 2 PEs.
const UNUSUAL: AllreduceAlgo = AllreduceAlgo::Ring;

gpu_test!(
    2,
    a_tuning_file_for_another_machine_is_ignored_and_ours_is_used
);
fn a_tuning_file_for_another_machine_is_ignored_and_ours_is_used() {
    let other = Fingerprint {
        gpu: "a GPU this machine does not have".into(),
        gpus: 64,
        link: "nvlink".into(),
        p2p_rank: 0,
        pes: 2,
        nvshmem: "0.0.1".into(),
        runtime: "0.0.0".into(),
    };
    let path = temp_file("other");
    std::fs::write(&path, file_for(&other, UNUSUAL)).unwrap();
    tuning_env(None, Some(path.to_str().unwrap()));
    let nv = runtime(2);
    let n = nv.n_pes();
    let stream = nv.stream();
    assert!(
        nv.tuning_table().is_empty(),
        "another machine's table was loaded"
    );
    assert!(
        nv.tuning_source().contains("other machines"),
        "{}",
        nv.tuning_source()
    );
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    assert_eq!(builtin(n, 4096), AllreduceAlgo::OneShot);
    assert_eq!(ar.choose(4096, Dtype::F32), builtin(n, 4096));
    // This machine's own file is used: its choice for allreduce, puts for broadcast.
    let ours = temp_file("ours");
    std::fs::write(&ours, file_for(&nv.tuning_fingerprint(), UNUSUAL)).unwrap();
    assert!(matches!(
        nv.load_tuning_file(&ours).unwrap(),
        Loaded::Table(_)
    ));
    assert_eq!(ar.choose(4096, Dtype::F32), UNUSUAL);
    let count = 1024;
    let input = nv.alloc::<f32>(count).unwrap();
    let output = nv.alloc::<f32>(count).unwrap();
    fill(&nv, &input, count, 3);
    poison(&output, count);
    let used = ar
        .run(&input, &output, ReduceOp::Sum, AllreduceAlgo::Auto, stream)
        .unwrap();
    ar.sync(stream).unwrap();
    assert_eq!(used, UNUSUAL);
    check_sum(&nv, &output, count, 3, "tuned allreduce");
    // Broadcast on puts (the file's choice) still delivers the root's data.
    let mut b = Broadcast::world(&nv).unwrap();
    poison(&output, count);
    b.run(&input, &output, 0, stream).unwrap();
    b.sync(stream).unwrap();
    let got = output.to_vec().unwrap();
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, value(0, i, 3), "broadcast element {i}");
    }
    // A truncated file: survived, back to the built-in table.
    let text = file_for(&nv.tuning_fingerprint(), UNUSUAL);
    std::fs::write(&ours, &text[..text.len() / 2]).unwrap();
    assert!(matches!(
        nv.load_tuning_file(&ours).unwrap(),
        Loaded::Corrupt(_)
    ));
    assert!(nv.tuning_table().is_empty());
    assert_eq!(ar.choose(4096, Dtype::F32), builtin(n, 4096));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&ours);
}

gpu_test!(2, a_corrupt_tuning_file_at_init_is_survived);
fn a_corrupt_tuning_file_at_init_is_survived() {
    let path = temp_file("corrupt");
    std::fs::write(
        &path,
        "{\"format\": 1, \"entries\": [{\"fingerprint\": {\"gpu\": \"H",
    )
    .unwrap();
    tuning_env(Some("online"), Some(path.to_str().unwrap()));
    let nv = runtime(2);
    assert!(nv.tuning_table().is_empty());
    assert!(
        nv.tuning_source().contains("unusable"),
        "{}",
        nv.tuning_source()
    );
    // Online tuning still works from the built-in start.
    assert_eq!(nv.tune_mode(), TuneMode::Online);
    let stream = nv.stream();
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    let count = 4096;
    let input = nv.alloc::<f32>(count).unwrap();
    let output = nv.alloc::<f32>(count).unwrap();
    fill(&nv, &input, count, 5);
    ar.run(&input, &output, ReduceOp::Sum, AllreduceAlgo::Auto, stream)
        .unwrap();
    ar.sync(stream).unwrap();
    check_sum(&nv, &output, count, 5, "after a corrupt file");
    let _ = std::fs::remove_file(&path);
}

gpu_test!(2, pes_that_disagree_on_tuning_all_use_the_built_in_tables);
fn pes_that_disagree_on_tuning_all_use_the_built_in_tables() {
    // Rank 0 asks for online tuning, rank 1 does not: Auto must still pick alike.
    let rank = nvshmem::launcher_env().ok().flatten().map_or(0, |l| l.rank);
    tuning_env(if rank == 0 { Some("online") } else { None }, None);
    let nv = runtime(2);
    assert_eq!(nv.tune_mode(), TuneMode::Off, "PE {}", nv.my_pe());
    assert!(
        nv.tuning_source().contains("differed"),
        "{}",
        nv.tuning_source()
    );
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    assert!(!ar.tunes_online());
    let count = 2048;
    let input = nv.alloc::<f32>(count).unwrap();
    let output = nv.alloc::<f32>(count).unwrap();
    fill(&nv, &input, count, 6);
    ar.run(
        &input,
        &output,
        ReduceOp::Sum,
        AllreduceAlgo::Auto,
        nv.stream(),
    )
    .unwrap();
    ar.sync(nv.stream()).unwrap();
    check_sum(&nv, &output, count, 6, "after disagreement");
}
