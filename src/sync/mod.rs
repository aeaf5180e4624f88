//! Ordering and waiting: quiet, fence and the runtime's barriers. The deadlines of every wait
//! and the status record device waits report failures through live in the core (the runtime
//! holds them).

pub mod barrier;
