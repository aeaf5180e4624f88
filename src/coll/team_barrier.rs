//! A barrier over the world or a team, in stream order (device/coll/team_barrier.cu): each
//! member completes what it issued before (NVSHMEM puts, stores to peers), tells every other
//! member it has arrived and waits for their arrivals, under the runtime's deadline. Unlike
//! [`crate::Nvshmem::barrier_all_on_stream`] it covers a team, and checked mode compares it
//! like the other collectives (a member calling another collective instead is a typed error).

use crate::coll::dispatch::table_collective;
use crate::coll::family::{describe_family_meta, family_code_name, family_meta};
use crate::coll::table::Collective;
use crate::core::element::Dtype;
use crate::core::error::Result;
use crate::proto::family::family_methods;
use crate::proto::family::FamilyCall;
use crate::proto::{CollectiveText, FamilyWorkspace};
use crate::sys;
use cudarc::driver::CudaStream;

static TEXT: CollectiveText = CollectiveText {
    type_name: "TeamBarrier",
    call: "team barrier",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

/// A barrier over the world or a team. Create it on every PE at the same point (collective over
/// the world), then call [`TeamBarrier::run`] on every member, in the same order as the other
/// collectives of the team.
pub struct TeamBarrier<'nv> {
    fam: FamilyWorkspace<'nv>,
}

impl<'nv> TeamBarrier<'nv> {
    /// In stream order: work queued on `stream` after this call starts only once every member
    /// reached its barrier, and what each member issued before its barrier (puts, stores to
    /// peers) is then complete and visible to all of them. A member that does not arrive in
    /// time breaks the workspace ([`TeamBarrier::check`]).
    pub fn run(&mut self, stream: &CudaStream) -> Result<()> {
        let code = Collective::TeamBarrier.code();
        // No data: one element of one byte keeps the family's launch path (one block).
        let call = FamilyCall {
            code,
            meta: family_meta(Dtype::U8, None, code, None),
            input: std::ptr::null(),
            output: std::ptr::null_mut(),
            count: 1,
            stride: 1,
            elem_bytes: 1,
            root: 0,
        };
        self.fam
            .call("team barrier kernel launch", &call, stream, |a, b, t, s| {
                // SAFETY: the workspace's own counters, state and PE table; the kernel touches
                // no buffer of the call; every member launches one block.
                unsafe { sys::nvshmemrs_team_barrier(a, b, t, s) }
            })
    }
}

family_methods!(TeamBarrier, &TEXT);

table_collective!(
    TeamBarrier, TeamBarrier, choice: false,
    new: |nv, team, _slot_bytes| TeamBarrier::new(nv, team),
    // No data: the buffers are not touched.
    run: |c, _call, stream| c.run(stream)
);
