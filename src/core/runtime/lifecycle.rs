//! Where the process stands with NVSHMEM: one init per process, finalised at most once.

use crate::core::error::{Error, Result};
use std::sync::Mutex;

/// Where the process stands with NVSHMEM. NVSHMEM supports one init per process (it documents
/// re-init only for its MPI bootstrap, which this runtime does not use that way), so the states
/// only move forward once NVSHMEM has come up:
///
/// ```text
/// Uninit --begin--> Initializing --up--> Live --finalized--> Finalized
///   ^                   |                  \--finalize skipped (peer failure)--> Abandoned
///   \--failed before NVSHMEM init--/
///                      \--failed after NVSHMEM init (it is finalised)--> Finalized
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// NVSHMEM never came up in this process: init may (again) be tried.
    Uninit,
    /// An init is running (on some thread).
    Initializing,
    /// A handle exists.
    Live,
    /// NVSHMEM was finalised: it cannot come up again in this process.
    Finalized,
    /// NVSHMEM is still up without a handle (finalize skipped after a peer failure).
    Abandoned,
}

impl Lifecycle {
    /// The state an init moves to from `self`, or why it may not start.
    pub(crate) fn begin_init(self) -> Result<Lifecycle> {
        match self {
            Lifecycle::Uninit => Ok(Lifecycle::Initializing),
            Lifecycle::Initializing | Lifecycle::Live => Err(Error::AlreadyInitialized),
            Lifecycle::Finalized | Lifecycle::Abandoned => Err(Error::InitAfterFinalize {
                abandoned: self == Lifecycle::Abandoned,
            }),
        }
    }

    /// The state after an init that failed; `nvshmem_up` says whether NVSHMEM's own init had
    /// succeeded (and was finalised again) before the failure.
    pub(crate) fn init_failed(self, nvshmem_up: bool) -> Lifecycle {
        debug_assert_eq!(self, Lifecycle::Initializing);
        if nvshmem_up {
            Lifecycle::Finalized
        } else {
            Lifecycle::Uninit
        }
    }

    /// The state after the handle ended; `finalized` says whether NVSHMEM was finalised.
    pub(crate) fn ended(self, finalized: bool) -> Lifecycle {
        if finalized {
            Lifecycle::Finalized
        } else {
            Lifecycle::Abandoned
        }
    }
}

/// The process's [`Lifecycle`].
static LIFECYCLE: Mutex<Lifecycle> = Mutex::new(Lifecycle::Uninit);

/// Applies `step` to the process's lifecycle under its lock.
pub(super) fn lifecycle<R>(step: impl FnOnce(&mut Lifecycle) -> R) -> R {
    // The state is one Copy value: a panic elsewhere cannot leave it half-written.
    step(&mut LIFECYCLE.lock().unwrap_or_else(|p| p.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lifecycle_allows_one_nvshmem_per_process() {
        use Lifecycle::*;
        // A failure before NVSHMEM's init may be retried.
        let s = Uninit.begin_init().unwrap();
        assert_eq!(s, Initializing);
        assert_eq!(s.init_failed(false), Uninit);
        // A failure after it (NVSHMEM was finalised again) may not: no second NVSHMEM init.
        assert_eq!(s.init_failed(true), Finalized);
        assert!(matches!(
            Initializing.begin_init(),
            Err(Error::AlreadyInitialized)
        ));
        assert!(matches!(Live.begin_init(), Err(Error::AlreadyInitialized)));
        // init -> finalize -> init is refused.
        assert_eq!(Live.ended(true), Finalized);
        let err = Finalized.begin_init().unwrap_err();
        assert!(
            matches!(err, Error::InitAfterFinalize { abandoned: false }),
            "{err:?}"
        );
        assert!(err.to_string().contains("once per process"), "{err}");
        // A skipped finalize leaves NVSHMEM up: refused too.
        assert_eq!(Live.ended(false), Abandoned);
        assert!(matches!(
            Abandoned.begin_init(),
            Err(Error::InitAfterFinalize { abandoned: true })
        ));
    }
}
