//! The small text files the driver keeps on a shared parent (ownership
//! markers, the kept-data ledger, snapshot records): read without
//! following a symlink and only up to a bound (a longer file is not the
//! driver's), and written whole (a new file renamed over the old one,
//! synced first), so a reader never sees one half written. What the files say is their owners' (a
//! reader hands in its parser).

use crate::Error;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Internal(format!("{what} {}: {e}", path.display()))
}

/// The first `limit` bytes of the file at `path` (`what` it is, for
/// errors), or `None` when there is none.
pub fn read(path: &Path, limit: u64, what: &str) -> Result<Option<String>, Error> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&format!("read {what}"), path, e)),
    };
    let mut text = String::new();
    file.take(limit)
        .read_to_string(&mut text)
        .map_err(|e| io(&format!("read {what}"), path, e))?;
    Ok(Some(text))
}

/// The file at `path` (see `read`) as `parse` reads it, or `None` when
/// there is none; one `parse` rejects is FailedPrecondition: no `what`
/// (after `article`) the driver could have written.
pub fn read_parsed<T>(
    path: &Path,
    limit: u64,
    (article, what): (&str, &str),
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>, Error> {
    let Some(text) = read(path, limit, what)? else {
        return Ok(None);
    };
    parse(&text).map(Some).ok_or_else(|| {
        Error::FailedPrecondition(format!(
            "{} is not {article} {what} the driver wrote",
            path.display()
        ))
    })
}

/// Replaces the file at `path` with `text`, through `tmp` (a name of the
/// same directory that nothing else uses).
pub fn write(path: &Path, tmp: &Path, text: &str, what: &str) -> Result<(), Error> {
    let what = format!("write {what}");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(tmp)
        .map_err(|e| io(&what, tmp, e))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| io(&what, tmp, e))?;
    std::fs::rename(tmp, path).map_err(|e| io(&what, path, e))
}
