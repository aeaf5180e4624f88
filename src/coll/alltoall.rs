//! Alltoall: block \[r\] of every member's input into block \[its rank\] of member r's output
//! (device/coll/alltoall.cu). Each member puts into the others' outputs once they have arrived.

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
    pub fn run<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, output) = (input.into(), output.into());
        self.fam.ws().rank()?;
        let n = self.n_pes();
        if input.is_empty() {
            return Err(Error::EmptyCollective { what: "alltoall" });
        }
        let count = input.len() / n as usize;
        check_blocks("alltoall", "input", input.len(), count, n)?;
        check_blocks("alltoall", "output", output.len(), count, n)?;
        refuse_overlap("alltoall", byte_range(&input), byte_range(&output), false)?;
        let code = sys::NVSHMEMRS_COLL_ALLTOALL;
        let call = call_of(code, None, None, &input, &output, count);
        self.fam
            .call("alltoall kernel launch", &call, stream, |a, b, t, s| {
                // SAFETY: symmetric views of n x `count` elements on every member, the
                // workspace's own counters, state and PE table; every member launches the same
                // grid.
                unsafe { sys::nvshmemrs_alltoall(a, b, t, s) }
            })
    }
}

family_methods!(Alltoall, &TEXT);
