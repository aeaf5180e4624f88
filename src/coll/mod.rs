//! Collectives over the protocol layer ([`crate::proto`]): the reduction ops, selection tables,
//! and one module per collective.

pub mod allreduce;
pub mod op;
pub mod select;
