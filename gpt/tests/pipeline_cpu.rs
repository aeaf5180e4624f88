//! The trainer's pipeline logic on the CPU backend (reference kernels, one thread per PE):
//! the whole-model gradient against finite differences, pipeline and data-parallel runs
//! against a single PE, checkpoint resume, sampling across stages, and learning.
//!
//! These run the same Trainer code as the GPU binary; only the kernels (reference.rs instead
//! of ops.rs) and the transport (threads instead of NVSHMEM channels) differ.

mod common;

use common::{dataset, max_rel, run_config, run_cpu, save_resume_options, tiny};
use nvsh_gpt::backend::CpuBackend;
use nvsh_gpt::checkpoint::{latest_path, set_dir, set_stage_path};
use nvsh_gpt::comm::LocalComm;
use nvsh_gpt::cpu::run_local;
use nvsh_gpt::data::Loader;
use nvsh_gpt::rng::Rng;
use nvsh_gpt::schedule::ScheduleKind;
use nvsh_gpt::session::SessionOptions;
use nvsh_gpt::trainer::Trainer;
use std::sync::{Arc, Mutex};

const SCHEDULES: [ScheduleKind; 2] = [ScheduleKind::GPipe, ScheduleKind::OneFOneB];

/// The gradient of the composed model (every block, head, tied or untied embedding) agrees
/// with central differences of its loss. Tolerances: the loss is a mean of f32 per-token
/// losses (resolution ~1e-7 relative), so with steps of 1e-2 (single weights) and 1e-3 (a unit
/// direction) the differences are good to ~1e-4 absolute and ~1e-3 relative; wiring mistakes
/// (a wrong buffer, a missing accumulation) are off by O(1).
#[test]
fn whole_model_gradient_matches_finite_differences() {
    for tied in [true, false] {
        let run = run_config(tiny(2, tied), 1, 1, 2, ScheduleKind::OneFOneB);
        let data = dataset();
        let comm = LocalComm::world(1, 1, 2, run.timeout)
            .unwrap()
            .pop()
            .unwrap();
        let be = CpuBackend::new();
        let mut tr = Trainer::new(&be, comm, run.clone(), data.clone()).unwrap();
        let batch = Loader::new(5).next_step(&data, 4, 8, 0, 1);
        let (loss, grads) = tr
            .loss_and_grads(&batch.inputs, &batch.targets, true)
            .unwrap();
        assert!((loss - 256f64.ln()).abs() < 0.1, "initial loss {loss}");
        let theta = tr.params().unwrap();
        let mut at = |p: &[f32]| {
            tr.set_params(p).unwrap();
            tr.loss_and_grads(&batch.inputs, &batch.targets, false)
                .unwrap()
                .0
        };

        // Single weights: the largest gradient of every tensor.
        let layout = tr_layout(&run, tied);
        for t in &layout {
            let (name, off, len) = t;
            let (k, g) = (*off..off + len)
                .map(|k| (k, grads[k]))
                .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
                .unwrap();
            let h = 1e-2f32;
            let mut p = theta.clone();
            p[k] += h;
            let up = at(&p);
            p[k] -= 2.0 * h;
            let down = at(&p);
            let fd = (up - down) / (2.0 * h as f64);
            let err = (fd - g as f64).abs();
            assert!(
                err <= 2e-4 + 0.03 * (g as f64).abs(),
                "tied {tied}: {name}[{}]: gradient {g} vs finite difference {fd}",
                k - off
            );
            assert!(g.abs() > 1e-5, "tied {tied}: {name} has no gradient at all");
        }

        // A random unit direction through all parameters at once.
        let mut r = Rng::new(11);
        let mut u: Vec<f32> = (0..theta.len()).map(|_| r.normal() as f32).collect();
        let norm = u.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt() as f32;
        u.iter_mut().for_each(|x| *x /= norm);
        let h = 1e-3f32;
        let plus: Vec<f32> = theta.iter().zip(&u).map(|(a, b)| a + h * b).collect();
        let minus: Vec<f32> = theta.iter().zip(&u).map(|(a, b)| a - h * b).collect();
        let fd = (at(&plus) - at(&minus)) / (2.0 * h as f64);
        let dot: f64 = grads
            .iter()
            .zip(&u)
            .map(|(g, x)| *g as f64 * *x as f64)
            .sum();
        assert!(
            (fd - dot).abs() <= 1e-4 + 0.01 * dot.abs(),
            "tied {tied}: directional derivative {dot} vs finite difference {fd}"
        );
    }
}

/// (name, offset, len) of every tensor of the single-stage layout.
fn tr_layout(run: &nvsh_gpt::trainer::RunConfig, _tied: bool) -> Vec<(String, usize, usize)> {
    let l = nvsh_gpt::params::StageLayout::new(&run.model, &run.split, 0);
    l.tensors
        .iter()
        .map(|t| (t.name.clone(), t.offset, t.len))
        .collect()
}

/// PP = 2 and 3 with both schedules and a tied or untied head give the losses, gradient norms
/// and weights of one PE. On the CPU the arithmetic is identical except the order in which the
/// tied embedding's two gradient halves are summed, so 1e-5 relative (the GPU acceptance
/// bound) is loose here.
#[test]
fn pipeline_runs_match_a_single_pe() {
    let data = dataset();
    for tied in [true, false] {
        let model = tiny(3, tied);
        let single = run_cpu(
            &run_config(model.clone(), 1, 1, 4, ScheduleKind::OneFOneB),
            data.clone(),
            6,
            0,
        );
        let reference = &single[0];
        assert!(reference.losses[5] < reference.losses[0]);
        for pp in [2, 3] {
            for kind in SCHEDULES {
                let outs = run_cpu(
                    &run_config(model.clone(), pp, 1, 4, kind),
                    data.clone(),
                    6,
                    0,
                );
                let what = format!("tied {tied}, pp {pp}, {kind}");
                for o in &outs {
                    // Every PE reports the same (reduced) loss and norm.
                    let r = max_rel(&o.losses, &reference.losses, 1e-3);
                    assert!(
                        r <= 1e-5,
                        "{what}: losses {:?} vs {:?}",
                        o.losses,
                        reference.losses
                    );
                    assert!(
                        max_rel(&o.norms, &reference.norms, 1e-3) <= 1e-5,
                        "{what}: norms"
                    );
                    assert!(
                        (o.val - reference.val).abs() <= 1e-5 * reference.val,
                        "{what}: val"
                    );
                    // Receive waits split into measured bubble and transfer: the later stages
                    // wait at least for the first activations.
                    for &(wait, bubble, transfer) in &o.shares {
                        assert!((wait - bubble - transfer).abs() <= 1e-9 * wait.max(1.0));
                        assert!(wait > 0.0 && bubble >= 0.0 && transfer > 0.0, "{what}");
                    }
                    for (name, p) in &o.params {
                        let want = &reference.params[name];
                        let diff = p
                            .iter()
                            .zip(want)
                            .map(|(a, b)| (a - b).abs())
                            .fold(0.0, f32::max);
                        assert!(diff <= 1e-5, "{what}: {name} differs by {diff}");
                    }
                }
                // Together the stages hold every tensor of the single PE.
                let mut names: Vec<&String> = outs.iter().flat_map(|o| o.params.keys()).collect();
                names.sort();
                names.dedup();
                assert_eq!(names.len(), reference.params.len(), "{what}");
            }
        }
    }
}

/// Two data-parallel replicas of 2 micro-batches each see the data of one PE with 4
/// micro-batches (replica r takes the r-th half of the step's draw) and average to its
/// gradient; with a pipeline too (PP = 2 x DP = 2).
#[test]
fn data_parallel_replicas_match_one_pe_with_their_combined_batch() {
    let data = dataset();
    let model = tiny(2, true);
    let one = run_cpu(
        &run_config(model.clone(), 1, 1, 4, ScheduleKind::OneFOneB),
        data.clone(),
        5,
        0,
    );
    for pp in [1, 2] {
        let outs = run_cpu(
            &run_config(model.clone(), pp, 2, 2, ScheduleKind::OneFOneB),
            data.clone(),
            5,
            0,
        );
        for (pe, o) in outs.iter().enumerate() {
            let r = max_rel(&o.losses, &one[0].losses, 1e-3);
            assert!(
                r <= 2e-5,
                "pp {pp} dp 2 PE {pe}: {:?} vs {:?}",
                o.losses,
                one[0].losses
            );
            for (name, p) in &o.params {
                let want = &one[0].params[name];
                let diff = p
                    .iter()
                    .zip(want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(
                    diff <= 2e-5,
                    "pp {pp} dp 2 PE {pe}: {name} differs by {diff}"
                );
            }
        }
    }
}

/// Greedy sampling through a 3-stage pipeline (tokens return from the last stage to the
/// first) writes the text a single PE writes.
#[test]
fn sampling_through_the_pipeline_matches_a_single_pe() {
    let data = dataset();
    let model = tiny(3, true);
    let one = run_cpu(
        &run_config(model.clone(), 1, 1, 2, ScheduleKind::OneFOneB),
        data.clone(),
        4,
        12,
    );
    let want = one[0].sample.clone().unwrap();
    assert_eq!(want.len(), 4 + 12);
    assert!(want.starts_with(b"The "));
    let outs = run_cpu(
        &run_config(model, 3, 1, 2, ScheduleKind::GPipe),
        data,
        4,
        12,
    );
    assert_eq!(outs[0].sample, None);
    assert_eq!(outs[1].sample, None);
    assert_eq!(outs[2].sample.as_deref(), Some(&want[..]));
}

/// Saving after 3 steps and resuming (per-stage files, PP = 2) continues exactly as an
/// uninterrupted run: the same losses bit for bit (CPU arithmetic is deterministic).
#[test]
fn checkpoint_resume_continues_the_same_run() {
    let data = dataset();
    let dir = std::env::temp_dir().join(format!("nvsh-gpt-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("ck");
    let mut run = run_config(tiny(2, true), 2, 1, 2, ScheduleKind::OneFOneB);
    // All steps inside warm-up: the learning rate does not depend on the horizon.
    run.warmup = 10;
    let sink =
        || -> Arc<Mutex<dyn std::io::Write + Send>> { Arc::new(Mutex::new(std::io::sink())) };
    let opts = |save: bool, resume: bool| save_resume_options(&prefix, save, resume);
    let mut whole = run.clone();
    whole.steps = 6;
    let straight = run_local(&whole, data.clone(), &opts(false, false), sink()).unwrap();
    let mut first = run.clone();
    first.steps = 3;
    run_local(&first, data.clone(), &opts(true, false), sink()).unwrap();
    for s in 0..2 {
        assert!(set_stage_path(&set_dir(&prefix, 3), s, 2).exists());
    }
    let resumed = run_local(&whole, data, &opts(false, true), sink()).unwrap();
    let a: Vec<(u64, f64)> = straight[0].records[3..]
        .iter()
        .map(|r| (r.step, r.loss))
        .collect();
    let b: Vec<(u64, f64)> = resumed[0]
        .records
        .iter()
        .map(|r| (r.step, r.loss))
        .collect();
    assert_eq!(b.len(), 3);
    assert_eq!(a, b);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 2-stage tied job saving into `prefix` (every `save_every` steps, and at the end), or
/// resuming from it; its per-PE results or the error of the first PE that failed.
fn set_job(
    prefix: &std::path::Path,
    steps: usize,
    save_every: usize,
    resume: bool,
) -> nvsh_gpt::error::Result<Vec<nvsh_gpt::session::SessionResult>> {
    let mut run = run_config(tiny(2, true), 2, 1, 2, ScheduleKind::OneFOneB);
    run.warmup = 10;
    run.steps = steps;
    let opts = SessionOptions {
        val_every: 0,
        save: Some(prefix.to_path_buf()),
        save_every,
        resume: resume.then(|| prefix.to_path_buf()),
        print_every: 1,
        ..Default::default()
    };
    let sink: Arc<Mutex<dyn std::io::Write + Send>> = Arc::new(Mutex::new(std::io::sink()));
    run_local(&run, dataset(), &opts, sink)
}

fn latest_names(prefix: &std::path::Path) -> String {
    std::fs::read_to_string(latest_path(prefix))
        .unwrap()
        .trim()
        .to_string()
}

/// Each save is a set of its own; the pointer moves only when every stage has written, so a
/// save that fails on one stage leaves it on the last complete set.
#[test]
fn the_latest_pointer_moves_only_after_every_stage_wrote() {
    let dir = std::env::temp_dir().join(format!("nvsh-gpt-sets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("ck");
    set_job(&prefix, 4, 2, false).unwrap();
    for step in [2, 4] {
        for s in 0..2 {
            assert!(set_stage_path(&set_dir(&prefix, step), s, 2).exists());
        }
    }
    assert_eq!(latest_names(&prefix), "ck.step-00000004");
    // Stage 1 cannot write its file of step 6 (a directory holds its name): the save fails on
    // every PE and the pointer stays on step 4, from which a resume still works.
    std::fs::create_dir_all(set_stage_path(&set_dir(&prefix, 6), 1, 2).join("x")).unwrap();
    let e = set_job(&prefix, 6, 0, true).unwrap_err().to_string();
    // PE 1 names its file, PE 0 the set it could not complete.
    assert!(e.contains("ck.step-00000006"), "{e}");
    assert_eq!(latest_names(&prefix), "ck.step-00000004");
    std::fs::remove_dir_all(set_dir(&prefix, 6)).unwrap();
    let r = set_job(&prefix, 5, 0, true).unwrap();
    assert_eq!(r[0].records.len(), 1);
    assert_eq!(latest_names(&prefix), "ck.step-00000005");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stage files from different saves, or a tied embedding whose two copies differ, are refused
/// at resume on every PE before any step runs.
#[test]
fn a_mixed_set_is_refused_before_training() {
    use nvsh_gpt::checkpoint::Checkpoint;
    let dir = std::env::temp_dir().join(format!("nvsh-gpt-mixed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("ck");
    set_job(&prefix, 4, 2, false).unwrap();
    let (two, four) = (set_dir(&prefix, 2), set_dir(&prefix, 4));
    let stage1 = |d: &std::path::Path| set_stage_path(d, 1, 2);
    let good = std::fs::read(stage1(&four)).unwrap();
    // Stage 1 of step 2 in the set of step 4.
    std::fs::copy(stage1(&two), stage1(&four)).unwrap();
    let e = set_job(&prefix, 6, 0, true).unwrap_err().to_string();
    assert!(e.contains("not one set"), "{e}");
    assert!(e.contains("stage 0 is at step 4, stage 1 at 2"), "{e}");
    // Same step, but the last stage's copy of the tied embedding changed.
    std::fs::write(stage1(&four), &good).unwrap();
    let mut ck = Checkpoint::load(&stage1(&four)).unwrap();
    ck.params[0] += 1.0;
    ck.save(&stage1(&four)).unwrap();
    let e = set_job(&prefix, 6, 0, true).unwrap_err().to_string();
    assert!(
        e.contains("the tied token embedding differs between stage 0 and stage 1"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A dense run writes no residual files, and refuses to resume from a set that holds some (a
/// sparse run's): their gradient mass would be dropped without a word. With them deleted, as
/// the message says, the resume goes on.
#[test]
fn a_dense_resume_refuses_a_set_with_residual_files() {
    use nvsh_gpt::residual::{
        residual_files, residual_path, ResidualFile, ResidualHeader, ResidualSpec,
    };
    let dir = std::env::temp_dir().join(format!("nvsh-gpt-dense-resid-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("ck");
    set_job(&prefix, 2, 0, false).unwrap();
    let set = set_dir(&prefix, 2);
    assert!(residual_files(&set).unwrap().is_empty());
    let spec = ResidualSpec {
        method: "gtopk".into(),
        density: 0.01,
        error_feedback: true,
        len: 10,
    };
    for pe in 0..2 {
        ResidualFile {
            header: ResidualHeader {
                spec: spec.clone(),
                pp: 2,
                dp: 1,
                pe,
                step: 2,
            },
            values: vec![0.5; 10],
        }
        .save(&residual_path(&set, pe, 2))
        .unwrap();
    }
    let e = set_job(&prefix, 4, 0, true).unwrap_err().to_string();
    assert!(
        e.contains("residuals of --grad-compress gtopk:0.01 (2 file(s))")
            && e.contains("resume with --grad-compress gtopk:0.01")
            && e.contains("residual-*.ckpt"),
        "{e}"
    );
    assert_eq!(latest_names(&prefix), "ck.step-00000002");
    for f in residual_files(&set).unwrap() {
        std::fs::remove_file(f).unwrap();
    }
    let r = set_job(&prefix, 4, 0, true).unwrap();
    assert_eq!(r[0].records.len(), 2);
    assert!(residual_files(&set_dir(&prefix, 4)).unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A --save (or --log-json) path that cannot be written stops the job before its first step,
/// on every PE, instead of after the whole run.
#[test]
fn an_unwritable_output_is_refused_before_the_first_step() {
    let data = dataset();
    let mut run = run_config(tiny(2, true), 2, 1, 2, ScheduleKind::OneFOneB);
    run.steps = 3;
    let missing = std::env::temp_dir()
        .join(format!("nvsh-gpt-no-such-dir-{}", std::process::id()))
        .join("ck");
    for opts in [
        SessionOptions {
            save: Some(missing.clone()),
            ..Default::default()
        },
        SessionOptions {
            log_json: Some(missing.with_extension("json")),
            ..Default::default()
        },
    ] {
        let out = Arc::new(Mutex::new(Vec::<u8>::new()));
        let e = run_local(&run, data.clone(), &opts, out.clone())
            .unwrap_err()
            .to_string();
        let flag = if opts.save.is_some() {
            "--save"
        } else {
            "no-such-dir"
        };
        assert!(
            e.contains(flag) && e.contains("nvsh-gpt-no-such-dir"),
            "{e}"
        );
        let printed = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        assert!(!printed.contains("step "), "a step ran:\n{printed}");
    }
}

/// A tiny model learns the tiny corpus: the loss falls from ln(256) ~ 5.55 well below the
/// corpus' unigram entropy (~2.97 nats: what a model that ignores context reaches).
#[test]
fn training_lowers_the_loss() {
    let mut run = run_config(tiny(2, true), 1, 1, 4, ScheduleKind::OneFOneB);
    run.lr = 1e-2;
    run.warmup = 5;
    let out = run_cpu(&run, dataset(), 150, 0);
    let l = &out[0].losses;
    let late = l[140..].iter().sum::<f64>() / 10.0;
    eprintln!(
        "first {:.3}, last ten {late:.3}, val {:.3}",
        l[0], out[0].val
    );
    assert!(l[0] > 5.0, "{l:?}");
    assert!(late < 2.8, "loss after 140 steps {late} (from {})", l[0]);
    assert!(out[0].val < 2.9, "validation loss {}", out[0].val);
}

/// A PE that fails (here: an invalid configuration on one stage would be caught before any
/// transfer) does not leave its peers hanging: they report a timeout or a stopped peer.
#[test]
fn a_failing_peer_stops_the_job_with_an_error() {
    let data = dataset();
    let mut run = run_config(tiny(2, true), 2, 1, 2, ScheduleKind::OneFOneB);
    run.timeout = std::time::Duration::from_millis(500);
    let mut comms = LocalComm::world(2, 1, 2, run.timeout).unwrap();
    let last = comms.pop().unwrap();
    drop(last); // stage 1 never starts
    let be = CpuBackend::new();
    let mut tr = Trainer::new(&be, comms.pop().unwrap(), run, data).unwrap();
    let e = tr.train_step().unwrap_err().to_string();
    assert!(e.contains("stopped") || e.contains("timed out"), "{e}");
}

/// Two replicas with a 100 ms limit; replica 0 samples 3000 tokens, which takes longer. Each
/// PE then makes one more collective call under the limit, as a GPU job's frees at the end do:
/// it succeeds only if the session kept replica 1 waiting for the sample (with a wait past the
/// limit) instead of letting it run ahead into a call that times out.
#[test]
fn the_other_replicas_wait_for_the_sample_past_the_limit() {
    use nvsh_gpt::comm::Comm;
    let mut run = run_config(tiny(2, true), 1, 2, 2, ScheduleKind::OneFOneB);
    run.steps = 2;
    run.timeout = std::time::Duration::from_millis(100);
    let opts = SessionOptions {
        val_every: 0,
        sample_tokens: 3000,
        print_every: 1,
        ..Default::default()
    };
    let comms = LocalComm::world(1, 2, 2, run.timeout).unwrap();
    let data = dataset();
    let handles: Vec<_> = comms
        .into_iter()
        .map(|comm| {
            let (run, data, opts) = (run.clone(), data.clone(), opts.clone());
            std::thread::spawn(move || -> nvsh_gpt::error::Result<f64> {
                let be = CpuBackend::new();
                let mut tr = Trainer::new(&be, comm, run, data)?;
                let start = std::time::Instant::now();
                nvsh_gpt::session::run_session(&mut tr, &opts, &mut std::io::sink())?;
                let took = start.elapsed().as_secs_f64();
                let mut v = [1.0];
                tr.comm.allreduce_host(&be, &mut v)?;
                assert_eq!(v[0], 2.0);
                Ok(took)
            })
        })
        .collect();
    let took: Vec<f64> = handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    // The sample really outlasted the limit, so the test shows the longer wait.
    assert!(took[0] > 0.2, "replica 0's session took only {} s", took[0]);
}
