//! The shape and size of what a node request names: the volume id, paths and
//! mount flags. Checked before anything is created or mounted, so a caller's
//! mistake is InvalidArgument rather than an Internal from deep inside a
//! syscall; and a value is only ever echoed abbreviated, so an oversized
//! input cannot blow up an error message or a log line. It knows nothing of
//! volume contexts (`context`) or mounting.

use crate::{Error, Result};
use std::path::{Component, Path, PathBuf};

pub use crate::limits::shown;
use crate::limits::MAX_STRING_BYTES as MAX_VOLUME_ID_BYTES;

/// The kernel refuses a path of `PATH_MAX` bytes or more, its NUL included.
const PATH_MAX: usize = libc::PATH_MAX as usize;

/// The kernel refuses a single component longer than this.
const NAME_MAX: usize = libc::NAME_MAX as usize;

/// CSI's limit for the whole `mount_flags` field.
pub const MAX_MOUNT_FLAGS_BYTES: usize = 4096;

/// `value`, or InvalidArgument with `message` when it is empty.
pub fn required<'a>(value: &'a str, message: &str) -> Result<&'a str> {
    if value.is_empty() {
        return Err(Error::InvalidArgument(message.to_string()));
    }
    Ok(value)
}

/// The request's volume id: set, and within CSI's string limit. Its format
/// is not checked: the node only uses it as a lock key and in messages, and
/// a hand-written PV's handle works on the node whatever it looks like.
pub fn volume_id(value: &str) -> Result<String> {
    required(value, "volume ID is not set")?;
    if value.len() > MAX_VOLUME_ID_BYTES {
        return Err(Error::InvalidArgument(format!(
            "volume ID {} is longer than {MAX_VOLUME_ID_BYTES} bytes",
            shown(value)
        )));
    }
    Ok(value.to_string())
}

/// A path the request names in field `name`, checked for what the kernel
/// or CSI would refuse anyway: a NUL byte, `PATH_MAX` or more bytes, a
/// component over `NAME_MAX`. A `..` component is refused too: kubelet never
/// sends one, and it would let a request reach outside the directory it
/// names. Relative paths pass; callers decide what they mean.
pub fn well_formed_path(value: &str, name: &str) -> Result<PathBuf> {
    let invalid = |why: String| Err(Error::InvalidArgument(format!("{name} {why}")));
    if value.contains('\0') {
        return invalid(format!("{} contains a NUL byte", shown(value)));
    }
    if value.len() >= PATH_MAX {
        return invalid(format!(
            "{} is too long: paths must be shorter than PATH_MAX ({PATH_MAX} bytes)",
            shown(value)
        ));
    }
    let path = Path::new(value);
    for component in path.components() {
        match component {
            Component::ParentDir => {
                return invalid(format!("{} must not contain \"..\"", shown(value)))
            }
            Component::Normal(part) if part.len() > NAME_MAX => {
                return invalid(format!(
                    "{} has a component longer than NAME_MAX ({NAME_MAX} bytes)",
                    shown(value)
                ))
            }
            _ => {}
        }
    }
    Ok(path.to_path_buf())
}

/// A required, well-formed, absolute path: a relative one would resolve
/// against the driver's working directory, never what kubelet meant.
pub fn absolute_path(value: &str, name: &str) -> Result<PathBuf> {
    required(value, &format!("{name} is not set"))?;
    let path = well_formed_path(value, name)?;
    if !path.is_absolute() {
        return Err(Error::InvalidArgument(format!(
            "{name} {} is not absolute",
            shown(value)
        )));
    }
    Ok(path)
}

/// The request's mount flags within CSI's size limit and free of NUL bytes
/// (which no command line can carry).
pub fn check_mount_flags(flags: &[String]) -> Result<()> {
    let total: usize = flags.iter().map(String::len).sum();
    if total > MAX_MOUNT_FLAGS_BYTES {
        return Err(Error::InvalidArgument(format!(
            "mount flags are {total} bytes; at most {MAX_MOUNT_FLAGS_BYTES} are accepted"
        )));
    }
    if let Some(bad) = flags.iter().find(|f| f.contains('\0')) {
        return Err(Error::InvalidArgument(format!(
            "mount flag {} contains a NUL byte",
            shown(bad)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(value: &str) -> String {
        match absolute_path(value, "target path") {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{value:?}: {other:?}"),
        }
    }

    #[test]
    fn paths_the_kernel_would_refuse_are_invalid_arguments() {
        let long = format!("/{}", "a".repeat(PATH_MAX - 1));
        assert!(refused(&long).contains("PATH_MAX"));
        let fits = format!("/{}", vec!["b".repeat(NAME_MAX); 15].join("/"));
        assert!(fits.len() < PATH_MAX);
        assert_eq!(absolute_path(&fits, "p").unwrap(), PathBuf::from(&fits));
        assert!(refused(&format!("/x/{}/y", "c".repeat(NAME_MAX + 1))).contains("NAME_MAX"));
        assert!(refused("/a/\0/b").contains("NUL"));
        for dotted in ["/a/../b", "/a/..", "/.."] {
            assert!(refused(dotted).contains("\"..\""), "{dotted}");
        }
        assert!(refused("rel/dir").ends_with("is not absolute"));
        assert_eq!(refused(""), "target path is not set");
        // `.` and doubled slashes are harmless spellings.
        assert!(absolute_path("/a/./b//c/", "p").is_ok());
    }

    #[test]
    fn messages_never_carry_a_whole_oversized_value() {
        let huge = format!("/{}", "é".repeat(100_000));
        let message = refused(&huge);
        assert!(message.len() < 300, "{} bytes", message.len());
        assert!(message.contains("200001 bytes"), "{message}");
        assert_eq!(shown("short"), "\"short\"");
    }

    #[test]
    fn volume_ids_are_bounded_but_not_parsed() {
        assert_eq!(volume_id("my-static-pv").unwrap(), "my-static-pv");
        let max = "1".repeat(MAX_VOLUME_ID_BYTES);
        assert_eq!(volume_id(&max).unwrap(), max);
        let err = volume_id(&"9".repeat(10_000)).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.len() < 300),
            "{err:?}"
        );
        assert_eq!(
            volume_id("").unwrap_err(),
            Error::InvalidArgument("volume ID is not set".into())
        );
    }

    #[test]
    fn mount_flags_are_bounded_and_nul_free() {
        let flags = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        check_mount_flags(&flags(&["vers=4.2", "noexec"])).unwrap();
        let many = vec!["nconnect=16".to_string(); 1000];
        assert!(matches!(
            check_mount_flags(&many),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            check_mount_flags(&flags(&["ro\0rw"])),
            Err(Error::InvalidArgument(_))
        ));
    }
}
