//! Reduce: the root's output = op over members of their inputs (device/coll/reduce.cu). Through
//! the root's receive slots, a slot's worth per launch; the root tells the others when its slots
//! are free (they are not all-to-all steps).

use crate::coll::family::{call_of, check_rooted, describe_family_meta, family_code_name};
use crate::coll::op::{ReduceOp, Reducible};
use crate::core::buffer::SymView;
use crate::core::error::Result;
use crate::proto::family::family_methods;
use crate::proto::{CollectiveText, FamilyWorkspace};
use crate::sys;
use cudarc::driver::CudaStream;

static TEXT: CollectiveText = CollectiveText {
    type_name: "Reduce",
    call: "reduce",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

/// A reduce to a root over the world or a team; create and call it as [`crate::Allreduce`].
pub struct Reduce<'nv> {
    fam: FamilyWorkspace<'nv>,
}

impl<'nv> Reduce<'nv> {
    /// At the root, `output` = op over members of their `input`, element-wise in rank order;
    /// other members' outputs are not written. Views of the same length (at least 1) on every
    /// member; the same view for in place. `root` is a team rank.
    pub fn run<'a, 'b, T: Reducible>(
        &mut self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        op: ReduceOp,
        root: i32,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, output) = (input.into(), output.into());
        check_rooted("reduce", &self.fam, &input, &output, root)?;
        let code = sys::NVSHMEMRS_COLL_REDUCE;
        let call = call_of(code, Some(op), Some(root), &input, &output, input.len());
        self.fam
            .call("reduce kernel launch", &call, stream, |a, b, t, s| {
                // SAFETY: symmetric views of `count` elements on every member, segments that fit
                // a slot, the workspace's own slots, counters, state and PE table; every member
                // launches the same segments and grids.
                unsafe { sys::nvshmemrs_reduce(T::DTYPE as i32, op as i32, a, b, t, s) }
            })
    }
}

family_methods!(Reduce, &TEXT, slots);
