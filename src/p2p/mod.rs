//! Point-to-point: host-initiated and stream-ordered RMA, device-initiated puts (and their
//! launch shape), signals.

pub mod device_put;
pub mod rma;
pub mod signal;
pub mod stream_rma;
