//! This PE's map of a team's members' heaps, taken once per workspace and carried in every
//! launch's header (device/abi.h `peer_delta`, device/prims/peers.cuh): member r's copy of a
//! symmetric address `a` is `a + delta[r]` where r is mapped. Read from the launch's parameters,
//! it spares a kernel two dependent loads (the PE table, then NVSHMEM's peer table) that miss
//! after a compute kernel has flushed L2. NVSHMEM maps each peer's heap as one range
//! (`nvshmem_ptr` is the peer's base plus the address's offset), so one delta per member holds
//! for every symmetric address.

use crate::core::error::Result;
use crate::sys;

/// The environment variable that turns the table off (`0`: kernels ask `nvshmem_ptr` on the
/// device, as before it existed; default `1`). For diagnostics and before/after timings.
pub const PEER_TABLE_ENV: &str = "NVSH_PEER_TABLE";

/// Members a header's table holds (a node of 8 GPUs); ranks past it ask `nvshmem_ptr`.
pub const PEER_TABLE_LEN: usize = sys::NVSHMEMRS_PEER_TABLE as usize;

/// Whether [`PEER_TABLE_ENV`] leaves the table on.
pub fn peer_table_from_env() -> Result<bool> {
    crate::core::env_value::bool_var(
        PEER_TABLE_ENV,
        true,
        "1 (launches carry the members' heap map) or 0 (kernels look it up)",
    )
}

/// The header's map of the first [`PEER_TABLE_LEN`] members.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerTable {
    delta: [i64; PEER_TABLE_LEN],
    mapped: u32,
    len: i32,
}

impl PeerTable {
    /// The table for a probe address `local` of this PE and `members[r]`, where member r maps
    /// it (None: not reachable by direct stores); empty when `on` is false.
    pub fn new(on: bool, local: usize, members: &[Option<usize>]) -> PeerTable {
        let mut t = PeerTable::default();
        if !on {
            return t;
        }
        for (r, addr) in members.iter().take(PEER_TABLE_LEN).enumerate() {
            if let Some(a) = addr {
                t.delta[r] = (*a as i64).wrapping_sub(local as i64);
                t.mapped |= 1 << r;
            }
        }
        t.len = members.len().min(PEER_TABLE_LEN) as i32;
        t
    }

    /// Writes the table into a launch's header.
    pub fn fill(&self, h: &mut sys::nvshmemrs_coll_header) {
        h.peer_delta = self.delta;
        h.peer_mapped = self.mapped;
        h.peer_table = self.len;
    }

    /// Member r's copy of `addr` as the device reads it from the table (None: not mapped, or
    /// past the table); the device's `member_ptr` for ranks below its length.
    pub fn member(&self, addr: usize, r: usize) -> Option<usize> {
        (r < self.len as usize && self.mapped >> r & 1 == 1)
            .then(|| (addr as i64).wrapping_add(self.delta[r]) as usize)
    }

    /// Whether the table gives `members[r]` (where member r maps `addr`, as for
    /// [`PeerTable::new`]) for every rank it holds: one delta per member for this address too.
    pub fn maps(&self, addr: usize, members: &[Option<usize>]) -> bool {
        members
            .iter()
            .enumerate()
            .take(self.len as usize)
            .all(|(r, &want)| self.member(addr, r) == want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_maps_every_address_by_its_delta() {
        let local = 0x7000_0000_0000;
        let members = [
            Some(local),
            Some(0x7100_0000_0000),
            None,
            Some(0x6f00_0000_0000),
        ];
        let t = PeerTable::new(true, local, &members);
        // Any address of the heap: the same offset on the member.
        let a = local + 0x1234_5670;
        assert_eq!(t.member(a, 0), Some(a));
        assert_eq!(t.member(a, 1), Some(0x7100_1234_5670));
        assert_eq!(t.member(a, 2), None);
        assert_eq!(t.member(a, 3), Some(0x6f00_1234_5670));
        assert_eq!(t.member(a, 4), None, "past the team");
        // Another allocation at the same offsets on every member: the table holds for it; a
        // member that maps it elsewhere, or not at all, breaks it.
        let b = local + 0x10_0000;
        let others = [
            Some(b),
            Some(0x7100_0010_0000),
            None,
            Some(0x6f00_0010_0000),
        ];
        assert!(t.maps(b, &others));
        let mut moved = others;
        moved[3] = Some(0x6f00_0020_0000);
        assert!(!t.maps(b, &moved));
        moved[3] = None;
        assert!(!t.maps(b, &moved));
        let mut h = sys::nvshmemrs_coll_header::default();
        t.fill(&mut h);
        assert_eq!((h.peer_table, h.peer_mapped), (4, 0b1011));
        assert_eq!(h.peer_delta[3], -0x100_0000_0000);
    }

    #[test]
    fn members_past_the_table_and_a_table_turned_off_are_looked_up_on_the_device() {
        let members: Vec<Option<usize>> = (0..12).map(|r| Some(0x1000 * (r + 1))).collect();
        let t = PeerTable::new(true, 0x1000, &members);
        assert_eq!(t.len as usize, PEER_TABLE_LEN);
        assert_eq!(
            t.member(0x1000, PEER_TABLE_LEN - 1),
            Some(0x1000 * PEER_TABLE_LEN)
        );
        assert_eq!(t.member(0x1000, PEER_TABLE_LEN), None);
        let off = PeerTable::new(false, 0x1000, &members);
        let mut h = sys::nvshmemrs_coll_header {
            peer_table: 5,
            ..Default::default()
        };
        off.fill(&mut h);
        assert_eq!((h.peer_table, h.peer_mapped), (0, 0));
    }
}
