//! The region exchange of Ok-Topk, `topk_sa` and `gaussiank_sa` ([`Regions`]): index regions,
//! one per member; an alltoall of the per-region sizes and alltoallv rounds of the pairs, with
//! device counts; the reduce of each region on its owner; an allgatherv of the reduced regions
//! (`topk_sa`: or of their dense sums, [`SaDense`]).

use super::gathered::Gathered;
use super::launch::{addr, scatter_parts, zero_dense, Parts};
use super::oktopk::OkTopk;
use super::options::{SparseMethod, SparseOptions};
use super::sym_set::SymSet;
use crate::coll::allgather::Allgather;
use crate::coll::allreduce::AllreduceAlgo;
use crate::coll::alltoall::Alltoall;
use crate::coll::alltoallv::Alltoallv;
use crate::coll::family::DeviceParts;
use crate::coll::op::ReduceOp;
use crate::core::buffer::SymmetricBuffer;
use crate::core::error::Result;
use crate::core::result::cuda_check;
use crate::core::runtime::Nvshmem;
use crate::core::stream::raw_stream;
use crate::sparse::reference;
use crate::sparse::select::TopK;
use crate::sparse::set::SparseSet;
use crate::sparse::{index_code, value_code, SparseIndex, SparseValue};
use crate::sys;
use crate::team::Team;
use cudarc::driver::{CudaSlice, CudaStream};
use std::ffi::c_void;

/// The region exchange: index regions (one per member), an alltoall of the per-region sizes,
/// alltoallv rounds of the pairs with device counts, the reduce of its region on each member,
/// an allgatherv of the reduced regions.
pub(super) struct Regions<'nv, T: SparseValue, I: SparseIndex> {
    pub(super) alltoall: Alltoall<'nv>,
    pub(super) alltoallv: Alltoallv<'nv>,
    /// Ok-Topk's global phase and re-partition (None: equal regions, set at creation).
    pub(super) ok: Option<OkTopk<'nv, T, I>>,
    /// The region boundaries, P + 1 words: region r is `bounds[r] .. bounds[r + 1]`.
    pub(super) bounds: SymmetricBuffer<'nv, u64>,
    /// This member's selection per region: P sizes (the alltoall's input) and displacements.
    pub(super) send_sizes: SymmetricBuffer<'nv, u64>,
    pub(super) send_displs: SymmetricBuffer<'nv, u64>,
    /// What each member sends for this member's region (the alltoall's output), and where it
    /// goes in `recv`.
    pub(super) recv_sizes: SymmetricBuffer<'nv, u64>,
    pub(super) recv_displs: SymmetricBuffer<'nv, u64>,
    /// Counts of each round, P words a round.
    pub(super) send_counts: SymmetricBuffer<'nv, u64>,
    pub(super) recv_counts: SymmetricBuffer<'nv, u64>,
    /// The pairs received for this member's region (count: their number).
    pub(super) recv: SymSet<'nv, T, I>,
    /// This member's region after the reduce (sorted by index, zero sums dropped).
    pub(super) reduced: SymSet<'nv, T, I>,
    /// The smallest positive f32: the compaction of the reduce takes every element but zeros.
    pub(super) tiny: CudaSlice<f32>,
    pub(super) gathered: Gathered<'nv, T, I>,
    /// `topk_sa`: the dense fallback.
    pub(super) sa: Option<SaDense<'nv, T>>,
}

/// `topk_sa`'s dense fallback (the seed's): where the reduced regions' pairs would pass about
/// two thirds of n words, the regions' dense sums are allgathered instead. Chosen on the
/// device: both allgathervs are enqueued, the one not taken with zero counts.
pub(super) struct SaDense<'nv, T: SparseValue> {
    /// The reduce's dense buffer (n elements, symmetric, so the dense allgatherv can move it in
    /// place): this member's region sums, then every region's where the fallback is taken.
    pub(super) full: SymmetricBuffer<'nv, T>,
    /// The dense allgatherv's counts (the regions' lengths, or 0) and displacements.
    pub(super) counts: SymmetricBuffer<'nv, u64>,
    pub(super) displs: SymmetricBuffer<'nv, u64>,
    /// 1 where the last call took the dense exchange.
    pub(super) dense: CudaSlice<u32>,
    /// This member's region: equal shares, known on the host.
    pub(super) own: (usize, usize),
}

impl<'nv, T: SparseValue, I: SparseIndex> Regions<'nv, T, I> {
    /// Collective over the world, as [`SparseAllreduce::new`]; `sizes`: the gradient's
    /// length and the selection's capacity.
    ///
    /// [`SparseAllreduce::new`]: super::SparseAllreduce::new
    pub(super) fn new(
        nv: &'nv Nvshmem,
        team: Option<&Team<'_>>,
        rank: Option<(i32, i32)>,
        sizes: (usize, usize, usize),
        opts: SparseOptions,
        gathered: Gathered<'nv, T, I>,
    ) -> Result<Self> {
        let (len, capacity, k) = sizes;
        let stream = nv.stream();
        let world = nv.n_pes() as usize;
        let (_, rounds) = reference::exchange_rounds(world);
        let ok = if opts.method == SparseMethod::OkTopK {
            Some(OkTopk {
                allreduce: nv.allreduce_workspace_for(team, ((world + 1) * 8).max(4096))?,
                threshold: stream.alloc_zeros(1)?,
                state: stream.alloc_zeros(1)?,
                least: stream.alloc_zeros(1)?,
                global: SparseSet::new(stream, k)?,
                global_every: opts.global_every as u64,
                repartition_every: opts.repartition_every as u64,
            })
        } else {
            None
        };
        let bounds = nv.alloc_zeroed(world + 1)?;
        if let (None, Some((_, p))) = (&ok, rank) {
            bounds
                .view(0..p as usize + 1)?
                .copy_from_host(&reference::equal_boundaries(len, p as usize))?;
        }
        let tiny = stream.clone_htod(&[f32::from_bits(1)])?;
        let sa = if opts.method == SparseMethod::TopKSa {
            let own = match rank {
                Some((me, p)) => {
                    let b = reference::equal_boundaries(len, p as usize);
                    (b[me as usize] as usize, b[me as usize + 1] as usize)
                }
                None => (0, 0),
            };
            Some(SaDense {
                full: nv.alloc_zeroed(len)?,
                counts: nv.alloc_zeroed(world)?,
                displs: nv.alloc_zeroed(world)?,
                dense: stream.alloc_zeros(1)?,
                own,
            })
        } else {
            None
        };
        Ok(Regions {
            alltoall: Alltoall::new(nv, team)?,
            alltoallv: Alltoallv::new(nv, team)?,
            ok,
            bounds,
            send_sizes: nv.alloc_zeroed(world)?,
            send_displs: nv.alloc_zeroed(world)?,
            recv_sizes: nv.alloc_zeroed(world)?,
            recv_displs: nv.alloc_zeroed(world)?,
            send_counts: nv.alloc_zeroed(world * rounds)?,
            recv_counts: nv.alloc_zeroed(world * rounds)?,
            recv: SymSet::new(nv, world * capacity)?,
            reduced: SymSet::new(nv, world * capacity)?,
            tiny,
            gathered,
            sa,
        })
    }

    /// The region exchange of this member's selection `mine` on sparse call `call` (Ok-Topk
    /// re-partitions from it first where the schedule says, and selects its global set of
    /// about `k` pairs; with a residual (0: none) it clears from it the pairs of `mine` that
    /// made the global set), the result in `dense` (n elements, also the reduce's scratch).
    ///
    /// # Safety
    /// `dense.0` is device memory of `dense.1` elements, `residual` 0 or of as many, ordered
    /// on `stream`.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn run(
        &mut self,
        topk: &mut TopK,
        allgather: &mut Allgather<'_>,
        mine: &SymSet<'_, T, I>,
        (call, k, residual): (u64, usize, u64),
        (me, p): (i32, i32),
        dense: (u64, usize),
        stream: &CudaStream,
    ) -> Result<()> {
        let s = raw_stream(stream);
        let itype = index_code::<I>();
        let (pu, cap, n) = (p as usize, mine.capacity, dense.1);
        let repartition = self
            .ok
            .as_ref()
            .is_some_and(|ok| call % ok.repartition_every == 0);
        // Ok-Topk: whether this call estimates the global threshold (else it reuses it).
        let global_estimate = self
            .ok
            .as_ref()
            .is_some_and(|ok| call % ok.global_every == 0);
        if let (true, Some(ok)) = (repartition, &mut self.ok) {
            // SAFETY: the selection its capacity, bounds P + 1 words.
            let code = unsafe {
                sys::nvshmemrs_sparse_region_bounds(
                    mine.raw(),
                    n as u64,
                    p,
                    self.bounds.as_device_ptr(),
                    itype,
                    s,
                )
            };
            cuda_check(code, "Ok-Topk region boundaries kernel launch")?;
            let b = self.bounds.view(0..pu + 1)?;
            ok.allreduce
                .run_in_place(b, ReduceOp::Avg, AllreduceAlgo::Auto, stream)?;
        }
        // SAFETY: the selection its capacity, bounds P + 1 words, sizes and displs P each.
        let code = unsafe {
            sys::nvshmemrs_sparse_region_split(
                mine.raw(),
                self.bounds.as_device_ptr(),
                p,
                self.send_sizes.as_device_ptr(),
                self.send_displs.as_device_ptr(),
                itype,
                s,
            )
        };
        cuda_check(code, "region split kernel launch")?;
        self.alltoall.run(
            self.send_sizes.view(0..pu)?,
            self.recv_sizes.view(0..pu)?,
            stream,
        )?;
        let (width, rounds) = reference::exchange_rounds(pu);
        // SAFETY: sizes and displacements P words each, the counts rounds x P, the count word.
        let code = unsafe {
            sys::nvshmemrs_sparse_region_rounds(
                self.send_sizes.as_device_ptr(),
                self.recv_sizes.as_device_ptr(),
                me,
                p,
                width as i32,
                rounds as i32,
                self.send_counts.as_device_ptr(),
                self.recv_counts.as_device_ptr(),
                self.recv_displs.as_device_ptr(),
                self.recv.count.as_device_ptr(),
                s,
            )
        };
        cuda_check(code, "region rounds kernel launch")?;
        // Received at most P x cap pairs: each member sends at most cap in all.
        let all = pu * cap;
        for t in 0..rounds {
            let round = t * pu..(t + 1) * pu;
            let send = DeviceParts {
                counts: self.send_counts.view(round.clone())?,
                displs: self.send_displs.view(0..pu)?,
            };
            let recv = DeviceParts {
                counts: self.recv_counts.view(round)?,
                displs: self.recv_displs.view(0..pu)?,
            };
            self.alltoallv.run_device(
                mine.idx.view(0..cap)?,
                &send,
                self.recv.idx.view(0..all)?,
                &recv,
                stream,
            )?;
            self.alltoallv.run_device(
                mine.val.view(0..cap)?,
                &send,
                self.recv.val.view(0..all)?,
                &recv,
                stream,
            )?;
        }
        // The reduce: the received pairs added into zeros, then every element that is not zero
        // (only this member's region can hold any), sorted by index. `topk_sa` reduces into
        // its symmetric dense buffer (its dense fallback moves it), the others into `dense`.
        let out = dense;
        let dense = match &self.sa {
            Some(sa) => (sa.full.as_device_ptr() as u64, n),
            None => dense,
        };
        // SAFETY: this function's contract, or the fallback's n elements.
        unsafe { zero_dense::<T>(dense.0, n, stream)? };
        // In source order, so that every member reduces its region in member order.
        let received = Parts {
            idx: self.recv.idx.as_device_ptr() as u64,
            val: self.recv.val.as_device_ptr() as u64,
            sizes: self.recv_sizes.as_device_ptr() as u64,
            displs: self.recv_displs.as_device_ptr() as u64,
            capacity: cap,
            n_parts: p,
        };
        // SAFETY: the received parts (each at most cap pairs, within P x cap), their sizes and
        // displacements P words each, `dense` n elements.
        unsafe { scatter_parts::<T, I>(received, dense, stream)? };
        // Every element but zeros; Ok-Topk between global estimates: at or above the global
        // threshold.
        let at = match &self.ok {
            Some(ok) if !global_estimate => addr(&ok.threshold) as *const f32,
            _ => addr(&self.tiny) as *const f32,
        };
        // SAFETY: `dense` n elements, the reduced set its capacity, the threshold one f32.
        unsafe {
            topk.threshold_at_raw::<T, I>(dense, at, self.reduced.raw(), stream)?;
        }
        // The reduced regions together hold at most what was sent: P x cap pairs.
        let Some(sa) = &mut self.sa else {
            // SAFETY: this function's contract.
            unsafe {
                self.gathered
                    .run(allgather, &self.reduced, (all, all), p, out, stream)?
            };
            if let Some(ok) = &mut self.ok {
                // SAFETY: `out` n elements, the sets their capacities, the residual 0 or n.
                unsafe {
                    ok.global(
                        topk,
                        mine,
                        &self.gathered,
                        (global_estimate, k, residual),
                        out,
                        stream,
                    )?
                };
            }
            return Ok(());
        };
        let g = &mut self.gathered;
        let parts = &mut g.parts;
        allgather.run(
            self.reduced.count.view(0..1)?,
            parts.sizes.view(0..pu)?,
            stream,
        )?;
        // SAFETY: P words each of symmetric memory, P + 1 bounds, the total and flag words.
        let code = unsafe {
            sys::nvshmemrs_sparse_sa_choice(
                parts.sizes.as_device_ptr(),
                p,
                all as u64,
                self.bounds.as_device_ptr(),
                n as u64,
                parts.counts.as_device_ptr(),
                parts.displs.as_device_ptr(),
                addr(&parts.total) as *mut u64,
                sa.counts.as_device_ptr(),
                sa.displs.as_device_ptr(),
                addr(&sa.dense) as *mut u32,
                s,
            )
        };
        cuda_check(code, "topk_sa exchange choice kernel launch")?;
        let dp = DeviceParts {
            counts: parts.counts.view(0..pu)?,
            displs: parts.displs.view(0..pu)?,
        };
        parts.agv.run_device(
            self.reduced.idx.view(0..all)?,
            g.idx.view(0..all)?,
            &dp,
            stream,
        )?;
        parts.agv.run_device(
            self.reduced.val.view(0..all)?,
            g.val.view(0..all)?,
            &dp,
            stream,
        )?;
        // In place: this member's region of `full` is its part (at least one element long,
        // its count 0 where the region is empty or the exchange sparse).
        let (lo, hi) = sa.own;
        let dense_parts = DeviceParts {
            counts: sa.counts.view(0..pu)?,
            displs: sa.displs.view(0..pu)?,
        };
        parts.agv.run_device(
            sa.full.view(lo..hi.max(lo + 1).min(n))?,
            sa.full.view(0..n)?,
            &dense_parts,
            stream,
        )?;
        // SAFETY: this function's contract.
        unsafe { zero_dense::<T>(out.0, n, stream)? };
        let gathered = Parts {
            idx: g.idx.as_device_ptr() as u64,
            val: g.val.as_device_ptr() as u64,
            // The counts, not the sizes: 0 where the dense exchange was taken.
            sizes: parts.counts.as_device_ptr() as u64,
            displs: parts.displs.as_device_ptr() as u64,
            capacity: all,
            n_parts: p,
        };
        // SAFETY: the gathered parts within `all` pairs, `out` n elements.
        unsafe { scatter_parts::<T, I>(gathered, out, stream)? };
        // SAFETY: n elements each; the flag one word.
        let code = unsafe {
            sys::nvshmemrs_sparse_copy_if(
                out.0 as *mut c_void,
                sa.full.as_device_ptr().cast(),
                n as u64,
                value_code::<T>(),
                addr(&sa.dense) as *const u32,
                s,
            )
        };
        cuda_check(code, "topk_sa dense result kernel launch")
    }
}
