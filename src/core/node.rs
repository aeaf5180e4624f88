//! Nodes: which PEs share a node, and pretend nodes on one.
//!
//! A job over several nodes places its PEs in blocks: node k holds PEs `k G .. (k + 1) G`
//! (`srun --ntasks-per-node=G`, `mpirun` by slot). Where that holds, the runtime splits the world
//! at init into node teams (the PEs of one node) and rail teams (the PEs of one local index on
//! every node: one GPU per node, over its own NIC), which the node-aware collectives run on.
//!
//! `NVSH_PRETEND_NODE_SIZE=G` (1 ..= n_pes, dividing n_pes) makes one node act as n_pes / G
//! nodes of G consecutive PEs: no direct load or store crosses a pretend node (the host's
//! [`crate::SymmetricBuffer::peer_ptr`] and the device code's `nvshmem_ptr` answer as for
//! another node, `device/core/nvshmem_device.cuh`), so every path to such a peer takes NVSHMEM
//! puts and signals; [`Nvshmem::team_node`](crate::Nvshmem::team_node) and the node-aware
//! collectives follow the pretend nodes. What it cannot show: NVSHMEM itself still moves those
//! puts over NVLink, with its own stores from the calling threads, not through the proxy or
//! over InfiniBand, so neither the proxy's ordering and timing nor InfiniBand's bandwidth and
//! latency are exercised (docs/nodes.md). What the runtime does with them at init and after:
//! `crate::core::node_teams`.

use crate::core::error::{Error, Result};
use crate::sys;

/// The environment variable that splits one node into pretend nodes of this many consecutive
/// PEs (unset, empty or 0: off).
pub const PRETEND_NODE_SIZE_ENV: &str = "NVSH_PRETEND_NODE_SIZE";

const PRETEND_EXPECTED: &str =
    "a PE count from 1 that divides the job's PE count (PEs per pretend node), or 0 (off)";

/// Nodes of `size` consecutive PEs over a job of `n_pes` (`size` divides `n_pes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLayout {
    size: i32,
    n_pes: i32,
}

impl NodeLayout {
    /// The layout, when `size` (at least 1) divides `n_pes`.
    pub fn new(size: i32, n_pes: i32) -> Option<NodeLayout> {
        (size >= 1 && n_pes >= 1 && n_pes % size == 0).then_some(NodeLayout { size, n_pes })
    }

    /// PEs per node.
    pub fn size(self) -> i32 {
        self.size
    }

    /// Nodes in the job.
    pub fn nodes(self) -> i32 {
        self.n_pes / self.size
    }

    /// The node of world PE `pe`.
    pub fn node_of(self, pe: i32) -> i32 {
        pe / self.size
    }

    /// The index of world PE `pe` on its node (its rail).
    pub fn local_of(self, pe: i32) -> i32 {
        pe % self.size
    }

    /// Whether PEs `a` and `b` share a node.
    pub fn same_node(self, a: i32, b: i32) -> bool {
        self.node_of(a) == self.node_of(b)
    }

    /// Whether the world PEs `pes` lie on more than one node.
    pub fn spans(self, pes: &[i32]) -> bool {
        pes.first()
            .is_some_and(|&p| pes.iter().any(|&q| !self.same_node(p, q)))
    }
}

/// [`PRETEND_NODE_SIZE_ENV`]'s value read for a job of `n_pes`: None when unset, empty or 0.
pub fn parse_pretend_node_size(value: Option<&str>, n_pes: i32) -> Result<Option<NodeLayout>> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let bad = || Error::InvalidEnv {
        var: PRETEND_NODE_SIZE_ENV,
        value: v.to_string(),
        expected: PRETEND_EXPECTED,
    };
    let size: i32 = v.parse().map_err(|_| bad())?;
    if size == 0 {
        return Ok(None);
    }
    NodeLayout::new(size, n_pes).map(Some).ok_or_else(bad)
}

/// [`parse_pretend_node_size`] of the environment.
pub fn pretend_node_size_from_env(n_pes: i32) -> Result<Option<NodeLayout>> {
    let v = std::env::var(PRETEND_NODE_SIZE_ENV).ok();
    parse_pretend_node_size(v.as_deref(), n_pes)
}

/// The node layout of a job whose NVSHMEM node team holds `node_pes` PEs, the first and last
/// of them (in team order, which is world order) world PEs `node_first` and `node_last`, seen
/// from world PE `me`: blocks of `node_pes` when this PE's node is such a block (every PE must
/// find the same for the job to have the layout).
pub fn blocked_layout(
    node_pes: i32,
    [node_first, node_last]: [i32; 2],
    me: i32,
    n_pes: i32,
) -> Option<NodeLayout> {
    NodeLayout::new(node_pes, n_pes).filter(|l| {
        let first = me - l.local_of(me);
        node_first == first && node_last == first + node_pes - 1
    })
}

/// The runtime's node teams: the world split into nodes and rails (NVSHMEM handles, destroyed
/// with the runtime).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeTeams {
    pub layout: NodeLayout,
    /// This PE's node: world PEs `node * size ..`.
    pub node: sys::nvshmem_team_t,
    /// This PE's rail: world PEs `local, local + size, ..`.
    pub rail: sys::nvshmem_team_t,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretend_node_sizes_must_divide_the_job() {
        let parse = |v: Option<&str>, n| parse_pretend_node_size(v, n);
        assert_eq!(parse(None, 4).unwrap(), None);
        assert_eq!(parse(Some(""), 4).unwrap(), None);
        assert_eq!(parse(Some(" 0 "), 4).unwrap(), None);
        let l = parse(Some("2"), 4).unwrap().unwrap();
        assert_eq!((l.size(), l.nodes()), (2, 2));
        assert_eq!(parse(Some("4"), 4).unwrap().unwrap().nodes(), 1);
        assert_eq!(parse(Some("1"), 3).unwrap().unwrap().nodes(), 3);
        for bad in ["3", "8", "-2", "two", "2.0"] {
            let err = parse(Some(bad), 4).unwrap_err().to_string();
            assert!(
                err.contains(PRETEND_NODE_SIZE_ENV) && err.contains("divides"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn peers_map_only_inside_their_node() {
        let l = NodeLayout::new(2, 4).unwrap();
        let same: Vec<(i32, i32)> = (0..4)
            .flat_map(|a| (0..4).map(move |b| (a, b)))
            .filter(|&(a, b)| l.same_node(a, b))
            .collect();
        assert_eq!(
            same,
            [
                (0, 0),
                (0, 1),
                (1, 0),
                (1, 1),
                (2, 2),
                (2, 3),
                (3, 2),
                (3, 3)
            ]
        );
        assert_eq!(
            (0..4).map(|p| l.local_of(p)).collect::<Vec<_>>(),
            [0, 1, 0, 1]
        );
        assert_eq!(
            (0..4).map(|p| l.node_of(p)).collect::<Vec<_>>(),
            [0, 0, 1, 1]
        );
        assert!(l.spans(&[0, 1, 2, 3]) && l.spans(&[1, 2]));
        assert!(!l.spans(&[2, 3]) && !l.spans(&[0]) && !l.spans(&[]));
        let l3 = NodeLayout::new(3, 6).unwrap();
        assert!(l3.same_node(3, 5) && !l3.same_node(2, 3));
    }

    #[test]
    fn only_blocked_nodes_make_a_layout() {
        // 2 nodes x 4: PE 5's node is PEs 4 to 7.
        assert_eq!(blocked_layout(4, [4, 7], 5, 8), NodeLayout::new(4, 8));
        // Round robin over 2 nodes: PE 2's node is PEs 0, 2, 4 and 6.
        assert_eq!(blocked_layout(4, [0, 6], 2, 8), None);
        // And PE 5's is 1, 3, 5, 7.
        assert_eq!(blocked_layout(4, [1, 7], 5, 8), None);
        // Nodes of unequal size.
        assert_eq!(blocked_layout(3, [3, 5], 4, 8), None);
    }
}
