//! Pipeline channels from Python: `Channel(max_elems, dtype, slots)` over the library's
//! `nvshmem::Channel`, whose `send(tensor, peer)` and `recv(tensor, peer)` enqueue on the
//! caller's stream (docs/channels.md says how a channel works).
//!
//! The library's channel borrows the runtime handle, which stays on its thread, so the
//! channels live in the runtime's state (runtime.rs) by id, as symmetric buffers do, and
//! Python holds a handle whose release queues the channel for an agreed release: it is freed
//! (collectively) at a collection point once every PE has released it (release.rs).

use crate::coll::{borrowed_stream, on_device, tensor, StreamArg};
use crate::dtypes::{parse_dtype, torch_name};
use crate::error::{raise, runtime_error};
use crate::memory::with_element;
use crate::runtime::{with_collected_state, with_state};
use crate::state::AnyChannel;
use cudarc::driver::CudaStream;
use nvshmem::{Dtype, Element};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::time::Duration;

impl<T: Element> AnyChannel for nvshmem::Channel<'static, T> {
    unsafe fn send(&self, peer: i32, ptr: u64, len: usize, s: &CudaStream) -> nvshmem::Result<()> {
        // SAFETY: the caller's promise.
        unsafe { self.send_raw(peer, ptr, len, s) }
    }
    unsafe fn recv(&self, peer: i32, ptr: u64, len: usize, s: &CudaStream) -> nvshmem::Result<()> {
        // SAFETY: the caller's promise.
        unsafe { self.recv_into_raw(peer, ptr, len, s) }
    }
    fn check(&self) -> nvshmem::Result<()> {
        nvshmem::Channel::check(self)
    }
}

/// A pipeline channel: `slots` receive slots of `max_elems` elements of `dtype` on every PE.
/// Created collectively (every PE, same arguments, same order). A PE may send to any PEs but
/// receives on one channel from one peer only (one channel per sender). Messages from one
/// sender arrive in order; a receive must name the length sent (the tensor's numel).
#[pyclass(frozen, module = "nvshmem_rs", name = "Channel")]
pub(crate) struct Channel {
    id: u64,
    dtype: Dtype,
    slots: usize,
    max_elems: usize,
}

#[pymethods]
impl Channel {
    /// `timeout_ms`: how long each wait on the GPU may take (default NVSH_TIMEOUT_MS).
    #[new]
    #[pyo3(signature = (max_elems, dtype = None, slots = 2, timeout_ms = None))]
    fn new(
        py: Python<'_>,
        max_elems: usize,
        dtype: Option<&Bound<'_, PyAny>>,
        slots: usize,
        timeout_ms: Option<u64>,
    ) -> PyResult<Channel> {
        let dtype = match dtype {
            Some(d) => parse_dtype("Channel", d)?,
            None => Dtype::F32,
        };
        let id = with_collected_state(py, "Channel", |nv, state| {
            let ch: Box<dyn AnyChannel> = with_element!(dtype, T => {
                let mut ch = nvshmem::Channel::<T>::new(nv, slots, max_elems)
                    .map_err(|e| runtime_error(py, e))?;
                if let Some(ms) = timeout_ms {
                    ch.set_timeout(Duration::from_millis(ms));
                }
                Box::new(ch) as Box<dyn AnyChannel>
            });
            let id = crate::release::next_seq();
            state.channels.insert(id, ch);
            Ok(id)
        })?;
        Ok(Channel {
            id,
            dtype,
            slots,
            max_elems,
        })
    }

    /// Enqueues on `stream`: waits on the GPU for a free slot on `peer`, puts `tensor` (all
    /// of it: numel() elements, at most max_elems) there and signals it. Returns at once.
    #[pyo3(signature = (tensor, peer, stream = None))]
    fn send(
        &self,
        py: Python<'_>,
        tensor: &Bound<'_, PyAny>,
        peer: i32,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.transfer(py, "Channel.send", tensor, peer, stream, true)
    }

    /// Enqueues on `stream`: waits on the GPU for the next message from `peer`, copies it
    /// into `tensor` (which must hold as many elements as were sent) and hands the slot back.
    #[pyo3(signature = (tensor, peer, stream = None))]
    fn recv(
        &self,
        py: Python<'_>,
        tensor: &Bound<'_, PyAny>,
        peer: i32,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.transfer(py, "Channel.recv", tensor, peer, stream, false)
    }

    /// Raises what a kernel of this channel recorded (a wait past its deadline, naming the
    /// peer; a length that differs from the one sent), without synchronising.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        let id = self.id;
        with_state(py, "Channel.check", |_, state| {
            let ch = channel(py, &state.channels, id)?;
            ch.check().map_err(|e| runtime_error(py, e))
        })
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    #[getter]
    fn torch_dtype(&self) -> &'static str {
        torch_name(self.dtype)
    }

    #[getter]
    fn slots(&self) -> usize {
        self.slots
    }

    #[getter]
    fn max_elems(&self) -> usize {
        self.max_elems
    }

    fn __repr__(&self) -> String {
        format!(
            "Channel(max_elems={}, dtype={}, slots={})",
            self.max_elems,
            self.dtype.name(),
            self.slots
        )
    }
}

fn channel<'s>(
    py: Python<'_>,
    channels: &'s std::collections::BTreeMap<u64, Box<dyn AnyChannel>>,
    id: u64,
) -> PyResult<&'s dyn AnyChannel> {
    channels.get(&id).map(|c| c.as_ref()).ok_or_else(|| {
        raise(
            py,
            "Finalized",
            "this channel was released with the runtime at finalize(); it moves nothing any \
             more"
                .into(),
        )
    })
}

impl Channel {
    fn transfer(
        &self,
        py: Python<'_>,
        what: &str,
        obj: &Bound<'_, PyAny>,
        peer: i32,
        stream: Option<&Bound<'_, PyAny>>,
        send: bool,
    ) -> PyResult<()> {
        let t = tensor(
            what,
            if send {
                "tensor sent"
            } else {
                "tensor received into"
            },
            obj,
        )?;
        if t.dtype != self.dtype {
            return Err(PyTypeError::new_err(format!(
                "{what}: the tensor is {} but the channel carries {}; pass a tensor of the \
                 channel's dtype",
                torch_name(t.dtype),
                torch_name(self.dtype)
            )));
        }
        if t.numel > self.max_elems {
            return Err(PyValueError::new_err(format!(
                "{what}: the tensor holds {} elements, more than the channel's slots take \
                 ({}); make the channel with a larger max_elems",
                t.numel, self.max_elems
            )));
        }
        let id = self.id;
        let stream = StreamArg::read(what, stream)?;
        with_state(py, what, |nv, state| {
            on_device(py, nv, what, &[&t])?;
            let stream = borrowed_stream!(py, nv, stream, &[&t]);
            let ch = channel(py, &state.channels, id)?;
            // SAFETY: a contiguous CUDA tensor of this PE's GPU of `numel` elements, which the
            // caller orders on `stream` as for any collective of the package.
            unsafe {
                if send {
                    ch.send(peer, t.ptr as u64, t.numel, &stream)
                } else {
                    ch.recv(peer, t.ptr as u64, t.numel, &stream)
                }
            }
            .map_err(|e| runtime_error(py, e))
        })
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // Queued for an agreed release, as a symmetric buffer (release.rs).
        crate::release::queue(self.id);
    }
}
