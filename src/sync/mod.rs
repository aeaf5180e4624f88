//! Ordering and waiting: quiet, fence and the runtime's barriers, deadlines of every wait, and
//! the status record device waits report failures through.

pub mod barrier;
pub mod deadline;
pub mod status;
