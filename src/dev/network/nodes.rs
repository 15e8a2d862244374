//! The node table: which backing file each FUSE node id stands for, how to
//! reach it, how many lookups the kernel holds on it, and the open file
//! handles. It makes no system calls of its own: the callers stat and open,
//! and hand the results in.
//!
//! Holding one descriptor per known inode would exhaust the descriptor limit
//! on a large tree, so only directories keep one (an `O_PATH` descriptor;
//! there are few of them); any other node is reached by name in a directory
//! node, each name holding a reference on that directory node. A hard link
//! looked up under a second name is the same node, reachable by either.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::abi::ROOT_ID;

/// A backing inode's identity: (`st_dev`, `st_ino`).
pub(super) type Inode = (u64, u64);

/// Names kept per node; more hard links than this are reached by the most
/// recent ones, which is enough as the kernel looks a name up again when
/// an older one fails.
const MAX_NAMES: usize = 8;

/// Where a node can be found, for its caller to try in order.
pub(super) struct Places {
    pub(super) inode: Inode,
    /// A directory and a name in it: for a directory node, its own
    /// descriptor and ".".
    pub(super) spots: Vec<(Arc<OwnedFd>, CString)>,
    /// An open descriptor of the node, the only way left to a file whose
    /// every name was removed while it was open.
    pub(super) open: Option<Arc<OwnedFd>>,
}

pub(super) struct Nodes(Mutex<Table>);

struct Table {
    nodes: HashMap<u64, Node>,
    by_inode: HashMap<Inode, u64>,
    handles: HashMap<u64, Handle>,
    next_node: u64,
    next_handle: u64,
}

struct Node {
    inode: Inode,
    /// `S_IFMT` bits: an inode number reused for another type is a new node.
    kind: u32,
    lookups: u64,
    /// Names of other nodes that live in this (directory) node.
    children: u64,
    place: Place,
    handles: Vec<u64>,
}

enum Place {
    Dir(Arc<OwnedFd>),
    Names(Vec<(u64, CString)>),
}

struct Handle {
    fd: Arc<OwnedFd>,
    node: u64,
}

fn lock(m: &Mutex<Table>) -> MutexGuard<'_, Table> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Nodes {
    pub(super) fn new(root: Arc<OwnedFd>, inode: Inode) -> Self {
        let mut table = Table {
            nodes: HashMap::new(),
            by_inode: HashMap::new(),
            handles: HashMap::new(),
            next_node: ROOT_ID + 1,
            next_handle: 1,
        };
        let node = Node {
            inode,
            kind: libc::S_IFDIR,
            lookups: 1,
            children: 0,
            place: Place::Dir(root),
            handles: Vec::new(),
        };
        table.nodes.insert(ROOT_ID, node);
        table.by_inode.insert(inode, ROOT_ID);
        Nodes(Mutex::new(table))
    }

    /// The descriptor of directory node `id`.
    pub(super) fn dir(&self, id: u64) -> Result<Arc<OwnedFd>, i32> {
        match lock(&self.0).nodes.get(&id).map(|n| &n.place) {
            Some(Place::Dir(fd)) => Ok(fd.clone()),
            Some(Place::Names(_)) => Err(libc::ENOTDIR),
            None => Err(libc::ESTALE),
        }
    }

    pub(super) fn places(&self, id: u64) -> Result<Places, i32> {
        let table = lock(&self.0);
        let node = table.nodes.get(&id).ok_or(libc::ESTALE)?;
        let mut spots = Vec::new();
        match &node.place {
            Place::Dir(fd) => spots.push((fd.clone(), c".".to_owned())),
            Place::Names(names) => {
                for (parent, name) in names.iter().rev() {
                    if let Some(Place::Dir(fd)) = table.nodes.get(parent).map(|p| &p.place) {
                        spots.push((fd.clone(), name.clone()));
                    }
                }
            }
        }
        let open = (node.handles.first())
            .and_then(|fh| table.handles.get(fh))
            .map(|h| h.fd.clone());
        Ok(Places {
            inode: node.inode,
            spots,
            open,
        })
    }

    /// Records one more kernel lookup of `name` in directory node `parent`,
    /// which the caller found to be `inode` of type `kind`; `dir` is the
    /// caller's descriptor of it when it is a directory. Returns its node id.
    pub(super) fn enter(
        &self,
        parent: u64,
        name: &CStr,
        inode: Inode,
        kind: u32,
        mut dir: Option<OwnedFd>,
    ) -> Result<u64, i32> {
        if (kind == libc::S_IFDIR) != dir.is_some() {
            return Err(libc::EIO);
        }
        let mut table = lock(&self.0);
        let known = (table.by_inode.get(&inode).copied())
            .filter(|id| table.nodes.get(id).is_some_and(|n| n.kind == kind));
        let id = match known {
            Some(id) => id,
            None => {
                let place = match dir.take() {
                    Some(fd) => Place::Dir(Arc::new(fd)),
                    None => Place::Names(Vec::new()),
                };
                let id = table.next_node;
                table.next_node += 1;
                let node = Node {
                    inode,
                    kind,
                    lookups: 0,
                    children: 0,
                    place,
                    handles: Vec::new(),
                };
                table.nodes.insert(id, node);
                table.by_inode.insert(inode, id);
                id
            }
        };
        let node = table.nodes.get_mut(&id).ok_or(libc::EIO)?;
        node.lookups += 1;
        match (&mut node.place, dir) {
            // The newest descriptor is the one surely still valid: an older
            // one may be of a removed directory whose inode number was
            // reused. The root stays the export it was mounted as.
            (Place::Dir(fd), Some(new)) if id != ROOT_ID => *fd = Arc::new(new),
            (Place::Dir(_), _) => {}
            (Place::Names(_), _) => table.add_name(id, parent, name),
        }
        Ok(id)
    }

    pub(super) fn forget(&self, id: u64, lookups: u64) {
        let mut table = lock(&self.0);
        if let Some(node) = table.nodes.get_mut(&id) {
            node.lookups = node.lookups.saturating_sub(lookups);
        }
        table.collect(id);
    }

    /// `name` in `parent` no longer names `inode` (unlinked, or replaced by
    /// a rename).
    pub(super) fn unname(&self, parent: u64, name: &CStr, inode: Inode) {
        let mut table = lock(&self.0);
        if let Some(&id) = table.by_inode.get(&inode) {
            table.remove_name(id, parent, name);
            table.collect(id);
        }
    }

    /// `inode` moved from `from` to `to` (each a directory node and a name).
    pub(super) fn rename(&self, from: (u64, &CStr), to: (u64, &CStr), inode: Inode) {
        let mut table = lock(&self.0);
        if let Some(&id) = table.by_inode.get(&inode) {
            // The new name first: dropping the old one may collect its
            // directory, which may be the new one's too.
            table.add_name(id, to.0, to.1);
            table.remove_name(id, from.0, from.1);
        }
    }

    /// Registers an open descriptor of node `id`; returns its file handle.
    pub(super) fn open(&self, id: u64, fd: Arc<OwnedFd>) -> u64 {
        let mut table = lock(&self.0);
        let fh = table.next_handle;
        table.next_handle += 1;
        table.handles.insert(fh, Handle { fd, node: id });
        if let Some(node) = table.nodes.get_mut(&id) {
            node.handles.push(fh);
        }
        fh
    }

    pub(super) fn handle(&self, fh: u64) -> Result<Arc<OwnedFd>, i32> {
        let table = lock(&self.0);
        table
            .handles
            .get(&fh)
            .map(|h| h.fd.clone())
            .ok_or(libc::EBADF)
    }

    pub(super) fn release(&self, fh: u64) {
        let mut table = lock(&self.0);
        if let Some(handle) = table.handles.remove(&fh) {
            if let Some(node) = table.nodes.get_mut(&handle.node) {
                node.handles.retain(|&h| h != fh);
            }
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        lock(&self.0).nodes.len()
    }
}

impl Table {
    /// Lets non-directory node `id` be reached as `name` in `parent`.
    fn add_name(&mut self, id: u64, parent: u64, name: &CStr) {
        let Some(Place::Names(names)) = self.nodes.get_mut(&id).map(|n| &mut n.place) else {
            return;
        };
        if names
            .iter()
            .any(|(p, n)| *p == parent && n.as_c_str() == name)
        {
            return;
        }
        let evicted = (names.len() == MAX_NAMES).then(|| names.remove(0).0);
        names.push((parent, name.to_owned()));
        self.adopt(parent);
        if let Some(old_parent) = evicted {
            self.orphan(old_parent);
        }
    }

    fn remove_name(&mut self, id: u64, parent: u64, name: &CStr) {
        let Some(Place::Names(names)) = self.nodes.get_mut(&id).map(|n| &mut n.place) else {
            return;
        };
        let before = names.len();
        names.retain(|(p, n)| !(*p == parent && n.as_c_str() == name));
        if names.len() < before {
            self.orphan(parent);
        }
    }

    fn adopt(&mut self, parent: u64) {
        if let Some(node) = self.nodes.get_mut(&parent) {
            node.children += 1;
        }
    }

    fn orphan(&mut self, parent: u64) {
        if let Some(node) = self.nodes.get_mut(&parent) {
            node.children = node.children.saturating_sub(1);
        }
        self.collect(parent);
    }

    /// Drops node `id` once neither the kernel nor a child name needs it.
    fn collect(&mut self, id: u64) {
        let unused = (self.nodes.get(&id)).is_some_and(|n| n.lookups == 0 && n.children == 0);
        if id == ROOT_ID || !unused {
            return;
        }
        let Some(node) = self.nodes.remove(&id) else {
            return;
        };
        if self.by_inode.get(&node.inode) == Some(&id) {
            self.by_inode.remove(&node.inode);
        }
        if let Place::Names(names) = node.place {
            for (parent, _) in names {
                self.orphan(parent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> OwnedFd {
        std::fs::File::open("/").unwrap().into()
    }

    fn nodes() -> Nodes {
        Nodes::new(Arc::new(fd()), (1, 1))
    }

    #[test]
    fn a_hard_link_is_one_node_under_either_name() {
        let nodes = nodes();
        let a = nodes
            .enter(ROOT_ID, c"a", (1, 10), libc::S_IFREG, None)
            .unwrap();
        let b = nodes
            .enter(ROOT_ID, c"b", (1, 10), libc::S_IFREG, None)
            .unwrap();
        assert_eq!(a, b);
        let names = |id| {
            let places = nodes.places(id).unwrap();
            places.spots.into_iter().map(|(_, n)| n).collect::<Vec<_>>()
        };
        assert_eq!(names(a), [c"b".to_owned(), c"a".to_owned()]);
        nodes.unname(ROOT_ID, c"b", (1, 10));
        assert_eq!(names(a), [c"a".to_owned()]);
        nodes.rename((ROOT_ID, c"a"), (ROOT_ID, c"z"), (1, 10));
        assert_eq!(names(a), [c"z".to_owned()]);
        nodes.forget(a, 2);
        assert_eq!(nodes.places(a).err(), Some(libc::ESTALE));
        assert_eq!(nodes.len(), 1);
    }

    #[test]
    fn a_directory_stays_while_a_name_in_it_is_known() {
        let nodes = nodes();
        let dir = nodes
            .enter(ROOT_ID, c"d", (1, 20), libc::S_IFDIR, Some(fd()))
            .unwrap();
        let file = nodes
            .enter(dir, c"f", (1, 21), libc::S_IFREG, None)
            .unwrap();
        nodes.forget(dir, 1);
        assert!(nodes.dir(dir).is_ok(), "its file still names it");
        // Looked up again, it is the same node.
        assert_eq!(
            nodes.enter(ROOT_ID, c"d", (1, 20), libc::S_IFDIR, Some(fd())),
            Ok(dir)
        );
        nodes.forget(dir, 1);
        nodes.forget(file, 1);
        assert_eq!(nodes.len(), 1, "the file took its directory along");
        assert_eq!(nodes.dir(ROOT_ID).map(drop), Ok(()));
        nodes.forget(ROOT_ID, 100);
        assert_eq!(nodes.len(), 1, "the root is never forgotten");
    }

    #[test]
    fn names_beyond_the_limit_drop_the_oldest_and_a_new_type_is_a_new_node() {
        let nodes = nodes();
        let names: Vec<CString> = (0..MAX_NAMES + 2)
            .map(|i| CString::new(format!("n{i}")).unwrap())
            .collect();
        let ids: Vec<u64> = (names.iter())
            .map(|n| {
                nodes
                    .enter(ROOT_ID, n, (1, 30), libc::S_IFREG, None)
                    .unwrap()
            })
            .collect();
        assert!(ids.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(nodes.places(ids[0]).unwrap().spots.len(), MAX_NAMES);
        let reused = nodes
            .enter(ROOT_ID, c"x", (1, 30), libc::S_IFLNK, None)
            .unwrap();
        assert_ne!(reused, ids[0]);
        let fh = nodes.open(reused, Arc::new(fd()));
        assert!(nodes.places(reused).unwrap().open.is_some());
        nodes.release(fh);
        assert_eq!(nodes.handle(fh).err(), Some(libc::EBADF));
    }
}
