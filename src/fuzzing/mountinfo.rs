//! `/proc/self/mountinfo` tables.

use crate::mount::mountinfo::{parse, MountEntry};
use crate::mount::MountTable;
use crate::Error;
use std::os::unix::ffi::OsStrExt;

/// Any bytes as a mount table: one entry per non-empty line, or Internal
/// (a table we cannot read is our failure, not the caller's). An entry
/// written back in the kernel's format (its escapes) parses to itself.
pub fn mountinfo(data: &[u8]) {
    match parse(data) {
        Ok(entries) => {
            let lines = data.split(|b| *b == b'\n').filter(|l| !l.is_empty());
            assert_eq!(entries.len(), lines.count());
            let again = parse(&render(&entries)).expect("a rendered table parses");
            assert_eq!(again, entries, "rendering loses nothing");
            assert!(MountTable::parse(data).is_ok());
        }
        Err(e) => assert!(matches!(e, Error::Internal(_)), "{e:?}"),
    }
}

/// The table as the kernel would print it (no optional fields).
fn render(entries: &[MountEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, e) in entries.iter().enumerate() {
        out.extend(format!("{} 1 {} ", n + 2, e.device).as_bytes());
        escape(e.root.as_os_str().as_bytes(), &mut out);
        out.push(b' ');
        escape(e.mount_point.as_os_str().as_bytes(), &mut out);
        out.extend(format!(" {} - {} ", e.mount_options.join(","), e.fs_type).as_bytes());
        escape(e.source.as_bytes(), &mut out);
        out.extend(b" rw\n");
    }
    out
}

/// The kernel's `\ooo` escapes of space, tab, newline and backslash.
fn escape(field: &[u8], out: &mut Vec<u8>) {
    for b in field {
        match b {
            b' ' | b'\t' | b'\n' | b'\\' => out.extend(format!("\\{b:03o}").as_bytes()),
            _ => out.push(*b),
        }
    }
}
