//! The `dev` mode state file: load it at start, save it after every change
//! (write a temporary file, then rename). It must not decide when to save.

use super::seed::Seed;
use super::state::State;
use std::path::Path;

/// The saved state when `state_file` exists (it wins over the seed),
/// otherwise the seed's.
pub(super) fn load(seed: &Seed, state_file: &Path) -> crate::Result<State> {
    let state = match std::fs::read(state_file) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            crate::Error::InvalidArgument(format!(
                "fake Linode state {}: {e}",
                state_file.display()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::from_seed(seed),
        Err(e) => {
            return Err(crate::Error::Internal(format!(
                "fake Linode state {}: {e}",
                state_file.display()
            )))
        }
    };
    Ok(state)
}

/// Replaces `path` atomically; a failure is logged, the fake serves on.
pub(super) fn save(path: &Path, state: &State) {
    let tmp = path.with_extension("tmp");
    let written = serde_json::to_vec_pretty(state)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        log::error!("fake Linode: cannot save state to {}: {e}", path.display());
    }
}
