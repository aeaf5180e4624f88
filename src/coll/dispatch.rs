//! Any collective of the table ([`crate::coll::table::COLLECTIVES`]) created and called
//! through one signature, so that the tools and tests loop over the rows instead of naming each
//! collective. Each collective's own file implements [`TableCollective`] with
//! [`table_collective!`]; its row holds the constructor ([`Collective::create`]).

use crate::coll::op::ReduceOp;
use crate::coll::table::{Collective, CollectiveRow, Placement, Shape};
use crate::core::element::{Dtype, Element};
use crate::core::error::Result;
use crate::core::outside::{InBuf, OutBuf};
use crate::proto::family::FamilyProtocol;
use cudarc::driver::CudaStream;

/// Which members exchange, for a collective whose pairs are the caller's choice (grouped
/// send/recv); the others ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Peers {
    /// Block r of the input to member r, block s of the output from member s (itself
    /// included), as an alltoall.
    #[default]
    All,
    /// The whole input to the next member, the whole output from the previous one (mod n).
    Ring,
}

/// An input and output of one element type, whichever it is: one variant per [`Dtype`], so
/// that a call can take any type through one signature.
#[allow(missing_docs)]
pub enum AnyBufs<'a, 'b> {
    F32(InBuf<'a, f32>, OutBuf<'b, f32>),
    F64(InBuf<'a, f64>, OutBuf<'b, f64>),
    F16(InBuf<'a, half::f16>, OutBuf<'b, half::f16>),
    Bf16(InBuf<'a, half::bf16>, OutBuf<'b, half::bf16>),
    I32(InBuf<'a, i32>, OutBuf<'b, i32>),
    I64(InBuf<'a, i64>, OutBuf<'b, i64>),
    U32(InBuf<'a, u32>, OutBuf<'b, u32>),
    U64(InBuf<'a, u64>, OutBuf<'b, u64>),
    U8(InBuf<'a, u8>, OutBuf<'b, u8>),
}

/// `x` as the same value of type `B`, where `A` and `B` are the same buffer type over element
/// types `T` and `U`, checked to be the same type.
fn same<T: Element, U: Element, A, B>(x: A) -> B {
    assert!(
        std::any::TypeId::of::<T>() == std::any::TypeId::of::<U>()
            && std::mem::size_of::<A>() == std::mem::size_of::<B>(),
        "one element type"
    );
    // SAFETY: T and U are one type, so A and B are one type too (the caller passes the same
    // buffer type over each); the value moves, it is not copied.
    unsafe {
        let y = std::mem::transmute_copy::<A, B>(&x);
        std::mem::forget(x);
        y
    }
}

impl<'a, 'b> AnyBufs<'a, 'b> {
    /// `input` and `output` of element type `T`.
    pub fn new<T: Element>(input: InBuf<'a, T>, output: OutBuf<'b, T>) -> AnyBufs<'a, 'b> {
        macro_rules! variant {
            ($v:ident, $t:ty) => {
                AnyBufs::$v(
                    same::<T, $t, InBuf<'a, T>, InBuf<'a, $t>>(input),
                    same::<T, $t, OutBuf<'b, T>, OutBuf<'b, $t>>(output),
                )
            };
        }
        match T::DTYPE {
            Dtype::F32 => variant!(F32, f32),
            Dtype::F64 => variant!(F64, f64),
            Dtype::F16 => variant!(F16, half::f16),
            Dtype::Bf16 => variant!(Bf16, half::bf16),
            Dtype::I32 => variant!(I32, i32),
            Dtype::I64 => variant!(I64, i64),
            Dtype::U32 => variant!(U32, u32),
            Dtype::U64 => variant!(U64, u64),
            Dtype::U8 => variant!(U8, u8),
        }
    }

    /// The buffers' element type.
    pub fn dtype(&self) -> Dtype {
        match self {
            AnyBufs::F32(..) => Dtype::F32,
            AnyBufs::F64(..) => Dtype::F64,
            AnyBufs::F16(..) => Dtype::F16,
            AnyBufs::Bf16(..) => Dtype::Bf16,
            AnyBufs::I32(..) => Dtype::I32,
            AnyBufs::I64(..) => Dtype::I64,
            AnyBufs::U32(..) => Dtype::U32,
            AnyBufs::U64(..) => Dtype::U64,
            AnyBufs::U8(..) => Dtype::U8,
        }
    }
}

/// The v forms' parts where a call gives them: per member, in member order, counts and
/// displacements in elements.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AnyParts {
    /// The input's: what this member sends to each (alltoallv; allgatherv takes its input
    /// whole).
    pub send: (Vec<usize>, Vec<usize>),
    /// The output's: what it receives from each.
    pub recv: (Vec<usize>, Vec<usize>),
}

/// One call of any collective: its input and output, laid out as its row's
/// [`crate::Shape`] says (the v forms with equal parts, one per member, in member order, unless
/// the call gives its parts), and the op and root of those that take them (ignored by the
/// others). The team barrier moves no data and ignores the buffers.
pub struct AnyCall<'a, 'b> {
    /// The input and output, of one element type.
    pub bufs: AnyBufs<'a, 'b>,
    /// The reduction (sum unless set).
    pub op: ReduceOp,
    /// The root, a team rank (0 unless set).
    pub root: i32,
    /// Who exchanges with whom (grouped send/recv only).
    pub peers: Peers,
    /// The v forms' parts (None: equal ones); the others ignore them.
    pub parts: Option<AnyParts>,
}

impl<'a, 'b> AnyCall<'a, 'b> {
    /// A call on `input` and `output` (symmetric views or this PE's own memory, as the
    /// collectives' own `run` take them), sum, root 0, all pairs.
    pub fn new<T: Element>(
        input: impl Into<InBuf<'a, T>>,
        output: impl Into<OutBuf<'b, T>>,
    ) -> AnyCall<'a, 'b> {
        AnyCall {
            bufs: AnyBufs::new(input.into(), output.into()),
            op: ReduceOp::Sum,
            root: 0,
            peers: Peers::All,
            parts: None,
        }
    }

    /// With reduction `op`.
    pub fn op(self, op: ReduceOp) -> Self {
        AnyCall { op, ..self }
    }

    /// With root `root`.
    pub fn root(self, root: i32) -> Self {
        AnyCall { root, ..self }
    }

    /// With pairs `peers`.
    pub fn peers(self, peers: Peers) -> Self {
        AnyCall { peers, ..self }
    }

    /// With the v forms' parts `parts` (uneven counts, which equal parts would not exercise).
    pub fn parts(self, parts: AnyParts) -> Self {
        AnyCall {
            parts: Some(parts),
            ..self
        }
    }
}

/// Where one element of a member's output comes from in a call through the table
/// ([`Expected::source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Element `index` of member `pe`'s input.
    Input {
        /// The member.
        pe: usize,
        /// The element of its input.
        index: usize,
    },
    /// Element `index` of every member's input, reduced by the call's op in member order.
    Reduced {
        /// The element of each input.
        index: usize,
    },
    /// Nothing: the call leaves the element as it was.
    Kept,
}

/// A call through the table as its CPU reference reads it: the tests' expectations, from the
/// row's properties alone ([`crate::Shape`], rooted, reduces, [`crate::Placement`]).
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// Members.
    pub n: usize,
    /// The count argument: elements of a whole buffer, or of each block
    /// ([`crate::CollectiveRow::input_len`]).
    pub count: usize,
    /// The root (rows that take one).
    pub root: usize,
    /// Who exchanges with whom (rows that take pairs).
    pub peers: Peers,
    /// Every member's parts, in member order, where a v form is given parts (None: equal
    /// ones).
    pub parts: Option<&'a [AnyParts]>,
}

impl Expected<'_> {
    /// A call of `count` on `n` members: root 0, all pairs, equal parts.
    pub fn new(n: usize, count: usize) -> Expected<'static> {
        Expected {
            n,
            count,
            root: 0,
            peers: Peers::All,
            parts: None,
        }
    }

    /// Where element `i` of member `me`'s output comes from in a call of `row`. Rooted rows
    /// are those of whole buffers (broadcast, reduce: only the root's output is written);
    /// panics for a row whose properties this reference does not know.
    pub fn source(&self, row: &CollectiveRow, me: usize, i: usize) -> Source {
        let (n, count) = (self.n, self.count.max(1));
        let from = |pe: usize, index: usize| Source::Input { pe, index };
        // The member and offset of element `i` in parts `(counts, displs)`; None in a gap.
        let part_of = |(counts, displs): &(Vec<usize>, Vec<usize>)| {
            (0..counts.len()).find_map(|r| {
                let d = displs[r];
                (d <= i && i < d + counts[r]).then(|| (r, i - d))
            })
        };
        let parts = self.parts.filter(|_| row.placement == Placement::Parts);
        match (row.shape, row.rooted, row.reduces) {
            (Shape::Whole, true, true) if me != self.root => Source::Kept,
            (Shape::Whole, _, true) => Source::Reduced { index: i },
            (Shape::Whole, true, false) => from(self.root, i),
            (Shape::Gather, false, false) => match parts {
                Some(p) => part_of(&p[me].recv).map_or(Source::Kept, |(r, k)| from(r, k)),
                None => from(i / count, i % count),
            },
            (Shape::Scatter, false, true) => Source::Reduced {
                index: me * count + i,
            },
            (Shape::Exchange, false, false) => match parts {
                // Part s of my output came from sender s's part for me.
                Some(p) => {
                    part_of(&p[me].recv).map_or(Source::Kept, |(s, k)| from(s, p[s].send.1[me] + k))
                }
                None if row.placement == Placement::Peers && self.peers == Peers::Ring => {
                    from((me + n - 1) % n, i)
                }
                None => from(i / count, me * count + i % count),
            },
            (Shape::Empty, ..) => Source::Kept,
            _ => panic!("no reference for {} ({row:?})", row.name),
        }
    }
}

/// A collective's workspace as the table's users drive it, whichever collective it is.
pub trait TableCollective<'nv> {
    /// Which collective.
    fn collective(&self) -> Collective;
    /// One call, in stream order, as the collective's own `run` makes it. A reduction's call
    /// on u8 is refused ([`crate::Error::CollectiveShape`]).
    fn run_any(&mut self, call: AnyCall<'_, '_>, stream: &CudaStream) -> Result<()>;
    /// PEs taking part (the team size).
    fn n_pes(&self) -> i32;
    /// The error a kernel of the workspace recorded, without synchronising.
    fn check(&self) -> Result<()>;
    /// Makes the staging area hold at least `bytes` (collective over the world).
    fn reserve_staging(&mut self, bytes: usize) -> Result<()>;
    /// Bytes of the staging area (0 until a call or [`TableCollective::reserve_staging`] needs
    /// one).
    fn staging_bytes(&self) -> usize;
    /// The largest block (an exchange: pair) its calls may move as the family's low-latency
    /// lines; 0 where it has none (allreduce's one-shot says its limit in `settings`).
    fn lines_max(&self) -> usize;
    /// Bytes of one receive slot, for those with slots.
    fn slot_bytes(&self) -> Option<usize>;
    /// The protocols `Auto` chooses between, which tuning times; empty where it chooses none
    /// (allreduce chooses algorithms; the exchanges choose per pair).
    fn protocols(&self) -> Vec<FamilyProtocol>;
    /// How calls move data from now on (collectives without protocols ignore it).
    fn set_protocol(&mut self, protocol: FamilyProtocol);
    /// The protocol the last call took, where it chooses one.
    fn last_protocol(&self) -> Option<FamilyProtocol>;
    /// What `Auto` chooses from, in words (benchmark reports), where it chooses.
    fn settings(&self) -> Option<String>;
}

/// A row's constructor: the collective's workspace over `team` (None on PEs in no team of the
/// split), with receive slots of the given bytes where it has slots. Collective over the world.
pub type Create = for<'nv> fn(
    &'nv crate::Nvshmem,
    Option<&crate::Team<'_>>,
    usize,
) -> Result<Box<dyn TableCollective<'nv> + 'nv>>;

/// `$body` with `$i` and `$o` bound to the buffers of `$bufs` of each reducible type, `$u8`
/// with `$ui` and `$uo` bound to u8 buffers.
macro_rules! by_type {
    ($bufs:expr, |$i:ident, $o:ident| $body:expr, |$ui:pat_param, $uo:pat_param| $u8:expr) => {{
        use $crate::coll::dispatch::AnyBufs as B;
        match $bufs {
            B::F32($i, $o) => $body,
            B::F64($i, $o) => $body,
            B::F16($i, $o) => $body,
            B::Bf16($i, $o) => $body,
            B::I32($i, $o) => $body,
            B::I64($i, $o) => $body,
            B::U32($i, $o) => $body,
            B::U64($i, $o) => $body,
            B::U8($ui, $uo) => $u8,
        }
    }};
}
pub(crate) use by_type;

/// `$body` with `$i` and `$o` bound to the buffers of `$bufs`, whatever their element type.
macro_rules! each_element {
    ($bufs:expr, |$i:ident, $o:ident| $body:expr) => {
        $crate::coll::dispatch::by_type!($bufs, |$i, $o| $body, |$i, $o| $body)
    };
}
pub(crate) use each_element;

/// [`each_element!`] for a reduction (`$what`, its name): u8, which no reduction takes, is
/// refused.
macro_rules! each_reducible {
    ($what:expr, $bufs:expr, |$i:ident, $o:ident| $body:expr) => {
        $crate::coll::dispatch::by_type!($bufs, |$i, $o| $body, |_, _| Err(
            $crate::coll::dispatch::no_u8($what)
        ))
    };
}
pub(crate) use each_reducible;

/// The error of a reduction called on u8.
pub(crate) fn no_u8(what: &'static str) -> crate::Error {
    crate::Error::CollectiveShape {
        what,
        detail: "u8 is data movement only: no reduction takes it".into(),
    }
}

/// [`TableCollective`] for a collective of the family (`$ty`, the table's `$coll`): `$new`
/// creates it from `nv`, `team` and the slot bytes, `$run` makes a call `$call` on `$c`.
/// `choice`: `Auto` chooses between protocols (else the exchanges, which choose per pair, and
/// the barrier).
macro_rules! table_collective {
    (
        $ty:ident, $coll:ident, choice: $choice:literal,
        new: |$nv:ident, $team:ident, $slot:ident| $new:expr,
        run: |$c:ident, $call:ident, $stream:ident| $run:expr
    ) => {
        /// Its row's constructor ([`crate::Collective::create`]).
        pub(crate) fn create<'nv>(
            $nv: &'nv $crate::Nvshmem,
            $team: Option<&$crate::Team<'_>>,
            $slot: usize,
        ) -> $crate::Result<Box<dyn $crate::coll::dispatch::TableCollective<'nv> + 'nv>> {
            Ok(Box::new($new?))
        }

        impl<'nv> $crate::coll::dispatch::TableCollective<'nv> for $ty<'nv> {
            fn collective(&self) -> $crate::coll::table::Collective {
                $crate::coll::table::Collective::$coll
            }

            fn run_any(
                &mut self,
                $call: $crate::coll::dispatch::AnyCall<'_, '_>,
                $stream: &cudarc::driver::CudaStream,
            ) -> $crate::Result<()> {
                let $c = self;
                $run
            }

            fn n_pes(&self) -> i32 {
                self.fam.ws().n_pes()
            }

            fn check(&self) -> $crate::Result<()> {
                self.fam.check()
            }

            fn reserve_staging(&mut self, bytes: usize) -> $crate::Result<()> {
                self.fam.ws_mut().reserve_staging(bytes)
            }

            fn staging_bytes(&self) -> usize {
                self.fam.ws().staging_bytes()
            }

            fn lines_max(&self) -> usize {
                self.fam.lines_max()
            }

            fn slot_bytes(&self) -> Option<usize> {
                Some(self.fam.slot_bytes()).filter(|&b| b > 0)
            }

            fn protocols(&self) -> Vec<$crate::proto::family::FamilyProtocol> {
                if $choice {
                    self.fam.offered()
                } else {
                    Vec::new()
                }
            }

            fn set_protocol(&mut self, protocol: $crate::proto::family::FamilyProtocol) {
                self.fam.set_protocol(protocol);
            }

            fn last_protocol(&self) -> Option<$crate::proto::family::FamilyProtocol> {
                $choice.then(|| self.fam.last_protocol())
            }

            fn settings(&self) -> Option<String> {
                $choice.then(|| self.fam.settings())
            }
        }
    };
}
pub(crate) use table_collective;

/// `n` parts of `count` elements back to back: the v forms' equal counts in a table call.
pub(crate) fn equal_parts(count: usize, n: i32) -> (Vec<usize>, Vec<usize>) {
    let n = n.max(1) as usize;
    (vec![count; n], (0..n).map(|r| r * count).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_carries_its_type_and_arguments() {
        // SAFETY: never located or launched; only the variant and the arguments are read.
        let (i, o) = unsafe {
            (
                InBuf::<half::bf16>::from_raw(std::ptr::null(), 0),
                OutBuf::<half::bf16>::from_raw(std::ptr::null_mut(), 0),
            )
        };
        let parts = AnyParts {
            send: (vec![1, 2], vec![0, 1]),
            recv: (vec![2, 1], vec![0, 2]),
        };
        let call = AnyCall::new(i, o)
            .op(ReduceOp::Max)
            .root(2)
            .peers(Peers::Ring)
            .parts(parts.clone());
        assert_eq!(call.bufs.dtype(), crate::Dtype::Bf16);
        assert_eq!(call.parts, Some(parts));
        assert_eq!(
            (call.op, call.root, call.peers),
            (ReduceOp::Max, 2, Peers::Ring)
        );
        assert_eq!(equal_parts(3, 2), (vec![3, 3], vec![0, 3]));
        let err = no_u8("reduce").to_string();
        assert!(err.contains("u8"), "{err}");
    }

    /// Every output element of member `me` for `row`'s call `e`, in words: "p.i" for element i
    /// of member p's input, "+i" for element i reduced, "." for one kept.
    fn sources(e: &Expected<'_>, c: Collective, me: usize, len: usize) -> String {
        let row = c.row();
        (0..len)
            .map(|i| match e.source(row, me, i) {
                Source::Input { pe, index } => format!("{pe}.{index}"),
                Source::Reduced { index } => format!("+{index}"),
                Source::Kept => ".".into(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn the_reference_places_each_rows_blocks_as_the_collective_does() {
        use Collective as C;
        // 3 members, 2 elements per block, root 2, member 1's output.
        let e = Expected {
            root: 2,
            ..Expected::new(3, 2)
        };
        let at = |c: Collective| {
            let len = c.row().output_len(2, 3);
            sources(&e, c, 1, len)
        };
        assert_eq!(at(C::Allreduce), "+0 +1");
        assert_eq!(at(C::Broadcast), "2.0 2.1");
        assert_eq!(at(C::Reduce), ". .", "only the root's output is written");
        assert_eq!(sources(&e, C::Reduce, 2, 2), "+0 +1");
        assert_eq!(at(C::Allgather), "0.0 0.1 1.0 1.1 2.0 2.1");
        assert_eq!(at(C::ReduceScatter), "+2 +3");
        // Block s of the output is block [me] of member s's input.
        assert_eq!(at(C::Alltoall), "0.2 0.3 1.2 1.3 2.2 2.3");
        // Without parts, the v forms and all pairs are their equal-block forms.
        assert_eq!(at(C::Allgatherv), at(C::Allgather));
        assert_eq!(at(C::Alltoallv), at(C::Alltoall));
        assert_eq!(at(C::Group), at(C::Alltoall));
        assert_eq!(at(C::TeamBarrier), "");
        let ring = Expected {
            peers: Peers::Ring,
            ..e
        };
        assert_eq!(sources(&ring, C::Group, 1, 2), "0.0 0.1");
        assert_eq!(sources(&ring, C::Group, 0, 2), "2.0 2.1");
        assert_eq!(
            sources(&ring, C::Alltoall, 1, 2),
            "0.2 0.3",
            "pairs: the group's"
        );
    }

    #[test]
    fn the_reference_follows_given_parts_and_leaves_gaps() {
        use Collective as C;
        // Member s sends c(s, r) = s + r elements to r, back to back; receives land with one
        // element before each part.
        let n = 3;
        let c = |s: usize, r: usize| s + r;
        let at = |counts: Vec<usize>, gap: usize| {
            let displs = counts
                .iter()
                .scan(0, |end, &k| {
                    *end += gap + k;
                    Some(*end - k)
                })
                .collect();
            (counts, displs)
        };
        let parts: Vec<AnyParts> = (0..n)
            .map(|me| AnyParts {
                send: at((0..n).map(|r| c(me, r)).collect(), 0),
                recv: at((0..n).map(|s| c(s, me)).collect(), 1),
            })
            .collect();
        let e = Expected {
            parts: Some(&parts),
            ..Expected::new(n, 4)
        };
        // Member 1 receives 1 element from 0, 2 from itself, 3 from 2, each sender's part for
        // it after its part for 0 (0, 1 and 2 elements).
        assert_eq!(
            sources(&e, C::Alltoallv, 1, 9),
            ". 0.0 . 1.1 1.2 . 2.2 2.3 2.4"
        );
        // Member 0 receives nothing from itself (an empty part), then 1 from 1 and 2 from 2.
        assert_eq!(sources(&e, C::Alltoallv, 0, 6), ". . 1.0 . 2.0 2.1");
        // Allgatherv: the receive parts are each member's whole input.
        assert_eq!(
            sources(&e, C::Allgatherv, 1, 9),
            ". 0.0 . 1.0 1.1 . 2.0 2.1 2.2"
        );
        // Rows without parts ignore them.
        assert_eq!(sources(&e, C::Alltoall, 1, 2), "0.4 0.5");
    }
}
