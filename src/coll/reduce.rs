//! Reduce: the root's output = op over members of their inputs (device/coll/reduce.cu). Through
//! the root's receive slots, a slot's worth per launch; the root tells the others when its slots
//! are free (they are not all-to-all steps). Large buffers on 3 members or more go split
//! ([`crate::proto::family::FamilyProtocol::Split`]): each member other than the root reduces
//! one part, from every member's input sent into its slots, and stores it into the root's
//! output (at the address the root gives it in the step), n - 1 slots' worth per launch, so
//! that the root neither receives n - 1 buffers nor reduces alone. With every member mapped,
//! the root may instead load every input over NVLink and reduce it in one pass, no slots
//! ([`crate::proto::family::FamilyProtocol::Pull`]).

use crate::coll::dispatch::{each_reducible, table_collective};
use crate::coll::family::{check_rooted, describe_family_meta, family_code_name};
use crate::coll::family::{staged_call, Spec};
use crate::coll::op::{ReduceOp, Reducible};
use crate::coll::table::Collective;
use crate::core::error::Result;
use crate::core::outside::{InBuf, OutBuf};
use crate::proto::family::family_methods;
use crate::proto::staging::StageIo;
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
    /// At the root, `output` = op over members of their `input`, element-wise in rank order
    /// (the same result under every protocol); other members' outputs are not written (they
    /// need not be the root's buffer). Buffers of the same length (at least 1) on every member;
    /// the same range for in place. `root` is a team rank.
    ///
    /// Each buffer is a symmetric view or this PE's own device memory ([`InBuf`], [`OutBuf`]),
    /// the latter staged through the workspace's symmetric area (docs/staging.md): a
    /// copy in on every member, a copy out at the root.
    pub fn run<'a, 'b, T: Reducible>(
        &mut self,
        input: impl Into<InBuf<'a, T>>,
        output: impl Into<OutBuf<'b, T>>,
        op: ReduceOp,
        root: i32,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        let [i, o] = self
            .fam
            .ws()
            .locate("reduce", &input, &mut output, stream)?;
        check_rooted("reduce", &self.fam, &i, &o, root)?;
        let io = StageIo {
            write: self.fam.ws().rank()? == root,
            ..StageIo::BOTH
        };
        let spec = Spec {
            code: Collective::Reduce.code(),
            op: Some(op),
            root: Some(root),
            count: i.len(),
            launch: "reduce kernel launch",
        };
        staged_call(&mut self.fam, [i, o], io, spec, stream, |a, b, t, s| {
            // SAFETY: symmetric views of `count` elements on every member, segments that fit
            // a slot, the workspace's own slots, counters, state and PE table; every member
            // launches the same segments and grids.
            unsafe { sys::nvshmemrs_reduce(T::DTYPE as i32, op as i32, a, b, t, s) }
        })
    }
}

family_methods!(Reduce, &TEXT, slots, lines, split, pull);

table_collective!(
    Reduce, Reduce, choice: true,
    new: |nv, team, slot_bytes| Reduce::new(nv, team, slot_bytes),
    run: |c, call, stream| {
        let (op, root) = (call.op, call.root);
        each_reducible!(TEXT.call, call.bufs, |i, o| c.run(i, o, op, root, stream))
    }
);
