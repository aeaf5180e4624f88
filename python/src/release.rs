//! Agreed releases of what holds symmetric memory.
//!
//! Every symmetric free (buffers, registered buffers, teams and their workspaces, sparse
//! allreduces, channels) is collective: every PE must make the same frees in the same order.
//! When Python drops an object depends on reference counts, exceptions that hold frames,
//! test fixtures and the cyclic GC, so the PEs drop in different orders and at different
//! times. So a drop frees nothing: it queues the object's sequence number (one counter for
//! every kind, advanced by each collective creation, hence the same on every PE). At the
//! points every PE reaches in the same order (every symmetric allocation and creation,
//! `barrier_all()`, `collect()`, `finalize()`) the PEs exchange what they queued (an
//! allgather on a small symmetric area of their own) and free, newest first, exactly the
//! objects every PE has queued. What one PE still references stays on every PE until it goes
//! there too and a later point frees it.
//!
//! The exchange goes in rounds of [`WIDTH`] words a PE: its created count and the lowest
//! queued numbers above the round's cursor. Each PE's list holds all its queued numbers up
//! to its last one when the list is full (else all of them), so up to the least of those
//! lasts the intersection is exact; the next round starts there. The words are the same on
//! every PE, so every PE decides alike.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Set when the runtime ends: every allocation is then gone with the heap.
pub(crate) static ENDED: AtomicBool = AtomicBool::new(false);

/// Words a PE sends per round: its created count, how many numbers follow, the numbers.
pub(crate) const WIDTH: usize = 256;
const IDS: usize = WIDTH - 2;

/// The next sequence number: 1, 2, ... in creation order, the same on every PE.
static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

/// The numbers of the objects Python dropped, not yet freed.
static PENDING: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

fn pending() -> MutexGuard<'static, BTreeSet<u64>> {
    // A set of numbers: a panic elsewhere cannot leave it half-written.
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// The sequence number of an object just created collectively (after it was made: a
/// creation that failed takes none).
pub(crate) fn next_seq() -> u64 {
    NEXT_SEQ.fetch_add(1, Ordering::Relaxed)
}

/// How many numbers were handed out: the same on every PE while they create alike.
pub(crate) fn issued() -> u64 {
    NEXT_SEQ.load(Ordering::Relaxed) - 1
}

/// Queues `seq` for an agreed free: what every Drop of the bindings does. Any thread, any
/// time (a GC pass inside a call too): it only takes a lock.
pub(crate) fn queue(seq: u64) {
    if !ENDED.load(Ordering::SeqCst) {
        pending().insert(seq);
    }
}

/// Whether `seq` is queued on this PE.
pub(crate) fn is_queued(seq: u64) -> bool {
    pending().contains(&seq)
}

/// What this PE has queued, ascending.
pub(crate) fn queued() -> Vec<u64> {
    pending().iter().copied().collect()
}

/// Takes `freed` out of the queue.
pub(crate) fn unqueue(freed: &[u64]) {
    let mut p = pending();
    for s in freed {
        p.remove(s);
    }
}

/// Forgets the queue (the runtime ended: everything went with the heap).
pub(crate) fn clear() {
    pending().clear();
}

/// This PE's words of a round: `created`, the count, the lowest of `queued` (ascending)
/// above `cursor`, zeros.
pub(crate) fn encode(created: u64, queued: &[u64], cursor: u64) -> Vec<u64> {
    let mut words = vec![0u64; WIDTH];
    let ids: Vec<u64> = queued
        .iter()
        .copied()
        .filter(|&s| s > cursor)
        .take(IDS)
        .collect();
    words[0] = created;
    words[1] = ids.len() as u64;
    words[2..2 + ids.len()].copy_from_slice(&ids);
    words
}

/// One round's decision from every PE's words (`n` x [`WIDTH`], PE order): the numbers
/// every PE queued (ascending) and the next round's cursor (None: done). An error when the
/// PEs created different numbers of objects (their numbers name different objects then).
pub(crate) fn decide(words: &[u64], n: usize) -> Result<(Vec<u64>, Option<u64>), String> {
    if words.len() != n * WIDTH || n == 0 {
        return Err(format!(
            "release exchange: {} words for {n} PEs, not {} each",
            words.len(),
            WIDTH
        ));
    }
    let mut lists = Vec::with_capacity(n);
    let created = words[0];
    for (pe, w) in words.chunks_exact(WIDTH).enumerate() {
        if w[0] != created {
            return Err(format!(
                "PE 0 created {created} symmetric objects and PE {pe} {}: the PEs made \
                 allocations, teams, channels or sparse allreduces in different orders or \
                 numbers, so nothing is freed (their sequence numbers name different objects)",
                w[0]
            ));
        }
        let k = usize::try_from(w[1]).unwrap_or(usize::MAX);
        if k > IDS {
            return Err(format!("release exchange: PE {pe} sent {k} numbers"));
        }
        lists.push(&w[2..2 + k]);
    }
    // Up to `upto` every list holds every number its PE queued.
    let upto = lists
        .iter()
        .map(|l| if l.len() == IDS { l[IDS - 1] } else { u64::MAX })
        .min()
        .unwrap_or(u64::MAX);
    let agreed = lists[0]
        .iter()
        .copied()
        .filter(|&s| s <= upto && lists[1..].iter().all(|l| l.binary_search(&s).is_ok()))
        .collect();
    Ok((agreed, (upto != u64::MAX).then_some(upto)))
}

/// The whole exchange without a GPU: every PE's queued numbers (each ascending) in, the
/// numbers freed out, in the order they are freed (newest first), and the rounds it took;
/// `created`: each PE's count of created objects. For tests.
pub(crate) fn simulate(queues: &[Vec<u64>], created: &[u64]) -> Result<(Vec<u64>, usize), String> {
    let mut cursor = 0;
    let mut agreed = Vec::new();
    let mut rounds = 0;
    loop {
        rounds += 1;
        let words: Vec<u64> = queues
            .iter()
            .zip(created)
            .flat_map(|(q, &c)| encode(c, q, cursor))
            .collect();
        let (ids, next) = decide(&words, queues.len())?;
        agreed.extend(ids);
        match next {
            Some(c) => cursor = c,
            None => break,
        }
    }
    agreed.reverse();
    Ok((agreed, rounds))
}

/// The symmetric area of the exchange: made at the first collection point (every PE reaches
/// it at the same call), kept until the runtime ends.
pub(crate) struct Control {
    // Dropped first: the workspace synchronises before the buffers go.
    ag: nvshmem::Allgather<'static>,
    input: nvshmem::SymmetricBuffer<'static, u64>,
    output: nvshmem::SymmetricBuffer<'static, u64>,
}

impl Control {
    fn new(nv: &'static nvshmem::Nvshmem) -> nvshmem::Result<Control> {
        let n = nv.n_pes().max(1) as usize;
        Ok(Control {
            ag: nvshmem::Allgather::world(nv)?,
            input: nv.alloc_zeroed::<u64>(WIDTH)?,
            output: nv.alloc_zeroed::<u64>(n * WIDTH)?,
        })
    }

    /// One round: every PE's words, in PE order, the same on every PE.
    fn exchange(&mut self, nv: &nvshmem::Nvshmem, words: &[u64]) -> nvshmem::Result<Vec<u64>> {
        self.input.copy_from_host(words)?;
        let stream = nv.stream();
        self.ag
            .run(self.input.as_view(), self.output.as_view(), stream)?;
        self.ag.sync(stream)?;
        self.output.to_vec()
    }
}

/// Why a collection failed: the runtime's error, or PEs out of step.
pub(crate) enum CollectError {
    Runtime(nvshmem::Error),
    OutOfStep(String),
}

impl From<nvshmem::Error> for CollectError {
    fn from(e: nvshmem::Error) -> Self {
        CollectError::Runtime(e)
    }
}

/// The collection point: frees, newest first, what every PE has queued (`free` drops the
/// object of a number; `release` holds the exchange's area, made here at the first point);
/// returns how many.
/// Collective: every PE calls it at the same point (runtime.rs calls it from every creation,
/// barrier_all, collect and finalize).
pub(crate) fn collect(
    nv: &'static nvshmem::Nvshmem,
    release: &mut Option<Control>,
    mut free: impl FnMut(u64),
) -> Result<usize, CollectError> {
    let mine = queued();
    let n = nv.n_pes().max(1) as usize;
    let mut agreed = Vec::new();
    if n == 1 {
        agreed = mine;
    } else {
        if release.is_none() {
            *release = Some(Control::new(nv)?);
        }
        let control = release
            .as_mut()
            .unwrap_or_else(|| unreachable!("made above"));
        let mut cursor = 0;
        loop {
            let words = control.exchange(nv, &encode(issued(), &mine, cursor))?;
            let (ids, next) = decide(&words, n).map_err(CollectError::OutOfStep)?;
            agreed.extend(ids);
            match next {
                Some(c) => cursor = c,
                None => break,
            }
        }
    }
    // Newest first: what was made over an object (a sparse allreduce over a team) goes
    // before it. `free` drops the object of each number (runtime.rs: the state's maps).
    for &seq in agreed.iter().rev() {
        free(seq);
    }
    unqueue(&agreed);
    Ok(agreed.len())
}
