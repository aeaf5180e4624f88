//! The [`Comm`] of a real job: one PE per process, NVSHMEM underneath.
//!
//! * Activations and gradients move through two [`Channel`]s (forward: stage s to s + 1,
//!   backward: s + 1 to s), sampled tokens through a third (last stage to first). Receives are
//!   enqueued on the compute stream (the data is needed there next; the wait happens on the GPU,
//!   not the host). Sends go on a transfer stream of their own, after an event of the compute
//!   stream, so the put overlaps the next compute; the compute stream waits for a send only
//!   before it overwrites the send's source ([`Comm::before_overwrite`]).
//! * Gradient reductions run the runtime's allreduce over teams: the stage's replicas
//!   (data-parallel averaging) and {first, last stage} of a replica (tied embedding). The
//!   gradient arena is symmetric memory of the same size on every PE, so offsets agree.
//! * Per-step statistics are summed over the world by an allreduce of a small f64 buffer.

use crate::backend::{wait_event, Backend};
use crate::comm::{group_members, stats_len, Comm, Group, Reduce, SparseStats};
use crate::config::Topology;
use crate::error::{GptError, Result};
use crate::ops::{F32Ptr, I32Ptr};
use crate::residual::ResidualSpec;
use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
use cudarc::driver::{CudaEvent, CudaStream};
use nvshmem::Channel;
use nvshmem::{
    Allreduce, AllreduceAlgo, Nvshmem, ReduceOp, SparseAllreduce, SparseOptions, SymmetricBuffer,
    Team,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Bytes of one allreduce receive slot for gradients (larger messages go in segments).
const GRAD_SLOT_BYTES: usize = 4 << 20;
/// Slot bytes of the statistics allreduce (a few hundred values).
const STATS_SLOT_BYTES: usize = 64 << 10;

/// Sizes the symmetric heap must hold for a job (to set NVSHMEM_SYMMETRIC_SIZE before init) of
/// `micro_batches` micro-batches per step; `compress`: the largest density of sparse gradient
/// averaging, if any (a density ramp's start: the buffers hold its k).
#[allow(clippy::too_many_arguments)]
pub fn symmetric_bytes(
    n_pes: usize,
    pp: usize,
    dp: usize,
    grad_elems: usize,
    slots: usize,
    act_elems: usize,
    micro_batches: usize,
    compress: Option<f64>,
) -> usize {
    // Sparse sets of up to 2k (index, value) pairs: this PE's, n_pes gathered (buffers are
    // sized for the world), gTop-k's three more; plus the collectives' workspaces.
    let sparse = compress.map_or(0, |d| {
        let k = nvshmem::sparse_k(grad_elems.max(1), d);
        (n_pes + 4) * 2 * k * 8 + (8 << 20)
    });
    let channels = if pp > 1 {
        2 * slots * act_elems * 4 + (1 << 20)
    } else {
        0
    };
    let workspace = |slot: usize| 2 * n_pes * slot + (1 << 20);
    let mut ar = workspace(STATS_SLOT_BYTES);
    if dp > 1 {
        ar += workspace(GRAD_SLOT_BYTES);
    }
    if pp > 1 {
        ar += workspace(GRAD_SLOT_BYTES);
    }
    grad_elems * 4 + channels + ar + n_pes * stats_len(micro_batches) * 8 + sparse
}

/// Team allreduce of one gradient group (None on PEs outside every team of the split).
struct GroupReduce<'nv> {
    members: Vec<usize>,
    ar: Allreduce<'nv>,
    _team: Option<Team<'nv>>,
}

/// NVSHMEM-backed [`Comm`] of this PE.
pub struct NvComm<'nv> {
    topo: Topology,
    compute: Arc<CudaStream>,
    transfer: Arc<CudaStream>,
    fwd: Option<Channel<'nv, f32>>,
    bwd: Option<Channel<'nv, f32>>,
    tok: Option<Channel<'nv, i32>>,
    stage_group: Option<GroupReduce<'nv>>,
    tied_group: Option<GroupReduce<'nv>>,
    world: Allreduce<'nv>,
    stats: SymmetricBuffer<'nv, f64>,
    grads: Option<SymmetricBuffer<'nv, f32>>,
    /// Sparse data-parallel averaging (--grad-compress): the options until the gradient arena
    /// exists, then the allreduce over the whole arena.
    compress: Option<SparseOptions>,
    sparse: Option<SparseAllreduce<'nv, f32>>,
    /// Whether the next replicas' averaging is sparse (dense during --dense-steps).
    sparse_on: bool,
    /// Source address -> event after the last send that reads it.
    pending: HashMap<u64, CudaEvent>,
    /// Timing events (start, end) on the transfer stream of the sends since `time_sends`
    /// (None: not timing).
    send_events: Option<Vec<(CudaEvent, CudaEvent)>>,
    nv: &'nv Nvshmem,
    timeout: Duration,
}

fn nv_err(e: nvshmem::Error) -> GptError {
    GptError::Nvshmem(e)
}

impl<'nv> NvComm<'nv> {
    /// Collective (every PE, same arguments): channels of `slots` slots of `max_elems` values
    /// between stages, team workspaces, and the buffer the step's statistics are summed in,
    /// sized for the job's PEs at `micro_batches` micro-batches per step (the run's).
    /// `compute` is the stream the model runs on.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        nv: &'nv Nvshmem,
        topo: Topology,
        compute: Arc<CudaStream>,
        slots: usize,
        max_elems: usize,
        micro_batches: usize,
        tied: bool,
        timeout: Duration,
        compress: Option<SparseOptions>,
    ) -> Result<NvComm<'nv>> {
        let (pp, dp) = (topo.pp, topo.dp);
        // The highest priority: a send's blocks get SMs as soon as compute kernels free some,
        // so transfers are not queued behind a whole GEMM.
        let (_, greatest) = cudarc::driver::result::stream::get_priority_range()?;
        let transfer = compute.context().new_stream_with_priority(greatest)?;
        let open = |elems: usize, slots: usize| -> Result<Option<Channel<'nv, f32>>> {
            if pp == 1 {
                return Ok(None);
            }
            let mut ch = Channel::new(nv, slots, elems).map_err(nv_err)?;
            ch.set_timeout(timeout);
            Ok(Some(ch))
        };
        let fwd = open(max_elems, slots)?;
        let bwd = open(max_elems, slots)?;
        let tok = if pp > 1 {
            let mut ch = Channel::<i32>::new(nv, 2, 1).map_err(nv_err)?;
            ch.set_timeout(timeout);
            Some(ch)
        } else {
            None
        };
        let world_team = nv.team_world();
        // Every PE takes part in every split and every workspace allocation (collective over
        // the world), keeping only its own team.
        let split = |starts: Vec<i32>,
                     stride: i32,
                     size: i32,
                     slot: usize|
         -> Result<Option<GroupReduce<'nv>>> {
            if size == nv.n_pes() {
                // The whole world: no split needed (and none is possible where PEs share GPUs).
                let ar = nv.allreduce_workspace(slot).map_err(nv_err)?;
                return Ok(Some(GroupReduce {
                    members: Vec::new(),
                    ar,
                    _team: None,
                }));
            }
            let mut mine = None;
            for start in starts {
                if let Some(t) = world_team
                    .split_strided(start, stride, size)
                    .map_err(nv_err)?
                {
                    mine = Some(t);
                }
            }
            let ar = nv
                .allreduce_workspace_for(mine.as_ref(), slot)
                .map_err(nv_err)?;
            Ok(Some(GroupReduce {
                members: Vec::new(),
                ar,
                _team: mine,
            }))
        };
        let mut stage_group = if dp > 1 {
            split(
                (0..pp as i32).collect(),
                pp as i32,
                dp as i32,
                GRAD_SLOT_BYTES,
            )?
        } else {
            None
        };
        let mut tied_group = if tied && pp > 1 {
            let starts = (0..dp).map(|r| (r * pp) as i32).collect();
            split(starts, (pp - 1) as i32, 2, GRAD_SLOT_BYTES)?
        } else {
            None
        };
        if let Some(g) = &mut stage_group {
            g.members = group_members(&topo, Group::StageReplicas);
        }
        if let Some(g) = &mut tied_group {
            g.members = group_members(&topo, Group::Tied);
        }
        let world = nv.allreduce_workspace(STATS_SLOT_BYTES).map_err(nv_err)?;
        let stats_values = pp * dp * stats_len(micro_batches);
        let stats = nv
            .alloc_zeroed::<f64>(stats_values.max(1))
            .map_err(nv_err)?;
        Ok(NvComm {
            topo,
            compute,
            transfer,
            fwd,
            bwd,
            tok,
            stage_group,
            tied_group,
            world,
            stats,
            grads: None,
            compress,
            sparse: None,
            sparse_on: true,
            pending: HashMap::new(),
            send_events: None,
            nv,
            timeout,
        })
    }

    fn link<'a, T: nvshmem::Element>(
        ch: &'a mut Option<Channel<'nv, T>>,
        what: &str,
    ) -> Result<&'a mut Channel<'nv, T>> {
        ch.as_mut().ok_or_else(|| {
            GptError::Comm(format!(
                "{what}: a single-stage job has no pipeline channels"
            ))
        })
    }

    /// Sends on the transfer stream once the compute stream has produced `src`.
    fn send_after_compute(&mut self, forward: bool, src: F32Ptr, len: usize) -> Result<()> {
        let ready = self.compute.record_event(None)?;
        self.transfer.wait(&ready)?;
        let (peer, ch) = if forward {
            (
                self.topo.pe + 1,
                Self::link(&mut self.fwd, "sending activations")?,
            )
        } else {
            (
                self.topo.pe - 1,
                Self::link(&mut self.bwd, "sending gradients")?,
            )
        };
        let timed = |stream: &CudaStream| -> Result<CudaEvent> {
            let e = stream.context().new_event(Some(CU_EVENT_DEFAULT))?;
            e.record(stream)?;
            Ok(e)
        };
        // The start event passes once the transfer stream reaches this send: the data is ready
        // and the sends before it are done.
        let start = self
            .send_events
            .is_some()
            .then(|| timed(&self.transfer))
            .transpose()?;
        // SAFETY: src is device memory of this PE holding len values; the compute stream does
        // not overwrite it before waiting for the event recorded below (before_overwrite).
        unsafe { ch.send_raw(peer as i32, src.0, len, &self.transfer) }.map_err(nv_err)?;
        if let (Some(start), Some(events)) = (start, &mut self.send_events) {
            events.push((start, timed(&self.transfer)?));
        }
        let done = self.transfer.record_event(None)?;
        self.pending.insert(src.0, done);
        Ok(())
    }
}

impl<'nv, B: Backend> Comm<B> for NvComm<'nv> {
    fn topology(&self) -> Topology {
        self.topo
    }

    fn alloc_grads(&mut self, _be: &B, len: usize) -> Result<F32Ptr> {
        let buf = self.nv.alloc_zeroed::<f32>(len.max(1)).map_err(nv_err)?;
        let p = F32Ptr(buf.as_device_ptr() as u64);
        self.grads = Some(buf);
        // Over the stage's replicas, for the whole arena (the same length on every PE, as the
        // allocation is collective); the arena past a stage's parameters stays zero.
        if let (Some(opts), Some(g)) = (self.compress, &self.stage_group) {
            let world = self.nv.team_world();
            let team = g._team.as_ref().unwrap_or(&world);
            let mut sp =
                SparseAllreduce::new(self.nv, Some(team), len.max(1), opts).map_err(nv_err)?;
            sp.set_timeout(self.timeout);
            self.sparse = Some(sp);
        }
        Ok(p)
    }

    fn send_act(&mut self, _be: &B, src: F32Ptr, len: usize) -> Result<()> {
        self.send_after_compute(true, src, len)
    }

    fn recv_act(&mut self, _be: &B, dst: F32Ptr, len: usize) -> Result<()> {
        let peer = self.topo.pe as i32 - 1;
        let ch = Self::link(&mut self.fwd, "receiving activations")?;
        // SAFETY: dst is device memory of this PE for len values, used next on this stream.
        unsafe { ch.recv_into_raw(peer, dst.0, len, &self.compute) }.map_err(nv_err)
    }

    fn send_grad(&mut self, _be: &B, src: F32Ptr, len: usize) -> Result<()> {
        self.send_after_compute(false, src, len)
    }

    fn recv_grad(&mut self, _be: &B, dst: F32Ptr, len: usize) -> Result<()> {
        let peer = self.topo.pe as i32 + 1;
        let ch = Self::link(&mut self.bwd, "receiving gradients")?;
        // SAFETY: as in recv_act.
        unsafe { ch.recv_into_raw(peer, dst.0, len, &self.compute) }.map_err(nv_err)
    }

    fn send_token(&mut self, _be: &B, src: I32Ptr) -> Result<()> {
        let peer = self.topo.pe_of(0) as i32;
        let ch = Self::link(&mut self.tok, "sending a sampled token")?;
        // SAFETY: one i32 of this PE, written before on this stream.
        unsafe { ch.send_raw(peer, src.0, 1, &self.compute) }.map_err(nv_err)
    }

    fn recv_token(&mut self, _be: &B, dst: I32Ptr) -> Result<()> {
        let peer = self.topo.pe_of(self.topo.pp - 1) as i32;
        let ch = Self::link(&mut self.tok, "receiving a sampled token")?;
        // SAFETY: one i32 of this PE.
        unsafe { ch.recv_into_raw(peer, dst.0, 1, &self.compute) }.map_err(nv_err)
    }

    fn time_sends(&mut self) {
        self.send_events = Some(Vec::new());
    }

    fn send_times_ms(&mut self, _be: &B) -> Result<Vec<f64>> {
        let events = self.send_events.take().unwrap_or_default();
        events
            .iter()
            .map(|(start, end)| Ok(start.elapsed_ms(end)? as f64))
            .collect()
    }

    fn before_overwrite(&mut self, _be: &B, ptr: F32Ptr) -> Result<()> {
        if let Some(done) = self.pending.remove(&ptr.0) {
            self.compute.wait(&done)?;
        }
        Ok(())
    }

    fn join_sends(&mut self, _be: &B) -> Result<()> {
        self.compute.join(&self.transfer)?;
        self.pending.clear();
        Ok(())
    }

    fn allreduce_grads(
        &mut self,
        _be: &B,
        group: Group,
        offset: usize,
        len: usize,
        op: Reduce,
    ) -> Result<()> {
        let g = match group {
            Group::StageReplicas => self.stage_group.as_mut(),
            Group::Tied => self.tied_group.as_mut(),
        };
        let Some(g) = g else {
            return if group_members(&self.topo, group).len() < 2 {
                Ok(())
            } else {
                Err(GptError::Comm(format!("no workspace for group {group:?}")))
            };
        };
        let grads = self
            .grads
            .as_ref()
            .ok_or_else(|| GptError::Comm("allreduce before alloc_grads".into()))?;
        let view = grads.view(offset..offset + len).map_err(nv_err)?;
        let op = match op {
            Reduce::Sum => ReduceOp::Sum,
            Reduce::Avg => ReduceOp::Avg,
        };
        debug_assert!(g.members.contains(&self.topo.pe));
        if let (Group::StageReplicas, Some(sp), true) =
            (group, self.sparse.as_mut(), self.sparse_on)
        {
            if offset != 0 || op != ReduceOp::Avg {
                return Err(GptError::Comm(
                    "sparse gradient averaging takes the whole arena, averaged".into(),
                ));
            }
            // The whole arena: past `len` it holds zeros, which stay zero.
            let all = grads.as_device_ptr() as u64;
            // SAFETY: the arena is symmetric device memory of sp.len() elements on this PE,
            // used in order on the compute stream.
            unsafe { sp.run_raw(all, all, &self.compute) }.map_err(nv_err)?;
            return Ok(());
        }
        g.ar.run_in_place(view, op, AllreduceAlgo::Auto, &self.compute)
            .map_err(nv_err)?;
        Ok(())
    }

    fn sparse_averaging(&mut self, on: bool) {
        self.sparse_on = on;
    }

    fn continue_ramp(&mut self, sparse_steps: u64) {
        if let Some(sp) = &mut self.sparse {
            sp.set_ramp_offset(sparse_steps);
        }
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn allreduce_host_within(
        &mut self,
        _be: &B,
        values: &mut [f64],
        timeout: Duration,
    ) -> Result<()> {
        if self.topo.pp * self.topo.dp == 1 {
            return Ok(()); // a sum over one PE
        }
        if values.len() > self.stats.len() {
            // Every PE sums the same length, so every PE refuses alike (no one waits).
            return Err(GptError::Comm(format!(
                "the step sums {} statistics but the comm was built for {} (a run of more \
                 micro-batches than NvComm::new was given); build the comm with the run's \
                 micro_batches",
                values.len(),
                self.stats.len()
            )));
        }
        let view = self.stats.view(0..values.len()).map_err(nv_err)?;
        // The copy is synchronous; the compute stream then reduces and we wait for it. The
        // device-side waits take the same limit as the host's, then the run's again.
        view.copy_from_host(values).map_err(nv_err)?;
        self.world.set_timeout(timeout);
        let run = self
            .world
            .run_in_place(view, ReduceOp::Sum, AllreduceAlgo::Auto, &self.compute)
            .map_err(nv_err);
        self.world.set_timeout(self.timeout);
        run?;
        let done = self.compute.record_event(None)?;
        wait_event(&done, timeout, "the statistics allreduce (all PEs)")?;
        view.copy_to_host(values).map_err(nv_err)
    }

    fn check(&self) -> Result<()> {
        for ch in [&self.fwd, &self.bwd].into_iter().flatten() {
            ch.check().map_err(nv_err)?;
        }
        if let Some(ch) = &self.tok {
            ch.check().map_err(nv_err)?;
        }
        Ok(())
    }

    fn residual_spec(&self) -> Option<ResidualSpec> {
        let sp = self.sparse.as_ref()?;
        let o = sp.options();
        o.error_feedback.then(|| ResidualSpec {
            method: o.method.name().to_string(),
            density: o.density,
            error_feedback: true,
            len: sp.len(),
        })
    }

    fn residual(&mut self, _be: &B) -> Result<Vec<f32>> {
        let r = self.sparse.as_ref().and_then(|sp| sp.residual());
        let r = r.ok_or_else(|| GptError::Comm("no error-feedback residual to save".into()))?;
        // On the compute stream, where the allreduce updates it: after this step's update.
        Ok(self.compute.clone_dtoh(r)?)
    }

    fn sparse_stats(&mut self, _be: &B) -> Result<Option<SparseStats>> {
        let Some(sp) = self.sparse.as_ref().filter(|_| self.sparse_on) else {
            return Ok(None);
        };
        let s = &self.compute;
        Ok(Some(SparseStats {
            selected: sp.selected_count(s).map_err(nv_err)?,
            k: sp.k() as u64,
            threshold: sp.threshold(s).map_err(nv_err)?,
            included: sp.included_count(s).map_err(nv_err)?,
            clip_factor: sp.clip_factor(s).map_err(nv_err)?,
        }))
    }

    fn load_residual(&mut self, _be: &B, values: &[f32]) -> Result<()> {
        let sp = self
            .sparse
            .as_mut()
            .ok_or_else(|| GptError::Comm("no sparse averaging to load a residual into".into()))?;
        sp.load_residual(values, &self.compute).map_err(nv_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_size_grows_with_the_pipeline_and_replicas() {
        let single = symmetric_bytes(1, 1, 1, 1000, 4, 100, 2, None);
        assert!(single >= 4000);
        let pipe = symmetric_bytes(2, 2, 1, 1000, 4, 100, 2, None);
        assert!(pipe >= single + 2 * 4 * 100 * 4);
        assert!(symmetric_bytes(4, 2, 2, 1000, 4, 100, 2, None) > pipe);
        assert!(symmetric_bytes(4, 2, 2, 1000, 4, 100, 2, Some(0.01)) > pipe);
        // The statistics: every PE's share, per micro-batch four f64 series.
        let more = symmetric_bytes(4, 2, 2, 1000, 4, 100, 3, None);
        assert_eq!(
            more - symmetric_bytes(4, 2, 2, 1000, 4, 100, 2, None),
            4 * 4 * 8
        );
    }
}
