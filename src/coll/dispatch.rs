//! Any collective of the table ([`crate::coll::table::COLLECTIVES`]) created and called
//! through one signature, so that the tools and tests loop over the rows instead of naming each
//! collective. Each collective's own file implements [`TableCollective`] with
//! [`table_collective!`]; its row holds the constructor ([`Collective::create`]).

use crate::coll::op::ReduceOp;
use crate::coll::table::Collective;
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
                self.fam.ws().check()
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
}
