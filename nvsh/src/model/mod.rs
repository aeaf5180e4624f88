//! `nvsh model`'s cost model: alpha-beta (latency plus bytes over bandwidth) times of our
//! collectives on NVLink nodes joined by InfiniBand, against NCCL's ring and tree, the sparse
//! methods' bytes and crossover densities, and a pipeline x data-parallel step estimate. Pure
//! arithmetic, no GPU; docs/scale.md explains the terms, the fit and what it leaves out.
//!
//! Units: bytes, microseconds, GB/s (1e9 bytes per second), so `bytes / (gbps * 1e3)` is us.

pub mod fit;
pub mod sparse;
pub mod step;

use serde::Serialize;

pub use fit::Params;

/// GPUs and how many share a node (NVLink inside, one InfiniBand rail per GPU between nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Topology {
    pub gpus: usize,
    pub per_node: usize,
}

impl Topology {
    /// `gpus` in nodes of `per_node` (fewer GPUs than a node: one node of `gpus`). Refuses a
    /// count that does not fill whole nodes, since every formula assumes equal nodes.
    pub fn new(gpus: usize, per_node: usize) -> Result<Topology, String> {
        if gpus == 0 || per_node == 0 {
            return Err("GPU and per-node counts must be at least 1".into());
        }
        if gpus > per_node && gpus % per_node != 0 {
            return Err(format!(
                "{gpus} GPUs do not fill whole nodes of {per_node}: give a multiple of {per_node}"
            ));
        }
        Ok(Topology {
            gpus,
            per_node: per_node.min(gpus),
        })
    }

    pub fn nodes(&self) -> usize {
        self.gpus / self.per_node
    }

    fn multi_node(&self) -> bool {
        self.nodes() > 1
    }
}

/// `bytes` over `gbps` in microseconds.
pub fn us(bytes: f64, gbps: f64) -> f64 {
    bytes / (gbps * 1e3)
}

fn log2_ceil(x: usize) -> f64 {
    (x.max(1) as f64).log2().ceil()
}

fn log2_floor(x: usize) -> f64 {
    (x.max(1) as f64).log2().floor()
}

/// Our allreduce algorithms (src/coll/allreduce/algo.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Algo {
    OneShot,
    TwoShot,
    Ring,
    Rd,
}

impl Algo {
    pub const ALL: [Algo; 4] = [Algo::OneShot, Algo::TwoShot, Algo::Ring, Algo::Rd];

    pub fn name(self) -> &'static str {
        match self {
            Algo::OneShot => "oneshot",
            Algo::TwoShot => "twoshot",
            Algo::Ring => "ring",
            Algo::Rd => "rd",
        }
    }
}

/// A predicted time and what gives it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Pick {
    pub us: f64,
    pub algo: &'static str,
}

fn best(cands: impl IntoIterator<Item = Pick>) -> Pick {
    cands
        .into_iter()
        .min_by(|a, b| a.us.total_cmp(&b.us))
        .expect("at least one candidate")
}

impl Params {
    /// One synchronised step between PEs: the software step, plus the wire's hop where the
    /// step crosses nodes.
    fn step(&self, topo: Topology) -> f64 {
        self.nvl_step_us + if topo.multi_node() { self.ib_us } else { 0.0 }
    }

    /// The one-shot's low-latency limit (src/coll/allreduce/settings.rs: 512 KiB at 2 PEs,
    /// 256 KiB above).
    fn ll_max(pes: usize) -> f64 {
        if pes <= 2 {
            (512 << 10) as f64
        } else {
            (256 << 10) as f64
        }
    }

    /// Time of `algo` over every GPU as one flat group, `n` bytes. Where the group spans
    /// nodes, a step waits for its slowest hop: the InfiniBand rail of the GPU that sends.
    pub fn allreduce_flat_algo(&self, algo: Algo, n: f64, topo: Topology) -> f64 {
        let p = topo.gpus as f64;
        let g = topo.per_node as f64;
        if topo.gpus == 1 {
            return 0.0;
        }
        let step = self.step(topo);
        match algo {
            Algo::OneShot => {
                // The low-latency lines carry data and flag together (twice the bytes) and
                // need every peer mapped by NVLink, so never across nodes.
                if !topo.multi_node() && n <= Self::ll_max(topo.gpus) {
                    self.nvl_ll_us + us(2.0 * (p - 1.0) * n, self.nvl_oneshot_gbps)
                } else {
                    step + us((g - 1.0) * n, self.nvl_oneshot_gbps)
                        .max(us((p - g) * n, self.ib_gbps))
                }
            }
            Algo::TwoShot => {
                2.0 * step
                    + 2.0
                        * us((g - 1.0) / p * n, self.nvl_gbps)
                            .max(us((p - g) / p * n, self.ib_gbps))
            }
            Algo::Ring => {
                let gbps = if topo.multi_node() {
                    self.ib_gbps
                } else {
                    self.nvl_gbps
                };
                2.0 * (p - 1.0) * step + us(2.0 * (p - 1.0) / p * n, gbps)
            }
            Algo::Rd => {
                // Partners at distances below a node's size stay on NVLink.
                let intra = log2_floor(topo.per_node);
                let inter = log2_ceil(topo.gpus) - intra;
                intra * (self.nvl_step_us + us(n, self.nvl_rd_gbps))
                    + inter * (self.nvl_step_us + self.ib_us + us(n, self.ib_gbps))
            }
        }
    }

    /// The fastest of our four algorithms over the flat group (what a perfect `Auto` takes).
    pub fn allreduce_flat(&self, n: f64, topo: Topology) -> Pick {
        best(Algo::ALL.map(|a| Pick {
            us: self.allreduce_flat_algo(a, n, topo),
            algo: a.name(),
        }))
    }

    /// Allreduce among one GPU per node on their rail (the middle of the hierarchical one):
    /// the fastest algorithm, as (steps' latency, bytes' time, name).
    fn allreduce_rail(&self, m: f64, nodes: usize) -> (f64, f64, &'static str) {
        if nodes <= 1 {
            return (0.0, 0.0, "-");
        }
        let n = nodes as f64;
        let step = self.nvl_step_us + self.ib_us;
        let halves = us(2.0 * (n - 1.0) / n * m, self.ib_gbps);
        [
            (step, us((n - 1.0) * m, self.ib_gbps), "oneshot"),
            (2.0 * step, halves, "twoshot"),
            (2.0 * (n - 1.0) * step, halves, "ring"),
            (
                log2_ceil(nodes) * step,
                log2_ceil(nodes) * us(m, self.ib_gbps),
                "rd",
            ),
        ]
        .into_iter()
        .min_by(|a, b| (a.0 + a.1).total_cmp(&(b.0 + b.1)))
        .expect("four candidates")
    }

    /// Hierarchical allreduce: inside each node over NVLink, then across nodes on every rail
    /// at once. Two shapes: reduce-scatter in the node, allreduce of the node's 1/g share per
    /// rail, allgather in the node (large messages); or one-shot in the node, then every rail
    /// reduces the whole message (small ones, where steps cost more than bytes). With
    /// `pipelined`, the reduce-scatter shape's phases overlap in chunks, so its bytes cost the
    /// slower of NVLink's and the rail's share instead of their sum (latencies still add).
    pub fn allreduce_hier_with(&self, n: f64, topo: Topology, pipelined: bool) -> Pick {
        if !topo.multi_node() {
            return self.allreduce_flat(n, topo);
        }
        let node = Topology::new(topo.per_node, topo.per_node).expect("valid node");
        let g = topo.per_node as f64;
        let (in_lat, in_bytes) = if topo.per_node == 1 {
            (0.0, 0.0)
        } else {
            (
                2.0 * self.nvl_step_us,
                2.0 * us((g - 1.0) / g * n, self.nvl_gbps),
            )
        };
        let (r_lat, r_bytes, r_name) = self.allreduce_rail(n / g, topo.nodes());
        let bytes = if pipelined {
            in_bytes.max(r_bytes)
        } else {
            in_bytes + r_bytes
        };
        let split = Pick {
            us: in_lat + r_lat + bytes,
            algo: hier_name("rs+", r_name),
        };
        let (w_lat, w_bytes, w_name) = self.allreduce_rail(n, topo.nodes());
        let whole = Pick {
            us: self.allreduce_flat_algo(Algo::OneShot, n, node) + w_lat + w_bytes,
            algo: hier_name("os+", w_name),
        };
        best([split, whole])
    }

    /// [`Params::allreduce_hier_with`], phases one after the other.
    pub fn allreduce_hier(&self, n: f64, topo: Topology) -> Pick {
        self.allreduce_hier_with(n, topo, false)
    }

    /// NCCL's ring allreduce: a launch and protocol base, 2(P-1) hops (each an InfiniBand
    /// hop once the ring leaves the node, as NCCL's tuning counts them), and the bytes at
    /// the slower of NVLink and the node's rails together (one ring per rail).
    pub fn nccl_ring_allreduce(&self, n: f64, topo: Topology) -> f64 {
        let p = topo.gpus as f64;
        if topo.gpus == 1 {
            return 0.0;
        }
        2.0 * (p - 1.0) * self.nccl_hop(topo)
            + self.nccl_base_us
            + us(2.0 * (p - 1.0) / p * n, self.nccl_gbps(topo))
    }

    /// NCCL's tree allreduce (multi-node only): a chain in each node and a double binary
    /// tree across nodes, reduce up then broadcast down; every GPU sends the whole message
    /// twice, each node's rails carry it twice.
    pub fn nccl_tree_allreduce(&self, n: f64, topo: Topology) -> Option<f64> {
        if !topo.multi_node() {
            return None;
        }
        let g = topo.per_node as f64;
        let lat = self.nccl_base_us
            + 2.0 * (log2_ceil(topo.nodes()) * self.ib_us + (g - 1.0) * self.nccl_nvl_hop_us);
        Some(lat + us(2.0 * n, self.nccl_nvl_gbps).max(us(2.0 * n, g * self.ib_gbps)))
    }

    fn nccl_hop(&self, topo: Topology) -> f64 {
        if topo.multi_node() {
            self.ib_us
        } else {
            self.nccl_nvl_hop_us
        }
    }

    fn nccl_gbps(&self, topo: Topology) -> f64 {
        if topo.multi_node() {
            self.nccl_nvl_gbps.min(topo.per_node as f64 * self.ib_gbps)
        } else {
            self.nccl_nvl_gbps
        }
    }

    /// Allgather by direct puts of each block to every peer; `n` is the gathered buffer (P
    /// blocks), as nccl-tests counts it. Across nodes each block crosses to every remote GPU
    /// on the sender's rail.
    pub fn allgather_flat(&self, n: f64, topo: Topology) -> f64 {
        let (p, g) = (topo.gpus as f64, topo.per_node as f64);
        if topo.gpus == 1 {
            return 0.0;
        }
        self.step(topo)
            + us((g - 1.0) / p * n, self.nvl_gbps).max(us((p - g) / p * n, self.ib_gbps))
    }

    /// Allgather across nodes on each rail first (a block crosses to each node once), then
    /// inside the node (every GPU forwards the N blocks its rail brought), as built
    /// (src/coll/node_plans.rs): one node step per node's blocks, so N NVLink steps.
    pub fn allgather_hier(&self, n: f64, topo: Topology) -> f64 {
        if !topo.multi_node() {
            return self.allgather_flat(n, topo);
        }
        let (p, g, nodes) = (topo.gpus as f64, topo.per_node as f64, topo.nodes() as f64);
        let intra = if topo.per_node > 1 {
            nodes * self.nvl_step_us + us((g - 1.0) / g * n, self.nvl_gbps)
        } else {
            0.0
        };
        self.nvl_step_us + self.ib_us + us((nodes - 1.0) / p * n, self.ib_gbps) + intra
    }

    /// NCCL's ring allgather: P-1 hops, bytes as its ring allreduce's half.
    pub fn nccl_ring_allgather(&self, n: f64, topo: Topology) -> f64 {
        let p = topo.gpus as f64;
        if topo.gpus == 1 {
            return 0.0;
        }
        self.nccl_base_us
            + (p - 1.0) * self.nccl_hop(topo)
            + us((p - 1.0) / p * n, self.nccl_gbps(topo))
    }

    /// Alltoall by direct puts, `n` the per-PE buffer (P blocks): the off-node blocks leave on
    /// the sender's rail.
    pub fn alltoall_flat(&self, n: f64, topo: Topology) -> f64 {
        self.allgather_flat(n, topo)
    }

    /// Alltoall as built (src/coll/node_plans.rs): each GPU sends its row of blocks for each
    /// remote node in one message on its rail, then the node passes every row's blocks on to
    /// their GPUs, one NVLink step per node's row. The rails carry the same bytes as the flat
    /// one; what it saves, fewer and larger InfiniBand messages, is a per-message cost this
    /// model does not have, so here it is slower by its NVLink steps.
    pub fn alltoall_hier(&self, n: f64, topo: Topology) -> f64 {
        if !topo.multi_node() {
            return self.alltoall_flat(n, topo);
        }
        let (p, g, nodes) = (topo.gpus as f64, topo.per_node as f64, topo.nodes() as f64);
        let shuffle = (g - 1.0) / g * n;
        self.nvl_step_us
            + self.ib_us
            + us((p - g) / p * n, self.ib_gbps)
            + nodes * self.nvl_step_us
            + us(shuffle, self.nvl_gbps)
    }
}

/// "rs+ring" style names: the node's shape, then the rail's algorithm.
fn hier_name(shape: &str, rail: &str) -> &'static str {
    match (shape, rail) {
        ("rs+", "oneshot") => "rs+oneshot+ag",
        ("rs+", "twoshot") => "rs+twoshot+ag",
        ("rs+", "ring") => "rs+ring+ag",
        ("rs+", "rd") => "rs+rd+ag",
        ("os+", "oneshot") => "oneshot+oneshot",
        ("os+", "twoshot") => "oneshot+twoshot",
        ("os+", "ring") => "oneshot+ring",
        ("os+", "rd") => "oneshot+rd",
        _ => "hier",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: f64 = 1024.0;
    const M: f64 = 1024.0 * 1024.0;

    fn topo(gpus: usize, per_node: usize) -> Topology {
        Topology::new(gpus, per_node).unwrap()
    }

    #[test]
    fn topology_refuses_partial_nodes_and_caps_the_node_at_the_gpus() {
        assert!(Topology::new(12, 8).is_err());
        assert!(Topology::new(0, 8).is_err());
        assert_eq!(topo(4, 8).per_node, 4);
        assert_eq!(topo(64, 8).nodes(), 8);
    }

    #[test]
    fn hierarchical_wins_on_bytes_and_flat_on_steps() {
        let p = Params::default();
        let one = topo(8, 8);
        assert_eq!(p.allreduce_hier(M, one), p.allreduce_flat(M, one));
        for gpus in [16, 64, 256] {
            let t = topo(gpus, 8);
            for n in [16.0 * M, 256.0 * M] {
                let hier = p.allreduce_hier(n, t).us;
                assert!(hier < p.allreduce_flat(n, t).us, "{gpus} {n}");
                assert!(p.allreduce_hier_with(n, t, true).us < hier);
            }
            assert!(p.allgather_hier(256.0 * M, t) < p.allgather_flat(256.0 * M, t));
            // 4 KiB: the flat allgather is one step, the hierarchical 1 + N.
            assert!(p.allgather_flat(4.0 * K, t) < p.allgather_hier(4.0 * K, t));
        }
        // As built, the node steps are one per node: at 32 nodes they cost more than the
        // bytes saved at 16 MiB, where at 8 they do not.
        let ag = |gpus| {
            let t = topo(gpus, 8);
            p.allgather_hier(16.0 * M, t) / p.allgather_flat(16.0 * M, t)
        };
        assert!(ag(64) < 1.0 && ag(256) > 1.0, "{} {}", ag(64), ag(256));
        // 4 KiB from 8 to 32 nodes: 24 node steps more (and a few bytes).
        let nodes = |gpus| p.allgather_hier(4.0 * K, topo(gpus, 8));
        let per_node = (nodes(256) - nodes(64)) / 24.0;
        assert!((per_node - p.nvl_step_us).abs() < 1e-3, "{per_node}");
    }

    #[test]
    fn bandwidth_terms_follow_the_bytes_each_gpu_sends() {
        let p = Params {
            nvl_step_us: 0.0,
            ib_us: 0.0,
            ..Params::default()
        };
        // Two-shot on one node: 2(P-1)/P of the message at the NVLink rate.
        let t = p.allreduce_flat_algo(Algo::TwoShot, 256.0 * M, topo(4, 8));
        assert!((t - us(1.5 * 256.0 * M, p.nvl_gbps)).abs() < 1e-9);
        // The tree's rails carry 2n per node over g rails.
        let tree = p.nccl_tree_allreduce(256.0 * M, topo(64, 8)).unwrap();
        let lat = p.nccl_base_us + 2.0 * 7.0 * p.nccl_nvl_hop_us;
        let bw = us(2.0 * 256.0 * M, p.nccl_nvl_gbps).max(us(2.0 * 256.0 * M, 8.0 * p.ib_gbps));
        assert!((tree - lat - bw).abs() < 1e-9);
        assert!(p.nccl_tree_allreduce(M, topo(8, 8)).is_none());
    }
}
