//! Checkpoints: one file per pipeline stage holding its parameters, AdamW moments, the step
//! and the data loader's state; the stages of one save form a set.
//!
//! Format (little-endian): the magic line `NVSHGPT-CKPT 2\n` (the number is the format version;
//! version 1 files, without the schedule and tied-embedding lines, still load), a text header of
//! `key=value` lines ending with `end\n` (readable with `head`), then the parameter count (u64),
//! the parameters, the first moments and the second moments (f32 each), and an FNV-1a 64
//! checksum of those arrays' bytes (u64). Files are written through [`AtomicFile`], so a crash
//! never leaves a half-written checkpoint under the real name.
//!
//! Sets: `--save PREFIX` writes step N's stages into their own directory `PREFIX.step-N/`
//! (`stageS-of-P.ckpt` each), and only after every stage has written moves the pointer
//! `PREFIX.latest` (a one-line file naming that directory) to it, each write followed by an
//! fsync of the file and its directory. A job killed between two stages' writes leaves the
//! pointer on the last complete set. `--resume PREFIX` follows the pointer (or reads the
//! version 1 layout `PREFIX.stageS-of-P.ckpt` when there is no pointer), and the stages agree on
//! step, loader state, seed and the tied embedding's hash before training goes on. A set of a
//! run with sparse averaging and error feedback also holds one residual file per PE
//! ([`crate::residual`]), written before the pointer moves, in the same body format.

use crate::config::ModelConfig;
use crate::error::{GptError, Result};
use nvsh_plot::AtomicFile;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// The magic line without its version number.
const MAGIC: &str = "NVSHGPT-CKPT";
/// The format this program writes; it reads 1 and 2.
pub const FORMAT_VERSION: u32 = 2;

/// What a checkpoint says about the run that wrote it.
#[derive(Clone, Debug, PartialEq)]
pub struct CkptHeader {
    pub model: ModelConfig,
    /// Pipeline stages of the run and this file's stage.
    pub stages: usize,
    pub stage: usize,
    /// Global layer range of this stage.
    pub layers: std::ops::Range<usize>,
    /// Steps completed.
    pub step: u64,
    /// The data loader's generator state after `step` steps.
    pub loader_state: u64,
    /// The run's seed (initialisation, sampling).
    pub seed: u64,
    /// The schedule settings of the run that wrote it (None in version 1 files).
    pub schedule: Option<ScheduleSettings>,
    /// FNV-1a hash of the tied token embedding on a stage that holds one of its two copies (the
    /// first and the last stage of a tied pipeline); None elsewhere and in version 1 files.
    pub tied_hash: Option<u64>,
}

/// What a resumed run's learning-rate schedule and batches depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleSettings {
    pub steps: u64,
    pub warmup: u64,
    pub micro_batches: u64,
}

/// A stage's saved training state.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub header: CkptHeader,
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
}

/// The version 1 layout's file of `stage` of `stages` for `prefix`: `PREFIX.stageS-of-P.ckpt`
/// (read by `--resume` when there is no `PREFIX.latest`).
pub fn stage_path(prefix: &Path, stage: usize, stages: usize) -> PathBuf {
    with_suffix(prefix, &format!(".stage{stage}-of-{stages}.ckpt"))
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The directory of the set saved after `step` steps: `PREFIX.step-00000042`.
pub fn set_dir(prefix: &Path, step: u64) -> PathBuf {
    with_suffix(prefix, &format!(".step-{step:08}"))
}

/// The pointer to the newest complete set: `PREFIX.latest`.
pub fn latest_path(prefix: &Path) -> PathBuf {
    with_suffix(prefix, ".latest")
}

/// A stage's file inside a set's directory.
pub fn set_stage_path(dir: &Path, stage: usize, stages: usize) -> PathBuf {
    dir.join(format!("stage{stage}-of-{stages}.ckpt"))
}

/// Flushes a directory's entries (a rename is durable only once its directory is).
pub fn sync_dir(dir: &Path) -> Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io_err(dir))
}

/// Points `PREFIX.latest` at `dir` (through a temporary file, a rename and fsyncs): called once
/// every stage of the set has written.
pub fn commit_latest(prefix: &Path, dir: &Path) -> Result<()> {
    let latest = latest_path(prefix);
    let name = dir
        .file_name()
        .ok_or_else(|| GptError::Checkpoint(format!("{} has no file name", dir.display())))?;
    AtomicFile::create(&latest)
        .map_err(io_err(&latest))?
        .commit(|w| writeln!(w, "{}", name.to_string_lossy()))?;
    sync_dir(latest.parent().unwrap_or(Path::new(".")))
}

/// The set directory `PREFIX.latest` names; None when there is no pointer (the version 1
/// layout, or nothing saved).
pub fn latest_set(prefix: &Path) -> Result<Option<PathBuf>> {
    let latest = latest_path(prefix);
    match std::fs::read_to_string(&latest) {
        Ok(text) => {
            let name = text.trim();
            if name.is_empty() || name.contains('/') {
                return Err(GptError::Checkpoint(format!(
                    "{}: {name:?} is not the name of a set directory beside it",
                    latest.display()
                )));
            }
            Ok(Some(latest.parent().unwrap_or(Path::new("")).join(name)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(GptError::Io {
            path: latest,
            source: e,
        }),
    }
}

/// The file `--resume PREFIX` loads for `stage` of `stages`: the stage's file in the set
/// `PREFIX.latest` names, else the version 1 layout's file.
pub fn resume_path(prefix: &Path, stage: usize, stages: usize) -> Result<PathBuf> {
    if let Some(dir) = latest_set(prefix)? {
        return Ok(set_stage_path(&dir, stage, stages));
    }
    let old = stage_path(prefix, stage, stages);
    if old.exists() {
        Ok(old)
    } else {
        Err(GptError::Checkpoint(format!(
            "no checkpoint to resume from at {}: neither {} nor {} exists",
            prefix.display(),
            latest_path(prefix).display(),
            old.display()
        )))
    }
}

/// FNV-1a 64 of the values' bytes (the tied embedding's hash).
pub fn hash_f32(values: &[f32]) -> u64 {
    let mut h = FNV_OFFSET;
    for x in values {
        h = fnv1a(h, &x.to_le_bytes());
    }
    h
}

pub(crate) fn io_err(path: &Path) -> impl Fn(std::io::Error) -> GptError + '_ {
    move |source| GptError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;

/// The `key=value` lines of a file's text header.
pub(crate) struct HeaderFields {
    pub kv: HashMap<String, String>,
    path: PathBuf,
    noun: &'static str,
}

impl HeaderFields {
    fn bad(&self, m: String) -> GptError {
        GptError::Checkpoint(format!("{}: {m}", self.path.display()))
    }

    /// The value of `k`; an error naming the file when the header lacks it.
    pub fn get(&self, k: &str) -> Result<&String> {
        self.kv
            .get(k)
            .ok_or_else(|| self.bad(format!("the {} header lacks {k:?}", self.noun)))
    }

    /// The value of `k` as a number.
    pub fn num(&self, k: &str) -> Result<u64> {
        let v = self.get(k)?;
        v.parse::<u64>()
            .map_err(|_| self.bad(format!("{k}={v:?} is not a number")))
    }
}

/// Reads the magic line `MAGIC <version>` (versions 1 to `newest`) and the `key=value` lines up
/// to `end` of a file of this program; `noun` names the kind of file in errors.
pub(crate) fn read_header(
    r: &mut impl BufRead,
    path: &Path,
    magic: &str,
    newest: u32,
    noun: &'static str,
) -> Result<(u32, HeaderFields)> {
    let bad = |m: String| GptError::Checkpoint(format!("{}: {m}", path.display()));
    // The magic is compared as bytes: any file (binary included) that does not start with it
    // is named as not a file of this kind, not as unreadable text.
    let mut first = Vec::new();
    r.by_ref()
        .take(magic.len() as u64 + 12)
        .read_until(b'\n', &mut first)
        .map_err(io_err(path))?;
    let version = first
        .strip_prefix(format!("{magic} ").as_bytes())
        .and_then(|rest| rest.strip_suffix(b"\n"))
        .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u32>().ok());
    let Some(version) = version else {
        return Err(bad(format!(
            "not a {noun} of this program (it does not start with \"{magic} <version>\"; \
             its first bytes are {:?})",
            String::from_utf8_lossy(&first[..first.len().min(16)])
        )));
    };
    if version == 0 || version > newest {
        return Err(bad(format!(
            "{noun} format {version}; this program reads formats 1 to {newest} (a newer \
             nvsh-gpt wrote it?)"
        )));
    }
    let mut line = String::new();
    let mut kv = HashMap::new();
    loop {
        line.clear();
        if r.read_line(&mut line).map_err(io_err(path))? == 0 {
            return Err(bad("the header ends before its `end` line".into()));
        }
        let l = line.trim_end();
        if l == "end" {
            break;
        }
        let (k, v) = l
            .split_once('=')
            .ok_or_else(|| bad(format!("malformed header line {l:?}")))?;
        kv.insert(k.to_string(), v.to_string());
    }
    Ok((
        version,
        HeaderFields {
            kv,
            path: path.to_path_buf(),
            noun,
        },
    ))
}

/// Writes `header`, the arrays' common length (u64), the arrays (f32, little-endian) and the
/// FNV-1a 64 checksum of their bytes: the body of every file of a set.
pub(crate) fn write_arrays(
    w: &mut dyn Write,
    header: &str,
    arrays: &[&[f32]],
) -> std::io::Result<()> {
    w.write_all(header.as_bytes())?;
    let n = arrays.first().map_or(0, |a| a.len());
    w.write_all(&(n as u64).to_le_bytes())?;
    let mut sum = FNV_OFFSET;
    for arr in arrays {
        let mut buf = Vec::with_capacity(arr.len() * 4);
        for x in arr.iter() {
            buf.extend_from_slice(&x.to_le_bytes());
        }
        sum = fnv1a(sum, &buf);
        w.write_all(&buf)?;
    }
    w.write_all(&sum.to_le_bytes())
}

/// Reads what [`write_arrays`] wrote after the header: one array per name in `names`, checked
/// against the checksum; `count` names the length word in errors.
pub(crate) fn read_arrays<const N: usize>(
    r: &mut impl Read,
    path: &Path,
    count: &str,
    names: [&str; N],
) -> Result<[Vec<f32>; N]> {
    let bad = |m: String| GptError::Checkpoint(format!("{}: {m}", path.display()));
    let mut word = [0u8; 8];
    r.read_exact(&mut word)
        .map_err(|_| bad(format!("truncated before the {count}")))?;
    let n = u64::from_le_bytes(word) as usize;
    let mut sum = FNV_OFFSET;
    let mut arrays: [Vec<f32>; N] = std::array::from_fn(|_| Vec::new());
    for (what, arr) in names.iter().zip(&mut arrays) {
        // Read in bounded pieces: a corrupt count must end in "truncated", not in an
        // allocation of its size.
        let mut buf = Vec::new();
        let want = n.saturating_mul(4) as u64;
        let got = r
            .by_ref()
            .take(want)
            .read_to_end(&mut buf)
            .map_err(io_err(path))?;
        if (got as u64) < want {
            return Err(bad(format!(
                "truncated in the {what} ({n} values expected)"
            )));
        }
        sum = fnv1a(sum, &buf);
        *arr = buf
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
    }
    r.read_exact(&mut word)
        .map_err(|_| bad("truncated before the checksum".into()))?;
    if u64::from_le_bytes(word) != sum {
        return Err(bad("checksum mismatch: the file is corrupt".into()));
    }
    Ok(arrays)
}

impl Checkpoint {
    /// Writes the checkpoint to `path` (through [`AtomicFile`]).
    pub fn save(&self, path: &Path) -> Result<()> {
        let n = self.params.len();
        if self.m.len() != n || self.v.len() != n {
            return Err(GptError::Checkpoint(format!(
                "parameters ({n}), first moments ({}) and second moments ({}) differ in length",
                self.m.len(),
                self.v.len()
            )));
        }
        let out = AtomicFile::create(path).map_err(io_err(path))?;
        let h = &self.header;
        let m = &h.model;
        let mut extra = String::new();
        if let Some(sc) = &h.schedule {
            extra += &format!(
                "steps={}\nwarmup={}\nmicro_batches={}\n",
                sc.steps, sc.warmup, sc.micro_batches
            );
        }
        if let Some(t) = h.tied_hash {
            extra += &format!("tied_hash={t}\n");
        }
        let header = format!(
            "{MAGIC} {FORMAT_VERSION}\nn_layer={}\nn_head={}\nn_embd={}\nblock_size={}\n\
             vocab={}\ntied={}\nstages={}\nstage={}\nlayers={}..{}\nstep={}\n\
             loader_state={}\nseed={}\n{extra}end\n",
            m.n_layer,
            m.n_head,
            m.n_embd,
            m.block_size,
            m.vocab,
            m.tied,
            h.stages,
            h.stage,
            h.layers.start,
            h.layers.end,
            h.step,
            h.loader_state,
            h.seed
        );
        out.commit(|w| write_arrays(w, &header, &[&self.params[..], &self.m[..], &self.v[..]]))?;
        Ok(())
    }

    /// Reads and verifies a checkpoint.
    pub fn load(path: &Path) -> Result<Checkpoint> {
        let file = std::fs::File::open(path).map_err(io_err(path))?;
        let mut r = BufReader::new(file);
        let bad = |m: String| GptError::Checkpoint(format!("{}: {m}", path.display()));
        let (version, fields) = read_header(&mut r, path, MAGIC, FORMAT_VERSION, "checkpoint")?;
        let kv = &fields.kv;
        let get = |k: &str| fields.get(k);
        let num = |k: &str| fields.num(k);
        let (ls, le) = get("layers")?
            .split_once("..")
            .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
            .ok_or_else(|| bad(format!("layers={:?} is not a range a..b", kv["layers"])))?;
        let header = CkptHeader {
            model: ModelConfig {
                n_layer: num("n_layer")? as usize,
                n_head: num("n_head")? as usize,
                n_embd: num("n_embd")? as usize,
                block_size: num("block_size")? as usize,
                vocab: num("vocab")? as usize,
                tied: get("tied")? == "true",
            },
            stages: num("stages")? as usize,
            stage: num("stage")? as usize,
            layers: ls..le,
            step: num("step")?,
            loader_state: num("loader_state")?,
            seed: num("seed")?,
            schedule: match (kv.contains_key("steps"), version) {
                (false, 1) => None,
                _ => Some(ScheduleSettings {
                    steps: num("steps")?,
                    warmup: num("warmup")?,
                    micro_batches: num("micro_batches")?,
                }),
            },
            tied_hash: kv
                .contains_key("tied_hash")
                .then(|| num("tied_hash"))
                .transpose()?,
        };
        let [params, m, v] = read_arrays(
            &mut r,
            path,
            "parameter count",
            ["parameters", "first moments", "second moments"],
        )?;
        Ok(Checkpoint {
            header,
            params,
            m,
            v,
        })
    }

    /// Errors unless this checkpoint fits a run of `model` whose stage `stage` of `stages`
    /// holds `layers` and `n_params` parameters.
    pub fn check_fits(
        &self,
        model: &ModelConfig,
        stages: usize,
        stage: usize,
        layers: &std::ops::Range<usize>,
        n_params: usize,
    ) -> Result<()> {
        let h = &self.header;
        let mut why = Vec::new();
        if &h.model != model {
            why.push(format!("model {:?} vs this run's {:?}", h.model, model));
        }
        if h.stages != stages || h.stage != stage || &h.layers != layers {
            why.push(format!(
                "stage {} of {} with layers {:?} vs this run's stage {stage} of {stages} with \
                 layers {layers:?} (resume with the same --pp and --split)",
                h.stage, h.stages, h.layers
            ));
        }
        if self.params.len() != n_params {
            why.push(format!(
                "{} parameters vs {n_params} expected",
                self.params.len()
            ));
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(GptError::Checkpoint(format!(
                "does not match this run: {}",
                why.join("; ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::test_dir;

    fn sample() -> Checkpoint {
        let n = 1000;
        Checkpoint {
            header: CkptHeader {
                model: ModelConfig {
                    n_layer: 4,
                    n_head: 2,
                    n_embd: 8,
                    block_size: 16,
                    vocab: 256,
                    tied: false,
                },
                stages: 2,
                stage: 1,
                layers: 2..4,
                step: 77,
                loader_state: u64::MAX - 5,
                seed: 1337,
                schedule: Some(ScheduleSettings {
                    steps: 100,
                    warmup: 10,
                    micro_batches: 4,
                }),
                tied_hash: Some(u64::MAX - 9),
            },
            params: (0..n).map(|i| (i as f32).sin()).collect(),
            m: (0..n).map(|i| i as f32 * 1e-3).collect(),
            v: (0..n)
                .map(|i| f32::from_bits(0x3f80_0000 + i as u32))
                .collect(),
        }
    }

    #[test]
    fn a_file_that_is_not_a_checkpoint_is_named_as_such() {
        let path = test_dir("ckpt-not-a-checkpoint").join("random.bin");
        // Binary bytes, invalid UTF-8 included: before, the text reader failed first with
        // "stream did not contain valid UTF-8".
        let bytes: Vec<u8> = (0u32..4096)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("random.bin") && e.contains("not a checkpoint"),
            "{e}"
        );
        std::fs::write(&path, "step,loss\n1,2.5\n").unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(e.contains("not a checkpoint"), "{e}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn round_trip_is_bit_exact() {
        let c = sample();
        let path = stage_path(&test_dir("ckpt-round-trip").join("run"), 1, 2);
        assert!(path.to_string_lossy().ends_with("run.stage1-of-2.ckpt"));
        c.save(&path).unwrap();
        let back = Checkpoint::load(&path).unwrap();
        assert_eq!(back, c);
        let h = &c.header;
        back.check_fits(&h.model, 2, 1, &(2..4), 1000).unwrap();
    }

    #[test]
    fn corruption_truncation_and_mismatch_are_reported() {
        let c = sample();
        let dir = test_dir("ckpt-corruption");
        let path = dir.join("corrupt.ckpt");
        c.save(&path).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let k = bytes.len() - 100;
        bytes[k] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");

        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");

        std::fs::write(&path, b"hello\n").unwrap();
        assert!(Checkpoint::load(&path).is_err());
        let e = Checkpoint::load(&dir.join("missing.ckpt")).unwrap_err();
        assert!(matches!(e, GptError::Io { .. }));

        let h = &c.header;
        let e = c
            .check_fits(&h.model, 2, 0, &(0..2), 1000)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--pp"), "{e}");
        let mut other = h.model.clone();
        other.n_embd = 16;
        assert!(c.check_fits(&other, 2, 1, &(2..4), 1000).is_err());
    }

    #[test]
    fn version_1_files_load_and_newer_versions_are_named() {
        let dir = test_dir("ckpt-versions");
        let path = dir.join("v.ckpt");
        let mut ck = sample();
        ck.save(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let text_end = bytes.windows(4).position(|w| w == b"end\n").unwrap() + 4;
        let header = String::from_utf8(bytes[..text_end].to_vec()).unwrap();
        assert!(header.starts_with("NVSHGPT-CKPT 2\n"), "{header}");
        // Version 1: the old magic, no schedule or tied-hash lines.
        let v1: String = header
            .replace("NVSHGPT-CKPT 2", "NVSHGPT-CKPT 1")
            .lines()
            .filter(|l| {
                !["steps=", "warmup=", "micro_batches=", "tied_hash="]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let mut old = v1.into_bytes();
        old.extend_from_slice(&bytes[text_end..]);
        std::fs::write(&path, &old).unwrap();
        let back = Checkpoint::load(&path).unwrap();
        ck.header.schedule = None;
        ck.header.tied_hash = None;
        assert_eq!(back, ck);
        let mut newer = header
            .replace("NVSHGPT-CKPT 2", "NVSHGPT-CKPT 9")
            .into_bytes();
        newer.extend_from_slice(&bytes[text_end..]);
        std::fs::write(&path, &newer).unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("checkpoint format 9; this program reads formats 1 to 2"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
