//! Reduce-scatter: member r's output = op over members of their input block \[r\]
//! (device/coll/reduce_scatter.cu). Through receive slots, a slot's worth per launch: every step
//! is all-to-all, so slots of the same parity are free again two steps later without a
//! handshake.

use crate::coll::family::{byte_range, call_of, check_blocks, refuse_overlap};
use crate::coll::family::{describe_family_meta, family_code_name};
use crate::coll::op::{ReduceOp, Reducible};
use crate::core::buffer::SymView;
use crate::core::error::{Error, Result};
use crate::proto::family::family_methods;
use crate::proto::{CollectiveText, FamilyWorkspace};
use crate::sys;
use cudarc::driver::CudaStream;

static TEXT: CollectiveText = CollectiveText {
    type_name: "ReduceScatter",
    call: "reduce-scatter",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

/// A reduce-scatter over the world or a team; create and call it as [`crate::Allreduce`].
pub struct ReduceScatter<'nv> {
    fam: FamilyWorkspace<'nv>,
}

impl<'nv> ReduceScatter<'nv> {
    /// `output` = op over members of block [my rank] of their `input` (n_pes x output.len()
    /// elements), element-wise in rank order, in stream order. In place when `output` is this
    /// member's own block of `input`.
    pub fn run<'a, 'b, T: Reducible>(
        &mut self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, output) = (input.into(), output.into());
        let rank = self.fam.ws().rank()?;
        let count = output.len();
        if count == 0 {
            return Err(Error::EmptyCollective {
                what: "reduce-scatter",
            });
        }
        check_blocks("reduce-scatter", "input", input.len(), count, self.n_pes())?;
        let (i, o) = (byte_range(&input), byte_range(&output));
        let own = i.start + rank as usize * output.num_bytes();
        refuse_overlap("reduce-scatter", i, o.clone(), o.start == own)?;
        let code = sys::NVSHMEMRS_COLL_REDUCE_SCATTER;
        let call = call_of(code, Some(op), None, &input, &output, count);
        self.fam.call(
            "reduce-scatter kernel launch",
            &call,
            stream,
            |a, b, t, s| {
                // SAFETY: symmetric views (n x `count` and `count` elements) on every member,
                // segments that fit a slot, the workspace's own slots, counters, state and PE
                // table; every member launches the same segments and grids.
                unsafe { sys::nvshmemrs_reduce_scatter(T::DTYPE as i32, op as i32, a, b, t, s) }
            },
        )
    }
}

family_methods!(ReduceScatter, &TEXT, slots);
