//! What unit tests of several modules share: scratch directories (one per
//! tag and process, made empty, removed when dropped through `fs_tree`'s
//! walk, so a test's tree of any depth goes with it) and string maps
//! written as pairs.

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

fn remove(path: &Path) {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    if let (Ok(parent), Ok(name)) = (
        crate::fs_tree::Dir::open(parent),
        crate::fs_tree::c_name(name),
    ) {
        let _ = crate::fs_tree::remove_tree(&parent, &name);
    }
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
