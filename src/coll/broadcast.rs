//! Broadcast: the root's buffer into every member's (device/coll/broadcast.cu). The root puts
//! into each member's output once that member has arrived (its output is free), so calls go back
//! to back on a stream with no barrier; NVLink stores where the peer is mapped, NVSHMEM puts
//! otherwise. Large buffers on 3 members or more go split
//! ([`crate::proto::family::FamilyProtocol::Split`]): the root scatters one part to each other
//! member, which passes it on to the rest, so that the root's links carry one buffer's worth
//! instead of n - 1.

use crate::coll::dispatch::{each_element, table_collective};
use crate::coll::family::{check_rooted, describe_family_meta, family_code_name};
use crate::coll::family::{staged_call, Spec};
use crate::coll::table::Collective;
use crate::core::element::Element;
use crate::core::error::Result;
use crate::core::outside::{InBuf, OutBuf};
use crate::proto::family::family_methods;
use crate::proto::staging::StageIo;
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
    /// root only) and `output` have the same length (at least 1) on every member, and `output`
    /// is the same symmetric buffer on every member (members write into each other's); at the
    /// root they may be the same range (in place). `root` is a team rank.
    ///
    /// Each buffer is a symmetric view or this PE's own device memory ([`InBuf`], [`OutBuf`]:
    /// a cudarc slice or view, or a raw pointer), the latter staged through the workspace's
    /// symmetric area (docs/staging.md): a copy in at the root, a copy out on every
    /// member.
    pub fn run<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<InBuf<'a, T>>,
        output: impl Into<OutBuf<'b, T>>,
        root: i32,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        let [i, o] = self
            .fam
            .ws()
            .locate("broadcast", &input, &mut output, stream)?;
        check_rooted("broadcast", &self.fam, &i, &o, root)?;
        let io = StageIo {
            read: self.fam.ws().rank()? == root,
            ..StageIo::BOTH
        };
        let spec = Spec {
            code: Collective::Broadcast.code(),
            op: None,
            root: Some(root),
            count: i.len(),
            launch: "broadcast kernel launch",
        };
        staged_call(&mut self.fam, [i, o], io, spec, stream, |a, b, t, s| {
            // SAFETY: symmetric views of `count` elements on every member, the workspace's
            // own counters, state and PE table; every member launches the same grid (from
            // the count).
            unsafe { sys::nvshmemrs_broadcast(a, b, t, s) }
        })
    }
}

family_methods!(Broadcast, &TEXT, lines, split, nodes);

table_collective!(
    Broadcast, Broadcast, choice: true,
    new: |nv, team, _slot_bytes| Broadcast::new(nv, team),
    run: |c, call, stream| {
        let root = call.root;
        each_element!(call.bufs, |i, o| c.run(i, o, root, stream))
    }
);
