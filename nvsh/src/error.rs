//! The tool's own errors: the checks of the benches and the soak (a wrong result, too few PEs)
//! are nvsh's to report, not the runtime library's; everything else is the runtime's error.

/// An error of an nvsh command: a failed data check, a job too small for a bench, or an error
/// of the runtime (shown as the runtime words it).
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// An error of the runtime library.
    #[error(transparent)]
    Runtime(#[from] nvshmem::Error),

    /// A bench needs more PEs than the job has.
    #[error("{what} needs at least {needed} PEs, this job has {have}; {hint}")]
    NeedsPes {
        what: &'static str,
        needed: i32,
        have: i32,
        hint: &'static str,
    },

    /// Data received did not match what was sent.
    #[error("data check failed: {what}")]
    DataMismatch { what: String },
}

/// Driver calls in the tool's own code fail as they do in the runtime's.
impl From<cudarc::driver::DriverError> for ToolError {
    fn from(e: cudarc::driver::DriverError) -> ToolError {
        ToolError::Runtime(e.into())
    }
}

/// The result of an nvsh command or check.
pub type ToolResult<T> = std::result::Result<T, ToolError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_the_ones_the_library_had() {
        let e = ToolError::NeedsPes {
            what: "the put benchmark",
            needed: 2,
            have: 1,
            hint: "run it as `nvsh run -n 2 -- nvsh bench put`",
        };
        assert_eq!(
            e.to_string(),
            "the put benchmark needs at least 2 PEs, this job has 1; run it as \
             `nvsh run -n 2 -- nvsh bench put`"
        );
        let e = ToolError::DataMismatch {
            what: "soak: 1 of 9 results wrong".into(),
        };
        assert_eq!(
            e.to_string(),
            "data check failed: soak: 1 of 9 results wrong"
        );
        // The runtime's errors read as the runtime wrote them.
        let inner = nvshmem::Error::Io {
            what: "out.json".into(),
            message: "denied".into(),
        };
        let text = inner.to_string();
        assert_eq!(ToolError::from(inner).to_string(), text);
    }
}
