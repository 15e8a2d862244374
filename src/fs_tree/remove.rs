//! Removing a directory tree a tenant wrote, however deep or wide, in a
//! bounded thread stack and at most four descriptors: the walk is a loop
//! over a heap stack of the directories it came down through (their names
//! and identities), holding only the directory it is in open, and climbs
//! back through `..`, checking it arrived where it came from. Nothing is
//! followed: a symlink is unlinked as an entry, a directory swapped for a
//! symlink is refused by `O_NOFOLLOW`, another filesystem mounted inside is
//! never entered. A tree the tenant changes meanwhile (entries appearing,
//! vanishing or moving) is walked again from the top, a bounded number of
//! times. Directories the owner cannot write are opened up first, so a
//! server that does not let root override modes still lets the tree go.

use super::dir::{Dir, Identity, Kind};
use crate::Error;
use std::ffi::{CStr, CString};
use std::io;

/// How many subdirectories one reading of a directory remembers to visit;
/// the directory is read again once they are gone. Keeps the memory of a
/// walk bounded by its depth, whatever the width.
const BATCH: usize = 64;

/// How many times the tenant may change the tree under one removal before
/// it gives up (Unavailable, so the caller retries later).
const MAX_RESTARTS: u32 = 200;

/// Subdirectories of a directory still to visit, as one reading found
/// them.
#[derive(Default)]
struct Todo {
    names: Vec<CString>,
    /// The reading saw more than `BATCH`: read again once these are gone.
    more: bool,
}

/// A directory the walk is inside of, below the top.
struct Level {
    /// Its name in the directory above.
    name: CString,
    /// The directory above, to check the climb back.
    above: Identity,
    /// What is still to visit in the directory above.
    above_todo: Todo,
}

/// Why one pass of the walk stopped.
enum Stop {
    /// The tree changed under the walk: start again from the top.
    Changed(String),
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Failed(e)
    }
}

fn failed(what: &str, name: &CStr, e: io::Error) -> Stop {
    Stop::Failed(Error::Internal(format!(
        "{what} {}: {e}",
        name.to_string_lossy()
    )))
}

/// Whether an error means the tenant changed the entry meanwhile.
fn raced(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTEMPTY | libc::EEXIST | libc::ENOTDIR | libc::ELOOP)
    )
}

/// Removes the entry `name` of `parent` and, if it is a directory,
/// everything below it. Nothing there is success.
pub fn remove_tree(parent: &Dir, name: &CStr) -> Result<(), Error> {
    let device = parent
        .identity()
        .map_err(|e| Error::Internal(format!("inspect the parent of {name:?}: {e}")))?
        .dev;
    let mut restarts = 0;
    loop {
        match pass(parent, name, device) {
            Ok(()) => return Ok(()),
            Err(Stop::Failed(e)) => return Err(e),
            Err(Stop::Changed(why)) => {
                restarts += 1;
                if restarts > MAX_RESTARTS {
                    return Err(Error::Unavailable(format!(
                        "the tree of {} kept changing while it was removed ({why}); retry",
                        name.to_string_lossy()
                    )));
                }
                log::debug!(
                    "removing {}: {why}; walking it again",
                    name.to_string_lossy()
                );
            }
        }
    }
}

/// Opens the subdirectory `name` of `dir` for the walk: opened up when the
/// owner may not read it, refused when it is another filesystem.
fn enter(dir: &Dir, name: &CStr, device: u64) -> Result<Option<Dir>, Stop> {
    let opened = match dir.child(name) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            dir.open_up_child(name)
                .map_err(|e| failed("open up", name, e))?;
            dir.child(name)
        }
        other => other,
    };
    let child = match opened {
        Ok(child) => child,
        // Gone, or no longer a directory: the caller reads `dir` again.
        Err(e) if raced(&e) => return Ok(None),
        Err(e) => return Err(failed("open", name, e)),
    };
    let identity = child.identity().map_err(|e| failed("inspect", name, e))?;
    if identity.dev != device {
        return Err(Stop::Failed(Error::FailedPrecondition(format!(
            "{} is another filesystem mounted inside the tree; it is left alone",
            name.to_string_lossy()
        ))));
    }
    let mode = child.mode().map_err(|e| failed("inspect", name, e))?;
    if mode & 0o700 != 0o700 {
        child
            .set_mode(mode | 0o700)
            .map_err(|e| failed("chmod", name, e))?;
    }
    Ok(Some(child))
}

/// Unlinks every entry of `dir` that is not a directory and returns up to
/// `BATCH` of its subdirectories (none: it is empty, as far as this
/// reading saw).
fn read(dir: &Dir) -> Result<Todo, Stop> {
    let mut todo = Todo::default();
    let entries = dir
        .entries()
        .map_err(|e| failed("list", c"a directory", e))?;
    for entry in entries {
        let (name, kind) = entry.map_err(|e| failed("list", c"a directory", e))?;
        match kind {
            Kind::Directory if todo.names.len() < BATCH => todo.names.push(name),
            Kind::Directory => todo.more = true,
            Kind::Other => match dir.unlink(&name) {
                Ok(()) => {}
                // Gone meanwhile, or it is a directory now: the removal of
                // the directory tells, and the walk starts again.
                Err(e) if raced(&e) || e.raw_os_error() == Some(libc::EISDIR) => {}
                Err(e) => return Err(failed("unlink", &name, e)),
            },
        }
    }
    Ok(todo)
}

/// One walk from the top.
fn pass(parent: &Dir, name: &CStr, device: u64) -> Result<(), Stop> {
    let top = match parent.kind_of(name) {
        Ok(None) => return Ok(()),
        Ok(Some(Kind::Other)) => {
            return match parent.unlink(name) {
                Ok(()) => Ok(()),
                Err(e) if raced(&e) => Err(Stop::Changed(format!("unlink: {e}"))),
                Err(e) => Err(failed("unlink", name, e)),
            }
        }
        Ok(Some(Kind::Directory)) => match enter(parent, name, device)? {
            Some(dir) => dir,
            None => return Err(Stop::Changed("the top moved".into())),
        },
        Err(e) => return Err(failed("inspect", name, e)),
    };
    let mut here = top;
    let mut todo = read(&here)?;
    let mut levels: Vec<Level> = Vec::new();
    loop {
        if let Some(next) = todo.names.pop() {
            let above = here.identity().map_err(|e| failed("inspect", &next, e))?;
            if let Some(child) = enter(&here, &next, device)? {
                levels.push(Level {
                    name: next,
                    above,
                    above_todo: std::mem::replace(&mut todo, read(&child)?),
                });
                here = child;
            }
            continue;
        }
        if todo.more {
            todo = read(&here)?;
            continue;
        }
        // Empty, as far as the walk saw: climb and remove it.
        let Some(level) = levels.pop() else {
            break;
        };
        let up = here
            .parent()
            .map_err(|e| failed("open the parent of", &level.name, e))?;
        let arrived = up
            .identity()
            .map_err(|e| failed("inspect the parent of", &level.name, e))?;
        if arrived != level.above {
            return Err(Stop::Changed(format!(
                "{} moved while it was walked",
                level.name.to_string_lossy()
            )));
        }
        match up.remove_dir(&level.name) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) if raced(&e) => {
                return Err(Stop::Changed(format!(
                    "remove {}: {e}",
                    level.name.to_string_lossy()
                )))
            }
            Err(e) => return Err(failed("remove", &level.name, e)),
        }
        here = up;
        todo = level.above_todo;
    }
    drop(here);
    match parent.remove_dir(name) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) if raced(&e) => Err(Stop::Changed(format!("remove the top: {e}"))),
        Err(e) => Err(failed("remove", name, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Scratch;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::Path;

    /// `depth` directories `d` inside each other under `top`, each with a
    /// file, made through descriptors (a path that deep is past PATH_MAX).
    fn chain(top: &Path, depth: usize) {
        let mut here = Dir::open(top).unwrap();
        for _ in 0..depth {
            here.make_dir(c"d", 0o755).unwrap();
            here = here.child(c"d").unwrap();
            here.make_dir(c"e", 0o755).unwrap();
        }
    }

    fn removed(parent: &Path, name: &str) -> Result<(), Error> {
        remove_tree(&Dir::open(parent).unwrap(), &CString::new(name).unwrap())
    }

    #[test]
    fn a_deep_tree_goes_in_a_small_stack() {
        let s = Scratch::new("tree-deep");
        std::fs::create_dir(s.path().join("vol")).unwrap();
        chain(&s.path().join("vol"), 5_000);
        // 64 KiB of stack: a recursive walk would need far more.
        let parent = s.path().to_path_buf();
        std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || removed(&parent, "vol"))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        assert!(!s.path().join("vol").exists());
    }

    #[test]
    fn wide_trees_links_and_locked_directories_go_and_nothing_is_followed() {
        let s = Scratch::new("tree-wide");
        let vol = s.path().join("vol");
        let outside = s.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        for i in 0..300 {
            let d = vol.join(format!("d{i}"));
            std::fs::create_dir_all(d.join("inner")).unwrap();
            std::fs::write(d.join("inner/f"), "x").unwrap();
        }
        symlink(&outside, vol.join("link-to-outside")).unwrap();
        symlink(&outside, vol.join("d1/inner/link")).unwrap();
        std::fs::hard_link(outside.join("keep"), vol.join("d2/hard")).unwrap();
        let locked = vol.join("d3/inner");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        std::fs::set_permissions(vol.join("d4"), std::fs::Permissions::from_mode(0o500)).unwrap();
        removed(s.path(), "vol").unwrap();
        assert!(!vol.exists());
        assert_eq!(std::fs::read_to_string(outside.join("keep")).unwrap(), "x");
        removed(s.path(), "vol").unwrap();
        std::fs::write(s.path().join("file"), "x").unwrap();
        removed(s.path(), "file").unwrap();
        assert!(!s.path().join("file").exists());
    }

    #[test]
    fn a_tree_changing_under_the_walk_still_goes() {
        let s = Scratch::new("tree-racing");
        let vol = s.path().join("vol");
        for i in 0..50 {
            std::fs::create_dir_all(vol.join(format!("a{i}/b/c"))).unwrap();
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tenant = {
            let (vol, stop) = (vol.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // Moves, makes and removes entries; errors are the walk's doing.
                    let _ = std::fs::rename(
                        vol.join(format!("a{}", n % 50)),
                        vol.join(format!("m{n}")),
                    );
                    let _ = std::fs::create_dir_all(vol.join(format!("m{n}/x")));
                    let _ = std::fs::write(vol.join(format!("f{n}")), "x");
                    let _ = std::fs::remove_file(vol.join(format!("f{}", n.saturating_sub(1))));
                    n += 1;
                    if n > 2_000 {
                        break;
                    }
                }
            })
        };
        let result = removed(s.path(), "vol");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        tenant.join().unwrap();
        match result {
            Ok(()) => {}
            Err(Error::Unavailable(_)) => {}
            Err(e) => panic!("a tenant's changes are never Internal: {e:?}"),
        }
        // Once the tenant stops, the removal finishes.
        removed(s.path(), "vol").unwrap();
        assert!(!vol.exists());
    }
}
