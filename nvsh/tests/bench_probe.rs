//! The allreduce probe (`nvsh bench probe`) end to end on 2 PEs at its default 4 KiB: every rung
//! ran and passed its checks (every line of the line rungs, every call of the one-shot), and
//! every rung splits off its part. Run by scripts/gpu_test.sh under `nvsh run -n 2` (tests named
//! pe2_*).

mod common;

use common::{gpu_test, runtime};
use nvsh::bench::probe::{self, ProbeOptions, Rung};

gpu_test!(2, probe_times_every_rung_checked);
fn probe_times_every_rung_checked() {
    let nv = runtime(2);
    let opts = ProbeOptions {
        reps: 3,
        ..ProbeOptions::default()
    };
    let report = probe::run(&nv, &opts).expect("probe");
    if nv.my_pe() != 0 {
        assert!(report.is_none());
        return;
    }
    let r = report.expect("PE 0 has the report");
    let table = probe::render_table(&r);
    r.verify().unwrap_or_else(|e| panic!("{e}\n{table}"));
    let rungs: Vec<Rung> = r.rungs.iter().map(|x| x.rung).collect();
    assert_eq!(rungs, Rung::ALL, "{table}");
    for x in &r.rungs {
        assert!(x.us > 0.0 && x.iters > 0, "{table}");
        assert!(x.rung == Rung::Empty || x.checked > 0, "{table}");
    }
    assert_eq!(r.splits().len(), Rung::ALL.len(), "{table}");
}
