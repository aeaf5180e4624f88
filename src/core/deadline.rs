//! Deadlines of the runtime's waits: the default timeout (`NVSH_TIMEOUT_MS`) and its device form.
//!
//! Kernels wait with a spin bounded by `%globaltimer` (device/prims/deadline.cuh); a wait that runs
//! out of time records what it waited for in a [`crate::core::status::StatusRecord`].
//!
#![doc = include_str!("../../docs/failures.md")]

use crate::core::error::{Error, Result};
use std::time::Duration;

/// The environment variable that sets the default timeout of waits, in milliseconds.
pub const TIMEOUT_ENV: &str = "NVSH_TIMEOUT_MS";

/// The default when `NVSH_TIMEOUT_MS` is not set: one minute.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(60_000);

/// The timeout of waits that are not given one: `NVSH_TIMEOUT_MS` (milliseconds, at least 1),
/// default 60000. A value that is not a positive whole number is an [`Error::InvalidEnv`].
pub fn default_timeout() -> Result<Duration> {
    match std::env::var(TIMEOUT_ENV) {
        Ok(v) => parse_timeout_ms(&v),
        Err(std::env::VarError::NotPresent) => Ok(DEFAULT_TIMEOUT),
        Err(std::env::VarError::NotUnicode(v)) => Err(invalid(&v.to_string_lossy())),
    }
}

/// Parses a `NVSH_TIMEOUT_MS` value: a positive whole number of milliseconds.
pub fn parse_timeout_ms(value: &str) -> Result<Duration> {
    match value.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(invalid(value)),
    }
}

fn invalid(value: &str) -> Error {
    Error::InvalidEnv {
        var: TIMEOUT_ENV,
        value: value.to_string(),
        expected: "a whole number of milliseconds >= 1 (e.g. 60000), or unset for 60000",
    }
}

/// A timeout as the device's wait takes it: nanoseconds, at least 1.
pub fn timeout_ns(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::tests::ENV_LOCK;

    /// Runs `f` with NVSH_TIMEOUT_MS set to `value` (or unset), restoring it afterwards.
    fn with_timeout_env<R>(value: Option<&str>, f: impl FnOnce() -> R) -> R {
        let _guard = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let saved = std::env::var_os(TIMEOUT_ENV);
        match value {
            Some(v) => std::env::set_var(TIMEOUT_ENV, v),
            None => std::env::remove_var(TIMEOUT_ENV),
        }
        let out = f();
        match saved {
            Some(v) => std::env::set_var(TIMEOUT_ENV, v),
            None => std::env::remove_var(TIMEOUT_ENV),
        }
        out
    }

    #[test]
    fn timeouts_parse_as_positive_milliseconds() {
        assert_eq!(parse_timeout_ms("250").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_timeout_ms(" 60000 ").unwrap(), DEFAULT_TIMEOUT);
        for bad in [
            "",
            "0",
            "-5",
            "1.5",
            "10s",
            "ten",
            "99999999999999999999999",
        ] {
            let err = parse_timeout_ms(bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidEnv { var: TIMEOUT_ENV, ref value, .. } if value == bad),
                "{bad:?}: {err:?}"
            );
            assert!(err.to_string().contains("NVSH_TIMEOUT_MS"), "{err}");
        }
    }

    #[test]
    fn default_timeout_comes_from_the_environment() {
        assert_eq!(
            with_timeout_env(None, default_timeout).unwrap(),
            DEFAULT_TIMEOUT
        );
        let set = with_timeout_env(Some("1500"), default_timeout);
        assert_eq!(set.unwrap(), Duration::from_millis(1500));
        let bad = with_timeout_env(Some("soon"), default_timeout).unwrap_err();
        assert!(bad.to_string().contains("\"soon\""), "{bad}");
    }

    #[test]
    fn device_timeouts_are_at_least_a_nanosecond() {
        assert_eq!(timeout_ns(Duration::ZERO), 1);
        assert_eq!(timeout_ns(Duration::from_millis(3)), 3_000_000);
        assert_eq!(timeout_ns(Duration::MAX), u64::MAX);
    }
}
