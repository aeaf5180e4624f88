//! Peer failure (a wait that timed out ends collective work) and the agreement every PE reaches
//! before a collective NVSHMEM call that waits without a deadline.

use super::{Nvshmem, Vote};
use crate::core::error::{Error, Result};
use crate::sys;

impl Nvshmem {
    /// What made the runtime give up on its peers (the first wait that timed out), if anything
    /// did. Once set, collective calls return [`Error::PeerFailed`], symmetric buffers are not
    /// freed and finalize is skipped: each would wait for the failed peer.
    pub fn peer_failure(&self) -> Option<String> {
        self.peer_failure.borrow().clone()
    }

    /// Records `err` as the peer failure if it is a timeout or shows the PEs out of step (the
    /// first one wins) and returns it.
    pub(crate) fn note(&self, err: Error) -> Error {
        let fails_peers = matches!(
            err,
            Error::Timeout { .. } | Error::CollectiveOutOfStep { .. }
        );
        if fails_peers && self.peer_failure.borrow().is_none() {
            *self.peer_failure.borrow_mut() = Some(err.to_string());
        }
        err
    }

    /// Records `cause` as the failure that ends collective work (the first one wins), for a
    /// failure that is not a timeout but leaves NVSHMEM unusable (its heap torn down).
    pub(crate) fn give_up(&self, cause: String) {
        if self.peer_failure.borrow().is_none() {
            *self.peer_failure.borrow_mut() = Some(cause);
        }
    }

    /// Passes `r` through, recording a timeout in it as the peer failure.
    pub(crate) fn noted<T>(&self, r: Result<T>) -> Result<T> {
        r.map_err(|e| self.note(e))
    }

    /// `Err(PeerFailed)` once a peer failure was recorded.
    pub(crate) fn check_peers(&self, what: &'static str) -> Result<()> {
        match self.peer_failure.borrow().as_ref() {
            None => Ok(()),
            Some(cause) => Err(Error::PeerFailed {
                what,
                cause: cause.clone(),
            }),
        }
    }

    /// Before a call of NVSHMEM that is collective over all PEs and waits inside without a
    /// deadline (malloc, free, finalize): every PE's `vote` reaches every PE within the
    /// runtime's deadline, so the PEs decide alike. Returns the first PE that voted no, and
    /// its number; `Ok(None)` means every PE goes in.
    ///
    /// Two barriers: the first delivers the votes (each barrier quiets first); the second
    /// keeps a PE that passed the first late, after a peer gave up on it, from entering
    /// NVSHMEM's call alone: the peer that gave up never arrives, so the late PE times out
    /// there too. (A PE that stalls for a whole timeout between the two can still get
    /// through; nothing bounded closes that.)
    pub(crate) fn agree_collective(
        &self,
        what: &'static str,
        vote: Vote,
    ) -> Result<Option<(i32, u64)>> {
        self.check_peers(what)?;
        self.bind()?;
        let n = self.n_pes.max(1) as usize;
        let me = self.my_pe as usize;
        let round = self.vote_round.get() + 1;
        self.vote_round.set(round);
        // Two banks: a PE can be one round ahead (it passed this round's barriers), not two.
        let bank = (round & 1) as usize * n * 2;
        let (no, detail) = match vote {
            Vote::Yes => (0, 0),
            Vote::No(d) => (1, d),
        };
        let mine = self.waits.votes.wrapping_add(bank + 2 * me);
        for pe in 0..n as i32 {
            // SAFETY: `mine` and `mine + 1` lie in the symmetric vote slots (4 * n words);
            // NVSHMEM is initialised while self lives and `pe` is a PE of the job.
            unsafe {
                sys::nvshmem_uint64_p(mine, detail, pe);
                sys::nvshmem_uint64_p(mine.add(1), round << 1 | no, pe);
            }
        }
        self.barrier_all()?;
        let mut words = vec![0u64; 2 * n];
        // SAFETY: this bank's 2 * n words of the local vote slots; the copy is synchronised
        // before `words` is read or dropped.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(
                &mut words,
                self.waits.votes.wrapping_add(bank) as u64,
                self.stream.cu_stream(),
            )
        }?;
        self.stream.synchronize()?;
        let mut refusal = None;
        for (pe, slot) in words.chunks_exact(2).enumerate() {
            if slot[1] >> 1 != round {
                return Err(self.note(Error::CollectiveOutOfStep {
                    what,
                    peer: pe as i32,
                }));
            }
            if slot[1] & 1 == 1 && refusal.is_none() {
                refusal = Some((pe as i32, slot[0]));
            }
        }
        if refusal.is_none() {
            self.barrier_all()?;
        }
        Ok(refusal)
    }

    /// [`Nvshmem::agree_collective`] for a call every PE makes unless one refuses:
    /// `Err(CollectiveRefused)` naming it.
    pub(crate) fn enter_collective(&self, what: &'static str, vote: Vote) -> Result<()> {
        match self.agree_collective(what, vote)? {
            None => Ok(()),
            Some((pe, _)) => Err(Error::CollectiveRefused { what, pe }),
        }
    }
}
