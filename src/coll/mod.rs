//! Collectives over the protocol layer ([`crate::proto`]): the table of collectives
//! ([`table`]), the reduction ops, selection tables, and one module per collective.

pub mod allgather;
pub mod allgatherv;
pub mod allreduce;
pub mod alltoall;
pub mod alltoallv;
pub mod broadcast;
pub mod dispatch;
pub mod family;
pub mod group;
pub mod node_plans;
pub mod op;
pub mod reduce;
pub mod reduce_scatter;
pub mod select;
pub mod table;
pub mod team_barrier;
pub mod tuning;

use crate::coll::dispatch::{Create, TableCollective};
use crate::coll::table::Collective;
use crate::core::error::Result;

impl Collective {
    /// Its workspace over `team` (None on PEs in no team of the split), with receive slots of
    /// `slot_bytes` where it has slots, to be called through [`TableCollective`]. Collective
    /// over the world.
    pub fn create<'nv>(
        self,
        nv: &'nv crate::Nvshmem,
        team: Option<&crate::Team<'_>>,
        slot_bytes: usize,
    ) -> Result<Box<dyn TableCollective<'nv> + 'nv>> {
        // The table's rows are data that every collective's file reads, so they cannot name
        // the files back (an import cycle); each row's constructor is here instead, beside
        // the modules' declarations.
        let create: Create = match self {
            Collective::Allreduce => allreduce::create,
            Collective::Broadcast => broadcast::create,
            Collective::Reduce => reduce::create,
            Collective::Allgather => allgather::create,
            Collective::Allgatherv => allgatherv::create,
            Collective::ReduceScatter => reduce_scatter::create,
            Collective::Alltoall => alltoall::create,
            Collective::Alltoallv => alltoallv::create,
            Collective::Group => group::create,
            Collective::TeamBarrier => team_barrier::create,
        };
        create(nv, team, slot_bytes)
    }

    /// Its workspace over every PE ([`Collective::create`]).
    pub fn world<'nv>(
        self,
        nv: &'nv crate::Nvshmem,
        slot_bytes: usize,
    ) -> Result<Box<dyn TableCollective<'nv> + 'nv>> {
        self.create(nv, Some(&nv.team_world()), slot_bytes)
    }
}
