//! What the fake may ask about the files inside its filesystems, which it
//! does not hold: whoever emulates the exports (dev mode) answers through
//! [`ExportContent`]. Without one, the fake knows no directory and no usage.
//! It must not touch files itself.

use std::sync::Arc;

/// Byte and file totals of a directory tree, as a quota samples them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirUsage {
    pub bytes: i64,
    pub files: i64,
    /// When it was counted (seconds since the epoch); `None`: now.
    pub collected_at: Option<i64>,
}

/// The content of the exports. `export` is a filesystem's export path
/// (`/<label>-<hex id>`), `path` an absolute path inside it
/// (`/csi-volumes/x`); neither is ever resolved outside that export.
pub trait ExportContent: Send + Sync {
    /// Whether `path` is a directory of `export` (symlinks are not).
    fn is_directory(&self, export: &str, path: &str) -> bool;
    /// What the tree at `path` holds now; `None` when it is no directory.
    fn usage(&self, export: &str, path: &str) -> Option<DirUsage>;
}

/// The installed [`ExportContent`], kept beside the state (never saved).
#[derive(Clone, Default)]
pub(super) struct ContentHook(pub(super) Option<Arc<dyn ExportContent>>);

impl std::fmt::Debug for ContentHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "ContentHook(installed)"
        } else {
            "ContentHook(none)"
        })
    }
}

impl ContentHook {
    pub(super) fn is_directory(&self, export: &str, path: &str) -> bool {
        self.0
            .as_ref()
            .is_some_and(|c| c.is_directory(export, path))
    }

    pub(super) fn usage(&self, export: &str, path: &str) -> Option<DirUsage> {
        self.0.as_ref().and_then(|c| c.usage(export, path))
    }

    pub(super) fn installed(&self) -> bool {
        self.0.is_some()
    }
}
