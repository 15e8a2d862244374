//! The copy engine, end to end on real trees in a scratch directory.

use super::place::TEMP_PREFIX;
use super::*;
use crate::fs_tree::dir::Kind;
use crate::test_support::Scratch;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a copy must keep of an entry (the inode is compared apart).
#[derive(Debug, PartialEq, Eq)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: (i64, i64),
    atime: (i64, i64),
    link: Option<PathBuf>,
}

/// Every entry below `root` (and `root` itself, as ""), by path;
/// inspected only, so no access time moves.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Meta> {
    let mut all = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let full = root.join(&rel);
        let m = std::fs::symlink_metadata(&full).unwrap();
        if m.is_dir() {
            for e in std::fs::read_dir(&full).unwrap() {
                todo.push(rel.join(e.unwrap().file_name()));
            }
        }
        let link = m
            .file_type()
            .is_symlink()
            .then(|| std::fs::read_link(&full).unwrap());
        let size = if m.is_dir() { 0 } else { m.size() };
        all.insert(
            rel,
            Meta {
                mode: m.mode(),
                uid: m.uid(),
                gid: m.gid(),
                size,
                mtime: (m.mtime(), m.mtime_nsec()),
                atime: (m.atime(), m.atime_nsec()),
                link,
            },
        );
    }
    all
}

/// The regular files of a snapshot, whose contents must match.
fn same_contents(src: &Path, dst: &Path, files: &BTreeMap<PathBuf, Meta>) {
    for (rel, meta) in files {
        if meta.mode & libc::S_IFMT == libc::S_IFREG {
            assert!(
                std::fs::read(src.join(rel)).unwrap() == std::fs::read(dst.join(rel)).unwrap(),
                "contents of {rel:?}"
            );
        }
    }
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

/// Sets the times of `path` itself.
fn set_times(path: &Path, atime: libc::timespec, mtime: libc::timespec) {
    let dir = Dir::open(path.parent().unwrap()).unwrap();
    let name = c_name(path.file_name().unwrap());
    dir.set_times_at(&name, &[atime, mtime]).unwrap();
}

fn c_name(name: &OsStr) -> CString {
    super::super::dir::c_name(name).unwrap()
}

/// Old times on everything below `root`, `root` too: files read in
/// 2002 and written in 2001; directories and symlinks written in 2001
/// and read an hour from now, so that listing or reading them leaves
/// their access time alone (relatime moves an access time only when it
/// is older than the change time, which setting it made now).
fn age(root: &Path) {
    let hour_on = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        + 3600;
    let all: Vec<PathBuf> = snapshot(root).into_keys().collect();
    for rel in all.iter().rev() {
        let full = root.join(rel);
        if std::fs::symlink_metadata(&full).unwrap().is_file() {
            set_times(&full, ts(1_020_000_000, 987_654_321), ts(1_000_000_001, 42));
        } else {
            set_times(&full, ts(hour_on, 5), ts(1_000_000_000, 123_456_789));
        }
    }
}

/// A snapshot without the access times of files, which reading them
/// (as a copy does) moves: for comparing trees after several copies.
fn sans_atimes(mut all: BTreeMap<PathBuf, Meta>) -> BTreeMap<PathBuf, Meta> {
    for meta in all.values_mut() {
        meta.atime = (0, 0);
    }
    all
}

fn options(threads: usize) -> CopyOptions {
    CopyOptions {
        threads,
        ..CopyOptions::default()
    }
}

fn copy(from: &Path, to: &Path, options: &CopyOptions) -> Result<CopyStats, Error> {
    copy_tree(&Dir::open(from).unwrap(), &Dir::open(to).unwrap(), options)
}

/// Bytes that differ from file to file and are not all zero.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn names(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    names
}

#[test]
fn everything_is_copied_with_its_attributes_and_nothing_is_followed() {
    let (s, src, dst) = scratch("copy-attrs");
    std::fs::create_dir_all(src.join("a/b/c")).unwrap();
    for (name, len) in [
        ("empty", 0),
        ("small", 1),
        ("page", 4096),
        ("big", (1 << 20) + 7),
    ] {
        std::fs::write(src.join(name), bytes(len, len as u64)).unwrap();
    }
    std::fs::write(src.join("a/b/c/deep.txt"), "deep").unwrap();
    std::fs::write(src.join("suid"), "#!/bin/sh\n").unwrap();
    chmod(&src.join("suid"), 0o4755);
    chmod(&src.join("big"), 0o600);
    chmod(&src.join("a"), 0o1777);
    std::fs::write(src.join("new\nline"), "n").unwrap();
    std::fs::write(src.join(OsStr::from_bytes(b"caf\xe9")), "latin-1").unwrap();
    // Holes: 8 MiB of which one byte is written.
    let sparse = File::create(src.join("sparse")).unwrap();
    sparse.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"x", 4 << 20).unwrap();
    drop(sparse);
    symlink("/etc/passwd", src.join("to-passwd")).unwrap();
    symlink("../../..", src.join("a/b/up")).unwrap();
    symlink("nowhere/at/all", src.join("dangling")).unwrap();
    std::fs::write(src.join("a/h1"), "linked").unwrap();
    std::fs::hard_link(src.join("a/h1"), src.join("a/b/h2")).unwrap();
    std::fs::hard_link(src.join("a/h1"), src.join("h3")).unwrap();
    std::fs::write(src.join("a/s1"), "same dir").unwrap();
    std::fs::hard_link(src.join("a/s1"), src.join("a/s2")).unwrap();
    std::fs::write(src.join("owned"), "o").unwrap();
    std::os::unix::fs::chown(src.join("owned"), Some(1234), Some(5678)).unwrap();
    std::os::unix::fs::chown(src.join("a/b"), Some(1234), Some(5678)).unwrap();
    symlink("owned", src.join("owned-link")).unwrap();
    std::os::unix::fs::lchown(src.join("owned-link"), Some(1234), Some(5678)).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(src.join("a/fifo"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let _socket = std::os::unix::net::UnixListener::bind(src.join("a/sock")).unwrap();
    age(&src);
    let passwd = std::fs::metadata("/etc/passwd").unwrap();

    let mut expected = snapshot(&src);
    expected.remove(Path::new("a/fifo")).unwrap();
    expected.remove(Path::new("a/sock")).unwrap();
    let stats = copy(&src, &dst, &options(4)).unwrap();

    assert_eq!(snapshot(&dst), expected);
    same_contents(&src, &dst, &expected);
    let ino = |p: &str| std::fs::symlink_metadata(dst.join(p)).unwrap().ino();
    assert_eq!(ino("a/h1"), ino("a/b/h2"));
    assert_eq!(ino("a/h1"), ino("h3"));
    assert_eq!(ino("a/s1"), ino("a/s2"));
    assert_ne!(ino("a/h1"), ino("a/s1"));
    assert_eq!(
        std::fs::symlink_metadata(dst.join("a/h1")).unwrap().nlink(),
        3
    );
    assert!(
        std::fs::symlink_metadata(dst.join("sparse"))
            .unwrap()
            .blocks()
            < 1024
    );
    // Nothing was written through the links, nor next to the trees.
    assert_eq!(names(s.path()), ["dst", "src"]);
    let passwd_now = std::fs::metadata("/etc/passwd").unwrap();
    assert_eq!(
        (passwd.mtime(), passwd.size(), passwd.mode()),
        (passwd_now.mtime(), passwd_now.size(), passwd_now.mode())
    );
    let non_dirs = expected
        .values()
        .filter(|m| m.mode & libc::S_IFMT != libc::S_IFDIR)
        .count() as u64;
    assert_eq!(
        stats,
        CopyStats {
            files: non_dirs,
            bytes: stats.bytes,
            directories: 3,
            skipped: 2,
            reused: 0,
        }
    );
    assert!(stats.bytes >= (1 << 20) + 4096);
    // No temporary file is left behind.
    assert!(!expected
        .keys()
        .chain(snapshot(&dst).keys())
        .any(|p| p.to_string_lossy().contains(TEMP_PREFIX)));
}

/// A scratch directory `name` with an empty destination `dst` in it and
/// the path of a source `src` beside it, for the test to make.
fn scratch(name: &str) -> (Scratch, PathBuf, PathBuf) {
    let s = Scratch::new(name);
    let (src, dst) = (s.join("src"), s.join("dst"));
    std::fs::create_dir(&dst).unwrap();
    (s, src, dst)
}

/// `dirs` directories of `files` files each, a hard link pair and a
/// symlink, aged; how many entries a copy of it writes.
fn tree(src: &Path, dirs: usize, files: usize) -> u64 {
    for d in 0..dirs {
        let dir = src.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..files {
            let len = (d * files + f) * 37 % 5000;
            std::fs::write(
                dir.join(format!("f{f}")),
                bytes(len, (d * files + f) as u64),
            )
            .unwrap();
        }
    }
    std::fs::write(src.join("h1"), "linked").unwrap();
    std::fs::hard_link(src.join("h1"), src.join("d0/h2")).unwrap();
    symlink("d0/f0", src.join("link")).unwrap();
    age(src);
    (dirs * files + 3) as u64
}

#[test]
fn a_second_copy_copies_only_what_differs() {
    let (_s, src, dst) = scratch("copy-resume");
    let total = tree(&src, 3, 10);
    let first = copy(&src, &dst, &options(4)).unwrap();
    assert_eq!((first.files, first.reused), (total, 0));

    std::fs::write(src.join("d1/f3"), "changed, and of another length").unwrap();
    std::fs::remove_file(dst.join("d2/f5")).unwrap();
    let second = copy(&src, &dst, &options(4)).unwrap();
    assert_eq!((second.files, second.reused), (2, total - 2));
    assert_eq!(sans_atimes(snapshot(&dst)), sans_atimes(snapshot(&src)));

    // A hard link lost: linked again (or its other name copied anew
    // and this one linked to it, as the workers meet the names).
    std::fs::remove_file(dst.join("d0/h2")).unwrap();
    let again = copy(&src, &dst, &options(4)).unwrap();
    assert!((1..=2).contains(&again.files), "{again:?}");
    assert_eq!(again.files + again.reused, total);
    let ino = |p: &str| std::fs::symlink_metadata(dst.join(p)).unwrap().ino();
    assert_eq!(ino("h1"), ino("d0/h2"));

    // Cut short as a killed write would leave it, and a killed run's
    // temporary file.
    File::options()
        .write(true)
        .open(dst.join("d2/f4"))
        .unwrap()
        .set_len(3)
        .unwrap();
    std::fs::write(dst.join("d2/.lnc-copy-1-1"), "half").unwrap();
    let third = copy(&src, &dst, &options(4)).unwrap();
    assert_eq!((third.files, third.reused), (1, total - 1));
    let expected = snapshot(&src);
    assert_eq!(sans_atimes(snapshot(&dst)), sans_atimes(snapshot(&src)));
    same_contents(&src, &dst, &expected);
}

#[test]
fn a_destination_made_of_links_is_replaced_not_followed() {
    let s = Scratch::new("copy-hostile-dst");
    let (src, dst, outside) = (s.join("src"), s.join("dst"), s.join("outside"));
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("a/x"), "x").unwrap();
    std::fs::write(src.join("f"), "f").unwrap();
    std::fs::create_dir(src.join("d")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("file"), "keep").unwrap();
    std::fs::create_dir(&dst).unwrap();
    symlink(&outside, dst.join("a")).unwrap();
    symlink(outside.join("file"), dst.join("f")).unwrap();
    std::fs::create_dir_all(dst.join("x/y")).unwrap();
    std::fs::write(src.join("x"), "a file where a directory was").unwrap();
    std::fs::write(dst.join("d"), "a file where a directory goes").unwrap();
    age(&src);
    let expected = snapshot(&src);
    copy(&src, &dst, &options(2)).unwrap();
    assert_eq!(names(&outside), ["file"]);
    assert_eq!(
        std::fs::read_to_string(outside.join("file")).unwrap(),
        "keep"
    );
    assert_eq!(snapshot(&dst), expected);
    same_contents(&src, &dst, &expected);
}

#[test]
fn a_destination_inside_the_source_is_refused() {
    let s = Scratch::new("copy-inside");
    std::fs::create_dir_all(s.join("src/dst")).unwrap();
    let e = copy(&s.join("src"), &s.join("src/dst"), &options(1)).unwrap_err();
    assert!(matches!(e, Error::FailedPrecondition(_)), "{e:?}");
}

#[test]
fn a_stopped_copy_stops_and_a_later_one_finishes_it() {
    let (_s, src, dst) = scratch("copy-stop");
    let total = tree(&src, 40, 100);

    let stopped_before = options(4);
    stopped_before.stop.store(true, Ordering::Relaxed);
    let e = copy(&src, &dst, &stopped_before).unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("stopped")),
        "{e:?}"
    );
    assert_eq!(stopped_before.progress.files.load(Ordering::Relaxed), 0);

    let stopped_during = options(4);
    let watcher = {
        let (stop, progress) = (stopped_during.stop.clone(), stopped_during.progress.clone());
        std::thread::spawn(move || {
            while progress.files.load(Ordering::Relaxed) < 100 {
                std::thread::sleep(Duration::from_micros(200));
            }
            stop.store(true, Ordering::Relaxed);
            Instant::now()
        })
    };
    let e = copy(&src, &dst, &stopped_during).unwrap_err();
    let returned = Instant::now();
    let stop_set = watcher.join().unwrap();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("stopped")),
        "{e:?}"
    );
    assert!(returned.duration_since(stop_set) < Duration::from_secs(5));
    let copied = stopped_during.progress.files.load(Ordering::Relaxed);
    assert!(copied < total, "{copied} of {total}");

    let last = copy(&src, &dst, &options(4)).unwrap();
    assert_eq!((last.files, last.reused), (total - copied, copied));
    let expected = snapshot(&src);
    assert_eq!(sans_atimes(snapshot(&dst)), sans_atimes(snapshot(&src)));
    same_contents(&src, &dst, &expected);
}

/// Opens `d` `depth` times below `top`, through descriptors (a path
/// that deep is past PATH_MAX).
fn bottom(top: &Path, depth: usize) -> Dir {
    let mut here = Dir::open(top).unwrap();
    for _ in 0..depth {
        here = here.child(c"d").unwrap();
    }
    here
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_deep_tree_is_copied_in_a_small_stack_and_few_descriptors() {
    const DEPTH: usize = 5_000;
    let (_s, src, dst) = scratch("copy-deep");
    std::fs::create_dir(&src).unwrap();
    let mut here = Dir::open(&src).unwrap();
    for _ in 0..DEPTH {
        here.make_dir(c"d", 0o750).unwrap();
        let f = here.create_file(c"f", 0o640).unwrap();
        std::io::Write::write_all(&mut &f, b"level").unwrap();
        here = here.child(c"d").unwrap();
    }
    drop(here);
    let before = open_fds();
    let peak = Arc::new(AtomicUsize::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(open_fds(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let (from, to) = (src.clone(), dst.clone());
    let stats = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || copy(&from, &to, &options(4)))
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    assert_eq!(
        (stats.files, stats.directories),
        (DEPTH as u64, DEPTH as u64)
    );
    // A descriptor per level would be thousands; other tests share the
    // process, hence the margin.
    let grew = peak.load(Ordering::Relaxed).saturating_sub(before);
    assert!(grew < 500, "{grew} more descriptors");
    let last = bottom(&dst, DEPTH - 1);
    let st = last.stat_at(c"f").unwrap();
    assert_eq!((st.st_size, st.st_mode & 0o7777), (5, 0o640));
    assert_eq!(last.stat_at(c"d").unwrap().st_mode & 0o7777, 0o750);
    assert_eq!(
        last.kind_of(c"d").unwrap(),
        Some(Kind::Directory),
        "the deepest directory"
    );
    assert!(bottom(&dst, DEPTH).entries().unwrap().next().is_none());
}

#[test]
fn a_wide_directory_is_copied_around_its_subdirectories() {
    let (_s, src, dst) = scratch("copy-wide");
    std::fs::create_dir(&src).unwrap();
    for i in 0..20_000 {
        std::fs::write(src.join(format!("file-{i}")), i.to_string()).unwrap();
        // Subdirectories scattered among the files: the walk leaves the
        // listing for each and comes back to its place.
        if i % 400 == 0 {
            std::fs::create_dir(src.join(format!("dir-{i}"))).unwrap();
            std::fs::write(src.join(format!("dir-{i}/inner")), "in").unwrap();
        }
    }
    let stats = copy(&src, &dst, &options(8)).unwrap();
    assert_eq!((stats.files, stats.directories), (20_050, 50));
    assert_eq!(names(&dst), names(&src));
    assert_eq!(
        std::fs::read_to_string(dst.join("file-12345")).unwrap(),
        "12345"
    );
    assert_eq!(
        std::fs::read_to_string(dst.join("dir-19600/inner")).unwrap(),
        "in"
    );
}
