//! The protocol layer every collective embeds: the [`Workspace`] (members, mapping, device
//! state, status record, timeout), checked mode, and the family's handshake workspace
//! ([`FamilyWorkspace`]), the exchanges ([`exchange`]; the bound and sizes of their
//! low-latency lines in [`lines`]), and the staging area through which calls move the caller's
//! own device memory ([`staging`]), and the members' heap map every launch carries
//! ([`peer_table`]). Device primitives live in `device/prims/`.

pub mod checked;
pub mod exchange;
pub mod family;
pub mod lines;
pub mod mismatch;
pub mod node_steps;
pub mod peer_table;
pub mod staging;
pub mod workspace;

pub use family::FamilyWorkspace;
pub use workspace::{CollectiveText, Workspace};
