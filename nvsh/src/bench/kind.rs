//! The collectives the family benches time (every collective but allreduce, whose bench has
//! its own algorithms, and the team barrier), with nccl-tests' sizes, counts and bus factors
//! from the library's table of collectives ([`nvshmem::COLLECTIVES`]).

use nvshmem::{BusFactor, Collective, CollectiveRow, Shape};

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Broadcast,
    Allgather,
    Alltoall,
    Allgatherv,
    Alltoallv,
    ReduceScatter,
    Reduce,
    /// Grouped send/recv, each PE to the next (one send, one receive).
    SendrecvRing,
    /// Grouped send/recv, every PE to every PE itself included (n sends, n receives).
    SendrecvAll,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Broadcast,
        Kind::Allgather,
        Kind::Alltoall,
        Kind::Allgatherv,
        Kind::Alltoallv,
        Kind::ReduceScatter,
        Kind::Reduce,
        Kind::SendrecvRing,
        Kind::SendrecvAll,
    ];

    /// The library's collective it times.
    pub fn collective(self) -> Collective {
        match self {
            Kind::Broadcast => Collective::Broadcast,
            Kind::Allgather => Collective::Allgather,
            Kind::Alltoall => Collective::Alltoall,
            Kind::Allgatherv => Collective::Allgatherv,
            Kind::Alltoallv => Collective::Alltoallv,
            Kind::ReduceScatter => Collective::ReduceScatter,
            Kind::Reduce => Collective::Reduce,
            Kind::SendrecvRing | Kind::SendrecvAll => Collective::Group,
        }
    }

    /// Its collective's row ([`nvshmem::COLLECTIVES`]), which says everything below but for
    /// the ring of sends (one send per PE: the whole buffer, bus factor 1).
    fn row(self) -> &'static CollectiveRow {
        self.collective().row()
    }

    /// The name on the command line and in the report: the collective's, or the pattern's for
    /// grouped send/recv.
    pub fn name(self) -> &'static str {
        match self {
            Kind::SendrecvRing => "sendrecv-ring",
            Kind::SendrecvAll => "sendrecv-all",
            _ => self.row().name,
        }
    }

    /// Whether it takes a reduction.
    pub fn reduces(self) -> bool {
        self.row().reduces
    }

    /// Whether it takes a root.
    pub fn rooted(self) -> bool {
        self.row().rooted
    }

    /// Whether a message is one block per PE (nccl-tests divides the size by the PE count).
    fn blocked(self) -> bool {
        self != Kind::SendrecvRing && self.row().shape != Shape::Whole
    }

    /// busbw / algbw as nccl-tests defines it: 1 for broadcast and reduce (and nccl-tests'
    /// sendrecv, the ring), (n-1)/n for allgather, reduce-scatter and alltoall (and all pairs).
    pub fn busbw_factor(self, n_pes: i32) -> f64 {
        self.bus().at(n_pes)
    }

    /// The bus factor in the report's words.
    pub fn busbw_text(self) -> &'static str {
        self.bus().text()
    }

    fn bus(self) -> BusFactor {
        if self == Kind::SendrecvRing {
            BusFactor::One
        } else {
            self.row().bus
        }
    }

    /// The count argument for a requested size of `elems` elements, as nccl-tests derives it:
    /// the whole size for broadcast and reduce; for the others a block per PE, rounded down to
    /// a multiple of 16 bytes (so every block, and every slot of the harness, stays aligned).
    pub fn count_for(self, elems: usize, elem_bytes: usize, n_pes: i32) -> usize {
        if !self.blocked() {
            return elems;
        }
        let per16 = (16 / elem_bytes.max(1)).max(1);
        elems / n_pes.max(1) as usize / per16 * per16
    }

    /// Input elements per PE for count argument `count`.
    pub fn input_len(self, count: usize, n_pes: i32) -> usize {
        if self == Kind::SendrecvRing {
            count
        } else {
            self.row().input_len(count, n_pes)
        }
    }

    /// Output elements per PE for count argument `count`.
    pub fn output_len(self, count: usize, n_pes: i32) -> usize {
        if self == Kind::SendrecvRing {
            count
        } else {
            self.row().output_len(count, n_pes)
        }
    }

    /// What the size and count columns mean, for the report.
    pub(crate) fn size_text(self) -> &'static str {
        match self {
            Kind::Broadcast | Kind::Reduce => "size = count elements, each PE's buffer",
            Kind::Allgather | Kind::Allgatherv => {
                "count = elements of each PE's input; size = the output, n x count"
            }
            Kind::Alltoall | Kind::Alltoallv => {
                "count = elements per block; size = the input (and output), n x count"
            }
            Kind::ReduceScatter => {
                "count = elements of each PE's output; size = the input, n x count"
            }
            Kind::SendrecvRing => {
                "size = count elements, what each PE sends to the next PE (and receives from \
                 the previous)"
            }
            Kind::SendrecvAll => {
                "count = elements per send (one to every PE, itself included); size = the input \
                 (and output), n x count"
            }
        }
    }

    /// What every output is compared with, for the report.
    pub(crate) fn expected_text(self) -> &'static str {
        match self {
            Kind::Broadcast => "expected: every PE's output = the root's input, bit for bit",
            Kind::Allgather | Kind::Allgatherv => {
                "expected: block r of every output = PE r's input, bit for bit"
            }
            Kind::Alltoall | Kind::Alltoallv | Kind::SendrecvAll => {
                "expected: block s of PE r's output = block r of PE s's input, bit for bit"
            }
            Kind::SendrecvRing => "expected: PE r's output = PE r-1's input (mod n), bit for bit",
            Kind::ReduceScatter => {
                "expected: PE r's output = op over PEs of block r of their inputs, exact as \
                 allreduce's (float avg, and float sums past the dtype's exact range, within \
                 rounding; integers exactly)"
            }
            Kind::Reduce => {
                "expected: the root's output = op over PEs of their inputs, exact as \
                 allreduce's (float avg, and float sums past the dtype's exact range, within \
                 rounding; integers exactly); the other PEs' outputs are not defined and not \
                 compared"
            }
        }
    }
}
