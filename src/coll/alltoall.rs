//! Alltoall: block \[r\] of every member's input into block \[its rank\] of member r's output
//! (device/coll/alltoall.cu). Each member puts into the others' outputs once they have arrived.

use crate::coll::dispatch::{each_element, table_collective};
use crate::coll::family::{check_blocks, refuse_overlap, staged_call, Spec};
use crate::coll::family::{describe_family_meta, family_code_name};
use crate::coll::table::Collective;
use crate::core::element::Element;
use crate::core::error::{Error, Result};
use crate::core::outside::{InBuf, OutBuf};
use crate::proto::family::family_methods;
use crate::proto::staging::StageIo;
use crate::proto::{CollectiveText, FamilyWorkspace};
use crate::sys;
use cudarc::driver::CudaStream;

static TEXT: CollectiveText = CollectiveText {
    type_name: "Alltoall",
    call: "alltoall",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

/// An alltoall over the world or a team; create and call it as [`crate::Allreduce`].
pub struct Alltoall<'nv> {
    fam: FamilyWorkspace<'nv>,
}

impl<'nv> Alltoall<'nv> {
    /// Block \[s\] of `output` = block \[my rank\] of member s's `input`, on every member, in
    /// stream order. Both hold n_pes blocks of the same length; they must not overlap (as in
    /// NCCL, no in-place form).
    ///
    /// Each buffer is a symmetric view or this PE's own device memory ([`InBuf`], [`OutBuf`]),
    /// the latter staged through the workspace's symmetric area (docs/staging.md).
    pub fn run<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<InBuf<'a, T>>,
        output: impl Into<OutBuf<'b, T>>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        let [i, o] = self
            .fam
            .ws()
            .locate("alltoall", &input, &mut output, stream)?;
        self.fam.ws().rank()?;
        let n = self.n_pes();
        if i.is_empty() {
            return Err(Error::EmptyCollective { what: "alltoall" });
        }
        let count = i.len() / n as usize;
        check_blocks("alltoall", "input", i.len(), count, n)?;
        check_blocks("alltoall", "output", o.len(), count, n)?;
        refuse_overlap("alltoall", i.byte_range(), o.byte_range(), false)?;
        let spec = Spec {
            code: Collective::Alltoall.code(),
            op: None,
            root: None,
            count,
            launch: "alltoall kernel launch",
        };
        staged_call(
            &mut self.fam,
            [i, o],
            StageIo::BOTH,
            spec,
            stream,
            |a, b, t, s| {
                // SAFETY: symmetric views of n x `count` elements on every member, the
                // workspace's own counters, state and PE table; every member launches the same
                // grid.
                unsafe { sys::nvshmemrs_alltoall(a, b, t, s) }
            },
        )
    }
}

family_methods!(Alltoall, &TEXT, lines, nodes);

table_collective!(
    Alltoall, Alltoall, choice: true,
    new: |nv, team, _slot_bytes| Alltoall::new(nv, team),
    run: |c, call, stream| each_element!(call.bufs, |i, o| c.run(i, o, stream))
);
