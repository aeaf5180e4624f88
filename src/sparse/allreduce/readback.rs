//! What the last call did, read back on the host: this member's selection and included pairs,
//! the thresholds, the clipping factor, the regions, the dense fallback and the bytes sent.

use super::exchange::{packed_bytes, Exchange};
use super::state::SparseAllreduce;
use crate::core::error::Result;
use crate::sparse::set::{HostSparse, SparseSet};
use crate::sparse::{SparseIndex, SparseValue};
use cudarc::driver::CudaStream;
use std::sync::Arc;

impl<T: SparseValue, I: SparseIndex> SparseAllreduce<'_, T, I> {
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
    ///
    /// [`SparseOptions::local_clip`]: super::SparseOptions::local_clip
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
}
