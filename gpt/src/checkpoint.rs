//! Checkpoints: one file per pipeline stage holding its parameters, AdamW moments, the step
//! and the data loader's state.
//!
//! Format (little-endian): the magic line `NVSHGPT-CKPT 1\n`, a text header of `key=value`
//! lines ending with `end\n` (readable with `head`), then the parameter count (u64), the
//! parameters, the first moments and the second moments (f32 each), and an FNV-1a 64 checksum
//! of those arrays' bytes (u64). Files are written to a temporary name and renamed, so a crash
//! never leaves a half-written checkpoint under the real name.

use crate::config::ModelConfig;
use crate::error::{GptError, Result};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &str = "NVSHGPT-CKPT 1";

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
}

/// A stage's saved training state.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub header: CkptHeader,
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
}

/// The file of `stage` of `stages` for the prefix `prefix` (`--save`/`--resume`).
pub fn stage_path(prefix: &Path, stage: usize, stages: usize) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!(".stage{stage}-of-{stages}.ckpt"));
    PathBuf::from(name)
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> GptError + '_ {
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

impl Checkpoint {
    /// Writes the checkpoint to `path` (through `path.tmp` and a rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let n = self.params.len();
        if self.m.len() != n || self.v.len() != n {
            return Err(GptError::Checkpoint(format!(
                "parameters ({n}), first moments ({}) and second moments ({}) differ in length",
                self.m.len(),
                self.v.len()
            )));
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let file = std::fs::File::create(&tmp).map_err(io_err(&tmp))?;
        let mut w = BufWriter::new(file);
        let h = &self.header;
        let m = &h.model;
        let header = format!(
            "{MAGIC}\nn_layer={}\nn_head={}\nn_embd={}\nblock_size={}\nvocab={}\ntied={}\n\
             stages={}\nstage={}\nlayers={}..{}\nstep={}\nloader_state={}\nseed={}\nend\n",
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
        let mut sum = FNV_OFFSET;
        let mut body = || -> std::io::Result<()> {
            w.write_all(header.as_bytes())?;
            w.write_all(&(n as u64).to_le_bytes())?;
            for arr in [&self.params, &self.m, &self.v] {
                let mut buf = Vec::with_capacity(arr.len() * 4);
                for x in arr.iter() {
                    buf.extend_from_slice(&x.to_le_bytes());
                }
                sum = fnv1a(sum, &buf);
                w.write_all(&buf)?;
            }
            w.write_all(&sum.to_le_bytes())?;
            w.flush()?;
            w.get_ref().sync_all()
        };
        body().map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io_err(path))
    }

    /// Reads and verifies a checkpoint.
    pub fn load(path: &Path) -> Result<Checkpoint> {
        let file = std::fs::File::open(path).map_err(io_err(path))?;
        let mut r = BufReader::new(file);
        let bad = |m: String| GptError::Checkpoint(format!("{}: {m}", path.display()));
        // The magic is compared as bytes: any file (binary included) that does not start with
        // it is named as not a checkpoint, not as unreadable text.
        let mut first = Vec::new();
        (&mut r)
            .take(MAGIC.len() as u64 + 1)
            .read_until(b'\n', &mut first)
            .map_err(io_err(path))?;
        if first != format!("{MAGIC}\n").as_bytes() {
            return Err(bad(format!(
                "not a checkpoint of this program (it does not start with {MAGIC:?}; its first \
                 bytes are {:?})",
                String::from_utf8_lossy(&first[..first.len().min(16)])
            )));
        }
        let mut line = String::new();
        let mut kv = std::collections::HashMap::new();
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
        let get = |k: &str| -> Result<&String> {
            kv.get(k)
                .ok_or_else(|| bad(format!("the header lacks {k:?}")))
        };
        let num = |k: &str| -> Result<u64> {
            get(k)?
                .parse::<u64>()
                .map_err(|_| bad(format!("{k}={:?} is not a number", kv[k])))
        };
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
        };
        let mut word = [0u8; 8];
        r.read_exact(&mut word)
            .map_err(|_| bad("truncated before the parameter count".into()))?;
        let n = u64::from_le_bytes(word) as usize;
        let mut sum = FNV_OFFSET;
        let mut read_arr = |what: &str| -> Result<Vec<f32>> {
            let mut buf = vec![0u8; n * 4];
            r.read_exact(&mut buf)
                .map_err(|_| bad(format!("truncated in the {what} ({n} values expected)")))?;
            sum = fnv1a(sum, &buf);
            Ok(buf
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect())
        };
        let params = read_arr("parameters")?;
        let m = read_arr("first moments")?;
        let v = read_arr("second moments")?;
        r.read_exact(&mut word)
            .map_err(|_| bad("truncated before the checksum".into()))?;
        if u64::from_le_bytes(word) != sum {
            return Err(bad("checksum mismatch: the file is corrupt".into()));
        }
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
            },
            params: (0..n).map(|i| (i as f32).sin()).collect(),
            m: (0..n).map(|i| i as f32 * 1e-3).collect(),
            v: (0..n)
                .map(|i| f32::from_bits(0x3f80_0000 + i as u32))
                .collect(),
        }
    }

    fn tmpdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("nvsh-gpt-ckpt-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_file_that_is_not_a_checkpoint_is_named_as_such() {
        let path = tmpdir().join("random.bin");
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
        let path = stage_path(&tmpdir().join("run"), 1, 2);
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
        let dir = tmpdir();
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
}
