//! The subcommands: argument parsing and printing around the library crate's tools.

pub mod bench;
pub mod compare;
pub mod doctor;
pub mod info;
pub mod model;
pub mod plot;
pub mod run;
pub mod soak;
pub mod tune;
