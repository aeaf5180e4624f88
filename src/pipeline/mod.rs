//! Pipeline-parallel transfers: point-to-point channels with credits.
//!
#![doc = include_str!("../../docs/channels.md")]

pub mod channel;
