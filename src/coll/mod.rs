//! Collectives over the protocol layer ([`crate::proto`]): the table of collectives
//! ([`table`]), the reduction ops, selection tables, and one module per collective.

pub mod allgather;
pub mod allgatherv;
pub mod allreduce;
pub mod alltoall;
pub mod alltoallv;
pub mod broadcast;
pub mod family;
pub mod group;
pub mod op;
pub mod reduce;
pub mod reduce_scatter;
pub mod select;
pub mod table;
pub mod team_barrier;
pub mod tuning;
