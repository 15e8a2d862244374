//! The Linode API token, from `LINODE_TOKEN` (fixed for the process's
//! life) or from the file `LINODE_TOKEN_FILE` names (a Secret mounted as a
//! volume, which kubelet rewrites when the Secret changes). A file is read
//! again when it changes (looked at no more than once a second) and once
//! more when the API refuses the token (401), so a rotation needs no
//! restart; a file that cannot be read, or holds nothing, keeps the last
//! good token and is warned about once. The token only ever leaves as a
//! `Secret`; nothing here logs or formats it.

use crate::mutex::lock;
use crate::secret::Secret;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the file is looked at for a change.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Which file version was read: a Secret update swaps the file (a new
/// inode behind kubelet's symlinks) or rewrites it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime: (m.mtime(), m.mtime_nsec()),
    })
}

struct State {
    value: Secret,
    read_at: Instant,
    stamp: Option<Stamp>,
    looked_at: Instant,
    /// A failed read was warned about, and none has succeeded since.
    warned: bool,
}

/// The token every request of one client sends.
pub struct Token {
    file: Option<PathBuf>,
    state: Mutex<State>,
}

impl Token {
    /// `value`, read from `file` when there is one (and kept up to date).
    pub fn new(value: Secret, file: Option<PathBuf>) -> Token {
        let now = Instant::now();
        Token {
            state: Mutex::new(State {
                value,
                read_at: now,
                stamp: file.as_deref().and_then(stamp),
                looked_at: now,
                warned: false,
            }),
            file,
        }
    }

    /// The token to send now: the file's, read again when it changed.
    pub fn current(&self) -> Secret {
        let mut state = lock(&self.state);
        if let Some(file) = &self.file {
            if state.looked_at.elapsed() >= LOOK_EVERY {
                state.looked_at = Instant::now();
                let now = stamp(file);
                if now != state.stamp {
                    self.reload(&mut state, file, now);
                }
            }
        }
        state.value.clone()
    }

    /// After the API refused `used` (401): the file read again at once;
    /// the token to try instead, or `None` when there is no other (from
    /// the environment, or the file still holds the refused one).
    pub fn after_unauthorized(&self, used: &Secret) -> Option<Secret> {
        let file = self.file.as_ref()?;
        let mut state = lock(&self.state);
        if state.value == *used {
            let now = stamp(file);
            state.looked_at = Instant::now();
            self.reload(&mut state, file, now);
        }
        (state.value != *used).then(|| state.value.clone())
    }

    fn reload(&self, state: &mut State, file: &Path, now: Option<Stamp>) {
        match Secret::from_file(file) {
            Ok(value) => {
                let changed = value != state.value;
                state.value = value;
                state.read_at = Instant::now();
                state.stamp = now;
                state.warned = false;
                crate::metrics::linode_token_reload(true);
                if changed {
                    log::info!("LINODE_TOKEN_FILE {}: read a new token", file.display());
                }
            }
            Err(why) => {
                crate::metrics::linode_token_reload(false);
                if !state.warned {
                    log::warn!("LINODE_TOKEN_FILE: {why}; keeping the token read before");
                    state.warned = true;
                }
            }
        }
    }

    /// Where the token comes from, for a refusal's message: the variable,
    /// and for a file when it was last read.
    pub fn source(&self) -> String {
        match &self.file {
            None => "LINODE_TOKEN".to_string(),
            Some(file) => format!(
                "LINODE_TOKEN_FILE {}, last read {} s ago",
                file.display(),
                lock(&self.state).read_at.elapsed().as_secs()
            ),
        }
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Scratch;

    /// Replaces the file the way kubelet updates a Secret volume: a new
    /// file renamed over the old.
    fn rotate(path: &Path, text: &str) {
        let tmp = path.with_extension("new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn a_file_is_read_again_when_it_changes_or_the_token_is_refused() {
        let dir = Scratch::new("token-rotate");
        let path = dir.join("token");
        rotate(&path, "old\n");
        let token = Token::new(Secret::from_file(&path).unwrap(), Some(path.clone()));
        assert_eq!(token.current().expose(), "old");
        rotate(&path, "  new  \n");
        // Refused: read again at once, without waiting for the next look.
        let used = Secret::new("old");
        assert_eq!(token.after_unauthorized(&used).unwrap().expose(), "new");
        assert_eq!(token.current().expose(), "new");
        // Refused again with the file unchanged: nothing else to try.
        assert!(token.after_unauthorized(&Secret::new("new")).is_none());
        // A broken file keeps the last good token.
        rotate(&path, "   \n");
        assert!(token.after_unauthorized(&Secret::new("new")).is_none());
        assert_eq!(token.current().expose(), "new");
        std::fs::remove_file(&path).unwrap();
        assert!(token.after_unauthorized(&Secret::new("new")).is_none());
        assert!(
            token.source().starts_with("LINODE_TOKEN_FILE "),
            "{}",
            token.source()
        );
    }

    #[test]
    fn a_token_from_the_environment_never_changes() {
        let token = Token::new(Secret::new("env"), None);
        assert!(token.after_unauthorized(&Secret::new("env")).is_none());
        assert_eq!(token.current().expose(), "env");
        assert_eq!(token.source(), "LINODE_TOKEN");
        assert_eq!(format!("{token:?}"), "Token { file: None, .. }");
    }

    #[test]
    fn an_unreadable_empty_or_blank_file_is_refused_with_the_reason() {
        let dir = Scratch::new("token-bad");
        assert!(Secret::from_file(&dir.join("missing"))
            .unwrap_err()
            .contains("cannot read"));
        for blank in ["", "  \n\t"] {
            std::fs::write(dir.join("blank"), blank).unwrap();
            assert!(Secret::from_file(&dir.join("blank"))
                .unwrap_err()
                .contains("holds no token"));
        }
    }
}
