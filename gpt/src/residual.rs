//! The error-feedback residual of sparse gradient averaging in a checkpoint set: what a PE has
//! not sent yet (`--grad-compress` with error feedback keeps it in `nvshmem::SparseAllreduce`).
//! Replicas differ, so every PE writes a file of its own beside the stage files,
//! `residual-peP-of-Q.ckpt` (P the PE, Q = pp x dp), before `PREFIX.latest` moves; a resume
//! loads it back, since without it the gradient mass it holds is lost.
//!
//! Format (little-endian): the magic line `NVSHGPT-RESIDUAL 1\n`, a text header of `key=value`
//! lines ending with `end\n` (method, density, error_feedback, len: the gradient arena's length,
//! pp, dp, pe, step), then the value count (u64), the values (f32) and an FNV-1a 64 checksum of
//! their bytes (u64): the stage files' body ([`crate::checkpoint`]), written the same way,
//! through an [`AtomicFile`].

use crate::checkpoint::{io_err, read_arrays, read_header, write_arrays};
use crate::error::{GptError, Result};
use nvsh_plot::AtomicFile;
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// The magic line without its version number.
const MAGIC: &str = "NVSHGPT-RESIDUAL";
/// The format this program writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The sparse averaging a residual belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct ResidualSpec {
    /// The method's name as `--grad-compress` takes it (`gtopk`).
    pub method: String,
    pub density: f64,
    pub error_feedback: bool,
    /// Elements: the gradient arena's length (the largest stage's parameters).
    pub len: usize,
}

impl ResidualSpec {
    /// `METHOD:DENSITY`, as `--grad-compress` takes it.
    pub fn flag(&self) -> String {
        // f64's Display is the shortest text that parses back to the same value.
        format!("{}:{}", self.method, self.density)
    }
}

/// A residual file's header: the averaging, the job layout and the PE, the set's step.
#[derive(Clone, Debug, PartialEq)]
pub struct ResidualHeader {
    pub spec: ResidualSpec,
    pub pp: usize,
    pub dp: usize,
    pub pe: usize,
    /// Steps completed (the set's step).
    pub step: u64,
}

/// A PE's saved residual.
#[derive(Clone, Debug, PartialEq)]
pub struct ResidualFile {
    pub header: ResidualHeader,
    pub values: Vec<f32>,
}

/// The residual file of `pe` of `pes` inside a set's directory.
pub fn residual_path(dir: &Path, pe: usize, pes: usize) -> PathBuf {
    dir.join(format!("residual-pe{pe}-of-{pes}.ckpt"))
}

/// Every residual file in a set's directory, whatever job wrote it, sorted by name (none when
/// the directory does not exist).
pub fn residual_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(io_err(dir))?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("residual-") && name.ends_with(".ckpt") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

impl ResidualFile {
    /// Writes the file to `path` (through [`AtomicFile`], which syncs it before the rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let h = &self.header;
        if self.values.len() != h.spec.len {
            return Err(GptError::Checkpoint(format!(
                "a residual of {} values for a gradient arena of {}",
                self.values.len(),
                h.spec.len
            )));
        }
        let header = format!(
            "{MAGIC} {FORMAT_VERSION}\nmethod={}\ndensity={}\nerror_feedback={}\nlen={}\npp={}\n\
             dp={}\npe={}\nstep={}\nend\n",
            h.spec.method,
            h.spec.density,
            h.spec.error_feedback,
            h.spec.len,
            h.pp,
            h.dp,
            h.pe,
            h.step
        );
        AtomicFile::create(path)
            .map_err(io_err(path))?
            .commit(|w| write_arrays(w, &header, &[&self.values[..]]))?;
        Ok(())
    }

    /// Reads and verifies a residual file.
    pub fn load(path: &Path) -> Result<ResidualFile> {
        let file = std::fs::File::open(path).map_err(io_err(path))?;
        let mut r = BufReader::new(file);
        let bad = |m: String| GptError::Checkpoint(format!("{}: {m}", path.display()));
        let (_, f) = read_header(&mut r, path, MAGIC, FORMAT_VERSION, "residual file")?;
        let density = f
            .get("density")?
            .parse::<f64>()
            .map_err(|_| bad(format!("density={:?} is not a number", f.kv["density"])))?;
        let header = ResidualHeader {
            spec: ResidualSpec {
                method: f.get("method")?.clone(),
                density,
                error_feedback: f.get("error_feedback")? == "true",
                len: f.num("len")? as usize,
            },
            pp: f.num("pp")? as usize,
            dp: f.num("dp")? as usize,
            pe: f.num("pe")? as usize,
            step: f.num("step")?,
        };
        let [values] = read_arrays(&mut r, path, "value count", ["residual"])?;
        if values.len() != header.spec.len {
            return Err(bad(format!(
                "holds {} values but its header says len={}",
                values.len(),
                header.spec.len
            )));
        }
        Ok(ResidualFile { header, values })
    }

    /// Errors unless this file (read from `path`) is the residual `want` describes: the same
    /// averaging and arena length, PE and job layout, and the step of the set's stage files.
    pub fn check_fits(&self, want: &ResidualHeader, path: &Path) -> Result<()> {
        let (h, w) = (&self.header, want);
        let drop_hint = format!(
            "or delete the residual-*.ckpt files of {} to continue with a zero residual (what \
             they hold is then never applied)",
            path.parent().unwrap_or(Path::new(".")).display()
        );
        let mut why = Vec::new();
        if h.spec.method != w.spec.method || h.spec.density != w.spec.density {
            why.push(format!(
                "saved by --grad-compress {} but this run has --grad-compress {}; resume with \
                 --grad-compress {}, {drop_hint}",
                h.spec.flag(),
                w.spec.flag(),
                h.spec.flag()
            ));
        } else if h.spec.error_feedback != w.spec.error_feedback {
            why.push(format!(
                "error feedback is {} in the run that saved it and {} now; {drop_hint}",
                on_off(h.spec.error_feedback),
                on_off(w.spec.error_feedback)
            ));
        }
        if (h.pp, h.dp, h.pe) != (w.pp, w.dp, w.pe) {
            why.push(format!(
                "saved by PE {} of --pp {} x --dp {}, loaded by PE {} of --pp {} x --dp {}; \
                 resume with the --pp and --dp that saved it",
                h.pe, h.pp, h.dp, w.pe, w.pp, w.dp
            ));
        } else if h.spec.len != w.spec.len {
            why.push(format!(
                "a residual of {} values, but this run's gradient arena holds {} (another \
                 model or --split); resume with the model and --split that saved it",
                h.spec.len, w.spec.len
            ));
        }
        if h.step != w.step {
            why.push(format!(
                "of step {} while the stage files are of step {}: resume from one save's files \
                 (PREFIX.latest points to the last complete set)",
                h.step, w.step
            ));
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(GptError::Checkpoint(format!(
                "{}: the error-feedback residual does not fit this run: {}",
                path.display(),
                why.join("; ")
            )))
        }
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::test_dir;

    fn sample() -> ResidualFile {
        let len = 1000;
        ResidualFile {
            header: ResidualHeader {
                spec: ResidualSpec {
                    method: "gtopk".into(),
                    density: 0.01,
                    error_feedback: true,
                    len,
                },
                pp: 2,
                dp: 2,
                pe: 3,
                step: 42,
            },
            // Bit patterns a text format would lose: -0, subnormals, NaN payloads.
            values: (0..len)
                .map(|i| match i % 4 {
                    0 => (i as f32).sin() * 1e-3,
                    1 => -0.0,
                    2 => f32::from_bits(i as u32),
                    _ => f32::from_bits(0x7FC0_0000 | i as u32),
                })
                .collect(),
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn round_trip_is_bit_exact_and_fits_its_own_run() {
        let dir = test_dir("resid-round");
        let r = sample();
        let path = residual_path(&dir, 3, 4);
        assert!(path.ends_with("residual-pe3-of-4.ckpt"));
        r.save(&path).unwrap();
        let back = ResidualFile::load(&path).unwrap();
        assert_eq!(back.header, r.header);
        assert_eq!(bits(&back.values), bits(&r.values));
        back.check_fits(&r.header, &path).unwrap();
        let text = std::fs::read(&path).unwrap();
        assert!(text.starts_with(b"NVSHGPT-RESIDUAL 1\nmethod=gtopk\ndensity=0.01\n"));
        // Only residual files are listed, sorted.
        std::fs::write(dir.join("stage0-of-2.ckpt"), b"x").unwrap();
        r.save(&residual_path(&dir, 0, 4)).unwrap();
        let names: Vec<String> = residual_files(&dir)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["residual-pe0-of-4.ckpt", "residual-pe3-of-4.ckpt"]);
        assert!(residual_files(&dir.join("absent")).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn truncated_corrupt_and_foreign_files_are_refused() {
        let dir = test_dir("resid-bad");
        let path = dir.join("residual-pe0-of-2.ckpt");
        sample().save(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        for cut in [bytes.len() - 3, bytes.len() / 2, 60] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let e = ResidualFile::load(&path).unwrap_err();
            assert!(matches!(e, GptError::Checkpoint(_)), "{e}");
            let e = e.to_string();
            assert!(e.contains("truncated") || e.contains("header ends"), "{e}");
        }
        let mut flipped = bytes.clone();
        let k = bytes.len() - 100;
        flipped[k] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        let e = ResidualFile::load(&path).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
        // A header that disagrees with the values it carries.
        let head = bytes.windows(4).position(|w| w == b"end\n").unwrap() + 4;
        let mut edited = String::from_utf8(bytes[..head].to_vec())
            .unwrap()
            .replace("len=1000", "len=999")
            .into_bytes();
        edited.extend_from_slice(&bytes[head..]);
        std::fs::write(&path, &edited).unwrap();
        let e = ResidualFile::load(&path).unwrap_err().to_string();
        assert!(e.contains("len=999"), "{e}");
        // A stage file is not a residual file; a newer format is named.
        std::fs::write(&path, b"NVSHGPT-CKPT 2\nn_layer=1\nend\n").unwrap();
        let e = ResidualFile::load(&path).unwrap_err().to_string();
        assert!(e.contains("not a residual file"), "{e}");
        let mut newer = b"NVSHGPT-RESIDUAL 7\n".to_vec();
        newer.extend_from_slice(&bytes[19..]);
        std::fs::write(&path, &newer).unwrap();
        let e = ResidualFile::load(&path).unwrap_err().to_string();
        assert!(e.contains("residual file format 7"), "{e}");
        let e = ResidualFile::load(&dir.join("missing.ckpt")).unwrap_err();
        assert!(matches!(e, GptError::Io { .. }));
        let mut short = sample();
        short.values.pop();
        assert!(short.save(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn another_method_density_length_layout_or_step_is_refused() {
        let r = sample();
        let path = Path::new("ck.step-00000042/residual-pe3-of-4.ckpt");
        let refused = |edit: &dyn Fn(&mut ResidualHeader)| -> String {
            let mut want = r.header.clone();
            edit(&mut want);
            match r.check_fits(&want, path) {
                Err(e @ GptError::Checkpoint(_)) => e.to_string(),
                other => panic!("{want:?}: {other:?}"),
            }
        };
        let e = refused(&|w| w.spec.method = "oktopk".into());
        assert!(
            e.contains("saved by --grad-compress gtopk:0.01")
                && e.contains("this run has --grad-compress oktopk:0.01")
                && e.contains("resume with --grad-compress gtopk:0.01")
                && e.contains("delete the residual-*.ckpt files of ck.step-00000042"),
            "{e}"
        );
        let e = refused(&|w| w.spec.density = 0.02);
        assert!(e.contains("this run has --grad-compress gtopk:0.02"), "{e}");
        let e = refused(&|w| w.spec.error_feedback = false);
        assert!(e.contains("error feedback is on"), "{e}");
        let e = refused(&|w| w.spec.len = 2000);
        assert!(e.contains("1000 values") && e.contains("--split"), "{e}");
        let e = refused(&|w| w.dp = 4);
        assert!(e.contains("--dp 2") && e.contains("--dp 4"), "{e}");
        let e = refused(&|w| w.step = 41);
        assert!(e.contains("of step 42") && e.contains("step 41"), "{e}");
    }
}
