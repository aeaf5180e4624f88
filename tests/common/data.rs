//! Buffers filled from the host, element-by-element checks and the layout of parts with gaps,
//! shared by the collective tests.

use super::reference::Tag;
use nvshmem::{Nvshmem, SymmetricBuffer};

/// A symmetric buffer of `len` elements holding `f(i)`.
pub fn filled<T: nvshmem::Element>(
    nv: &Nvshmem,
    len: usize,
    f: impl Fn(usize) -> T,
) -> SymmetricBuffer<'_, T> {
    let b = nv.alloc::<T>(len).unwrap();
    b.copy_from_host(&(0..len).map(f).collect::<Vec<_>>())
        .unwrap();
    b
}

/// This PE and the PE count.
pub fn me_n(nv: &Nvshmem) -> (usize, usize) {
    (nv.my_pe() as usize, nv.n_pes() as usize)
}

/// Asserts `got[i] == want(i)` for every element. A NaN matches a NaN: the float poison is a
/// NaN that must stay where nothing lands (tags are never NaN).
pub fn expect<T: Tag>(what: &str, got: &[T], want: impl Fn(usize) -> T) {
    #[allow(clippy::eq_op)] // x != x: NaN
    let nan = |x: &T| x != x;
    for (i, g) in got.iter().enumerate() {
        let w = want(i);
        assert!(
            *g == w || (nan(g) && nan(&w)),
            "{what}: element {i} is {g:?}, want {w:?}"
        );
    }
}

/// Parts of `counts` laid out in order with `gap` poisoned elements before each: the
/// displacements and the buffer length.
pub fn laid_out(counts: &[usize], gap: usize) -> (Vec<usize>, usize) {
    let mut displs = Vec::with_capacity(counts.len());
    let mut end = 0;
    for &c in counts {
        displs.push(end + gap);
        end += gap + c;
    }
    (displs, end + gap)
}

/// The owner part and offset of element `i` of a buffer laid out by `displs`/`counts`.
pub fn part_of(i: usize, counts: &[usize], displs: &[usize]) -> Option<(usize, usize)> {
    (0..counts.len())
        .find_map(|p| (displs[p] <= i && i < displs[p] + counts[p]).then(|| (p, i - displs[p])))
}
