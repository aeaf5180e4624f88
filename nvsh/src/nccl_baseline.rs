//! NCCL as the collective benchmarks' baseline: one communicator over the job's PEs, in the same
//! process, on the same GPUs and stream as NVSHMEM, bootstrapped through NVSHMEM itself (PE 0's
//! NCCL unique id travels through symmetric memory), so no MPI or second launcher is needed.
//! Each collective is NCCL's regular call on the symmetric buffers directly; alltoall is one
//! group of sends and receives, as nccl-tests times it.
//!
//! NCCL comes through cudarc's `nccl` module, which loads libnccl at run time: builds need no
//! NCCL, and a missing library is an error here, never a panic.

use cudarc::driver::CudaStream;
use cudarc::nccl::{result as nccl_result, safe as nccl, sys as nccl_sys, NcclType};
use nvshmem::coll::op::{ReduceOp, Reducible};
use nvshmem::core::buffer::{SymView, SymmetricBuffer};
use nvshmem::core::element::Element;
use nvshmem::core::error::{Error, Result};
use nvshmem::core::runtime::Nvshmem;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::sync::Arc;

/// Bytes of an NCCL unique id (`ncclUniqueId`).
const NCCL_ID_BYTES: usize = 128;

/// An NCCL communicator over every PE of the job, rank = PE number.
pub struct NcclBaseline<'nv> {
    comm: nccl::Comm,
    version: i32,
    /// The communicator uses the runtime's device and must go before NVSHMEM is finalised.
    _nv: PhantomData<&'nv Nvshmem>,
}

impl std::fmt::Debug for NcclBaseline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclBaseline")
            .field("rank", &self.comm.rank())
            .field("world_size", &self.comm.world_size())
            .field("version", &self.version_string())
            .finish()
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
        let mut internal = [0 as std::ffi::c_char; NCCL_ID_BYTES];
        for (dst, &src) in internal.iter_mut().zip(&all[0][1..]) {
            *dst = src as std::ffi::c_char;
        }
        let comm = nccl::Comm::from_rank(
            stream.clone(),
            me as usize,
            nv.n_pes() as usize,
            nccl::Id::uninit(internal),
        )
        .map_err(|e| nccl_error("ncclCommInitRank", &e))?;
        let version =
            nccl_result::get_nccl_version().map_err(|e| nccl_error("ncclGetVersion", &e))?;
        Ok(NcclBaseline {
            comm,
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

    /// `output = op(input of every PE)` through `ncclAllReduce`, on the communicator's stream.
    /// Collective, like [`nvshmem::Allreduce::run`]; the symmetric buffers are used directly.
    pub fn all_reduce<'a, 'b, T: Reducible + NcclType>(
        &self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        op: ReduceOp,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        same_length("NCCL allreduce", &input, &output)?;
        self.comm
            .all_reduce(&input, &mut output, &nccl_op(op))
            .map_err(|e| nccl_error("ncclAllReduce", &e))?;
        Ok(())
    }

    /// `output` = the root's `input` on every rank through `ncclBroadcast` (`input` is read at
    /// the root only). Collective, like [`nvshmem::Broadcast::run`].
    pub fn broadcast<'a, 'b, T: Element + NcclType>(
        &self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        root: i32,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        same_length("NCCL broadcast", &input, &output)?;
        self.comm
            .broadcast(Some(&input), &mut output, root)
            .map_err(|e| nccl_error("ncclBroadcast", &e))?;
        Ok(())
    }

    /// Block `[r]` of `output` (n x input.len() elements) = rank r's `input`, through
    /// `ncclAllGather`. Collective, like [`nvshmem::Allgather::run`].
    pub fn all_gather<'a, 'b, T: Element + NcclType>(
        &self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        self.blocks("NCCL allgather", "output", output.len(), input.len())?;
        self.comm
            .all_gather(&input, &mut output)
            .map_err(|e| nccl_error("ncclAllGather", &e))?;
        Ok(())
    }

    /// `output` = op over ranks of block [my rank] of their `input` (n x output.len()
    /// elements), through `ncclReduceScatter`. Collective, like [`nvshmem::ReduceScatter::run`].
    pub fn reduce_scatter<'a, 'b, T: Reducible + NcclType>(
        &self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        op: ReduceOp,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        self.blocks("NCCL reduce-scatter", "input", input.len(), output.len())?;
        self.comm
            .reduce_scatter(&input, &mut output, &nccl_op(op))
            .map_err(|e| nccl_error("ncclReduceScatter", &e))?;
        Ok(())
    }

    /// At the root, `output` = op over ranks of their `input`, through `ncclReduce`; NCCL
    /// ignores `output` on the other ranks. Collective, like [`nvshmem::Reduce::run`].
    pub fn reduce<'a, 'b, T: Reducible + NcclType>(
        &self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        op: ReduceOp,
        root: i32,
    ) -> Result<()> {
        let (input, mut output) = (input.into(), output.into());
        same_length("NCCL reduce", &input, &output)?;
        self.comm
            .reduce(&input, Some(&mut output), &nccl_op(op), root)
            .map_err(|e| nccl_error("ncclReduce", &e))?;
        Ok(())
    }

    /// Block `[s]` of `output` = block `[my rank]` of rank s's `input` (both n blocks of the same
    /// length): one `ncclSend` and one `ncclRecv` per rank in one group, as nccl-tests' alltoall.
    /// Collective, like [`nvshmem::Alltoall::run`].
    pub fn all_to_all<'a, 'b, T: Element + NcclType>(
        &self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
    ) -> Result<()> {
        let (input, output) = (input.into(), output.into());
        let n = self.world_size();
        let count = input.len() / n.max(1);
        self.blocks("NCCL alltoall", "input", input.len(), count)?;
        self.blocks("NCCL alltoall", "output", output.len(), count)?;
        nccl_result::group_start().map_err(|e| nccl_error("ncclGroupStart", &e))?;
        let queued = (0..n).try_for_each(|peer| {
            let send = input.view(peer * count..(peer + 1) * count)?;
            let mut recv = output.view(peer * count..(peer + 1) * count)?;
            self.comm
                .send(&send, peer as i32)
                .map_err(|e| nccl_error("ncclSend", &e))?;
            self.comm
                .recv(&mut recv, peer as i32)
                .map_err(|e| nccl_error("ncclRecv", &e))?;
            Ok(())
        });
        // The group is closed even when queueing failed, so later NCCL calls are not grouped.
        let ended = nccl_result::group_end().map_err(|e| nccl_error("ncclGroupEnd", &e));
        queued.and(ended.map(|_| ()))
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

    /// This PE's rank in the communicator (its PE number).
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Ranks in the communicator (the PE count).
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// The stream the communicator's calls are issued on.
    pub fn stream(&self) -> Arc<CudaStream> {
        self.comm.stream()
    }

    /// The loaded NCCL's version, "major.minor.patch".
    pub fn version_string(&self) -> String {
        nccl_version_string(self.version)
    }
}

/// An error unless `input` and `output` have the same length.
fn same_length<T: Element>(
    what: &'static str,
    input: &SymView<'_, T>,
    output: &SymView<'_, T>,
) -> Result<()> {
    if input.len() == output.len() {
        return Ok(());
    }
    Err(Error::LengthMismatch {
        what,
        dest: output.len(),
        src: input.len(),
    })
}

/// NCCL's reduction for ours (same semantics: Avg is the sum divided by the rank count).
fn nccl_op(op: ReduceOp) -> nccl::ReduceOp {
    match op {
        ReduceOp::Sum => nccl::ReduceOp::Sum,
        ReduceOp::Prod => nccl::ReduceOp::Prod,
        ReduceOp::Min => nccl::ReduceOp::Min,
        ReduceOp::Max => nccl::ReduceOp::Max,
        ReduceOp::Avg => nccl::ReduceOp::Avg,
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
