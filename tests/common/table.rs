//! The table of collectives as the GPU tests drive it: workspaces of its rows called through
//! one signature (`TableCollective::run_any`), a call's layout on this member (buffer lengths,
//! the v forms' parts, the in-place forms), the values it moves (reference.rs's tags where the
//! row moves data, its `gen` values and their reduction where it reduces) and the check of
//! every output element against the library's CPU reference of the row
//! (`nvshmem::tools::Expected`), so that the suites loop over the rows instead of naming them.

use super::data::{expect, laid_out};
use super::reference::{RefElem, Tag};
use cudarc::driver::CudaStream;
use nvshmem::tools::{AnyCall, AnyParts, Expected, Source, TableCollective};
use nvshmem::{CollectiveRow, Element, InBuf, Nvshmem, OutBuf, Placement, ReduceOp, Shape};
use nvshmem::{Dtype, COLLECTIVES};

/// A row's workspace, called through the table.
pub type Workspace<'nv> = Box<dyn TableCollective<'nv> + 'nv>;

/// The rows that move data: every row but the barrier's.
pub fn data_rows() -> impl Iterator<Item = &'static CollectiveRow> {
    COLLECTIVES.iter().filter(|r| r.shape != Shape::Empty)
}

/// A workspace of each of `rows` over the world, in their order, with receive slots of
/// `slot_bytes` where they have slots (collective over the world).
pub fn world<'nv>(
    nv: &'nv Nvshmem,
    rows: impl IntoIterator<Item = &'static CollectiveRow>,
    slot_bytes: usize,
) -> Vec<(&'static CollectiveRow, Workspace<'nv>)> {
    rows.into_iter()
        .map(|r| (r, r.collective.world(nv, slot_bytes).unwrap()))
        .collect()
}

/// The roots a row's calls take: every member where it has a root, else 0 alone.
pub fn roots(row: &CollectiveRow, n: usize) -> std::ops::Range<usize> {
    0..if row.rooted { n } else { 1 }
}

/// The ops a row's calls take: `ops` where it reduces, else one (ignored) call.
pub fn ops_of<'a>(row: &CollectiveRow, ops: &'a [ReduceOp]) -> &'a [ReduceOp] {
    if row.reduces {
        ops
    } else {
        &[ReduceOp::Sum]
    }
}

/// Whether a row takes element type `dtype` (the reductions take no u8).
pub fn takes(row: &CollectiveRow, dtype: Dtype) -> bool {
    !row.reduces || dtype != Dtype::U8
}

/// Runs `$body` with the type alias `$t` naming the element type of `$dtype` (a
/// [`nvshmem::Dtype`]).
#[allow(unused_macros)] // Some test crates include this module for other helpers.
macro_rules! with_type {
    ($dtype:expr, $t:ident => $body:expr) => {
        with_type!(@ $dtype, $t, $body; F32 f32, F64 f64, F16 half::f16, Bf16 half::bf16,
            I32 i32, I64 i64, U32 u32, U64 u64, U8 u8)
    };
    (@ $dtype:expr, $t:ident, $body:expr; $($v:ident $ty:ty),*) => {
        match $dtype {
            $(nvshmem::Dtype::$v => {
                type $t = $ty;
                $body
            })*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use with_type;

/// An element type of the tests: reference.rs's tags and, for the types the reductions take,
/// its `gen` values, their reduction and the results' poison (u8 moves data only: the table
/// refuses its reductions, so those are never asked of it).
pub trait Value: Tag + cudarc::driver::DeviceRepr {
    /// [`RefElem::gen`].
    fn gen_value(pe: usize, i: usize, salt: usize, op: ReduceOp) -> Self;
    /// [`RefElem::reduce`].
    fn reduce_values(values: &[Self], op: ReduceOp) -> Self;
    /// [`RefElem::poison`].
    fn result_poison() -> Self;
}

macro_rules! reducible_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn gen_value(pe: usize, i: usize, salt: usize, op: ReduceOp) -> Self {
                <$t as RefElem>::gen(pe, i, salt, op)
            }
            fn reduce_values(values: &[Self], op: ReduceOp) -> Self {
                let want = <$t as RefElem>::reduce(values, op);
                assert!(!<$t as RefElem>::is_poison(want), "the poison is a result here");
                want
            }
            fn result_poison() -> Self {
                <$t as RefElem>::poison()
            }
        }
    )*};
}
reducible_value!(f32, f64, half::f16, half::bf16, i32, i64, u32, u64);

impl Value for u8 {
    fn gen_value(_: usize, _: usize, _: usize, _: ReduceOp) -> Self {
        unreachable!("no reduction takes u8")
    }
    fn reduce_values(_: &[Self], _: ReduceOp) -> Self {
        unreachable!("no reduction takes u8")
    }
    fn result_poison() -> Self {
        unreachable!("no reduction takes u8")
    }
}

/// The values of one call on `n` members: each member's input, what lands where, and the
/// output poison no correct call writes.
#[derive(Clone, Copy, Debug)]
pub struct Values {
    /// Members.
    pub n: usize,
    /// Tells one call's values from another's.
    pub salt: usize,
    /// `gen` values under this op (None: tags).
    pub op: Option<ReduceOp>,
}

impl Values {
    /// A call of `row`: tags where it moves data, `gen` values under `op` where it reduces.
    pub fn of(row: &CollectiveRow, n: usize, salt: usize, op: ReduceOp) -> Values {
        Values {
            n,
            salt,
            op: row.reduces.then_some(op),
        }
    }

    /// `gen` values under `op` whatever the row (one input for several rows).
    pub fn gen(n: usize, salt: usize, op: ReduceOp) -> Values {
        Values {
            n,
            salt,
            op: Some(op),
        }
    }

    /// The same call with other values (an in-place call after an out-of-place one).
    pub fn salted(self, by: usize) -> Values {
        Values {
            salt: self.salt + by,
            ..self
        }
    }

    /// The op a call takes (sum where it takes none).
    pub fn op(&self) -> ReduceOp {
        self.op.unwrap_or(ReduceOp::Sum)
    }

    /// Element `i` of member `pe`'s input.
    pub fn input<T: Value>(&self, pe: usize, i: usize) -> T {
        match self.op {
            Some(op) => T::gen_value(pe, i, self.salt, op),
            None => T::tag(pe, i, self.salt),
        }
    }

    /// What an output holds before a call: a value no call of these inputs writes.
    pub fn poison<T: Value>(&self) -> T {
        match self.op {
            Some(_) => T::result_poison(),
            None => <T as Tag>::poison(),
        }
    }

    /// What an output element from `src` holds after the call (None: what it held before).
    pub fn at<T: Value>(&self, src: Source) -> Option<T> {
        match src {
            Source::Input { pe, index } => Some(self.input(pe, index)),
            Source::Reduced { index } => {
                let op = self.op.expect("reduced values are gen values under an op");
                let vals: Vec<T> = (0..self.n).map(|p| self.input(p, index)).collect();
                Some(T::reduce_values(&vals, op))
            }
            Source::Kept => None,
        }
    }
}

/// One call of a row on this member: the call's arguments, every member's parts where a v form
/// is given them, and this member's buffer lengths.
#[derive(Clone, Debug)]
pub struct Call {
    pub row: &'static CollectiveRow,
    pub me: usize,
    pub n: usize,
    /// The count argument ([`CollectiveRow::input_len`]).
    pub count: usize,
    pub root: usize,
    /// Every member's parts, in member order (None: equal blocks).
    pub parts: Option<Vec<AnyParts>>,
    pub in_len: usize,
    pub out_len: usize,
}

impl Call {
    /// `count` elements per block (or whole buffer), from or to `root`, in equal blocks.
    pub fn blocks(
        row: &'static CollectiveRow,
        me: usize,
        n: usize,
        count: usize,
        root: usize,
    ) -> Call {
        Call {
            row,
            me,
            n,
            count,
            root,
            parts: None,
            in_len: row.input_len(count, n as i32),
            out_len: row.output_len(count, n as i32),
        }
    }

    /// Parts of about `m` elements that differ between members, with gaps, where the row takes
    /// parts (else [`Call::blocks`] of `m`): a gather's member r holds m + r % 3 elements, its
    /// part laid out in the output after one element of gap; in an exchange s sends r
    /// m + (3s + r) % 4 elements, back to back, into receive parts after two elements of gap
    /// each.
    pub fn uneven(row: &'static CollectiveRow, me: usize, n: usize, m: usize) -> Call {
        let whole = Call::blocks(row, me, n, m, 0);
        if row.placement != Placement::Parts {
            return whole;
        }
        let none = (Vec::new(), Vec::new());
        let at = |counts: Vec<usize>, gap: usize| {
            let (displs, len) = laid_out(&counts, gap);
            ((counts, displs), len)
        };
        let (parts, in_len, out_len) = match row.shape {
            Shape::Gather => {
                let (recv, out_len) = at((0..n).map(|r| m + r % 3).collect(), 1);
                let parts = vec![
                    AnyParts {
                        send: none,
                        recv: recv.clone()
                    };
                    n
                ];
                (parts, recv.0[me], out_len)
            }
            Shape::Exchange => {
                let pair = |s: usize, r: usize| m + (3 * s + r) % 4;
                let of = |p: usize| {
                    let (send, in_len) = at((0..n).map(|r| pair(p, r)).collect(), 0);
                    let (recv, out_len) = at((0..n).map(|s| pair(s, p)).collect(), 2);
                    (AnyParts { send, recv }, in_len, out_len)
                };
                let (_, in_len, out_len) = of(me);
                ((0..n).map(|p| of(p).0).collect(), in_len, out_len)
            }
            _ => panic!("{}: parts of a {:?} shape", row.name, row.shape),
        };
        Call {
            parts: Some(parts),
            in_len,
            out_len,
            ..whole
        }
    }

    /// The call as the library's CPU reference reads it.
    pub fn expected(&self) -> Expected<'_> {
        Expected {
            root: self.root,
            parts: self.parts.as_deref(),
            ..Expected::new(self.n, self.count)
        }
    }

    /// Where input and output lie in one buffer of this member when the call runs in place (the
    /// collectives' in-place forms: one span for whole buffers, the own block of the output
    /// (gather) or of the input (scatter)), as (input offset, output offset, buffer length);
    /// None where there is none (the exchanges, uneven parts).
    pub fn in_place(&self) -> Option<(usize, usize, usize)> {
        let (me, count, blocks) = (self.me, self.count, self.n * self.count);
        match (self.row.shape, &self.parts) {
            (_, Some(_)) => None,
            (Shape::Whole, _) => Some((0, 0, count)),
            (Shape::Gather, _) => Some((me * count, 0, blocks)),
            (Shape::Scatter, _) => Some((0, me * count, blocks)),
            (Shape::Exchange | Shape::Empty, _) => None,
        }
    }

    /// The call on `input` and `output` with `v`'s op, this call's root and this member's
    /// parts.
    pub fn any<'a, 'b, T: Element>(
        &self,
        v: &Values,
        input: impl Into<InBuf<'a, T>>,
        output: impl Into<OutBuf<'b, T>>,
    ) -> AnyCall<'a, 'b> {
        let call = AnyCall::new(input, output)
            .op(v.op())
            .root(self.root as i32);
        match &self.parts {
            Some(p) => call.parts(p[self.me].clone()),
            None => call,
        }
    }

    /// This member's input of `v`.
    pub fn input<T: Value>(&self, v: &Values) -> Vec<T> {
        (0..self.in_len).map(|i| v.input(self.me, i)).collect()
    }

    /// Output element `i` after the call, `before` where the call leaves it.
    pub fn want<T: Value>(&self, v: &Values, i: usize, before: T) -> T {
        let src = self.expected().source(self.row, self.me, i);
        v.at(src).unwrap_or(before)
    }

    /// Checks every element of this member's output `got` against the reference: exact, a NaN
    /// poison matching a NaN, `before(i)` where the call leaves element i.
    pub fn check<T: Value>(&self, what: &str, v: &Values, got: &[T], before: impl Fn(usize) -> T) {
        assert_eq!(got.len(), self.out_len, "{what}: output length");
        expect(what, got, |i| self.want(v, i, before(i)));
    }

    /// The call in words for messages: "reduce f32 Max x 7 to 1".
    pub fn describe<T: Element>(&self, v: &Values) -> String {
        let mut s = format!("{} {}", self.row.name, T::NAME);
        if let Some(op) = v.op.filter(|_| self.row.reduces) {
            s = format!("{s} {op:?}");
        }
        s = format!("{s} x {}", self.count);
        if self.parts.is_some() {
            s = format!("{s} in uneven parts");
        }
        if self.row.rooted {
            s = format!("{s}, root {}", self.root);
        }
        s
    }
}

/// Runs `call` on `w` and waits for it: the stream synchronised, the workspace's recorded
/// errors checked.
pub fn run_sync(w: &mut Workspace<'_>, call: AnyCall<'_, '_>, stream: &CudaStream) {
    let what = w.collective().name();
    w.run_any(call, stream)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    stream.synchronize().unwrap();
    w.check().unwrap_or_else(|e| panic!("{what}: {e}"));
}
