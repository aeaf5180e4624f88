//! Allgatherv: member r's input, `counts[r]` elements (0 allowed), into displacement
//! `displs[r]` of every member's output; counts on the host ([`Allgatherv::run`], up to 64
//! members) or in device memory ([`Allgatherv::run_device`]). With host counts on up to 16
//! members, one launch and no mailbox (device/coll/allgatherv.cu,
//! [`crate::proto::exchange::PartsCall`]): where every part fits the lines
//! (`NVSH_EXCHANGE_LL_MAX`, every member mapped), each member stores its part and its size
//! into every other's line slot, with no round trip and no pair state, and a member whose
//! sizes differ fails with [`Error::TransferMismatch`]; otherwise allgather's blocks, each
//! member putting its part into every other's output once that one has arrived (parts that
//! differ between members are then caught by checked mode's header alone: pass the same parts
//! everywhere). Past 16 members an exchange ([`crate::proto::exchange`]): each receiver tells
//! each sender where its part goes, through the mailbox. Calls go back to back with no barrier
//! either way. With device counts the mailbox only: the host cannot size the parts.

use crate::coll::dispatch::{each_element, equal_parts, table_collective};
use crate::coll::family::staged;
use crate::coll::family::{check_host_counts, family_code_name, family_meta, parts_meta};
use crate::coll::family::{describe_family_meta, refuse_overlap, DeviceParts, Parts};
use crate::coll::table::Collective;
use crate::core::element::Element;
use crate::core::error::{Error, Result};
use crate::core::outside::{InBuf, OutBuf};
use crate::proto::exchange::PARTS_MAX_PES;
use crate::proto::exchange::{Direction, ExchangeCall, PartsCall, Transfer, Transfers};
use crate::proto::family::family_methods;
use crate::proto::staging::StageIo;
use crate::proto::{CollectiveText, FamilyWorkspace};
use crate::sys;
use cudarc::driver::CudaStream;

static TEXT: CollectiveText = CollectiveText {
    type_name: "Allgatherv",
    call: "allgatherv",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

const CODE: u32 = Collective::Allgatherv.code();

/// An allgatherv over the world or a team; create and call it as [`crate::Allreduce`].
pub struct Allgatherv<'nv> {
    fam: FamilyWorkspace<'nv>,
}

impl<'nv> Allgatherv<'nv> {
    /// Member r's `input` (`parts.counts[r]` elements) into `output[parts.displs[r]..]` on
    /// every member, in stream order. Every member passes the same `parts`, which must lie in
    /// `output` and apart from each other. In place when `input` is this member's own part of
    /// `output`.
    ///
    /// Each buffer is a symmetric view or this PE's own device memory ([`InBuf`], [`OutBuf`]),
    /// the latter staged through the workspace's symmetric area (docs/staging.md):
    /// the input copied in, the output copied out (and first in, where the parts leave gaps).
    /// The sizes differ between members, so the area never grows at a call: reserve it first
    /// ([`Allgatherv::reserve_staging`], else [`Error::StagingTooSmall`] names the size).
    pub fn run<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<InBuf<'a, T>>,
        output: impl Into<OutBuf<'b, T>>,
        parts: Parts<'_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        let [i, o] = self
            .fam
            .ws()
            .locate("allgatherv", &input, &mut output, stream)?;
        let me = self.fam.ws().rank()? as usize;
        let n = self.n_pes();
        check_host_counts("allgatherv", n)?;
        parts.check("allgatherv", "output", n, o.len())?;
        if i.len() != parts.counts[me] {
            return Err(Error::CollectiveShape {
                what: "allgatherv",
                detail: format!(
                    "the input holds {} elements but this member's count is {}; pass an input \
                     of its count",
                    i.len(),
                    parts.counts[me]
                ),
            });
        }
        let io = StageIo::parts(!parts.cover(o.len()));
        let out_len = o.len();
        staged(
            &mut self.fam,
            [i, o],
            io,
            false,
            stream,
            |fam, input, output| {
                let size = std::mem::size_of::<T>();
                let out = output.as_device_ptr() as usize;
                let own = out + parts.displs[me] * size;
                // In place: the own part is there already, and nothing moves to this PE itself.
                let in_place = !input.is_empty() && input.as_device_ptr() as usize == own;
                let bytes = |r: usize| parts.counts[r] * size;
                if n as usize <= PARTS_MAX_PES {
                    let list: Vec<(usize, usize)> = (0..n as usize)
                        .map(|r| (parts.displs[r] * size, bytes(r)))
                        .collect();
                    return fam.parts(
                        "allgatherv kernel launch",
                        &PartsCall {
                            code: CODE,
                            meta: parts_meta(T::DTYPE, &list),
                            input: (input.as_device_ptr() as usize, input.num_bytes()),
                            output: (out, out_len),
                            elem: (size, T::DTYPE),
                            parts: &list,
                            sends: None,
                        },
                        stream,
                    );
                }
                let mut list = Vec::with_capacity(2 * n as usize);
                for r in 0..n {
                    let skip = in_place && r as usize == me;
                    let send = Transfer {
                        dir: Direction::Send,
                        peer: r,
                        addr: input.as_device_ptr() as usize,
                        bytes: input.num_bytes(),
                        dtype: T::DTYPE,
                    };
                    let recv = Transfer {
                        dir: Direction::Recv,
                        addr: out + parts.displs[r as usize] * size,
                        bytes: parts.counts[r as usize] * size,
                        ..send.clone()
                    };
                    list.extend([send, recv].into_iter().filter(|_| !skip));
                }
                fam.exchange(
                    "allgatherv kernel launch",
                    &ExchangeCall {
                        code: CODE,
                        checked: Some((out_len, family_meta(T::DTYPE, None, CODE, None))),
                        transfers: Transfers::List(&list),
                        every_pair: true,
                        // The line slots are `parts`' (no pair state to share them by).
                        list_lines: false,
                    },
                    stream,
                )
            },
        )
    }

    /// [`Allgatherv::run`] with the counts and displacements in device memory (n each, the
    /// same on every member), read by the kernel: counts one kernel computed need no trip to
    /// the host. The kernel checks them against `input` and `output`. In place when `input` is
    /// this member's own part of `output` (parts apart from each other, as in `run`: not
    /// checked on the device). This PE's own memory is staged as in `run`, the whole output
    /// copied in and out (the host does not know which parts the counts cover).
    pub fn run_device<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<InBuf<'a, T>>,
        output: impl Into<OutBuf<'b, T>>,
        parts: &DeviceParts<'_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        let [i, o] = self
            .fam
            .ws()
            .locate("allgatherv", &input, &mut output, stream)?;
        self.fam.ws().rank()?;
        let [counts, displs] = parts.ptrs("allgatherv", "output", self.n_pes())?;
        let (ir, or) = (i.byte_range(), o.byte_range());
        // In place is an input inside the output (the kernel skips a copy onto itself).
        let inside = or.start <= ir.start && ir.end <= or.end;
        refuse_overlap("allgatherv", ir, or, inside)?;
        let io = StageIo::parts(true);
        staged(
            &mut self.fam,
            [i, o],
            io,
            false,
            stream,
            |fam, input, output| {
                fam.exchange(
                    "allgatherv kernel launch",
                    &ExchangeCall {
                        code: CODE,
                        checked: Some((output.len(), family_meta(T::DTYPE, None, CODE, None))),
                        transfers: Transfers::Device {
                            mode: sys::NVSHMEMRS_EXCHANGE_ALLGATHERV,
                            counts: [counts, displs, std::ptr::null(), std::ptr::null()],
                            elem: (std::mem::size_of::<T>(), T::DTYPE),
                            input: (input.as_device_ptr() as usize, input.len()),
                            output: (output.as_device_ptr() as usize, output.len()),
                        },
                        every_pair: true,
                        list_lines: false,
                    },
                    stream,
                )
            },
        )
    }
}

family_methods!(Allgatherv, &TEXT, exchange);

table_collective!(
    Allgatherv, Allgatherv, choice: false,
    new: |nv, team, _slot_bytes| Allgatherv::new(nv, team),
    run: |c, call, stream| {
        let (n, given) = (c.n_pes(), call.parts);
        each_element!(call.bufs, |i, o| {
            // Equal parts unless given: every member's input is as long as this one's.
            let equal;
            let (counts, displs) = match &given {
                Some(p) => (&p.recv.0, &p.recv.1),
                None => {
                    equal = equal_parts(i.len(), n);
                    (&equal.0, &equal.1)
                }
            };
            let parts = Parts { counts, displs };
            c.run(i, o, parts, stream)
        })
    }
);
