//! What the bindings keep beside the runtime handle (runtime.rs holds both): the symmetric
//! buffers that Python references, typed as the library made them, the collectives' world
//! workspaces, and the split teams, sparse allreduces and channels by id ([`State`]). They
//! borrow the handle for 'static, which runtime.rs makes sound by ending them (or forgetting
//! the buffers) before the handle. Below the modules that fill it (teams.rs, sparse.rs,
//! channel.rs, coll.rs): it imports only release.rs, so that none of them is imported back.

use crate::release::{Control, ENDED};
use cudarc::driver::CudaStream;
use nvshmem::{
    Allgather, Allgatherv, Allreduce, Alltoall, Alltoallv, Broadcast, Element, P2pGroup, Reduce,
    ReduceScatter, SymView, Team, TeamBarrier, Tuner,
};
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Receive slots of the workspaces that have them (allreduce, reduce, reduce-scatter), unless
/// `configure(slot_bytes=...)` set others: as the examples use; larger messages go in segments
/// of this size. `nvsh bench allreduce` takes 8 MiB (`--slot`); the Python bench sets that.
pub(crate) const SLOT_BYTES: usize = 1 << 20;

/// What the bindings keep beside the handle.
#[derive(Default)]
pub(crate) struct State {
    /// Symmetric buffers that Python holds.
    pub(crate) buffers: Registry,
    /// The collectives' world workspaces, made at the first call of each.
    pub(crate) colls: Workspaces,
    /// Split teams that Python holds, with their workspaces, by id (teams.rs).
    pub(crate) teams: Teams,
    /// Sparse allreduces that Python holds, by id (sparse.rs).
    pub(crate) sparse: BTreeMap<u64, Box<dyn AnySparse>>,
    /// Pipeline channels that Python holds, by id (channel.rs).
    pub(crate) channels: BTreeMap<u64, Box<dyn AnyChannel>>,
    /// The exchange of the agreed releases (release.rs), made at the first collection point.
    pub(crate) release: Option<Control>,
}

/// A channel of any element type, as the state holds it.
pub(crate) trait AnyChannel {
    /// # Safety
    /// `ptr` is device memory of this PE holding `len` elements, left alone by other work
    /// until the stream has passed the send.
    unsafe fn send(&self, peer: i32, ptr: u64, len: usize, s: &CudaStream) -> nvshmem::Result<()>;
    /// # Safety
    /// As for `send`, for memory the receive writes.
    unsafe fn recv(&self, peer: i32, ptr: u64, len: usize, s: &CudaStream) -> nvshmem::Result<()>;
    fn check(&self) -> nvshmem::Result<()>;
}

/// A sparse allreduce of either value type, as the state holds it.
pub(crate) trait AnySparse {
    /// # Safety
    /// `grad` and `out` are device memory of this PE of the allreduce's length, ordered on
    /// the stream by the caller.
    unsafe fn run(&mut self, grad: u64, out: u64, s: &CudaStream) -> nvshmem::Result<()>;
    fn clear_residual(&mut self, s: &Arc<CudaStream>) -> nvshmem::Result<()>;
    fn k(&self) -> usize;
}

/// A split team as the state holds it: its workspaces (dropped first: their frees come
/// before the team's destruction) and the team, None on PEs outside it.
pub(crate) struct TeamState {
    pub(crate) colls: Workspaces,
    pub(crate) team: Option<Team<'static>>,
}

/// The teams Python holds, by id.
pub(crate) type Teams = BTreeMap<u64, TeamState>;

/// A typed buffer of the registry, whatever its element type.
pub(crate) trait Erased: Any {
    fn addr(&self) -> usize;
    fn bytes(&self) -> usize;
    fn as_any(&self) -> &dyn Any;
}

impl<T: Element> Erased for nvshmem::SymmetricBuffer<'static, T> {
    fn addr(&self) -> usize {
        self.as_device_ptr() as usize
    }
    fn bytes(&self) -> usize {
        self.num_bytes()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A buffer of this PE's own memory registered into the symmetric heap (`alloc(...,
/// registered=True)`): the library's `RegistrableBuffer` and its `Registered` mapping, which
/// borrows it. The buffer is leaked into a 'static reference at registration and taken back
/// here, after the mapping is gone.
pub(crate) struct RegEntry<T: Element> {
    /// Dropped first: unregistering (collective) comes before the memory is freed.
    pub(crate) reg: Option<nvshmem::Registered<'static, T>>,
    buf: *mut nvshmem::RegistrableBuffer<'static, T>,
}

impl<T: Element> RegEntry<T> {
    /// Registers `buf` (collective over the world, as `Nvshmem::register_symmetric`).
    pub(crate) fn register(
        nv: &'static nvshmem::Nvshmem,
        buf: nvshmem::RegistrableBuffer<'static, T>,
    ) -> nvshmem::Result<RegEntry<T>> {
        let buf = Box::into_raw(Box::new(buf));
        // SAFETY: just leaked; freed only in Drop (or never, with the heap at finalize),
        // after the Registered that borrows it.
        let leaked: &'static nvshmem::RegistrableBuffer<'static, T> = unsafe { &*buf };
        match nv.register_symmetric(leaked) {
            Ok(reg) => Ok(RegEntry {
                reg: Some(reg),
                buf,
            }),
            Err(e) => {
                // SAFETY: nothing borrows it: the registration failed.
                drop(unsafe { Box::from_raw(buf) });
                Err(e)
            }
        }
    }
}

impl<T: Element> Drop for RegEntry<T> {
    fn drop(&mut self) {
        drop(self.reg.take());
        // SAFETY: from Box::into_raw in register; the Registered that borrowed it is gone.
        drop(unsafe { Box::from_raw(self.buf) });
    }
}

impl<T: Element> Erased for RegEntry<T> {
    fn addr(&self) -> usize {
        // SAFETY: live until Drop.
        unsafe { &*self.buf }.as_device_ptr() as usize
    }
    fn bytes(&self) -> usize {
        // SAFETY: as in addr.
        unsafe { &*self.buf }.num_bytes()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The symmetric buffers Python holds, by allocation id; part of the runtime's state.
#[derive(Default)]
pub(crate) struct Registry {
    live: BTreeMap<u64, Box<dyn Erased>>,
    /// Each buffer's id by its address: every collective call looks its tensors up here, so
    /// the lookup is a search of this map, not a scan of every buffer.
    by_addr: BTreeMap<usize, u64>,
}

impl Registry {
    /// The symmetric view of `len` elements of `T` at `addr`, when they lie in one buffer of
    /// this registry of that element type; None for other memory (the caller's own, staged by
    /// the collectives) and for a buffer viewed as another type (staged too: the library's
    /// views are typed).
    pub(crate) fn view<T: Element>(&self, addr: usize, len: usize) -> Option<SymView<'_, T>> {
        let (_, id) = self.by_addr.range(..=addr).next_back()?;
        let buf = self.live.get(id)?;
        if addr >= buf.addr() + buf.bytes() {
            return None;
        }
        let offset = addr - buf.addr();
        let size = std::mem::size_of::<T>();
        if offset % size != 0 {
            return None;
        }
        let range = offset / size..offset / size + len;
        let any = buf.as_any();
        if let Some(typed) = any.downcast_ref::<nvshmem::SymmetricBuffer<'static, T>>() {
            return typed.view(range).ok();
        }
        // Registered memory: the tensor is over the buffer's own address, the view at the
        // symmetric address the registration gave the same memory.
        let entry = any.downcast_ref::<RegEntry<T>>()?;
        entry.reg.as_ref()?.view(range).ok()
    }

    /// Holds a registered buffer under `id` (a new allocation).
    pub(crate) fn insert_registered<T: Element>(&mut self, id: u64, entry: RegEntry<T>) {
        self.by_addr.insert(entry.addr(), id);
        self.live.insert(id, Box::new(entry));
    }

    /// Holds `buffer` under `id` (a new allocation).
    pub(crate) fn insert<T: Element>(
        &mut self,
        id: u64,
        buffer: nvshmem::SymmetricBuffer<'static, T>,
    ) {
        self.by_addr.insert(buffer.addr(), id);
        self.live.insert(id, Box::new(buffer));
    }

    /// Takes out the buffer of `id`, if the registry holds it: dropping it frees it.
    pub(crate) fn take(&mut self, id: u64) -> Option<Box<dyn Erased>> {
        let buf = self.live.remove(&id)?;
        self.by_addr.remove(&buf.addr());
        Some(buf)
    }

    /// How many buffers this PE's Python still references: those `is_queued` (release.rs's,
    /// which runtime.rs passes) does not name as released.
    pub(crate) fn live_not_queued(&self, is_queued: impl Fn(u64) -> bool) -> usize {
        self.live.keys().filter(|&&id| !is_queued(id)).count()
    }

    /// At finalize: forgets every buffer (not freed: NVSHMEM releases them with the heap, and
    /// their drop would use the handle that is about to end). Returns how many there were.
    pub(crate) fn forget_all(&mut self) -> usize {
        ENDED.store(true, Ordering::SeqCst);
        self.by_addr.clear();
        let live = std::mem::take(&mut self.live);
        let n = live.len();
        for (_, buf) in live {
            std::mem::forget(buf);
        }
        n
    }
}

/// The world workspaces, made at the first call of each collective.
#[derive(Default)]
pub(crate) struct Workspaces {
    pub(crate) allreduce: Option<Allreduce<'static>>,
    pub(crate) broadcast: Option<Broadcast<'static>>,
    pub(crate) reduce: Option<Reduce<'static>>,
    pub(crate) allgather: Option<Allgather<'static>>,
    pub(crate) reduce_scatter: Option<ReduceScatter<'static>>,
    pub(crate) alltoall: Option<Alltoall<'static>>,
    pub(crate) barrier: Option<TeamBarrier<'static>>,
    pub(crate) allgatherv: Option<Allgatherv<'static>>,
    pub(crate) alltoallv: Option<Alltoallv<'static>>,
    pub(crate) p2p: Option<P2pGroup<'static>>,
    /// The tuner (tune_allreduce), made at its first call.
    pub(crate) tuner: Option<Tuner<'static>>,
    /// Receive-slot bytes of the workspaces that have slots, made from now on
    /// (`configure(slot_bytes=...)`); None: the bindings' default.
    pub(crate) slot_bytes: Option<usize>,
}

/// The workspace in `slot`, made by `make` when there is none yet.
pub(crate) fn made<W>(
    slot: &mut Option<W>,
    make: impl FnOnce() -> nvshmem::Result<W>,
) -> nvshmem::Result<&mut W> {
    match slot {
        Some(w) => Ok(w),
        None => Ok(slot.insert(make()?)),
    }
}

impl Workspaces {
    /// Whether any workspace has been made (their shape is fixed from then on).
    pub(crate) fn any_made(&self) -> bool {
        self.allreduce.is_some()
            || self.broadcast.is_some()
            || self.reduce.is_some()
            || self.allgather.is_some()
            || self.reduce_scatter.is_some()
            || self.alltoall.is_some()
            || self.barrier.is_some()
            || self.allgatherv.is_some()
            || self.alltoallv.is_some()
            || self.p2p.is_some()
    }

    /// Each workspace's recorded failure (a wait past its deadline names the PE that did not
    /// come), the first one found.
    pub(crate) fn check(&self) -> nvshmem::Result<()> {
        if let Some(w) = &self.allreduce {
            w.check()?;
        }
        if let Some(w) = &self.broadcast {
            w.check()?;
        }
        if let Some(w) = &self.reduce {
            w.check()?;
        }
        if let Some(w) = &self.allgather {
            w.check()?;
        }
        if let Some(w) = &self.reduce_scatter {
            w.check()?;
        }
        if let Some(w) = &self.alltoall {
            w.check()?;
        }
        if let Some(w) = &self.barrier {
            w.check()?;
        }
        if let Some(w) = &self.allgatherv {
            w.check()?;
        }
        if let Some(w) = &self.alltoallv {
            w.check()?;
        }
        if let Some(w) = &self.p2p {
            w.check()?;
        }
        Ok(())
    }
}
