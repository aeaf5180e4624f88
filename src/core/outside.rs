//! The buffers a collective takes: a symmetric view, or the caller's own device memory of this
//! PE (cudarc `CudaSlice` / `CudaView` / `CudaViewMut`, or a raw device pointer with a length).
//!
//! [`InBuf`] is what a collective reads, [`OutBuf`] what it writes; both convert from every
//! kind (`From`), so `run(&input, &mut output, ..)` takes a `&SymmetricBuffer`, a `SymView`, a
//! `&CudaSlice` or a `CudaView` alike. Memory outside the symmetric heap cannot be addressed by
//! peers, so the collectives stage it through a symmetric area of their workspace
//! (`crate::proto::staging`): a stream-ordered device-to-device copy in before the symmetric
//! call and one out after it.
//!
//! cudarc's own ordering is kept: with its event tracking on, the call's stream waits for the
//! slice's last write (and, for an output, read) before the copies, and records the slice's
//! read or write event after them, as cudarc's own launches do. Under graph capture turn
//! cudarc's event tracking off (`CudaContext::disable_event_tracking`), as for any cudarc work
//! in a graph.

use crate::core::buffer::SymView;
use crate::core::element::Element;
use crate::core::error::{Error, Result};
use cudarc::driver::sys::{self as cu, CUdeviceptr};
use cudarc::driver::SyncOnDrop;
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use std::marker::PhantomData;

/// A span of the caller's own device memory given by address and length
/// ([`InBuf::from_raw`], [`OutBuf::from_raw`]).
#[derive(Clone, Copy, Debug)]
struct RawSpan<'a, T> {
    addr: usize,
    len: usize,
    _memory: PhantomData<&'a [T]>,
}

/// What a collective reads: a symmetric view or the caller's own device memory of this PE.
/// Built with `From`/`Into` from a `&SymmetricBuffer`, a `SymView`, a `&CudaSlice`, a
/// `CudaView`, or from a raw pointer ([`InBuf::from_raw`]).
pub struct InBuf<'a, T: Element>(In<'a, T>);

enum In<'a, T: Element> {
    Sym(SymView<'a, T>),
    Slice(&'a CudaSlice<T>),
    View(CudaView<'a, T>),
    Raw(RawSpan<'a, T>),
}

/// What a collective writes: a symmetric view or the caller's own device memory of this PE.
/// Built with `From`/`Into` from a `&SymmetricBuffer`, a `SymView`, a `&mut CudaSlice`, a
/// `CudaViewMut`, or from a raw pointer ([`OutBuf::from_raw`]).
pub struct OutBuf<'a, T: Element>(Out<'a, T>);

enum Out<'a, T: Element> {
    Sym(SymView<'a, T>),
    Slice(&'a mut CudaSlice<T>),
    View(CudaViewMut<'a, T>),
    Raw(RawSpan<'a, T>),
}

/// `n` blocks of `len / n` elements of a span, in order.
fn raw_blocks<'a, T: Element>(r: RawSpan<'a, T>, n: usize) -> impl Iterator<Item = RawSpan<'a, T>> {
    let b = r.len / n.max(1);
    (0..n).map(move |k| RawSpan {
        addr: r.addr + k * b * std::mem::size_of::<T>(),
        len: b,
        _memory: PhantomData,
    })
}

/// `n` blocks of `len / n` elements of a view, in order.
fn sym_blocks<T: Element>(v: SymView<'_, T>, n: usize) -> Option<Vec<SymView<'_, T>>> {
    let b = v.len() / n.max(1);
    (0..n).map(|k| v.view(k * b..(k + 1) * b).ok()).collect()
}

impl<'a, T: Element> InBuf<'a, T> {
    /// `n` blocks of `len / n` elements, in order (a table call's grouped send/recv); None for
    /// cudarc's buffers, which are not split here.
    pub(crate) fn blocks(self, n: usize) -> Option<Vec<InBuf<'a, T>>> {
        match self.0 {
            In::Sym(v) => Some(
                sym_blocks(v, n)?
                    .into_iter()
                    .map(|v| InBuf(In::Sym(v)))
                    .collect(),
            ),
            In::Raw(r) => Some(raw_blocks(r, n).map(|r| InBuf(In::Raw(r))).collect()),
            In::Slice(_) | In::View(_) => None,
        }
    }

    /// `len` elements of this PE's device memory from `ptr`, read by the call.
    ///
    /// # Safety
    /// `ptr .. ptr + len` is device memory of this PE's GPU (the call checks the GPU and the
    /// allocation's extent, not who owns it) that nothing writes to until the work the call
    /// enqueues is done (the call returns before it is: order later writes after it on the
    /// call's stream).
    pub unsafe fn from_raw(ptr: *const T, len: usize) -> InBuf<'a, T> {
        InBuf(In::Raw(RawSpan {
            addr: ptr as usize,
            len,
            _memory: PhantomData,
        }))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.0 {
            In::Sym(v) => v.len(),
            In::Slice(s) => s.len(),
            In::View(v) => v.len(),
            In::Raw(r) => r.len,
        }
    }

    /// True for no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this is a symmetric view (used as it is, no staging).
    pub fn is_symmetric(&self) -> bool {
        matches!(self.0, In::Sym(_))
    }

    /// The symmetric view, or None for the caller's own memory.
    pub(crate) fn sym(&self) -> Option<SymView<'a, T>> {
        match self.0 {
            In::Sym(v) => Some(v),
            _ => None,
        }
    }

    /// The address and length of the memory, with cudarc's ordering for a read on `stream`,
    /// and for memory outside the symmetric heap the check that it is device memory of the
    /// GPU `device` holding `len` elements (`what` names the call in errors).
    pub(crate) fn locate<'s>(
        &'s self,
        what: &'static str,
        device: i32,
        stream: &'s CudaStream,
    ) -> Result<Located<'s, T>> {
        let (addr, sync) = match &self.0 {
            In::Sym(v) => return Ok(Located::symmetric(*v)),
            In::Slice(s) => s.device_ptr(stream),
            In::View(v) => v.device_ptr(stream),
            In::Raw(r) => (r.addr as CUdeviceptr, SyncOnDrop::Sync(None)),
        };
        Located::outside(what, "input", device, addr as usize, self.len(), sync)
    }
}

impl<'a, T: Element> OutBuf<'a, T> {
    /// [`InBuf::blocks`] of an output.
    pub(crate) fn blocks(self, n: usize) -> Option<Vec<OutBuf<'a, T>>> {
        match self.0 {
            Out::Sym(v) => Some(
                sym_blocks(v, n)?
                    .into_iter()
                    .map(|v| OutBuf(Out::Sym(v)))
                    .collect(),
            ),
            Out::Raw(r) => Some(raw_blocks(r, n).map(|r| OutBuf(Out::Raw(r))).collect()),
            Out::Slice(_) | Out::View(_) => None,
        }
    }

    /// `len` elements of this PE's device memory from `ptr`, written by the call.
    ///
    /// # Safety
    /// `ptr .. ptr + len` is device memory of this PE's GPU (the call checks the GPU and the
    /// allocation's extent, not who owns it) that nothing else reads or writes until the work
    /// the call enqueues is done (order later uses after it on the call's stream).
    pub unsafe fn from_raw(ptr: *mut T, len: usize) -> OutBuf<'a, T> {
        OutBuf(Out::Raw(RawSpan {
            addr: ptr as usize,
            len,
            _memory: PhantomData,
        }))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.0 {
            Out::Sym(v) => v.len(),
            Out::Slice(s) => s.len(),
            Out::View(v) => v.len(),
            Out::Raw(r) => r.len,
        }
    }

    /// True for no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this is a symmetric view (used as it is, no staging).
    pub fn is_symmetric(&self) -> bool {
        matches!(self.0, Out::Sym(_))
    }

    /// The symmetric view, or None for the caller's own memory.
    pub(crate) fn sym(&self) -> Option<SymView<'a, T>> {
        match self.0 {
            Out::Sym(v) => Some(v),
            _ => None,
        }
    }

    /// [`InBuf::locate`] for a write: cudarc's stream waits for earlier reads and writes too.
    pub(crate) fn locate<'s>(
        &'s mut self,
        what: &'static str,
        device: i32,
        stream: &'s CudaStream,
    ) -> Result<Located<'s, T>> {
        let len = self.len();
        let (addr, sync) = match &mut self.0 {
            Out::Sym(v) => return Ok(Located::symmetric(*v)),
            Out::Slice(s) => s.device_ptr_mut(stream),
            Out::View(v) => v.device_ptr_mut(stream),
            Out::Raw(r) => (r.addr as CUdeviceptr, SyncOnDrop::Sync(None)),
        };
        Located::outside(what, "output", device, addr as usize, len, sync)
    }
}

/// A collective's buffer once located: its address and length on this PE, the symmetric view
/// when it is one, and (cudarc memory) the guard that records cudarc's event when dropped,
/// after the copies that use it are enqueued.
pub struct Located<'s, T: Element> {
    addr: usize,
    len: usize,
    sym: Option<SymView<'s, T>>,
    _sync: Option<SyncOnDrop<'s>>,
}

impl<'s, T: Element> Located<'s, T> {
    /// A symmetric view, used as it is.
    pub fn symmetric(view: SymView<'s, T>) -> Located<'s, T> {
        Located {
            addr: view.as_device_ptr() as usize,
            len: view.len(),
            sym: Some(view),
            _sync: None,
        }
    }

    /// Memory outside the symmetric heap, checked to be `len` elements of device memory of GPU
    /// `device` (`which`: "input" or "output").
    fn outside(
        what: &'static str,
        which: &'static str,
        device: i32,
        addr: usize,
        len: usize,
        sync: SyncOnDrop<'s>,
    ) -> Result<Located<'s, T>> {
        let bytes =
            len.checked_mul(std::mem::size_of::<T>())
                .ok_or_else(|| Error::SizeOverflow {
                    what,
                    detail: format!("{len} x {}", std::mem::size_of::<T>()),
                })?;
        if len > 0 {
            check_device_memory(addr, bytes, device).map_err(|detail| Error::NotDeviceMemory {
                what,
                which,
                addr,
                bytes,
                device,
                detail,
            })?;
        }
        Ok(Located {
            addr,
            len,
            sym: None,
            _sync: Some(sync),
        })
    }

    /// Device address of element 0 on this PE.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The byte range it covers on this PE.
    pub fn byte_range(&self) -> std::ops::Range<usize> {
        self.addr..self.addr.saturating_add(self.num_bytes())
    }

    /// The symmetric view, or None for the caller's own memory (to be staged).
    pub fn sym(&self) -> Option<SymView<'s, T>> {
        self.sym
    }

    /// The same buffer with its element type erased, for calls whose buffers differ in type
    /// (grouped send/recv); the guard moves along.
    pub fn into_bytes(self) -> LocatedBytes<'s> {
        LocatedBytes {
            addr: self.addr,
            bytes: self.num_bytes(),
            symmetric: self.sym.is_some(),
            _sync: self._sync,
        }
    }
}

/// A [`Located`] buffer in bytes, of any element type ([`Located::into_bytes`]); its cudarc
/// guard records cudarc's event when dropped, after the copies that use it are enqueued.
pub struct LocatedBytes<'s> {
    addr: usize,
    bytes: usize,
    symmetric: bool,
    _sync: Option<SyncOnDrop<'s>>,
}

impl LocatedBytes<'_> {
    /// Device address of its first byte on this PE.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether it is symmetric (used as it is) rather than the caller's own memory.
    pub fn is_symmetric(&self) -> bool {
        self.symmetric
    }
}

/// Why `addr .. addr + bytes` is not device memory of GPU `device`, or Ok: the memory type
/// and device ordinal (cuPointerGetAttribute) of its first and of its last byte. (Not the
/// extent of one allocation: memory mapped with cuMemMap may span several.)
fn check_device_memory(addr: usize, bytes: usize, device: i32) -> std::result::Result<(), String> {
    device_byte(addr, device)?;
    let last = addr
        .checked_add(bytes - 1)
        .ok_or("it reaches past the address space")?;
    device_byte(last, device).map_err(|why| {
        format!("its last element ends at {last:#x}, where {why}: is the length right?")
    })
}

/// Why the byte at `addr` is not device memory of GPU `device`, or Ok.
fn device_byte(addr: usize, device: i32) -> std::result::Result<(), String> {
    let ptr = addr as CUdeviceptr;
    let mut kind: u32 = 0;
    let mut ordinal: i32 = -1;
    // SAFETY: queries that only read the driver's tables; each writes one value of the
    // attribute's type (CUmemorytype is an unsigned int, the ordinal an int).
    let r = unsafe {
        cu::cuPointerGetAttribute(
            (&mut kind as *mut u32).cast(),
            cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr,
        )
    };
    if r != cu::CUresult::CUDA_SUCCESS || kind == 0 {
        return Err(format!(
            "the CUDA driver does not know the address ({r:?}): it is not CUDA memory"
        ));
    }
    let device_kinds = [
        cu::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32,
        cu::CUmemorytype::CU_MEMORYTYPE_UNIFIED as u32,
    ];
    if !device_kinds.contains(&kind) {
        return Err("it is host memory (pinned or mapped), not device memory".into());
    }
    // SAFETY: as above.
    let r = unsafe {
        cu::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
    };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err(format!("the driver cannot say on which GPU it is ({r:?})"));
    }
    if ordinal != device {
        return Err(format!("it is memory of GPU {ordinal}"));
    }
    Ok(())
}

impl<'a, T: Element> From<SymView<'a, T>> for InBuf<'a, T> {
    fn from(v: SymView<'a, T>) -> Self {
        InBuf(In::Sym(v))
    }
}

impl<'a, T: Element> From<&SymView<'a, T>> for InBuf<'a, T> {
    fn from(v: &SymView<'a, T>) -> Self {
        InBuf(In::Sym(*v))
    }
}

impl<'a, T: Element> From<&'a crate::core::buffer::SymmetricBuffer<'_, T>> for InBuf<'a, T> {
    fn from(b: &'a crate::core::buffer::SymmetricBuffer<'_, T>) -> Self {
        InBuf(In::Sym(b.as_view()))
    }
}

impl<'a, T: Element> From<&'a CudaSlice<T>> for InBuf<'a, T> {
    fn from(s: &'a CudaSlice<T>) -> Self {
        InBuf(In::Slice(s))
    }
}

impl<'a, T: Element> From<&'a mut CudaSlice<T>> for InBuf<'a, T> {
    fn from(s: &'a mut CudaSlice<T>) -> Self {
        InBuf(In::Slice(s))
    }
}

impl<'a, T: Element> From<CudaView<'a, T>> for InBuf<'a, T> {
    fn from(v: CudaView<'a, T>) -> Self {
        InBuf(In::View(v))
    }
}

impl<'a, T: Element> From<&'a CudaView<'_, T>> for InBuf<'a, T> {
    fn from(v: &'a CudaView<'_, T>) -> Self {
        InBuf(In::View(v.slice(..)))
    }
}

impl<'a, T: Element> From<&'a CudaViewMut<'_, T>> for InBuf<'a, T> {
    fn from(v: &'a CudaViewMut<'_, T>) -> Self {
        InBuf(In::View(v.slice(..)))
    }
}

impl<'a, T: Element> From<SymView<'a, T>> for OutBuf<'a, T> {
    fn from(v: SymView<'a, T>) -> Self {
        OutBuf(Out::Sym(v))
    }
}

impl<'a, T: Element> From<&SymView<'a, T>> for OutBuf<'a, T> {
    fn from(v: &SymView<'a, T>) -> Self {
        OutBuf(Out::Sym(*v))
    }
}

impl<'a, T: Element> From<&'a crate::core::buffer::SymmetricBuffer<'_, T>> for OutBuf<'a, T> {
    fn from(b: &'a crate::core::buffer::SymmetricBuffer<'_, T>) -> Self {
        OutBuf(Out::Sym(b.as_view()))
    }
}

impl<'a, T: Element> From<&'a mut CudaSlice<T>> for OutBuf<'a, T> {
    fn from(s: &'a mut CudaSlice<T>) -> Self {
        OutBuf(Out::Slice(s))
    }
}

impl<'a, T: Element> From<CudaViewMut<'a, T>> for OutBuf<'a, T> {
    fn from(v: CudaViewMut<'a, T>) -> Self {
        OutBuf(Out::View(v))
    }
}

impl<'a, T: Element> From<&'a mut CudaViewMut<'_, T>> for OutBuf<'a, T> {
    fn from(v: &'a mut CudaViewMut<'_, T>) -> Self {
        OutBuf(Out::View(v.slice_mut(..)))
    }
}

impl<T: Element> std::fmt::Debug for InBuf<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.0 {
            In::Sym(_) => "symmetric",
            In::Slice(_) => "CudaSlice",
            In::View(_) => "CudaView",
            In::Raw(_) => "raw",
        };
        write!(f, "InBuf<{}>({kind}, len {})", T::NAME, self.len())
    }
}

impl<T: Element> std::fmt::Debug for OutBuf<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.0 {
            Out::Sym(_) => "symmetric",
            Out::Slice(_) => "CudaSlice",
            Out::View(_) => "CudaViewMut",
            Out::Raw(_) => "raw",
        };
        write!(f, "OutBuf<{}>({kind}, len {})", T::NAME, self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_spans_keep_their_length() {
        // SAFETY: never located (no device here); only the length is read.
        let i = unsafe { InBuf::<f32>::from_raw(std::ptr::null(), 7) };
        // SAFETY: as above.
        let o = unsafe { OutBuf::<u8>::from_raw(std::ptr::null_mut(), 0) };
        assert_eq!((i.len(), i.is_symmetric()), (7, false));
        assert!(o.is_empty() && !o.is_symmetric());
        assert_eq!(format!("{i:?}"), "InBuf<f32>(raw, len 7)");
    }
}
