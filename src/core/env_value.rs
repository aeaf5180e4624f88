//! Environment values read the way NVSHMEM reads its own, so that `NVSH_*` variables accept what
//! `NVSHMEM_*` variables do: sizes with an optional k/m/g/t suffix, booleans as 1/y/yes/t/true/on
//! or 0/n/no/f/false/off in any case.
//! [`size_label`] writes sizes back the same way.

use crate::core::error::{Error, Result};

/// NVSHMEM's size syntax ("1g", "512M", "3.5G", "1073741824"); `None` if it is not one.
pub fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim();
    let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
    let number: f64 = v[..split].parse().ok()?;
    let shift = match v[split..].chars().next().map(|c| c.to_ascii_lowercase()) {
        None => 0,
        Some('k') => 10,
        Some('m') => 20,
        Some('g') => 30,
        Some('t') => 40,
        Some(_) => return None,
    };
    (number >= 0.0).then(|| (number * (1u64 << shift) as f64) as usize)
}

/// Human-readable size: 4K, 16M...
pub fn size_label(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

/// Progress of a run for people: "12.5%, 3m 05s left", from the fraction done (0..=1) and the
/// seconds left (None: unknown).
pub fn progress_label(fraction: f64, secs_left: Option<f64>) -> String {
    let pct = 100.0 * fraction.clamp(0.0, 1.0);
    match secs_left {
        Some(s) if s.is_finite() => format!("{pct:.1}%, {} left", duration_label(s.max(0.0))),
        _ => format!("{pct:.1}%"),
    }
}

/// A duration for people: "<1s", "42s", "3m 05s", "1h 02m".
pub fn duration_label(secs: f64) -> String {
    if secs < 1.0 {
        return "<1s".into();
    }
    let s = secs.round() as u64;
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// NVSHMEM's reading of a boolean: `Some(true)` for 1/y/yes/t/true/on, `Some(false)` for
/// 0/n/no/f/false/off (any case), `None` for anything else.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "y" | "yes" | "t" | "true" | "on" => Some(true),
        "0" | "n" | "no" | "f" | "false" | "off" => Some(false),
        _ => None,
    }
}

/// The boolean environment variable `var` (parse_bool's spellings): `default` when unset or
/// empty, [`Error::InvalidEnv`] with `expected` for anything else.
pub fn bool_var(var: &'static str, default: bool, expected: &'static str) -> Result<bool> {
    match std::env::var(var) {
        Ok(v) if v.trim().is_empty() => Ok(default),
        Ok(v) => parse_bool(&v).ok_or(Error::InvalidEnv {
            var,
            value: v,
            expected,
        }),
        Err(_) => Ok(default),
    }
}

/// A size from `var` (65536, 64K, 1M, ...), or `default` when unset or empty.
pub(crate) fn size_from_env(
    var: &'static str,
    default: usize,
    expected: &'static str,
) -> Result<usize> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => parse_size(&v).ok_or(Error::InvalidEnv {
            var,
            value: v,
            expected,
        }),
        _ => Ok(default),
    }
}

/// The heap NVSHMEM reserves at init: NVSHMEM_SYMMETRIC_SIZE (NVSHMEM's syntax: a number with an
/// optional k/m/g/t suffix), default 1 GiB.
pub(crate) fn initial_heap_bytes() -> usize {
    std::env::var("NVSHMEM_SYMMETRIC_SIZE")
        .ok()
        .and_then(|v| parse_size(&v))
        .unwrap_or(1 << 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reads_as_percent_and_time_left() {
        assert_eq!(duration_label(0.4), "<1s");
        assert_eq!(duration_label(42.4), "42s");
        assert_eq!(duration_label(185.0), "3m 05s");
        assert_eq!(duration_label(3720.0), "1h 02m");
        assert_eq!(progress_label(0.125, Some(185.0)), "12.5%, 3m 05s left");
        assert_eq!(progress_label(1.5, None), "100.0%");
        assert_eq!(progress_label(0.5, Some(f64::INFINITY)), "50.0%");
    }

    #[test]
    fn sizes_parse_like_nvshmem() {
        assert_eq!(parse_size("1073741824"), Some(1 << 30));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("20m"), Some(20 << 20));
        assert_eq!(parse_size("20kk"), Some(20 << 10));
        assert_eq!(parse_size(".5m"), Some(1 << 19));
        assert_eq!(parse_size("3.1M"), Some(3_250_585));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn booleans_parse_like_nvshmem() {
        for v in ["1", "y", "YES", "true", "T", " on "] {
            assert_eq!(parse_bool(v), Some(true), "{v}");
        }
        for v in ["0", "n", "No", "false", "OFF"] {
            assert_eq!(parse_bool(v), Some(false), "{v}");
        }
        assert_eq!(parse_bool("maybe"), None);
        assert_eq!(parse_bool(""), None);
    }
}
