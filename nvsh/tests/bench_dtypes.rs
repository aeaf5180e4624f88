//! The collective benches over every element type they take, end to end on 2 PEs with small
//! sizes: allreduce, reduce-scatter and reduce over the eight reducible types, broadcast,
//! allgather and alltoall over those and u8, every timed call of ours (and NCCL's two paths and
//! NVSHMEM's, where they can run) checked against the host reference. Avg is among the ops, so
//! integer averages (truncated toward zero, ours and NCCL's alike) are checked too.
//! Run by scripts/gpu_test.sh under `nvsh run -n 2` (tests named pe2_*).

mod common;

use common::{gpu_test, runtime, skip};
use nvsh::bench::allreduce::{self, AllreduceBenchOptions, Candidate};
use nvsh::bench::family::{self, FamilyBenchOptions, Kind};
use nvsh::bench::harness::{BenchDtype, Outcome, RatioOn, Report};
use nvsh::bench::nvshmem_coll::family_refusal;
use nvsh::bench::render::render_table;
use nvsh::nccl_baseline;
use nvshmem::Collective as C;
use nvshmem::{Nvshmem, ReduceOp};

/// Whether NCCL can be a candidate here (decided alike on every PE: one machine).
fn nccl_usable(nv: &Nvshmem) -> bool {
    match nccl_baseline::library_status() {
        // NCCL refuses two ranks on one GPU.
        Ok(()) if !nv.shares_gpus() => true,
        Ok(()) => {
            skip("NCCL needs one GPU per rank (2-GPU machine); ours only");
            false
        }
        Err(why) => {
            skip(&format!("NCCL is not loadable here: {why}; ours only"));
            false
        }
    }
}

/// PE 0's report: every output right, every candidate ran (nccl-sym, where it could not, said
/// so with a skip line), one row per size and type asked for, in the types' order.
fn check_report(report: Option<Report>, nv: &Nvshmem, dtypes: &[BenchDtype], sizes: usize) {
    if nv.my_pe() != 0 {
        assert!(report.is_none());
        return;
    }
    let report = report.expect("PE 0 has the report");
    let table = render_table(&report, RatioOn::default());
    report.verify().unwrap_or_else(|e| panic!("{e}\n{table}"));
    assert_eq!(report.rows.len(), dtypes.len() * sizes, "{table}");
    let ran: Vec<BenchDtype> = report.checked_dtypes().iter().map(|&(d, _)| d).collect();
    assert_eq!(ran, dtypes, "{table}");
    let mut sym_na: Option<&str> = None;
    for row in &report.rows {
        for (c, o) in &row.results {
            match o {
                Outcome::Timed(t) => assert!(t.checked > 0, "{c}\n{table}"),
                // NCCL without windows: in the default list, reported but no failure.
                Outcome::Unavailable(why) if *c == "nccl-sym" => sym_na = Some(why),
                Outcome::Unavailable(why) => panic!("{c}: {why}\n{table}"),
            }
        }
    }
    if let Some(why) = sym_na {
        skip(&format!("nccl-sym could not run: {why}; the others ran"));
    }
}

gpu_test!(2, allreduce_bench_checks_every_reducible_type);
fn allreduce_bench_checks_every_reducible_type() {
    let nv = runtime(2);
    let nccl = nccl_usable(&nv);
    for op in [ReduceOp::Avg, ReduceOp::Prod, ReduceOp::Min] {
        let mut candidates = vec![Candidate::OneShot, Candidate::Ring, Candidate::Auto];
        if nccl {
            candidates.extend([Candidate::Nccl, Candidate::NcclSym]);
        }
        // NVSHMEM has no avg, and its collectives need one GPU per PE.
        if op != ReduceOp::Avg && !nv.shares_gpus() {
            candidates.push(Candidate::Nvshmem);
        }
        let opts = AllreduceBenchOptions {
            min_bytes: 4 << 10,
            max_bytes: 8 << 10,
            dtypes: BenchDtype::REDUCIBLE.to_vec(),
            op,
            reps: 2,
            warmup: 1,
            candidates,
            // NCCL's symmetric kernels take sums of floats only; the other types and ops run
            // NCCL's regular kernels on the registered buffers, checked alike.
            optional: vec![Candidate::NcclSym],
            ..AllreduceBenchOptions::default()
        };
        let report = allreduce::run(&nv, &opts).expect("bench ran");
        check_report(report, &nv, &BenchDtype::REDUCIBLE, 2);
    }
    // u8 is refused on every PE before anything runs.
    let opts = AllreduceBenchOptions {
        dtypes: vec![BenchDtype::U8],
        ..AllreduceBenchOptions::default()
    };
    let err = allreduce::run(&nv, &opts).unwrap_err().to_string();
    assert!(err.contains("u8 is data movement only"), "{err}");
}

gpu_test!(2, family_benches_check_every_type_they_take);
fn family_benches_check_every_type_they_take() {
    let nv = runtime(2);
    let nccl = nccl_usable(&nv);
    for kind in Kind::all() {
        let dtypes = BenchDtype::taken_by(kind.reduces());
        let mut opts = FamilyBenchOptions::new(kind);
        opts.min_bytes = 4 << 10;
        opts.max_bytes = 8 << 10;
        opts.reps = 2;
        opts.warmup = 1;
        opts.root = 1;
        opts.op = ReduceOp::Avg;
        opts.dtypes = dtypes.to_vec();
        if !nccl {
            opts.candidates = vec![family::Candidate::Ours];
        }
        // NVSHMEM's own collective where it has one (no avg); it needs a GPU per PE.
        if !nv.shares_gpus() && family_refusal(kind, opts.op, BenchDtype::F32).is_none() {
            opts.candidates.push(family::Candidate::Nvshmem);
        }
        let report = family::run(&nv, &opts).expect("bench ran");
        check_report(report, &nv, dtypes, 2);
    }
    // NVSHMEM's reduce-scatter over every reducible type, with an op it has.
    if !nv.shares_gpus() {
        let mut opts = FamilyBenchOptions::new(Kind::of(C::ReduceScatter));
        (opts.min_bytes, opts.max_bytes, opts.reps, opts.warmup) = (4 << 10, 8 << 10, 2, 1);
        opts.op = ReduceOp::Prod;
        opts.dtypes = BenchDtype::REDUCIBLE.to_vec();
        opts.candidates = vec![family::Candidate::Ours, family::Candidate::Nvshmem];
        let report = family::run(&nv, &opts).expect("bench ran");
        check_report(report, &nv, &BenchDtype::REDUCIBLE, 2);
    }
    let mut opts = FamilyBenchOptions::new(Kind::of(C::ReduceScatter));
    opts.dtypes = vec![BenchDtype::U8];
    let err = family::run(&nv, &opts).unwrap_err().to_string();
    assert!(err.contains("reduce-scatter reduces f32"), "{err}");
}
