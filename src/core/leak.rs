//! Leak tracking of symmetric buffers: every allocation is recorded until it is freed, so that
//! finalize can report what was still alive (and never free it a second time).

use std::collections::BTreeMap;
use std::sync::Mutex;

/// One live symmetric allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveBuffer {
    /// Device address of the allocation.
    pub address: usize,
    /// Number of elements.
    pub len: usize,
    /// Size in bytes.
    pub bytes: usize,
    /// Element type name.
    pub elem: &'static str,
}

static LIVE: Mutex<BTreeMap<usize, LiveBuffer>> = Mutex::new(BTreeMap::new());

fn live() -> std::sync::MutexGuard<'static, BTreeMap<usize, LiveBuffer>> {
    // A panic while holding the lock leaves the map consistent (single inserts/removes).
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn record(buffer: LiveBuffer) {
    live().insert(buffer.address, buffer);
}

/// Forgets an allocation; false when it was not recorded (already freed or never tracked).
pub(crate) fn forget(address: usize) -> bool {
    live().remove(&address).is_some()
}

/// Symmetric buffers allocated and not yet freed, in address order.
pub fn live_buffers() -> Vec<LiveBuffer> {
    live().values().cloned().collect()
}

/// Clears the registry at finalize, returning what was still alive. NVSHMEM releases the whole
/// heap at finalize, so these must not be freed afterwards.
pub(crate) fn take_all() -> Vec<LiveBuffer> {
    std::mem::take(&mut *live()).into_values().collect()
}
