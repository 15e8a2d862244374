//! The walker: reads the source tree depth first, makes its directories
//! and queues every other entry for the workers. It keeps one directory
//! open, remembers each level above by identities and readdir cookie, and
//! climbs back through `..`, refusing a tree that moved under it; it never
//! copies an entry itself.

use super::attrs::{identity, Attrs};
use super::node::{path, Folder, Job, Node};
use super::queue::Queue;
use super::{changed, failed, is_enoent, raced, source_error, stopped, Copy, Progress};
use crate::fs_tree::dir::{Dir, Entries, Identity, Kind, Position};
use crate::Error;
use std::ffi::{CStr, CString};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A directory the walker is below: what it needs to come back.
struct Level {
    src: Identity,
    dst: Identity,
    /// Where the subdirectory the walker went into was read.
    at: Position,
}

impl Copy<'_> {
    /// The walker: reads the source tree depth first, makes its
    /// directories and queues everything else.
    pub(super) fn walk(&self, top: Arc<Folder>, queue: &Queue) -> Result<(), Error> {
        let mut here = top;
        let mut from: Option<(Position, CString)> = None;
        let mut levels: Vec<Level> = Vec::new();
        loop {
            if let Some((name, at)) = self.read(&here, from.take(), queue)? {
                let child = self.enter(&here, &name)?;
                levels.push(Level {
                    src: here.src_id,
                    dst: here.dst_id,
                    at,
                });
                here = child;
                continue;
            }
            let Some(level) = levels.pop() else {
                return self.done_with(&here);
            };
            let up = self.climb(&here, &level)?;
            self.done_with(&here)?;
            from = Some((level.at, here.node.name.clone()));
            here = up;
        }
    }

    /// Queues the entries of `here` from where `from` says (after that
    /// subdirectory) up to the next subdirectory, which it returns with
    /// its place; `None` at the end.
    fn read(
        &self,
        here: &Arc<Folder>,
        from: Option<(Position, CString)>,
        queue: &Queue,
    ) -> Result<Option<(CString, Position)>, Error> {
        let mut entries = self.entries(here, from)?;
        while let Some(entry) = entries.next() {
            if self.halted() {
                return Err(stopped());
            }
            let (name, kind) = entry.map_err(|e| failed("list", &path(&here.node, c""), e))?;
            match kind {
                Kind::Directory => return Ok(Some((name, entries.position()))),
                Kind::Other => {
                    here.node.left.fetch_add(1, Ordering::AcqRel);
                    let job = Job {
                        folder: here.clone(),
                        name,
                    };
                    if !queue.add(job) {
                        return Err(Error::Internal("copy: the workers are gone".into()));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The entries of `here`, read on after the subdirectory `from` names.
    fn entries<'f>(
        &self,
        here: &'f Folder,
        from: Option<(Position, CString)>,
    ) -> Result<Entries<'f>, Error> {
        let list = |e| failed("list", &path(&here.node, c""), e);
        let Some((at, name)) = from else {
            return here.src.entries().map_err(list);
        };
        match entries_after(&here.src, at, &name).map_err(list)? {
            Some(entries) => Ok(entries),
            None => Err(changed(&path(&here.node, &name), "it is gone")),
        }
    }

    /// Opens the subdirectory `name` of `here` on both sides, making it in
    /// the destination (or finding it made by an earlier attempt, whose
    /// temporary files it removes).
    fn enter(&self, here: &Folder, name: &CStr) -> Result<Arc<Folder>, Error> {
        let at = || path(&here.node, name);
        let src = here
            .src
            .child(name)
            .map_err(|e| source_error("open", &at(), e, raced))?;
        let st = src.stat().map_err(|e| failed("inspect", &at(), e))?;
        if st.st_dev != self.device {
            return Err(Error::FailedPrecondition(format!(
                "copy: {:?} is another filesystem mounted inside the source; it is not copied",
                at()
            )));
        }
        if identity(&st) == self.to_id {
            return Err(Error::FailedPrecondition(format!(
                "copy: the destination is inside the source, at {:?}",
                at()
            )));
        }
        let fresh = make_dir(&here.dst, name).map_err(|e| failed("make", &at(), e))?;
        let dst = here.dst.child(name).map_err(|e| failed("open", &at(), e))?;
        let dst_st = dst.stat().map_err(|e| failed("inspect", &at(), e))?;
        let node = Arc::new(Node {
            parent: Some(here.node.clone()),
            name: name.to_owned(),
            attrs: Attrs::of(&st),
            fresh,
            left: AtomicUsize::new(1),
        });
        if !fresh {
            self.clean(&dst, &node)?;
        }
        Progress::add(&self.options.progress.directories, 1);
        Ok(Arc::new(Folder::new(
            (src, dst),
            node,
            (identity(&st), identity(&dst_st)),
        )))
    }

    /// Opens the parents of `here` on both sides, checking they are the
    /// directories the walk came down from.
    fn climb(&self, here: &Folder, level: &Level) -> Result<Arc<Folder>, Error> {
        let at = || path(&here.node, c"..");
        let Some(node) = here.node.parent.clone() else {
            return Err(Error::Internal("copy: climbed above the top".into()));
        };
        let src = here.src.parent().map_err(|e| failed("open", &at(), e))?;
        let dst = here.dst.parent().map_err(|e| failed("open", &at(), e))?;
        let src_id = src.identity().map_err(|e| failed("inspect", &at(), e))?;
        let dst_id = dst.identity().map_err(|e| failed("inspect", &at(), e))?;
        if src_id != level.src || dst_id != level.dst {
            return Err(changed(&path(&here.node, c""), "it moved"));
        }
        Ok(Arc::new(Folder::new((src, dst), node, (src_id, dst_id))))
    }
}

/// The entries of `dir` after `name`, which was read at `at`; `None` when
/// `name` is gone.
fn entries_after<'d>(dir: &'d Dir, at: Position, name: &CStr) -> io::Result<Option<Entries<'d>>> {
    let mut entries = dir.entries_at(at)?;
    if matches!(entries.next(), Some(Ok((read, _))) if read.as_c_str() == name) {
        return Ok(Some(entries));
    }
    // The cookie no longer leads there: find the name from the start.
    let mut entries = dir.entries()?;
    loop {
        match entries.next() {
            Some(Ok((read, _))) if read.as_c_str() == name => return Ok(Some(entries)),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e),
            None => return Ok(None),
        }
    }
}

/// Makes the directory `name` in `dir`; false when an earlier attempt's is
/// there. Anything else standing there is removed first.
fn make_dir(dir: &Dir, name: &CStr) -> io::Result<bool> {
    match dir.make_dir(name, 0o700) {
        Ok(()) => return Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
        Err(e) => return Err(e),
    }
    if dir.kind_of(name)? == Some(Kind::Directory) {
        return Ok(false);
    }
    match dir.unlink(name) {
        Ok(()) => {}
        Err(e) if is_enoent(&e) => {}
        Err(e) => return Err(e),
    }
    dir.make_dir(name, 0o700).map(|()| true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Scratch;

    /// The names `entries` gives, to the end.
    fn rest(entries: Entries<'_>) -> Vec<CString> {
        entries.map(|e| e.unwrap().0).collect()
    }

    #[test]
    fn the_walk_reads_on_after_a_subdirectory_even_when_the_cookie_misleads() {
        let s = Scratch::new("copy-cookie");
        std::fs::create_dir_all(s.join("other")).unwrap();
        for i in 0..100 {
            std::fs::write(s.join(format!("e{i}")), "").unwrap();
            std::fs::write(s.join(format!("other/o{i}")), "").unwrap();
        }
        let dir = Dir::open(s.path()).unwrap();
        let all = rest(dir.entries().unwrap());
        let mut entries = dir.entries().unwrap();
        let name = loop {
            let (name, _) = entries.next().unwrap().unwrap();
            if name.as_bytes() == b"e50" {
                break name;
            }
        };
        let at = entries.position();
        let after = all[all.iter().position(|n| *n == name).unwrap() + 1..].to_vec();
        assert_eq!(
            rest(entries_after(&dir, at, &name).unwrap().unwrap()),
            after
        );
        // A place among the entries of another directory leads elsewhere.
        let other = Dir::open(&s.join("other")).unwrap();
        let mut elsewhere = other.entries().unwrap();
        elsewhere.nth(70).unwrap().unwrap();
        let wrong = elsewhere.position();
        assert_eq!(
            rest(entries_after(&dir, wrong, &name).unwrap().unwrap()),
            after
        );
        assert!(entries_after(&dir, at, c"gone").unwrap().is_none());
    }
}
