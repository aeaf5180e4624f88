//! The protocol layer every collective embeds: the [`Workspace`] (members, mapping, device
//! state, status record, timeout) and checked mode. Device primitives live in `device/prims/`.

pub mod checked;
pub mod workspace;

pub use workspace::{CollectiveText, Workspace};
