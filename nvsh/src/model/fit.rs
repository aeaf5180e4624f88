//! The model's parameters: NVLink terms fitted from docs/measured.md (4 x H100 NV18,
//! 2026-11-27), InfiniBand terms stated (NDR 400 Gb/s per GPU, a few microseconds a hop) and
//! overridable from the command line. Each fit input is a constant naming its table.

use crate::bench::allreduce::busbw_factor;
use crate::bench::harness::algbw_gbps;
use serde::Serialize;

/// Our one-shot allreduce, f32, 4 KiB, 2 PEs, in us: the low-latency step. Table "allreduce
/// f32, 2 PEs, each algorithm" (oneshot column).
pub const ONESHOT_4K_2PE_US: f64 = 5.1;
/// Recursive doubling, f32, 4 KiB, 2 PEs, in us: one signalled exchange step. Same table (rd).
pub const RD_4K_2PE_US: f64 = 8.3;
/// Our allreduce at 256 MiB, f32, `auto` (the two-shot) in us, 2 and 4 PEs. Tables
/// "allreduce, 2 PEs" and "allreduce, 4 PEs" (auto column).
pub const TWOSHOT_256M_2PE_US: f64 = 938.6;
pub const TWOSHOT_256M_4PE_US: f64 = 1304.0;
/// Recursive doubling and one-shot at 256 MiB, f32, 2 PEs, in us. Table "allreduce f32, 2 PEs,
/// each algorithm" (rd and oneshot columns).
pub const RD_256M_2PE_US: f64 = 1176.0;
pub const ONESHOT_256M_2PE_US: f64 = 1235.0;
/// NCCL's faster path at 4 KiB, f32 (nccl-sym, 2 and 4 PEs: 10.2 us both) and NCCL's ring at
/// 256 MiB, f32 (the nccl column: 947.7 us at 2 PEs, 1226 at 4). Tables "allreduce, 2 PEs"
/// and "allreduce, 4 PEs".
pub const NCCL_4K_US: f64 = 10.2;
pub const NCCL_256M_2PE_US: f64 = 947.7;
pub const NCCL_256M_4PE_US: f64 = 1226.0;
/// One-way put bandwidth at 256 MiB per call, GB/s (docs/benchmarks.md, "The put bench,
/// measured", 2 x H200): the link's peak, against which the collectives' rates are read.
pub const PUT_256M_GBPS: f64 = 366.5;
/// NDR InfiniBand, one 400 Gb/s rail per GPU.
pub const IB_GBIT: f64 = 400.0;
/// Per hop across the fabric (adapter, switch, adapter): 2-4 us; the middle.
pub const IB_HOP_US: f64 = 3.0;

const MIB_256: usize = 256 << 20;

/// Bus bandwidth of an allreduce of `n` bytes in `t` us over `p` PEs, in GB/s: the bench's
/// algbw times its allreduce bus factor (nccl-tests' 2(p-1)/p).
fn busbw(n: usize, t: f64, p: i32) -> f64 {
    algbw_gbps(n, t) * busbw_factor(p)
}

/// Every term of the model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Params {
    /// One-shot low-latency step on NVLink (launch, lines out, lines polled), us.
    pub nvl_ll_us: f64,
    /// One signalled step on NVLink (puts, fence, signal, wait), us.
    pub nvl_step_us: f64,
    /// Per-GPU NVLink rate of the bandwidth-bound algorithms (two-shot, ring, the family),
    /// GB/s.
    pub nvl_gbps: f64,
    /// Recursive doubling's rate (each step exchanges and reduces the whole message), GB/s.
    pub nvl_rd_gbps: f64,
    /// One-shot's rate (every PE reads and reduces P inputs), GB/s.
    pub nvl_oneshot_gbps: f64,
    /// InfiniBand per GPU (its rail), GB/s.
    pub ib_gbps: f64,
    /// InfiniBand per hop, us (added to a step that crosses nodes).
    pub ib_us: f64,
    /// NCCL's base latency (launch and protocol), us.
    pub nccl_base_us: f64,
    /// NCCL's per-hop latency on NVLink, us.
    pub nccl_nvl_hop_us: f64,
    /// NCCL's per-GPU NVLink rate, GB/s.
    pub nccl_nvl_gbps: f64,
}

impl Default for Params {
    fn default() -> Params {
        Params::fitted(IB_GBIT, IB_HOP_US)
    }
}

impl Params {
    /// The NVLink terms fitted from the constants above; InfiniBand at `ib_gbit` Gb/s per GPU
    /// and `ib_us` per hop.
    pub fn fitted(ib_gbit: f64, ib_us: f64) -> Params {
        // Two-shot: 2 steps and 2(P-1)/P of the message per PE, so its busbw at 256 MiB is
        // the per-GPU rate once the steps are negligible; the mean of 2 and 4 PEs.
        let ts =
            (busbw(MIB_256, TWOSHOT_256M_2PE_US, 2) + busbw(MIB_256, TWOSHOT_256M_4PE_US, 4)) / 2.0;
        // At 2 PEs recursive doubling and one-shot send the whole message once.
        let rd = algbw_gbps(MIB_256, RD_256M_2PE_US - RD_4K_2PE_US);
        let os = algbw_gbps(MIB_256, ONESHOT_256M_2PE_US - RD_4K_2PE_US);
        let nccl =
            (busbw(MIB_256, NCCL_256M_2PE_US, 2) + busbw(MIB_256, NCCL_256M_4PE_US, 4)) / 2.0;
        Params {
            nvl_ll_us: ONESHOT_4K_2PE_US,
            nvl_step_us: RD_4K_2PE_US,
            nvl_gbps: ts,
            nvl_rd_gbps: rd,
            nvl_oneshot_gbps: os,
            ib_gbps: ib_gbit / 8.0,
            ib_us,
            nccl_base_us: NCCL_4K_US,
            // 2 and 4 PEs took the same 10.2 us over 2 and 6 hops: below what the table
            // resolves; half a microsecond keeps hops from being free.
            nccl_nvl_hop_us: 0.5,
            nccl_nvl_gbps: nccl,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Topology;

    const K: f64 = 1024.0;
    const M: f64 = 1024.0 * 1024.0;

    /// Our allreduce (`auto`, f32) as measured, in us: tables "allreduce, 2 PEs" and
    /// "allreduce, 4 PEs" of docs/measured.md (4 x H100 NV18, 2026-11-27).
    const MEASURED: [(usize, f64, f64); 18] = [
        (2, 4.0 * K, 5.3),
        (2, 16.0 * K, 5.0),
        (2, 64.0 * K, 5.5),
        (2, 256.0 * K, 7.6),
        (2, M, 12.9),
        (2, 4.0 * M, 23.4),
        (2, 16.0 * M, 79.7),
        (2, 64.0 * M, 270.6),
        (2, 256.0 * M, 938.6),
        (4, 4.0 * K, 5.4),
        (4, 16.0 * K, 5.5),
        (4, 64.0 * K, 6.3),
        (4, 256.0 * K, 10.9),
        (4, M, 23.5),
        (4, 4.0 * M, 39.1),
        (4, 16.0 * M, 113.0),
        (4, 64.0 * M, 413.4),
        (4, 256.0 * M, 1304.0),
    ];

    #[test]
    fn the_fit_predicts_the_measured_nvlink_allreduce_within_15_percent() {
        let p = Params::default();
        for (pes, n, measured) in MEASURED {
            let t = Topology::new(pes, 8).unwrap();
            let pred = p.allreduce_flat(n, t).us;
            let err = (pred - measured) / measured;
            // Shown with --nocapture: the table of docs/scale.md.
            println!(
                "{pes} PEs {n} B: predicted {pred:.1} us, measured {measured} ({:+.1}%)",
                100.0 * err
            );
            assert!(
                err.abs() <= 0.15,
                "{pes} PEs, {n} bytes: predicted {pred:.1} us, measured {measured} ({:+.1}%)",
                100.0 * err
            );
        }
    }

    #[test]
    fn fitted_rates_stay_below_the_put_peak() {
        let p = Params::default();
        for r in [
            p.nvl_gbps,
            p.nvl_rd_gbps,
            p.nvl_oneshot_gbps,
            p.nccl_nvl_gbps,
        ] {
            assert!(r > 100.0 && r < PUT_256M_GBPS, "{r}");
        }
        assert_eq!(p.ib_gbps, 50.0);
    }
}
