//! Selection tables: which algorithm a collective's `Auto` takes, by PE count, message size and
//! element size. Each collective keeps its own table of rows measured by its bench.

use crate::core::element::Dtype;

/// One row of a selection table: used when the team has at most `max_pes` PEs, the message at
/// most `max_bytes` bytes and (if set) the element size is `elem_bytes`. First match wins.
#[derive(Debug, Clone, Copy)]
pub struct SelectionRule<A> {
    /// Largest team the row covers, in PEs.
    pub max_pes: i32,
    /// The element size, in bytes, the row is for (None: any).
    pub elem_bytes: Option<usize>,
    /// Largest message the row covers, in bytes.
    pub max_bytes: usize,
    /// The algorithm taken.
    pub algo: A,
}

/// A row for any element size.
pub const fn rule<A>(max_pes: i32, max_bytes: usize, algo: A) -> SelectionRule<A> {
    SelectionRule {
        max_pes,
        elem_bytes: None,
        max_bytes,
        algo,
    }
}

/// The table lookup behind `Auto` (pure, for tests and tools): the first matching row's
/// algorithm, None when no row matches.
pub fn select<A: Copy>(
    table: &[SelectionRule<A>],
    n_pes: i32,
    bytes: usize,
    dtype: Dtype,
) -> Option<A> {
    table
        .iter()
        .find(|r| {
            n_pes <= r.max_pes
                && bytes <= r.max_bytes
                && r.elem_bytes.is_none_or(|e| e == dtype.size())
        })
        .map(|r| r.algo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_rows_apply_only_to_their_element_size() {
        let table = [
            SelectionRule {
                max_pes: 2,
                elem_bytes: Some(2),
                max_bytes: 1 << 20,
                algo: 'a',
            },
            rule(i32::MAX, usize::MAX, 'b'),
        ];
        assert_eq!(select(&table, 2, 4096, Dtype::Bf16), Some('a'));
        assert_eq!(select(&table, 2, 4096, Dtype::F32), Some('b'));
        assert_eq!(select(&table[..1], 3, 4096, Dtype::Bf16), None);
    }
}
