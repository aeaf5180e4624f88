//! The node-aware (hierarchical) form of a family collective: the collective's own kernel run
//! as a few steps on workspaces over this PE's node (NVLink) and its rail (the PEs of its local
//! index on every node, which reach each other only with NVSHMEM puts and signals), on a
//! workspace over the world where the world spans nodes in blocks ([`crate::core::node`]).
//!
//! This file holds what a plan is made of and the steps' workspaces and scratch; the plans
//! themselves (which steps each collective takes) are `crate::coll::node_plans`, and
//! [`crate::proto::FamilyWorkspace`] runs them. The steps run one after the other in stream
//! order, each with its own handshakes, deadlines and checked-mode header, as the hierarchical
//! allreduce's do (`crate::coll::allreduce::hier`).

use crate::core::error::{Error, Result};
use crate::core::runtime::Nvshmem;
use crate::core::stream::is_capturing;
use crate::proto::staging::{grown_capacity, Staging};
use cudarc::driver::CudaStream;

/// The environment variable: `Auto` on a world workspace whose world spans nodes takes the
/// node-aware steps for allgather, reduce-scatter, broadcast and alltoall from this many bytes
/// per rank block on. Every PE must set the same.
pub const FAMILY_HIER_MIN_ENV: &str = "NVSH_FAMILY_HIER_MIN";
/// Default of [`FAMILY_HIER_MIN_ENV`]: never (only when asked for with
/// `FamilyProtocol::Hierarchical`), until the steps have been run across pretend nodes on
/// separate GPUs (docs/nodes.md).
pub const FAMILY_HIER_MIN_DEFAULT: usize = usize::MAX;

/// The team a step runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepTeam {
    /// This PE's node (team rank: its local index).
    Node,
    /// This PE's rail (team rank: its node).
    Rail,
}

/// Which of the call's buffers a step reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// The call's input.
    Input,
    /// The call's output.
    Output,
    /// The steps' own symmetric scratch ([`NodePlan::scratch`] elements).
    Scratch,
}

/// A buffer of a step: a place and an element offset into it.
pub type At = (Place, usize);

/// One launch of the collective's kernel on the node or rail team, as a flat call there
/// would make it: `count` elements per rank block, rank blocks `stride` apart, the root a
/// rank of that team.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeStep {
    pub team: StepTeam,
    pub input: At,
    pub output: At,
    pub count: usize,
    pub stride: usize,
    pub root: i32,
}

/// A collective's steps on one PE, and the scratch elements they need (the same on every PE).
/// The members of each node and each rail take their steps on that team in the same order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePlan {
    pub steps: Vec<NodeStep>,
    pub scratch: usize,
}

/// The device address of `at` in buffers `bases` (input, output, scratch) of `elem_bytes`-byte
/// elements.
pub(crate) fn address(
    bases: [*mut std::ffi::c_void; 3],
    (place, offset): At,
    elem_bytes: usize,
) -> *mut std::ffi::c_void {
    let base = match place {
        Place::Input => bases[0],
        Place::Output => bases[1],
        Place::Scratch => bases[2],
    };
    base.cast::<u8>().wrapping_add(offset * elem_bytes).cast()
}

/// The steps' workspaces (`W`: the family's, over the node and over the rail) and scratch.
pub(crate) struct NodeSteps<'nv, W> {
    pub node: W,
    pub rail: W,
    /// Symmetric, grown by calls that need more (collective: every PE needs the same), as the
    /// staging area grows.
    scratch: Staging<'nv>,
}

impl<'nv, W> NodeSteps<'nv, W> {
    pub fn new(node: W, rail: W) -> NodeSteps<'nv, W> {
        NodeSteps {
            node,
            rail,
            scratch: Staging::default(),
        }
    }

    /// The workspace of `team`.
    pub fn on(&mut self, team: StepTeam) -> &mut W {
        match team {
            StepTeam::Node => &mut self.node,
            StepTeam::Rail => &mut self.rail,
        }
    }

    /// Makes the scratch hold `bytes` for a call of `what` (the old one is freed after the
    /// device's queued work). Collective over the world: every PE at the same point with the
    /// same `bytes`, which a call of equal sizes on every PE gives. Not during graph capture.
    pub fn reserve(
        &mut self,
        nv: &'nv Nvshmem,
        what: &'static str,
        bytes: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let has = self.scratch.capacity();
        if bytes <= has {
            return Ok(());
        }
        if is_capturing(stream) {
            return Err(Error::CollectiveShape {
                what,
                detail: format!(
                    "the hierarchical steps need {bytes} bytes of scratch and hold {has}; make \
                     one call of this size before capturing the graph"
                ),
            });
        }
        let grown = grown_capacity(bytes);
        log::debug!("{what}: hierarchical scratch grows from {has} to {grown} bytes");
        self.scratch.reserve(nv, grown)
    }

    /// Device address of the scratch (before any call that needs one, an address no step
    /// reads or writes through: its plan has no scratch).
    pub fn scratch_ptr(&self) -> *mut std::ffi::c_void {
        self.scratch.base() as *mut std::ffi::c_void
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_element_offsets_into_their_buffer() {
        let b = |a: usize| a as *mut std::ffi::c_void;
        let bases = [b(0x1000), b(0x2000), b(0x3000)];
        assert_eq!(address(bases, (Place::Input, 3), 4), b(0x100c));
        assert_eq!(address(bases, (Place::Output, 0), 8), b(0x2000));
        assert_eq!(address(bases, (Place::Scratch, 5), 2), b(0x300a));
    }
}
