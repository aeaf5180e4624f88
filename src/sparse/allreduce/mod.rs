//! Sparse gradient allreduce ([`SparseAllreduce`]): each PE selects a small part of its gradient
//! (top-k by magnitude, a Gaussian threshold, or Ok-Topk's reused threshold), the parts are
//! exchanged with the collectives (allgather, allgatherv with device counts, grouped send/recv,
//! broadcast; for the region methods alltoall, alltoallv with device counts and allreduce) and
//! scatter-added into a dense output on every member, part after part in member order, so that
//! every member's output is the same bits at any team size. Error feedback keeps what was not sent in
//! a residual that the next call adds to its gradient, so nothing is lost over steps.
//!
//! Everything is stream-ordered with no host round trip: counts stay on the device, and the
//! Gaussian and Ok-Topk thresholds and the region boundaries are computed and read on the GPU
//! (device/sparse/allreduce.cu). The region exchange's pairwise transfers (Ok-Topk's grouped
//! sends and receives per region) are alltoallv calls with device counts, one per throttled
//! round with zero counts for the peers outside it, rather than [`P2pGroup`] calls, whose sizes
//! are host values: the sizes per region are known only on the device.

use super::reference;
use super::select::TopK;
use super::set::{HostSparse, SparseSet};
use super::sparse_ops::{scatter_add_raw, SparseMerge};
use super::{index_code, value_code, SparseIndex, SparseValue};
use crate::coll::allgather::Allgather;
use crate::coll::allgatherv::Allgatherv;
use crate::coll::allreduce::{Allreduce, AllreduceAlgo};
use crate::coll::alltoall::Alltoall;
use crate::coll::alltoallv::Alltoallv;
use crate::coll::broadcast::Broadcast;
use crate::coll::family::DeviceParts;
use crate::coll::group::{P2p, P2pGroup};
use crate::coll::op::ReduceOp;
use crate::core::buffer::SymmetricBuffer;
use crate::core::error::{Error, Result};
use crate::core::result::cuda_check;
use crate::core::runtime::Nvshmem;
use crate::core::stream::raw_stream;
use crate::sys;
use crate::team::Team;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use std::ffi::c_void;
use std::sync::Arc;

const WHAT: &str = "SparseAllreduce";

/// How a [`SparseAllreduce`] selects and exchanges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SparseMethod {
    /// The seed's `topkA`. Sends: the exact top k (k = ceil(density x n) largest |g| of
    /// `residual + g`), allgathered as k indexes and k values. Error feedback clears those k.
    /// Deviation: k rounds up (the seed's `int(n x density)` down).
    TopK,
    /// The seed's `topkAopt`. Sends: every element at or above a local threshold (at most 2k
    /// pairs; past that the 2k largest), allgathered with the sizes (allgatherv, device
    /// counts). The threshold is estimated on the first sparse call and every
    /// [`SparseOptions::reestimate_every`] (32) after it by an exact top-k (that call sends
    /// exactly those k; the threshold is their least magnitude), and reused unchanged in
    /// between, so sizes vary. Error feedback clears every pair sent. Deviations: |g| >= t
    /// (the seed: > t, so its estimate call sends k - 1 plus ties); the 2k cap.
    TopKAopt,
    /// The seed's `gaussiank`. Sends: every element at or above a threshold from a Gaussian fit
    /// of `residual + g` (|mean| + z std, [`reference::gaussian_threshold`], on the GPU), which
    /// the seed's count correction lowers (divided by 1.012, at most 50 times) while fewer
    /// than 3k/4 pass ([`reference::gaussian_corrected_threshold`]); at most 2k pairs (past
    /// that the 2k largest), exchanged as [`SparseMethod::TopKAopt`]. Error feedback clears
    /// every pair sent. Deviations: |g| >= t (the seed: > t); the 2k cap.
    GaussianK,
    /// The seed's `gaussiankconcat`: [`SparseMethod::GaussianK`]'s selection, indexes and
    /// values packed in one buffer, one allgatherv. Error feedback as GaussianK.
    GaussianKConcat,
    /// The seed's `gtopk`. Sends: the local exact top k into ceil(log2 P) tree rounds (the even
    /// partner receives, merges by index, values added, and keeps the top k of the union; the
    /// odd one sends; any P), then rank 0 broadcasts the global top k, which every member
    /// gets. Error feedback clears the local pairs whose index made the global set
    /// ([`SparseAllreduce::included`]), as the seed; a pair dropped in a tree round whose index
    /// another member kept is in neither the result nor the residual (the seed's choice).
    GTopK,
    /// The seed's `oktopk` (Ok-Topk, PPoPP'22, Algorithm 1). Local: every element at or above a
    /// local threshold (at most 2k pairs; past that the 2k largest), estimated by an exact
    /// top-k every [`SparseOptions::reestimate_every`] (32) sparse calls; in between reused,
    /// first raised by x 1.03 (at most 5 times) while more than 3k/2 pass, and after each
    /// selection adapted for the next call (/ 1.012 below 3k/4 selected, x 1.012 above 5k/4).
    /// Regions: P index regions, re-partitioned every [`SparseOptions::repartition_every`]
    /// (64) from the selected indexes (chunks of equal counts, averaged over the members by
    /// an allreduce); an alltoall of the per-region sizes, alltoallv rounds of at most
    /// min(4, P) peers (device counts), the reduce of each region on its owner. Global: every
    /// [`SparseOptions::global_every`] (32) calls the reduced regions are allgathered whole
    /// and the global top k of their sum is the result (its least magnitude the global
    /// threshold); in between each owner sends only its reduced pairs at or above the global
    /// threshold (about k in all), which adapts by the count gathered (/ 1.01 below 3k/4,
    /// x 1.008 above 5k/4). Sends per call about k pairs in the allgather. Error feedback
    /// clears from each member's residual only its own selected pairs whose index made the
    /// global set; the rest stays. Deviations: |g| >= t (the seed: > t); the 2k cap; exact
    /// top-k pairs at local estimates.
    OkTopK,
    /// The seed's `topkSA`. Sends: the exact top k, through [`SparseMethod::OkTopK`]'s region
    /// exchange over P equal regions, then the reduced regions allgathered; where those pairs
    /// would pass two thirds of n words (2 x pairs >= floor(2n/3), the seed's test), the
    /// regions' dense sums are allgathered instead ([`SparseAllreduce::dense_fallback`]).
    /// Error feedback clears the k pairs sent (the result is their exact sum either way).
    TopKSa,
    /// `gaussiank_sa`: [`SparseMethod::GaussianK`]'s selection (Gaussian threshold with the
    /// count correction, at most 2k pairs), then the region exchange over P equal regions and
    /// an allgather of the reduced regions. Error feedback clears every pair sent. Deviation,
    /// by choice: the seed's class of this name thresholds by the exact top-k's k-th magnitude
    /// (so it differs from `topkSA` only in its exchange); here it keeps the Gaussian estimate
    /// its name promises, so that it is the Gaussian counterpart of [`SparseMethod::TopKSa`].
    /// No dense fallback (the seed's has none).
    GaussianKSa,
}

impl SparseMethod {
    /// Every method, in the order of the docs.
    pub const ALL: [SparseMethod; 8] = [
        SparseMethod::TopK,
        SparseMethod::TopKAopt,
        SparseMethod::GaussianK,
        SparseMethod::GaussianKConcat,
        SparseMethod::GTopK,
        SparseMethod::OkTopK,
        SparseMethod::TopKSa,
        SparseMethod::GaussianKSa,
    ];

    /// The method's name on command lines: topk, topk_aopt, gaussiank, gaussiank_concat, gtopk,
    /// oktopk, topk_sa, gaussiank_sa.
    pub fn name(self) -> &'static str {
        match self {
            SparseMethod::TopK => "topk",
            SparseMethod::TopKAopt => "topk_aopt",
            SparseMethod::GaussianK => "gaussiank",
            SparseMethod::GaussianKConcat => "gaussiank_concat",
            SparseMethod::GTopK => "gtopk",
            SparseMethod::OkTopK => "oktopk",
            SparseMethod::TopKSa => "topk_sa",
            SparseMethod::GaussianKSa => "gaussiank_sa",
        }
    }

    /// The method of a name ([`SparseMethod::name`]).
    pub fn from_name(name: &str) -> Result<SparseMethod> {
        SparseMethod::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| Error::SparseConfig {
                what: WHAT,
                detail: format!(
                    "no method named {name:?}; pass one of {}",
                    SparseMethod::ALL.map(SparseMethod::name).join(", ")
                ),
            })
    }

    fn gaussian(self) -> bool {
        matches!(
            self,
            SparseMethod::GaussianK | SparseMethod::GaussianKConcat | SparseMethod::GaussianKSa
        )
    }

    /// Whether the method selects by a threshold (up to 2k pairs) rather than an exact top-k.
    fn by_threshold(self) -> bool {
        self.gaussian() || self.reuses_threshold()
    }

    /// Whether the method selects by a threshold, holding up to 2k pairs (Gaussian methods,
    /// `topk_aopt`, Ok-Topk), rather than by an exact top-k (k pairs).
    pub fn is_threshold_method(self) -> bool {
        self.by_threshold()
    }

    /// Whether the method estimates its threshold by an exact top-k now and then and reuses it
    /// in between (`topk_aopt`, Ok-Topk).
    fn reuses_threshold(self) -> bool {
        matches!(self, SparseMethod::TopKAopt | SparseMethod::OkTopK)
    }
}

/// What a [`SparseAllreduce`] does: its method, density, error feedback and reduction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SparseOptions {
    /// How the pairs are selected and exchanged.
    pub method: SparseMethod,
    /// The share of the gradient each PE sends, in (0, 1]: k = ceil(density x n).
    pub density: f64,
    /// Keep what was not sent in a residual added to the next gradient (on by default).
    pub error_feedback: bool,
    /// Divide the sum by the team size (a gradient average); off by default (the sum).
    pub average: bool,
    /// `topk_aopt` and Ok-Topk: the local threshold is estimated exactly (an exact top-k) on
    /// the first sparse call and every this many sparse calls after it (at least 1; 1
    /// estimates on every call), and reused in between. Default
    /// [`SparseOptions::REESTIMATE_EVERY`] (the seed's 32). The other methods ignore it.
    pub reestimate_every: usize,
    /// Ok-Topk: the global threshold is estimated (a global top-k of the reduced regions) on
    /// the first sparse call and every this many after it, and reused in between. Default
    /// [`SparseOptions::GLOBAL_EVERY`] (the seed's 32).
    pub global_every: usize,
    /// Ok-Topk: the region boundaries are re-estimated on the first sparse call and every this
    /// many after it. Default [`SparseOptions::REPARTITION_EVERY`] (the seed's 64).
    pub repartition_every: usize,
    /// The first this many calls are a dense allreduce of the gradient (no selection; the
    /// residual is left alone), as the seed's first 128; sparse calls, and the intervals
    /// above, count from the first call after them. Default 0
    /// ([`SparseOptions::SEED_DENSE_WARMUP`] is the seed's).
    pub dense_warmup: usize,
    /// DGC's density ramp (Deep Gradient Compression, Lin et al., ICLR 2018, its warm-up
    /// training): where above `density`, the density of the first
    /// [`SparseOptions::ramp_calls`] sparse calls falls from this to `density` in four equal
    /// stages, geometrically (DGC's 25%, 6.25%, 1.5625%, 0.4% before 0.1%:
    /// [`SparseOptions::density_at`]); buffers are sized for it (the threshold methods' cap
    /// stays 2k of this density). A resumed run continues it with
    /// [`SparseAllreduce::set_ramp_offset`]. 0 (the default): no ramp.
    pub ramp_from: f64,
    /// Sparse calls the ramp lasts (0: none).
    pub ramp_calls: usize,
    /// DGC's local gradient clipping (Deep Gradient Compression, Lin et al., ICLR 2018): where
    /// above 0, each member scales the gradient it is given, before error feedback adds it to
    /// the residual, by min(1, local_clip x sqrt(1/P) / its L2 norm), P the team size
    /// ([`SparseOptions::local_clip_norm`]), so that P clipped gradients together have a norm
    /// of about local_clip at most. Sparse calls only (the dense warm-up averages what it is
    /// given); a norm that is not finite leaves the gradient alone; the factor of the last call:
    /// [`SparseAllreduce::clip_factor`]. 0 (the default): off.
    pub local_clip: f32,
    /// DGC's momentum correction (Deep Gradient Compression, Lin et al., ICLR 2018), in [0, 1):
    /// where above 0, each member keeps a velocity u = momentum x u + g (g after local
    /// clipping) and error feedback accumulates u instead of g, so what is selected and sent
    /// is accumulated velocity; with DGC's momentum factor masking, u is zeroed wherever the
    /// residual is (the pairs that count as sent), so a sent coordinate's stale momentum does
    /// not go on pushing it. Needs error feedback. Sparse calls only; clears and loads zero
    /// the velocity ([`SparseAllreduce::velocity`]), which is not part of the residual. 0 (the
    /// default): off.
    pub momentum: f32,
}

impl SparseOptions {
    /// The seed's local threshold interval (`topk_aopt`, Ok-Topk).
    pub const REESTIMATE_EVERY: usize = 32;
    /// The seed's global threshold interval (Ok-Topk).
    pub const GLOBAL_EVERY: usize = 32;
    /// The seed's region repartition interval (Ok-Topk).
    pub const REPARTITION_EVERY: usize = 64;
    /// The seed's dense calls before the first sparse one.
    pub const SEED_DENSE_WARMUP: usize = 128;

    /// `method` at `density`, with error feedback, summing, the seed's intervals, no dense
    /// warm-up.
    pub fn new(method: SparseMethod, density: f64) -> SparseOptions {
        SparseOptions {
            method,
            density,
            error_feedback: true,
            average: false,
            reestimate_every: SparseOptions::REESTIMATE_EVERY,
            global_every: SparseOptions::GLOBAL_EVERY,
            repartition_every: SparseOptions::REPARTITION_EVERY,
            dense_warmup: 0,
            ramp_from: 0.0,
            ramp_calls: 0,
            local_clip: 0.0,
            momentum: 0.0,
        }
    }

    /// The norm each of `p` members clips its gradient to: `local_clip x sqrt(1/p)` (in f64,
    /// as the GPU path and the simulation take it).
    pub fn local_clip_norm(&self, p: usize) -> f64 {
        self.local_clip as f64 * (1.0 / p.max(1) as f64).sqrt()
    }

    /// The density of sparse call `call` (counted from the first after the warm-up): during
    /// the ramp, `ramp_from x (density / ramp_from)^(stage / 4)` with stage = floor(4 call /
    /// ramp_calls); then `density`.
    pub fn density_at(&self, call: u64) -> f64 {
        let calls = self.ramp_calls as u64;
        if self.ramp_from <= self.density || call >= calls {
            return self.density;
        }
        let stage = (4 * call / calls) as i32;
        self.ramp_from * (self.density / self.ramp_from).powf(stage as f64 / 4.0)
    }

    /// The largest density of any call: `density`, or `ramp_from` during a ramp.
    pub fn max_density(&self) -> f64 {
        if self.ramp_calls > 0 {
            self.density.max(self.ramp_from)
        } else {
            self.density
        }
    }

    /// Checks every option against its range (what [`SparseAllreduce::new`] checks before it
    /// allocates), so a tool that builds options from its own flags can refuse them early.
    pub fn validate(&self) -> Result<()> {
        check_density(self.density)?;
        for (name, every) in [
            ("reestimate_every", self.reestimate_every),
            ("global_every", self.global_every),
            ("repartition_every", self.repartition_every),
        ] {
            if every == 0 {
                return Err(Error::SparseConfig {
                    what: WHAT,
                    detail: format!("{name} is 0; pass at least 1 (1 re-estimates on every call)"),
                });
            }
        }
        if !(0.0..=1.0).contains(&self.ramp_from) {
            return Err(Error::SparseConfig {
                what: WHAT,
                detail: format!(
                    "ramp_from {} is outside [0, 1]; pass 0 for no ramp, e.g. 0.25 for DGC's",
                    self.ramp_from
                ),
            });
        }
        if !(self.local_clip.is_finite() && self.local_clip >= 0.0) {
            return Err(Error::SparseConfig {
                what: WHAT,
                detail: format!(
                    "local_clip {} is not a norm; pass 0 for no local clipping, e.g. 1.0",
                    self.local_clip
                ),
            });
        }
        if !(0.0..1.0).contains(&self.momentum) || (self.momentum > 0.0 && !self.error_feedback) {
            return Err(Error::SparseConfig {
                what: WHAT,
                detail: format!(
                    "momentum {} (with error feedback {}): momentum correction takes a momentum \
                 in [0, 1) with error feedback on; pass 0 for none, e.g. 0.9 for DGC's",
                    self.momentum, self.error_feedback
                ),
            });
        }
        Ok(())
    }

    /// `METHOD:DENSITY`, as `gtopk:0.01`.
    pub fn parse(spec: &str) -> Result<SparseOptions> {
        let bad = |detail: String| Error::SparseConfig { what: WHAT, detail };
        let (method, density) = spec.split_once(':').ok_or_else(|| {
            bad(format!(
                "{spec:?} is not METHOD:DENSITY; pass e.g. gtopk:0.01"
            ))
        })?;
        let density: f64 = density.parse().map_err(|_| {
            bad(format!(
                "the density {density:?} is not a number; pass e.g. gtopk:0.01"
            ))
        })?;
        let opts = SparseOptions::new(SparseMethod::from_name(method)?, density);
        check_density(opts.density)?;
        Ok(opts)
    }
}

fn check_density(density: f64) -> Result<()> {
    if density > 0.0 && density <= 1.0 {
        return Ok(());
    }
    Err(Error::SparseConfig {
        what: WHAT,
        detail: format!("the density {density} is outside (0, 1]; pass e.g. 0.01 for 1%"),
    })
}

/// k of a gradient of `n` elements at `density`: ceil(density x n), at least 1, at most n.
pub fn sparse_k(n: usize, density: f64) -> usize {
    ((n as f64 * density).ceil() as usize).clamp(1, n.max(1))
}

/// A sparse set in symmetric memory (so collectives can move it); counts on the device.
struct SymSet<'nv, T: SparseValue, I: SparseIndex> {
    idx: SymmetricBuffer<'nv, I>,
    val: SymmetricBuffer<'nv, T>,
    count: SymmetricBuffer<'nv, u64>,
    capacity: usize,
}

impl<'nv, T: SparseValue, I: SparseIndex> SymSet<'nv, T, I> {
    /// Collective over the world (same capacity everywhere); the count is zeroed.
    fn new(nv: &'nv Nvshmem, capacity: usize) -> Result<Self> {
        Ok(SymSet {
            idx: nv.alloc_zeroed(capacity.max(1))?,
            val: nv.alloc_zeroed(capacity.max(1))?,
            count: nv.alloc_zeroed(1)?,
            capacity,
        })
    }

    fn raw(&self) -> sys::nvshmemrs_sparse_set {
        sys::nvshmemrs_sparse_set {
            idx: self.idx.as_device_ptr().cast(),
            val: self.val.as_device_ptr().cast(),
            count: self.count.as_device_ptr(),
            capacity: self.capacity as u64,
        }
    }

    fn to_host(&self, stream: &Arc<CudaStream>) -> Result<HostSparse<T, I>> {
        let count = stream.clone_dtoh(&self.count)?[0];
        let held = count.min(self.capacity as u64) as usize;
        if held == 0 {
            return Ok(HostSparse {
                count,
                ..HostSparse::empty()
            });
        }
        Ok(HostSparse {
            count,
            idx: stream.clone_dtoh(&self.idx.view(0..held)?)?,
            val: stream.clone_dtoh(&self.val.view(0..held)?)?,
        })
    }
}

/// The device address of a cudarc allocation (ordered by the caller: everything here runs on
/// the call's stream after `new` synchronised the allocations).
fn addr<T>(s: &CudaSlice<T>) -> u64 {
    let (p, _guard) = s.device_ptr(s.stream());
    p
}

/// Counts and displacements of an allgatherv whose counts a kernel computes.
struct VParts<'nv> {
    agv: Allgatherv<'nv>,
    /// The members' set sizes (allgathered count words).
    sizes: SymmetricBuffer<'nv, u64>,
    counts: SymmetricBuffer<'nv, u64>,
    displs: SymmetricBuffer<'nv, u64>,
    /// Pairs gathered in all: the scatter-add's count.
    total: CudaSlice<u64>,
}

/// The exchange of each method, with its buffers.
enum Exchange<'nv, T: SparseValue, I: SparseIndex> {
    /// Allgather of k indexes and k values into P x k each.
    Fixed {
        idx: SymmetricBuffer<'nv, I>,
        val: SymmetricBuffer<'nv, T>,
    },
    /// Allgatherv of indexes and of values, packed in member order.
    Varying(Gathered<'nv, T, I>),
    /// One allgatherv of packed (indexes, values) parts.
    Concat {
        parts: VParts<'nv>,
        packed: SymmetricBuffer<'nv, u8>,
        gathered: SymmetricBuffer<'nv, u8>,
        part_bytes: usize,
    },
    /// gTop-k's tree, broadcast and included indexes.
    Tree(Box<Tree<'nv, T, I>>),
    /// Ok-Topk's region exchange (also `topk_sa`, `gaussiank_sa`).
    Regions(Box<Regions<'nv, T, I>>),
}

/// An allgatherv of indexes and of values with device counts, packed in member order, and
/// their scatter-add into the dense output.
struct Gathered<'nv, T: SparseValue, I: SparseIndex> {
    parts: VParts<'nv>,
    idx: SymmetricBuffer<'nv, I>,
    val: SymmetricBuffer<'nv, T>,
}

/// The region exchange: index regions (one per member), an alltoall of the per-region sizes,
/// alltoallv rounds of the pairs with device counts, the reduce of its region on each member,
/// an allgatherv of the reduced regions.
struct Regions<'nv, T: SparseValue, I: SparseIndex> {
    alltoall: Alltoall<'nv>,
    alltoallv: Alltoallv<'nv>,
    /// Ok-Topk's global phase and re-partition (None: equal regions, set at creation).
    ok: Option<OkTopk<'nv, T, I>>,
    /// The region boundaries, P + 1 words: region r is `bounds[r] .. bounds[r + 1]`.
    bounds: SymmetricBuffer<'nv, u64>,
    /// This member's selection per region: P sizes (the alltoall's input) and displacements.
    send_sizes: SymmetricBuffer<'nv, u64>,
    send_displs: SymmetricBuffer<'nv, u64>,
    /// What each member sends for this member's region (the alltoall's output), and where it
    /// goes in `recv`.
    recv_sizes: SymmetricBuffer<'nv, u64>,
    recv_displs: SymmetricBuffer<'nv, u64>,
    /// Counts of each round, P words a round.
    send_counts: SymmetricBuffer<'nv, u64>,
    recv_counts: SymmetricBuffer<'nv, u64>,
    /// The pairs received for this member's region (count: their number).
    recv: SymSet<'nv, T, I>,
    /// This member's region after the reduce (sorted by index, zero sums dropped).
    reduced: SymSet<'nv, T, I>,
    /// The smallest positive f32: the compaction of the reduce takes every element but zeros.
    tiny: CudaSlice<f32>,
    gathered: Gathered<'nv, T, I>,
    /// `topk_sa`: the dense fallback.
    sa: Option<SaDense<'nv, T>>,
}

/// `topk_sa`'s dense fallback (the seed's): where the reduced regions' pairs would pass about
/// two thirds of n words, the regions' dense sums are allgathered instead. Chosen on the
/// device: both allgathervs are enqueued, the one not taken with zero counts.
struct SaDense<'nv, T: SparseValue> {
    /// The reduce's dense buffer (n elements, symmetric, so the dense allgatherv can move it in
    /// place): this member's region sums, then every region's where the fallback is taken.
    full: SymmetricBuffer<'nv, T>,
    /// The dense allgatherv's counts (the regions' lengths, or 0) and displacements.
    counts: SymmetricBuffer<'nv, u64>,
    displs: SymmetricBuffer<'nv, u64>,
    /// 1 where the last call took the dense exchange.
    dense: CudaSlice<u32>,
    /// This member's region: equal shares, known on the host.
    own: (usize, usize),
}

/// The local threshold of `topk_aopt` and Ok-Topk: estimated by an exact top-k every `every`
/// calls, reused in between (Ok-Topk: raised and adapted as the seed does).
struct Reuse {
    /// The threshold of the last call.
    threshold: CudaSlice<f32>,
    /// The threshold carried to the next call, in f64 (the seed's Python float).
    state: CudaSlice<f64>,
    /// The state's adaptation rounded, written by the adapt kernel (not used in selection).
    next: CudaSlice<f32>,
    /// Workspace of the estimate and of the rise.
    least: CudaSlice<u32>,
    scratch: CudaSlice<f64>,
    every: u64,
    /// Ok-Topk: the rise before a reused selection and the count adaptation after it.
    adapt: bool,
}

/// Ok-Topk's global phase and region schedule.
struct OkTopk<'nv, T: SparseValue, I: SparseIndex> {
    /// The boundaries' average over the members.
    allreduce: Allreduce<'nv>,
    /// The global threshold in use (estimated on the device, reused in between) and its f64
    /// state.
    threshold: CudaSlice<f32>,
    state: CudaSlice<f64>,
    least: CudaSlice<u32>,
    /// The global top k at an estimate.
    global: SparseSet<T, I>,
    global_every: u64,
    repartition_every: u64,
}

struct Tree<'nv, T: SparseValue, I: SparseIndex> {
    p2p: P2pGroup<'nv>,
    bcast: Broadcast<'nv>,
    /// The received set (count k, set once).
    recv: SymSet<'nv, T, I>,
    /// The merged set of the rounds so far (count k after the first merge).
    cur: SymSet<'nv, T, I>,
    /// The global top k (count k, set once).
    global: SymSet<'nv, T, I>,
    union: SparseSet<T, I>,
    pos: SparseSet<T, I>,
    merge: SparseMerge,
    /// 1 where the local pair made it into the global set.
    mark: CudaSlice<f32>,
    mark_pos: SparseSet<f32, I>,
    /// 0.5: the threshold that takes the marks.
    half: CudaSlice<f32>,
    included: SparseSet<T, I>,
}

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
    opts: SparseOptions,
    n: usize,
    k: usize,
    capacity: usize,
    /// Team rank and size (None on PEs outside the team).
    rank: Option<(i32, i32)>,
    allgather: Allgather<'nv>,
    topk: TopK,
    mine: SymSet<'nv, T, I>,
    residual: Option<CudaSlice<T>>,
    /// Momentum correction: the velocity.
    velocity: Option<CudaSlice<T>>,
    /// Gaussian: workspace of the sums and the threshold word.
    gauss: Option<(CudaSlice<f64>, CudaSlice<f32>)>,
    /// `topk_aopt`, Ok-Topk: the reused local threshold.
    reuse: Option<Reuse>,
    /// Local clipping: workspace of the sum of squares and the factor word.
    clip: Option<(CudaSlice<f64>, CudaSlice<f32>)>,
    /// Calls so far (warm-up included) since creation or the last clear: the schedule.
    calls: u64,
    /// Sparse calls of the density ramp made before the schedule's first (a resumed run's):
    /// added to the schedule's sparse call for [`SparseOptions::density_at`].
    ramp_offset: u64,
    /// The dense warm-up's allreduce and its symmetric buffer (n elements).
    warmup: Option<(Allreduce<'nv>, SymmetricBuffer<'nv, T>)>,
    ex: Exchange<'nv, T, I>,
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

    /// The residual (None without error feedback): what this member has not sent yet. Save it
    /// with a checkpoint (`stream.clone_dtoh(r)`) and give it back to
    /// [`SparseAllreduce::load_residual`] on resume, or that gradient mass is lost.
    pub fn residual(&self) -> Option<&CudaSlice<T>> {
        self.residual.as_ref()
    }

    /// Momentum correction ([`SparseOptions::momentum`]): this member's velocity (None
    /// without): what it accumulates into the residual on the next call, times the momentum.
    pub fn velocity(&self) -> Option<&CudaSlice<T>> {
        self.velocity.as_ref()
    }

    /// Sets the residual to zero, on `stream` (e.g. after a checkpoint restore that has no
    /// residual). The schedule starts again: the next sparse call re-estimates every threshold
    /// (`topk_aopt`, Ok-Topk) and the regions (a dense warm-up that has ended is not
    /// repeated). Call it on every member alike (the re-estimate is collective).
    pub fn clear_residual(&mut self, stream: &Arc<CudaStream>) -> Result<()> {
        if let Some(r) = &mut self.residual {
            stream.memset_zeros(r)?;
        }
        if let Some(u) = &mut self.velocity {
            stream.memset_zeros(u)?;
        }
        self.restart_schedule();
        Ok(())
    }

    /// Replaces the residual with `host` (a copy of [`SparseAllreduce::residual`] saved with a
    /// checkpoint), on `stream`: a resumed run then sends what the interrupted one had not sent
    /// yet, and its next call gives what the uninterrupted run's would. `host` may be dropped
    /// when this returns. The schedule starts again, as with
    /// [`SparseAllreduce::clear_residual`]: thresholds and region boundaries are not part of
    /// the residual, so the next sparse call re-estimates them (a run resumed between two
    /// re-estimates differs from the uninterrupted one until its next re-estimate); call it on
    /// every member alike. Errors, with the residual left as it was: [`Error::NoErrorFeedback`] when created
    /// without error feedback, [`Error::ResidualLength`] when `host` does not hold
    /// [`SparseAllreduce::len`] elements.
    pub fn load_residual(&mut self, host: &[T], stream: &Arc<CudaStream>) -> Result<()> {
        const LOAD: &str = "SparseAllreduce::load_residual";
        let len = self.n;
        let Some(r) = &mut self.residual else {
            return Err(Error::NoErrorFeedback { what: LOAD });
        };
        if host.len() != len {
            return Err(Error::ResidualLength {
                what: LOAD,
                len,
                got: host.len(),
            });
        }
        stream.memcpy_htod(host, r)?;
        if let Some(u) = &mut self.velocity {
            stream.memset_zeros(u)?;
        }
        self.restart_schedule();
        Ok(())
    }

    /// The sparse schedule starts again (the state it would reuse belongs to another run):
    /// the next sparse call re-estimates everything. A dense warm-up that has ended is not
    /// repeated; one under way starts over.
    fn restart_schedule(&mut self) {
        let warmup = self.opts.dense_warmup as u64;
        self.calls = if self.calls >= warmup { warmup } else { 0 };
    }

    /// The density ramp ([`SparseOptions::ramp_from`]) continues from sparse call `done` of an
    /// earlier run (a resume: the sparse calls that run made) instead of starting over: the
    /// next sparse call takes `density_at(done)`, the one after `density_at(done + 1)`. Clears
    /// and loads restart the other intervals but keep this offset. Call it on every member
    /// alike, after [`SparseAllreduce::load_residual`].
    pub fn set_ramp_offset(&mut self, done: u64) {
        self.ramp_offset = done;
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

    /// This member's selection of the last call (after the work queued on `stream`; waits for
    /// it): sorted by index, values as selected (from `residual + g` with error feedback). The
    /// count may exceed the pairs held (a Gaussian threshold past the capacity).
    pub fn selected(&self, stream: &Arc<CudaStream>) -> Result<HostSparse<T, I>> {
        self.mine.to_host(stream)
    }

    /// gTop-k: the pairs of this member's selection whose index made it into the global set
    /// (sorted by index; with error feedback, the ones taken out of the residual); None for the
    /// other methods: most send every pair their selection holds ([`SparseAllreduce::selected`];
    /// `topk_sa` and `gaussiank_sa` included: what a member puts into the exchange counts as
    /// sent), and Ok-Topk's sent pairs are those of its selection where the output is not zero.
    /// Waits for the work queued on `stream`.
    pub fn included(&self, stream: &Arc<CudaStream>) -> Result<Option<HostSparse<T, I>>> {
        match &self.ex {
            Exchange::Tree(t) => Ok(Some(t.included.to_host(stream)?)),
            _ => Ok(None),
        }
    }

    /// The true count of this member's last selection (past the capacity where a threshold
    /// overflowed), without copying its pairs: one word read after the work queued on
    /// `stream`.
    pub fn selected_count(&self, stream: &Arc<CudaStream>) -> Result<u64> {
        Ok(stream.clone_dtoh(&self.mine.count)?[0])
    }

    /// gTop-k: how many of this member's pairs made the global set in the last call (one word
    /// read after the work queued on `stream`); None for the other methods.
    pub fn included_count(&self, stream: &Arc<CudaStream>) -> Result<Option<u64>> {
        match &self.ex {
            Exchange::Tree(t) => Ok(Some(stream.clone_dtoh(t.included.count())?[0])),
            _ => Ok(None),
        }
    }

    /// gTop-k: the included pairs of the last call in device memory (their count on the
    /// device), for error feedback of the caller's own; None for the other methods.
    pub fn included_set(&self) -> Option<&SparseSet<T, I>> {
        match &self.ex {
            Exchange::Tree(t) => Some(&t.included),
            _ => None,
        }
    }

    /// The local threshold of the last sparse call (waits for the work queued on `stream`):
    /// GaussianK's (also `gaussiank_concat`, `gaussiank_sa`; after the count correction), or
    /// `topk_aopt`'s and Ok-Topk's (estimated on that call or reused); None for the top-k
    /// methods.
    pub fn threshold(&self, stream: &Arc<CudaStream>) -> Result<Option<f32>> {
        if let Some((_, t)) = &self.gauss {
            return Ok(Some(stream.clone_dtoh(t)?[0]));
        }
        match &self.reuse {
            Some(r) => Ok(Some(stream.clone_dtoh(&r.threshold)?[0])),
            None => Ok(None),
        }
    }

    /// Local clipping ([`SparseOptions::local_clip`]): the factor the last sparse call scaled
    /// this member's gradient by (1 where it was within the norm, and before any call); None
    /// without local clipping. Waits for the work queued on `stream`.
    pub fn clip_factor(&self, stream: &Arc<CudaStream>) -> Result<Option<f32>> {
        match &self.clip {
            Some((_, f)) => Ok(Some(stream.clone_dtoh(f)?[0])),
            None => Ok(None),
        }
    }

    /// Ok-Topk: the global threshold the next reusing call selects the reduced regions with
    /// (as estimated on the last estimate, adapted by the counts since); None for the other
    /// methods. Waits for the work queued on `stream`.
    pub fn global_threshold(&self, stream: &Arc<CudaStream>) -> Result<Option<f32>> {
        match &self.ex {
            Exchange::Regions(r) => match &r.ok {
                Some(ok) => Ok(Some(stream.clone_dtoh(&ok.threshold)?[0])),
                None => Ok(None),
            },
            _ => Ok(None),
        }
    }

    /// Calls counted by the schedule (dense warm-up included): since creation, restarted
    /// after the warm-up by a clear or a load.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The region methods: the region boundaries of the last call, P + 1 values (member r's
    /// region is `b[r] .. b[r + 1]`; Ok-Topk's as last re-estimated, the others' equal
    /// shares); None for the other methods and on PEs outside the team. Waits for the work
    /// queued on `stream`.
    pub fn boundaries(&self, stream: &Arc<CudaStream>) -> Result<Option<Vec<u64>>> {
        match (&self.ex, self.rank) {
            (Exchange::Regions(r), Some((_, p))) => {
                Ok(Some(stream.clone_dtoh(&r.bounds.view(0..p as usize + 1)?)?))
            }
            _ => Ok(None),
        }
    }

    /// The region methods: this member's region after the reduce of the last call (the pairs
    /// every member sent for it, united by index with their values added, sorted by index,
    /// pairs whose sum is zero dropped), which the allgatherv hands to the others; None for
    /// the other methods. Waits for the work queued on `stream`.
    pub fn region(&self, stream: &Arc<CudaStream>) -> Result<Option<HostSparse<T, I>>> {
        match &self.ex {
            Exchange::Regions(r) => Ok(Some(r.reduced.to_host(stream)?)),
            _ => Ok(None),
        }
    }

    /// `topk_sa`: whether the last call took the dense fallback (the reduced regions' dense
    /// sums allgathered, because their pairs would have passed about two thirds of n words);
    /// None for the other methods. Waits for the work queued on `stream`.
    pub fn dense_fallback(&self, stream: &Arc<CudaStream>) -> Result<Option<bool>> {
        match &self.ex {
            Exchange::Regions(r) => match &r.sa {
                Some(sa) => Ok(Some(stream.clone_dtoh(&sa.dense)?[0] != 0)),
                None => Ok(None),
            },
            _ => Ok(None),
        }
    }

    /// Bytes this member put on the wire in the last call (its selections times the peers
    /// they went to, and the sizes it sent; gTop-k: one tree send, plus the broadcast at rank
    /// 0; the region methods: the region sizes, the pairs for the others' regions, the reduced
    /// region's size and pairs to every other member, not counting Ok-Topk's allreduce of the
    /// boundaries at re-estimates). Reads the counts on the device: waits for the work queued on
    /// `stream`.
    pub fn sent_bytes(&self, stream: &Arc<CudaStream>) -> Result<u64> {
        let Some((me, p)) = self.rank else {
            return Ok(0);
        };
        let (p, me) = (p as u64, me as u64);
        let pair = (std::mem::size_of::<T>() + std::mem::size_of::<I>()) as u64;
        let count = stream.clone_dtoh(&self.mine.count)?[0];
        let held = count.min(self.capacity as u64);
        let k = self.k as u64;
        Ok(match &self.ex {
            Exchange::Fixed { .. } => (p - 1) * k * pair,
            Exchange::Varying(_) => (p - 1) * (8 + held * pair),
            Exchange::Concat { .. } => (p - 1) * (8 + packed_bytes::<T, I>(held as usize) as u64),
            Exchange::Tree(_) => {
                let tree = if me > 0 { k * pair } else { 0 };
                let bcast = if me == 0 { (p - 1) * k * pair } else { 0 };
                tree + bcast
            }
            Exchange::Regions(r) => {
                let sizes = stream.clone_dtoh(&r.send_sizes.view(0..p as usize)?)?;
                let others = sizes.iter().sum::<u64>() - sizes[me as usize];
                let reduced = stream.clone_dtoh(&r.reduced.count)?[0];
                let dense = match &r.sa {
                    Some(sa) if stream.clone_dtoh(&sa.dense)?[0] != 0 => {
                        Some((sa.own.1 - sa.own.0) as u64 * std::mem::size_of::<T>() as u64)
                    }
                    _ => None,
                };
                let gathered = dense.unwrap_or(reduced * pair);
                (p - 1) * 8 + others * pair + (p - 1) * (8 + gathered)
            }
        })
    }

    /// Enqueues on `stream` the sparse allreduce of `grad` (this member's gradient, `len`
    /// elements) into `out` (`len` elements; every element written). `grad` is read before
    /// `out` is written, so they may be the same memory ([`SparseAllreduce::run_in_place`]).
    pub fn run<G, D>(&mut self, grad: &G, out: &mut D, stream: &CudaStream) -> Result<()>
    where
        G: DevicePtr<T>,
        D: DevicePtrMut<T>,
    {
        self.check_len("gradient", grad.len())?;
        self.check_len("output", out.len())?;
        let (g, _grad_guard) = grad.device_ptr(stream);
        let (o, _out_guard) = out.device_ptr_mut(stream);
        // SAFETY: `len` elements each (checked), ordered on `stream` by the guards, which live
        // until everything is enqueued.
        unsafe { self.run_raw(g, o, stream) }
    }

    /// [`SparseAllreduce::run`] with the result written over the gradient.
    pub fn run_in_place<D: DevicePtrMut<T>>(
        &mut self,
        grad: &mut D,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_len("gradient", grad.len())?;
        let (g, _guard) = grad.device_ptr_mut(stream);
        // SAFETY: as in `run`.
        unsafe { self.run_raw(g, g, stream) }
    }

    fn check_len(&self, which: &'static str, len: usize) -> Result<()> {
        if len == self.n {
            return Ok(());
        }
        Err(Error::LengthMismatch {
            what: if which == "output" {
                "SparseAllreduce::run (the output against the gradient length it was created for)"
            } else {
                "SparseAllreduce::run (the gradient against the length it was created for)"
            },
            dest: self.n,
            src: len,
        })
    }

    /// [`SparseAllreduce::run`] on device addresses (`grad` may equal `out`).
    ///
    /// # Safety
    /// `grad` and `out` are device memory of `len` elements each, ordered on `stream`.
    pub unsafe fn run_raw(&mut self, grad: u64, out: u64, stream: &CudaStream) -> Result<()> {
        let Some((me, p)) = self.rank else {
            return Err(Error::SparseConfig {
                what: WHAT,
                detail: "this PE is not a member of the team it was created over; call run \
                         on the team's members only"
                    .into(),
            });
        };
        stream.context().bind_to_thread()?;
        let s = raw_stream(stream);
        let n = self.n;
        let dtype = value_code::<T>();
        let itype = index_code::<I>();
        let call = self.calls;
        self.calls += 1;
        if let (Some((ar, warm)), true) = (&mut self.warmup, call < self.opts.dense_warmup as u64) {
            // The dense warm-up: out = the allreduce of g (grad may be out), through the
            // symmetric buffer.
            let bytes = n * std::mem::size_of::<T>();
            let w = warm.as_device_ptr() as u64;
            // SAFETY: n elements each (this function's contract; the buffer's length).
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(w, grad, bytes, stream.cu_stream())
            }?;
            let op = if self.opts.average {
                ReduceOp::Avg
            } else {
                ReduceOp::Sum
            };
            ar.run_in_place(warm.view(0..n)?, op, AllreduceAlgo::Auto, stream)?;
            // SAFETY: as above.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(out, w, bytes, stream.cu_stream())
            }?;
            return Ok(());
        }
        // Sparse calls counted from the first after the warm-up: the intervals' schedule.
        let sparse_call = call - (self.opts.dense_warmup as u64).min(call);
        // DGC's local clipping: the factor of this member's gradient, on the device.
        let clip = match &self.clip {
            Some((scratch, factor)) => {
                let f = addr(factor);
                // SAFETY: grad n elements (this function's contract), the workspace its words,
                // the factor one f32.
                let code = unsafe {
                    sys::nvshmemrs_sparse_clip_factor(
                        grad as *const c_void,
                        n as u64,
                        self.opts.local_clip_norm(p as usize),
                        dtype,
                        addr(scratch) as *mut f64,
                        scratch.len() as u64,
                        f as *mut f32,
                        s,
                    )
                };
                cuda_check(code, "local clipping norm kernel launch")?;
                Some(f)
            }
            None => None,
        };
        let clip_into = |d: u64, f: u64, accumulate: i32| -> Result<()> {
            // SAFETY: d and grad n elements (this function's contract; the residual's and
            // `out`'s length), f one f32, on `stream`.
            let code = unsafe {
                sys::nvshmemrs_sparse_clip_apply(
                    d as *mut c_void,
                    grad as *const c_void,
                    n as u64,
                    f as *const f32,
                    accumulate,
                    dtype,
                    s,
                )
            };
            cuda_check(code, "local clipping kernel launch")
        };
        let accumulate = |d: u64, src: u64, what: &'static str| -> Result<()> {
            // SAFETY: d and src n elements (this function's contract; the residual's, the
            // velocity's and the gradient's length), on `stream`.
            let code = unsafe {
                sys::nvshmemrs_sparse_accumulate(
                    d as *mut c_void,
                    src as *const c_void,
                    n as u64,
                    dtype,
                    s,
                )
            };
            cuda_check(code, what)
        };
        if let (Some(u), Some(r)) = (&self.velocity, &self.residual) {
            // Momentum correction: u = momentum x u + g (clipped first), then residual += u.
            let (u, r) = (addr(u), addr(r));
            // SAFETY: u, r and grad n elements (this function's contract; their lengths).
            let code = unsafe {
                sys::nvshmemrs_sparse_scale(
                    u as *mut c_void,
                    n as u64,
                    self.opts.momentum,
                    dtype,
                    s,
                )
            };
            cuda_check(code, "momentum kernel launch")?;
            match clip {
                Some(f) => clip_into(u, f, 1)?,
                None => accumulate(u, grad, "momentum accumulation kernel launch")?,
            }
            accumulate(r, u, "error-feedback accumulation kernel launch")?;
        }
        // The selection's source: residual + g with error feedback, else g (clipped: scaled
        // by the factor first; with momentum correction the residual holds it already).
        let src = match (&self.residual, clip) {
            (Some(r), _) if self.velocity.is_some() => addr(r),
            (Some(r), Some(f)) => {
                let r = addr(r);
                clip_into(r, f, 1)?;
                r
            }
            (None, Some(f)) => {
                // Into `out`: only the selection below reads the source, and every exchange
                // writes `out` whole after it.
                clip_into(out, f, 0)?;
                out
            }
            (None, None) => grad,
            (Some(r), None) => {
                let r = addr(r);
                accumulate(r, grad, "error-feedback accumulation kernel launch")?;
                r
            }
        };
        let mine = self.mine.raw();
        let density = self.opts.density_at(sparse_call + self.ramp_offset);
        let k = sparse_k(n, density);
        if let Exchange::Tree(t) = &mut self.ex {
            if k != self.k {
                // The received and broadcast sets hold k pairs: their counts follow k.
                let kk = [k as u64];
                for count in [&t.recv.count, &t.global.count] {
                    // SAFETY: one word of device memory, ordered on `stream`; a copy from
                    // pageable memory is staged before the call returns.
                    unsafe {
                        cudarc::driver::result::memcpy_htod_async(
                            count.as_device_ptr() as u64,
                            &kk,
                            stream.cu_stream(),
                        )
                    }?;
                }
            }
        }
        self.k = k;
        match (&self.gauss, &self.reuse) {
            (Some((scratch, t)), _) => {
                let z = reference::gaussian_z(density);
                let t = addr(t);
                // SAFETY: src holds n elements; the workspace its words; t one f32.
                let code = unsafe {
                    sys::nvshmemrs_sparse_gaussian_threshold(
                        src as *const c_void,
                        n as u64,
                        z,
                        reference::gaussian_need(k) as u64,
                        dtype,
                        addr(scratch) as *mut f64,
                        scratch.len() as u64,
                        t as *mut f32,
                        s,
                    )
                };
                cuda_check(code, "Gaussian threshold kernel launch")?;
                // SAFETY: src n elements, the set its capacity, t one f32, all on `stream`.
                unsafe {
                    self.topk
                        .threshold_at_raw::<T, I>((src, n), t as *const f32, mine, stream)?
                };
            }
            (None, Some(reuse)) => {
                // SAFETY: src n elements, the set its capacity, the reuse words, on `stream`.
                unsafe {
                    reuse.select::<T, I>(&mut self.topk, (src, n), k, sparse_call, mine, stream)?
                };
            }
            (None, None) => {
                // SAFETY: as above.
                unsafe { self.topk.run_raw::<T, I>((src, n), k, mine, stream)? };
            }
        }
        // What is sent leaves the residual (gTop-k and Ok-Topk: only what made it into the
        // global set, below).
        let zero_sent = self.residual.is_some()
            && !matches!(self.ex, Exchange::Tree(_))
            && self.opts.method != SparseMethod::OkTopK;
        if let (true, Some(r)) = (zero_sent, &self.residual) {
            // SAFETY: the set's capacity and n elements of residual.
            unsafe { zero_at::<T, I>(mine, addr(r), n, stream, "residual update kernel launch")? };
            if let Some(u) = &self.velocity {
                // DGC's momentum factor masking: where the residual was cleared.
                // SAFETY: the set's capacity and n elements of velocity.
                unsafe {
                    zero_at::<T, I>(mine, addr(u), n, stream, "momentum masking kernel launch")?
                };
            }
        }
        let cap = self.capacity;
        let pu = p as usize;
        // SAFETY: `out` holds n elements (this function's contract).
        let zero_out = || unsafe { zero_dense::<T>(out, n, stream) };
        match &mut self.ex {
            Exchange::Fixed { idx, val } => {
                self.allgather
                    .run(self.mine.idx.view(0..k)?, idx.view(0..pu * k)?, stream)?;
                self.allgather
                    .run(self.mine.val.view(0..k)?, val.view(0..pu * k)?, stream)?;
                zero_out()?;
                let parts = Parts {
                    idx: idx.as_device_ptr() as u64,
                    val: val.as_device_ptr() as u64,
                    sizes: 0,
                    displs: 0,
                    capacity: k,
                    n_parts: p,
                };
                // SAFETY: P parts of k pairs of symmetric memory, `out` n elements.
                unsafe { scatter_parts::<T, I>(parts, (out, n), stream)? };
            }
            Exchange::Varying(g) => {
                // SAFETY: the selection its capacity, `out` n elements, on `stream`.
                unsafe {
                    g.run(
                        &mut self.allgather,
                        &self.mine,
                        (cap, pu * cap),
                        p,
                        (out, n),
                        stream,
                    )?
                };
            }
            Exchange::Concat {
                parts,
                packed,
                gathered,
                part_bytes,
            } => {
                let pb = *part_bytes;
                // SAFETY: the set's capacity packs into part_bytes (packed_bytes).
                let code = unsafe {
                    sys::nvshmemrs_sparse_pack_concat(
                        mine,
                        packed.as_device_ptr().cast(),
                        dtype,
                        itype,
                        s,
                    )
                };
                cuda_check(code, "sparse pack kernel launch")?;
                self.allgather.run(
                    self.mine.count.view(0..1)?,
                    parts.sizes.view(0..pu)?,
                    stream,
                )?;
                let units = (
                    std::mem::size_of::<I>() as u64,
                    std::mem::size_of::<T>() as u64,
                    8,
                );
                parts.offsets(p, cap, units, stream)?;
                let dp = DeviceParts {
                    counts: parts.counts.view(0..pu)?,
                    displs: parts.displs.view(0..pu)?,
                };
                parts.agv.run_device(
                    packed.view(0..pb)?,
                    gathered.view(0..pu * pb)?,
                    &dp,
                    stream,
                )?;
                zero_out()?;
                // SAFETY: P parts of pb bytes, the sizes and displacements P words each, `out`
                // n elements.
                let code = unsafe {
                    sys::nvshmemrs_sparse_scatter_concat(
                        gathered.as_device_ptr().cast(),
                        parts.sizes.as_device_ptr(),
                        cap as u64,
                        parts.displs.as_device_ptr(),
                        p,
                        out as *mut c_void,
                        n as u64,
                        dtype,
                        itype,
                        s,
                    )
                };
                cuda_check(code, "sparse scatter-add kernel launch")?;
            }
            Exchange::Tree(t) => {
                // SAFETY: every set is device memory of its capacity, on `stream`.
                unsafe { t.reduce(&mut self.topk, &self.mine, me, p, k, stream)? };
                zero_out()?;
                // SAFETY: the global set (k pairs), `out` n elements.
                unsafe { scatter_add_raw::<T, I>(t.global.raw(), (out, n), stream)? };
                let residual = self.residual.as_ref().map_or(0, addr);
                // SAFETY: the sets their capacities, mark k f32, the residual n elements.
                unsafe { t.include(&mut self.topk, &self.mine, residual, n, stream)? };
                if let Some(u) = &self.velocity {
                    // Momentum factor masking where the included pairs left the residual.
                    let (inc, _guards) = t.included.raw(stream);
                    // SAFETY: the included set its capacity, n elements of velocity.
                    unsafe {
                        zero_at::<T, I>(inc, addr(u), n, stream, "momentum masking kernel launch")?
                    };
                }
            }
            Exchange::Regions(r) => {
                let residual = self.residual.as_ref().map_or(0, addr);
                // SAFETY: the selection its capacity, `out` n elements, the residual 0 or n, on
                // `stream`.
                unsafe {
                    r.run(
                        &mut self.topk,
                        &mut self.allgather,
                        &self.mine,
                        (sparse_call, k, residual),
                        (me, p),
                        (out, n),
                        stream,
                    )?
                };
                if let (Some(u), SparseMethod::OkTopK) = (&self.velocity, self.opts.method) {
                    // Momentum factor masking where r.run cleared the residual: the pairs whose
                    // index has a result (`out`, not yet averaged). The other region methods'
                    // were masked with their residual above.
                    // SAFETY: the selection its capacity, `out` and the velocity n elements.
                    let code = unsafe {
                        sys::nvshmemrs_sparse_zero_sent(
                            mine,
                            out as *const c_void,
                            addr(u) as *mut c_void,
                            n as u64,
                            dtype,
                            itype,
                            s,
                        )
                    };
                    cuda_check(code, "momentum masking kernel launch")?;
                }
            }
        }
        if self.opts.average && p > 1 {
            // SAFETY: `out` n elements.
            let code = unsafe {
                sys::nvshmemrs_sparse_scale(out as *mut c_void, n as u64, 1.0 / p as f32, dtype, s)
            };
            cuda_check(code, "average kernel launch")?;
        }
        Ok(())
    }
}

/// After an exact top k into `set`: the threshold word `t` becomes the least magnitude the set
/// holds, and the adapting `state` restarts from it (an exact estimate's). `what` names a
/// failed launch of the first kernel.
///
/// # Safety
/// `set` is a sparse set of its capacity in device memory, `least` one u32 of workspace, `t`
/// one f32 and `state` one f64 of device memory, all ordered on `stream`.
unsafe fn threshold_from_least<T: SparseValue, I: SparseIndex>(
    set: sys::nvshmemrs_sparse_set,
    (least, t, state): (&CudaSlice<u32>, *mut f32, *mut f64),
    what: &'static str,
    stream: &CudaStream,
) -> Result<()> {
    let s = raw_stream(stream);
    let (dtype, itype) = (value_code::<T>(), index_code::<I>());
    // SAFETY: this function's contract.
    let code = unsafe {
        sys::nvshmemrs_sparse_least_threshold(set, addr(least) as *mut u32, t, dtype, itype, s)
    };
    cuda_check(code, what)?;
    // SAFETY: one word each.
    let code = unsafe { sys::nvshmemrs_sparse_threshold_state(t, state, s) };
    cuda_check(code, "threshold state kernel launch")
}

/// Enqueues the zeroing of `dense[i]` at every index i of `set` on `stream`: what was sent
/// leaves the residual, and DGC's momentum factor masking clears the velocity there.
///
/// # Safety
/// `set` is device memory of its capacity (and a count word), `dense` n elements of T, both
/// ordered on `stream`.
unsafe fn zero_at<T: SparseValue, I: SparseIndex>(
    set: sys::nvshmemrs_sparse_set,
    dense: u64,
    n: usize,
    stream: &CudaStream,
    what: &'static str,
) -> Result<()> {
    // SAFETY: this function's contract.
    let code = unsafe {
        sys::nvshmemrs_sparse_zero_at(
            set,
            dense as *mut c_void,
            n as u64,
            value_code::<T>(),
            index_code::<I>(),
            raw_stream(stream),
        )
    };
    cuda_check(code, what)
}

/// Enqueues `out[0 .. n] = 0` on `stream`.
///
/// # Safety
/// `out` is device memory of n elements of T, ordered on `stream`.
unsafe fn zero_dense<T>(out: u64, n: usize, stream: &CudaStream) -> Result<()> {
    // SAFETY: this function's contract.
    unsafe {
        cudarc::driver::result::memset_d8_async(
            out,
            0,
            n * std::mem::size_of::<T>(),
            stream.cu_stream(),
        )
    }?;
    Ok(())
}

/// The parts of a gathered sparse set, one per member in member order, by device address.
#[derive(Clone, Copy)]
struct Parts {
    idx: u64,
    val: u64,
    /// P device words: part r's pair count (at most `capacity` taken); 0: `capacity` each.
    sizes: u64,
    /// P device words: where part r starts, in pairs; 0: at r x `capacity`.
    displs: u64,
    capacity: usize,
    n_parts: i32,
}

/// Enqueues `dense[idx] += val` for the pairs of `parts`, part after part in member order, so
/// that every element's adds happen in member order: bit-identical results on every member
/// that scatters the same parts, at any team size (an atomic scatter-add of all parts at once
/// adds in no fixed order, which rounds differently from one member to the next for P >= 3).
///
/// # Safety
/// The parts' buffers hold every part as described, `dense.0` is device memory of `dense.1`
/// elements, all ordered on `stream`.
unsafe fn scatter_parts<T: SparseValue, I: SparseIndex>(
    parts: Parts,
    dense: (u64, usize),
    stream: &CudaStream,
) -> Result<()> {
    // SAFETY: this function's contract.
    let code = unsafe {
        sys::nvshmemrs_sparse_scatter_parts(
            parts.idx as *const c_void,
            parts.val as *const c_void,
            parts.sizes as *const u64,
            parts.displs as *const u64,
            parts.capacity as u64,
            parts.n_parts,
            dense.0 as *mut c_void,
            dense.1 as u64,
            value_code::<T>(),
            index_code::<I>(),
            raw_stream(stream),
        )
    };
    cuda_check(code, "ordered scatter-add kernel launch")
}

impl<T: SparseValue, I: SparseIndex> Gathered<'_, T, I> {
    /// The pairs `set` holds (at most `caps.0`, its input length) from every member into the
    /// gathered buffers (`caps.1` pairs, at least the sum over the members), then `out` = their
    /// scatter-add into zeros.
    ///
    /// # Safety
    /// `out` is device memory of `dense.1` elements at `dense.0`, ordered on `stream`; the
    /// members' pairs together fit `caps.1`.
    unsafe fn run(
        &mut self,
        allgather: &mut Allgather<'_>,
        set: &SymSet<'_, T, I>,
        caps: (usize, usize),
        p: i32,
        dense: (u64, usize),
        stream: &CudaStream,
    ) -> Result<()> {
        let (part, all) = caps;
        let pu = p as usize;
        let parts = &mut self.parts;
        allgather.run(set.count.view(0..1)?, parts.sizes.view(0..pu)?, stream)?;
        parts.offsets(p, part, (1, 0, 1), stream)?;
        let dp = DeviceParts {
            counts: parts.counts.view(0..pu)?,
            displs: parts.displs.view(0..pu)?,
        };
        parts
            .agv
            .run_device(set.idx.view(0..part)?, self.idx.view(0..all)?, &dp, stream)?;
        parts
            .agv
            .run_device(set.val.view(0..part)?, self.val.view(0..all)?, &dp, stream)?;
        // SAFETY: this function's contract.
        unsafe { zero_dense::<T>(dense.0, dense.1, stream)? };
        let gathered = Parts {
            idx: self.idx.as_device_ptr() as u64,
            val: self.val.as_device_ptr() as u64,
            sizes: parts.sizes.as_device_ptr() as u64,
            displs: parts.displs.as_device_ptr() as u64,
            capacity: part,
            n_parts: p,
        };
        // SAFETY: the members' parts within `all` pairs of symmetric memory (their sizes and
        // displacements P words each), `out` of its elements.
        unsafe { scatter_parts::<T, I>(gathered, dense, stream) }
    }
}

impl<'nv, T: SparseValue, I: SparseIndex> Regions<'nv, T, I> {
    /// Collective over the world, as [`SparseAllreduce::new`]; `sizes`: the gradient's
    /// length and the selection's capacity.
    fn new(
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
    unsafe fn run(
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

impl VParts<'_> {
    /// Counts and displacements of the parts from the gathered sizes.
    fn offsets(
        &mut self,
        p: i32,
        cap: usize,
        units: (u64, u64, u64),
        s: &CudaStream,
    ) -> Result<()> {
        // SAFETY: P words each of symmetric memory, the total word.
        let code = unsafe {
            sys::nvshmemrs_sparse_offsets(
                self.sizes.as_device_ptr(),
                p,
                cap as u64,
                units.0,
                units.1,
                units.2,
                self.counts.as_device_ptr(),
                self.displs.as_device_ptr(),
                addr(&self.total) as *mut u64,
                raw_stream(s),
            )
        };
        cuda_check(code, "sparse offsets kernel launch")
    }
}

impl<T: SparseValue, I: SparseIndex> Tree<'_, T, I> {
    /// The tree rounds, then the broadcast of the global top k from rank 0 into `global`.
    ///
    /// # Safety
    /// Sets of their capacities on `stream`.
    unsafe fn reduce(
        &mut self,
        topk: &mut TopK,
        mine: &SymSet<'_, T, I>,
        me: i32,
        p: i32,
        k: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        // Which set holds this member's running top k: its selection until it first merges.
        let mut merged = false;
        let mut step = 1;
        while step < p {
            if me % (2 * step) == 0 && me + step < p {
                let from = me + step;
                self.p2p.run(
                    &[
                        P2p::recv(self.recv.idx.view(0..k)?, from),
                        P2p::recv(self.recv.val.view(0..k)?, from),
                    ],
                    stream,
                )?;
                let a = if merged { self.cur.raw() } else { mine.raw() };
                // Past the union's count the values must not win the top k: zeros lose to
                // every pair of the union (ties go to the lower position, and the union holds
                // at least k pairs).
                {
                    // A raw memset, not cudarc's memset_zeros: that one wants an Arc'd stream,
                    // and run takes a plain &CudaStream like every collective.
                    let (_, mut val, _) = self.union.parts_mut();
                    let len = val.len();
                    let (v, _guard) = val.device_ptr_mut(stream);
                    // SAFETY: the union's `len` values, ordered on `stream` by the guard.
                    unsafe { zero_dense::<T>(v, len, stream)? };
                }
                // Addresses without guards: these sets are used on this stream only.
                let u = self.union.raw_mut(stream).0;
                let ps = self.pos.raw_mut(stream).0;
                // SAFETY: this function's contract; the union is neither input.
                unsafe { self.merge.run_raw::<T, I>(a, self.recv.raw(), u, stream)? };
                // SAFETY: the union's 2k values, the positions set of k.
                unsafe { topk.run_raw::<T, I>((u.val as u64, 2 * k), k, ps, stream)? };
                // SAFETY: positions below 2k into the union, out k pairs.
                let code = unsafe {
                    sys::nvshmemrs_sparse_gather(
                        ps,
                        u.idx,
                        u.val,
                        2 * k as u64,
                        self.cur.raw(),
                        value_code::<T>(),
                        index_code::<I>(),
                        raw_stream(stream),
                    )
                };
                cuda_check(code, "sparse gather kernel launch")?;
                merged = true;
            } else if me % (2 * step) == step {
                let (idx, val) = if merged {
                    (&self.cur.idx, &self.cur.val)
                } else {
                    (&mine.idx, &mine.val)
                };
                let to = me - step;
                self.p2p.run(
                    &[
                        P2p::send(idx.view(0..k)?, to),
                        P2p::send(val.view(0..k)?, to),
                    ],
                    stream,
                )?;
            }
            step *= 2;
        }
        let (idx, val) = if merged {
            (&self.cur.idx, &self.cur.val)
        } else {
            (&mine.idx, &mine.val)
        };
        self.bcast
            .run(idx.view(0..k)?, self.global.idx.view(0..k)?, 0, stream)?;
        self.bcast
            .run(val.view(0..k)?, self.global.val.view(0..k)?, 0, stream)?;
        Ok(())
    }

    /// The pairs of `mine` whose index is in the global set into `included`, and (residual
    /// not 0) those elements of the residual set to zero.
    ///
    /// # Safety
    /// Sets of their capacities, `residual` 0 or n elements, on `stream`.
    unsafe fn include(
        &mut self,
        topk: &mut TopK,
        mine: &SymSet<'_, T, I>,
        residual: u64,
        n: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let s = raw_stream(stream);
        let (dtype, itype) = (value_code::<T>(), index_code::<I>());
        let k = mine.capacity;
        let mark = addr(&self.mark);
        // SAFETY: mine and global k pairs, mark k f32, residual 0 or n elements.
        let code = unsafe {
            sys::nvshmemrs_sparse_mark_included(
                mine.raw(),
                self.global.raw(),
                mark as *mut f32,
                residual as *mut c_void,
                n as u64,
                dtype,
                itype,
                s,
            )
        };
        cuda_check(code, "sparse mark kernel launch")?;
        let (mp, _mg) = self.mark_pos.raw_mut(stream);
        // Positions of the marks, in order: a threshold compaction of the 0/1 marks.
        let half = addr(&self.half) as *const f32;
        // SAFETY: k f32 of marks, the positions set of k, the threshold word.
        unsafe { topk.threshold_at_raw::<f32, I>((mark, k), half, mp, stream)? };
        let (inc, _ig) = self.included.raw_mut(stream);
        // SAFETY: positions below k into mine, out k pairs.
        let code = unsafe {
            sys::nvshmemrs_sparse_gather(
                mp,
                mine.idx.as_device_ptr().cast(),
                mine.val.as_device_ptr().cast(),
                k as u64,
                inc,
                dtype,
                itype,
                s,
            )
        };
        cuda_check(code, "sparse gather kernel launch")
    }
}

impl Reuse {
    /// The local selection of sparse call `call` into `mine` from the `n` elements at `src`: on
    /// an estimate call the exact top k (its least magnitude becomes the threshold), else every
    /// element at or above the reused threshold (Ok-Topk: raised first while more than 3k/2
    /// pass, as the seed's add2residual; up to 2k pairs, past that the largest). Ok-Topk then
    /// adapts the threshold it carries by the count selected (the seed's x or / 1.012).
    ///
    /// # Safety
    /// `src` is device memory of `n` elements, `mine` a set of its capacity, on `stream`.
    unsafe fn select<T: SparseValue, I: SparseIndex>(
        &self,
        topk: &mut TopK,
        (src, n): (u64, usize),
        k: usize,
        call: u64,
        mine: sys::nvshmemrs_sparse_set,
        stream: &CudaStream,
    ) -> Result<()> {
        let s = raw_stream(stream);
        let dtype = value_code::<T>();
        let t = addr(&self.threshold) as *mut f32;
        let state = addr(&self.state) as *mut f64;
        if call % self.every == 0 {
            // SAFETY: this function's contract.
            unsafe { topk.run_raw::<T, I>((src, n), k, mine, stream)? };
            // SAFETY: `mine` a set of its capacity; least, t and state one word each.
            unsafe {
                threshold_from_least::<T, I>(
                    mine,
                    (&self.least, t, state),
                    "threshold estimate kernel launch",
                    stream,
                )?
            };
        } else {
            if self.adapt {
                // SAFETY: src n elements, the state and threshold one word each, the workspace
                // its words.
                let code = unsafe {
                    sys::nvshmemrs_sparse_threshold_rise(
                        src as *const c_void,
                        n as u64,
                        (3 * k / 2) as u64,
                        state,
                        t,
                        dtype,
                        addr(&self.scratch) as *mut f64,
                        self.scratch.len() as u64,
                        s,
                    )
                };
                cuda_check(code, "Ok-Topk threshold rise kernel launch")?;
            }
            // SAFETY: this function's contract; t one f32.
            unsafe { topk.threshold_at_raw::<T, I>((src, n), t, mine, stream)? };
        }
        if self.adapt {
            // SAFETY: the set's count word, the state and a threshold word.
            let code = unsafe {
                sys::nvshmemrs_sparse_threshold_adapt(
                    mine.count,
                    k as u64,
                    reference::OK_LOCAL_SCALE,
                    reference::OK_LOCAL_SCALE,
                    state,
                    addr(&self.next) as *mut f32,
                    s,
                )
            };
            cuda_check(code, "Ok-Topk threshold adaptation kernel launch")?;
        }
        Ok(())
    }
}

impl<T: SparseValue, I: SparseIndex> OkTopk<'_, T, I> {
    /// Ok-Topk's global phase, after the reduced regions were gathered and scattered into
    /// `out`: on a global estimate call, the global top k of that sum (its least magnitude
    /// becomes the global threshold) replaces it; between estimates the regions were selected
    /// at the global threshold already, which adapts by the count gathered (the seed's / 1.01
    /// below 3k/4, x 1.008 above 5k/4). Then, with a residual, the pairs of `mine` whose index
    /// holds a value in `out` (the global set's are never zero) leave it.
    ///
    /// # Safety
    /// `out` device memory of n elements, `residual` 0 or n elements, on `stream`.
    unsafe fn global(
        &mut self,
        topk: &mut TopK,
        mine: &SymSet<'_, T, I>,
        gathered: &Gathered<'_, T, I>,
        (estimate, k, residual): (bool, usize, u64),
        out: (u64, usize),
        stream: &CudaStream,
    ) -> Result<()> {
        let s = raw_stream(stream);
        let (dtype, itype) = (value_code::<T>(), index_code::<I>());
        let t = addr(&self.threshold) as *mut f32;
        let state = addr(&self.state) as *mut f64;
        if estimate {
            let (g, _guard) = self.global.raw_mut(stream);
            // SAFETY: `out` n elements, the global set of capacity k.
            unsafe { topk.run_raw::<T, I>(out, k, g, stream)? };
            // SAFETY: `g` a set of its capacity; least, t and state one word each.
            unsafe {
                threshold_from_least::<T, I>(
                    g,
                    (&self.least, t, state),
                    "Ok-Topk global threshold kernel launch",
                    stream,
                )?
            };
            // SAFETY: `out` n elements.
            unsafe { zero_dense::<T>(out.0, out.1, stream)? };
            // One part, no index twice: the same bits everywhere.
            // SAFETY: the global set of capacity k, `out` n elements.
            unsafe { scatter_add_raw::<T, I>(g, out, stream)? };
        } else {
            // SAFETY: the total word, the state and threshold one word each.
            let code = unsafe {
                sys::nvshmemrs_sparse_threshold_adapt(
                    addr(&gathered.parts.total) as *const u64,
                    k as u64,
                    reference::OK_GLOBAL_DOWN,
                    reference::OK_GLOBAL_UP,
                    state,
                    t,
                    s,
                )
            };
            cuda_check(code, "Ok-Topk global adaptation kernel launch")?;
        }
        if residual != 0 {
            // SAFETY: mine its capacity, `out` and the residual n elements.
            let code = unsafe {
                sys::nvshmemrs_sparse_zero_sent(
                    mine.raw(),
                    out.0 as *const c_void,
                    residual as *mut c_void,
                    out.1 as u64,
                    dtype,
                    itype,
                    s,
                )
            };
            cuda_check(code, "Ok-Topk residual update kernel launch")?;
        }
        Ok(())
    }
}

/// Bytes of a packed part of `pairs` pairs: indexes, then values, each padded to 8 bytes.
fn packed_bytes<T, I>(pairs: usize) -> usize {
    let up = |b: usize| b.div_ceil(8) * 8;
    up(pairs * std::mem::size_of::<I>()) + up(pairs * std::mem::size_of::<T>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_is_the_ceiling_of_the_density_within_one_and_n() {
        assert_eq!(sparse_k(1000, 0.01), 10);
        assert_eq!(sparse_k(1001, 0.01), 11);
        assert_eq!(sparse_k(10, 0.001), 1);
        assert_eq!(sparse_k(7, 1.0), 7);
        assert_eq!(sparse_k(1, 0.5), 1);
    }

    #[test]
    fn options_parse_method_and_density() {
        let o = SparseOptions::parse("gtopk:0.01").unwrap();
        assert_eq!(
            (o.method, o.density, o.error_feedback),
            (SparseMethod::GTopK, 0.01, true)
        );
        for m in SparseMethod::ALL {
            assert_eq!(SparseMethod::from_name(m.name()).unwrap(), m);
        }
        for (spec, m) in [
            ("oktopk:0.01", SparseMethod::OkTopK),
            ("topk_sa:0.1", SparseMethod::TopKSa),
            ("gaussiank_sa:0.001", SparseMethod::GaussianKSa),
        ] {
            let o = SparseOptions::parse(spec).unwrap();
            assert_eq!((o.method, o.reestimate_every), (m, 32), "{spec}");
        }
        let err = SparseOptions::parse("topq:0.1").unwrap_err().to_string();
        assert!(err.contains("gaussiank_concat"), "{err}");
        assert!(SparseOptions::parse("topk").is_err());
        assert!(SparseOptions::parse("topk:x").is_err());
        for bad in ["topk:0", "topk:1.5", "topk:-0.1", "topk:NaN"] {
            let err = SparseOptions::parse(bad).unwrap_err().to_string();
            assert!(err.contains("(0, 1]"), "{bad}: {err}");
        }
    }

    #[test]
    fn threshold_methods_hold_up_to_2k_pairs() {
        use SparseMethod::*;
        let by_threshold: Vec<_> = SparseMethod::ALL
            .into_iter()
            .filter(|m| m.by_threshold())
            .collect();
        assert_eq!(
            by_threshold,
            [TopKAopt, GaussianK, GaussianKConcat, OkTopK, GaussianKSa]
        );
    }

    #[test]
    fn packed_parts_keep_both_arrays_aligned() {
        assert_eq!(packed_bytes::<f32, i32>(3), 16 + 16);
        assert_eq!(packed_bytes::<half::bf16, i32>(3), 16 + 8);
        assert_eq!(packed_bytes::<f32, i32>(0), 0);
    }
}
