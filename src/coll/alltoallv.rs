//! Alltoallv: `send.counts[r]` elements from `input[send.displs[r]..]` to member r, which
//! receives them at `output[recv.displs[s]..]` (its `recv.counts[s]` must be the same);
//! counts may be skewed or 0. Counts on the host ([`Alltoallv::run`], up to 64 members) or in
//! device memory ([`Alltoallv::run_device`]). With host counts, at most 16 members and the lines
//! allowed (every member mapped, `Auto` or `LowLatency`, `NVSH_EXCHANGE_LL_MAX` above 0), one
//! launch without pair state (device/coll/alltoallv.cu): a part up to
//! `NVSH_EXCHANGE_LL_MAX` goes as low-latency lines with no round trip, a larger one after its
//! receiver's handshake. Otherwise an exchange ([`crate::proto::exchange`]; device/coll/
//! exchange.cuh): each receiver tells each sender where its part goes through the mailbox (or
//! beyond 16 members, small parts as lines). Calls go back to back with no barrier; a count
//! the two ends disagree on is an error on both (on the sender of lines, at its next call).

use crate::coll::dispatch::{each_element, equal_parts, table_collective};
use crate::coll::family::{check_host_counts, family_code_name, family_meta, staged};
use crate::coll::family::{describe_family_meta, refuse_overlap, DeviceParts, Parts};
use crate::coll::table::Collective;
use crate::core::element::Element;
use crate::core::error::Result;
use crate::core::outside::{InBuf, OutBuf};
use crate::proto::exchange::PARTS_MAX_PES;
use crate::proto::exchange::{Direction, ExchangeCall, PartsCall, Transfer, Transfers};
use crate::proto::family::family_methods;
use crate::proto::staging::StageIo;
use crate::proto::{CollectiveText, FamilyWorkspace};
use crate::sys;
use cudarc::driver::CudaStream;

static TEXT: CollectiveText = CollectiveText {
    type_name: "Alltoallv",
    call: "alltoallv",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

const CODE: u32 = Collective::Alltoallv.code();

/// An alltoallv over the world or a team; create and call it as [`crate::Allreduce`].
pub struct Alltoallv<'nv> {
    fam: FamilyWorkspace<'nv>,
}

impl<'nv> Alltoallv<'nv> {
    /// Part r of `input` (`send`) to member r, part s of `output` (`recv`) from member s, in
    /// stream order. Parts lie in their buffers; receive parts apart from each other; input and
    /// output apart. Member r's `recv.counts[s]` must equal member s's `send.counts[r]`, else
    /// both fail with [`crate::Error::TransferMismatch`] (member s, where its part went as
    /// low-latency lines, at its next call).
    ///
    /// Each buffer is a symmetric view or this PE's own device memory ([`InBuf`], [`OutBuf`]),
    /// the latter staged through the workspace's symmetric area (docs/staging.md):
    /// the input copied in, the output copied out (and first in, where the receive parts leave
    /// gaps). The sizes differ between members, so the area never grows at a call: reserve it
    /// first ([`Alltoallv::reserve_staging`], else [`crate::Error::StagingTooSmall`] names the
    /// size).
    pub fn run<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<InBuf<'a, T>>,
        send: Parts<'_>,
        output: impl Into<OutBuf<'b, T>>,
        recv: Parts<'_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        let [i, o] = self
            .fam
            .ws()
            .locate("alltoallv", &input, &mut output, stream)?;
        self.fam.ws().rank()?;
        let n = self.n_pes();
        check_host_counts("alltoallv", n)?;
        send.check("alltoallv", "input", n, i.len())?;
        recv.check("alltoallv", "output", n, o.len())?;
        refuse_overlap("alltoallv", i.byte_range(), o.byte_range(), false)?;
        let io = StageIo::parts(!recv.cover(o.len()));
        staged(
            &mut self.fam,
            [i, o],
            io,
            false,
            stream,
            |fam, input, output| {
                let size = std::mem::size_of::<T>();
                let (i, o) = (
                    input.as_device_ptr() as usize,
                    output.as_device_ptr() as usize,
                );
                if fam.scatter_takes_parts() {
                    let bytes = |p: &Parts<'_>| -> Vec<(usize, usize)> {
                        (0..n as usize)
                            .map(|r| (p.displs[r] * size, p.counts[r] * size))
                            .collect()
                    };
                    let (sends, parts) = (bytes(&send), bytes(&recv));
                    return fam.parts(
                        "alltoallv kernel launch",
                        &PartsCall {
                            code: CODE,
                            meta: family_meta(T::DTYPE, None, CODE, None),
                            input: (i, input.num_bytes()),
                            output: (o, output.len()),
                            elem: (size, T::DTYPE),
                            parts: &parts,
                            sends: Some(&sends),
                        },
                        stream,
                    );
                }
                let part = |dir, base: usize, p: &Parts<'_>, r: i32| Transfer {
                    dir,
                    peer: r,
                    addr: base + p.displs[r as usize] * size,
                    bytes: p.counts[r as usize] * size,
                    dtype: T::DTYPE,
                };
                let list: Vec<Transfer> = (0..n)
                    .map(|r| part(Direction::Send, i, &send, r))
                    .chain((0..n).map(|r| part(Direction::Recv, o, &recv, r)))
                    .collect();
                fam.exchange(
                    "alltoallv kernel launch",
                    &ExchangeCall {
                        code: CODE,
                        // Counts differ between members by design: the meta word only.
                        checked: Some((0, family_meta(T::DTYPE, None, CODE, None))),
                        transfers: Transfers::List(&list),
                        every_pair: true,
                        // The line slots are `parts`' where it can take a call (no pair
                        // state to share them by).
                        list_lines: n as usize > PARTS_MAX_PES,
                    },
                    stream,
                )
            },
        )
    }

    /// [`Alltoallv::run`] with the counts and displacements in device memory (n each), read by
    /// the kernel, which checks them against `input` and `output` (receive parts apart from
    /// each other, as in `run`: not checked on the device). This PE's own memory is staged as
    /// in `run`, the whole output copied in and out.
    pub fn run_device<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<InBuf<'a, T>>,
        send: &DeviceParts<'_>,
        output: impl Into<OutBuf<'b, T>>,
        recv: &DeviceParts<'_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        let [i, o] = self
            .fam
            .ws()
            .locate("alltoallv", &input, &mut output, stream)?;
        self.fam.ws().rank()?;
        let n = self.n_pes();
        let [sc, sd] = send.ptrs("alltoallv", "send", n)?;
        let [rc, rd] = recv.ptrs("alltoallv", "receive", n)?;
        refuse_overlap("alltoallv", i.byte_range(), o.byte_range(), false)?;
        let io = StageIo::parts(true);
        staged(
            &mut self.fam,
            [i, o],
            io,
            false,
            stream,
            |fam, input, output| {
                fam.exchange(
                    "alltoallv kernel launch",
                    &ExchangeCall {
                        code: CODE,
                        checked: Some((0, family_meta(T::DTYPE, None, CODE, None))),
                        transfers: Transfers::Device {
                            mode: sys::NVSHMEMRS_EXCHANGE_ALLTOALLV,
                            counts: [sc, sd, rc, rd],
                            elem: (std::mem::size_of::<T>(), T::DTYPE),
                            input: (input.as_device_ptr() as usize, input.len()),
                            output: (output.as_device_ptr() as usize, output.len()),
                        },
                        every_pair: true,
                        list_lines: true,
                    },
                    stream,
                )
            },
        )
    }
}

family_methods!(Alltoallv, &TEXT, exchange);

table_collective!(
    Alltoallv, Alltoallv, choice: false,
    new: |nv, team, _slot_bytes| Alltoallv::new(nv, team),
    run: |c, call, stream| {
        let (n, given) = (c.n_pes(), call.parts);
        each_element!(call.bufs, |i, o| {
            // Equal parts unless given, one set for both sides.
            let equal;
            let (send, recv) = match &given {
                Some(p) => (&p.send, &p.recv),
                None => {
                    equal = equal_parts(i.len() / n.max(1) as usize, n);
                    (&equal, &equal)
                }
            };
            let send_parts = Parts {
                counts: &send.0,
                displs: &send.1,
            };
            let recv_parts = Parts {
                counts: &recv.0,
                displs: &recv.1,
            };
            c.run(i, send_parts, o, recv_parts, stream)
        })
    }
);
