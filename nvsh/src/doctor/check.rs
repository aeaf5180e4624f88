//! One check's outcome: plain data, in a file of its own so that the files of `doctor/` can
//! share it without importing one another.

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// A 2-PE run can work, but something is limited or risky.
    Warn,
    /// A 2-PE run cannot work until this is fixed.
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the verdict: what was checked, how it went, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub message: String,
}

impl Check {
    pub(super) fn new(
        name: impl Into<String>,
        status: Status,
        message: impl Into<String>,
    ) -> Check {
        Check {
            name: name.into(),
            status,
            message: message.into(),
        }
    }
}
