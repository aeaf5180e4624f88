//! The collectives on tensors, in the caller's stream order.
//!
//! A tensor argument is read by duck typing (`data_ptr()`, `numel()`, `dtype`, `is_cuda`,
//! `device`, `is_contiguous()`), so that torch tensors work without this crate importing torch;
//! an `nvshmem_rs.SymmetricBuffer` is taken as it is. Memory inside a symmetric buffer of the
//! same dtype goes to the library as a symmetric view (peers address it directly: pass the
//! same buffer, at the same offset, on every PE); any other CUDA memory of this PE's GPU is the
//! caller's own, which the library stages through its workspace's symmetric area.
//!
//! The stream is a raw `cudaStream_t` as an int, an object with `cuda_stream` (a
//! `torch.cuda.Stream`), or None: torch's current stream on the device of the call's tensors,
//! read here ([`StreamArg`]). The calls only enqueue work on it, as the Rust API does.
//!
//! Each collective runs on a world workspace made at its first call: that first call is
//! collective over the world (symmetric allocation), as every call of it is anyway.

use crate::dtypes::{from_torch, torch_name};
use crate::error::{raise, runtime_error};
use crate::memory::{with_element, Allocation, SymmetricBuffer};
use crate::runtime::{with_collected_state, with_state};
use crate::state::{made, Registry, SLOT_BYTES};
use crate::teams::{team_id, workspaces_for, PyTeam};
use nvshmem::{
    Allgather, AllreduceAlgo, Alltoall, Broadcast, Dtype, Element, InBuf, Nvshmem, OutBuf, Reduce,
    ReduceOp, ReduceScatter, TeamBarrier,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;
use std::sync::{Arc, Mutex};

/// Runs `$body` with `$T` the element type of `$dtype`, a dtype the reductions take; u8 (which
/// they do not) gives [`reducible`]'s error.
macro_rules! with_reducible {
    ($dtype:expr, $what:expr, $T:ident => $body:expr) => {
        match $dtype {
            Dtype::F32 => {
                type $T = f32;
                $body
            }
            Dtype::F64 => {
                type $T = f64;
                $body
            }
            Dtype::F16 => {
                type $T = half::f16;
                $body
            }
            Dtype::Bf16 => {
                type $T = half::bf16;
                $body
            }
            Dtype::I32 => {
                type $T = i32;
                $body
            }
            Dtype::I64 => {
                type $T = i64;
                $body
            }
            Dtype::U32 => {
                type $T = u32;
                $body
            }
            Dtype::U64 => {
                type $T = u64;
                $body
            }
            Dtype::U8 => Err(reducible_error($what)),
        }
    };
}
pub(crate) use with_reducible;

/// The caller's stream ([`StreamArg`]) as the library takes it, torch's current stream on
/// the device of the first of `$tensors` that has one (else this PE's) where none was given.
macro_rules! borrowed_stream {
    ($py:expr, $nv:expr, $arg:expr, $tensors:expr) => {{
        let raw = $arg.raw($py, $tensors, $nv.device())?;
        // SAFETY: the caller passes a live stream of this GPU (torch's current stream by
        // default); it outlives the call, which only enqueues work on it.
        unsafe { $nv.borrowed_stream(raw as nvshmem::sys::cudaStream_t) }
    }};
}
pub(crate) use borrowed_stream;

/// A call's `stream` argument: a raw `cudaStream_t` (an int, or read from an object's
/// `cuda_stream`, as a `torch.cuda.Stream` has), or torch's current stream (None).
#[derive(Clone, Copy)]
pub(crate) enum StreamArg {
    Raw(usize),
    Current,
}

/// torch's `_cuda_getCurrentRawStream(device)` (what its compiled code calls: an int, no
/// Stream object), looked up once torch is loaded.
static CURRENT_RAW_STREAM: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

impl StreamArg {
    /// Reads `stream` of call `what`; an error names what it is instead.
    pub(crate) fn read(what: &str, stream: Option<&Bound<'_, PyAny>>) -> PyResult<StreamArg> {
        let Some(obj) = stream else {
            return Ok(StreamArg::Current);
        };
        let raw = match obj.extract::<usize>() {
            Ok(raw) => Ok(raw),
            Err(_) => obj
                .getattr(intern!(obj.py(), "cuda_stream"))
                .and_then(|s| s.extract::<usize>()),
        };
        raw.map(StreamArg::Raw).map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}: stream must be a cudaStream_t as an int, an object with cuda_stream \
                 (torch.cuda.Stream) or None (torch's current stream), not {}",
                type_name(obj)
            ))
        })
    }

    /// The raw handle: as given; else torch's current stream on the device of the first of
    /// `tensors` that has one (else on `pe_device`, this PE's) where torch is loaded (never
    /// imported here: without it the caller's tensors are not torch's), else 0 (the default
    /// stream).
    pub(crate) fn raw(
        self,
        py: Python<'_>,
        tensors: &[&Tensor],
        pe_device: i32,
    ) -> PyResult<usize> {
        if let StreamArg::Raw(raw) = self {
            return Ok(raw);
        }
        let device = tensors.iter().find_map(|t| t.device).unwrap_or(pe_device);
        if let Some(f) = CURRENT_RAW_STREAM.get(py) {
            return f.bind(py).call1((device,))?.extract();
        }
        let modules = py
            .import(intern!(py, "sys"))?
            .getattr(intern!(py, "modules"))?;
        let Ok(torch) = modules.get_item(intern!(py, "torch")) else {
            return Ok(0);
        };
        match torch
            .getattr(intern!(py, "_C"))?
            .getattr(intern!(py, "_cuda_getCurrentRawStream"))
        {
            Ok(f) => {
                let f = CURRENT_RAW_STREAM.get_or_init(py, || f.unbind());
                f.bind(py).call1((device,))?.extract()
            }
            // An older torch: its public API.
            Err(_) => torch
                .getattr(intern!(py, "cuda"))?
                .call_method1(intern!(py, "current_stream"), (device,))?
                .getattr(intern!(py, "cuda_stream"))?
                .extract(),
        }
    }
}

/// A tensor argument, read.
pub(crate) struct Tensor {
    pub(crate) ptr: usize,
    pub(crate) numel: usize,
    pub(crate) dtype: Dtype,
    /// Its CUDA device where the object says (torch's `device.index`).
    pub(crate) device: Option<i32>,
    /// A SymmetricBuffer passed as it is: held for the call.
    _alloc: Option<Arc<Allocation>>,
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Reads argument `which` ("input", "output", "tensor") of `what` by duck typing. Called on
/// every collective, so a torch.Tensor is read with as few Python calls as it takes (its
/// `get_device()` gives the device as an int; the dtype object is looked up in a cache), and
/// the texts of the errors are only made when one is raised.
pub(crate) fn tensor<'py>(what: &str, which: &str, obj: &Bound<'py, PyAny>) -> PyResult<Tensor> {
    if let Ok(buf) = obj.cast::<SymmetricBuffer>() {
        let alloc = buf.get().allocation().clone();
        alloc.alive(obj.py(), what)?;
        return Ok(Tensor {
            ptr: alloc.addr(),
            numel: alloc.len(),
            dtype: alloc.dtype(),
            device: Some(alloc.device()),
            _alloc: Some(alloc),
        });
    }
    // Interned names: each call of a collective reads these, and a name made from a &str
    // each time costs an allocation and a hash per attribute.
    let py = obj.py();
    let get = |attr: &Bound<'py, PyString>| {
        obj.getattr(attr).map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}: the {which} must be a CUDA torch.Tensor or an \
                 nvshmem_rs.SymmetricBuffer (an object with data_ptr(), numel(), dtype, \
                 is_cuda and device), not {} (it has no {attr})",
                type_name(obj)
            ))
        })
    };
    let data_ptr = get(intern!(py, "data_ptr"))?;
    let numel = get(intern!(py, "numel"))?;
    let dtype = get(intern!(py, "dtype"))?;
    let device_text = || {
        obj.getattr(intern!(py, "device"))
            .ok()
            .and_then(|d| d.str().ok())
            .map(|s| s.to_string())
    };
    let is_cuda = match obj.getattr(intern!(py, "is_cuda")) {
        Ok(v) => v.is_truthy()?,
        Err(_) => device_text().is_some_and(|d| d.starts_with("cuda")),
    };
    if !is_cuda {
        return Err(PyValueError::new_err(format!(
            "{what}: the {which} is on {}, not on a CUDA device; nvshmem_rs moves CUDA tensors \
             of this PE's GPU (tensor.cuda(nvshmem_rs.device()))",
            device_text().as_deref().unwrap_or("the host")
        )));
    }
    if let Ok(contiguous) = obj.getattr(intern!(py, "is_contiguous")) {
        if !contiguous.call0()?.is_truthy()? {
            return Err(PyValueError::new_err(format!(
                "{what}: the {which} is not contiguous; the collectives move one dense range \
                 (pass tensor.contiguous())"
            )));
        }
    }
    let dtype = cached_dtype(&dtype).map_err(|e| {
        PyValueError::new_err(format!("{what}: the {which}'s dtype: {}", e.value(py)))
    })?;
    let ptr = data_ptr.call0()?.extract::<usize>()?;
    let numel = numel.call0()?.extract::<usize>()?;
    // torch.Tensor.get_device(): the CUDA index as an int (-1 on the CPU), one call where
    // `device.index` takes two and makes a torch.device.
    let device = match obj.getattr(intern!(py, "get_device")) {
        Ok(f) => Some(f.call0()?.extract::<i32>()?).filter(|&d| d >= 0),
        Err(_) => match obj.getattr(intern!(py, "device")) {
            Ok(d) if d.hasattr(intern!(py, "index"))? => {
                d.getattr(intern!(py, "index"))?.extract::<Option<i32>>()?
            }
            _ => None,
        },
    };
    Ok(Tensor {
        ptr,
        numel,
        dtype,
        device,
        _alloc: None,
    })
}

/// The dtypes read so far, by object: torch's dtypes are singletons, so after the first
/// call of each the lookup is an identity comparison instead of `str()` and a parse.
static DTYPES: Mutex<Vec<(Py<PyAny>, Dtype)>> = Mutex::new(Vec::new());

/// [`from_torch`] through [`DTYPES`]; strings (and anything that fails) are not cached.
fn cached_dtype(dtype: &Bound<'_, PyAny>) -> PyResult<Dtype> {
    let mut cache = DTYPES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, d)) = cache.iter().find(|(o, _)| o.as_ptr() == dtype.as_ptr()) {
        return Ok(*d);
    }
    let d = from_torch(dtype)?;
    if !dtype.is_instance_of::<PyString>() && cache.len() < 64 {
        cache.push((dtype.clone().unbind(), d));
    }
    Ok(d)
}

/// An error unless the reductions take `dtype` (every dtype but u8).
pub(crate) fn reducible(what: &str, dtype: Dtype) -> PyResult<()> {
    match dtype {
        Dtype::U8 => Err(reducible_error(what)),
        _ => Ok(()),
    }
}

pub(crate) fn reducible_error(what: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "{what}: uint8 (u8) tensors cannot be reduced; the reductions take {}",
        Dtype::ALL
            .iter()
            .filter(|&&d| d != Dtype::U8)
            .map(|&d| torch_name(d))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Input and output of one dtype.
pub(crate) fn same_dtype(what: &str, input: &Tensor, output: &Tensor) -> PyResult<()> {
    if input.dtype != output.dtype {
        return Err(PyTypeError::new_err(format!(
            "{what}: the input is {} and the output {}; pass tensors of one dtype",
            torch_name(input.dtype),
            torch_name(output.dtype)
        )));
    }
    Ok(())
}

/// Input and output of one length (the element-wise collectives).
pub(crate) fn same_numel(what: &str, input: &Tensor, output: &Tensor) -> PyResult<()> {
    if input.numel != output.numel {
        return Err(PyValueError::new_err(format!(
            "{what}: the input holds {} elements and the output {}; they must hold as many",
            input.numel, output.numel
        )));
    }
    Ok(())
}

pub(crate) fn parse_op(what: &str, op: &str) -> PyResult<ReduceOp> {
    ReduceOp::ALL
        .into_iter()
        .find(|o| o.name() == op)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "{what}: unknown op {op:?}; expected one of {}",
                ReduceOp::ALL.map(ReduceOp::name).join(", ")
            ))
        })
}

/// The tensors on this PE's GPU, where they say which device they are on.
pub(crate) fn on_device(
    py: Python<'_>,
    nv: &Nvshmem,
    what: &str,
    tensors: &[&Tensor],
) -> PyResult<()> {
    for t in tensors {
        if let Some(d) = t.device {
            if d != nv.device() {
                return Err(raise(
                    py,
                    "WrongDevice",
                    format!(
                        "{what}: a tensor is on cuda:{d}, but this PE runs on cuda:{} \
                         (nvshmem_rs.device()); move it there",
                        nv.device()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// What the library reads: the symmetric view where the tensor lies in a buffer of its
/// dtype, else the caller's own memory (staged).
pub(crate) fn in_buf<'a, T: Element>(buffers: &'a Registry, t: &Tensor) -> InBuf<'a, T> {
    match buffers.view::<T>(t.ptr, t.numel) {
        Some(view) => view.into(),
        // SAFETY: CUDA memory of `numel` elements that the caller owns and orders on the
        // stream it passed (the library checks that it is device memory of this PE's GPU
        // holding that many bytes).
        None => unsafe { InBuf::from_raw(t.ptr as *const T, t.numel) },
    }
}

/// What the library writes, as [`in_buf`].
pub(crate) fn out_buf<'a, T: Element>(buffers: &'a Registry, t: &Tensor) -> OutBuf<'a, T> {
    match buffers.view::<T>(t.ptr, t.numel) {
        Some(view) => view.into(),
        // SAFETY: as in in_buf, for memory the call writes.
        None => unsafe { OutBuf::from_raw(t.ptr as *mut T, t.numel) },
    }
}

/// output = op(tensor of every PE), element-wise; in place on `tensor` when `output` is None.
/// op: "sum", "prod", "min", "max", "avg"; algo: "auto", "oneshot", "twoshot", "ring", "rd".
/// Runs on `stream` (default: torch's current stream), over `team` (a Team from
/// split_strided; default every PE), and returns the algorithm used.
///
/// nvshmem_rs.allreduce is this function itself, with no Python wrapper: the hot path of a
/// training step, where each Python frame costs a fraction of a microsecond.
#[pyfunction]
#[pyo3(signature = (tensor, output = None, op = "sum", algo = "auto", stream = None, team = None))]
pub(crate) fn allreduce(
    py: Python<'_>,
    tensor: &Bound<'_, PyAny>,
    output: Option<&Bound<'_, PyAny>>,
    op: &str,
    algo: &str,
    stream: Option<&Bound<'_, PyAny>>,
    team: Option<&Bound<'_, PyTeam>>,
) -> PyResult<&'static str> {
    let what = "allreduce";
    let i = self::tensor(what, "input", tensor)?;
    let o = output
        .map(|o| self::tensor(what, "output", o))
        .transpose()?;
    reducible(what, i.dtype)?;
    if let Some(o) = &o {
        same_dtype(what, &i, o)?;
        same_numel(what, &i, o)?;
    }
    let op = parse_op(what, op)?;
    let algo =
        AllreduceAlgo::parse(algo).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))?;
    let stream = StreamArg::read(what, stream)?;
    with_state(py, what, |nv, state| {
        let mut all = vec![&i];
        all.extend(o.as_ref());
        on_device(py, nv, what, &all)?;
        let stream = borrowed_stream!(py, nv, stream, &all);
        let slot = state.colls.slot_bytes.unwrap_or(SLOT_BYTES);
        let ar = made(
            &mut workspaces_for(py, &mut state.colls, &mut state.teams, team_id(team))?.allreduce,
            || nv.allreduce_workspace(slot),
        )
        .map_err(|e| runtime_error(py, e))?;
        let buffers = &state.buffers;
        let used = with_reducible!(i.dtype, what, T => {
            match &o {
                None => ar.run_in_place(out_buf::<T>(buffers, &i), op, algo, &stream),
                Some(o) => ar.run(
                    in_buf::<T>(buffers, &i),
                    out_buf::<T>(buffers, o),
                    op,
                    algo,
                    &stream,
                ),
            }
            .map_err(|e| runtime_error(py, e))
        })?;
        Ok(used.name())
    })
}

/// Input and output of a call whose output may be omitted (in place): the output read, the
/// pair checked to be alike when `elementwise`.
pub(crate) fn pair(
    what: &str,
    input: &Bound<'_, PyAny>,
    output: Option<&Bound<'_, PyAny>>,
    elementwise: bool,
) -> PyResult<(Tensor, Option<Tensor>)> {
    let i = tensor(what, "input", input)?;
    let o = output.map(|o| tensor(what, "output", o)).transpose()?;
    if let Some(o) = &o {
        same_dtype(what, &i, o)?;
        if elementwise {
            same_numel(what, &i, o)?;
        }
    }
    Ok((i, o))
}

/// Every member's `output` = the root's `input`; in place on `input` when `output` is None.
/// `root` is a PE number.
#[pyfunction]
#[pyo3(signature = (input, output = None, root = 0, stream = None, team = None))]
pub(crate) fn broadcast(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    output: Option<&Bound<'_, PyAny>>,
    root: i32,
    stream: Option<&Bound<'_, PyAny>>,
    team: Option<&Bound<'_, PyTeam>>,
) -> PyResult<()> {
    let what = "broadcast";
    let (i, o) = pair(what, input, output, true)?;
    let stream = StreamArg::read(what, stream)?;
    with_state(py, what, |nv, state| {
        let io = [&i, o.as_ref().unwrap_or(&i)];
        on_device(py, nv, what, &io)?;
        let stream = borrowed_stream!(py, nv, stream, &io);
        let bc = made(
            &mut workspaces_for(py, &mut state.colls, &mut state.teams, team_id(team))?.broadcast,
            || Broadcast::world(nv),
        )
        .map_err(|e| runtime_error(py, e))?;
        let buffers = &state.buffers;
        let o = o.as_ref().unwrap_or(&i);
        with_element!(i.dtype, T => {
            bc.run(in_buf::<T>(buffers, &i), out_buf::<T>(buffers, o), root, &stream)
        })
        .map_err(|e| runtime_error(py, e))
    })
}

/// The root's `output` = op(`input` of every member) element-wise (other members' outputs
/// are left alone); in place on `input` when `output` is None.
#[pyfunction]
#[pyo3(signature = (input, output = None, root = 0, op = "sum", stream = None, team = None))]
pub(crate) fn reduce(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    output: Option<&Bound<'_, PyAny>>,
    root: i32,
    op: &str,
    stream: Option<&Bound<'_, PyAny>>,
    team: Option<&Bound<'_, PyTeam>>,
) -> PyResult<()> {
    let what = "reduce";
    let (i, o) = pair(what, input, output, true)?;
    reducible(what, i.dtype)?;
    let op = parse_op(what, op)?;
    let stream = StreamArg::read(what, stream)?;
    with_state(py, what, |nv, state| {
        let io = [&i, o.as_ref().unwrap_or(&i)];
        on_device(py, nv, what, &io)?;
        let stream = borrowed_stream!(py, nv, stream, &io);
        let slot = state.colls.slot_bytes.unwrap_or(SLOT_BYTES);
        let r = made(
            &mut workspaces_for(py, &mut state.colls, &mut state.teams, team_id(team))?.reduce,
            || Reduce::world(nv, slot),
        )
        .map_err(|e| runtime_error(py, e))?;
        let buffers = &state.buffers;
        let o = o.as_ref().unwrap_or(&i);
        with_reducible!(i.dtype, what, T => {
            r.run(in_buf::<T>(buffers, &i), out_buf::<T>(buffers, o), op, root, &stream)
                .map_err(|e| runtime_error(py, e))
        })
    })
}

/// Block r of `output` (world_size x input.numel() elements) = PE r's `input`, on every PE.
#[pyfunction]
#[pyo3(signature = (input, output, stream = None, team = None))]
pub(crate) fn allgather(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    output: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    team: Option<&Bound<'_, PyTeam>>,
) -> PyResult<()> {
    let what = "allgather";
    let (i, o) = pair(what, input, Some(output), false)?;
    let o = o.unwrap_or_else(|| unreachable!("an output was given"));
    let stream = StreamArg::read(what, stream)?;
    with_state(py, what, |nv, state| {
        on_device(py, nv, what, &[&i, &o])?;
        let stream = borrowed_stream!(py, nv, stream, &[&i, &o]);
        let ag = made(
            &mut workspaces_for(py, &mut state.colls, &mut state.teams, team_id(team))?.allgather,
            || Allgather::world(nv),
        )
        .map_err(|e| runtime_error(py, e))?;
        let buffers = &state.buffers;
        with_element!(i.dtype, T => {
            ag.run(in_buf::<T>(buffers, &i), out_buf::<T>(buffers, &o), &stream)
        })
        .map_err(|e| runtime_error(py, e))
    })
}

/// `output` = op over PEs of block [rank] of their `input` (world_size x output.numel()
/// elements), element-wise.
#[pyfunction]
#[pyo3(signature = (input, output, op = "sum", stream = None, team = None))]
pub(crate) fn reduce_scatter(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    output: &Bound<'_, PyAny>,
    op: &str,
    stream: Option<&Bound<'_, PyAny>>,
    team: Option<&Bound<'_, PyTeam>>,
) -> PyResult<()> {
    let what = "reduce_scatter";
    let (i, o) = pair(what, input, Some(output), false)?;
    let o = o.unwrap_or_else(|| unreachable!("an output was given"));
    reducible(what, i.dtype)?;
    let op = parse_op(what, op)?;
    let stream = StreamArg::read(what, stream)?;
    with_state(py, what, |nv, state| {
        on_device(py, nv, what, &[&i, &o])?;
        let stream = borrowed_stream!(py, nv, stream, &[&i, &o]);
        let slot = state.colls.slot_bytes.unwrap_or(SLOT_BYTES);
        let rs = made(
            &mut workspaces_for(py, &mut state.colls, &mut state.teams, team_id(team))?
                .reduce_scatter,
            || ReduceScatter::world(nv, slot),
        )
        .map_err(|e| runtime_error(py, e))?;
        let buffers = &state.buffers;
        with_reducible!(i.dtype, what, T => {
            rs.run(in_buf::<T>(buffers, &i), out_buf::<T>(buffers, &o), op, &stream)
                .map_err(|e| runtime_error(py, e))
        })
    })
}

/// Block s of `output` = block [rank] of PE s's `input`; both hold world_size blocks of one
/// length and must not overlap.
#[pyfunction]
#[pyo3(signature = (input, output, stream = None, team = None))]
pub(crate) fn alltoall(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    output: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    team: Option<&Bound<'_, PyTeam>>,
) -> PyResult<()> {
    let what = "alltoall";
    let (i, o) = pair(what, input, Some(output), true)?;
    let o = o.unwrap_or_else(|| unreachable!("an output was given"));
    let stream = StreamArg::read(what, stream)?;
    with_state(py, what, |nv, state| {
        on_device(py, nv, what, &[&i, &o])?;
        let stream = borrowed_stream!(py, nv, stream, &[&i, &o]);
        let aa = made(
            &mut workspaces_for(py, &mut state.colls, &mut state.teams, team_id(team))?.alltoall,
            || Alltoall::world(nv),
        )
        .map_err(|e| runtime_error(py, e))?;
        let buffers = &state.buffers;
        with_element!(i.dtype, T => {
            aa.run(in_buf::<T>(buffers, &i), out_buf::<T>(buffers, &o), &stream)
        })
        .map_err(|e| runtime_error(py, e))
    })
}

/// A barrier over every PE in stream order: work queued on `stream` after it starts once every
/// PE reached it, and what each PE issued before it is then visible to all.
#[pyfunction]
#[pyo3(signature = (stream = None, team = None))]
pub(crate) fn barrier(
    py: Python<'_>,
    stream: Option<&Bound<'_, PyAny>>,
    team: Option<&Bound<'_, PyTeam>>,
) -> PyResult<()> {
    let team = team_id(team);
    let stream = StreamArg::read("barrier", stream)?;
    with_state(py, "barrier", |nv, state| {
        let stream = borrowed_stream!(py, nv, stream, &[]);
        made(
            &mut workspaces_for(py, &mut state.colls, &mut state.teams, team)?.barrier,
            || TeamBarrier::world(nv),
        )
        .and_then(|b| b.run(&stream))
        .map_err(|e| runtime_error(py, e))
    })
}

/// Waits on the host for every PE (after completing this PE's outstanding operations), at
/// most the runtime's timeout; a PE that does not come raises a Timeout naming it.
#[pyfunction]
pub(crate) fn barrier_all(py: Python<'_>) -> PyResult<()> {
    with_collected_state(py, "barrier_all", |nv, _| {
        nv.barrier_all().map_err(|e| runtime_error(py, e))
    })
}

/// Raises the failure that a kernel recorded without synchronising: a wait past its deadline
/// (the error names the PE that did not come) or, in checked mode, a PE with other arguments.
/// The collectives only enqueue work, so their failures show here (or in the next call).
#[pyfunction]
pub(crate) fn check(py: Python<'_>) -> PyResult<()> {
    with_state(py, "check", |nv, state| {
        nv.check()
            .and_then(|()| state.colls.check())
            .and_then(|()| state.teams.values().try_for_each(|t| t.colls.check()))
            .map_err(|e| runtime_error(py, e))
    })
}

/// Sets the receive-slot bytes of the collectives' workspaces (allreduce, reduce,
/// reduce-scatter): messages larger than a slot go in segments of its size. Every PE passes
/// the same value before its first collective call (the workspaces are made then, collectively,
/// and keep their shape); afterwards it raises. Returns the value in force.
#[pyfunction]
#[pyo3(signature = (slot_bytes = None))]
pub(crate) fn configure(py: Python<'_>, slot_bytes: Option<usize>) -> PyResult<usize> {
    with_state(py, "configure", |_, state| {
        if let Some(bytes) = slot_bytes {
            if bytes == 0 {
                return Err(PyValueError::new_err(
                    "configure: slot_bytes must be at least 1 (the workspace rounds it up to \
                     4 KiB)",
                ));
            }
            if state.colls.any_made() && state.colls.slot_bytes.unwrap_or(SLOT_BYTES) != bytes {
                return Err(PyValueError::new_err(
                    "configure: the collectives' workspaces are made already (at the first \
                     collective call) and keep their slots; call configure() before it, on \
                     every PE",
                ));
            }
            state.colls.slot_bytes = Some(bytes);
        }
        Ok(state.colls.slot_bytes.unwrap_or(SLOT_BYTES))
    })
}

/// The bench's reference for the Python call's overhead: `iters` in-place allreduces of
/// `tensor` enqueued by a loop in Rust (the argument read once, then the library's call alone,
/// as a Rust program makes it), timed on the host. Returns the seconds the loop took; nothing
/// waits for the GPU. Keep `iters` below what the GPU's launch queue holds (a few hundred),
/// else the loop waits for the GPU and times that instead.
#[pyfunction]
#[pyo3(signature = (tensor, iters, op = "sum", algo = "auto", stream = 0))]
pub(crate) fn _allreduce_host_loop(
    py: Python<'_>,
    tensor: &Bound<'_, PyAny>,
    iters: usize,
    op: &str,
    algo: &str,
    stream: usize,
) -> PyResult<f64> {
    let what = "_allreduce_host_loop";
    let t = self::tensor(what, "input", tensor)?;
    reducible(what, t.dtype)?;
    let op = parse_op(what, op)?;
    let algo =
        AllreduceAlgo::parse(algo).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))?;
    with_state(py, what, |nv, state| {
        on_device(py, nv, what, &[&t])?;
        let stream = borrowed_stream!(py, nv, StreamArg::Raw(stream), &[]);
        let slot = state.colls.slot_bytes.unwrap_or(SLOT_BYTES);
        let ar = made(&mut state.colls.allreduce, || nv.allreduce_workspace(slot))
            .map_err(|e| runtime_error(py, e))?;
        let buffers = &state.buffers;
        with_reducible!(t.dtype, what, T => {
            // As a Rust program holds it: the view made once (a symmetric tensor), or the
            // caller's own memory (staged).
            let view = buffers.view::<T>(t.ptr, t.numel);
            let start = std::time::Instant::now();
            for _ in 0..iters {
                match view {
                    Some(v) => ar.run_in_place(v, op, algo, &stream),
                    // SAFETY: as in out_buf.
                    None => ar.run_in_place(
                        unsafe { OutBuf::from_raw(t.ptr as *mut T, t.numel) },
                        op,
                        algo,
                        &stream,
                    ),
                }
                .map_err(|e| runtime_error(py, e))?;
            }
            Ok(start.elapsed().as_secs_f64())
        })
    })
}
