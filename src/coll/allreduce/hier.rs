//! The node-aware (hierarchical) allreduce, for a workspace over the world where it spans
//! nodes in blocks ([`crate::core::node`], pretend nodes included): reduce-scatter inside each
//! node (NVLink), an allreduce of each shard across nodes on its rail (one per local GPU index:
//! the PEs of that index on every node, which reach each other only with NVSHMEM puts and
//! signals), then an allgather inside each node. Each node sends 2 (nodes - 1) / nodes of the
//! message across nodes in all, split evenly over its G rails, where a flat algorithm over
//! every PE sends it from every PE.
//!
//! Built from the collectives themselves, each on a workspace of its own over the node or the
//! rail team: the steps run one after the other in stream order, each with its own handshakes
//! and deadlines. A count that G does not divide leaves `count % G` elements past the last
//! whole shard; those are reduced by an allreduce inside the node, then one across the rail.

use crate::coll::allgather::Allgather;
use crate::coll::allreduce::algo::AllreduceAlgo;
use crate::coll::op::{refused_in_steps, ReduceOp, Reducible};
use crate::coll::reduce_scatter::ReduceScatter;
use crate::core::buffer::SymView;
use crate::core::error::Result;
use crate::core::node::NodeLayout;
use crate::core::runtime::Nvshmem;
use crate::team::Team;
use cudarc::driver::CudaStream;
use std::time::Duration;

/// The environment variable: `Auto` on a workspace over several nodes takes the hierarchical
/// algorithm from this many bytes on (default 0: `HIER_MIN_DEFAULT`); below it, the flat table.
/// `1T` leaves it to explicit requests.
pub const HIER_MIN_ENV: &str = "NVSH_ALLREDUCE_HIER_MIN";
/// Not measured across real nodes yet: every size, as the issue asks of a team over nodes.
pub const HIER_MIN_DEFAULT: usize = 0;

/// What `Auto` takes before the tuned and built-in tables, or None to leave it to them:
/// NVSH_ALLREDUCE_ALGO (`env`) where it names an algorithm the workspace has, else on a
/// workspace with the steps (`min_bytes`: [`HIER_MIN_ENV`]) the hierarchical algorithm for
/// calls of `min_bytes` or more. `serves`: [`ReduceOp::reduces_in_steps`] for the call; where
/// it is false the hierarchical algorithm is never taken (not even where `env` names it).
pub(crate) fn auto_first(
    env: Option<AllreduceAlgo>,
    min_bytes: Option<usize>,
    bytes: usize,
    serves: bool,
) -> Option<AllreduceAlgo> {
    let hier = AllreduceAlgo::Hierarchical;
    match env {
        None | Some(AllreduceAlgo::Auto) => {}
        Some(a) if a == hier => return (min_bytes.is_some() && serves).then_some(hier),
        Some(a) => return Some(a),
    }
    (min_bytes.is_some_and(|m| bytes >= m) && serves).then_some(hier)
}

/// Where a message of `count` elements goes over nodes of `g` PEs: whole shards of `shard`
/// elements (`g * shard` of them in all), and the `count - g * shard` past them.
pub(crate) fn split_count(count: usize, g: usize) -> (usize, usize) {
    let shard = count / g.max(1);
    (shard, count - shard * g.max(1))
}

/// What the steps need of a flat allreduce workspace over one node or one rail (the
/// allreduce's own, `super::Allreduce`; a trait so that this file need not name it).
pub(crate) trait FlatStep {
    /// `output = op(input of every member)` by the workspace's `Auto` choice, which is flat
    /// (it spans one node or one rail).
    fn reduce<T: Reducible>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()>;
    /// The first failure its kernels recorded.
    fn check(&self) -> Result<()>;
    /// Its timeout.
    fn set_timeout(&mut self, timeout: Duration);
}

/// The steps' workspaces (each collective over the world, like every workspace).
pub(crate) struct Hier<'nv, A> {
    layout: NodeLayout,
    /// This PE's index on its node.
    local: usize,
    rs: ReduceScatter<'nv>,
    ag: Allgather<'nv>,
    /// Inside the node: the elements past the whole shards.
    node_ar: A,
    /// Across nodes, on this PE's rail.
    rail_ar: A,
    /// `Auto` takes this algorithm from this many bytes on ([`HIER_MIN_ENV`]).
    pub min_bytes: usize,
}

impl<'nv, A: FlatStep> Hier<'nv, A> {
    /// The steps' workspaces where the world spans nodes in blocks (None otherwise), each with
    /// receive slots of `slot_bytes`; `flat` makes the allreduce workspace over a team.
    /// Collective over the world (every PE decides alike: the layout is the runtime's).
    pub(crate) fn new(
        nv: &'nv Nvshmem,
        slot_bytes: usize,
        flat: impl Fn(&Team<'_>) -> Result<A>,
    ) -> Result<Option<Hier<'nv, A>>> {
        let (Some(layout), Some(rail)) = (nv.node_layout(), nv.team_rail()) else {
            return Ok(None);
        };
        if layout.nodes() < 2 {
            return Ok(None);
        }
        let min_bytes = crate::core::env_value::size_from_env(
            HIER_MIN_ENV,
            HIER_MIN_DEFAULT,
            "a size in bytes such as 1M, or 1T to take it only when asked for",
        )?;
        let node = nv.team_node();
        let rs = ReduceScatter::new(nv, Some(&node), slot_bytes)?;
        let ag = Allgather::new(nv, Some(&node))?;
        let node_ar = flat(&node)?;
        let rail_ar = flat(&rail)?;
        Ok(Some(Hier {
            layout,
            local: layout.local_of(nv.my_pe()) as usize,
            rs,
            ag,
            node_ar,
            rail_ar,
            min_bytes,
        }))
    }

    /// The layout the steps follow.
    pub(crate) fn layout(&self) -> NodeLayout {
        self.layout
    }

    /// `output = op(input of every PE)` on checked symmetric views of equal length, in place
    /// or apart (every member the same count).
    pub(crate) fn run<T: Reducible>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        if !op.reduces_in_steps(T::DTYPE) {
            return Err(refused_in_steps(
                "allreduce",
                "the hierarchical algorithm's steps",
                T::DTYPE,
            ));
        }
        let count = input.len();
        let g = self.layout.size() as usize;
        let (shard, rest) = split_count(count, g);
        let whole = shard * g;
        if shard > 0 {
            let own = output.view(self.local * shard..(self.local + 1) * shard)?;
            // In place this is the reduce-scatter's and the allgather's own in-place form.
            self.rs.run(input.view(0..whole)?, own, op, stream)?;
            self.rail_ar.reduce(own, own, op, stream)?;
            self.ag.run(own, output.view(0..whole)?, stream)?;
        }
        if rest > 0 {
            let (i, o) = (input.view(whole..count)?, output.view(whole..count)?);
            self.node_ar.reduce(i, o, op, stream)?;
            self.rail_ar.reduce(o, o, op, stream)?;
        }
        Ok(())
    }

    /// The first failure any step's workspace recorded.
    pub(crate) fn check(&self) -> Result<()> {
        self.rs.check()?;
        self.ag.check()?;
        self.node_ar.check()?;
        self.rail_ar.check()
    }

    /// Sets every step's timeout.
    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.rs.set_timeout(timeout);
        self.ag.set_timeout(timeout);
        self.node_ar.set_timeout(timeout);
        self.rail_ar.set_timeout(timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::element::Dtype;

    #[test]
    fn auto_takes_hier_only_where_the_workspace_has_it() {
        use AllreduceAlgo::*;
        let first = auto_first;
        // No steps (one node, or a team smaller than the world): the tables decide, even
        // where NVSH_ALLREDUCE_ALGO says hier.
        assert_eq!(first(None, None, 1 << 20, true), None);
        assert_eq!(first(Some(Hierarchical), None, 1 << 20, true), None);
        assert_eq!(first(Some(Ring), None, 1 << 20, true), Some(Ring));
        // Over several nodes: from the threshold on, unless the env names a flat one.
        assert_eq!(first(None, Some(0), 4, true), Some(Hierarchical));
        assert_eq!(first(Some(Auto), Some(0), 4, true), Some(Hierarchical));
        assert_eq!(first(None, Some(1 << 20), 4, true), None);
        assert_eq!(
            first(None, Some(1 << 20), 1 << 20, true),
            Some(Hierarchical)
        );
        assert_eq!(first(Some(OneShot), Some(0), 4, true), Some(OneShot));
        assert_eq!(
            first(Some(Hierarchical), Some(1 << 20), 4, true),
            Some(Hierarchical)
        );
        // A call it does not serve (an integer average) is left to the tables.
        assert_eq!(first(None, Some(0), 4, false), None);
        assert_eq!(first(Some(Hierarchical), Some(0), 4, false), None);
    }

    #[test]
    fn integer_averages_stay_flat() {
        let serves = |op: ReduceOp, dtype| op.reduces_in_steps(dtype);
        assert!(serves(ReduceOp::Avg, Dtype::Bf16) && serves(ReduceOp::Avg, Dtype::F32));
        assert!(serves(ReduceOp::Sum, Dtype::I32) && serves(ReduceOp::Max, Dtype::U64));
        assert!(!serves(ReduceOp::Avg, Dtype::I32) && !serves(ReduceOp::Avg, Dtype::U64));
    }

    #[test]
    fn shards_cover_the_message() {
        assert_eq!(split_count(8, 2), (4, 0));
        assert_eq!(split_count(7, 2), (3, 1));
        assert_eq!(split_count(1, 2), (0, 1));
        assert_eq!(split_count(1001, 4), (250, 1));
        for count in 1..50 {
            for g in 1..6 {
                let (shard, rest) = split_count(count, g);
                assert_eq!(shard * g + rest, count);
                assert!(rest < g);
            }
        }
    }
}
