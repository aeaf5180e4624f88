//! [`SparseAllreduce`]: what it holds, its creation (each method's buffers, collective over
//! the world) and its plain getters.

use super::exchange::{packed_bytes, Exchange};
use super::gathered::{Gathered, VParts};
use super::options::{sparse_k, SparseMethod, SparseOptions, WHAT};
use super::regions::Regions;
use super::reuse::Reuse;
use super::sym_set::SymSet;
use super::tree::Tree;
use crate::coll::allgather::Allgather;
use crate::coll::allgatherv::Allgatherv;
use crate::coll::allreduce::Allreduce;
use crate::coll::broadcast::Broadcast;
use crate::coll::group::P2pGroup;
use crate::core::buffer::SymmetricBuffer;
use crate::core::error::{Error, Result};
use crate::core::runtime::Nvshmem;
use crate::sparse::select::TopK;
use crate::sparse::set::SparseSet;
use crate::sparse::sparse_ops::SparseMerge;
use crate::sparse::{SparseIndex, SparseValue};
use crate::sys;
use crate::team::Team;
use cudarc::driver::CudaSlice;

/// A sparse allreduce of gradients of `len` elements over the world or a team: per call, each
/// member selects from its gradient (plus its residual, with error feedback), the selections
/// are exchanged, and every member's dense output becomes the sum (or average) of all members'
/// selected pairs, where an index several members selected gets their values added.
///
/// Create it on every PE at the same point (collective over the world: its symmetric buffers,
/// sized for the whole world), call [`SparseAllreduce::run`] on every member in the same
/// order, drop it on every PE at the same point. Calls enqueue their kernels and collectives on
/// the stream given and return; every wait is under the collectives' timeout.
///
/// What was sent: with error feedback, the residual holds `residual + g` minus the pairs this
/// member sent (exactly: those elements become zero, the others are untouched), so the
/// residual plus everything sent over the steps equals the sum of the gradients. gTop-k counts
/// as sent the local pairs whose index is in the global set ([`SparseAllreduce::included`]),
/// as in the paper, though a pair dropped in a tree round whose index another member kept is
/// not in the sum. GaussianK holds at most 2k pairs: past that, the 2k of largest magnitude
/// are sent (never the lowest indexes) and the rest stays in the residual. `topk_sa` and
/// `gaussiank_sa` count as sent every pair the member put into the exchange: all the pairs
/// its selection holds, whichever region they fall in; the result is their exact sum, as for
/// top-k. Ok-Topk counts as sent only the member's selected pairs whose index made the global
/// set (those where the result is not zero); the others stay in the residual. Each method's
/// doc ([`SparseMethod`]) says what it sends and where it departs from the seed.
///
/// Schedule: the first [`SparseOptions::dense_warmup`] calls are a dense allreduce of the
/// gradient (the residual untouched); the intervals of `topk_aopt` and Ok-Topk count sparse
/// calls from the first after them (the seed counts every call from its 128 dense ones: the
/// same calls where the warm-up is a multiple of the intervals, as 128 is).
///
/// Replicas: every member's output is the same bits, at any team size. Where several members
/// sent an index, their values are added in member order (rank 0's first), one member's part
/// after the other (the region methods reduce their region so too), never by atomics in
/// whatever order they land.
pub struct SparseAllreduce<'nv, T: SparseValue, I: SparseIndex = i32> {
    pub(super) opts: SparseOptions,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) capacity: usize,
    /// Team rank and size (None on PEs outside the team).
    pub(super) rank: Option<(i32, i32)>,
    pub(super) allgather: Allgather<'nv>,
    pub(super) topk: TopK,
    pub(super) mine: SymSet<'nv, T, I>,
    pub(super) residual: Option<CudaSlice<T>>,
    /// Momentum correction: the velocity.
    pub(super) velocity: Option<CudaSlice<T>>,
    /// Gaussian: workspace of the sums and the threshold word.
    pub(super) gauss: Option<(CudaSlice<f64>, CudaSlice<f32>)>,
    /// `topk_aopt`, Ok-Topk: the reused local threshold.
    pub(super) reuse: Option<Reuse>,
    /// Local clipping: workspace of the sum of squares and the factor word.
    pub(super) clip: Option<(CudaSlice<f64>, CudaSlice<f32>)>,
    /// Calls so far (warm-up included) since creation or the last clear: the schedule.
    pub(super) calls: u64,
    /// Sparse calls of the density ramp made before the schedule's first (a resumed run's):
    /// added to the schedule's sparse call for [`SparseOptions::density_at`].
    pub(super) ramp_offset: u64,
    /// The dense warm-up's allreduce and its symmetric buffer (n elements).
    pub(super) warmup: Option<(Allreduce<'nv>, SymmetricBuffer<'nv, T>)>,
    pub(super) ex: Exchange<'nv, T, I>,
}

impl<'nv, T: SparseValue, I: SparseIndex> SparseAllreduce<'nv, T, I> {
    /// Over every PE.
    pub fn world(nv: &'nv Nvshmem, len: usize, opts: SparseOptions) -> Result<Self> {
        Self::new(nv, Some(&nv.team_world()), len, opts)
    }

    /// Over `team` (None on PEs in no team of the split: they only take part in the
    /// allocations), for gradients of `len` elements. Collective over the world, with the same
    /// `len` and `opts` on every PE. Returns once its memory is ready.
    pub fn new(
        nv: &'nv Nvshmem,
        team: Option<&Team<'_>>,
        len: usize,
        opts: SparseOptions,
    ) -> Result<Self> {
        opts.validate()?;
        if len == 0 {
            return Err(Error::SparseConfig {
                what: WHAT,
                detail: "the gradient is empty; pass its length (at least 1)".into(),
            });
        }
        if (len - 1) as u64 > I::MAX_INDEX {
            return Err(Error::IndexTooNarrow {
                what: WHAT,
                len,
                last: len - 1,
                index: I::NAME,
                max: I::MAX_INDEX,
            });
        }
        let stream = nv.stream();
        // Buffers for the largest density of any call.
        let k = sparse_k(len, opts.max_density());
        let capacity = if opts.method.by_threshold() {
            (2 * k).min(len)
        } else {
            k
        };
        let rank = team.and_then(|t| (t.my_pe() >= 0).then(|| (t.my_pe(), t.n_pes())));
        // Buffers for every member of any team: allocations are collective over the world,
        // with the same size on every PE.
        let world = nv.n_pes() as usize;
        let topk = TopK::new(stream, len.max(2 * k))?;
        let mine = SymSet::new(nv, capacity)?;
        let residual = if opts.error_feedback {
            Some(stream.alloc_zeros::<T>(len)?)
        } else {
            None
        };
        let velocity = if opts.momentum > 0.0 {
            Some(stream.alloc_zeros::<T>(len)?)
        } else {
            None
        };
        let gauss = if opts.method.gaussian() {
            // SAFETY: a host function without arguments.
            let words = unsafe { sys::nvshmemrs_sparse_gaussian_scratch_words() } as usize;
            Some((stream.alloc_zeros(words)?, stream.alloc_zeros(1)?))
        } else {
            None
        };
        let clip = if opts.local_clip > 0.0 {
            // SAFETY: a host function without arguments.
            let words = unsafe { sys::nvshmemrs_sparse_clip_scratch_words() } as usize;
            Some((stream.alloc_zeros(words)?, stream.clone_htod(&[1.0f32])?))
        } else {
            None
        };
        let vparts = || -> Result<VParts<'nv>> {
            Ok(VParts {
                agv: Allgatherv::new(nv, team)?,
                sizes: nv.alloc_zeroed(world)?,
                counts: nv.alloc_zeroed(world)?,
                displs: nv.alloc_zeroed(world)?,
                total: stream.alloc_zeros(1)?,
            })
        };
        let ex = match opts.method {
            SparseMethod::TopK => Exchange::Fixed {
                idx: nv.alloc_zeroed(world * k)?,
                val: nv.alloc_zeroed(world * k)?,
            },
            SparseMethod::TopKAopt | SparseMethod::GaussianK => Exchange::Varying(Gathered {
                parts: vparts()?,
                idx: nv.alloc_zeroed(world * capacity)?,
                val: nv.alloc_zeroed(world * capacity)?,
            }),
            SparseMethod::OkTopK | SparseMethod::TopKSa | SparseMethod::GaussianKSa => {
                Exchange::Regions(Box::new(Regions::new(
                    nv,
                    team,
                    rank,
                    (len, capacity, k),
                    opts,
                    Gathered {
                        parts: vparts()?,
                        idx: nv.alloc_zeroed(world * capacity)?,
                        val: nv.alloc_zeroed(world * capacity)?,
                    },
                )?))
            }
            SparseMethod::GaussianKConcat => {
                let part_bytes = packed_bytes::<T, I>(capacity);
                Exchange::Concat {
                    parts: vparts()?,
                    packed: nv.alloc_zeroed(part_bytes)?,
                    gathered: nv.alloc_zeroed(world * part_bytes)?,
                    part_bytes,
                }
            }
            SparseMethod::GTopK => {
                let kk = [k as u64];
                let recv = SymSet::new(nv, k)?;
                let global = SymSet::new(nv, k)?;
                stream.memcpy_htod(&kk, &mut recv.count.as_view())?;
                stream.memcpy_htod(&kk, &mut global.count.as_view())?;
                Exchange::Tree(Box::new(Tree {
                    p2p: P2pGroup::new(nv, team)?,
                    bcast: Broadcast::new(nv, team)?,
                    recv,
                    cur: SymSet::new(nv, k)?,
                    global,
                    union: SparseSet::new(stream, 2 * k)?,
                    pos: SparseSet::new(stream, k)?,
                    merge: SparseMerge::new(stream, k)?,
                    mark: stream.alloc_zeros(k)?,
                    mark_pos: SparseSet::new(stream, k)?,
                    half: stream.clone_htod(&[0.5f32])?,
                    included: SparseSet::new(stream, k)?,
                }))
            }
        };
        let allgather = Allgather::new(nv, team)?;
        let reuse = if opts.method.reuses_threshold() {
            // SAFETY: a host function without arguments.
            let words = unsafe { sys::nvshmemrs_sparse_rise_scratch_words() } as usize;
            Some(Reuse {
                threshold: stream.alloc_zeros(1)?,
                state: stream.alloc_zeros(1)?,
                next: stream.alloc_zeros(1)?,
                least: stream.alloc_zeros(1)?,
                scratch: stream.alloc_zeros(words)?,
                every: opts.reestimate_every as u64,
                adapt: opts.method == SparseMethod::OkTopK,
            })
        } else {
            None
        };
        let warmup = if opts.dense_warmup > 0 {
            Some((
                nv.allreduce_workspace_for(team, 1 << 20)?,
                nv.alloc_zeroed(len)?,
            ))
        } else {
            None
        };
        // Kernels later take these by address on the caller's stream: they must be ready.
        stream.synchronize()?;
        Ok(SparseAllreduce {
            opts,
            n: len,
            k,
            capacity,
            rank,
            allgather,
            topk,
            mine,
            residual,
            velocity,
            gauss,
            reuse,
            clip,
            calls: 0,
            ramp_offset: 0,
            warmup,
            ex,
        })
    }

    /// The options it was created with.
    pub fn options(&self) -> SparseOptions {
        self.opts
    }

    /// Elements of the gradients it takes.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always false: empty gradients are refused.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// k = ceil(density x n): the pairs top-k methods select per member (of the last sparse
    /// call's density during a ramp; before any, of the largest).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The most pairs a member sends per call (k; GaussianK, `gaussiank_sa` and Ok-Topk: 2k, at
    /// most n).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Calls counted by the schedule (dense warm-up included): since creation, restarted
    /// after the warm-up by a clear or a load.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// How long a collective may wait for a peer before failing ([`Error::Timeout`]).
    pub fn set_timeout(&mut self, timeout: std::time::Duration) {
        self.allgather.set_timeout(timeout);
        match &mut self.ex {
            Exchange::Fixed { .. } => {}
            Exchange::Varying(Gathered { parts, .. }) | Exchange::Concat { parts, .. } => {
                parts.agv.set_timeout(timeout)
            }
            Exchange::Tree(t) => {
                t.p2p.set_timeout(timeout);
                t.bcast.set_timeout(timeout);
            }
            Exchange::Regions(r) => {
                r.alltoall.set_timeout(timeout);
                r.alltoallv.set_timeout(timeout);
                r.gathered.parts.agv.set_timeout(timeout);
                if let Some(ok) = &mut r.ok {
                    ok.allreduce.set_timeout(timeout);
                }
            }
        }
    }
}
