//! What an allreduce workspace reads from the environment (the algorithm override, the
//! low-latency and direct protocols' limits, the direct two-shot's launch shape) and the
//! launch shapes those settings give a call.

use crate::coll::allreduce::algo::{self, AllreduceAlgo};
use crate::core::env_value::size_from_env;
use crate::core::error::{Error, Result};
use crate::p2p::device_put::LaunchShape;
use crate::sys;

/// The environment variable that replaces `Auto` for every call of a process (an explicit
/// algorithm passed to [`Allreduce::run`] still wins).
///
/// [`Allreduce::run`]: super::Allreduce::run
pub const ALGO_ENV: &str = "NVSH_ALLREDUCE_ALGO";

/// Largest one-shot payload (bytes) sent with the low-latency protocol (data and flag in the same
/// line: no fence and no separate signal) when every member is mapped by NVLink/PCIe. `0` turns
/// it off. Default 512 KiB for 2 PEs, 256 KiB for more (`LL_MAX_DEFAULT`,
/// `LL_MAX_DEFAULT_WIDE`).
pub const LL_MAX_ENV: &str = "NVSH_ALLREDUCE_LL_MAX";
/// Measured on two NVLinked H200: the protocol beats NCCL up to 512 KiB (9.8 vs 10.1 us) and
/// the signal-based one-shot there (10.6 us); it loses to recursive doubling from 1 MiB.
pub const LL_MAX_DEFAULT: usize = 512 << 10;
/// From 3 PEs the protocol's doubled bytes cost more sooner: on 4 H200 at 512 KiB it took
/// 16.6 us, the signal-based one-shot 14.0 us (NCCL 14.2).
pub const LL_MAX_DEFAULT_WIDE: usize = 256 << 10;

/// [`size_from_env`] that must also pass `valid`; `expected` describes both.
fn bounded_size_from_env(
    var: &'static str,
    default: usize,
    expected: &'static str,
    valid: impl Fn(usize) -> bool,
) -> Result<usize> {
    let v = size_from_env(var, default, expected)?;
    if valid(v) {
        Ok(v)
    } else {
        Err(Error::InvalidEnv {
            var,
            value: v.to_string(),
            expected,
        })
    }
}

/// The low-latency protocol's limit for a team of `n` PEs.
pub(super) fn ll_max_from_env(n: i32) -> Result<usize> {
    size_from_env(
        LL_MAX_ENV,
        if n <= 2 {
            LL_MAX_DEFAULT
        } else {
            LL_MAX_DEFAULT_WIDE
        },
        "a size in bytes such as 65536, 64K or 0 (off)",
    )
}

/// Two-shot messages from this many bytes on take the direct protocol (loads and stores over
/// the peer mappings, no receive slots) where every member is mapped; below, the slot protocol
/// that also runs across nodes. Default 0 (`DIRECT_MIN_DEFAULT`); a huge value (`1T`) turns the
/// direct protocol off.
pub const DIRECT_MIN_ENV: &str = "NVSH_ALLREDUCE_DIRECT_MIN";
/// The direct protocol's grid scales with the message, so it wins at every size where it runs.
pub const DIRECT_MIN_DEFAULT: usize = 0;
/// Threads per block of the direct two-shot (a multiple of 32, 32 to 512; default 512). 1024
/// would need fewer registers than its kernels use.
pub const DIRECT_THREADS_ENV: &str = "NVSH_ALLREDUCE_DIRECT_THREADS";
/// Most blocks of the direct two-shot (1 to 256; default 128).
pub const DIRECT_BLOCKS_ENV: &str = "NVSH_ALLREDUCE_DIRECT_BLOCKS";
/// Bytes of its own chunk each block of the direct two-shot reduces, at least (default 16K: two
/// 16-byte vectors per thread of 512); the grid is the chunk over this, up to the most blocks.
pub const DIRECT_BLOCK_BYTES_ENV: &str = "NVSH_ALLREDUCE_DIRECT_BLOCK_BYTES";

/// Direct two-shot messages from this many bytes on, when the output is not the input, take
/// the push protocol: only stores cross the links (each PE's chunks go into the peers' outputs,
/// which hold them until the reduced chunks overwrite them), at the cost of two more handshakes
/// per block. In place, or below, the pull protocol (loads of the peers' inputs). Default
/// 64 MiB for 3 and 4 PEs, 256 MiB for 2 (`PUSH_MIN_DEFAULT`, `PUSH_MIN_DEFAULT_TWO_PES`), off
/// from 5 (not measured there yet); `1T` turns it off.
pub const PUSH_MIN_ENV: &str = "NVSH_ALLREDUCE_PUSH_MIN";
/// Measured on 4 H200 (f32; NCCL 2.28.9 in the same runs at 312 / 329 / 339 GB/s): push at 64,
/// 128 and 256 MiB reached 304 / 321 / 333 GB/s busbw against pull's 299 / 307 / 312; at 32 MiB
/// they were level (291 / 288), below it pull was faster.
pub const PUSH_MIN_DEFAULT: usize = 64 << 20;
/// Measured on 2 H200 (three interleaved runs, f32 and bf16 alike): push took 0.98x pull's time
/// at 256 MiB (796 against 812 us) and 0.96x at 512 MiB and 1 GiB, but 1.02x at 128 MiB and
/// 1.07x at 64 MiB.
pub const PUSH_MIN_DEFAULT_TWO_PES: usize = 256 << 20;
/// Rounds the push protocol pipelines each block's part in: the next round's stores are issued
/// before this round's reduce, so the links stay busy meanwhile. `0` (default): one round per
/// 64 KiB (`PUSH_ROUND_BYTES`) of a block's part, 1 to 16; else that many.
pub const PUSH_ROUNDS_ENV: &str = "NVSH_ALLREDUCE_PUSH_ROUNDS";
/// Measured on 4 H200 with parts of 128, 256 and 512 KiB per block (64 / 128 / 256 MiB): 2, 4
/// and 8 rounds were the best of 1, 2, 4 and 8 (smaller rounds spend more on handshakes).
pub const PUSH_ROUND_BYTES: usize = 64 << 10;
/// Most rounds (device/abi.h).
const PUSH_ROUNDS_MAX: usize = sys::NVSHMEMRS_ALLREDUCE_PUSH_ROUNDS_MAX as usize;

/// Largest grid of the direct two-shot (device/abi.h).
pub(super) const DIRECT_BLOCKS_MAX: usize = sys::NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS as usize;
/// Largest grid of the slot protocols (their counters are per block).
pub(super) const SLOT_BLOCKS_MAX: usize = sys::NVSHMEMRS_ALLREDUCE_SLOT_BLOCKS as usize;

/// When the direct two-shot runs and with what launch shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DirectShape {
    pub(super) min_bytes: usize,
    pub(super) push_min: usize,
    push_rounds: usize,
    pub(super) threads: usize,
    max_blocks: usize,
    block_bytes: usize,
}

impl DirectShape {
    /// The shape for a team of `n` PEs (the push protocol's default depends on it).
    pub(super) fn from_env(n: i32) -> Result<DirectShape> {
        Ok(DirectShape {
            min_bytes: size_from_env(
                DIRECT_MIN_ENV,
                DIRECT_MIN_DEFAULT,
                "a size in bytes such as 1M, or 1T to turn the direct protocol off",
            )?,
            push_min: size_from_env(
                PUSH_MIN_ENV,
                match n {
                    2 => PUSH_MIN_DEFAULT_TWO_PES,
                    3..=4 => PUSH_MIN_DEFAULT,
                    _ => PUSH_OFF,
                },
                "a size in bytes such as 64M, or 1T to turn the push protocol off",
            )?,
            push_rounds: bounded_size_from_env(
                PUSH_ROUNDS_ENV,
                0,
                "a round count from 1 to 16, or 0 (one per 64K of a block's part)",
                |r| r <= PUSH_ROUNDS_MAX,
            )?,
            threads: bounded_size_from_env(
                DIRECT_THREADS_ENV,
                512,
                "a multiple of 32 from 32 to 512",
                |t| t % 32 == 0 && (32..=512).contains(&t),
            )?,
            max_blocks: bounded_size_from_env(
                DIRECT_BLOCKS_ENV,
                128,
                "a block count from 1 to 256",
                |b| (1..=DIRECT_BLOCKS_MAX).contains(&b),
            )?,
            block_bytes: bounded_size_from_env(
                DIRECT_BLOCK_BYTES_ENV,
                16 << 10,
                "a size in bytes of at least 16, such as 16K",
                |b| b >= 16,
            )?,
        })
    }

    /// Blocks for a message of `bytes` over `n` members: one per `block_bytes` of a chunk.
    pub(super) fn blocks(&self, bytes: usize, n: usize) -> usize {
        bytes
            .div_ceil(n.max(1))
            .div_ceil(self.block_bytes)
            .clamp(1, self.max_blocks)
    }

    /// Push rounds for a message of `bytes` over `n` members on `blocks` blocks.
    pub(super) fn rounds(&self, bytes: usize, n: usize, blocks: usize) -> usize {
        if self.push_rounds > 0 {
            return self.push_rounds;
        }
        (bytes / n.max(1) / blocks.max(1) / PUSH_ROUND_BYTES).clamp(1, PUSH_ROUNDS_MAX)
    }
}

/// The push protocol's threshold when it is off (as `1T`: no message is that large).
const PUSH_OFF: usize = 1 << 40;

/// `NVSH_ALLREDUCE_ALGO` if set (empty means unset).
pub(super) fn algo_from_env() -> Result<Option<AllreduceAlgo>> {
    match std::env::var(ALGO_ENV) {
        Ok(v) if !v.trim().is_empty() => {
            AllreduceAlgo::parse(&v)
                .map(Some)
                .map_err(|_| Error::InvalidEnv {
                    var: ALGO_ENV,
                    value: v,
                    expected: algo::ALGO_NAMES,
                })
        }
        _ => Ok(None),
    }
}

/// The launch of the low-latency one-shot for a message of `bytes`: a block per 4 KiB, at most
/// 32, of 512 threads, one 16-byte line (8 payload bytes) per thread per pass. Public so that
/// the tools' probe (`nvsh bench probe`) launches its kernels alike.
pub fn low_latency_shape(bytes: usize) -> LaunchShape {
    LaunchShape {
        blocks: parts(bytes, 4 << 10, 32) as u32,
        threads: 512,
    }
}

/// Blocks for `bytes` at one per `unit` bytes, 1 to `max`.
pub(super) fn parts(bytes: usize, unit: usize, max: usize) -> usize {
    bytes.div_ceil(unit).clamp(1, max)
}

/// [`Allreduce::settings`] for these values.
///
/// [`Allreduce::settings`]: super::Allreduce::settings
pub(super) fn describe_settings(ll_max: usize, d: &DirectShape) -> String {
    use crate::core::env_value::size_label;
    let ll = if ll_max == 0 {
        "low-latency one-shot off".to_string()
    } else {
        format!("low-latency one-shot up to {}", size_label(ll_max))
    };
    let rounds = match d.push_rounds {
        0 => format!(
            "a round per {} of a block's part",
            size_label(PUSH_ROUND_BYTES)
        ),
        r => format!("{r} rounds"),
    };
    let push = if d.push_min >= PUSH_OFF {
        "no push".to_string()
    } else {
        format!(
            "push from {} out of place, {rounds}",
            size_label(d.push_min)
        )
    };
    format!(
        "{ll}; direct two-shot from {} ({push}), {} threads x up to {} blocks of {}",
        size_label(d.min_bytes),
        d.threads,
        d.max_blocks,
        size_label(d.block_bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::tests::with_env;

    #[test]
    fn low_latency_launch_has_a_block_per_4k_up_to_32() {
        let shape = |bytes| low_latency_shape(bytes).to_string();
        assert_eq!(shape(8), "1x512");
        assert_eq!(shape(4 << 10), "1x512");
        assert_eq!(shape((4 << 10) + 8), "2x512");
        assert_eq!(shape(128 << 10), "32x512");
        assert_eq!(shape(1 << 20), "32x512");
    }

    #[test]
    fn the_direct_shape_comes_from_the_environment_and_scales_with_the_message() {
        let shape = with_env(&[], || DirectShape::from_env(8)).unwrap();
        assert_eq!(shape.min_bytes, DIRECT_MIN_DEFAULT);
        assert_eq!(shape.push_rounds, 0);
        // Push by default only where it was measured to win: 2 to 4 PEs.
        for (n, push_min) in [
            (1, PUSH_OFF),
            (2, PUSH_MIN_DEFAULT_TWO_PES),
            (3, PUSH_MIN_DEFAULT),
            (4, PUSH_MIN_DEFAULT),
            (5, PUSH_OFF),
        ] {
            let s = with_env(&[], || DirectShape::from_env(n)).unwrap();
            assert_eq!(s.push_min, push_min, "{n} PEs");
        }
        assert_eq!(shape.push_min, PUSH_OFF);
        // A round per 64 KiB of a block's part, 1 to 16.
        assert_eq!(shape.rounds(16 << 20, 4, 128), 1);
        assert_eq!(shape.rounds(64 << 20, 4, 128), 2);
        assert_eq!(shape.rounds(256 << 20, 4, 128), 8);
        assert_eq!(shape.rounds(1 << 30, 2, 128), 16);
        assert_eq!(
            (shape.threads, shape.max_blocks, shape.block_bytes),
            (512, 128, 16 << 10)
        );
        // One block per 16 KiB of a PE's chunk, from 1 to 128.
        assert_eq!(shape.blocks(4096, 8), 1);
        assert_eq!(shape.blocks(1 << 20, 8), 8);
        assert_eq!(shape.blocks(2 << 20, 2), 64);
        assert_eq!(shape.blocks(8 << 20, 2), 128);
        assert_eq!(shape.blocks(256 << 20, 8), 128);
        let tuned = with_env(
            &[
                (DIRECT_MIN_ENV, "1M"),
                (PUSH_MIN_ENV, "32M"),
                (PUSH_ROUNDS_ENV, "16"),
                (DIRECT_THREADS_ENV, "256"),
                (DIRECT_BLOCKS_ENV, "256"),
                (DIRECT_BLOCK_BYTES_ENV, "16K"),
            ],
            // The variable also turns push on where its default is off.
            || DirectShape::from_env(2),
        )
        .unwrap();
        assert_eq!(
            tuned,
            DirectShape {
                min_bytes: 1 << 20,
                push_min: 32 << 20,
                push_rounds: 16,
                threads: 256,
                max_blocks: 256,
                block_bytes: 16 << 10
            }
        );
        for (var, value) in [
            (DIRECT_THREADS_ENV, "100"),
            (DIRECT_THREADS_ENV, "1024"),
            (PUSH_ROUNDS_ENV, "17"),
            (DIRECT_BLOCKS_ENV, "0"),
            (DIRECT_BLOCKS_ENV, "257"),
            (DIRECT_BLOCK_BYTES_ENV, "8"),
            (DIRECT_MIN_ENV, "big"),
            (PUSH_MIN_ENV, "-1"),
        ] {
            let err = with_env(&[(var, value)], || DirectShape::from_env(4)).unwrap_err();
            assert!(err.to_string().contains(var), "{var}={value}: {err}");
        }
    }

    #[test]
    fn settings_read_as_the_bench_header_says() {
        let shape = with_env(&[], || DirectShape::from_env(2)).unwrap();
        assert_eq!(
            describe_settings(LL_MAX_DEFAULT, &shape),
            "low-latency one-shot up to 512K; direct two-shot from 0 (push from 256M out of \
             place, a round per 64K of a block's part), 512 threads x up to 128 blocks of 16K"
        );
        let shape = with_env(&[], || DirectShape::from_env(8)).unwrap();
        assert!(describe_settings(LL_MAX_DEFAULT_WIDE, &shape).contains("from 0 (no push),"));
        let shape = with_env(&[], || DirectShape::from_env(4)).unwrap();
        assert_eq!(
            describe_settings(LL_MAX_DEFAULT_WIDE, &shape),
            "low-latency one-shot up to 256K; direct two-shot from 0 (push from 64M out of \
             place, a round per 64K of a block's part), 512 threads x up to 128 blocks of 16K"
        );
        let fixed = with_env(&[(PUSH_ROUNDS_ENV, "3")], || DirectShape::from_env(4)).unwrap();
        assert!(describe_settings(0, &fixed).contains("64M out of place, 3 rounds)"));
        assert!(describe_settings(0, &shape).starts_with("low-latency one-shot off; "));
    }

    #[test]
    fn names_round_trip_and_the_env_override_is_checked() {
        let every = [AllreduceAlgo::Auto, AllreduceAlgo::Hierarchical];
        for a in AllreduceAlgo::ALL.into_iter().chain(every) {
            assert_eq!(AllreduceAlgo::parse(a.name()).unwrap(), a);
            assert_eq!(a.name().parse::<AllreduceAlgo>().unwrap(), a);
        }
        assert_eq!(
            AllreduceAlgo::parse("Recursive-Doubling").unwrap(),
            AllreduceAlgo::RecursiveDoubling
        );
        assert_eq!(
            AllreduceAlgo::parse("hierarchical").unwrap(),
            AllreduceAlgo::Hierarchical
        );
        assert!(!AllreduceAlgo::ALL.contains(&AllreduceAlgo::Hierarchical));
        let err = AllreduceAlgo::parse("fastest").unwrap_err();
        assert!(matches!(err, Error::UnknownName { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "no allreduce algorithm named \"fastest\": expected auto, oneshot, twoshot, ring, rd or hier"
        );
        with_env(&[(ALGO_ENV, "ring")], || {
            assert_eq!(algo_from_env().unwrap(), Some(AllreduceAlgo::Ring));
        });
        with_env(&[(ALGO_ENV, "")], || {
            assert_eq!(algo_from_env().unwrap(), None)
        });
        with_env(&[(LL_MAX_ENV, "0")], || {
            assert_eq!(ll_max_from_env(2).unwrap(), 0)
        });
        with_env(&[(LL_MAX_ENV, "256K")], || {
            assert_eq!(ll_max_from_env(8).unwrap(), 256 << 10)
        });
        with_env(&[], || {
            assert_eq!(ll_max_from_env(2).unwrap(), LL_MAX_DEFAULT);
            assert_eq!(ll_max_from_env(4).unwrap(), LL_MAX_DEFAULT_WIDE)
        });
        with_env(&[(LL_MAX_ENV, "lots")], || {
            assert!(ll_max_from_env(2).is_err())
        });
        with_env(&[(ALGO_ENV, "fastest")], || {
            let err = algo_from_env().unwrap_err().to_string();
            assert!(
                err.contains("NVSH_ALLREDUCE_ALGO") && err.contains("ring"),
                "{err}"
            );
        });
    }
}
