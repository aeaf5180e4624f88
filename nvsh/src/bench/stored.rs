//! Bench results as stored: the JSON `nvsh bench ... --json` writes (`"schema":1`, see
//! [`render::render_json`] and [`put::render_json`]), read back with the fields the charts
//! (`plot`) and the comparison of runs (`compare`) use; the others are left alone.
//!
//! [`render::render_json`]: crate::bench::render::render_json
//! [`put::render_json`]: crate::bench::put::render_json

use crate::bench::render::BENCH_SCHEMA;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Just enough of a bench JSON to tell which bench wrote it.
#[derive(Deserialize)]
struct Head {
    schema: Option<u32>,
    collective: Option<String>,
    bandwidth: Option<serde::de::IgnoredAny>,
}

/// A collective bench's JSON (allreduce, broadcast, ...), the fields the charts use; the others
/// are left alone.
#[derive(Debug, Clone, Deserialize)]
pub struct CollectiveJson {
    pub collective: String,
    pub n_pes: i32,
    pub gpu: String,
    #[serde(default)]
    pub op: Option<String>,
    /// When the bench ran (UTC, YYYY-MM-DD); files of older builds have none.
    #[serde(default)]
    pub date: Option<String>,
    pub candidates: Vec<String>,
    /// The candidates the bench's ratio takes the fastest of (NCCL's paths); absent from files
    /// of older builds.
    #[serde(default)]
    pub ratio_baselines: Vec<String>,
    /// False while a run cut off by a time limit had not finished (`--out` rewrites the file
    /// after every size); absent (taken as finished) from files of older builds.
    #[serde(default = "finished")]
    pub complete: bool,
    pub rows: Vec<RowJson>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RowJson {
    pub bytes: u64,
    pub dtype: String,
    pub results: BTreeMap<String, ResultJson>,
}

/// One candidate at one size: timed (`us`, `us_after_compute`, `busbw`, `wrong`) or not run
/// (`na`: why).
#[derive(Debug, Clone, Deserialize)]
pub struct ResultJson {
    pub us: Option<f64>,
    /// Absent from files of older builds.
    #[serde(default)]
    pub us_after_compute: Option<f64>,
    pub busbw: Option<f64>,
    #[serde(default)]
    pub wrong: u64,
    /// Outputs compared with the CPU's (every timed call's); absent from files of older builds.
    #[serde(default)]
    pub checked: Option<u64>,
    pub na: Option<String>,
}

/// The put bench's JSON.
#[derive(Debug, Clone, Deserialize)]
pub struct PutJson {
    pub n_pes: i32,
    pub gpu: String,
    #[serde(default)]
    pub date: Option<String>,
    pub bandwidth: Vec<PutRowJson>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PutRowJson {
    pub bytes: u64,
    pub us_per_put: f64,
    pub gbps: f64,
    /// Absent from files of older builds.
    #[serde(default)]
    pub gbps_in_kernel: Option<f64>,
}

fn finished() -> bool {
    true
}

/// A bench result as read.
#[derive(Debug, Clone)]
pub enum BenchJson {
    Collective(CollectiveJson),
    Put(PutJson),
}

/// Why a JSON text is not a bench result: the line and column where serde_json stopped (0 when
/// the text as a whole is wrong) and what it found.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonProblem {
    pub line: usize,
    pub column: usize,
    pub why: String,
}

impl From<serde_json::Error> for JsonProblem {
    fn from(e: serde_json::Error) -> Self {
        // serde_json ends its message with the position, which the caller puts first.
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let text = e.to_string();
        JsonProblem {
            line: e.line(),
            column: e.column(),
            why: text.strip_suffix(&suffix).unwrap_or(&text).to_string(),
        }
    }
}

/// Parses the JSON `nvsh bench ... --json` writes.
pub fn parse_bench_json(text: &str) -> Result<BenchJson, JsonProblem> {
    let whole = |why: String| JsonProblem {
        line: 0,
        column: 0,
        why,
    };
    let head: Head = serde_json::from_str(text)?;
    match head.schema {
        Some(BENCH_SCHEMA) => {}
        Some(other) => {
            return Err(whole(format!(
                "a bench result of schema {other}; this nvsh reads schema {BENCH_SCHEMA}"
            )))
        }
        None => {
            return Err(whole(
                "no \"schema\" field: not a result of `nvsh bench ... --json`".into(),
            ))
        }
    }
    if head.collective.is_some() {
        Ok(BenchJson::Collective(serde_json::from_str(text)?))
    } else if head.bandwidth.is_some() {
        Ok(BenchJson::Put(serde_json::from_str(text)?))
    } else {
        Err(whole(
            "neither a \"collective\" nor a \"bandwidth\" field: not a result of `nvsh bench \
             ... --json`"
                .into(),
        ))
    }
}

/// Reads a stored bench result; the error names the file and, where it can, the line.
pub fn read_bench_json(path: &Path) -> Result<BenchJson, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read {} ({e}); give the file `nvsh bench ... --json --out FILE` wrote",
            path.display()
        )
    })?;
    parse_bench_json(&text).map_err(|p| {
        if p.line == 0 {
            format!("{}: {}", path.display(), p.why)
        } else {
            format!(
                "{}:{}:{}: not a result of `nvsh bench ... --json`: {}",
                path.display(),
                p.line,
                p.column,
                p.why
            )
        }
    })
}
