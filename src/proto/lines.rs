//! The exchanges' low-latency lines as the host sizes and reports them (device/abi.h
//! NVSHMEMRS_EXCHANGE_LINES; [`crate::proto::exchange`] decides per pair and launches): the
//! bound [`EXCHANGE_LL_MAX_ENV`], the line slot it takes, and what a call took. Apart from
//! `exchange`, which launches on a [`crate::proto::FamilyWorkspace`], so that the workspace
//! can size its line region without importing it back.

use crate::core::error::Result;
use crate::sys;

/// Header lines of a pair besides one per transfer (device/abi.h).
const HEADER_LINES: usize = sys::NVSHMEMRS_EXCHANGE_HEADER_LINES as usize;
/// Transfers between two PEs in one direction in one call (device/abi.h).
const MAX_PER_PEER: usize = sys::NVSHMEMRS_EXCHANGE_MAX_PER_PEER as usize;

/// The environment variable that bounds the exchanges' low-latency lines: the most bytes the
/// transfers between two PEs in one direction may add up to in one call for them to go as
/// lines; 0 turns them off and allocates no line region. Every PE must set the same: the
/// region is symmetric, and the two ends of a pair decide with it.
pub const EXCHANGE_LL_MAX_ENV: &str = "NVSH_EXCHANGE_LL_MAX";
/// Default of [`EXCHANGE_LL_MAX_ENV`]: 256 KiB. On 4 x H100 the lines shortened calls whose
/// pairs fit and no longer cost calls whose pairs take the mailbox (docs/measured.md). The line
/// region costs 2 parities x world PEs x a slot of 512.25 KiB (2 bytes of lines per payload
/// byte, plus headers), about 1 MiB per PE of the world per exchange workspace; 0 turns the
/// lines off and allocates none.
pub const EXCHANGE_LL_MAX_DEFAULT: usize = 256 << 10;

/// [`EXCHANGE_LL_MAX_ENV`], checked.
pub(crate) fn ll_max_from_env() -> Result<usize> {
    crate::core::env_value::size_from_env(
        EXCHANGE_LL_MAX_ENV,
        EXCHANGE_LL_MAX_DEFAULT,
        "a size in bytes such as 65536, 64K or 0 (off)",
    )
}

/// Bytes of a line slot for pairs of up to `max` bytes: 16 per 8 of payload, the header (a
/// line per transfer and one more) and up to a line of padding per transfer (each starts on a
/// line). None where that overflows.
pub fn line_slot_bytes(max: usize) -> Option<usize> {
    max.checked_mul(2)?
        .checked_add(16 * (HEADER_LINES + 2 * MAX_PER_PEER))
}

/// Lines a pair with transfers of `sizes` bytes takes with its data: the header, and each
/// transfer's payload from a line boundary.
pub fn pair_lines(sizes: impl IntoIterator<Item = usize>) -> usize {
    sizes
        .into_iter()
        .fold(HEADER_LINES, |n, b| n + 1 + b.div_ceil(8))
}

/// What decides whether a pair goes as lines: the workspace's bound and its slot size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineLimits {
    /// [`EXCHANGE_LL_MAX_ENV`]: the most bytes a pair's transfers add up to.
    pub max_bytes: usize,
    /// Bytes of a line slot ([`line_slot_bytes`], rounded up).
    pub slot_bytes: usize,
}

/// How one exchange call's pairs went on this PE: a pair is a peer other than this PE and a
/// direction with at least one transfer (zero-byte ones count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExchangePairs {
    /// Pairs whose data went as low-latency lines.
    pub lines: usize,
    /// Pairs that went through the mailbox (the receiver's handshake).
    pub mailbox: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_holds_every_pair_within_the_bound() {
        for max in [0, 1, 8, 4096, 256 << 10, (256 << 10) + 3] {
            let slot = line_slot_bytes(max).unwrap();
            // One transfer; and eight, seven of one byte each (most of a line wasted).
            assert!(16 * pair_lines([max]) <= slot, "{max}");
            if max >= MAX_PER_PEER {
                let mut sizes = vec![1; MAX_PER_PEER];
                sizes[0] = max - (MAX_PER_PEER - 1);
                assert!(16 * pair_lines(sizes) <= slot, "{max}");
            }
        }
        assert_eq!(pair_lines([]), 1);
        assert_eq!(pair_lines([0]), 2);
        assert_eq!(pair_lines([1, 8, 9]), 1 + 3 + 1 + 1 + 2);
        assert_eq!(line_slot_bytes(usize::MAX), None);
    }
}
