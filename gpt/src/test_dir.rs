//! A fresh folder per unit test (tests only): unit tests run on parallel threads of one
//! process, so a folder named by the process alone is shared, and a test that removes its own
//! takes the others' files with it.

use std::path::PathBuf;

/// `nvsh-gpt-<what>-<pid>` under the system's temporary folder, emptied and created; `what`
/// names the test.
pub fn test_dir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nvsh-gpt-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
