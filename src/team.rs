//! Teams: subsets of the PEs with their own numbering (world, node, shared, strided splits).

use crate::core::error::{Error, Result};
use crate::core::runtime::Nvshmem;
use crate::sys;

/// A team of PEs. Predefined teams live as long as the runtime; split teams are destroyed on
/// Drop (collectively: every member must drop them in the same order).
#[derive(Debug)]
pub struct Team<'nv> {
    handle: sys::nvshmem_team_t,
    owned: bool,
    nv: &'nv Nvshmem,
}

impl Nvshmem {
    /// All PEs.
    pub fn team_world(&self) -> Team<'_> {
        self.predefined(sys::NVSHMEM_TEAM_WORLD)
    }

    /// The PEs on this node; under `NVSH_PRETEND_NODE_SIZE`, on this pretend node
    /// (docs/nodes.md).
    pub fn team_node(&self) -> Team<'_> {
        match (self.pretend_nodes(), self.node_teams()) {
            (Some(_), Some(t)) => self.split_at_init(t.node),
            _ => self.predefined(sys::NVSHMEMX_TEAM_NODE),
        }
    }

    /// The PEs that can load and store each other's memory directly (NVLink/PCIe peers); under
    /// `NVSH_PRETEND_NODE_SIZE`, this pretend node's.
    pub fn team_shared(&self) -> Team<'_> {
        match (self.pretend_nodes(), self.node_teams()) {
            (Some(_), Some(t)) => self.split_at_init(t.node),
            _ => self.predefined(sys::NVSHMEM_TEAM_SHARED),
        }
    }

    /// This PE's rail: the PEs of its local index on every node (world PEs `local, local +
    /// G, ..` for nodes of G), where the world lies on nodes in blocks
    /// ([`Nvshmem::node_layout`]); None on one node.
    pub fn team_rail(&self) -> Option<Team<'_>> {
        self.node_teams().map(|t| self.split_at_init(t.rail))
    }

    /// A team the runtime split at init and destroys at finalize.
    fn split_at_init(&self, handle: sys::nvshmem_team_t) -> Team<'_> {
        Team {
            handle,
            owned: false,
            nv: self,
        }
    }

    fn predefined(&self, id: sys::nvshmem_team_id_t) -> Team<'_> {
        Team {
            handle: id as sys::nvshmem_team_t,
            owned: false,
            nv: self,
        }
    }
}

impl<'nv> Team<'nv> {
    /// NVSHMEM's handle, for raw calls.
    pub fn handle(&self) -> sys::nvshmem_team_t {
        self.handle
    }

    /// The runtime the team belongs to.
    pub fn runtime(&self) -> &'nv Nvshmem {
        self.nv
    }

    /// This PE's number in the team (-1 if not a member).
    pub fn my_pe(&self) -> i32 {
        // SAFETY: a valid team while the runtime lives.
        unsafe { sys::nvshmem_team_my_pe(self.handle) }
    }

    /// Number of PEs in the team.
    pub fn n_pes(&self) -> i32 {
        // SAFETY: as in my_pe.
        unsafe { sys::nvshmem_team_n_pes(self.handle) }
    }

    /// The number in `other` of this team's PE `pe`, None when it is not a member of `other`.
    pub fn translate_pe(&self, pe: i32, other: &Team<'_>) -> Result<Option<i32>> {
        let n = self.n_pes();
        if !(0..n).contains(&pe) {
            return Err(Error::InvalidPe { pe, n_pes: n });
        }
        // SAFETY: valid teams and an in-range PE.
        let t = unsafe { sys::nvshmem_team_translate_pe(self.handle, pe, other.handle) };
        Ok((t >= 0).then_some(t))
    }

    /// Splits off the PEs `start, start + stride, ...` (`size` of them, numbered in this team).
    /// Collective over this team: every member calls it with the same arguments. Returns None on
    /// PEs that are not in the new team.
    pub fn split_strided(&self, start: i32, stride: i32, size: i32) -> Result<Option<Team<'nv>>> {
        let n = self.n_pes();
        let last = start as i64 + stride as i64 * (size as i64 - 1);
        if size < 1 || start < 0 || start >= n || stride < 1 || last >= n as i64 {
            return Err(Error::TeamSplit {
                status: -1,
                why: format!(
                    "start {start}, stride {stride}, size {size} does not fit a team of {n} PEs \
                     (need size >= 1, stride >= 1 and start + stride * (size - 1) < {n})"
                ),
            });
        }
        if self.nv.shares_gpus() {
            // NVSHMEM aborts the process on a split in this mode.
            return Err(Error::TeamSplit {
                status: -1,
                why: "NVSHMEM does not support team splits while several PEs share a GPU \
                      (limited MPG); give every PE its own GPU"
                    .into(),
            });
        }
        self.nv.check_peers("team split")?;
        if self.n_pes() == self.nv.n_pes() {
            // A split of the world waits for every PE inside NVSHMEM, without a deadline.
            self.nv.barrier_all()?;
        }
        let mut new_team: sys::nvshmem_team_t = sys::NVSHMEM_TEAM_INVALID as sys::nvshmem_team_t;
        // SAFETY: arguments checked; NVSHMEM writes the new handle.
        let status = unsafe {
            sys::nvshmem_team_split_strided(
                self.handle,
                start,
                stride,
                size,
                std::ptr::null(),
                0,
                &mut new_team,
            )
        };
        if status != 0 {
            return Err(Error::TeamSplit {
                status,
                why: "NVSHMEM refused the split (out of team resources? see NVSHMEM_MAX_TEAMS)"
                    .into(),
            });
        }
        Ok(
            (new_team != sys::NVSHMEM_TEAM_INVALID as sys::nvshmem_team_t).then_some(Team {
                handle: new_team,
                owned: true,
                nv: self.nv,
            }),
        )
    }
}

impl Drop for Team<'_> {
    fn drop(&mut self) {
        // Destroying is collective over the team and waits without a deadline: not after a
        // peer failure (the team's resources go with the process).
        if self.owned && self.nv.peer_failure().is_none() {
            // SAFETY: a team this crate created and has not destroyed.
            unsafe { sys::nvshmem_team_destroy(self.handle) };
        }
    }
}
