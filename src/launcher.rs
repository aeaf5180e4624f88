//! `nvsh run`: starts N local processes with the launcher environment (see [`crate::bootstrap`]).
