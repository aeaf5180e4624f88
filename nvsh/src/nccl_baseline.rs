//! NCCL as the collective benchmarks' baseline: one communicator over the job's PEs, in the same
//! process, on the same GPUs and stream as NVSHMEM, bootstrapped through NVSHMEM itself (PE 0's
//! NCCL unique id travels through symmetric memory), so no MPI or second launcher is needed.
//! Each collective is NCCL's regular call on the symmetric buffers directly; alltoall is one
//! group of sends and receives, as nccl-tests times it.
//!
//! The second baseline, NCCL's symmetric-memory kernels, takes buffers of NCCL's own
//! ([`NcclWindow`]: `ncclMemAlloc`, registered with `ncclCommWindowRegister(...,
//! NCCL_WIN_COLL_SYMMETRIC)`) through the same communicator and calls ([`NcclBaseline::run`]).
//!
//! NCCL comes through cudarc's `nccl` module, which loads libnccl at run time: builds need no
//! NCCL, and a missing library (or a missing symbol of a newer NCCL) is an error here, never a
//! panic.

use cudarc::driver::CudaStream;
use cudarc::nccl::{result as nccl_result, safe as nccl, sys as nccl_sys, NcclType};
use nvshmem::tools::Peers;
use nvshmem::Nvshmem;
use nvshmem::{Collective, Element};
use nvshmem::{Error, Result};
use nvshmem::{ReduceOp, Reducible};
use nvshmem::{SymView, SymmetricBuffer};
use std::ffi::{c_int, c_void, CStr};
use std::marker::PhantomData;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;

/// Bytes of an NCCL unique id (`ncclUniqueId`).
const NCCL_ID_BYTES: usize = 128;

/// `NCCL_WIN_COLL_SYMMETRIC`, the window flag that lets NCCL run its symmetric kernels on a
/// registered buffer: 0x01 in NCCL's nccl.h (src/nccl.h.in of NCCL 2.27.3 and 2.28.9). cudarc
/// 0.19 binds the window calls but not this define.
pub const NCCL_WIN_COLL_SYMMETRIC: c_int = 0x01;

/// The first NCCL with `ncclCommWindowRegister` (2.27.0, as NCCL_VERSION_CODE).
pub const NCCL_WINDOW_MIN_VERSION: i32 = 22700;

/// The NCCL symbols a window needs: cudarc resolves each on first use and panics when the
/// loaded library lacks it, so [`NcclBaseline::window_support`] looks them up first.
const WINDOW_SYMBOLS: [&str; 4] = [
    "ncclMemAlloc",
    "ncclMemFree",
    "ncclCommWindowRegister",
    "ncclCommWindowDeregister",
];

/// The communicator handle. Our own rather than cudarc's `Comm`, which neither hands out its
/// handle (window registration needs it) nor drops without a possible panic. Shared by the
/// baseline and every window registered on it, so the windows go first; aborted (not
/// finalised: no NCCL work is pending once the benches have synchronised) by the last owner.
struct RawComm {
    comm: nccl_sys::ncclComm_t,
    rank: usize,
    world_size: usize,
}

impl Drop for RawComm {
    fn drop(&mut self) {
        // SAFETY: the handle came from ncclCommInitRank and nothing uses it after this.
        if let Err(e) = unsafe { nccl_result::comm_abort(self.comm) } {
            eprintln!("nvsh: warning: {}", nccl_message("ncclCommAbort", &e));
        }
    }
}

/// An NCCL communicator over every PE of the job, rank = PE number.
pub struct NcclBaseline<'nv> {
    comm: Rc<RawComm>,
    stream: Arc<CudaStream>,
    version: i32,
    /// The communicator uses the runtime's device and must go before NVSHMEM is finalised.
    _nv: PhantomData<&'nv Nvshmem>,
}

impl std::fmt::Debug for NcclBaseline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclBaseline")
            .field("rank", &self.rank())
            .field("world_size", &self.world_size())
            .field("version", &self.version_string())
            .finish()
    }
}

/// One NCCL collective as the benches call it, with what it takes beside the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NcclCall {
    /// `ncclAllReduce`: output = op over ranks of their inputs.
    AllReduce(ReduceOp),
    /// `ncclBroadcast` from `root`.
    Broadcast { root: i32 },
    /// `ncclAllGather`: block r of the output (n blocks of the input's length) = rank r's input.
    AllGather,
    /// `ncclReduceScatter`: output = op over ranks of block [my rank] of their inputs.
    ReduceScatter(ReduceOp),
    /// `ncclReduce` to `root` (the output is defined there only).
    Reduce { op: ReduceOp, root: i32 },
    /// One `ncclSend` and one `ncclRecv` per rank in a group, as nccl-tests' alltoall.
    AllToAll,
    /// `ncclSend` of the input to the next rank and `ncclRecv` of the output from the previous
    /// in a group: a ring of grouped send/recv.
    SendRecvRing,
}

impl NcclCall {
    /// NCCL's call for a collective of the table with these pairs, op and root, or None where
    /// NCCL has none. NCCL's API differs per collective, so this is the one match over the
    /// table's collectives in the tools: the v forms as their equal-count counterparts, grouped
    /// send/recv as grouped `ncclSend`/`ncclRecv`.
    pub fn of(c: Collective, peers: Peers, op: ReduceOp, root: i32) -> Option<NcclCall> {
        Some(match c {
            Collective::Allreduce => NcclCall::AllReduce(op),
            Collective::Broadcast => NcclCall::Broadcast { root },
            Collective::Reduce => NcclCall::Reduce { op, root },
            Collective::Allgather | Collective::Allgatherv => NcclCall::AllGather,
            Collective::ReduceScatter => NcclCall::ReduceScatter(op),
            Collective::Alltoall | Collective::Alltoallv => NcclCall::AllToAll,
            Collective::Group if peers == Peers::Ring => NcclCall::SendRecvRing,
            Collective::Group => NcclCall::AllToAll,
            _ => return None,
        })
    }
}

/// A send of the first buffer to the rank after it and a receive into the third from the rank
/// after that, in one NCCL group ([`NcclBaseline::run`]'s grouped calls).
type Pair<'a, T> = (NcclBuf<'a, T>, i32, NcclBuf<'a, T>, i32);

/// A device buffer NCCL is called on: a symmetric buffer (or a view of one) or a view of an
/// [`NcclWindow`]. Only a pointer and a length, borrowed for `'a`.
#[derive(Debug, Clone, Copy)]
pub struct NcclBuf<'a, T> {
    ptr: *mut T,
    len: usize,
    _buffer: PhantomData<&'a T>,
}

impl<'a, T: Element> From<SymView<'a, T>> for NcclBuf<'a, T> {
    fn from(v: SymView<'a, T>) -> Self {
        NcclBuf {
            ptr: v.as_device_ptr(),
            len: v.len(),
            _buffer: PhantomData,
        }
    }
}

impl<'a, T: Element> From<&SymView<'a, T>> for NcclBuf<'a, T> {
    fn from(v: &SymView<'a, T>) -> Self {
        NcclBuf::from(*v)
    }
}

impl<'a, T: Element> From<&'a SymmetricBuffer<'_, T>> for NcclBuf<'a, T> {
    fn from(b: &'a SymmetricBuffer<'_, T>) -> Self {
        NcclBuf::from(b.as_view())
    }
}

impl<'a, T: Element> NcclBuf<'a, T> {
    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's device address.
    pub fn as_device_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Bytes.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Elements `range` of this buffer; an error when the range is not inside it.
    pub fn view(&self, range: Range<usize>) -> Result<NcclBuf<'a, T>> {
        let Range { start, end } = range;
        if start > end || end > self.len {
            return Err(Error::CollectiveShape {
                what: "NCCL buffer view",
                detail: format!(
                    "{start}..{end} is not inside a buffer of {} elements",
                    self.len
                ),
            });
        }
        Ok(NcclBuf {
            // In bounds: start <= len elements of one allocation.
            ptr: self.ptr.wrapping_add(start),
            len: end - start,
            _buffer: PhantomData,
        })
    }
}

impl<'nv> NcclBaseline<'nv> {
    /// Creates the communicator on every PE (collective: call it on every PE at the same
    /// point). Its calls are issued on `stream`. Every PE first learns whether every other PE
    /// has NCCL, so all of them return the same error when one lacks it (none hangs).
    pub fn new(nv: &'nv Nvshmem, stream: &Arc<CudaStream>) -> Result<NcclBaseline<'nv>> {
        let me = nv.my_pe();
        // Mine: [status, id...]; status 1 = NCCL usable here (and, on PE 0, an id was made).
        let mut mine = vec![0u8; 1 + NCCL_ID_BYTES];
        let local = library_status().and_then(|()| {
            if me != 0 {
                return Ok(());
            }
            let id = nccl::Id::new().map_err(|e| nccl_message("ncclGetUniqueId", &e))?;
            for (dst, &src) in mine[1..].iter_mut().zip(id.internal()) {
                *dst = src as u8;
            }
            Ok(())
        });
        mine[0] = local.is_ok() as u8;
        let exchange = HostExchange::new(nv, mine.len())?;
        let all = exchange.all_gather(&mine)?;
        let failed: Vec<i32> = (0..nv.n_pes())
            .filter(|&pe| all[pe as usize][0] != 1)
            .collect();
        if !failed.is_empty() {
            let message = match local {
                Err(reason) => format!("NCCL: {reason}"),
                Ok(()) => format!("NCCL: unusable on PE(s) {failed:?}"),
            };
            return Err(Error::Driver { message });
        }
        let mut id = nccl_sys::ncclUniqueId {
            internal: [0; NCCL_ID_BYTES],
        };
        for (dst, &src) in id.internal.iter_mut().zip(&all[0][1..]) {
            *dst = src as std::ffi::c_char;
        }
        let (rank, world_size) = (me as usize, nv.n_pes() as usize);
        let mut comm: nccl_sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `comm` is written by NCCL on success; the id is PE 0's, the same on every PE.
        unsafe { nccl_result::comm_init_rank(&mut comm, nv.n_pes(), id, me) }
            .map_err(|e| nccl_error("ncclCommInitRank", &e))?;
        let comm = Rc::new(RawComm {
            comm,
            rank,
            world_size,
        });
        let version =
            nccl_result::get_nccl_version().map_err(|e| nccl_error("ncclGetVersion", &e))?;
        Ok(NcclBaseline {
            comm,
            stream: stream.clone(),
            version,
            _nv: PhantomData,
        })
    }

    /// [`NcclBaseline::new`] for a benchmark: the reason as text when NCCL cannot be used (the
    /// same on every PE), which the report shows as the candidate's n/a.
    pub fn for_bench(
        nv: &'nv Nvshmem,
        stream: &Arc<CudaStream>,
    ) -> std::result::Result<NcclBaseline<'nv>, String> {
        NcclBaseline::new(nv, stream).map_err(|e| match e {
            // Already says "NCCL: ..."; the variant's "CUDA driver call failed" would mislead.
            Error::Driver { message } => message,
            e => e.to_string(),
        })
    }

    /// One NCCL collective from `input` into `output` on the communicator's stream
    /// (collective). The lengths are checked first: the same for allreduce, broadcast and
    /// reduce, one block per rank where the collective takes blocks.
    pub fn run<'a, 'b, T: Element + NcclType>(
        &self,
        call: NcclCall,
        input: impl Into<NcclBuf<'a, T>>,
        output: impl Into<NcclBuf<'b, T>>,
    ) -> Result<()> {
        let (input, output) = (input.into(), output.into());
        let (send, recv) = (input.ptr as *const c_void, output.ptr as *mut c_void);
        let (ty, comm) = (T::as_nccl_type(), self.comm.comm);
        let stream = self.stream.cu_stream() as nccl_sys::cudaStream_t;
        // SAFETY (each call below): device buffers of the lengths checked first, on this PE's
        // device; the communicator and stream are live.
        let done = match call {
            NcclCall::AllReduce(op) => {
                same_length("NCCL allreduce", input.len, output.len)?;
                let f = unsafe {
                    nccl_result::all_reduce(send, recv, input.len, ty, nccl_op(op), comm, stream)
                };
                f.map_err(|e| nccl_error("ncclAllReduce", &e))
            }
            NcclCall::Broadcast { root } => {
                same_length("NCCL broadcast", input.len, output.len)?;
                let f = unsafe {
                    nccl_result::broadcast(send, recv, output.len, ty, root, comm, stream)
                };
                f.map_err(|e| nccl_error("ncclBroadcast", &e))
            }
            NcclCall::AllGather => {
                self.blocks("NCCL allgather", "output", output.len, input.len)?;
                let f = unsafe { nccl_result::all_gather(send, recv, input.len, ty, comm, stream) };
                f.map_err(|e| nccl_error("ncclAllGather", &e))
            }
            NcclCall::ReduceScatter(op) => {
                self.blocks("NCCL reduce-scatter", "input", input.len, output.len)?;
                let f = unsafe {
                    let op = nccl_op(op);
                    nccl_result::reduce_scatter(send, recv, output.len, ty, op, comm, stream)
                };
                f.map_err(|e| nccl_error("ncclReduceScatter", &e))
            }
            NcclCall::Reduce { op, root } => {
                same_length("NCCL reduce", input.len, output.len)?;
                let f = unsafe {
                    let op = nccl_op(op);
                    nccl_result::reduce(send, recv, input.len, ty, op, root, comm, stream)
                };
                f.map_err(|e| nccl_error("ncclReduce", &e))
            }
            NcclCall::AllToAll => {
                return self.grouped(&self.all_to_all_pairs(input, output)?, ty, stream)
            }
            NcclCall::SendRecvRing => {
                return self.grouped(&self.ring_pairs(input, output)?, ty, stream)
            }
        };
        done.map(|_| ())
    }

    /// [`NcclCall::AllToAll`] as sends and receives: block `[s]` of `output` = block
    /// `[my rank]` of rank s's `input`.
    fn all_to_all_pairs<'a, T: Element>(
        &self,
        input: NcclBuf<'a, T>,
        output: NcclBuf<'a, T>,
    ) -> Result<Vec<Pair<'a, T>>> {
        let n = self.world_size();
        let count = input.len / n.max(1);
        self.blocks("NCCL alltoall", "input", input.len, count)?;
        self.blocks("NCCL alltoall", "output", output.len, count)?;
        (0..n)
            .map(|peer| {
                let block = peer * count..(peer + 1) * count;
                let peer = peer as i32;
                Ok((input.view(block.clone())?, peer, output.view(block)?, peer))
            })
            .collect()
    }

    /// [`NcclCall::SendRecvRing`] as sends and receives: `output` = the previous rank's
    /// `input` (same lengths).
    fn ring_pairs<'a, T: Element>(
        &self,
        input: NcclBuf<'a, T>,
        output: NcclBuf<'a, T>,
    ) -> Result<Vec<Pair<'a, T>>> {
        same_length("NCCL send/recv ring", input.len, output.len)?;
        let (n, me) = (self.world_size(), self.rank());
        let (next, prev) = (((me + 1) % n) as i32, ((me + n - 1) % n) as i32);
        Ok(vec![(input, next, output, prev)])
    }

    /// One NCCL group of, per `(send, to, recv, from)`, an `ncclSend` of `send` to rank `to`
    /// and an `ncclRecv` of `recv` from rank `from`.
    fn grouped<T: Element>(
        &self,
        pairs: &[Pair<'_, T>],
        ty: nccl_sys::ncclDataType_t,
        stream: nccl_sys::cudaStream_t,
    ) -> Result<()> {
        let comm = self.comm.comm;
        nccl_result::group_start().map_err(|e| nccl_error("ncclGroupStart", &e))?;
        let queued = pairs.iter().try_for_each(|(send, to, recv, from)| {
            // SAFETY: views inside the caller's checked buffers, of their own lengths.
            unsafe { nccl_result::send(send.ptr as _, send.len, ty, *to, comm, stream) }
                .map_err(|e| nccl_error("ncclSend", &e))?;
            unsafe { nccl_result::recv(recv.ptr as _, recv.len, ty, *from, comm, stream) }
                .map_err(|e| nccl_error("ncclRecv", &e))?;
            Ok(())
        });
        // The group is closed even when queueing failed, so later NCCL calls are not grouped.
        let ended = nccl_result::group_end().map_err(|e| nccl_error("ncclGroupEnd", &e));
        queued.and(ended.map(|_| ()))
    }

    /// `output = op(input of every PE)` through `ncclAllReduce`, on the communicator's stream.
    /// Collective, like [`nvshmem::Allreduce::run`]; the symmetric buffers are used directly.
    pub fn all_reduce<'a, 'b, T: Reducible + NcclType>(
        &self,
        input: impl Into<NcclBuf<'a, T>>,
        output: impl Into<NcclBuf<'b, T>>,
        op: ReduceOp,
    ) -> Result<()> {
        self.run(NcclCall::AllReduce(op), input, output)
    }

    /// `output` = the root's `input` on every rank through `ncclBroadcast` (`input` is read at
    /// the root only). Collective, like [`nvshmem::Broadcast::run`].
    pub fn broadcast<'a, 'b, T: Element + NcclType>(
        &self,
        input: impl Into<NcclBuf<'a, T>>,
        output: impl Into<NcclBuf<'b, T>>,
        root: i32,
    ) -> Result<()> {
        self.run(NcclCall::Broadcast { root }, input, output)
    }

    /// Block `[r]` of `output` (n x input.len() elements) = rank r's `input`, through
    /// `ncclAllGather`. Collective, like [`nvshmem::Allgather::run`].
    pub fn all_gather<'a, 'b, T: Element + NcclType>(
        &self,
        input: impl Into<NcclBuf<'a, T>>,
        output: impl Into<NcclBuf<'b, T>>,
    ) -> Result<()> {
        self.run(NcclCall::AllGather, input, output)
    }

    /// `output` = op over ranks of block [my rank] of their `input` (n x output.len()
    /// elements), through `ncclReduceScatter`. Collective, like [`nvshmem::ReduceScatter::run`].
    pub fn reduce_scatter<'a, 'b, T: Reducible + NcclType>(
        &self,
        input: impl Into<NcclBuf<'a, T>>,
        output: impl Into<NcclBuf<'b, T>>,
        op: ReduceOp,
    ) -> Result<()> {
        self.run(NcclCall::ReduceScatter(op), input, output)
    }

    /// At the root, `output` = op over ranks of their `input`, through `ncclReduce`; NCCL
    /// ignores `output` on the other ranks. Collective, like [`nvshmem::Reduce::run`].
    pub fn reduce<'a, 'b, T: Reducible + NcclType>(
        &self,
        input: impl Into<NcclBuf<'a, T>>,
        output: impl Into<NcclBuf<'b, T>>,
        op: ReduceOp,
        root: i32,
    ) -> Result<()> {
        self.run(NcclCall::Reduce { op, root }, input, output)
    }

    /// Block `[s]` of `output` = block `[my rank]` of rank s's `input` (both n blocks of the same
    /// length): one `ncclSend` and one `ncclRecv` per rank in one group, as nccl-tests' alltoall.
    /// Collective, like [`nvshmem::Alltoall::run`].
    pub fn all_to_all<'a, 'b, T: Element + NcclType>(
        &self,
        input: impl Into<NcclBuf<'a, T>>,
        output: impl Into<NcclBuf<'b, T>>,
    ) -> Result<()> {
        self.run(NcclCall::AllToAll, input, output)
    }

    /// An error unless `len` is one block of `block` elements (at least 1) per rank.
    fn blocks(&self, what: &'static str, which: &str, len: usize, block: usize) -> Result<()> {
        let n = self.world_size();
        if block > 0 && block.checked_mul(n) == Some(len) {
            return Ok(());
        }
        Err(Error::CollectiveShape {
            what,
            detail: format!(
                "the {which} holds {len} elements, but {n} ranks x {block} elements need {}",
                block.saturating_mul(n)
            ),
        })
    }

    /// Whether this NCCL registers windows ([`NcclWindow`]): the reason when it does not (the
    /// same on every PE of one installation). Decided from the version and by looking the
    /// symbols up in the loaded library, never by calling one that may be missing.
    pub fn window_support(&self) -> std::result::Result<(), String> {
        window_support(self.version, |name| {
            // SAFETY: the library is loaded (the communicator exists); only looks a name up.
            unsafe { nccl_sys::culib().get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_ok()
        })
    }

    /// `len` elements of NCCL's memory (`ncclMemAlloc`), not yet registered
    /// ([`NcclWindow::register`]). Local. The window lives no longer than `nv`, the runtime
    /// the communicator runs beside, and keeps the communicator until it is gone.
    pub fn mem_alloc<'w, T: Element>(
        &self,
        _nv: &'w Nvshmem,
        len: usize,
    ) -> Result<NcclWindow<'w, T>> {
        self.window_support()
            .map_err(|message| Error::Driver { message })?;
        let bytes =
            len.checked_mul(std::mem::size_of::<T>())
                .ok_or_else(|| Error::SizeOverflow {
                    what: "NCCL window",
                    detail: format!("{len} elements of {} bytes", std::mem::size_of::<T>()),
                })?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: NCCL writes the address on success; the symbol was found above.
        unsafe { nccl_sys::ncclMemAlloc(&mut ptr, bytes.max(1)) }
            .result()
            .map_err(|e| nccl_error("ncclMemAlloc", &e))?;
        Ok(NcclWindow {
            comm: Rc::clone(&self.comm),
            ptr: ptr.cast(),
            len,
            win: std::ptr::null_mut(),
            _nv: PhantomData,
        })
    }

    /// This PE's rank in the communicator (its PE number).
    pub fn rank(&self) -> usize {
        self.comm.rank
    }

    /// Ranks in the communicator (the PE count).
    pub fn world_size(&self) -> usize {
        self.comm.world_size
    }

    /// The stream the communicator's calls are issued on.
    pub fn stream(&self) -> Arc<CudaStream> {
        self.stream.clone()
    }

    /// The loaded NCCL's version, "major.minor.patch".
    pub fn version_string(&self) -> String {
        nccl_version_string(self.version)
    }
}

/// NCCL for a bench's two NCCL candidates: the communicator, made where `regular` or `sym` is
/// asked for, and whether the symmetric-memory candidate can run (its windows need NCCL 2.27
/// or newer); each as the reason it cannot (the same on every PE). Collective.
pub fn bench_baselines<'nv>(
    nv: &'nv Nvshmem,
    stream: &Arc<CudaStream>,
    regular: bool,
    sym: bool,
) -> (
    std::result::Result<NcclBaseline<'nv>, String>,
    std::result::Result<(), String>,
) {
    let nccl = if regular || sym {
        NcclBaseline::for_bench(nv, stream)
    } else {
        Err("not requested".to_string())
    };
    let windows = match &nccl {
        Ok(n) if sym => n.window_support(),
        Err(why) if sym => Err(why.clone()),
        _ => Err("not requested".to_string()),
    };
    (nccl, windows)
}

/// Why an NCCL of version `code` whose library has the symbols `has` says it has cannot
/// register windows; Ok when it can.
pub fn window_support(code: i32, has: impl Fn(&str) -> bool) -> std::result::Result<(), String> {
    if code < NCCL_WINDOW_MIN_VERSION {
        return Err(format!(
            "NCCL {} has no symmetric-memory windows (ncclCommWindowRegister came in {})",
            nccl_version_string(code),
            nccl_version_string(NCCL_WINDOW_MIN_VERSION)
        ));
    }
    match WINDOW_SYMBOLS.iter().find(|s| !has(s)) {
        Some(missing) => Err(format!(
            "NCCL {} lacks {missing}, which symmetric-memory windows need",
            nccl_version_string(code)
        )),
        None => Ok(()),
    }
}

/// A buffer of NCCL's own memory (`ncclMemAlloc`), registered on the communicator as a
/// symmetric window (`NCCL_WIN_COLL_SYMMETRIC`), on which NCCL runs its symmetric kernels where
/// it has them. Dropping it deregisters the window (collective: every PE drops its windows in
/// the same order) and then frees the memory; errors are printed, never raised. It holds the
/// communicator, which therefore goes after it, and lives no longer than the runtime.
pub struct NcclWindow<'nv, T> {
    comm: Rc<RawComm>,
    ptr: *mut T,
    len: usize,
    /// Null until registered.
    win: nccl_sys::ncclWindow_t,
    _nv: PhantomData<&'nv Nvshmem>,
}

impl<T> std::fmt::Debug for NcclWindow<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NcclWindow({:p}, len {}, registered {})",
            self.ptr,
            self.len,
            !self.win.is_null()
        )
    }
}

impl<T: Element> NcclWindow<'_, T> {
    /// Registers the buffer as a symmetric window. Collective over the communicator: every PE
    /// registers a window of the same length at the same point. An error when NCCL refuses, or
    /// registers nothing (its symmetric memory is off: it needs CUDA P2P between every pair of
    /// ranks and cuMem, see NCCL_WIN_ENABLE and NCCL_CUMEM_ENABLE).
    pub fn register(&mut self) -> Result<()> {
        if !self.win.is_null() {
            return Ok(());
        }
        let bytes = (self.len * std::mem::size_of::<T>()).max(1);
        // SAFETY: NCCL's own allocation of at least `bytes`; NCCL writes the window on success.
        let ret = unsafe {
            nccl_sys::ncclCommWindowRegister(
                self.comm.comm,
                self.ptr.cast(),
                bytes,
                &mut self.win,
                NCCL_WIN_COLL_SYMMETRIC,
            )
        };
        ret.result()
            .map_err(|e| nccl_error("ncclCommWindowRegister", &e))?;
        if self.win.is_null() {
            return Err(Error::Driver {
                message: "NCCL: ncclCommWindowRegister registered no window: NCCL's symmetric \
                          memory is off here (it needs CUDA P2P between all ranks and cuMem; \
                          see NCCL_WIN_ENABLE and NCCL_CUMEM_ENABLE)"
                    .into(),
            });
        }
        Ok(())
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `range`, for NCCL's calls and the copies in and out.
    pub fn view(&self, range: Range<usize>) -> Result<NcclBuf<'_, T>> {
        NcclBuf {
            ptr: self.ptr,
            len: self.len,
            _buffer: PhantomData,
        }
        .view(range)
    }
}

impl<T> Drop for NcclWindow<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the window and the memory are this object's; the communicator is alive (this
        // object holds it). Deregistered before the memory under it is freed.
        unsafe {
            if !self.win.is_null() {
                if let Err(e) =
                    nccl_sys::ncclCommWindowDeregister(self.comm.comm, self.win).result()
                {
                    eprintln!(
                        "nvsh: warning: {}",
                        nccl_message("ncclCommWindowDeregister", &e)
                    );
                }
            }
            if let Err(e) = nccl_sys::ncclMemFree(self.ptr.cast()).result() {
                eprintln!("nvsh: warning: {}", nccl_message("ncclMemFree", &e));
            }
        }
    }
}

/// An error unless an input of `src` and an output of `dest` elements have the same length.
fn same_length(what: &'static str, src: usize, dest: usize) -> Result<()> {
    if src == dest {
        return Ok(());
    }
    Err(Error::LengthMismatch { what, dest, src })
}

/// NCCL's reduction for ours (same semantics: Avg is the sum divided by the rank count).
fn nccl_op(op: ReduceOp) -> nccl_sys::ncclRedOp_t {
    use nccl_sys::ncclRedOp_t as N;
    match op {
        ReduceOp::Sum => N::ncclSum,
        ReduceOp::Prod => N::ncclProd,
        ReduceOp::Min => N::ncclMin,
        ReduceOp::Max => N::ncclMax,
        ReduceOp::Avg => N::ncclAvg,
    }
}

/// The benchmark reports' words for the baseline: "NCCL 2.27.3 (NCCL_NVLS_ENABLE=0)", or
/// "no NCCL" when it did not load.
pub fn nccl_label(version: Option<&str>, nvls_enable: Option<&str>) -> String {
    match (version, nvls_enable) {
        (Some(v), Some(nvls)) => format!("NCCL {v} (NCCL_NVLS_ENABLE={nvls})"),
        (Some(v), None) => format!("NCCL {v} (NCCL_NVLS_ENABLE unset)"),
        (None, _) => "no NCCL".to_string(),
    }
}

/// "2.27.3" from NCCL_VERSION_CODE (major*10000 + minor*100 + patch since 2.9, major*1000 +
/// minor*100 + patch before).
pub fn nccl_version_string(code: i32) -> String {
    let (major, rest) = if code >= 20900 {
        (code / 10000, code % 10000)
    } else {
        (code / 1000, code % 1000)
    };
    format!("{major}.{}.{}", rest / 100, rest % 100)
}

/// Whether cudarc can load NCCL here, with what to do when it cannot.
pub fn library_status() -> std::result::Result<(), String> {
    // SAFETY: only tries to load the library; cudarc panics on first use when it is missing.
    if unsafe { nccl_sys::is_culib_present() } {
        return Ok(());
    }
    // cudarc 0.19 looks for libnccl.so and libnccl.so.<CUDA major>, never NCCL's soname
    // libnccl.so.2, which is all that the libnccl2 package and the nvidia-nccl wheels install.
    Err(match loaded_path("libnccl.so.2") {
        Some(path) => format!(
            "{path} is installed but cudarc loads NCCL as libnccl.so: make a link named \
             libnccl.so to it in a directory on LD_LIBRARY_PATH"
        ),
        None => "libnccl.so.2 not found on the loader's path: install NCCL (the libnccl2 \
                 package, or the nvidia-nccl-cu13 wheel, whose lib folder is under `python3 -c \
                 'import nvidia.nccl as m; print(m.__path__[0])'`), add a link named libnccl.so \
                 to its libnccl.so.2 and put that folder on LD_LIBRARY_PATH"
            .into(),
    })
}

/// The file a library name loads from, if the dynamic loader finds it.
fn loaded_path(soname: &str) -> Option<String> {
    let name = std::ffi::CString::new(soname).ok()?;
    // SAFETY: dlopen/dlsym/dladdr/dlclose on a handle this function owns; the strings dladdr
    // returns are copied before dlclose.
    unsafe {
        let handle = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if handle.is_null() {
            return None;
        }
        let symbol = libc::dlsym(handle, c"ncclGetVersion".as_ptr());
        let mut info: libc::Dl_info = std::mem::zeroed();
        let path = if !symbol.is_null()
            && libc::dladdr(symbol, &mut info) != 0
            && !info.dli_fname.is_null()
        {
            CStr::from_ptr(info.dli_fname)
                .to_string_lossy()
                .into_owned()
        } else {
            soname.to_string()
        };
        libc::dlclose(handle);
        Some(path)
    }
}

fn nccl_message(call: &str, e: &nccl_result::NcclError) -> String {
    // SAFETY: an NcclError only comes from a call into the loaded library; ncclGetErrorString
    // returns a static string.
    let text = unsafe {
        let p = nccl_sys::ncclGetErrorString(e.0);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    format!("{call} failed: {:?} ({text})", e.0)
}

fn nccl_error(call: &str, e: &nccl_result::NcclError) -> Error {
    Error::Driver {
        message: format!("NCCL: {}", nccl_message(call, e)),
    }
}

/// Small host-side all-gathers through symmetric memory: each PE writes its bytes into its own
/// slot, and after a barrier every PE fetches every PE's slot with a blocking get. Used where
/// the PEs must agree (an NCCL id, whether a call failed anywhere, an iteration count).
pub(crate) struct HostExchange<'nv> {
    nv: &'nv Nvshmem,
    /// A stream of its own: waiting for its copies must not wait for the caller's work (which
    /// may be a kernel waiting for a PE that never launched its part).
    stream: Arc<CudaStream>,
    mine: SymmetricBuffer<'nv, u8>,
    all: SymmetricBuffer<'nv, u8>,
    width: usize,
}

impl<'nv> HostExchange<'nv> {
    /// Room for `width` bytes from each PE. Collective.
    pub(crate) fn new(nv: &'nv Nvshmem, width: usize) -> Result<Self> {
        let width = width.max(1);
        Ok(HostExchange {
            nv,
            stream: nv.context().new_stream()?,
            mine: nv.alloc::<u8>(width)?,
            all: nv.alloc::<u8>(width * nv.n_pes() as usize)?,
            width,
        })
    }

    /// Every PE's bytes (each `width` long, `mine` zero-padded), indexed by PE. Collective.
    pub(crate) fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        if mine.len() > self.width {
            return Err(Error::HostLengthMismatch {
                what: "host exchange",
                host: mine.len(),
                device: self.width,
            });
        }
        let mut padded = mine.to_vec();
        padded.resize(self.width, 0);
        let mut slot = self.mine.as_view();
        self.stream.memcpy_htod(&padded, &mut slot)?;
        // Landed before any peer reads it.
        self.stream.synchronize()?;
        self.nv.barrier_all()?;
        let w = self.width;
        for pe in 0..self.nv.n_pes() {
            let at = pe as usize * w;
            self.nv.get(self.all.view(at..at + w)?, &self.mine, pe)?;
        }
        let bytes = self.all.to_vec()?;
        // Nobody may overwrite its slot for the next exchange before everyone has read it.
        self.nv.barrier_all()?;
        Ok(bytes.chunks(w).map(<[u8]>::to_vec).collect())
    }

    /// The PEs whose `ok` was false (the same list on every PE). Collective.
    pub(crate) fn failed_pes(&self, ok: bool) -> Result<Vec<i32>> {
        Ok(self
            .all_gather(&[ok as u8])?
            .iter()
            .enumerate()
            .filter(|(_, b)| b[0] != 1)
            .map(|(pe, _)| pe as i32)
            .collect())
    }

    /// PE 0's `value` on every PE. Collective.
    pub(crate) fn broadcast_from_pe0(&self, value: u64) -> Result<u64> {
        let all = self.all_gather(&value.to_le_bytes())?;
        let mut word = [0u8; 8];
        word.copy_from_slice(&all[0][..8]);
        Ok(u64::from_le_bytes(word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::{BenchDtype, BenchElement};

    #[test]
    fn version_codes_of_old_and_new_nccl() {
        assert_eq!(nccl_version_string(22703), "2.27.3");
        assert_eq!(nccl_version_string(21003), "2.10.3");
        assert_eq!(nccl_version_string(2804), "2.8.4");
    }

    /// The bench type and the NCCL type its buffers are passed to NCCL as (cudarc's
    /// NcclType, which the baseline's calls take from the element type).
    fn nccl_type_of<T: BenchElement>() -> (BenchDtype, nccl_sys::ncclDataType_t) {
        (T::BENCH_DTYPE, T::as_nccl_type())
    }

    /// Every bench type reaches NCCL as its own ncclDataType_t, with NCCL's ABI code (what
    /// crosses into libnccl), so NCCL reduces and moves the same elements ours do.
    #[test]
    fn every_bench_type_goes_to_nccl_as_its_own_type() {
        use nccl_sys::ncclDataType_t::*;
        let got = [
            nccl_type_of::<f32>(),
            nccl_type_of::<half::bf16>(),
            nccl_type_of::<half::f16>(),
            nccl_type_of::<f64>(),
            nccl_type_of::<i32>(),
            nccl_type_of::<u32>(),
            nccl_type_of::<i64>(),
            nccl_type_of::<u64>(),
            nccl_type_of::<u8>(),
        ];
        let want = [
            (BenchDtype::F32, ncclFloat32, 7),
            (BenchDtype::Bf16, ncclBfloat16, 9),
            (BenchDtype::F16, ncclFloat16, 6),
            (BenchDtype::F64, ncclFloat64, 8),
            (BenchDtype::I32, ncclInt32, 2),
            (BenchDtype::U32, ncclUint32, 3),
            (BenchDtype::I64, ncclInt64, 4),
            (BenchDtype::U64, ncclUint64, 5),
            (BenchDtype::U8, ncclUint8, 1),
        ];
        for ((dtype, nccl), (want_dtype, want_nccl, code)) in got.into_iter().zip(want) {
            assert_eq!((dtype, nccl), (want_dtype, want_nccl));
            assert_eq!(nccl as u32, code, "{dtype:?}");
        }
        // Every bench type is in the table.
        let dtypes: Vec<BenchDtype> = got.iter().map(|&(d, _)| d).collect();
        assert_eq!(dtypes, BenchDtype::ALL);
    }

    /// NCCL's value of NCCL_WIN_COLL_SYMMETRIC (nccl.h of 2.27.3 and 2.28.9), and windows only
    /// from 2.27 with every symbol found, each refusal saying what is missing.
    #[test]
    fn windows_need_nccl_2_27_and_its_symbols() {
        assert_eq!(NCCL_WIN_COLL_SYMMETRIC, 1);
        let all = |_: &str| true;
        assert_eq!(window_support(22809, all), Ok(()));
        assert_eq!(window_support(22703, all), Ok(()));
        let old = window_support(22602, all).unwrap_err();
        assert_eq!(
            old,
            "NCCL 2.26.2 has no symmetric-memory windows (ncclCommWindowRegister came in 2.27.0)"
        );
        assert!(window_support(2804, all)
            .unwrap_err()
            .starts_with("NCCL 2.8.4 has no"));
        let no_register = |s: &str| s != "ncclCommWindowRegister";
        assert_eq!(
            window_support(22809, no_register).unwrap_err(),
            "NCCL 2.28.9 lacks ncclCommWindowRegister, which symmetric-memory windows need"
        );
        let none = |_: &str| false;
        assert!(window_support(22809, none)
            .unwrap_err()
            .contains("lacks ncclMemAlloc"));
    }

    /// Views of NCCL buffers stay inside them, as the symmetric buffers' do.
    #[test]
    fn nccl_buffer_views_stay_inside() {
        let base = 0x1000 as *mut f32;
        let buf = NcclBuf {
            ptr: base,
            len: 10,
            _buffer: PhantomData,
        };
        let v = buf.view(2..6).unwrap();
        assert_eq!((v.as_device_ptr() as usize, v.len()), (0x1008, 4));
        assert_eq!(v.num_bytes(), 16);
        assert_eq!(buf.view(0..10).unwrap().len(), 10);
        assert_eq!(buf.view(10..10).unwrap().len(), 0);
        let (start, end) = (5, 4);
        assert!(buf.view(0..11).is_err() && buf.view(start..end).is_err());
        assert!(v.view(0..5).is_err());
    }

    /// Each collective maps to its NCCL call with the reduction's own NCCL op.
    #[test]
    fn reductions_map_to_nccls_ops() {
        use nccl_sys::ncclRedOp_t as N;
        let ops: Vec<N> = ReduceOp::ALL.iter().map(|&op| nccl_op(op)).collect();
        assert_eq!(
            ops,
            [N::ncclSum, N::ncclProd, N::ncclMin, N::ncclMax, N::ncclAvg]
        );
        assert_eq!(same_length("x", 3, 3).ok(), Some(()));
        assert!(same_length("x", 3, 4).is_err());
    }

    #[test]
    fn missing_nccl_is_an_error_not_a_panic() {
        // Either outcome is fine; what matters is that asking never panics.
        match library_status() {
            Ok(()) => eprintln!("NCCL is loadable here"),
            Err(why) => assert!(why.contains("libnccl.so"), "{why}"),
        }
        assert!(loaded_path("libdefinitely-not-a-library.so.7").is_none());
    }
}
