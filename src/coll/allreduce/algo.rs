//! The allreduce algorithms: what [`crate::Allreduce::run`] takes and what `Auto` picks among.

use crate::core::error::{Error, Result};
use crate::sys;

/// The names [`AllreduceAlgo::parse`] accepts, as errors list them.
pub(crate) const ALGO_NAMES: &str = "auto, oneshot, twoshot, ring, rd or hier";

/// The algorithm; `Auto` picks one from [`super::SELECTION`] by message size, dtype and PE count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllreduceAlgo {
    /// Picked per call by size, dtype and PE count (a tuning, else the built-in table).
    Auto,
    /// Every PE pushes its whole input to every peer, each reduces locally (small messages).
    OneShot,
    /// Reduce-scatter by puts, then all-gather by puts (medium and large messages).
    TwoShot,
    /// Reduce-scatter and all-gather around a ring, neighbour to neighbour: bandwidth-optimal as
    /// the PE count grows (each link carries 2(n-1)/n of the message).
    Ring,
    /// log2(n) pairwise exchanges of the whole message (latency-optimal for small messages at
    /// larger PE counts); PE counts that are not powers of two fold the extra PEs in first.
    RecursiveDoubling,
    /// Node-aware, for a workspace over the world where it spans nodes (pretend ones too):
    /// reduce-scatter inside each node, an allreduce of each shard across nodes on its rail,
    /// an allgather inside each node (docs/nodes.md). `Auto` takes it on such a workspace;
    /// elsewhere asking for it is an error.
    Hierarchical,
}

impl AllreduceAlgo {
    /// Every flat algorithm (not `Auto`, not `Hierarchical`, which is built from them): what
    /// tuning times and the slot counters are laid out for.
    pub const ALL: [AllreduceAlgo; 4] = [
        AllreduceAlgo::OneShot,
        AllreduceAlgo::TwoShot,
        AllreduceAlgo::Ring,
        AllreduceAlgo::RecursiveDoubling,
    ];

    /// The short name used by `NVSH_ALLREDUCE_ALGO`, the bench and logs.
    pub fn name(self) -> &'static str {
        match self {
            AllreduceAlgo::Auto => "auto",
            AllreduceAlgo::OneShot => "oneshot",
            AllreduceAlgo::TwoShot => "twoshot",
            AllreduceAlgo::Ring => "ring",
            AllreduceAlgo::RecursiveDoubling => "rd",
            AllreduceAlgo::Hierarchical => "hier",
        }
    }

    /// Parses a [`AllreduceAlgo::name`] (also "recursive-doubling", "one-shot", "two-shot"),
    /// in any case; [`Error::UnknownName`] names the accepted ones. Also `str::parse`.
    pub fn parse(s: &str) -> Result<AllreduceAlgo> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "auto" => AllreduceAlgo::Auto,
            "oneshot" | "one-shot" => AllreduceAlgo::OneShot,
            "twoshot" | "two-shot" => AllreduceAlgo::TwoShot,
            "ring" => AllreduceAlgo::Ring,
            "rd" | "recursive-doubling" | "recursive_doubling" => AllreduceAlgo::RecursiveDoubling,
            "hier" | "hierarchical" => AllreduceAlgo::Hierarchical,
            _ => {
                return Err(Error::UnknownName {
                    what: "allreduce algorithm",
                    name: s.to_string(),
                    expected: ALGO_NAMES,
                })
            }
        })
    }

    /// Code of the algorithm (device/abi.h); -1 for `Hierarchical`, which has no kernel of its
    /// own.
    pub(crate) fn code(self) -> i32 {
        (match self {
            AllreduceAlgo::Hierarchical => return -1,
            AllreduceAlgo::Auto | AllreduceAlgo::OneShot => sys::NVSHMEMRS_ALGO_ONESHOT,
            AllreduceAlgo::TwoShot => sys::NVSHMEMRS_ALGO_TWOSHOT,
            AllreduceAlgo::Ring => sys::NVSHMEMRS_ALGO_RING,
            AllreduceAlgo::RecursiveDoubling => sys::NVSHMEMRS_ALGO_RECURSIVE_DOUBLING,
        }) as i32
    }

    /// One and recursive doubling carry a whole segment per slot, the others a chunk of it.
    pub(crate) fn whole_segment_per_slot(self) -> bool {
        matches!(
            self,
            AllreduceAlgo::Auto | AllreduceAlgo::OneShot | AllreduceAlgo::RecursiveDoubling
        )
    }
}

impl std::str::FromStr for AllreduceAlgo {
    type Err = Error;
    fn from_str(s: &str) -> Result<AllreduceAlgo> {
        AllreduceAlgo::parse(s)
    }
}
