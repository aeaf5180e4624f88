//! The sparse methods (src/sparse/allreduce/options.rs, `SparseMethod`): bytes each PE sends as a
//! function of density d, PEs P and gradient elements n, their modelled time, and the density
//! below which each beats the dense allreduce: by bytes, and by time (communication from the
//! collectives' model plus a selection pass fitted from the sparse bench).

use super::{log2_ceil, us, Params, Topology};

/// Index bytes (i32 indexes, gradients up to 2^31 elements).
pub const INDEX_BYTES: f64 = 4.0;
/// A count word (allgatherv and alltoall sizes).
const COUNT_BYTES: f64 = 4.0;

/// Selection and error feedback over the gradient, GB/s of gradient bytes: the slope of the
/// sparse bench's time between 64 and 256 MiB at 0.1%, f32, 4 PEs (docs/measured.md, table
/// "Sparse allreduce, 4 PEs, f32, error feedback on": topk 364 and 1291 us; gaussiank_concat,
/// whose threshold selected nothing on that data so its time is all local work, 351 and 1135).
pub const SELECT_TOPK_GBPS: f64 = 192.0 * 1.048576e6 / (1291.0 - 364.0) / 1e3;
pub const SELECT_THRESHOLD_GBPS: f64 = 192.0 * 1.048576e6 / (1135.0 - 351.0) / 1e3;

/// The library's methods; the model adds whether a method selects by threshold.
pub use nvshmem::SparseMethod as Method;

/// Whether `m` selects by a threshold (up to 2k pairs) rather than an exact top-k.
fn threshold(m: Method) -> bool {
    matches!(
        m,
        Method::GaussianK | Method::GaussianKConcat | Method::OkTopK | Method::GaussianKSa
    )
}

/// A gradient: `n` elements of `value_bytes` (4: f32, 2: bf16), over `pes` PEs.
#[derive(Clone, Copy, Debug)]
pub struct Grad {
    pub n: f64,
    pub value_bytes: f64,
    pub pes: usize,
}

impl Grad {
    fn pair(&self) -> f64 {
        INDEX_BYTES + self.value_bytes
    }

    /// k = d n pairs per PE. The threshold methods hold up to 2k; they aim at k, which is
    /// what this counts.
    fn k(&self, d: f64) -> f64 {
        (d * self.n).max(1.0)
    }

    /// Pairs in one of the P equal regions after its reduce: the union of P selections of
    /// k/P each, taken as independent (the worst case: no index shared), so
    /// (n/P)(1 - (1-d)^P).
    fn region_union(&self, d: f64) -> f64 {
        let p = self.pes as f64;
        self.n / p * (1.0 - (1.0 - d.min(1.0)).powf(p))
    }

    /// Bytes a bandwidth-optimal dense allreduce sends per PE: 2(P-1)/P of the gradient.
    pub fn dense_bytes(&self) -> f64 {
        let p = self.pes as f64;
        2.0 * (p - 1.0) / p * self.n * self.value_bytes
    }

    /// Bytes `m` sends per PE at density `d`, from the exchange each method's doc comment
    /// names (mean over the PEs where they differ).
    pub fn bytes(&self, m: Method, d: f64) -> f64 {
        let p = self.pes as f64;
        let k = self.k(d);
        let pair = self.pair();
        match m {
            // Allgather of k indexes and k values: to each of P-1 peers.
            Method::TopK => (p - 1.0) * k * pair,
            // Allgather of the sizes, allgatherv of indexes and of values.
            Method::TopKAopt | Method::GaussianK | Method::GaussianKConcat => {
                (p - 1.0) * (k * pair + COUNT_BYTES)
            }
            // ceil(log2 P) tree rounds where each PE but the root sends its k once, then the
            // root's broadcast of k to P-1 peers: 2(P-1)/P k pairs per PE on average.
            Method::GTopK => 2.0 * (p - 1.0) / p * k * pair,
            // Alltoall of the region sizes, the pairs outside its own region to their owners,
            // then the allgatherv of its reduced region.
            Method::OkTopK | Method::TopKSa | Method::GaussianKSa => {
                (p - 1.0) * COUNT_BYTES
                    + (p - 1.0) / p * k * pair
                    + (p - 1.0) * (self.region_union(d) * pair + COUNT_BYTES)
            }
        }
    }

    /// Densities at and below which `m` sends fewer bytes than the dense allreduce (None:
    /// never, even at the smallest density).
    pub fn byte_crossover(&self, m: Method) -> Option<f64> {
        let dense = self.dense_bytes();
        crossover(|d| self.bytes(m, d) < dense, 1.0 / self.n)
    }

    /// Modelled time of `m` at density `d` over `topo`: local selection, then each
    /// collective it calls at our model's best (flat or hierarchical).
    pub fn time(&self, prm: &Params, topo: Topology, m: Method, d: f64) -> f64 {
        let p = self.pes as f64;
        let k = self.k(d);
        let pair = self.pair();
        let grad_bytes = self.n * self.value_bytes;
        let select = us(
            grad_bytes,
            if threshold(m) {
                SELECT_THRESHOLD_GBPS
            } else {
                SELECT_TOPK_GBPS
            },
        );
        let ag = |bytes_per_pe: f64| {
            let n = p * bytes_per_pe;
            prm.allgather_flat(n, topo).min(prm.allgather_hier(n, topo))
        };
        let a2a = |bytes_per_pe: f64| {
            prm.alltoall_flat(bytes_per_pe, topo)
                .min(prm.alltoall_hier(bytes_per_pe, topo))
        };
        let comm = match m {
            Method::TopK => ag(k * INDEX_BYTES) + ag(k * self.value_bytes),
            Method::TopKAopt | Method::GaussianK => {
                ag(COUNT_BYTES) + ag(k * INDEX_BYTES) + ag(k * self.value_bytes)
            }
            Method::GaussianKConcat => ag(COUNT_BYTES) + ag(k * pair),
            Method::GTopK => {
                // Tree rounds like recursive doubling's steps, on k pairs; then the broadcast,
                // the root putting k pairs to every peer.
                let intra = (topo.per_node.max(1) as f64).log2().floor();
                let inter = log2_ceil(self.pes) - intra;
                let round = |cross: bool| {
                    prm.nvl_step_us
                        + if cross {
                            prm.ib_us + us(k * pair, prm.ib_gbps)
                        } else {
                            us(k * pair, prm.nvl_gbps)
                        }
                };
                let g = topo.per_node as f64;
                let bcast = prm.nvl_step_us
                    + if topo.nodes() > 1 { prm.ib_us } else { 0.0 }
                    + us((g - 1.0) * k * pair, prm.nvl_gbps)
                        .max(us((p - g) * k * pair, prm.ib_gbps));
                intra * round(false) + inter * round(true) + bcast
            }
            Method::OkTopK | Method::TopKSa | Method::GaussianKSa => {
                // The pairs go in alltoallv rounds of at most 4 peers.
                let rounds = ((p - 1.0) / 4.0).ceil().max(1.0);
                a2a(p * COUNT_BYTES)
                    + rounds * a2a(k * pair / rounds)
                    + ag(self.region_union(d) * pair + COUNT_BYTES)
            }
        };
        select + comm
    }

    /// Densities at and below which `m` takes less time than our dense allreduce of the same
    /// gradient (None: never).
    pub fn time_crossover(&self, prm: &Params, topo: Topology, m: Method) -> Option<f64> {
        let grad_bytes = self.n * self.value_bytes;
        let dense = prm
            .allreduce_flat(grad_bytes, topo)
            .us
            .min(prm.allreduce_hier(grad_bytes, topo).us);
        crossover(|d| self.time(prm, topo, m, d) < dense, 1.0 / self.n)
    }
}

/// The largest density in [lo, 1] where `wins` holds, given that it holds below some density
/// and not above (bisection on a log scale, to 0.1%). None where it fails at `lo`.
fn crossover(wins: impl Fn(f64) -> bool, lo: f64) -> Option<f64> {
    if !wins(lo) {
        return None;
    }
    if wins(1.0) {
        return Some(1.0);
    }
    let (mut a, mut b) = (lo.ln(), 0.0f64);
    while b - a > 1e-3 {
        let mid = (a + b) / 2.0;
        if wins(mid.exp()) {
            a = mid;
        } else {
            b = mid;
        }
    }
    Some(a.exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grad(pes: usize) -> Grad {
        Grad {
            n: 64.0 * 1024.0 * 1024.0,
            value_bytes: 4.0,
            pes,
        }
    }

    #[test]
    fn byte_crossovers_match_the_closed_forms() {
        // Top-k sends (P-1) d n 8 bytes against 2(P-1)/P n 4: d = 1/P. gTop-k sends
        // 2(P-1)/P d n 8: d = 1/2.
        for pes in [2, 4, 16, 64] {
            let g = grad(pes);
            let topk = g.byte_crossover(Method::TopK).unwrap();
            assert!((topk * pes as f64 - 1.0).abs() < 0.01, "{pes}: {topk}");
            let gtopk = g.byte_crossover(Method::GTopK).unwrap();
            assert!((gtopk - 0.5).abs() < 0.005, "{pes}: {gtopk}");
        }
    }

    #[test]
    fn every_method_sends_more_as_density_grows() {
        let g = grad(16);
        for m in Method::ALL {
            assert!(g.bytes(m, 0.001) < g.bytes(m, 0.01), "{}", m.name());
            assert!(g.bytes(m, 0.01) < g.bytes(m, 0.1), "{}", m.name());
        }
    }

    #[test]
    fn sparse_wins_by_time_only_where_the_rails_are_slow() {
        // 2 PEs on NVLink: the selection pass alone is slower than the dense allreduce, as
        // measured (docs/measured.md: every method slower than dense at 2 PEs).
        let prm = Params::default();
        let one = Topology::new(2, 8).unwrap();
        assert_eq!(grad(2).time_crossover(&prm, one, Method::TopK), None);
        // 64 GPUs on InfiniBand: top-k at 0.1% beats dense.
        let many = Topology::new(64, 8).unwrap();
        let d = grad(64).time_crossover(&prm, many, Method::TopK).unwrap();
        assert!(d > 0.001, "{d}");
    }
}
