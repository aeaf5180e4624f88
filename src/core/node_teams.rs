//! The runtime's side of nodes ([`crate::core::node`]): pretend nodes applied at init (on the
//! host and in the device code), the world split into node and rail teams where it spans
//! nodes in blocks, and which peers this PE may map.

use crate::core::error::{Error, Result};
use crate::core::node::{blocked_layout, NodeLayout, NodeTeams, PRETEND_NODE_SIZE_ENV};
use crate::core::result::cuda_check;
use crate::core::runtime::{Nvshmem, Vote};
use crate::sys;

impl Nvshmem {
    /// The pretend node layout ([`PRETEND_NODE_SIZE_ENV`]), if one is set.
    pub fn pretend_nodes(&self) -> Option<NodeLayout> {
        self.pretend
    }

    /// How the world lies on nodes, where it lies in blocks of consecutive PEs over more than one
    /// node (pretend nodes included); None on one node, and where the launcher placed PEs
    /// otherwise.
    pub fn node_layout(&self) -> Option<NodeLayout> {
        self.node_teams.map(|t| t.layout)
    }

    /// Whether this PE may load and store `pe`'s memory directly as far as pretend nodes go
    /// (NVSHMEM's mapping decides the rest).
    pub(crate) fn may_map(&self, pe: i32) -> bool {
        self.pretend.is_none_or(|l| l.same_node(self.my_pe(), pe))
    }

    /// The node and rail teams, where [`Nvshmem::node_layout`] has a layout.
    pub(crate) fn node_teams(&self) -> Option<NodeTeams> {
        self.node_teams
    }

    /// PEs of this node as NVSHMEM sees it (not pretend nodes).
    pub(crate) fn real_node_pes(&self) -> i32 {
        // SAFETY: a predefined team while NVSHMEM is up.
        unsafe { sys::nvshmem_team_n_pes(sys::NVSHMEMX_TEAM_NODE as sys::nvshmem_team_t) }
    }

    /// At init, right after NVSHMEM's (collective: every PE is there): applies `pretend` on the
    /// device and splits the world into node and rail teams where it spans blocked nodes.
    pub(crate) fn start_nodes(&mut self, pretend: Option<NodeLayout>) -> Result<()> {
        let (me, n) = (self.my_pe(), self.n_pes());
        let shares = self.real_node_pes() > self.cuda_info().device_count;
        if let Some(l) = pretend {
            if shares {
                return Err(Error::InvalidEnv {
                    var: PRETEND_NODE_SIZE_ENV,
                    value: l.size().to_string(),
                    expected: "unset while several PEs share a GPU (pretend nodes need team \
                               splits, which NVSHMEM does not support then)",
                });
            }
            // SAFETY: a plain copy to a device symbol; no kernel runs yet.
            let code = unsafe { sys::nvshmemrs_set_pretend_node_size(l.size()) };
            cuda_check(code, "setting the pretend node size")?;
            self.pretend = Some(l);
            log::info!(
                "PE {me}: pretend nodes of {} PEs ({PRETEND_NODE_SIZE_ENV}): no direct loads or \
                 stores across them",
                l.size()
            );
        }
        let layout = match pretend {
            Some(l) => Some(l),
            None => {
                let node = sys::NVSHMEMX_TEAM_NODE as sys::nvshmem_team_t;
                let world = sys::NVSHMEM_TEAM_WORLD as sys::nvshmem_team_t;
                let local = self.real_node_pes();
                // SAFETY: predefined teams and ranks of this PE's node team.
                let ends = [0, local - 1]
                    .map(|r| unsafe { sys::nvshmem_team_translate_pe(node, r, world) });
                let mine = blocked_layout(local, ends, me, n).filter(|l| l.nodes() > 1 && !shares);
                // Every PE must split alike: one PE off the layout keeps them all from it.
                let any_node_splits = self.real_node_pes() < n && !shares;
                match any_node_splits {
                    false => None,
                    true => {
                        let vote = if mine.is_some() {
                            Vote::Yes
                        } else {
                            Vote::No(0)
                        };
                        match self.agree_collective("node teams", vote)? {
                            None => mine,
                            Some((pe, _)) => {
                                log::info!(
                                    "PE {me}: PE {pe} is not in a block of consecutive PEs on \
                                     its node: no node-aware collectives"
                                );
                                None
                            }
                        }
                    }
                }
            }
        };
        let Some(layout) = layout.filter(|l| l.nodes() > 1) else {
            return Ok(());
        };
        // NVSHMEM's split waits for every PE without a deadline: all are here (init).
        let mut node = sys::NVSHMEM_TEAM_INVALID as sys::nvshmem_team_t;
        let mut rail = sys::NVSHMEM_TEAM_INVALID as sys::nvshmem_team_t;
        // SAFETY: the world team, a range dividing it, out-pointers for the two teams.
        let status = unsafe {
            sys::nvshmem_team_split_2d(
                sys::NVSHMEM_TEAM_WORLD as sys::nvshmem_team_t,
                layout.size(),
                std::ptr::null(),
                0,
                &mut node,
                std::ptr::null(),
                0,
                &mut rail,
            )
        };
        if status != 0 {
            return Err(Error::TeamSplit {
                status,
                why: format!(
                    "NVSHMEM refused to split the world into {} nodes of {} PEs",
                    layout.nodes(),
                    layout.size()
                ),
            });
        }
        self.node_teams = Some(NodeTeams { layout, node, rail });
        Ok(())
    }

    /// Destroys the node teams (before NVSHMEM's finalize; collective, every PE alike).
    pub(crate) fn end_nodes(&mut self) {
        if let Some(t) = self.node_teams.take() {
            for team in [t.rail, t.node] {
                if team != sys::NVSHMEM_TEAM_INVALID as sys::nvshmem_team_t {
                    // SAFETY: a team split at init and not destroyed since.
                    unsafe { sys::nvshmem_team_destroy(team) };
                }
            }
        }
    }
}
