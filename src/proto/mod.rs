//! The protocol layer every collective embeds: the [`Workspace`] (members, mapping, device
//! state, status record, timeout), checked mode, and the family's handshake workspace
//! ([`FamilyWorkspace`]). Device primitives live in `device/prims/`.

pub mod checked;
pub mod exchange;
pub mod family;
pub mod workspace;

pub use family::FamilyWorkspace;
pub use workspace::{CollectiveText, Workspace};
