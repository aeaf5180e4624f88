//! Allgather: every member's buffer into block [its rank] of every member's output
//! (device/coll/allgather.cu). Each member puts into the others' outputs once they have arrived
//! (their outputs are free), so calls go back to back with no barrier.

use crate::coll::family::{byte_range, call_of, check_blocks, refuse_overlap};
use crate::coll::family::{describe_family_meta, family_code_name};
use crate::core::buffer::SymView;
use crate::core::element::Element;
use crate::core::error::{Error, Result};
use crate::proto::family::family_methods;
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
    pub fn run<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, output) = (input.into(), output.into());
        let rank = self.fam.ws().rank()?;
        let count = input.len();
        if count == 0 {
            return Err(Error::EmptyCollective { what: "allgather" });
        }
        check_blocks("allgather", "output", output.len(), count, self.n_pes())?;
        let (i, o) = (byte_range(&input), byte_range(&output));
        let own = o.start + rank as usize * input.num_bytes();
        refuse_overlap("allgather", i.clone(), o, i.start == own)?;
        let code = sys::NVSHMEMRS_COLL_ALLGATHER;
        let call = call_of(code, None, None, &input, &output, count);
        self.fam
            .call("allgather kernel launch", &call, stream, |a, b, t, s| {
                // SAFETY: symmetric views of `count` and n x `count` elements on every member,
                // the workspace's own counters, state and PE table; every member launches the
                // same grid.
                unsafe { sys::nvshmemrs_allgather(a, b, t, s) }
            })
    }
}

family_methods!(Allgather, &TEXT);
