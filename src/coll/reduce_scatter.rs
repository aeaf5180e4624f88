//! Reduce-scatter: member r's output = op over members of their input block \[r\]
//! (device/coll/reduce_scatter.cu). Through receive slots, a slot's worth per launch: every step
//! is all-to-all, so slots of the same parity are free again two steps later without a
//! handshake. With every member mapped, each member may instead load its block of every input
//! over NVLink and reduce it in one pass, no slots
//! ([`crate::proto::family::FamilyProtocol::Pull`]).

use crate::coll::dispatch::{each_reducible, table_collective};
use crate::coll::family::{check_blocks, refuse_overlap, staged_call, Spec};
use crate::coll::family::{describe_family_meta, family_code_name};
use crate::coll::op::{ReduceOp, Reducible};
use crate::coll::table::Collective;
use crate::core::error::{Error, Result};
use crate::core::outside::{InBuf, OutBuf};
use crate::proto::family::family_methods;
use crate::proto::staging::StageIo;
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
    ///
    /// Each buffer is a symmetric view or this PE's own device memory ([`InBuf`], [`OutBuf`]),
    /// the latter staged through the workspace's symmetric area (docs/staging.md).
    pub fn run<'a, 'b, T: Reducible>(
        &mut self,
        input: impl Into<InBuf<'a, T>>,
        output: impl Into<OutBuf<'b, T>>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        let what = "reduce-scatter";
        let [i, o] = self.fam.ws().locate(what, &input, &mut output, stream)?;
        let rank = self.fam.ws().rank()?;
        let count = o.len();
        if count == 0 {
            return Err(Error::EmptyCollective { what });
        }
        check_blocks(what, "input", i.len(), count, self.n_pes())?;
        let (ir, or) = (i.byte_range(), o.byte_range());
        let own = ir.start + rank as usize * o.num_bytes();
        refuse_overlap(what, ir, or.clone(), or.start == own)?;
        let spec = Spec {
            code: Collective::ReduceScatter.code(),
            op: Some(op),
            root: None,
            count,
            launch: "reduce-scatter kernel launch",
        };
        staged_call(
            &mut self.fam,
            [i, o],
            StageIo::BOTH,
            spec,
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

family_methods!(ReduceScatter, &TEXT, slots, lines, pull, nodes);

table_collective!(
    ReduceScatter, ReduceScatter, choice: true,
    new: |nv, team, slot_bytes| ReduceScatter::new(nv, team, slot_bytes),
    run: |c, call, stream| {
        let op = call.op;
        each_reducible!(TEXT.call, call.bufs, |i, o| c.run(i, o, op, stream))
    }
);
