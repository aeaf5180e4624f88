//! Deadlines for waits: the default timeout (`NVSH_TIMEOUT_MS`).

use crate::error::{Error, Result};
use std::time::Duration;

/// The environment variable that sets the default timeout of waits, in milliseconds.
pub const TIMEOUT_ENV: &str = "NVSH_TIMEOUT_MS";

/// The default when `NVSH_TIMEOUT_MS` is not set: one minute.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(60_000);

/// The timeout of waits that are not given one: `NVSH_TIMEOUT_MS` (milliseconds, at least 1),
/// default 60000. A value that is not a positive integer is an [`Error::InvalidEnv`].
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
