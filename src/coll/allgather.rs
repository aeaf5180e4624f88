//! Allgather: every member's buffer into block [its rank] of every member's output
//! (device/coll/allgather.cu). Each member puts into the others' outputs once they have arrived
//! (their outputs are free), so calls go back to back with no barrier.

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
    type_name: "Allgather",
    call: "allgather",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

/// An allgather over the world or a team; create and call it as [`crate::Allreduce`].
pub struct Allgather<'nv> {
    fam: FamilyWorkspace<'nv>,
}

impl<'nv> Allgather<'nv> {
    /// Block \[r\] of `output` (n_pes x input.len() elements) = member r's `input`, on every
    /// member, in stream order. In place when `input` is this member's own block of `output`.
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
            .locate("allgather", &input, &mut output, stream)?;
        let rank = self.fam.ws().rank()?;
        let count = i.len();
        if count == 0 {
            return Err(Error::EmptyCollective { what: "allgather" });
        }
        check_blocks("allgather", "output", o.len(), count, self.n_pes())?;
        let (ir, or) = (i.byte_range(), o.byte_range());
        let own = or.start + rank as usize * i.num_bytes();
        refuse_overlap("allgather", ir.clone(), or, ir.start == own)?;
        let spec = Spec {
            code: Collective::Allgather.code(),
            op: None,
            root: None,
            count,
            launch: "allgather kernel launch",
        };
        staged_call(
            &mut self.fam,
            [i, o],
            StageIo::BOTH,
            spec,
            stream,
            |a, b, t, s| {
                // SAFETY: symmetric views of `count` and n x `count` elements on every member,
                // the workspace's own counters, state and PE table; every member launches the
                // same grid.
                unsafe { sys::nvshmemrs_allgather(a, b, t, s) }
            },
        )
    }
}

family_methods!(Allgather, &TEXT, lines, nodes);

table_collective!(
    Allgather, Allgather, choice: true,
    new: |nv, team, _slot_bytes| Allgather::new(nv, team),
    run: |c, call, stream| each_element!(call.bufs, |i, o| c.run(i, o, stream))
);
