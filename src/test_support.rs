//! What unit tests of several modules share: scratch directories (one per
//! tag and process, made empty, removed when dropped with `rm -rf`, so a
//! test's tree of any depth goes with it) and string maps written as
//! pairs.

use std::path::{Path, PathBuf};

pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("lnc-{tag}-{}", std::process::id()));
        remove(&path);
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.0.join(rel)
    }
}

/// Removes `path` and all below it with `rm -rf`, which walks a tree of
/// any depth without recursing on the stack.
fn remove(path: &Path) {
    let _ = std::process::Command::new("rm")
        .arg("-rf")
        .arg(path)
        .status();
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove(&self.0);
    }
}

/// `pairs` as an owned map (a context, parameters, labels).
pub fn owned<M: FromIterator<(String, String)>>(pairs: &[(&str, &str)]) -> M {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
