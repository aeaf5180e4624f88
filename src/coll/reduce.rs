//! Reduce: the root's output = op over members of their inputs (device/coll/reduce.cu). Through
//! the root's receive slots, a slot's worth per launch; the root tells the others when its slots
//! are free (they are not all-to-all steps).

use crate::coll::family::{byte_range, refuse_overlap};
use crate::coll::family::{describe_family_meta, family_code_name, family_meta};
use crate::coll::op::{ReduceOp, Reducible};
use crate::core::buffer::SymView;
use crate::core::error::{Error, Result};
use crate::proto::family::{check_root, family_methods};
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
        if input.len() != output.len() {
            return Err(Error::LengthMismatch {
                what: "reduce",
                dest: output.len(),
                src: input.len(),
            });
        }
        self.fam.ws().rank()?;
        if input.is_empty() {
            return Err(Error::EmptyCollective { what: "reduce" });
        }
        check_root("reduce", root, self.n_pes())?;
        let (i, o) = (byte_range(&input), byte_range(&output));
        refuse_overlap("reduce", i.clone(), o.clone(), i == o)?;
        let rank = self.fam.ws_mut().begin_call()?;
        let (count, elem) = (input.len(), std::mem::size_of::<T>());
        let code = sys::NVSHMEMRS_COLL_REDUCE;
        let header = self.fam.args(
            rank,
            input.as_device_ptr().cast(),
            output.as_device_ptr().cast(),
            count,
            count,
            elem,
            root,
        );
        let meta = family_meta(T::DTYPE, Some(op), code, Some(root));
        self.fam.exchange_header(&header, meta, code, stream)?;
        let segment = self.fam.segment_elems(elem);
        let mut start = 0;
        while start < count {
            let len = segment.min(count - start);
            let args = self.fam.args(
                rank,
                input.as_device_ptr().wrapping_add(start).cast(),
                output.as_device_ptr().wrapping_add(start).cast(),
                len,
                len,
                elem,
                root,
            );
            self.fam.launch(
                "reduce kernel launch",
                args,
                len * elem,
                stream,
                |a, b, t, s| {
                    // SAFETY: symmetric views of `count` elements on every member, a segment that
                    // fits a slot, the workspace's own slots, counters, state and PE table; every
                    // member launches the same segments and grids.
                    unsafe { sys::nvshmemrs_reduce(T::DTYPE as i32, op as i32, a, b, t, s) }
                },
            )?;
            start += len;
        }
        Ok(())
    }
}

family_methods!(Reduce, &TEXT, slots);
