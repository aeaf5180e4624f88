//! Every collective, one row each (as NCCL's `collectives.h`): its name, the ABI code its
//! kernels' status records and checked-mode headers carry, whether it takes a root and a
//! reduction, the scratch its workspace holds, how its buffers' lengths follow the count, and
//! nccl-tests' bus factor. Messages, the benches, the tuner, the soak and the tests read these
//! rows instead of spelling collectives out.

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Collective {
    /// [`crate::Allreduce`].
    Allreduce,
    /// [`crate::Broadcast`].
    Broadcast,
    /// [`crate::Reduce`].
    Reduce,
    /// [`crate::Allgather`].
    Allgather,
    /// [`crate::Allgatherv`].
    Allgatherv,
    /// [`crate::ReduceScatter`].
    ReduceScatter,
    /// [`crate::Alltoall`].
    Alltoall,
    /// [`crate::Alltoallv`].
    Alltoallv,
    /// Grouped send/recv ([`crate::P2pGroup`]).
    Group,
    /// [`crate::TeamBarrier`].
    TeamBarrier,
}

/// What a collective's workspace holds besides its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScratchKind {
    /// Allreduce's own workspace (receive slots and low-latency lines per algorithm).
    Allreduce,
    /// Receive slots the members reduce out of (reduce, reduce-scatter).
    Slots,
    /// Low-latency lines only; data lands in the output.
    Lines,
    /// The exchanges' mailboxes and lines.
    Exchange,
    /// Nothing but counters.
    None,
}

/// How a call's input and output lengths follow its count argument on `n` members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `count` in, `count` out.
    Whole,
    /// `count` in, `n x count` out (a block from every member).
    Gather,
    /// `n x count` in, `count` out (a block to every member, reduced).
    Scatter,
    /// `n x count` in and out (a block between every pair).
    Exchange,
    /// No data.
    Empty,
}

/// Where a call's blocks go beyond what its [`Shape`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// As the shape says: whole buffers, or equal blocks in member order.
    Blocks,
    /// Per-member counts and displacements the call may give (the v forms; equal blocks, as
    /// [`Placement::Blocks`], where it gives none).
    Parts,
    /// Pairs the call chooses (grouped send/recv; all pairs are as [`Placement::Blocks`]).
    Peers,
}

/// nccl-tests' bus bandwidth over algorithm bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusFactor {
    /// 1 (broadcast, reduce, one send per member).
    One,
    /// (n - 1) / n (allgather, reduce-scatter, alltoall).
    PerPeer,
    /// 2 (n - 1) / n (allreduce).
    TwicePerPeer,
    /// No bandwidth (the barrier).
    Zero,
}

impl BusFactor {
    /// The factor on `n` members (0 for n < 1).
    pub fn at(self, n: i32) -> f64 {
        if n < 1 {
            return 0.0;
        }
        let n = n as f64;
        match self {
            BusFactor::One => 1.0,
            BusFactor::PerPeer => (n - 1.0) / n,
            BusFactor::TwicePerPeer => 2.0 * (n - 1.0) / n,
            BusFactor::Zero => 0.0,
        }
    }

    /// The factor in a report's words.
    pub fn text(self) -> &'static str {
        match self {
            BusFactor::One => "1",
            BusFactor::PerPeer => "(n-1)/n",
            BusFactor::TwicePerPeer => "2(n-1)/n",
            BusFactor::Zero => "0",
        }
    }
}

/// One collective's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectiveRow {
    /// Which one.
    pub collective: Collective,
    /// Its name in messages, on the command line, in reports and tuning files.
    pub name: &'static str,
    /// Its type in the API.
    pub type_name: &'static str,
    /// Its code: what its kernels' failure records name (passed in each launch's arguments)
    /// and its checked-mode headers carry. Written here only: the device code never names
    /// one. From 16 up, one byte (below are allreduce's algorithms' codes, device/abi.h
    /// NVSHMEMRS_ALGO_*); None for allreduce, whose algorithms carry their own.
    pub code: Option<u32>,
    /// Takes a root.
    pub rooted: bool,
    /// Takes a reduction.
    pub reduces: bool,
    /// What its workspace holds.
    pub scratch: ScratchKind,
    /// Its buffers' lengths.
    pub shape: Shape,
    /// Where its blocks go beyond the shape.
    pub placement: Placement,
    /// nccl-tests' bus factor.
    pub bus: BusFactor,
}

impl CollectiveRow {
    /// Input elements per member for count argument `count` on `n` members.
    pub fn input_len(&self, count: usize, n: i32) -> usize {
        match self.shape {
            Shape::Whole | Shape::Gather => count,
            Shape::Scatter | Shape::Exchange => count * n.max(0) as usize,
            Shape::Empty => 0,
        }
    }

    /// Output elements per member for count argument `count` on `n` members.
    pub fn output_len(&self, count: usize, n: i32) -> usize {
        match self.shape {
            Shape::Whole | Shape::Scatter => count,
            Shape::Gather | Shape::Exchange => count * n.max(0) as usize,
            Shape::Empty => 0,
        }
    }
}

const fn row(
    collective: Collective,
    name: &'static str,
    type_name: &'static str,
    code: Option<u32>,
    (rooted, reduces): (bool, bool),
    (scratch, shape, placement, bus): (ScratchKind, Shape, Placement, BusFactor),
) -> CollectiveRow {
    CollectiveRow {
        collective,
        name,
        type_name,
        code,
        rooted,
        reduces,
        scratch,
        shape,
        placement,
        bus,
    }
}

use BusFactor as B;
use Collective as C;
use Placement as P;
use ScratchKind as K;

/// Every collective, in the order reports list them: collective, name, type, code, (rooted,
/// reduces), (scratch, shape, placement, bus factor).
#[rustfmt::skip]
pub const COLLECTIVES: [CollectiveRow; 10] = [
    row(C::Allreduce, "allreduce", "Allreduce", None, (false, true), (K::Allreduce, Shape::Whole, P::Blocks, B::TwicePerPeer)),
    row(C::Broadcast, "broadcast", "Broadcast", Some(16), (true, false), (K::Lines, Shape::Whole, P::Blocks, B::One)),
    row(C::Reduce, "reduce", "Reduce", Some(20), (true, true), (K::Slots, Shape::Whole, P::Blocks, B::One)),
    row(C::Allgather, "allgather", "Allgather", Some(17), (false, false), (K::Lines, Shape::Gather, P::Blocks, B::PerPeer)),
    row(C::Allgatherv, "allgatherv", "Allgatherv", Some(22), (false, false), (K::Exchange, Shape::Gather, P::Parts, B::PerPeer)),
    row(C::ReduceScatter, "reduce-scatter", "ReduceScatter", Some(19), (false, true), (K::Slots, Shape::Scatter, P::Blocks, B::PerPeer)),
    row(C::Alltoall, "alltoall", "Alltoall", Some(18), (false, false), (K::Lines, Shape::Exchange, P::Blocks, B::PerPeer)),
    row(C::Alltoallv, "alltoallv", "Alltoallv", Some(23), (false, false), (K::Exchange, Shape::Exchange, P::Parts, B::PerPeer)),
    row(C::Group, "grouped send/recv", "P2pGroup", Some(24), (false, false), (K::Exchange, Shape::Exchange, P::Peers, B::PerPeer)),
    row(C::TeamBarrier, "team barrier", "TeamBarrier", Some(21), (false, false), (K::None, Shape::Empty, P::Blocks, B::Zero)),
];

impl Collective {
    /// Its row of [`COLLECTIVES`].
    pub const fn row(self) -> &'static CollectiveRow {
        // A loop, not an iterator: const, so that [`Collective::code`] is a constant.
        let rows: &'static [CollectiveRow] = &COLLECTIVES;
        let mut i = 0;
        while i < rows.len() {
            if rows[i].collective as u8 == self as u8 {
                return &rows[i];
            }
            i += 1;
        }
        panic!("every collective has a row")
    }

    /// Its name ([`CollectiveRow::name`]).
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// Its code ([`CollectiveRow::code`]); 0 for allreduce, which has none and passes none.
    pub const fn code(self) -> u32 {
        match self.row().code {
            Some(code) => code,
            None => 0,
        }
    }

    /// The collective of a code ([`CollectiveRow::code`]).
    pub fn from_code(code: u64) -> Option<Collective> {
        COLLECTIVES
            .iter()
            .find(|r| r.code.map(u64::from) == Some(code))
            .map(|r| r.collective)
    }

    /// The collective named `name` ([`CollectiveRow::name`]), if any.
    pub fn from_name(name: &str) -> Option<Collective> {
        COLLECTIVES
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.collective)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_collective_has_one_row_with_its_own_name_and_code() {
        for (i, r) in COLLECTIVES.iter().enumerate() {
            assert_eq!(r.collective.row(), r, "{}", r.name);
            assert_eq!(Collective::from_name(r.name), Some(r.collective));
            if let Some(code) = r.code {
                assert_eq!(Collective::from_code(code as u64), Some(r.collective));
                // Above allreduce's algorithms' codes, within the meta's byte.
                assert!((16..256).contains(&code), "{}", r.name);
                assert_eq!(r.collective.code(), code);
            }
            for o in &COLLECTIVES[i + 1..] {
                assert!(o.name != r.name && (o.code.is_none() || o.code != r.code));
                assert_ne!(o.collective, r.collective);
            }
        }
        assert_eq!(
            Collective::from_code(0),
            None,
            "allreduce's codes are its algorithms'"
        );
    }

    #[test]
    fn only_the_v_forms_take_parts_and_only_grouped_send_recv_pairs() {
        for r in &COLLECTIVES {
            let want = match r.collective {
                C::Allgatherv | C::Alltoallv => P::Parts,
                C::Group => P::Peers,
                _ => P::Blocks,
            };
            assert_eq!(r.placement, want, "{}", r.name);
            // Parts and pairs place blocks: of the shapes that have them.
            if r.placement != P::Blocks {
                assert!(
                    matches!(r.shape, Shape::Gather | Shape::Exchange),
                    "{}",
                    r.name
                );
            }
        }
    }

    #[test]
    fn lengths_and_bus_factors_follow_nccl_tests() {
        let rs = Collective::ReduceScatter.row();
        assert_eq!((rs.input_len(8, 4), rs.output_len(8, 4)), (32, 8));
        let ag = Collective::Allgather.row();
        assert_eq!((ag.input_len(8, 4), ag.output_len(8, 4)), (8, 32));
        assert_eq!(Collective::Alltoall.row().output_len(8, 4), 32);
        assert_eq!(Collective::Broadcast.row().bus.at(4), 1.0);
        assert_eq!(Collective::Allgather.row().bus.at(4), 0.75);
        assert_eq!(Collective::Allreduce.row().bus.at(4), 1.5);
        assert_eq!(BusFactor::PerPeer.at(0), 0.0);
    }
}
