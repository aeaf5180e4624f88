//! What a [`SparseAllreduce`] does: its method ([`SparseMethod`]: how it selects and
//! exchanges), its options ([`SparseOptions`]: density, error feedback, the schedule's
//! intervals, DGC's ramp, clipping and momentum), and k of a density ([`sparse_k`]).
//!
//! [`SparseAllreduce`]: super::SparseAllreduce

use crate::core::error::{Error, Result};

/// The name the sparse allreduce's errors give.
pub(super) const WHAT: &str = "SparseAllreduce";

/// How a [`SparseAllreduce`] selects and exchanges.
///
/// [`SparseAllreduce`]: super::SparseAllreduce
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
    ///
    /// [`reference::gaussian_threshold`]: crate::sparse::reference::gaussian_threshold
    /// [`reference::gaussian_corrected_threshold`]:
    /// crate::sparse::reference::gaussian_corrected_threshold
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
    ///
    /// [`SparseAllreduce::included`]: super::SparseAllreduce::included
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
    ///
    /// [`SparseAllreduce::dense_fallback`]: super::SparseAllreduce::dense_fallback
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

    pub(super) fn gaussian(self) -> bool {
        matches!(
            self,
            SparseMethod::GaussianK | SparseMethod::GaussianKConcat | SparseMethod::GaussianKSa
        )
    }

    /// Whether the method selects by a threshold (up to 2k pairs) rather than an exact top-k.
    pub(super) fn by_threshold(self) -> bool {
        self.gaussian() || self.reuses_threshold()
    }

    /// Whether the method selects by a threshold, holding up to 2k pairs (Gaussian methods,
    /// `topk_aopt`, Ok-Topk), rather than by an exact top-k (k pairs).
    pub fn is_threshold_method(self) -> bool {
        self.by_threshold()
    }

    /// Whether the method estimates its threshold by an exact top-k now and then and reuses it
    /// in between (`topk_aopt`, Ok-Topk).
    pub(super) fn reuses_threshold(self) -> bool {
        matches!(self, SparseMethod::TopKAopt | SparseMethod::OkTopK)
    }
}

/// What a [`SparseAllreduce`] does: its method, density, error feedback and reduction.
///
/// [`SparseAllreduce`]: super::SparseAllreduce
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
    ///
    /// [`SparseAllreduce::set_ramp_offset`]: super::SparseAllreduce::set_ramp_offset
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
    ///
    /// [`SparseAllreduce::clip_factor`]: super::SparseAllreduce::clip_factor
    pub local_clip: f32,
    /// DGC's momentum correction (Deep Gradient Compression, Lin et al., ICLR 2018), in [0, 1):
    /// where above 0, each member keeps a velocity u = momentum x u + g (g after local
    /// clipping) and error feedback accumulates u instead of g, so what is selected and sent
    /// is accumulated velocity; with DGC's momentum factor masking, u is zeroed wherever the
    /// residual is (the pairs that count as sent), so a sent coordinate's stale momentum does
    /// not go on pushing it. Needs error feedback. Sparse calls only; clears and loads zero
    /// the velocity ([`SparseAllreduce::velocity`]), which is not part of the residual. 0 (the
    /// default): off.
    ///
    /// [`SparseAllreduce::velocity`]: super::SparseAllreduce::velocity
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
    ///
    /// [`SparseAllreduce::new`]: super::SparseAllreduce::new
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
}
