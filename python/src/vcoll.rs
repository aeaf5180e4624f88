//! The collectives whose sizes differ between members: allgatherv and alltoallv (counts and
//! displacements given on the host, as `Parts`), grouped send/recv, and the reservation of
//! their staging areas.
//!
//! Tensors are read as in coll.rs: symmetric where they lie in a symmetric buffer of their
//! dtype, else the caller's own memory, staged through the workspace's symmetric area. The
//! sizes differ between members, so that area never grows inside a call (growing is a
//! collective allocation): `reserve_staging` makes it large enough first, on every PE alike,
//! else the call raises `NvshmemError` of kind `StagingTooSmall` naming the size it needs.

use crate::coll::{borrowed_stream, in_buf, on_device, out_buf, pair, tensor, StreamArg, Tensor};
use crate::error::runtime_error;
use crate::memory::with_element;
use crate::runtime::with_state;
use crate::state::made;
use nvshmem::{Allgatherv, Alltoallv, P2p, P2pGroup, Parts};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// Counts and displacements of `which` for `n` members: displacements default to the counts'
/// running sum (parts packed one after the other).
fn parts(
    what: &str,
    which: &str,
    n: usize,
    counts: Vec<usize>,
    displs: Option<Vec<usize>>,
) -> PyResult<(Vec<usize>, Vec<usize>)> {
    if counts.len() != n {
        return Err(PyValueError::new_err(format!(
            "{what}: {} {which} counts for {n} PEs; pass one count per PE",
            counts.len()
        )));
    }
    let displs = match displs {
        Some(d) if d.len() != n => {
            return Err(PyValueError::new_err(format!(
                "{what}: {} {which} displacements for {n} PEs; pass one per PE (or none: \
                 the parts packed in PE order)",
                d.len()
            )))
        }
        Some(d) => d,
        None => counts
            .iter()
            .scan(0usize, |at, &c| {
                let start = *at;
                *at += c;
                Some(start)
            })
            .collect(),
    };
    Ok((counts, displs))
}

/// Member r's `input` (`counts[r]` elements) into `output[displs[r]..]` on every member.
/// Every PE passes the same `counts` and `displs` (default: packed in PE order).
#[pyfunction]
#[pyo3(signature = (input, output, counts, displs = None, stream = None))]
pub(crate) fn allgatherv(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    output: &Bound<'_, PyAny>,
    counts: Vec<usize>,
    displs: Option<Vec<usize>>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let what = "allgatherv";
    let (i, o) = pair(what, input, Some(output), false)?;
    let o = o.unwrap_or_else(|| unreachable!("an output was given"));
    let stream = StreamArg::read(what, stream)?;
    with_state(py, what, |nv, state| {
        let (counts, displs) = parts(what, "", nv.n_pes() as usize, counts, displs)?;
        on_device(py, nv, what, &[&i, &o])?;
        let stream = borrowed_stream!(py, nv, stream, &[&i, &o]);
        let ag = made(&mut state.colls.allgatherv, || Allgatherv::world(nv))
            .map_err(|e| runtime_error(py, e))?;
        let buffers = &state.buffers;
        let parts = Parts {
            counts: &counts,
            displs: &displs,
        };
        with_element!(i.dtype, T => {
            ag.run(in_buf::<T>(buffers, &i), out_buf::<T>(buffers, &o), parts, &stream)
        })
        .map_err(|e| runtime_error(py, e))
    })
}

/// Part r of `input` (`send_counts[r]` elements at `send_displs[r]`) to PE r, part s of
/// `output` (`recv_counts[s]` at `recv_displs[s]`) from PE s. PE r's `recv_counts[s]` must
/// equal PE s's `send_counts[r]`.
#[pyfunction]
#[pyo3(signature = (input, output, send_counts, recv_counts, send_displs = None,
                    recv_displs = None, stream = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn alltoallv(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    output: &Bound<'_, PyAny>,
    send_counts: Vec<usize>,
    recv_counts: Vec<usize>,
    send_displs: Option<Vec<usize>>,
    recv_displs: Option<Vec<usize>>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let what = "alltoallv";
    let (i, o) = pair(what, input, Some(output), false)?;
    let o = o.unwrap_or_else(|| unreachable!("an output was given"));
    let stream = StreamArg::read(what, stream)?;
    with_state(py, what, |nv, state| {
        let n = nv.n_pes() as usize;
        let (sc, sd) = parts(what, "send", n, send_counts, send_displs)?;
        let (rc, rd) = parts(what, "receive", n, recv_counts, recv_displs)?;
        on_device(py, nv, what, &[&i, &o])?;
        let stream = borrowed_stream!(py, nv, stream, &[&i, &o]);
        let aa = made(&mut state.colls.alltoallv, || Alltoallv::world(nv))
            .map_err(|e| runtime_error(py, e))?;
        let buffers = &state.buffers;
        let send = Parts {
            counts: &sc,
            displs: &sd,
        };
        let recv = Parts {
            counts: &rc,
            displs: &rd,
        };
        with_element!(i.dtype, T => {
            aa.run(in_buf::<T>(buffers, &i), send, out_buf::<T>(buffers, &o), recv, &stream)
        })
        .map_err(|e| runtime_error(py, e))
    })
}

/// One transfer of a grouped call, read from Python's ("send" | "recv", tensor, peer).
struct Transfer {
    send: bool,
    tensor: Tensor,
    peer: i32,
}

fn transfer(what: &str, op: &Bound<'_, PyAny>) -> PyResult<Transfer> {
    let (kind, t, peer): (String, Bound<'_, PyAny>, i32) = op.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what}: each transfer is a tuple (\"send\" or \"recv\", tensor, peer), not {}",
            crate::coll::type_name(op)
        ))
    })?;
    let send = match kind.as_str() {
        "send" => true,
        "recv" => false,
        other => {
            return Err(PyValueError::new_err(format!(
                "{what}: transfer kind {other:?}; expected \"send\" or \"recv\""
            )))
        }
    };
    let which = if send {
        "send buffer"
    } else {
        "receive buffer"
    };
    Ok(Transfer {
        send,
        tensor: tensor(what, which, &t)?,
        peer,
    })
}

/// Sends and receives as one launch in stream order (NCCL's grouped calls, torch's
/// batch_isend_irecv): `ops` is a list of ("send", tensor, peer) and ("recv", tensor, peer).
/// Each send needs its receive on the peer, of the same size and dtype. Only the PEs with
/// transfers take part; an empty list does nothing.
#[pyfunction]
#[pyo3(signature = (ops, stream = None))]
pub(crate) fn grouped_p2p(
    py: Python<'_>,
    ops: Vec<Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let what = "grouped_p2p";
    let transfers = ops
        .iter()
        .map(|op| transfer(what, op))
        .collect::<PyResult<Vec<_>>>()?;
    let stream = StreamArg::read(what, stream)?;
    with_state(py, what, |nv, state| {
        let tensors: Vec<&Tensor> = transfers.iter().map(|t| &t.tensor).collect();
        on_device(py, nv, what, &tensors)?;
        let stream = borrowed_stream!(py, nv, stream, &tensors);
        let group =
            made(&mut state.colls.p2p, || P2pGroup::world(nv)).map_err(|e| runtime_error(py, e))?;
        let buffers = &state.buffers;
        let mut list: Vec<P2p<'_>> = Vec::with_capacity(transfers.len());
        for t in &transfers {
            with_element!(t.tensor.dtype, T => {
                list.push(if t.send {
                    P2p::send(in_buf::<T>(buffers, &t.tensor), t.peer)
                } else {
                    P2p::recv(out_buf::<T>(buffers, &t.tensor), t.peer)
                })
            });
        }
        group.run(&list, &stream).map_err(|e| runtime_error(py, e))
    })
}

/// Makes the staging area of `collective` ("allgatherv", "alltoallv", "grouped_p2p") hold
/// at least `bytes`, so that its calls on the caller's own (non-symmetric) memory up to that
/// size allocate nothing. Collective: every PE at the same point with the same `bytes` (a
/// call needs its input rounded up to 256 bytes plus its output; grouped send/recv each
/// buffer rounded up to 256).
#[pyfunction]
pub(crate) fn reserve_staging(py: Python<'_>, collective: &str, bytes: usize) -> PyResult<()> {
    let what = "reserve_staging";
    with_state(py, what, |nv, state| {
        let c = &mut state.colls;
        match collective {
            "allgatherv" => made(&mut c.allgatherv, || Allgatherv::world(nv))
                .and_then(|w| w.reserve_staging(bytes)),
            "alltoallv" => made(&mut c.alltoallv, || Alltoallv::world(nv))
                .and_then(|w| w.reserve_staging(bytes)),
            "grouped_p2p" => {
                made(&mut c.p2p, || P2pGroup::world(nv)).and_then(|w| w.reserve_staging(bytes))
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "{what}: {other:?} has no staging area of its own to reserve; expected \
                     \"allgatherv\", \"alltoallv\" or \"grouped_p2p\" (the others grow theirs \
                     at a call, as every PE stages alike there)"
                )))
            }
        }
        .map_err(|e| runtime_error(py, e))
    })
}
