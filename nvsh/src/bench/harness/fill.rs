//! A message size's inputs and expected outputs, computed on host threads from the collective's
//! value functions ([`SlotValues`]); bit for bit what a serial loop gives.

use super::dtype::{BenchDtype, BenchElement};
use super::pattern::salt;

/// A collective's input and expected-output functions, apart from the collective: a few Copy
/// parameters (the reduction, the collective's kind, the root), so that host threads can
/// compute the slots' values while the collective, which holds communicators and workspaces
/// and is not Sync, stays on its thread. Every function must give the same answer on every PE
/// and thread.
pub trait SlotValues: Send + Sync + Copy {
    /// Element `i` of PE `pe`'s input with salt `salt`, for element type `dtype`.
    fn input_value(&self, dtype: BenchDtype, pe: i32, i: usize, salt: u64, n_pes: i32) -> f64;

    /// The exact value of element `i` of PE `pe`'s output for count argument `count`, when
    /// every PE's input used `salt`. Only asked where [`Collective::checks_output`] holds.
    ///
    /// [`Collective::checks_output`]: super::Collective::checks_output
    fn expected_value(
        &self,
        dtype: BenchDtype,
        pe: i32,
        i: usize,
        count: usize,
        salt: u64,
        n_pes: i32,
    ) -> f64;
}

/// Most host threads one PE computes its slots' values on.
pub const MAX_FILL_THREADS: usize = 16;

/// Fewest elements worth a thread of their own: starting one costs tens of microseconds, an
/// element tens of nanoseconds.
pub const MIN_FILL_CHUNK: usize = 1 << 16;

/// Host threads per PE for the slots' values: the host's `cores` shared by the job's `n_pes`
/// (an upper bound of the PEs on this node), at least 1, at most [`MAX_FILL_THREADS`].
pub fn fill_threads(cores: usize, n_pes: i32) -> usize {
    (cores / n_pes.max(1) as usize).clamp(1, MAX_FILL_THREADS)
}

/// The threads worth starting for `len` elements: at most `threads`, one per
/// [`MIN_FILL_CHUNK`] elements, at least 1.
pub fn threads_for(len: usize, threads: usize) -> usize {
    len.div_ceil(MIN_FILL_CHUNK).clamp(1, threads.max(1))
}

/// Fills `out` on `threads` scoped threads (at most one per element), each calling
/// `fill(at, part)` on its own chunk `part`, which is `out[at..at + part.len()]`. Where each
/// element depends on its index only, the result is the serial loop's, bit for bit.
pub fn fill_parallel<T: Send>(
    out: &mut [T],
    threads: usize,
    fill: impl Fn(usize, &mut [T]) + Sync,
) {
    let threads = threads.clamp(1, out.len().max(1));
    if threads == 1 {
        return fill(0, out);
    }
    let chunk = out.len().div_ceil(threads);
    let fill = &fill;
    std::thread::scope(|s| {
        let mut parts = out.chunks_mut(chunk).enumerate();
        // The first chunk on this thread, which would otherwise only wait.
        let first = parts.next();
        for (c, part) in parts {
            s.spawn(move || fill(c * chunk, part));
        }
        if let Some((_, part)) = first {
            fill(0, part);
        }
    });
}

/// [`fill_parallel`] of slots of `len` elements from slot `first` on: element `i` of slot `k`
/// is `f(k, i)`. Counts slots and elements along each chunk rather than dividing every index,
/// which would cost a good part of an element's hashing.
pub fn fill_slots<T: Send>(
    out: &mut [T],
    threads: usize,
    first: usize,
    len: usize,
    f: impl Fn(usize, usize) -> T + Sync,
) {
    if len == 0 {
        return;
    }
    fill_parallel(out, threads, |at, part| {
        let (mut k, mut i) = (first + at / len, at % len);
        for x in part {
            *x = f(k, i);
            i += 1;
            if i == len {
                (k, i) = (k + 1, 0);
            }
        }
    });
}

/// One message size as its values see it: this PE, the job's PEs, the count argument, the
/// message size (which the salts derive from) and a PE's buffer lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotShape {
    pub me: i32,
    pub n_pes: i32,
    pub count: usize,
    pub bytes: usize,
    pub in_len: usize,
    pub out_len: usize,
}

impl SlotShape {
    /// Writes this PE's inputs of the slots from `first` on into `out` (whole slots, one after
    /// the other), on `threads` threads.
    pub fn fill_inputs<T: BenchElement, V: SlotValues>(
        &self,
        v: V,
        first: usize,
        out: &mut [T],
        threads: usize,
    ) {
        let dtype = T::BENCH_DTYPE;
        fill_slots(out, threads, first, self.in_len, |k, i| {
            let s = salt(self.bytes, k);
            T::from_value(v.input_value(dtype, self.me, i, s, self.n_pes))
        });
    }

    /// Writes this PE's expected outputs of the slots from `first` on into `out` (whole slots,
    /// one after the other), on `threads` threads.
    pub fn fill_expected<T: BenchElement, V: SlotValues>(
        &self,
        v: V,
        first: usize,
        out: &mut [T],
        threads: usize,
    ) {
        let dtype = T::BENCH_DTYPE;
        fill_slots(out, threads, first, self.out_len, |k, i| {
            let s = salt(self.bytes, k);
            T::from_value(v.expected_value(dtype, self.me, i, self.count, s, self.n_pes))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::pattern_hash;

    /// Every element gets its own index's value, whatever the threads (more than the elements
    /// included) and whether the length divides among them; by slots, each element its slot's
    /// and index's, with chunks that start and end inside slots.
    #[test]
    fn parallel_fill_sets_every_element_from_its_index() {
        let f = |j: usize| pattern_hash(3, j, 11);
        for len in [0, 1, 2, 5, 17, 1000, 4099] {
            for threads in [0, 1, 2, 3, 4, 7, 16, 5000] {
                let mut out = vec![0u64; len];
                fill_parallel(&mut out, threads, |at, part| {
                    for (j, x) in part.iter_mut().enumerate() {
                        *x = f(at + j);
                    }
                });
                let want: Vec<u64> = (0..len).map(f).collect();
                assert_eq!(out, want, "len {len}, {threads} threads");
                for (first, slot) in [(0, 1), (2, 3), (1, 7), (5, 1000)] {
                    let mut out = vec![(0, 0); len];
                    fill_slots(&mut out, threads, first, slot, |k, i| (k, i));
                    let want: Vec<(usize, usize)> =
                        (0..len).map(|j| (first + j / slot, j % slot)).collect();
                    assert_eq!(
                        out, want,
                        "len {len}, {threads} threads, {slot}-element slots"
                    );
                }
            }
        }
    }

    #[test]
    fn fill_threads_share_the_cores_among_the_pes() {
        assert_eq!(fill_threads(64, 8), 8);
        assert_eq!(fill_threads(64, 4), 16);
        assert_eq!(fill_threads(64, 1), MAX_FILL_THREADS);
        assert_eq!(fill_threads(16, 3), 5);
        assert_eq!(fill_threads(2, 4), 1);
        assert_eq!(fill_threads(0, 0), 1);
        assert_eq!(threads_for(0, 8), 1);
        assert_eq!(threads_for(MIN_FILL_CHUNK, 8), 1);
        assert_eq!(threads_for(MIN_FILL_CHUNK + 1, 8), 2);
        assert_eq!(threads_for(100 * MIN_FILL_CHUNK, 8), 8);
        assert_eq!(threads_for(100 * MIN_FILL_CHUNK, 0), 1);
    }
}
