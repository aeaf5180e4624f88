//! The collectives the family benches time: every row of the library's table of collectives
//! ([`nvshmem::COLLECTIVES`]) but allreduce, whose bench has its own algorithms, and the team
//! barrier, which moves no data; grouped send/recv twice, as a ring and as all pairs. Sizes,
//! counts and bus factors are nccl-tests', from the rows.

use nvshmem::tools::Peers;
use nvshmem::{BusFactor, Collective, CollectiveRow, ScratchKind, Shape, COLLECTIVES};

/// Whether the row is one of the family's: every row of the table that moves data but
/// allreduce (the family benches time these, the soak's family round calls them).
pub fn in_family(row: &CollectiveRow) -> bool {
    row.scratch != ScratchKind::Allreduce && row.shape != Shape::Empty
}

/// What a family bench times: a collective of the table, and for grouped send/recv (whose pairs
/// are the caller's) which pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kind {
    /// The library's collective it times.
    pub collective: Collective,
    /// Who sends to whom: a ring or all pairs (grouped send/recv); all pairs for the others.
    pub peers: Peers,
}

impl Kind {
    /// `collective` (all pairs, for grouped send/recv).
    pub const fn of(collective: Collective) -> Kind {
        Kind {
            collective,
            peers: Peers::All,
        }
    }

    /// The same collective with pairs `peers`.
    pub const fn with(self, peers: Peers) -> Kind {
        Kind { peers, ..self }
    }

    /// Every kind, in the table's order: the rows that move data, but allreduce; grouped
    /// send/recv as a ring, then as all pairs.
    pub fn all() -> Vec<Kind> {
        COLLECTIVES
            .iter()
            .filter(|r| in_family(r))
            .flat_map(|r| {
                let k = Kind::of(r.collective);
                let ring = takes_pairs(r.collective).then_some(k.with(Peers::Ring));
                ring.into_iter().chain([k])
            })
            .collect()
    }

    /// The kind named `name` ([`Kind::name`]).
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::all().into_iter().find(|k| k.name() == name)
    }

    /// Its collective's row ([`nvshmem::COLLECTIVES`]), which says everything below but for
    /// the ring of sends (one send per PE: the whole buffer, bus factor 1).
    pub fn row(self) -> &'static CollectiveRow {
        self.collective.row()
    }

    /// Whether it is the ring of grouped send/recv.
    pub fn is_ring(self) -> bool {
        self.peers == Peers::Ring && takes_pairs(self.collective)
    }

    /// The name on the command line and in the report: the collective's, or the pattern's for
    /// grouped send/recv.
    pub fn name(self) -> &'static str {
        match (takes_pairs(self.collective), self.peers) {
            (true, Peers::Ring) => "sendrecv-ring",
            (true, Peers::All) => "sendrecv-all",
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
        !self.is_ring() && self.row().shape != Shape::Whole
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
        if self.is_ring() {
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
        if self.is_ring() {
            count
        } else {
            self.row().input_len(count, n_pes)
        }
    }

    /// Output elements per PE for count argument `count`.
    pub fn output_len(self, count: usize, n_pes: i32) -> usize {
        if self.is_ring() {
            count
        } else {
            self.row().output_len(count, n_pes)
        }
    }

    /// Its `nvsh bench` subcommand's help: what is timed, the sizes and the bus factor.
    pub fn about(self) -> String {
        let name = self.name();
        let mut what = name[..1].to_uppercase() + &name[1..];
        if self.rooted() {
            what += " with --root";
        }
        format!(
            "{what}: ours and NCCL per size and dtype, with the time ratio ours / NCCL ({}; bus \
             factor {}, as nccl-tests){}",
            self.size_text(),
            self.busbw_text(),
            if self.root_only() {
                "; only the root's output is checked"
            } else {
                ""
            }
        )
    }

    /// What the size and count columns mean, for the report (from the row's shape).
    pub(crate) fn size_text(self) -> &'static str {
        if self.is_ring() {
            return "size = count elements, what each PE sends to the next PE (and receives from \
                    the previous)";
        }
        match (self.row().shape, takes_pairs(self.collective)) {
            (Shape::Gather, _) => {
                "count = elements of each PE's input; size = the output, n x count"
            }
            (Shape::Exchange, false) => {
                "count = elements per block; size = the input (and output), n x count"
            }
            (Shape::Exchange, true) => {
                "count = elements per send (one to every PE, itself included); size = the input \
                 (and output), n x count"
            }
            (Shape::Scatter, _) => {
                "count = elements of each PE's output; size = the input, n x count"
            }
            (Shape::Whole | Shape::Empty, _) => "size = count elements, each PE's buffer",
        }
    }

    /// What every output is compared with, for the report (from the row's shape, root and
    /// reduction).
    pub(crate) fn expected_text(self) -> &'static str {
        if self.is_ring() {
            return "expected: PE r's output = PE r-1's input (mod n), bit for bit";
        }
        let r = self.row();
        match (r.shape, r.rooted) {
            (Shape::Gather, _) => "expected: block r of every output = PE r's input, bit for bit",
            (Shape::Exchange, _) => {
                "expected: block s of PE r's output = block r of PE s's input, bit for bit"
            }
            (Shape::Scatter, _) => {
                "expected: PE r's output = op over PEs of block r of their inputs, exact as \
                 allreduce's (float avg, and float sums past the dtype's exact range, within \
                 rounding; integers exactly)"
            }
            (Shape::Whole, true) if r.reduces => {
                "expected: the root's output = op over PEs of their inputs, exact as \
                 allreduce's (float avg, and float sums past the dtype's exact range, within \
                 rounding; integers exactly); the other PEs' outputs are not defined and not \
                 compared"
            }
            (Shape::Whole, true) => "expected: every PE's output = the root's input, bit for bit",
            (Shape::Whole | Shape::Empty, _) => {
                "expected: every PE's output = op over PEs of their inputs"
            }
        }
    }

    /// Whether only the root's output is defined (a rooted reduction: reduce).
    pub fn root_only(self) -> bool {
        self.row().rooted && self.row().reduces
    }

    /// Whether PE `pe`'s output is defined: everywhere but for a rooted reduction, where only
    /// the root's is.
    pub fn checks_output(self, root: i32, pe: i32) -> bool {
        !self.root_only() || pe == root
    }
}

/// Whether the collective's pairs are the caller's to choose (grouped send/recv): the bench
/// times two patterns of it.
fn takes_pairs(c: Collective) -> bool {
    c == Collective::Group
}
