//! Which kind of volume a NodeStageVolume names, decided by the volume id
//! alone: a whole filesystem, or a directory of a shared one
//! (`{space}/{filesystem}/{name}`), whose name is re-validated here. The
//! volume context's `volume-type`, `space-id` and `filesystem-id` may only
//! agree with the id, never choose a path: a static PV's attributes are
//! written by hand. It knows nothing of mounting or of the rest of the
//! context.

use crate::handles::{DirName, Kind, SubdirId, VolumeId, CTX_FILESYSTEM_ID, CTX_SPACE_ID};
use crate::{Error, Result};

use super::input::shown;

/// What the volume context's `volume-type` says: absent, empty or
/// `filesystem` is a whole filesystem.
pub fn volume_type(value: &str) -> Result<Kind> {
    Kind::parse(value).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "volume attribute volume-type {} must be filesystem or subdirectory",
            shown(value)
        ))
    })
}

/// The `space-id` and `filesystem-id` a volume context names ("" when absent).
#[derive(Debug, Clone, Copy, Default)]
pub struct Named<'a> {
    pub space: &'a str,
    pub filesystem: &'a str,
}

/// The directory of the shared filesystem to mount, or `None` for a whole
/// filesystem (whose id the node does not parse: a hand-written PV's handle
/// works whatever it looks like). An id that begins like a directory handle
/// (`{space}/{filesystem}/…`) must be one, so `1/2/..` or `1/2/a/b` never
/// falls back to mounting the whole share, and the context must name the
/// same Space and filesystem (its mount target is that filesystem's, so a
/// handle of another parent would mount this one's directory); a context
/// that says `subdirectory` needs such an id, since the directory comes
/// from the id.
pub fn directory(volume_id: &str, volume_type: Kind, named: Named) -> Result<Option<DirName>> {
    let mut parts = volume_id.splitn(3, '/');
    let prefix = match (parts.next(), parts.next(), parts.next()) {
        (Some(s), Some(f), Some(_)) => Some(format!("{s}/{f}")),
        _ => None,
    };
    let looks_like_directory = prefix.is_some_and(|p| VolumeId::parse(&p).is_ok());
    if looks_like_directory {
        let id = SubdirId::parse(volume_id)?;
        for (key, named, id_part) in [
            (CTX_SPACE_ID, named.space, id.space),
            (CTX_FILESYSTEM_ID, named.filesystem, id.filesystem),
        ] {
            if named != id_part.to_string() {
                return Err(Error::InvalidArgument(format!(
                    "volume attribute {key} {} does not match volume {}: a directory volume's context names the Space and filesystem of its id",
                    shown(named),
                    shown(volume_id)
                )));
            }
        }
        return Ok(Some(id.name));
    }
    match volume_type {
        Kind::Filesystem => Ok(None),
        Kind::Directory => Err(Error::InvalidArgument(format!(
            "volume {} has volume-type subdirectory but its id is not {{space_id}}/{{filesystem_id}}/{{name}}: the directory comes from the volume id",
            shown(volume_id)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OF_42_7: Named = Named {
        space: "42",
        filesystem: "7",
    };

    fn directory(volume_id: &str, kind: Kind) -> Result<Option<DirName>> {
        super::directory(volume_id, kind, OF_42_7)
    }

    #[test]
    fn a_directory_handle_must_name_the_contexts_space_and_filesystem() {
        for (space, filesystem) in [
            ("42", "8"),
            ("41", "7"),
            ("", "7"),
            ("42", ""),
            ("42", "07"),
        ] {
            let named = Named { space, filesystem };
            let err = super::directory("42/7/pvc-1", Kind::Directory, named).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument(_)),
                "{named:?}: {err:?}"
            );
        }
        // A whole filesystem's id is the admin's to write.
        assert_eq!(
            super::directory("my-pv", Kind::Filesystem, Named::default()).unwrap(),
            None
        );
    }

    #[test]
    fn the_directory_comes_from_the_id_and_is_revalidated() {
        for kind in [Kind::Filesystem, Kind::Directory] {
            assert_eq!(
                directory("42/7/pvc-1", kind).unwrap().unwrap().as_str(),
                "pvc-1"
            );
        }
        for whole in ["1/2", "my-static-pv", "a/b/c", "ns/pv/../x"] {
            assert_eq!(directory(whole, Kind::Filesystem).unwrap(), None);
        }
        for bad in [
            "1/2/..", "1/2/.", "1/2/", "1/2/a/b", "1/2/../x", "1/2/A", "1/2/3", "1/2/a\0",
        ] {
            for kind in [Kind::Filesystem, Kind::Directory] {
                let err = directory(bad, kind).unwrap_err();
                assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err:?}");
            }
        }
        for not_a_directory in ["1/2", "my-static-pv", "a/b/c"] {
            let err = directory(not_a_directory, Kind::Directory).unwrap_err();
            assert!(
                err.message()
                    .contains("the directory comes from the volume id"),
                "{err}"
            );
        }
    }

    #[test]
    fn volume_types() {
        assert_eq!(volume_type("").unwrap(), Kind::Filesystem);
        assert_eq!(volume_type("filesystem").unwrap(), Kind::Filesystem);
        assert_eq!(volume_type("subdirectory").unwrap(), Kind::Directory);
        let err = volume_type("../etc").unwrap_err();
        assert!(
            err.message().starts_with("volume attribute volume-type"),
            "{err}"
        );
    }
}
