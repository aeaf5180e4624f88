//! Teams from Python: `split_strided(start, stride, size)` splits the world into a `Team`, and
//! the collectives of coll.rs take `team=` to run over it.
//!
//! A team's workspaces are allocated collectively over the world (every PE, members or not),
//! so they are all made at the split, which is collective over the world too: every PE gets a
//! `Team`, non-members one whose calls raise `NotInTeam`. The team and its workspaces live in
//! the runtime's state by id (as channels do) and are released as symmetric buffers are: the
//! last Python reference queues it, and it is freed when every PE has (release.rs).

use crate::error::{raise, runtime_error};
use crate::runtime::with_collected_state;
use crate::state::{TeamState, Teams, Workspaces, SLOT_BYTES};
use nvshmem::{Allgather, Alltoall, Broadcast, Reduce, ReduceScatter, Team, TeamBarrier};
use pyo3::prelude::*;

/// The workspaces a call runs on: the world's (`team` None) or the team's.
pub(crate) fn workspaces_for<'s>(
    py: Python<'_>,
    world: &'s mut Workspaces,
    teams: &'s mut Teams,
    team: Option<u64>,
) -> PyResult<&'s mut Workspaces> {
    match team {
        None => Ok(world),
        Some(id) => teams.get_mut(&id).map(|t| &mut t.colls).ok_or_else(|| {
            raise(
                py,
                "Finalized",
                "this team was released with the runtime at finalize(); it runs nothing any \
                 more"
                    .into(),
            )
        }),
    }
}

/// The split team of `id` (None on PEs outside it), for what is made over a team.
pub(crate) fn team_of<'s>(
    py: Python<'_>,
    teams: &'s Teams,
    id: u64,
) -> PyResult<Option<&'s Team<'static>>> {
    teams.get(&id).map(|t| t.team.as_ref()).ok_or_else(|| {
        raise(
            py,
            "Finalized",
            "this team was released with the runtime at finalize(); nothing runs over it any \
             more"
                .into(),
        )
    })
}

/// The team's id from the `team=` argument of a call.
pub(crate) fn team_id(team: Option<&Bound<'_, PyTeam>>) -> Option<u64> {
    team.map(|t| t.get().id)
}

/// PEs `start, start + stride, ...` (`size` of them) of the world as a team of their own, with
/// its own numbering: pass it as `team=` to the collectives (roots are then team ranks).
/// Made by `split_strided`; on PEs outside it, `rank` is -1 and calls raise `NotInTeam`.
#[pyclass(frozen, module = "nvshmem_rs", name = "Team")]
pub(crate) struct PyTeam {
    id: u64,
    rank: i32,
    size: i32,
    start: i32,
    stride: i32,
}

#[pymethods]
impl PyTeam {
    /// This PE's rank in the team, -1 outside it.
    #[getter]
    fn rank(&self) -> i32 {
        self.rank
    }

    /// The number of PEs in the team.
    #[getter]
    fn size(&self) -> i32 {
        self.size
    }

    /// Whether this PE is in the team.
    #[getter]
    fn is_member(&self) -> bool {
        self.rank >= 0
    }

    /// World rank of the team's PE 0.
    #[getter]
    fn start(&self) -> i32 {
        self.start
    }

    /// World ranks from one team PE to the next.
    #[getter]
    fn stride(&self) -> i32 {
        self.stride
    }

    fn __repr__(&self) -> String {
        format!(
            "Team(start={}, stride={}, size={}, rank={})",
            self.start, self.stride, self.size, self.rank
        )
    }
}

/// Splits the world: PEs `start, start + stride, ...`, `size` of them, form a team, and its
/// collectives' workspaces are made. Collective over the world: every PE calls it with the
/// same arguments (after `configure`, whose slot size the team's workspaces take too).
#[pyfunction]
pub(crate) fn split_strided(
    py: Python<'_>,
    start: i32,
    stride: i32,
    size: i32,
) -> PyResult<PyTeam> {
    let (id, rank) = with_collected_state(py, "split_strided", |nv, state| {
        let team = nv
            .team_world()
            .split_strided(start, stride, size)
            .map_err(|e| runtime_error(py, e))?;
        let slot = state.colls.slot_bytes.unwrap_or(SLOT_BYTES);
        let t = team.as_ref();
        let err = |e| runtime_error(py, e);
        let colls = Workspaces {
            allreduce: Some(nv.allreduce_workspace_for(t, slot).map_err(err)?),
            broadcast: Some(Broadcast::new(nv, t).map_err(err)?),
            reduce: Some(Reduce::new(nv, t, slot).map_err(err)?),
            allgather: Some(Allgather::new(nv, t).map_err(err)?),
            reduce_scatter: Some(ReduceScatter::new(nv, t, slot).map_err(err)?),
            alltoall: Some(Alltoall::new(nv, t).map_err(err)?),
            barrier: Some(TeamBarrier::new(nv, t).map_err(err)?),
            slot_bytes: Some(slot),
            ..Workspaces::default()
        };
        let rank = team.as_ref().map_or(-1, Team::my_pe);
        let id = crate::release::next_seq();
        state.teams.insert(id, TeamState { colls, team });
        Ok((id, rank))
    })?;
    Ok(PyTeam {
        id,
        rank,
        size,
        start,
        stride,
    })
}

impl Drop for PyTeam {
    fn drop(&mut self) {
        // Queued for an agreed release, as a symmetric buffer (release.rs).
        crate::release::queue(self.id);
    }
}
