//! The sparse gradient allreduce from Python: `SparseAllreduce(length, method, density, ...)`
//! over the library's `SparseAllreduce` (top-k, GaussianK, gTop-k, Ok-Topk and the
//! split-and-allgather methods, with error feedback), whose `run(grad, out)` enqueues on the
//! caller's stream. Kept in the runtime's state by id and released as channels are (an agreed
//! release, release.rs).

use crate::coll::{borrowed_stream, on_device, tensor, StreamArg};
use crate::dtypes::{parse_dtype, torch_name};
use crate::error::{raise, runtime_error};
use crate::runtime::{with_collected_state, with_state};
use crate::state::AnySparse;
use crate::teams::{team_id, team_of, PyTeam};
use cudarc::driver::CudaStream;
use nvshmem::{Dtype, SparseMethod, SparseOptions, SparseValue};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::sync::Arc;

impl<T: SparseValue> AnySparse for nvshmem::SparseAllreduce<'static, T> {
    unsafe fn run(&mut self, grad: u64, out: u64, s: &CudaStream) -> nvshmem::Result<()> {
        // SAFETY: the caller's promise.
        unsafe { self.run_raw(grad, out, s) }
    }
    fn clear_residual(&mut self, s: &Arc<CudaStream>) -> nvshmem::Result<()> {
        nvshmem::SparseAllreduce::clear_residual(self, s)
    }
    fn k(&self) -> usize {
        nvshmem::SparseAllreduce::k(self)
    }
}

/// A sparse allreduce of gradients of `length` elements (f32 or bf16): each call every PE
/// selects `density` of its gradient (plus what it did not send before, with error feedback),
/// the selections are exchanged, and every PE's output becomes their sum (or average).
/// Created collectively over the world (every PE, same arguments); `team=` runs it over a
/// split team. Methods: topk, topk_aopt, gaussiank, gaussiank_concat, gtopk, oktopk, topk_sa,
/// gaussiank_sa.
#[pyclass(frozen, module = "nvshmem_rs", name = "SparseAllreduce")]
pub(crate) struct PySparse {
    id: u64,
    dtype: Dtype,
    length: usize,
    k: usize,
}

#[pymethods]
impl PySparse {
    #[new]
    #[pyo3(signature = (length, method = "topk", density = 0.01, dtype = None,
                        error_feedback = true, average = false, team = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        length: usize,
        method: &str,
        density: f64,
        dtype: Option<&Bound<'_, PyAny>>,
        error_feedback: bool,
        average: bool,
        team: Option<&Bound<'_, PyTeam>>,
    ) -> PyResult<PySparse> {
        let what = "SparseAllreduce";
        let dtype = match dtype {
            Some(d) => parse_dtype(what, d)?,
            None => Dtype::F32,
        };
        let method = SparseMethod::from_name(method).map_err(|e| runtime_error(py, e))?;
        let mut opts = SparseOptions::new(method, density);
        opts.error_feedback = error_feedback;
        opts.average = average;
        let team = team_id(team);
        let (id, k) = with_collected_state(py, what, |nv, state| {
            let world = nv.team_world();
            let t = match team {
                None => Some(&world),
                Some(id) => team_of(py, &state.teams, id)?,
            };
            let s: Box<dyn AnySparse> = match dtype {
                Dtype::F32 => Box::new(
                    nvshmem::SparseAllreduce::<f32>::new(nv, t, length, opts)
                        .map_err(|e| runtime_error(py, e))?,
                ) as Box<dyn AnySparse>,
                Dtype::Bf16 => Box::new(
                    nvshmem::SparseAllreduce::<half::bf16>::new(nv, t, length, opts)
                        .map_err(|e| runtime_error(py, e))?,
                ) as Box<dyn AnySparse>,
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "{what}: the sparse allreduce takes float32 and bfloat16 gradients, \
                         not {}",
                        torch_name(other)
                    )))
                }
            };
            let k = s.k();
            let id = crate::release::next_seq();
            state.sparse.insert(id, s);
            Ok((id, k))
        })?;
        Ok(PySparse {
            id,
            dtype,
            length,
            k,
        })
    }

    /// Enqueues on `stream` one sparse allreduce of `grad` into `out` (in place on `grad`
    /// when `out` is None): both CUDA tensors of `length` elements of the dtype.
    #[pyo3(signature = (grad, out = None, stream = None))]
    fn run(
        &self,
        py: Python<'_>,
        grad: &Bound<'_, PyAny>,
        out: Option<&Bound<'_, PyAny>>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let what = "SparseAllreduce.run";
        let g = tensor(what, "gradient", grad)?;
        let o = out.map(|o| tensor(what, "output", o)).transpose()?;
        for t in std::iter::once(&g).chain(o.as_ref()) {
            if t.dtype != self.dtype {
                return Err(PyTypeError::new_err(format!(
                    "{what}: a tensor is {} but this allreduce takes {}",
                    torch_name(t.dtype),
                    torch_name(self.dtype)
                )));
            }
            if t.numel != self.length {
                return Err(PyValueError::new_err(format!(
                    "{what}: a tensor holds {} elements but this allreduce was made for {}",
                    t.numel, self.length
                )));
            }
        }
        let id = self.id;
        let stream = StreamArg::read(what, stream)?;
        with_state(py, what, |nv, state| {
            let io = [&g, o.as_ref().unwrap_or(&g)];
            on_device(py, nv, what, &io)?;
            let stream = borrowed_stream!(py, nv, stream, &io);
            let s = sparse(py, &mut state.sparse, id)?;
            let out = o.as_ref().unwrap_or(&g).ptr as u64;
            // SAFETY: CUDA tensors of this PE's GPU of `length` elements (checked), which the
            // caller orders on `stream`.
            unsafe { s.run(g.ptr as u64, out, &stream) }.map_err(|e| runtime_error(py, e))
        })
    }

    /// Zeroes the residual (what error feedback kept back), on `stream`.
    #[pyo3(signature = (stream = None))]
    fn clear_residual(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let id = self.id;
        let what = "SparseAllreduce.clear_residual";
        let stream = StreamArg::read(what, stream)?;
        with_state(py, what, |nv, state| {
            let stream = borrowed_stream!(py, nv, stream, &[]);
            sparse(py, &mut state.sparse, id)?
                .clear_residual(&stream)
                .map_err(|e| runtime_error(py, e))
        })
    }

    /// Pairs each PE sends per call: ceil(density x length).
    #[getter]
    fn k(&self) -> usize {
        self.k
    }

    #[getter]
    fn length(&self) -> usize {
        self.length
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }
}

fn sparse<'s>(
    py: Python<'_>,
    all: &'s mut std::collections::BTreeMap<u64, Box<dyn AnySparse>>,
    id: u64,
) -> PyResult<&'s mut Box<dyn AnySparse>> {
    all.get_mut(&id).ok_or_else(|| {
        raise(
            py,
            "Finalized",
            "this sparse allreduce was released with the runtime at finalize()".into(),
        )
    })
}

impl Drop for PySparse {
    fn drop(&mut self) {
        // Queued for an agreed release, as a symmetric buffer (release.rs).
        crate::release::queue(self.id);
    }
}
