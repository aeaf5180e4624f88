//! The benches of broadcast, allgather, alltoall, reduce-scatter and reduce, end to end on 2 PEs
//! with small sizes: every timed call of ours (and NCCL's two paths, where they can run: its
//! regular kernels and, on its own registered buffers, its symmetric ones; and NVSHMEM's own
//! collective where it has one and every PE has a GPU) checked, a report on PE 0 only, and a
//! root outside the job refused on every PE.
//! Run by scripts/gpu_test.sh under `nvsh run -n 2` (tests named pe2_*).

mod common;

use common::{gpu_test, runtime, skip};
use nvsh::bench::family::{self, Candidate, FamilyBenchOptions, Kind};
use nvsh::bench::harness::{BenchDtype, Outcome, RatioOn, NCCL_BASELINES};
use nvsh::bench::nvshmem_coll::family_refusal;
use nvsh::bench::render::render_table;
use nvsh::nccl_baseline;
use nvshmem::Collective as C;
use nvshmem::ReduceOp;

gpu_test!(2, family_benches_check_every_timed_call);
fn family_benches_check_every_timed_call() {
    let nv = runtime(2);
    // NCCL refuses two ranks on one GPU; decided alike on both PEs (one machine).
    let nccl = match nccl_baseline::library_status() {
        Ok(()) if !nv.shares_gpus() => true,
        Ok(()) => {
            skip("NCCL needs one GPU per rank (2-GPU machine); ours only");
            false
        }
        Err(why) => {
            skip(&format!("NCCL is not loadable here: {why}; ours only"));
            false
        }
    };
    let mut sym_skipped = false;
    for kind in Kind::all() {
        let mut opts = FamilyBenchOptions::new(kind);
        opts.min_bytes = 4 << 10;
        opts.max_bytes = 64 << 10;
        opts.reps = 2;
        opts.warmup = 1;
        // Off PE 0, so a root taken for PE 0 is caught; max: a reduction other than the sum.
        opts.root = 1;
        opts.op = ReduceOp::Max;
        // Small slots, so reductions of the larger sizes go in several segments.
        opts.slot_bytes = 16 << 10;
        if !nccl {
            opts.candidates = vec![Candidate::Ours];
        }
        // NVSHMEM's own collective where it has one; its collectives need a GPU per PE.
        if !nv.shares_gpus() && family_refusal(kind, opts.op, BenchDtype::F32).is_none() {
            opts.candidates.push(Candidate::Nvshmem);
        }
        let report = family::run(&nv, &opts).expect("bench ran");
        if nv.my_pe() != 0 {
            assert!(report.is_none());
            continue;
        }
        let report = report.expect("PE 0 has the report");
        let table = render_table(&report, RatioOn::default());
        report.verify().unwrap_or_else(|e| panic!("{e}\n{table}"));
        // 4K to 64K in f32 and bf16.
        assert_eq!(report.rows.len(), 10, "{table}");
        let pes = if kind == Kind::of(C::Reduce) { 1 } else { 2 };
        for row in &report.rows {
            for (c, o) in &row.results {
                match o {
                    Outcome::Timed(t) => assert_eq!(t.checked_pes, pes, "{table}"),
                    // NCCL without windows (older than 2.27, or its symmetric memory off):
                    // reported, in the default list no failure.
                    Outcome::Unavailable(why) if *c == "nccl-sym" => {
                        if !sym_skipped {
                            skip(&format!("nccl-sym could not run: {why}; the others ran"));
                            sym_skipped = true;
                        }
                    }
                    Outcome::Unavailable(why) => panic!("{kind:?}: {why}\n{table}"),
                }
            }
            // Where both NCCL paths ran, the ratio takes the faster of them, on each timing.
            if row.timing("nccl").is_some() && row.timing("nccl-sym").is_some() {
                for on in [RatioOn::AfterCompute, RatioOn::BackToBack] {
                    let (_, fastest) = row.fastest(NCCL_BASELINES, on).unwrap();
                    let (_, base) = row.ratio_to_fastest("ours", NCCL_BASELINES, on).unwrap();
                    let other = if base == "nccl" { "nccl-sym" } else { "nccl" };
                    assert!(row.timing(other).unwrap().us_on(on) >= fastest, "{table}");
                }
            }
        }
    }
    // Where NVSHMEM has no such collective, or PEs share a GPU (where NVSHMEM would end the
    // process), the candidate is n/a with the reason, and nothing of NVSHMEM's is called.
    for kind in [Kind::of(C::Broadcast), Kind::of(C::Reduce)] {
        let mut opts = FamilyBenchOptions::new(kind);
        (opts.min_bytes, opts.max_bytes, opts.reps, opts.warmup) = (4 << 10, 4 << 10, 1, 1);
        opts.candidates = vec![Candidate::Ours, Candidate::Nvshmem];
        let report = family::run(&nv, &opts).expect("bench ran");
        let Some(report) = report else { continue };
        // A collective NVSHMEM lacks is named first, whatever the GPUs.
        let want = if kind == Kind::of(C::Reduce) {
            "no rooted reduce"
        } else if nv.shares_gpus() {
            "a GPU per PE"
        } else {
            continue;
        };
        let table = render_table(&report, RatioOn::default());
        for row in &report.rows {
            match row.outcome("nvshmem") {
                Some(Outcome::Unavailable(why)) => assert!(why.contains(want), "{table}"),
                _ => panic!("nvshmem ran: {table}"),
            }
            assert!(
                matches!(row.outcome("ours"), Some(Outcome::Timed(_))),
                "{table}"
            );
        }
        assert!(report.verify().is_err());
    }
    // A root outside the job: the same error on both PEs, before anything runs.
    let mut opts = FamilyBenchOptions::new(Kind::of(C::Broadcast));
    opts.root = 2;
    let err = family::run(&nv, &opts).unwrap_err().to_string();
    assert!(err.contains("--root") && err.contains("0..2"), "{err}");
}
