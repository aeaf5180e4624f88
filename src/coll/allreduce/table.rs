//! Allreduce as a row of the collectives' table ([`crate::coll::table`]).

use super::Allreduce;
use crate::coll::allreduce::algo::AllreduceAlgo;
use crate::core::error::Result;
use crate::core::runtime::Nvshmem;
use crate::team::Team;
use cudarc::driver::CudaStream;

/// Allreduce in the table ([`crate::coll::table::COLLECTIVES`]): `Auto`'s algorithm, no family
/// protocols.
impl<'nv> crate::coll::dispatch::TableCollective<'nv> for Allreduce<'nv> {
    fn collective(&self) -> crate::coll::table::Collective {
        crate::coll::table::Collective::Allreduce
    }

    fn run_any(
        &mut self,
        call: crate::coll::dispatch::AnyCall<'_, '_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let op = call.op;
        crate::coll::dispatch::each_reducible!("allreduce", call.bufs, |i, o| self
            .run(i, o, op, AllreduceAlgo::Auto, stream)
            .map(|_| ()))
    }

    fn n_pes(&self) -> i32 {
        Allreduce::n_pes(self)
    }

    fn check(&self) -> Result<()> {
        Allreduce::check(self)
    }

    fn reserve_staging(&mut self, bytes: usize) -> Result<()> {
        Allreduce::reserve_staging(self, bytes)
    }

    fn staging_bytes(&self) -> usize {
        Allreduce::staging_bytes(self)
    }

    fn lines_max(&self) -> usize {
        0
    }

    fn slot_bytes(&self) -> Option<usize> {
        Some(Allreduce::slot_bytes(self))
    }

    fn protocols(&self) -> Vec<crate::proto::family::FamilyProtocol> {
        Vec::new()
    }

    fn set_protocol(&mut self, _: crate::proto::family::FamilyProtocol) {}

    fn last_protocol(&self) -> Option<crate::proto::family::FamilyProtocol> {
        None
    }

    fn settings(&self) -> Option<String> {
        Some(Allreduce::settings(self))
    }
}

/// Its row's constructor ([`crate::Collective::create`]).
pub(crate) fn create<'nv>(
    nv: &'nv Nvshmem,
    team: Option<&Team<'_>>,
    slot_bytes: usize,
) -> Result<Box<dyn crate::coll::dispatch::TableCollective<'nv> + 'nv>> {
    Ok(Box::new(Allreduce::new(nv, team, slot_bytes)?))
}
