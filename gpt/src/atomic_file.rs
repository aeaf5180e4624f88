//! Files written whole or not at all: the contents go to a temporary file beside the target
//! (`TARGET.<pid>.tmp`), which is synced and then renamed onto the target. A crash or an error
//! never leaves a half-written file under the real name, and the temporary file is removed
//! unless the rename happened. Checkpoints, the checkpoint-set pointer and exports use it.

use crate::error::{GptError, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

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
        let mut name = target.as_os_str().to_owned();
        name.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(name);
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
    ) -> Result<()> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| GptError::Io { path, source }
        };
        let file = self.file.take().expect("committed once");
        let mut w = BufWriter::with_capacity(1 << 20, &file);
        write(&mut w)
            .and_then(|_| w.flush())
            .map_err(io(&self.tmp))?;
        drop(w);
        file.sync_all().map_err(io(&self.tmp))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.target).map_err(io(&self.target))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_appears_only_when_committed_and_no_temporary_file_stays() {
        let dir = std::env::temp_dir().join(format!("nvsh-gpt-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("t.bin");
        let f = AtomicFile::create(&target).unwrap();
        assert!(!target.exists());
        f.commit(|w| w.write_all(b"whole")).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"whole");
        // A failed write keeps the old contents and removes its temporary file.
        let f = AtomicFile::create(&target).unwrap();
        let e = f
            .commit(|_| Err(std::io::Error::other("disk full")))
            .unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"whole");
        // Dropped without a commit: nothing but the target remains.
        drop(AtomicFile::create(&target).unwrap());
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["t.bin"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
