//! Tuning files: which algorithm or protocol each collective takes, by size and dtype class, as
//! measured on one kind of machine (`nvsh tune`, or online tuning with `NVSH_TUNE=online`).
//!
//! A file holds one entry per [`Fingerprint`] (so one cache can serve several machines); the
//! runtime loads the entry of its own fingerprint at init ([`crate::Nvshmem::init`]) from
//! [`TUNING_FILE_ENV`] or [`default_path`]. A file for other machines is ignored with a log line;
//! a file that cannot be read or parsed gives a warning and the built-in tables. This module is
//! data only: what a choice name means is up to each collective (`crate::coll::tuning`).

use crate::core::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `online`: the first `Auto` call at an unseen (collective, size bucket, dtype class) times the
/// candidates there and records the winner; `off` (default): tuning files and built-in tables
/// only.
pub const TUNE_ENV: &str = "NVSH_TUNE";
/// The tuning file to load at init (and that [`crate::Nvshmem::save_tuning`] writes by default);
/// unset: [`default_path`]; `none` (or empty): no file.
pub const TUNING_FILE_ENV: &str = "NVSH_TUNING_FILE";
/// Wall-clock budget of one online tuning, milliseconds (default 5: `ONLINE_BUDGET_MS_DEFAULT`).
/// The runs per candidate come from this and the message size alone, so all PEs agree on them.
pub const TUNE_BUDGET_ENV: &str = "NVSH_TUNE_BUDGET_MS";
/// Default online tuning budget, milliseconds, when [`TUNE_BUDGET_ENV`] is unset.
pub const ONLINE_BUDGET_MS_DEFAULT: u64 = 5;
/// The file format's version; files of another version are treated as unreadable.
pub const FORMAT_VERSION: u32 = 1;

/// Whether `Auto` calls may tune at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TuneMode {
    /// Tuning files and built-in tables only (the default).
    Off,
    /// The first `Auto` call at an unseen (collective, size bucket, dtype class) times the
    /// candidates there and records the winner.
    Online,
}

/// [`TUNE_ENV`] (unset or empty: off).
pub fn tune_mode_from_env() -> Result<TuneMode> {
    match std::env::var(TUNE_ENV) {
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "0" | "no" => Ok(TuneMode::Off),
            "online" | "on" | "1" => Ok(TuneMode::Online),
            _ => Err(Error::InvalidEnv {
                var: TUNE_ENV,
                value: v,
                expected: "online or off",
            }),
        },
        Err(_) => Ok(TuneMode::Off),
    }
}

/// [`TUNE_BUDGET_ENV`] in milliseconds.
pub fn budget_ms_from_env() -> Result<u64> {
    match std::env::var(TUNE_BUDGET_ENV) {
        Ok(v) if !v.trim().is_empty() => {
            v.trim()
                .parse::<u64>()
                .ok()
                .filter(|&ms| ms > 0)
                .ok_or(Error::InvalidEnv {
                    var: TUNE_BUDGET_ENV,
                    value: v,
                    expected: "a whole number of milliseconds, at least 1",
                })
        }
        _ => Ok(ONLINE_BUDGET_MS_DEFAULT),
    }
}

/// What a tuning is valid for. Computed alike at init and by `nvsh tune`
/// ([`crate::Nvshmem::tuning_fingerprint`]). The library has no NVML, so the links come from
/// CUDA and NVSHMEM: `link` is "none" (1 PE), "same-gpu" (every PE of a node on one GPU),
/// "network" (some peer not mapped by nvshmem_ptr: other nodes), else "nvlink" when CUDA reports
/// native peer atomics between GPUs 0 and 1, "pcie" when not; `p2p_rank` is CUDA's peer
/// performance rank between them (-1 where there is no second GPU). The NVLink count itself is
/// not visible without NVML.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    /// CUDA's name of the GPU ("NVIDIA H200").
    pub gpu: String,
    /// GPUs the PEs run on.
    pub gpus: i32,
    /// How the GPUs are linked: "none", "same-gpu", "network", "nvlink" or "pcie".
    pub link: String,
    /// CUDA's peer performance rank between GPUs 0 and 1 (-1: no second GPU).
    pub p2p_rank: i32,
    /// PEs in the job.
    pub pes: i32,
    /// NVSHMEM host library version.
    pub nvshmem: String,
    /// This crate's version.
    pub runtime: String,
}

impl Fingerprint {
    /// One line for logs: "4 PEs on 4 x NVIDIA H200 (nvlink, p2p rank 0), NVSHMEM 3.3.9, runtime 0.1.0".
    pub fn describe(&self) -> String {
        format!(
            "{} PE(s) on {} x {} ({}, p2p rank {}), NVSHMEM {}, runtime {}",
            self.pes, self.gpus, self.gpu, self.link, self.p2p_rank, self.nvshmem, self.runtime
        )
    }
}

/// One row: messages of `min_bytes ..= max_bytes` (the collective's count argument times the
/// element size) take `choice`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// Smallest message the row covers, in bytes.
    pub min_bytes: u64,
    /// Largest message the row covers, in bytes (inclusive).
    pub max_bytes: u64,
    /// The algorithm or protocol taken, by name.
    pub choice: String,
}

/// The class a dtype is tuned in: its element size (f32, i32 and u32 share a class).
pub fn dtype_class(elem_bytes: usize) -> &'static str {
    match elem_bytes {
        1 => "8-bit",
        2 => "16-bit",
        4 => "32-bit",
        8 => "64-bit",
        _ => "other",
    }
}

/// The power-of-two bucket online tuning records `bytes` under: (half the bucket, bucket].
pub fn size_bucket(bytes: usize) -> (u64, u64) {
    let hi = (bytes.max(1) as u64).next_power_of_two();
    (hi / 2 + 1, hi)
}

/// Per collective key ("allreduce", "broadcast", ...; `collective_key`) and dtype class, the
/// rows of choices.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TuningTable {
    /// Collective key, then dtype class ("32-bit", ...), then the rows.
    pub collectives: BTreeMap<String, BTreeMap<String, Vec<Row>>>,
}

/// The table key of a collective over a team of `n` PEs in a job of `world`: its name, with the
/// team size where the team is not the world (a team of 2 in a job of 8 tunes apart).
pub fn collective_key(name: &str, n: i32, world: i32) -> String {
    if n == world {
        name.to_string()
    } else {
        format!("{name}@{n}")
    }
}

impl TuningTable {
    /// True when no collective has a row.
    pub fn is_empty(&self) -> bool {
        self.collectives
            .values()
            .all(|c| c.values().all(Vec::is_empty))
    }

    /// The choice for `bytes` of elements of `elem_bytes` bytes, if a row covers it.
    pub fn lookup(&self, collective: &str, bytes: usize, elem_bytes: usize) -> Option<&str> {
        let b = bytes as u64;
        self.collectives
            .get(collective)?
            .get(dtype_class(elem_bytes))?
            .iter()
            .find(|r| r.min_bytes <= b && b <= r.max_bytes)
            .map(|r| r.choice.as_str())
    }

    /// Records `choice` for `min ..= max`, replacing the parts of rows it overlaps; rows stay
    /// sorted.
    pub fn insert(
        &mut self,
        collective: &str,
        elem_bytes: usize,
        min: u64,
        max: u64,
        choice: &str,
    ) {
        let rows = self
            .collectives
            .entry(collective.to_string())
            .or_default()
            .entry(dtype_class(elem_bytes).to_string())
            .or_default();
        let mut kept = Vec::with_capacity(rows.len() + 2);
        for r in rows.drain(..) {
            if r.max_bytes < min || r.min_bytes > max {
                kept.push(r);
                continue;
            }
            if r.min_bytes < min {
                kept.push(Row {
                    max_bytes: min - 1,
                    ..r.clone()
                });
            }
            if r.max_bytes > max {
                kept.push(Row {
                    min_bytes: max + 1,
                    ..r
                });
            }
        }
        kept.push(Row {
            min_bytes: min,
            max_bytes: max,
            choice: choice.to_string(),
        });
        kept.sort_by_key(|r| r.min_bytes);
        *rows = kept;
    }

    /// Rows from a sweep's winners at ascending sizes: each size's choice holds from just above
    /// the previous size; the first also below it, the last also above it. Neighbours with the
    /// same choice merge.
    pub fn rows_from_sweep(points: &[(u64, String)]) -> Vec<Row> {
        let mut rows: Vec<Row> = Vec::new();
        let mut prev = 0u64;
        for (i, (bytes, choice)) in points.iter().enumerate() {
            let min = if i == 0 { 0 } else { prev + 1 };
            let max = if i + 1 == points.len() {
                u64::MAX
            } else {
                *bytes
            };
            match rows.last_mut() {
                Some(last) if last.choice == *choice => last.max_bytes = max,
                _ => rows.push(Row {
                    min_bytes: min,
                    max_bytes: max,
                    choice: choice.clone(),
                }),
            }
            prev = *bytes;
        }
        rows
    }

    /// Problems that make a table unusable: a row whose range is empty, or rows that overlap.
    fn validate(&self) -> std::result::Result<(), String> {
        for (c, classes) in &self.collectives {
            for (class, rows) in classes {
                let mut sorted: Vec<&Row> = rows.iter().collect();
                sorted.sort_by_key(|r| r.min_bytes);
                for (i, r) in sorted.iter().enumerate() {
                    if r.min_bytes > r.max_bytes || r.choice.trim().is_empty() {
                        return Err(format!(
                            "{c} {class}: row {}..={} {:?} is empty",
                            r.min_bytes, r.max_bytes, r.choice
                        ));
                    }
                    if i > 0 && sorted[i - 1].max_bytes >= r.min_bytes {
                        return Err(format!(
                            "{c} {class}: rows overlap at {} bytes",
                            r.min_bytes
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// A hash of the table (FNV-1a over its JSON), for PEs to check they hold the same one.
    pub fn hash(&self) -> u64 {
        let text = serde_json::to_string(self).unwrap_or_default();
        crate::core::digest::fnv1a(text.bytes())
    }
}

/// One machine's tuning in a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningEntry {
    /// The machine the tuning is for.
    pub fingerprint: Fingerprint,
    /// When it was written (UTC, "YYYY-MM-DD"), for people.
    #[serde(default)]
    pub created: Option<String>,
    /// The choices measured there.
    pub tables: TuningTable,
}

/// A tuning file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningFile {
    /// The format's version ([`FORMAT_VERSION`]).
    pub format: u32,
    /// One entry per fingerprint.
    pub entries: Vec<TuningEntry>,
}

/// What reading a tuning file for a fingerprint gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Loaded {
    /// The entry of this fingerprint.
    Table(TuningTable),
    /// The file holds entries for these other machines only.
    OtherFingerprint(Vec<Fingerprint>),
    /// The file is unreadable, truncated, not JSON, of another format or inconsistent: why.
    Corrupt(String),
    /// No file there.
    Missing,
}

/// The entry for `fp` in the text of a tuning file.
pub fn parse(text: &str, fp: &Fingerprint) -> Loaded {
    let file: TuningFile = match serde_json::from_str(text) {
        Ok(f) => f,
        Err(e) => return Loaded::Corrupt(format!("not a tuning file ({e})")),
    };
    if file.format != FORMAT_VERSION {
        return Loaded::Corrupt(format!(
            "format {} (this runtime reads format {FORMAT_VERSION})",
            file.format
        ));
    }
    match file.entries.iter().find(|e| e.fingerprint == *fp) {
        Some(e) => match e.tables.validate() {
            Ok(()) => Loaded::Table(e.tables.clone()),
            Err(why) => Loaded::Corrupt(why),
        },
        None => Loaded::OtherFingerprint(file.entries.into_iter().map(|e| e.fingerprint).collect()),
    }
}

/// [`parse`] of the file at `path`.
pub fn load(path: &Path, fp: &Fingerprint) -> Loaded {
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => parse(&text, fp),
            Err(_) => Loaded::Corrupt("not UTF-8 text".into()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Loaded::Missing,
        Err(e) => Loaded::Corrupt(format!("cannot be read ({e})")),
    }
}

/// Writes `table` as the entry of `fp` into the file at `path`, keeping the entries of other
/// fingerprints already there (an unreadable file is replaced). Creates the folder; writes a
/// temporary file and renames it, so a reader never sees half a file.
pub fn save(
    path: &Path,
    fp: &Fingerprint,
    table: &TuningTable,
    created: Option<String>,
) -> Result<()> {
    let io = |what: &str, e: std::io::Error| Error::Io {
        what: format!("tuning file {}: {what}", path.display()),
        message: format!("{e}; pass another path (--out or {TUNING_FILE_ENV})"),
    };
    let mut file = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<TuningFile>(&t).ok())
        .filter(|f| f.format == FORMAT_VERSION)
        .unwrap_or(TuningFile {
            format: FORMAT_VERSION,
            entries: Vec::new(),
        });
    file.entries.retain(|e| e.fingerprint != *fp);
    file.entries.push(TuningEntry {
        fingerprint: fp.clone(),
        created,
        tables: table.clone(),
    });
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| io("cannot create its folder", e))?;
    }
    let text = serde_json::to_string_pretty(&file).map_err(|e| Error::Io {
        what: "tuning file".into(),
        message: e.to_string(),
    })?;
    // One temporary name per process: PEs of a node may save the same file at once.
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, text + "\n").map_err(|e| io("cannot be written", e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("cannot be replaced", e)
    })
}

/// Where tuning files go by default: `$XDG_CACHE_HOME/nvsh/tuning.json`, else
/// `$HOME/.cache/nvsh/tuning.json` (None without either).
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("nvsh").join("tuning.json"))
}

/// The file init loads: [`TUNING_FILE_ENV`] if set (`none` or empty: no file), else
/// [`default_path`].
pub fn path_from_env() -> Option<PathBuf> {
    match std::env::var_os(TUNING_FILE_ENV) {
        Some(v) => {
            let s = v.to_string_lossy();
            if s.trim().is_empty() || s.trim().eq_ignore_ascii_case("none") {
                None
            } else {
                Some(PathBuf::from(v))
            }
        }
        None => default_path(),
    }
}

/// The runtime's tuning: the fingerprint, the mode, where the table came from and the table
/// itself (the file's entry plus what online tuning added).
#[derive(Debug, Clone)]
pub struct TuningState {
    /// This machine's fingerprint.
    pub fingerprint: Fingerprint,
    /// Whether `Auto` calls tune at run time ([`TUNE_ENV`]).
    pub mode: TuneMode,
    /// The file loaded at init, or that saving writes by default.
    pub path: Option<PathBuf>,
    /// Where the table came from, in words ("built-in: no tuning file at ...").
    pub source: String,
    /// The choices in force.
    pub table: TuningTable,
}

impl TuningState {
    /// The state for `fp` after reading the file at `path` (None: no file), logging what was
    /// done with it.
    pub fn load(fp: Fingerprint, mode: TuneMode, path: Option<PathBuf>) -> TuningState {
        let (table, source) = match &path {
            None => (
                TuningTable::default(),
                "built-in (no tuning file)".to_string(),
            ),
            Some(p) => match load(p, &fp) {
                Loaded::Table(t) => {
                    log::info!("tuning file {} loaded for {}", p.display(), fp.describe());
                    (t, format!("tuning file {}", p.display()))
                }
                Loaded::OtherFingerprint(others) => {
                    log::info!(
                        "tuning file {} ignored: it was made for {} machine(s) ({}), not {}; \
                         using the built-in tables (nvsh tune writes one for this machine)",
                        p.display(),
                        others.len(),
                        others
                            .iter()
                            .map(Fingerprint::describe)
                            .collect::<Vec<_>>()
                            .join("; "),
                        fp.describe()
                    );
                    (
                        TuningTable::default(),
                        format!("built-in ({} is for other machines)", p.display()),
                    )
                }
                Loaded::Corrupt(why) => {
                    log::warn!(
                        "tuning file {} is unusable ({why}); using the built-in tables. Run \
                         nvsh tune to write it again, or set {TUNING_FILE_ENV}=none",
                        p.display()
                    );
                    (
                        TuningTable::default(),
                        format!("built-in ({} is unusable: {why})", p.display()),
                    )
                }
                Loaded::Missing => {
                    log::debug!("no tuning file at {}", p.display());
                    (
                        TuningTable::default(),
                        format!("built-in (no tuning file at {})", p.display()),
                    )
                }
            },
        };
        TuningState {
            fingerprint: fp,
            mode,
            path,
            source,
            table,
        }
    }

    /// What PEs must agree on: the table and the mode.
    pub fn agreement_hash(&self) -> u64 {
        self.table.hash() ^ (self.mode == TuneMode::Online) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::tests::with_env;

    fn fp(gpu: &str) -> Fingerprint {
        Fingerprint {
            gpu: gpu.into(),
            gpus: 2,
            link: "nvlink".into(),
            p2p_rank: 0,
            pes: 2,
            nvshmem: "3.3.9".into(),
            runtime: "0.1.0".into(),
        }
    }

    fn sample() -> TuningTable {
        let mut t = TuningTable::default();
        let points: Vec<(u64, String)> = [
            (4096, "oneshot"),
            (65536, "oneshot"),
            (1 << 20, "rd"),
            (16 << 20, "twoshot"),
        ]
        .iter()
        .map(|&(b, c)| (b, c.to_string()))
        .collect();
        t.collectives
            .entry("allreduce".into())
            .or_default()
            .insert("32-bit".into(), TuningTable::rows_from_sweep(&points));
        t
    }

    #[test]
    fn sweep_points_become_rows_that_cover_every_size() {
        let t = sample();
        let rows = &t.collectives["allreduce"]["32-bit"];
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[0].min_bytes, rows[0].max_bytes), (0, 65536));
        assert_eq!((rows[1].min_bytes, rows[1].max_bytes), (65537, 1 << 20));
        assert_eq!(rows[2].max_bytes, u64::MAX);
        let at = |b: usize| t.lookup("allreduce", b, 4);
        assert_eq!(at(1), Some("oneshot"));
        assert_eq!(at(65536), Some("oneshot"));
        assert_eq!(at(65537), Some("rd"));
        assert_eq!(at(1 << 20), Some("rd"));
        assert_eq!(at((1 << 20) + 1), Some("twoshot"));
        assert_eq!(at(1 << 40), Some("twoshot"));
        // Another class or collective has no rows: the built-in table answers.
        assert_eq!(t.lookup("allreduce", 4096, 2), None);
        assert_eq!(t.lookup("broadcast", 4096, 4), None);
    }

    #[test]
    fn inserted_buckets_replace_only_what_they_overlap() {
        let mut t = TuningTable::default();
        assert!(t.is_empty());
        let (lo, hi) = size_bucket(3000);
        assert_eq!((lo, hi), (2049, 4096));
        assert_eq!(size_bucket(4096), (2049, 4096));
        assert_eq!(size_bucket(1), (1, 1));
        t.insert("allreduce", 4, lo, hi, "oneshot");
        t.insert("allreduce", 4, 1 << 20, 1 << 20, "rd");
        assert_eq!(t.lookup("allreduce", 3000, 4), Some("oneshot"));
        assert_eq!(t.lookup("allreduce", 5000, 4), None);
        t.insert("allreduce", 4, 0, u64::MAX, "ring");
        t.insert("allreduce", 4, 100, 200, "twoshot");
        let rows = &t.collectives["allreduce"]["32-bit"];
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert_eq!(t.lookup("allreduce", 99, 4), Some("ring"));
        assert_eq!(t.lookup("allreduce", 150, 4), Some("twoshot"));
        assert_eq!(t.lookup("allreduce", 201, 4), Some("ring"));
        assert!(t.validate().is_ok());
    }

    #[test]
    fn a_file_round_trips_and_keeps_other_machines() {
        let dir = std::env::temp_dir().join(format!("nvsh-tuning-{}", std::process::id()));
        let path = dir.join("sub").join("tuning.json");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(load(&path, &fp("A")), Loaded::Missing);
        save(&path, &fp("A"), &sample(), Some("2026-01-01".into())).unwrap();
        save(&path, &fp("B"), &TuningTable::default(), None).unwrap();
        // Saving A again replaces its entry, B's stays.
        save(&path, &fp("A"), &sample(), None).unwrap();
        assert_eq!(load(&path, &fp("A")), Loaded::Table(sample()));
        assert_eq!(load(&path, &fp("B")), Loaded::Table(TuningTable::default()));
        let text = std::fs::read_to_string(&path).unwrap();
        let file: TuningFile = serde_json::from_str(&text).unwrap();
        assert_eq!(file.entries.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn another_fingerprint_is_ignored() {
        let text = serde_json::to_string(&TuningFile {
            format: FORMAT_VERSION,
            entries: vec![TuningEntry {
                fingerprint: fp("NVIDIA H100"),
                created: None,
                tables: sample(),
            }],
        })
        .unwrap();
        match parse(&text, &fp("NVIDIA H200")) {
            Loaded::OtherFingerprint(f) => assert_eq!(f, vec![fp("NVIDIA H100")]),
            other => panic!("{other:?}"),
        }
        // Any field counts: the same GPU with another NVSHMEM is another machine.
        let mut other = fp("NVIDIA H100");
        other.nvshmem = "3.4.5".into();
        assert!(matches!(parse(&text, &other), Loaded::OtherFingerprint(_)));
        assert_eq!(parse(&text, &fp("NVIDIA H100")), Loaded::Table(sample()));
        let state = TuningState::load(fp("X"), TuneMode::Off, None);
        assert!(state.table.is_empty());
    }

    #[test]
    fn corrupt_and_truncated_files_are_survived() {
        let good = serde_json::to_string(&TuningFile {
            format: FORMAT_VERSION,
            entries: vec![TuningEntry {
                fingerprint: fp("A"),
                created: None,
                tables: sample(),
            }],
        })
        .unwrap();
        for n in [0, 1, good.len() / 3, good.len() / 2, good.len() - 1] {
            assert!(
                matches!(parse(&good[..n], &fp("A")), Loaded::Corrupt(_)),
                "truncated to {n} bytes"
            );
        }
        assert!(matches!(parse("[1, 2, 3]", &fp("A")), Loaded::Corrupt(_)));
        let future = good.replace("\"format\":1", "\"format\":99");
        assert!(matches!(parse(&future, &fp("A")), Loaded::Corrupt(w) if w.contains("99")));
        let bad_row = good.replacen("\"min_bytes\":0", "\"min_bytes\":999999999", 1);
        assert!(matches!(parse(&bad_row, &fp("A")), Loaded::Corrupt(_)));
        // From a path: a corrupt file gives the built-in table and says why, never a panic.
        let path = std::env::temp_dir().join(format!("nvsh-corrupt-{}.json", std::process::id()));
        std::fs::write(&path, &good[..good.len() / 2]).unwrap();
        let state = TuningState::load(fp("A"), TuneMode::Off, Some(path.clone()));
        assert!(state.table.is_empty());
        assert!(state.source.contains("unusable"), "{}", state.source);
        std::fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(load(&path, &fp("A")), Loaded::Corrupt(_)));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn the_environment_picks_mode_file_and_budget() {
        with_env(&[], || {
            assert_eq!(tune_mode_from_env().unwrap(), TuneMode::Off);
            assert_eq!(budget_ms_from_env().unwrap(), ONLINE_BUDGET_MS_DEFAULT);
        });
        with_env(&[(TUNE_ENV, "online")], || {
            assert_eq!(tune_mode_from_env().unwrap(), TuneMode::Online)
        });
        with_env(&[(TUNE_ENV, "sometimes")], || {
            let err = tune_mode_from_env().unwrap_err().to_string();
            assert!(err.contains(TUNE_ENV) && err.contains("online"), "{err}");
        });
        with_env(&[(TUNE_BUDGET_ENV, "0")], || {
            assert!(budget_ms_from_env().is_err())
        });
        with_env(&[(TUNE_BUDGET_ENV, "20")], || {
            assert_eq!(budget_ms_from_env().unwrap(), 20)
        });
        with_env(&[(TUNING_FILE_ENV, "none")], || {
            assert_eq!(path_from_env(), None)
        });
        with_env(&[(TUNING_FILE_ENV, "/tmp/t.json")], || {
            assert_eq!(path_from_env(), Some(PathBuf::from("/tmp/t.json")))
        });
        with_env(&[("XDG_CACHE_HOME", "/c"), ("HOME", "/h")], || {
            assert_eq!(default_path(), Some(PathBuf::from("/c/nvsh/tuning.json")))
        });
        with_env(&[("HOME", "/h")], || {
            assert_eq!(
                default_path(),
                Some(PathBuf::from("/h/.cache/nvsh/tuning.json"))
            )
        });
    }

    #[test]
    fn pes_holding_other_tables_or_modes_disagree() {
        let a = TuningState::load(fp("A"), TuneMode::Off, None);
        let mut b = a.clone();
        assert_eq!(a.agreement_hash(), b.agreement_hash());
        b.mode = TuneMode::Online;
        assert_ne!(a.agreement_hash(), b.agreement_hash());
        b.mode = TuneMode::Off;
        b.table = sample();
        assert_ne!(a.agreement_hash(), b.agreement_hash());
        assert_eq!(collective_key("allreduce", 4, 4), "allreduce");
        assert_eq!(collective_key("allreduce", 2, 4), "allreduce@2");
    }
}
