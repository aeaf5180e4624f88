//! The tuner from Python: `tune_allreduce` times our allreduce algorithms, and candidates of
//! the caller's own (Python callables that enqueue one call, a torch op say), on the same
//! buffers and stream, with the library's `Tuner` (the median over runs of each run's slowest
//! PE, the same figures on every PE).

use crate::coll::{
    borrowed_stream, on_device, parse_op, reducible, reducible_error, same_dtype, same_numel,
    tensor, with_reducible, StreamArg,
};
use crate::error::runtime_error;
use crate::runtime::with_state;
use crate::state::made;
use nvshmem::{AllreduceAlgo, Dtype, Tuner, UserCandidate};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::cell::RefCell;

/// Receive slots of the allreduce workspace if the tuner makes it (as coll.rs's default).
const SLOT_BYTES: usize = 1 << 20;

/// Times `algos` of our allreduce (default: every algorithm) on `input` -> `output` (both
/// symmetric tensors of one dtype and length) with `op`, then `candidates`: a dict of name ->
/// callable(stream) that enqueues one call of the caller's own on the raw stream handle it is
/// given (it must not call nvshmem_rs, and must be collective like ours). `warmup` untimed and
/// `runs` timed runs per candidate. Collective: every PE, the same arguments and candidates in
/// the same order. Returns (winner, {name: microseconds}); the output is undefined afterwards.
#[pyfunction]
#[pyo3(signature = (input, output, op = "sum", algos = None, candidates = None, warmup = 3,
                    runs = 10, stream = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn tune_allreduce<'py>(
    py: Python<'py>,
    input: &Bound<'py, PyAny>,
    output: &Bound<'py, PyAny>,
    op: &str,
    algos: Option<Vec<String>>,
    candidates: Option<&Bound<'py, PyDict>>,
    warmup: usize,
    runs: usize,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyResult<(String, Bound<'py, PyDict>)> {
    let what = "tune_allreduce";
    let i = tensor(what, "input", input)?;
    let o = tensor(what, "output", output)?;
    reducible(what, i.dtype)?;
    same_dtype(what, &i, &o)?;
    same_numel(what, &i, &o)?;
    let op = parse_op(what, op)?;
    let algos = match algos {
        None => AllreduceAlgo::ALL.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| AllreduceAlgo::parse(n))
            .collect::<nvshmem::Result<Vec<_>>>()
            .map_err(|e| PyValueError::new_err(format!("{what}: {e}")))?,
    };
    if runs == 0 {
        return Err(PyValueError::new_err(format!(
            "{what}: runs must be at least 1"
        )));
    }
    let user: Vec<(String, Bound<'py, PyAny>)> = match candidates {
        None => Vec::new(),
        Some(d) => d
            .iter()
            .map(|(k, v)| Ok((k.extract::<String>()?, v)))
            .collect::<PyResult<_>>()?,
    };
    // A candidate's exception, kept to raise instead of the library's error it turns into.
    let raised: RefCell<Option<PyErr>> = RefCell::new(None);
    let stream = StreamArg::read(what, stream)?;
    let times = with_state(py, what, |nv, state| {
        on_device(py, nv, what, &[&i, &o])?;
        let stream = borrowed_stream!(py, nv, stream, &[&i, &o]);
        let slot = state.colls.slot_bytes.unwrap_or(SLOT_BYTES);
        let colls = &mut state.colls;
        made(&mut colls.allreduce, || nv.allreduce_workspace(slot))
            .map_err(|e| runtime_error(py, e))?;
        made(&mut colls.tuner, || Tuner::new(nv, Some(&nv.team_world())))
            .map_err(|e| runtime_error(py, e))?;
        let (Some(ar), Some(tuner)) = (colls.allreduce.as_mut(), colls.tuner.as_mut()) else {
            unreachable!("both made above")
        };
        tuner.set_runs(warmup, runs);
        let buffers = &state.buffers;
        let mut user: Vec<UserCandidate<'_>> = user
            .iter()
            .map(|(name, f)| {
                let raised = &raised;
                UserCandidate::new(name.clone(), move |s: &cudarc::driver::CudaStream| {
                    f.call1((s.cu_stream() as usize,)).map(|_| ()).map_err(|e| {
                        raised.borrow_mut().get_or_insert(e);
                        nvshmem::Error::CollectiveShape {
                            what: "tune_allreduce",
                            detail: "a candidate of the caller's raised an exception".into(),
                        }
                    })
                })
            })
            .collect();
        let measured = with_reducible!(i.dtype, what, T => {
            let (Some(iv), Some(ov)) = (buffers.view::<T>(i.ptr, i.numel),
                                        buffers.view::<T>(o.ptr, o.numel)) else {
                return Err(PyValueError::new_err(format!(
                    "{what}: the input and the output must lie in symmetric tensors of their \
                     dtype (nvshmem_rs.zeros or empty): the tuner times on symmetric memory"
                )));
            };
            tuner
                .tune_allreduce(ar, iv, ov, op, &algos, &mut user, &stream)
                .map_err(|e| match raised.borrow_mut().take() {
                    Some(err) => err,
                    None => runtime_error(py, e),
                })
        })?;
        Ok(measured)
    })?;
    let out = PyDict::new(py);
    for c in &times.candidates {
        out.set_item(&c.name, c.us)?;
    }
    Ok((times.winner().name.clone(), out))
}
