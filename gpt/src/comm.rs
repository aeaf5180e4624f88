//! What a stage needs from the other PEs, as a trait with two implementations:
//!
//! * `crate::nvcomm::NvComm`: NVSHMEM channels between adjacent stages and allreduce over
//!   symmetric memory (the real thing, one PE per process).
//! * [`LocalComm`]: threads of one process, one per simulated PE, joined by bounded channels
//!   and rendezvous reductions. With [`crate::backend::CpuBackend`] it runs the trainer's
//!   complete pipeline logic on a machine without a GPU (tests, `--cpu`).
//!
//! Point-to-point calls are stream-ordered on the GPU (no host synchronisation); messages
//! between a pair of PEs arrive in the order they were sent.

use crate::backend::Backend;
use crate::config::Topology;
use crate::error::{GptError, Result};
use crate::ops::{F32Ptr, I32Ptr};
use crate::residual::ResidualSpec;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Scalar statistics per PE at the start of its share of the step's statistics (the trainer
/// names them).
pub(crate) const STAT_SCALARS: usize = 5;
/// Per-micro-batch series after the scalars (receive waits and send durations, forward and
/// backward).
const STAT_SERIES: usize = 4;

/// Statistics per PE in the vector [`Comm::allreduce_host`] sums each step, for
/// `micro_batches` micro-batches per step: a job of n PEs sums n times this many.
pub fn stats_len(micro_batches: usize) -> usize {
    STAT_SCALARS + STAT_SERIES * micro_batches
}

/// A set of PEs that reduces gradients together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// This stage in every data-parallel replica (gradient averaging).
    StageReplicas,
    /// The first and the last stage of this replica (the tied embedding's gradient).
    Tied,
}

/// The reduction of [`Comm::allreduce_grads`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Avg,
}

/// Members (PEs, ascending) of `group` as seen from `topo`'s PE.
pub fn group_members(topo: &Topology, group: Group) -> Vec<usize> {
    match group {
        Group::StageReplicas => (0..topo.dp).map(|r| r * topo.pp + topo.stage()).collect(),
        Group::Tied => {
            let mut v = vec![topo.pe_of(0), topo.pe_of(topo.pp - 1)];
            v.dedup();
            v
        }
    }
}

/// Transfers and reductions between the PEs of a pipeline-parallel job.
pub trait Comm<B: Backend> {
    fn topology(&self) -> Topology;
    /// Allocates the gradient arena: `len` f32 (the same on every PE; symmetric memory on the
    /// GPU, since reductions read it). Called once, at the same point on every PE.
    fn alloc_grads(&mut self, be: &B, len: usize) -> Result<F32Ptr>;
    /// Activations of one micro-batch to the next stage (src must stay unchanged until
    /// [`Comm::before_overwrite`] says so).
    fn send_act(&mut self, be: &B, src: F32Ptr, len: usize) -> Result<()>;
    /// The next activations from the previous stage into `dst` (ordered before later work).
    fn recv_act(&mut self, be: &B, dst: F32Ptr, len: usize) -> Result<()>;
    /// Gradient of the stage input of one micro-batch to the previous stage.
    fn send_grad(&mut self, be: &B, src: F32Ptr, len: usize) -> Result<()>;
    fn recv_grad(&mut self, be: &B, dst: F32Ptr, len: usize) -> Result<()>;
    /// A sampled token from the last stage to the first (text generation).
    fn send_token(&mut self, be: &B, src: I32Ptr) -> Result<()>;
    fn recv_token(&mut self, be: &B, dst: I32Ptr) -> Result<()>;
    /// Starts timing this PE's activation and gradient sends, each from the moment it starts
    /// moving data to its completion (forgets earlier timings).
    fn time_sends(&mut self);
    /// Durations (ms) of the activation and gradient sends since [`Comm::time_sends`], in the
    /// order they were issued, and stops timing. Call once those sends have completed (after
    /// the step's synchronisation).
    fn send_times_ms(&mut self, be: &B) -> Result<Vec<f64>>;
    /// Orders later writes to `ptr` after the sends that read from it.
    fn before_overwrite(&mut self, be: &B, ptr: F32Ptr) -> Result<()>;
    /// Orders later work (and a later synchronisation) after every send issued so far.
    fn join_sends(&mut self, be: &B) -> Result<()>;
    /// Reduces `len` gradients at `offset` of the arena over `group`, in place, in stream
    /// order. Every member calls it at the same point.
    fn allreduce_grads(
        &mut self,
        be: &B,
        group: Group,
        offset: usize,
        len: usize,
        op: Reduce,
    ) -> Result<()>;
    /// Whether the replicas' averaging that follows is sparse (when `--grad-compress` set it
    /// up) or dense. A no-op where averaging is always dense.
    fn sparse_averaging(&mut self, _on: bool) {}
    /// A resume: the density ramp (`--density-ramp`) continues after the `sparse_steps` sparse
    /// steps the saved run made instead of starting over. A no-op without sparse averaging.
    fn continue_ramp(&mut self, _sparse_steps: u64) {}
    /// The run's limit on every wait (`--timeout-ms`).
    fn timeout(&self) -> Duration;
    /// Sums `values` over all PEs (host values; every PE calls it with the same length).
    fn allreduce_host(&mut self, be: &B, values: &mut [f64]) -> Result<()> {
        let timeout = self.timeout();
        self.allreduce_host_within(be, values, timeout)
    }
    /// [`Comm::allreduce_host`] waiting at most `timeout` instead of the run's limit: for the
    /// points where some PEs legitimately keep the others waiting (a checkpoint write).
    fn allreduce_host_within(
        &mut self,
        be: &B,
        values: &mut [f64],
        timeout: Duration,
    ) -> Result<()>;
    /// Reports errors a transfer recorded asynchronously (device-side timeouts).
    fn check(&self) -> Result<()>;
    /// The error-feedback residual this PE keeps for sparse gradient averaging: what it belongs
    /// to, or None when there is none (dense averaging, `--no-error-feedback`, one replica, the
    /// threads' comm), and then [`Comm::residual`] and [`Comm::load_residual`] fail.
    fn residual_spec(&self) -> Option<ResidualSpec> {
        None
    }
    /// A host copy of the residual, after the work enqueued so far (a checkpoint's).
    fn residual(&mut self, _be: &B) -> Result<Vec<f32>> {
        Err(no_residual())
    }
    /// Replaces the residual with `values` (a resume), ordered before later work.
    fn load_residual(&mut self, _be: &B, _values: &[f32]) -> Result<()> {
        Err(no_residual())
    }
    /// What this PE's last sparse averaging selected (after the work enqueued so far), or None
    /// where the last averaging was dense or there is none.
    fn sparse_stats(&mut self, _be: &B) -> Result<Option<SparseStats>> {
        Ok(None)
    }
}

/// One PE's sparse averaging in one step, for the step log.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SparseStats {
    /// Pairs its selection found (a threshold's may pass 2k; the pairs sent are at most 2k).
    pub selected: u64,
    /// The k the density asks for.
    pub k: u64,
    /// The local threshold (Gaussian methods, `topk_aopt`, Ok-Topk).
    pub threshold: Option<f32>,
    /// gTop-k: its pairs that made the global set.
    pub included: Option<u64>,
    /// With `--sparse-clip`: the factor local clipping scaled its gradient by.
    pub clip_factor: Option<f32>,
}

fn no_residual() -> GptError {
    GptError::Comm("this PE keeps no error-feedback residual (no sparse averaging)".into())
}

// ---------------------------------------------------------------------------------------------
// Threads in one process

/// A reusable rendezvous: `members` threads each contribute a vector, all get the sum (in
/// member order, so every thread sees the same bits).
struct Hub {
    members: usize,
    state: Mutex<HubState>,
    cv: Condvar,
}

#[derive(Default)]
struct HubState {
    round: u64,
    parts: Vec<Option<Vec<f64>>>,
    result: Option<Vec<f64>>,
    taken: usize,
}

impl Hub {
    fn new(members: usize) -> Hub {
        Hub {
            members,
            state: Mutex::new(HubState {
                parts: vec![None; members],
                ..Default::default()
            }),
            cv: Condvar::new(),
        }
    }

    fn reduce(&self, rank: usize, data: Vec<f64>, timeout: Duration) -> Result<Vec<f64>> {
        let deadline = Instant::now() + timeout;
        let lost = || GptError::Comm("a simulated PE panicked during a reduction".into());
        let mut st = self.state.lock().map_err(|_| lost())?;
        // Wait until the previous round has been collected by everyone.
        while st.result.is_some() {
            st = wait_until(
                &self.cv,
                st,
                deadline,
                timeout,
                "a reduction round to drain",
            )?;
        }
        let round = st.round;
        st.parts[rank] = Some(data);
        if st.parts.iter().all(Option::is_some) {
            let parts: Vec<Vec<f64>> = st.parts.iter_mut().map(|p| p.take().unwrap()).collect();
            let mut sum = parts[0].clone();
            for p in &parts[1..] {
                if p.len() != sum.len() {
                    return Err(GptError::Comm(format!(
                        "reduction lengths differ between PEs ({} vs {})",
                        p.len(),
                        sum.len()
                    )));
                }
                sum.iter_mut().zip(p).for_each(|(a, b)| *a += b);
            }
            st.result = Some(sum);
            self.cv.notify_all();
        }
        while st.round == round && st.result.is_none() {
            st = wait_until(
                &self.cv,
                st,
                deadline,
                timeout,
                "the other PEs to join a reduction",
            )?;
        }
        let out = st.result.clone().ok_or_else(lost)?;
        st.taken += 1;
        if st.taken == self.members {
            st.taken = 0;
            st.result = None;
            st.round += 1;
            self.cv.notify_all();
        }
        Ok(out)
    }
}

/// Waits on `cv` until `deadline`; past it, a timeout naming `what` and the whole `limit`
/// (the wait spans several condition-variable waits from one start).
fn wait_until<'a, T>(
    cv: &Condvar,
    guard: std::sync::MutexGuard<'a, T>,
    deadline: Instant,
    limit: Duration,
    what: &str,
) -> Result<std::sync::MutexGuard<'a, T>> {
    let now = Instant::now();
    if now >= deadline {
        return Err(GptError::Timeout {
            what: what.to_string(),
            waited_ms: limit.as_millis(),
        });
    }
    cv.wait_timeout(guard, deadline - now)
        .map(|(g, _)| g)
        .map_err(|_| GptError::Comm("a simulated PE panicked".into()))
}

/// One direction of a simulated link.
struct Link<T> {
    tx: Option<SyncSender<Vec<T>>>,
    rx: Option<Receiver<Vec<T>>>,
}

impl<T> Default for Link<T> {
    fn default() -> Self {
        Link { tx: None, rx: None }
    }
}

/// The [`Comm`] of one thread-simulated PE. Build all of them with [`LocalComm::world`].
pub struct LocalComm {
    topo: Topology,
    fwd: Link<f32>,
    bwd: Link<f32>,
    tok: Link<i32>,
    stage_hub: Option<Arc<Hub>>,
    tied_hub: Option<Arc<Hub>>,
    world_hub: Arc<Hub>,
    grads: Option<(F32Ptr, usize)>,
    timeout: Duration,
    /// Durations of the sends since `time_sends` (None: not timing).
    send_ms: Option<Vec<f64>>,
}

impl LocalComm {
    /// The comms of all `pp * dp` PEs (index = PE). `slots` bounds each link's queue, like a
    /// channel's receive slots.
    pub fn world(pp: usize, dp: usize, slots: usize, timeout: Duration) -> Result<Vec<LocalComm>> {
        let n = pp * dp;
        let world_hub = Arc::new(Hub::new(n));
        let stage_hubs: Vec<Arc<Hub>> = (0..pp).map(|_| Arc::new(Hub::new(dp))).collect();
        let tied_hubs: Vec<Arc<Hub>> = (0..dp).map(|_| Arc::new(Hub::new(2))).collect();
        let mut comms: Vec<LocalComm> = (0..n)
            .map(|pe| {
                let topo = Topology::new(pp, dp, pe, n)?;
                Ok(LocalComm {
                    topo,
                    fwd: Link::default(),
                    bwd: Link::default(),
                    tok: Link::default(),
                    stage_hub: (dp > 1).then(|| stage_hubs[topo.stage()].clone()),
                    tied_hub: (pp > 1 && (topo.is_first() || topo.is_last()))
                        .then(|| tied_hubs[topo.replica()].clone()),
                    world_hub: world_hub.clone(),
                    grads: None,
                    timeout,
                    send_ms: None,
                })
            })
            .collect::<Result<_>>()?;
        let slots = slots.max(1);
        for r in 0..dp {
            for s in 0..pp.saturating_sub(1) {
                let (a, b) = (r * pp + s, r * pp + s + 1);
                let (tx, rx) = mpsc::sync_channel(slots);
                comms[a].fwd.tx = Some(tx);
                comms[b].fwd.rx = Some(rx);
                let (tx, rx) = mpsc::sync_channel(slots);
                comms[b].bwd.tx = Some(tx);
                comms[a].bwd.rx = Some(rx);
            }
            if pp > 1 {
                let (tx, rx) = mpsc::sync_channel(slots);
                comms[r * pp + pp - 1].tok.tx = Some(tx);
                comms[r * pp].tok.rx = Some(rx);
            }
        }
        Ok(comms)
    }

    fn send<T>(
        tx: &Option<SyncSender<Vec<T>>>,
        mut msg: Vec<T>,
        timeout: Duration,
        what: &str,
    ) -> Result<()> {
        let tx = tx
            .as_ref()
            .ok_or_else(|| GptError::Comm(format!("{what}: this PE has no such peer")))?;
        let start = Instant::now();
        loop {
            match tx.try_send(msg) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Disconnected(_)) => {
                    return Err(GptError::Comm(format!("{what}: the peer PE has stopped")))
                }
                Err(TrySendError::Full(m)) => {
                    if start.elapsed() > timeout {
                        return Err(GptError::Timeout {
                            what: format!("{what}: a free slot at the peer"),
                            waited_ms: start.elapsed().as_millis(),
                        });
                    }
                    msg = m;
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
    }

    fn recv<T>(
        rx: &Option<Receiver<Vec<T>>>,
        len: usize,
        timeout: Duration,
        what: &str,
    ) -> Result<Vec<T>> {
        let rx = rx
            .as_ref()
            .ok_or_else(|| GptError::Comm(format!("{what}: this PE has no such peer")))?;
        let msg = rx.recv_timeout(timeout).map_err(|e| match e {
            RecvTimeoutError::Timeout => GptError::Timeout {
                what: what.to_string(),
                waited_ms: timeout.as_millis(),
            },
            RecvTimeoutError::Disconnected => {
                GptError::Comm(format!("{what}: the peer PE has stopped"))
            }
        })?;
        if msg.len() != len {
            return Err(GptError::Comm(format!(
                "{what}: received {} values, expected {len} (the stages disagree on shapes)",
                msg.len()
            )));
        }
        Ok(msg)
    }

    /// A send of `len` values at `src` over `forward` (else backward), timed when timing is on:
    /// the copy out of the backend and the hand-over to the peer's queue (waiting for a free
    /// slot included, like a channel's credit wait).
    fn send_values<B: Backend>(
        &mut self,
        be: &B,
        forward: bool,
        src: F32Ptr,
        len: usize,
    ) -> Result<()> {
        let start = Instant::now();
        let mut v = vec![0.0; len];
        be.download_f32(src, &mut v)?;
        let (tx, what) = if forward {
            (&self.fwd.tx, "sending activations")
        } else {
            (&self.bwd.tx, "sending gradients")
        };
        Self::send(tx, v, self.timeout, what)?;
        if let Some(times) = &mut self.send_ms {
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        Ok(())
    }

    fn grad_range<B: Backend>(
        &self,
        be: &B,
        offset: usize,
        len: usize,
    ) -> Result<(F32Ptr, Vec<f64>)> {
        let (base, total) = self
            .grads
            .ok_or_else(|| GptError::Comm("allreduce before alloc_grads".into()))?;
        if offset + len > total {
            return Err(GptError::Comm(format!(
                "gradient range {offset}+{len} beyond the arena of {total}"
            )));
        }
        let mut v = vec![0.0f32; len];
        be.download_f32(base.at(offset), &mut v)?;
        Ok((base.at(offset), v.into_iter().map(f64::from).collect()))
    }
}

impl<B: Backend> Comm<B> for LocalComm {
    fn topology(&self) -> Topology {
        self.topo
    }
    fn alloc_grads(&mut self, be: &B, len: usize) -> Result<F32Ptr> {
        let p = be.alloc_f32(len)?;
        self.grads = Some((p, len));
        Ok(p)
    }
    fn send_act(&mut self, be: &B, src: F32Ptr, len: usize) -> Result<()> {
        self.send_values(be, true, src, len)
    }
    fn recv_act(&mut self, be: &B, dst: F32Ptr, len: usize) -> Result<()> {
        let v = Self::recv(&self.fwd.rx, len, self.timeout, "receiving activations")?;
        be.upload_f32(dst, &v)
    }
    fn send_grad(&mut self, be: &B, src: F32Ptr, len: usize) -> Result<()> {
        self.send_values(be, false, src, len)
    }
    fn recv_grad(&mut self, be: &B, dst: F32Ptr, len: usize) -> Result<()> {
        let v = Self::recv(&self.bwd.rx, len, self.timeout, "receiving gradients")?;
        be.upload_f32(dst, &v)
    }
    fn send_token(&mut self, be: &B, src: I32Ptr) -> Result<()> {
        let mut v = vec![0; 1];
        be.download_i32(src, &mut v)?;
        Self::send(&self.tok.tx, v, self.timeout, "sending a sampled token")
    }
    fn recv_token(&mut self, be: &B, dst: I32Ptr) -> Result<()> {
        let v = Self::recv(&self.tok.rx, 1, self.timeout, "receiving a sampled token")?;
        be.upload_i32(dst, &v)
    }
    fn time_sends(&mut self) {
        self.send_ms = Some(Vec::new());
    }
    fn send_times_ms(&mut self, _be: &B) -> Result<Vec<f64>> {
        Ok(self.send_ms.take().unwrap_or_default())
    }
    fn before_overwrite(&mut self, _be: &B, _ptr: F32Ptr) -> Result<()> {
        Ok(()) // sends copy synchronously here
    }
    fn join_sends(&mut self, _be: &B) -> Result<()> {
        Ok(())
    }
    fn allreduce_grads(
        &mut self,
        be: &B,
        group: Group,
        offset: usize,
        len: usize,
        op: Reduce,
    ) -> Result<()> {
        let members = group_members(&self.topo, group);
        if members.len() < 2 {
            return Ok(());
        }
        let hub = match group {
            Group::StageReplicas => self.stage_hub.clone(),
            Group::Tied => self.tied_hub.clone(),
        }
        .ok_or_else(|| GptError::Comm(format!("PE {} is not in group {group:?}", self.topo.pe)))?;
        let rank = members.iter().position(|&p| p == self.topo.pe).unwrap_or(0);
        let (ptr, data) = self.grad_range(be, offset, len)?;
        let sum = hub.reduce(rank, data, self.timeout)?;
        let k = members.len() as f64;
        let out: Vec<f32> = sum
            .iter()
            .map(|&x| match op {
                Reduce::Sum => x as f32,
                Reduce::Avg => (x / k) as f32,
            })
            .collect();
        be.upload_f32(ptr, &out)
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
        let sum = self
            .world_hub
            .reduce(self.topo.pe, values.to_vec(), timeout)?;
        values.copy_from_slice(&sum);
        Ok(())
    }
    fn check(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;

    #[test]
    fn groups_follow_the_rank_layout() {
        let t = Topology::new(3, 2, 4, 6).unwrap(); // replica 1, stage 1
        assert_eq!(group_members(&t, Group::StageReplicas), vec![1, 4]);
        assert_eq!(group_members(&t, Group::Tied), vec![3, 5]);
        let one = Topology::new(1, 2, 1, 2).unwrap();
        assert_eq!(group_members(&one, Group::Tied), vec![1]);
    }

    /// A PE late by more than the run's limit (a checkpoint write) times the others out in a
    /// plain host reduction, not in one given a longer limit.
    #[test]
    fn a_longer_limit_waits_for_a_late_pe() {
        let run_limit = Duration::from_millis(200);
        for within in [None, Some(Duration::from_secs(20))] {
            let comms = LocalComm::world(2, 1, 1, run_limit).unwrap();
            let handles: Vec<_> = comms
                .into_iter()
                .map(|mut c| {
                    std::thread::spawn(move || -> Result<Vec<f64>> {
                        let be = CpuBackend::new();
                        let pe = <LocalComm as Comm<CpuBackend>>::topology(&c).pe;
                        if pe == 1 {
                            std::thread::sleep(Duration::from_millis(800));
                        }
                        let mut v = vec![pe as f64 + 1.0];
                        match within {
                            Some(t) => c.allreduce_host_within(&be, &mut v, t)?,
                            None => c.allreduce_host(&be, &mut v)?,
                        }
                        Ok(v)
                    })
                })
                .collect();
            let pe0 = handles.into_iter().next().unwrap().join().unwrap();
            match within {
                Some(_) => assert_eq!(pe0.unwrap(), vec![3.0]),
                None => {
                    let e = pe0.unwrap_err().to_string();
                    assert!(e.contains("timed out after 200 ms"), "{e}");
                }
            }
        }
    }

    #[test]
    fn threads_exchange_messages_in_order_and_reduce() {
        let comms = LocalComm::world(2, 2, 2, Duration::from_secs(10)).unwrap();
        let handles: Vec<_> = comms
            .into_iter()
            .map(|mut c| {
                std::thread::spawn(move || -> Result<(Vec<f32>, Vec<f64>)> {
                    let be = CpuBackend::new();
                    let topo = <LocalComm as Comm<CpuBackend>>::topology(&c);
                    let g = c.alloc_grads(&be, 4)?;
                    let pe = topo.pe as f32;
                    be.upload_f32(g, &[pe, pe + 1.0, pe + 2.0, pe + 3.0])?;
                    let buf = be.alloc_f32(3)?;
                    // Five messages each way: more than the 2 slots, in order.
                    for i in 0..5 {
                        if topo.is_first() {
                            be.upload_f32(buf, &[i as f32, pe, 0.5])?;
                            c.send_act(&be, buf, 3)?;
                            c.recv_grad(&be, buf, 3)?;
                            let mut v = [0.0; 3];
                            be.download_f32(buf, &mut v)?;
                            assert_eq!(v, [-(i as f32), pe + 1.0, 0.25]);
                        } else {
                            c.recv_act(&be, buf, 3)?;
                            let mut v = [0.0; 3];
                            be.download_f32(buf, &mut v)?;
                            assert_eq!(v, [i as f32, pe - 1.0, 0.5]);
                            be.upload_f32(buf, &[-(i as f32), pe, 0.25])?;
                            c.send_grad(&be, buf, 3)?;
                        }
                    }
                    c.allreduce_grads(&be, Group::Tied, 0, 2, Reduce::Sum)?;
                    c.allreduce_grads(&be, Group::StageReplicas, 2, 2, Reduce::Avg)?;
                    let mut got = vec![0.0; 4];
                    be.download_f32(g, &mut got)?;
                    let mut host = vec![0.0; 4];
                    host[topo.pe] = 1.0 + topo.pe as f64;
                    c.allreduce_host(&be, &mut host)?;
                    Ok((got, host))
                })
            })
            .collect();
        let out: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect();
        // PE p starts with [p, p+1, p+2, p+3]. Tied (0,1) and (2,3) sum the first two;
        // stage replicas (0,2) and (1,3) average the last two.
        assert_eq!(out[0].0, vec![1.0, 3.0, 3.0, 4.0]);
        assert_eq!(out[1].0, vec![1.0, 3.0, 4.0, 5.0]);
        assert_eq!(out[2].0, vec![5.0, 7.0, 3.0, 4.0]);
        assert_eq!(out[3].0, vec![5.0, 7.0, 4.0, 5.0]);
        for o in &out {
            assert_eq!(o.1, vec![1.0, 2.0, 3.0, 4.0]);
        }
    }

    #[test]
    fn a_missing_peer_times_out_instead_of_hanging() {
        let mut comms = LocalComm::world(2, 1, 1, Duration::from_millis(100)).unwrap();
        let be = CpuBackend::new();
        let buf = be.alloc_f32(1).unwrap();
        let e = Comm::<CpuBackend>::recv_grad(&mut comms[0], &be, buf, 1).unwrap_err();
        assert!(matches!(e, GptError::Timeout { .. }), "{e}");
        let mut v = [1.0];
        let e = Comm::<CpuBackend>::allreduce_host(&mut comms[0], &be, &mut v).unwrap_err();
        assert!(matches!(e, GptError::Timeout { .. }), "{e}");
        // A stopped peer is reported as such.
        let peer = comms.pop().unwrap();
        drop(peer);
        let e = Comm::<CpuBackend>::send_act(&mut comms[0], &be, buf, 1).unwrap_err();
        assert!(e.to_string().contains("stopped"), "{e}");
    }
}
