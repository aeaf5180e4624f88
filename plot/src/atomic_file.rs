//! Files written whole or not at all: the contents go to a temporary file beside the target
//! (`TARGET.<pid>.tmp`), which is synced and then renamed onto the target. A crash or an error
//! never leaves a half-written file under the real name, and the temporary file is removed
//! unless the rename happened. `nvsh` (results, charts) and `nvsh-gpt` (checkpoints, the
//! checkpoint-set pointer, exports) write through it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// The temporary file a write of `target` goes through: `TARGET.<pid>.tmp`.
fn tmp_path(target: &Path) -> PathBuf {
    let mut name = target.as_os_str().to_owned();
    name.push(format!(".{}.tmp", std::process::id()));
    PathBuf::from(name)
}

/// A failed [`AtomicFile::commit`]: the file the error happened on (the temporary file while
/// writing, the target for the rename) and the error.
#[derive(Debug)]
pub struct CommitError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for CommitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// A target file being written through its temporary file.
pub struct AtomicFile {
    target: PathBuf,
    tmp: PathBuf,
    file: Option<File>,
}

impl AtomicFile {
    /// Creates the temporary file beside `target`: the moment to learn that `target` cannot be
    /// written, which callers may use before long work.
    pub fn create(target: &Path) -> std::io::Result<AtomicFile> {
        let tmp = tmp_path(target);
        let file = File::create(&tmp)?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            tmp,
            file: Some(file),
        })
    }

    /// Writes the contents with `write`, syncs them and renames the file onto the target.
    pub fn commit(
        mut self,
        write: impl FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>,
    ) -> Result<(), CommitError> {
        let at = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CommitError { path, source }
        };
        let file = self.file.take().expect("committed once");
        let mut w = BufWriter::with_capacity(1 << 20, &file);
        write(&mut w)
            .and_then(|_| w.flush())
            .map_err(at(&self.tmp))?;
        drop(w);
        file.sync_all().map_err(at(&self.tmp))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.target).map_err(at(&self.target))?;
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `target` through an [`AtomicFile`].
pub fn write_atomic(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    AtomicFile::create(target)?
        .commit(|w| w.write_all(bytes))
        .map_err(|e| e.source)
}

/// Checks that `path` can be written, before any work: not empty, not a directory, and the
/// temporary file a write goes through can be created in its directory (created and removed
/// again), so that a missing or read-only directory is found now. The message is in the
/// user's terms, without the flag (the caller adds it).
pub fn probe_writable(path: &Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err("the path is empty; give a file name".into());
    }
    if path.is_dir() {
        return Err(format!(
            "{} is a directory; give a file name",
            path.display()
        ));
    }
    AtomicFile::create(path).map(drop).map_err(|e| {
        format!(
            "cannot write {} ({e}); give a path in an existing, writable directory",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_appears_only_when_committed_and_no_temporary_file_stays() {
        let dir = std::env::temp_dir().join(format!("nvsh-plot-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("t.bin");
        let f = AtomicFile::create(&target).unwrap();
        assert!(!target.exists());
        f.commit(|w| w.write_all(b"whole")).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"whole");
        // A failed write keeps the old contents, names the file and removes the temporary one.
        let f = AtomicFile::create(&target).unwrap();
        let e = f
            .commit(|_| Err(std::io::Error::other("disk full")))
            .unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        assert!(e.path.to_string_lossy().ends_with(".tmp"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"whole");
        // Dropped without a commit: nothing but the target remains.
        drop(AtomicFile::create(&target).unwrap());
        // Into a directory that does not exist: an error, and nothing left behind.
        let e = write_atomic(&dir.join("no/such/dir.bin"), b"x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["t.bin"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
