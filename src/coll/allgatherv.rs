//! Allgatherv: member r's input, `counts[r]` elements (0 allowed), into displacement
//! `displs[r]` of every member's output; counts on the host ([`Allgatherv::run`], up to 64
//! members) or in device memory ([`Allgatherv::run_device`]). An exchange
//! ([`crate::proto::exchange`]; device/coll/allgatherv.cu and group.cu): each receiver tells
//! each sender where its part goes, so calls go back to back with no barrier.

use crate::coll::family::{byte_range, check_host_counts, family_code_name, family_meta};
use crate::coll::family::{describe_family_meta, refuse_overlap, DeviceParts, Parts};
use crate::core::buffer::SymView;
use crate::core::element::Element;
use crate::core::error::{Error, Result};
use crate::proto::exchange::{Direction, ExchangeCall, Transfer, Transfers};
use crate::proto::family::family_methods;
use crate::proto::{CollectiveText, FamilyWorkspace};
use crate::sys;
use cudarc::driver::CudaStream;

static TEXT: CollectiveText = CollectiveText {
    type_name: "Allgatherv",
    call: "allgatherv",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

const CODE: u32 = sys::NVSHMEMRS_COLL_ALLGATHERV;

/// An allgatherv over the world or a team; create and call it as [`crate::Allreduce`].
pub struct Allgatherv<'nv> {
    fam: FamilyWorkspace<'nv>,
}

impl<'nv> Allgatherv<'nv> {
    /// Member r's `input` (`parts.counts[r]` elements) into `output[parts.displs[r]..]` on
    /// every member, in stream order. Every member passes the same `parts`, which must lie in
    /// `output` and apart from each other. In place when `input` is this member's own part of
    /// `output`.
    pub fn run<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        parts: Parts<'_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, output) = (input.into(), output.into());
        let me = self.fam.ws().rank()? as usize;
        let n = self.n_pes();
        check_host_counts("allgatherv", n)?;
        parts.check("allgatherv", "output", n, output.len())?;
        if input.len() != parts.counts[me] {
            return Err(Error::CollectiveShape {
                what: "allgatherv",
                detail: format!(
                    "the input holds {} elements but this member's count is {}; pass an input \
                     of its count",
                    input.len(),
                    parts.counts[me]
                ),
            });
        }
        let size = std::mem::size_of::<T>();
        let out = output.as_device_ptr() as usize;
        let own = out + parts.displs[me] * size;
        // In place: the own part is there already, and nothing moves to this PE itself.
        let in_place = !input.is_empty() && input.as_device_ptr() as usize == own;
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
        self.fam.exchange(
            "allgatherv kernel launch",
            &ExchangeCall {
                code: CODE,
                checked: Some((output.len(), family_meta(T::DTYPE, None, CODE, None))),
                transfers: Transfers::List(&list),
            },
            stream,
        )
    }

    /// [`Allgatherv::run`] with the counts and displacements in device memory (n each, the
    /// same on every member), read by the kernel: counts one kernel computed need no trip to
    /// the host. The kernel checks them against `input` and `output`. In place when `input` is
    /// this member's own part of `output` (parts apart from each other, as in `run`: not
    /// checked on the device).
    pub fn run_device<'a, 'b, T: Element>(
        &mut self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        parts: &DeviceParts<'_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (input, output) = (input.into(), output.into());
        self.fam.ws().rank()?;
        let [counts, displs] = parts.ptrs("allgatherv", "output", self.n_pes())?;
        let (i, o) = (byte_range(&input), byte_range(&output));
        // In place is an input inside the output (the kernel skips a copy onto itself).
        let inside = o.start <= i.start && i.end <= o.end;
        refuse_overlap("allgatherv", i, o, inside)?;
        self.fam.exchange(
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
            },
            stream,
        )
    }
}

family_methods!(Allgatherv, &TEXT, exchange);
