//! Pipeline-parallel transfers: point-to-point channels with credits.

pub mod channel;
