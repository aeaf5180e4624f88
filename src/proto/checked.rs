//! Checked mode: before each call, every member sends the others a small header (call number,
//! count and a `meta` word of what must agree: dtype, op, algorithm, root, ...) and compares theirs
//! with its own on the device, so PEs that disagree end in a typed error instead of a hang or
//! garbage.

use crate::core::error::Result;

/// The environment variable that turns the checked mode on (`1`) or off (`0`); the default is
/// on in debug builds, off in release builds.
pub const CHECKED_ENV: &str = "NVSH_CHECKED";

/// Whether collectives exchange a header per call to catch PEs that disagree on the count, type,
/// op or algorithm (`NVSH_CHECKED`, default: on in debug builds).
pub fn checked_from_env() -> Result<bool> {
    crate::core::env_value::bool_var(
        CHECKED_ENV,
        cfg!(debug_assertions),
        "1 (check every collective call's arguments across PEs) or 0",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::tests::with_env;

    #[test]
    fn checked_mode_follows_the_environment_and_the_build() {
        with_env(&[], || {
            assert_eq!(checked_from_env().unwrap(), cfg!(debug_assertions))
        });
        with_env(&[(CHECKED_ENV, "1")], || {
            assert!(checked_from_env().unwrap())
        });
        with_env(&[(CHECKED_ENV, "0")], || {
            assert!(!checked_from_env().unwrap())
        });
        // NVSHMEM's boolean spellings, any case.
        with_env(&[(CHECKED_ENV, "Yes")], || {
            assert!(checked_from_env().unwrap())
        });
        with_env(&[(CHECKED_ENV, "off")], || {
            assert!(!checked_from_env().unwrap())
        });
        with_env(&[(CHECKED_ENV, "maybe")], || {
            let err = checked_from_env().unwrap_err().to_string();
            assert!(err.contains("NVSH_CHECKED"), "{err}");
        });
    }
}
