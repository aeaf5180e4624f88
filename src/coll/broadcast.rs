//! Broadcast: the root's buffer into every member's (device/coll/broadcast.cu). The root puts
//! into each member's output once that member has arrived (its output is free), so calls go back
//! to back on a stream with no barrier; NVLink stores where the peer is mapped, NVSHMEM puts
//! otherwise.

use crate::coll::family::refuse_overlap;
use crate::coll::family::{byte_range, describe_family_meta, family_code_name, family_meta};
use crate::core::buffer::SymView;
use crate::core::element::Element;
use crate::core::error::{Error, Result};
use crate::proto::family::{check_root, family_methods};
use crate::proto::{CollectiveText, FamilyWorkspace};
use crate::sys;
use cudarc::driver::CudaStream;

static TEXT: CollectiveText = CollectiveText {
    type_name: "Broadcast",
    call: "broadcast",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

/// A broadcast over the world or a team. Create it on every PE at the same point (collective
/// over the world), then call [`Broadcast::run`] on every member with the same length, type and
/// root, in the same order.
pub struct Broadcast<'nv> {
    fam: FamilyWorkspace<'nv>,
}

impl<'nv> Broadcast<'nv> {
    /// `output = input of the root` on every member, in stream order. `input` (read at the
    /// root only) and `output` are symmetric views of the same length (at least 1) on every
    /// member; at the root they may be the same view (in place). `root` is a team rank.
    pub fn run<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        root: i32,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, output) = (input.into(), output.into());
        if input.len() != output.len() {
            return Err(Error::LengthMismatch {
                what: "broadcast",
                dest: output.len(),
                src: input.len(),
            });
        }
        self.fam.ws().rank()?;
        if input.is_empty() {
            return Err(Error::EmptyCollective { what: "broadcast" });
        }
        check_root("broadcast", root, self.n_pes())?;
        let (i, o) = (byte_range(&input), byte_range(&output));
        refuse_overlap("broadcast", i.clone(), o.clone(), i == o)?;
        let rank = self.fam.ws_mut().begin_call()?;
        let count = input.len();
        let args = self.fam.args(
            rank,
            input.as_device_ptr().cast(),
            output.as_device_ptr().cast(),
            count,
            count,
            std::mem::size_of::<T>(),
            root,
        );
        let code = sys::NVSHMEMRS_COLL_BROADCAST;
        let meta = family_meta(T::DTYPE, None, code, Some(root));
        self.fam.exchange_header(&args, meta, code, stream)?;
        self.fam.launch(
            "broadcast kernel launch",
            args,
            input.num_bytes(),
            stream,
            |a, b, t, s| {
                // SAFETY: symmetric views of `count` elements on every member, the workspace's own
                // counters, state and PE table; every member launches the same grid (from the
                // count).
                unsafe { sys::nvshmemrs_broadcast(a, b, t, s) }
            },
        )
    }
}

family_methods!(Broadcast, &TEXT);
