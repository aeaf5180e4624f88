//! Building an allreduce workspace: the symmetric allocations' layout and the constructors
//! on [`Nvshmem`], [`Team`] and [`Allreduce`].

use super::hier;
use super::meta::TEXT;
use super::online::Online;
use super::settings::{
    algo_from_env, ll_max_from_env, DirectShape, DIRECT_BLOCKS_MAX, SLOT_BLOCKS_MAX,
};
use super::Allreduce;
use crate::coll::allreduce::algo::AllreduceAlgo;
use crate::core::error::{Error, Result};
use crate::core::runtime::Nvshmem;
use crate::proto::Workspace;
use crate::sys;
use crate::team::Team;

/// Counter phases of the direct two-shot (device/abi.h).
const DIRECT_PHASES: usize = sys::NVSHMEMRS_ALLREDUCE_DIRECT_PHASES as usize;

/// Words of `nvshmemrs_allreduce_state` (device/abi.h).
const STATE_WORDS: usize = std::mem::size_of::<sys::nvshmemrs_allreduce_state>() / 8;

/// Receive-slot bytes as allocated: at least 4 KiB, a multiple of 256, and 2 x world of them
/// must fit in memory (None past usize).
fn slot_layout(slot_bytes: usize, world: usize) -> Option<(usize, usize)> {
    let slot = slot_bytes.max(4096).checked_next_multiple_of(256)?;
    let total = slot.checked_mul(world)?.checked_mul(2)?;
    Some((slot, total))
}

/// The low-latency region's slot: its lines carry 8 payload bytes in 16, for payloads up to
/// `ll_max` but no larger than a receive slot's (a multiple of 256, at least 256: never empty).
/// Returns the slot and the region (2 x world of them).
fn ll_layout(ll_max: usize, slot_bytes: usize, world: usize) -> Option<(usize, usize)> {
    let slot = ll_max
        .min(slot_bytes / 2)
        .checked_mul(2)?
        .max(256)
        .checked_next_multiple_of(256)?;
    let total = slot.checked_mul(world)?.checked_mul(2)?;
    Some((slot, total))
}

impl Nvshmem {
    /// A workspace over all PEs whose receive slots hold `slot_bytes` each (2 x n_pes of them).
    /// Larger messages are reduced in segments of that size. Collective.
    pub fn allreduce_workspace(&self, slot_bytes: usize) -> Result<Allreduce<'_>> {
        self.allreduce_workspace_for(Some(&self.team_world()), slot_bytes)
    }

    /// A workspace over `team`. Collective over the WORLD (symmetric allocation): every PE calls
    /// it at the same point with the same `slot_bytes`, each passing its own team of the same
    /// split, or None if it is in none of them (it then only takes part in the allocation; runs
    /// on it return [`Error::NotInTeam`]).
    pub fn allreduce_workspace_for(
        &self,
        team: Option<&Team<'_>>,
        slot_bytes: usize,
    ) -> Result<Allreduce<'_>> {
        let online = self.tune_mode() == crate::core::tuning::TuneMode::Online;
        self.allreduce_workspace_with(team, slot_bytes, online, true)
    }

    /// [`Nvshmem::allreduce_workspace_for`] with online tuning on, whatever `NVSH_TUNE` says:
    /// the first `Auto` call at a size bucket and dtype class the tuned table does not cover
    /// times every algorithm there (outside graph capture) and records the winner. Collective
    /// over the world; every PE must ask for it alike.
    pub fn allreduce_workspace_online(
        &self,
        team: Option<&Team<'_>>,
        slot_bytes: usize,
    ) -> Result<Allreduce<'_>> {
        self.allreduce_workspace_with(team, slot_bytes, true, true)
    }

    /// A workspace that never tunes and has only the flat algorithms: the tuner's own MAX over
    /// PEs, and the hierarchical algorithm's steps, whose rail team is the whole world where
    /// nodes hold one PE each (building steps there again would never end).
    pub(crate) fn allreduce_workspace_untuned(
        &self,
        team: Option<&Team<'_>>,
        slot_bytes: usize,
    ) -> Result<Allreduce<'_>> {
        self.allreduce_workspace_with(team, slot_bytes, false, false)
    }

    fn allreduce_workspace_with(
        &self,
        team: Option<&Team<'_>>,
        slot_bytes: usize,
        online: bool,
        with_hier: bool,
    ) -> Result<Allreduce<'_>> {
        let env_algo = algo_from_env()?;
        let world = self.n_pes() as usize;
        let (slot_bytes, scratch_bytes) =
            slot_layout(slot_bytes, world).ok_or(Error::SizeOverflow {
                what: "allreduce receive slots",
                detail: format!("2 x {world} PEs x {slot_bytes} bytes"),
            })?;
        let ws = Workspace::new(self, team, &TEXT, STATE_WORDS)?;
        log::debug!(
            "allreduce workspace over {} PE(s): {} receive slots of {} bytes, all mapped: {}",
            ws.n_pes(),
            2 * world,
            slot_bytes,
            ws.all_mapped()
        );
        let ll_max = ll_max_from_env(ws.n_pes())?;
        let direct_shape = DirectShape::from_env(ws.n_pes())?;
        let (ll_slot_bytes, ll_bytes) =
            ll_layout(ll_max, slot_bytes, world).ok_or(Error::SizeOverflow {
                what: "allreduce low-latency slots",
                detail: format!("2 x {world} PEs x 2 x {ll_max} bytes"),
            })?;
        // Zeroed: peers fill the slots (see SymmetricBuffer::allocate).
        let scratch = self.alloc_zeroed::<u8>(scratch_bytes)?;
        let ll = self.alloc_zeroed::<u8>(ll_bytes)?;
        let flags =
            self.alloc_zeroed::<u64>(AllreduceAlgo::ALL.len() * 2 * 2 * world * SLOT_BLOCKS_MAX)?;
        let direct_flags = self.alloc_zeroed::<u64>(DIRECT_PHASES * world * DIRECT_BLOCKS_MAX)?;
        let online = if online {
            Some(Box::new(Online::new(self, team)?))
        } else {
            None
        };
        let tuning_key = crate::core::tuning::collective_key(TEXT.call, ws.n_pes(), self.n_pes());
        // Every PE is a member where the team is as large as the world, so all decide alike.
        let hier = if with_hier && ws.n_pes() == self.n_pes() {
            hier::Hier::new(self, slot_bytes, |team| {
                self.allreduce_workspace_untuned(Some(team), slot_bytes)
            })?
            .map(Box::new)
        } else {
            None
        };
        ws.ready()?;
        Ok(Allreduce {
            ws,
            scratch,
            flags,
            ll,
            ll_slot_bytes,
            direct_flags,
            slot_bytes,
            env_algo,
            ll_max,
            direct_shape,
            tuning_key,
            online,
            hier,
        })
    }
}

impl<'nv> Team<'nv> {
    /// [`Nvshmem::allreduce_workspace_for`] this team (collective over the world).
    pub fn allreduce_workspace(&self, slot_bytes: usize) -> Result<Allreduce<'nv>> {
        self.runtime()
            .allreduce_workspace_for(Some(self), slot_bytes)
    }
}

impl<'nv> Allreduce<'nv> {
    /// Over `team` (None on PEs in no team of the split: they only take part in the
    /// allocation), with receive slots of `slot_bytes` each (2 x world of them); larger
    /// messages go in segments of that size. Collective over the world. The same contract as
    /// the family's `new` ([`crate::ReduceScatter::new`]); the same as
    /// [`Nvshmem::allreduce_workspace_for`].
    pub fn new(nv: &'nv Nvshmem, team: Option<&Team<'_>>, slot_bytes: usize) -> Result<Self> {
        nv.allreduce_workspace_for(team, slot_bytes)
    }

    /// Over every PE ([`Nvshmem::allreduce_workspace`]).
    pub fn world(nv: &'nv Nvshmem, slot_bytes: usize) -> Result<Self> {
        nv.allreduce_workspace(slot_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_low_latency_region_fits_its_largest_payload_twice() {
        // 512 KiB payloads need 1 MiB lines per source, unless the receive slots are smaller.
        assert_eq!(ll_layout(512 << 10, 4 << 20, 8), Some((1 << 20, 16 << 20)));
        assert_eq!(
            ll_layout(512 << 10, 64 << 10, 2),
            Some((64 << 10, 256 << 10))
        );
        // Off, or tiny: one 256-byte slot each, never an empty allocation.
        assert_eq!(ll_layout(0, 1 << 20, 4), Some((256, 2048)));
        assert_eq!(ll_layout(100, 1 << 20, 1), Some((256, 512)));
        // An odd limit rounds the slot up, so 2 x the payload always fits.
        let (slot, _) = ll_layout(1000, 1 << 20, 2).unwrap();
        assert!(slot >= 2000 && slot % 256 == 0);
        assert_eq!(ll_layout(usize::MAX / 2, usize::MAX, 2), None);
    }
}
