//! Which message sizes run, and how many buffers and calls each gets: nccl-tests' size steps
//! and counts, and enough slots that every call of a timed group has its own output.

use super::collective::Collective;
use super::dtype::BenchElement;

/// Work one timed group should hold at least, microseconds.
const MIN_GROUP_US: f64 = 1000.0;
/// Calls per timed group: at least this many...
const MIN_ITERS: usize = 20;
/// ...and at most this many.
pub const MAX_ITERS: usize = 1000;
/// Output (and input) buffer pairs per size: at least this many, so that data of the last
/// three calls never equals the current call's...
pub const MIN_SLOTS: usize = 4;
/// ...and as many more as fit in this many bytes of outputs (and as many of inputs).
pub const SLOT_BUDGET_BYTES: usize = 256 << 20;

/// Input/output buffer pairs at a message size: [`SLOT_BUDGET_BYTES`] worth, at least
/// [`MIN_SLOTS`], at most [`MAX_ITERS`] (no group has more calls).
pub fn slots_for(bytes: usize) -> usize {
    (SLOT_BUDGET_BYTES / bytes.max(1)).clamp(MIN_SLOTS, MAX_ITERS)
}

/// Calls per timed group from an estimate of one call: enough for MIN_GROUP_US of work, at
/// least MIN_ITERS, at most MAX_ITERS; the caller caps it at the size's slots.
pub fn iters_for(us_per_call: f64) -> usize {
    if us_per_call.is_nan() || us_per_call <= 0.0 {
        return MAX_ITERS;
    }
    let n = (MIN_GROUP_US / us_per_call).ceil().min(MAX_ITERS as f64) as usize;
    n.clamp(MIN_ITERS, MAX_ITERS)
}

/// The message sizes asked for, as nccl-tests steps them: `min`, `min * factor`,
/// `min * factor^2`, ... while no larger than `max` (so `max` itself when a step lands on it,
/// and never a size above it). Empty when `min > max`; a factor below 2 is taken as 2, since
/// the command line refuses it and a factor of 1 would never end.
pub fn size_steps(min: usize, max: usize, factor: usize) -> Vec<usize> {
    let factor = factor.max(2);
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        // A step past usize::MAX is past max too.
        match s.checked_mul(factor) {
            Some(next) => s = next,
            None => break,
        }
    }
    out
}

/// nccl-tests' size of a message: bytes of the larger of a PE's input and output buffers.
pub fn message_bytes(in_len: usize, out_len: usize, elem_bytes: usize) -> usize {
    in_len.max(out_len) * elem_bytes
}

/// (count argument, message bytes) per size asked for, in order, for `elem`-byte elements:
/// sizes that are no whole number of elements or give no message are left out, and so is a
/// size whose count repeats the previous one (the rounding of small sizes).
pub fn size_plan<T: BenchElement, C: Collective<T>>(
    coll: &C,
    sizes: &[usize],
    elem: usize,
    n_pes: i32,
) -> Vec<(usize, usize)> {
    let mut plan: Vec<(usize, usize)> = Vec::new();
    for &bytes in sizes.iter().filter(|&&b| b % elem == 0) {
        let count = coll.count_for(bytes / elem, elem, n_pes);
        if count == 0 || plan.last().is_some_and(|&(c, _)| c == count) {
            continue;
        }
        let (i, o) = (coll.input_len(count, n_pes), coll.output_len(count, n_pes));
        plan.push((count, message_bytes(i, o, elem)));
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_step_by_the_factor_up_to_max() {
        // Factor 2 from a power of two: the old doubling.
        assert_eq!(
            size_steps(4 << 10, 32 << 10, 2),
            vec![4 << 10, 8 << 10, 16 << 10, 32 << 10]
        );
        assert_eq!(size_steps(4 << 10, 256 << 20, 2).len(), 17);
        // Factor 4: 4K, 16K, 64K, ...; max reached exactly is the last size.
        assert_eq!(
            size_steps(4 << 10, 1 << 20, 4),
            vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
        );
        // A max between steps is never exceeded.
        assert_eq!(
            size_steps(4 << 10, 100 << 10, 4),
            vec![4 << 10, 16 << 10, 64 << 10]
        );
        assert_eq!(size_steps(1000, 9000, 3), vec![1000, 3000, 9000]);
        // One size when min is max; none when min is above max.
        assert_eq!(size_steps(1 << 20, 1 << 20, 8), vec![1 << 20]);
        assert!(size_steps(2 << 20, 1 << 20, 2).is_empty());
        // Steps near the top of usize end instead of wrapping.
        let top = size_steps(1 << 62, usize::MAX, 2);
        assert_eq!(top, vec![1 << 62, 1 << 63]);
        // A factor below 2 cannot loop forever.
        assert_eq!(size_steps(1, 4, 1), vec![1, 2, 4]);
        assert_eq!(size_steps(1, 4, 0), vec![1, 2, 4]);
    }
}
