//! StorageClass parameters of CreateVolume and VolumeAttributesClass
//! (mutable) parameters, parsed into typed values. StorageClass keys of
//! other prefixes (the `csi.storage.k8s.io/*` ones the provisioner adds)
//! are ignored, an unknown key of the driver's own prefix is refused
//! (`unknown`: a typo must not quietly mean the default); unknown or
//! immutable mutable keys are refused, since a
//! VolumeAttributesClass that asks for a change we cannot make must not
//! look applied. Bad values are InvalidArgument with the reference driver's
//! messages. A `subdirectory` class names a shared parent filesystem and
//! the directory's quota, mode and owner; the whole-filesystem keys are
//! refused with it, naming the key.

use crate::handles::Kind;
use crate::linode::SquashPolicy;
use crate::Error;
use std::collections::HashMap;

/// The driver's parameter keys, as a StorageClass or VolumeAttributesClass
/// spells them (the `client` subcommand writes them too).
pub mod keys {
    pub const SPACE_ID: &str = "linodenfs.csi.linode.com/space-id";
    pub const SPACE_LABEL: &str = "linodenfs.csi.linode.com/space-label";
    pub const TAGS: &str = "linodenfs.csi.linode.com/tags";
    pub const ROOT_SQUASH: &str = "linodenfs.csi.linode.com/filesystem-root-squash";
    pub const VOLUME_TYPE: &str = "linodenfs.csi.linode.com/volume-type";
    pub const SHARED_FS_ID: &str = "linodenfs.csi.linode.com/shared-filesystem-id";
    pub const SHARED_FS_LABEL: &str = "linodenfs.csi.linode.com/shared-filesystem-label";
    pub const QUOTA: &str = "linodenfs.csi.linode.com/quota";
    pub const ON_DELETE: &str = "linodenfs.csi.linode.com/on-delete";
    pub const DIRECTORY_MODE: &str = "linodenfs.csi.linode.com/directory-mode";
    pub const DIRECTORY_UID: &str = "linodenfs.csi.linode.com/directory-uid";
    pub const DIRECTORY_GID: &str = "linodenfs.csi.linode.com/directory-gid";
    pub const MAX_FILES: &str = "linodenfs.csi.linode.com/max-files";
    pub const POOL: &str = "linodenfs.csi.linode.com/shared-filesystem-pool";
    pub const POOL_FILESYSTEM_SIZE: &str = "linodenfs.csi.linode.com/pool-filesystem-size";
    pub const POOL_MAX_FILESYSTEMS: &str = "linodenfs.csi.linode.com/pool-max-filesystems";
    pub const POOL_SPARES: &str = "linodenfs.csi.linode.com/pool-spares";
    pub const AUTOGROW_THRESHOLD: &str = "linodenfs.csi.linode.com/autogrow-threshold";
    pub const AUTOGROW_STEP: &str = "linodenfs.csi.linode.com/autogrow-step";
    pub const AUTOGROW_MAX: &str = "linodenfs.csi.linode.com/autogrow-max";
}
mod autogrow;
mod pool;
mod unknown;
pub use autogrow::Autogrow;
use keys::{
    AUTOGROW_MAX, AUTOGROW_STEP, AUTOGROW_THRESHOLD, DIRECTORY_GID, DIRECTORY_MODE, DIRECTORY_UID,
    MAX_FILES, ON_DELETE, POOL, POOL_FILESYSTEM_SIZE, POOL_MAX_FILESYSTEMS, POOL_SPARES, QUOTA,
    ROOT_SQUASH, SHARED_FS_ID, SHARED_FS_LABEL, SPACE_ID, SPACE_LABEL, TAGS, VOLUME_TYPE,
};
pub use pool::PoolParams;
pub use unknown::refuse_unknown;

/// The shared filesystem a `subdirectory` class names, in its Space: one
/// an admin made, or a pool the driver runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ParentRef {
    Id(u64),
    Label(String),
    Pool(PoolParams),
}

/// Whether a `subdirectory` volume must be capped by a backend quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaMode {
    /// Handed out only once its quota is active; nothing is left behind
    /// when the backend has no quota or refuses one.
    Required,
    /// Without a quota when the backend gives none; the context says so.
    BestEffort,
    /// Never asks for a quota (the context says `quota: absent`).
    Off,
}

/// What DeleteVolume does with a `subdirectory` volume's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDelete {
    Delete,
    Retain,
    /// Renamed into the driver's archive.
    Archive,
}

impl OnDelete {
    pub fn as_str(self) -> &'static str {
        match self {
            OnDelete::Delete => "delete",
            OnDelete::Retain => "retain",
            OnDelete::Archive => "archive",
        }
    }

    pub fn parse(raw: &str) -> Result<OnDelete, Error> {
        match raw {
            "delete" => Ok(OnDelete::Delete),
            "retain" => Ok(OnDelete::Retain),
            "archive" => Ok(OnDelete::Archive),
            v => Err(Error::InvalidArgument(format!(
                "unsupported {ON_DELETE} value \"{v}\" (want delete, retain or archive)"
            ))),
        }
    }
}

/// The parameters of a `subdirectory` class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubdirParams {
    pub parent: ParentRef,
    pub quota: QuotaMode,
    pub on_delete: OnDelete,
    /// Permission bits of the new directory (default `0770`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// The quota's file-count limit; `None` sets none.
    pub max_files: Option<i64>,
    /// Grow the quota as the volume fills; `None`: never on its own.
    pub autogrow: Option<Autogrow>,
}

/// Which pre-created Storage Space the class names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SpaceRef {
    Id(u64),
    Label(String),
}

/// The parameters of a whole-filesystem class.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilesystemParams {
    /// In the order given, blanks dropped; compared as a set.
    pub tags: Vec<String>,
    /// Applied only when the class asks; otherwise the backend default stays.
    pub squash: Option<SquashPolicy>,
}

/// What the class's `volume-type` makes, with that kind's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KindParams {
    Filesystem(FilesystemParams),
    Directory(SubdirParams),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    pub space: SpaceRef,
    pub kind: KindParams,
}

impl Params {
    pub fn kind(&self) -> Kind {
        match self.kind {
            KindParams::Filesystem(_) => Kind::Filesystem,
            KindParams::Directory(_) => Kind::Directory,
        }
    }
}

impl Params {
    pub fn parse(raw: &HashMap<String, String>) -> Result<Params, Error> {
        refuse_unknown(raw, &unknown::CLASS_KEYS, "StorageClass")?;
        let get = |k: &str| raw.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let kind = match get(VOLUME_TYPE).unwrap_or("filesystem") {
            "filesystem" => {
                if let Some(key) = [
                    SHARED_FS_ID,
                    SHARED_FS_LABEL,
                    QUOTA,
                    ON_DELETE,
                    DIRECTORY_MODE,
                    DIRECTORY_UID,
                    DIRECTORY_GID,
                    MAX_FILES,
                    POOL,
                    POOL_FILESYSTEM_SIZE,
                    POOL_MAX_FILESYSTEMS,
                    POOL_SPARES,
                    AUTOGROW_THRESHOLD,
                    AUTOGROW_STEP,
                    AUTOGROW_MAX,
                ]
                .into_iter()
                .find(|k| get(k).is_some())
                {
                    return Err(Error::InvalidArgument(format!(
                        "StorageClass parameter {key} applies only to {VOLUME_TYPE} subdirectory"
                    )));
                }
                KindParams::Filesystem(FilesystemParams {
                    tags: get(TAGS).map(parse_tags).unwrap_or_default(),
                    squash: get(ROOT_SQUASH).map(parse_squash).transpose()?,
                })
            }
            "subdirectory" => {
                if let Some(key) = [TAGS, ROOT_SQUASH].into_iter().find(|k| get(k).is_some()) {
                    return Err(Error::InvalidArgument(format!(
                        "StorageClass parameter {key} applies to a whole filesystem, not to {VOLUME_TYPE} subdirectory: a shared filesystem has one policy for all its volumes"
                    )));
                }
                KindParams::Directory(parse_subdirectory(&get)?)
            }
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unsupported {VOLUME_TYPE} value \"{other}\" (want filesystem or subdirectory)"
                )))
            }
        };
        let neither = format!(
            "StorageClass must set either {SPACE_ID} or {SPACE_LABEL} for a pre-created NFS Storage Space"
        );
        let space = match id_or_label(&get, SPACE_ID, SPACE_LABEL, neither)? {
            Named::Id(id) => match id.parse::<u64>() {
                Ok(n) if n > 0 => SpaceRef::Id(n),
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "StorageClass parameter {SPACE_ID} \"{id}\" must be a positive integer"
                    )))
                }
            },
            Named::Label(label) => SpaceRef::Label(label.to_string()),
        };
        Ok(Params { space, kind })
    }
}

/// An object a class names by one of two keys.
enum Named<'a> {
    Id(&'a str),
    Label(&'a str),
}

/// Exactly one of the keys `by_id` and `by_label`: both is
/// InvalidArgument, neither is InvalidArgument saying `neither`.
fn id_or_label<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    by_id: &str,
    by_label: &str,
    neither: String,
) -> Result<Named<'a>, Error> {
    match (get(by_id), get(by_label)) {
        (Some(_), Some(_)) => Err(Error::InvalidArgument(format!(
            "StorageClass parameters {by_id} and {by_label} are mutually exclusive"
        ))),
        (None, None) => Err(Error::InvalidArgument(neither)),
        (Some(id), None) => Ok(Named::Id(id)),
        (None, Some(label)) => Ok(Named::Label(label)),
    }
}

fn parse_subdirectory<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<SubdirParams, Error> {
    let parent = match get(POOL) {
        Some(name) => {
            if let Some(key) = [SHARED_FS_ID, SHARED_FS_LABEL]
                .into_iter()
                .find(|k| get(k).is_some())
            {
                return Err(Error::InvalidArgument(format!(
                    "StorageClass parameters {POOL} and {key} are mutually exclusive: a class's volumes go to a pool the driver runs or to one filesystem an admin made"
                )));
            }
            ParentRef::Pool(pool::parse(get, name)?)
        }
        None => {
            if let Some(key) = [POOL_FILESYSTEM_SIZE, POOL_MAX_FILESYSTEMS, POOL_SPARES]
                .into_iter()
                .find(|k| get(k).is_some())
            {
                return Err(Error::InvalidArgument(format!(
                    "StorageClass parameter {key} applies only with {POOL}"
                )));
            }
            let neither = format!(
                "{VOLUME_TYPE} subdirectory needs {SHARED_FS_ID}, {SHARED_FS_LABEL} or {POOL}: the existing NFS filesystem its directories live in, or the pool the driver runs for them"
            );
            match id_or_label(get, SHARED_FS_ID, SHARED_FS_LABEL, neither)? {
                Named::Id(id) => ParentRef::Id(positive(SHARED_FS_ID, id)? as u64),
                Named::Label(label) => ParentRef::Label(label.to_string()),
            }
        }
    };
    let quota = match get(QUOTA).unwrap_or("required") {
        "required" => QuotaMode::Required,
        "best-effort" => QuotaMode::BestEffort,
        "off" => QuotaMode::Off,
        v => {
            return Err(Error::InvalidArgument(format!(
                "unsupported {QUOTA} value \"{v}\" (want required, best-effort or off)"
            )))
        }
    };
    let mode = match get(DIRECTORY_MODE) {
        None => 0o770,
        Some(raw) => u32::from_str_radix(raw, 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "StorageClass parameter {DIRECTORY_MODE} \"{raw}\" must be octal permission bits such as 0770"
                ))
            })?,
    };
    let id = |key: &str| -> Result<u32, Error> {
        match get(key) {
            None => Ok(0),
            Some(raw) => raw.parse::<u32>().map_err(|_| {
                Error::InvalidArgument(format!(
                    "StorageClass parameter {key} \"{raw}\" must be a numeric id"
                ))
            }),
        }
    };
    Ok(SubdirParams {
        parent,
        quota,
        on_delete: get(ON_DELETE)
            .map(OnDelete::parse)
            .transpose()?
            .unwrap_or(OnDelete::Delete),
        mode,
        uid: id(DIRECTORY_UID)?,
        gid: id(DIRECTORY_GID)?,
        max_files: get(MAX_FILES).map(|v| positive(MAX_FILES, v)).transpose()?,
        autogrow: autogrow::parse(get)?,
    })
}

/// A parameter that must be a positive integer.
fn positive(key: &str, raw: &str) -> Result<i64, Error> {
    match raw.parse::<i64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Error::InvalidArgument(format!(
            "parameter {key} \"{raw}\" must be a positive integer"
        ))),
    }
}

/// What a VolumeAttributesClass may set, at creation or later.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mutable {
    /// The filesystem's own tags (the driver's markers are kept apart).
    pub tags: Option<Vec<String>>,
    pub squash: Option<SquashPolicy>,
    /// A `subdirectory` volume's quota file-count limit.
    pub max_files: Option<i64>,
}

impl Mutable {
    pub fn parse(raw: &HashMap<String, String>) -> Result<Mutable, Error> {
        let mut out = Mutable::default();
        let mut keys: Vec<&String> = raw.keys().collect();
        keys.sort();
        for key in keys {
            let value = raw[key].trim();
            match key.as_str() {
                TAGS => out.tags = Some(parse_tags(value)),
                ROOT_SQUASH => out.squash = Some(parse_squash(value)?),
                MAX_FILES => out.max_files = Some(positive(MAX_FILES, value)?),
                SPACE_ID | SPACE_LABEL | VOLUME_TYPE | SHARED_FS_ID | SHARED_FS_LABEL => {
                    return Err(Error::InvalidArgument(format!(
                        "mutable parameter {key} cannot be changed: a volume stays where it was made"
                    )))
                }
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "unknown mutable parameter \"{other}\"; only {TAGS}, {ROOT_SQUASH} and {MAX_FILES} can be modified"
                    )))
                }
            }
        }
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.tags.is_none() && self.squash.is_none() && self.max_files.is_none()
    }

    /// Whether it changes only what a `subdirectory` volume has: the
    /// whole-filesystem keys are InvalidArgument for one, naming the key.
    pub fn check_subdirectory(&self) -> Result<(), Error> {
        let key = match (&self.tags, &self.squash) {
            (Some(_), _) => TAGS,
            (_, Some(_)) => ROOT_SQUASH,
            _ => return Ok(()),
        };
        Err(Error::InvalidArgument(format!(
            "mutable parameter {key} applies to a whole filesystem; a subdirectory volume shares its filesystem's"
        )))
    }

    /// Whether it changes only what a whole filesystem has.
    pub fn check_filesystem(&self) -> Result<(), Error> {
        match self.max_files {
            Some(_) => Err(Error::InvalidArgument(format!(
                "mutable parameter {MAX_FILES} applies to subdirectory volumes only; a whole filesystem has no quota"
            ))),
            None => Ok(()),
        }
    }
}

/// A comma list, in the order given, blanks and repeats dropped.
fn parse_tags(raw: &str) -> Vec<String> {
    let mut tags: Vec<String> = Vec::new();
    for tag in raw.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if !tags.iter().any(|t| t == tag) {
            tags.push(tag.to_string());
        }
    }
    tags
}

fn parse_squash(raw: &str) -> Result<SquashPolicy, Error> {
    match raw.trim() {
        v @ ("none" | "root_squash" | "all_squash") => Ok(SquashPolicy::from(v)),
        v => Err(Error::InvalidArgument(format!(
            "unsupported {ROOT_SQUASH} value \"{v}\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::owned;

    fn parse(pairs: &[(&str, &str)]) -> Result<Params, Error> {
        Params::parse(&owned(pairs))
    }

    fn filesystem(pairs: &[(&str, &str)]) -> FilesystemParams {
        match parse(pairs).unwrap().kind {
            KindParams::Filesystem(p) => p,
            other => panic!("not a filesystem class: {other:?}"),
        }
    }

    #[test]
    fn space_by_id_or_label() {
        assert_eq!(parse(&[(SPACE_ID, " 7 ")]).unwrap().space, SpaceRef::Id(7));
        assert_eq!(
            parse(&[(SPACE_LABEL, "Shared")]).unwrap().space,
            SpaceRef::Label("Shared".into())
        );
        for bad in [
            vec![],
            vec![(SPACE_ID, "7"), (SPACE_LABEL, "x")],
            vec![(SPACE_ID, "0")],
            vec![(SPACE_ID, "-3")],
            vec![(SPACE_ID, "seven")],
            vec![("space-id", "7")],
        ] {
            assert!(
                matches!(parse(&bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tags_and_squash() {
        let p = filesystem(&[
            (SPACE_ID, "1"),
            (TAGS, " a, b,,a , "),
            (ROOT_SQUASH, "all_squash"),
            ("csi.storage.k8s.io/pvc/name", "x"),
        ]);
        assert_eq!(p.tags, vec!["a", "b"]);
        assert_eq!(p.squash, Some(SquashPolicy::AllSquash));
        let p = filesystem(&[(SPACE_ID, "1"), (TAGS, "  ")]);
        assert!(p.tags.is_empty());
        assert_eq!(p.squash, None);
        assert!(matches!(
            parse(&[(SPACE_ID, "1"), (ROOT_SQUASH, "squash")]),
            Err(Error::InvalidArgument(_))
        ));
    }

    fn subdir(pairs: &[(&str, &str)]) -> Result<SubdirParams, Error> {
        let mut all = vec![(SPACE_ID, "1"), (VOLUME_TYPE, "subdirectory")];
        all.extend_from_slice(pairs);
        parse(&all).map(|p| match p.kind {
            KindParams::Directory(sub) => sub,
            other => panic!("not a subdirectory class: {other:?}"),
        })
    }

    #[test]
    fn subdirectory_classes() {
        assert_eq!(filesystem(&[(SPACE_ID, "1")]), FilesystemParams::default());
        assert_eq!(
            parse(&[(SPACE_ID, "1"), (VOLUME_TYPE, "filesystem")])
                .unwrap()
                .kind(),
            Kind::Filesystem
        );
        let p = subdir(&[(SHARED_FS_LABEL, "team")]).unwrap();
        assert_eq!(
            p,
            SubdirParams {
                parent: ParentRef::Label("team".into()),
                quota: QuotaMode::Required,
                on_delete: OnDelete::Delete,
                mode: 0o770,
                uid: 0,
                gid: 0,
                max_files: None,
                autogrow: None,
            }
        );
        let p = subdir(&[
            (SHARED_FS_ID, "12"),
            (QUOTA, "best-effort"),
            (ON_DELETE, "archive"),
            (DIRECTORY_MODE, "2775"),
            (DIRECTORY_UID, "1000"),
            (DIRECTORY_GID, "1001"),
            (MAX_FILES, "5000"),
        ])
        .unwrap();
        assert_eq!(p.parent, ParentRef::Id(12));
        assert_eq!(
            (p.quota, p.on_delete, p.mode, p.uid, p.gid, p.max_files),
            (
                QuotaMode::BestEffort,
                OnDelete::Archive,
                0o2775,
                1000,
                1001,
                Some(5000)
            )
        );
        assert_eq!(
            subdir(&[(SHARED_FS_ID, "1"), (QUOTA, "off")])
                .unwrap()
                .quota,
            QuotaMode::Off
        );
        for (bad, named) in [
            (vec![], SHARED_FS_ID),
            (
                vec![(SHARED_FS_ID, "1"), (SHARED_FS_LABEL, "x")],
                SHARED_FS_LABEL,
            ),
            (vec![(SHARED_FS_ID, "0")], SHARED_FS_ID),
            (vec![(SHARED_FS_ID, "1"), (QUOTA, "maybe")], QUOTA),
            (vec![(SHARED_FS_ID, "1"), (ON_DELETE, "shred")], ON_DELETE),
            (
                vec![(SHARED_FS_ID, "1"), (DIRECTORY_MODE, "0999")],
                DIRECTORY_MODE,
            ),
            (
                vec![(SHARED_FS_ID, "1"), (DIRECTORY_MODE, "17777")],
                DIRECTORY_MODE,
            ),
            (
                vec![(SHARED_FS_ID, "1"), (DIRECTORY_UID, "-1")],
                DIRECTORY_UID,
            ),
            (vec![(SHARED_FS_ID, "1"), (MAX_FILES, "0")], MAX_FILES),
            (
                vec![(SHARED_FS_ID, "1"), (AUTOGROW_THRESHOLD, "100")],
                AUTOGROW_THRESHOLD,
            ),
            (vec![(SHARED_FS_ID, "1"), (TAGS, "a")], TAGS),
            (
                vec![(SHARED_FS_ID, "1"), (ROOT_SQUASH, "none")],
                ROOT_SQUASH,
            ),
        ] {
            match subdir(&bad) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(named), "{bad:?}: {m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        for (bad, named) in [
            (vec![(SPACE_ID, "1"), (VOLUME_TYPE, "block")], VOLUME_TYPE),
            (vec![(SPACE_ID, "1"), (SHARED_FS_ID, "3")], SHARED_FS_ID),
            (vec![(SPACE_ID, "1"), (MAX_FILES, "3")], MAX_FILES),
            // A whole filesystem's size cannot change.
            (
                vec![(SPACE_ID, "1"), (AUTOGROW_THRESHOLD, "80")],
                AUTOGROW_THRESHOLD,
            ),
            (vec![(SPACE_ID, "1"), (AUTOGROW_MAX, "5Gi")], AUTOGROW_MAX),
        ] {
            match parse(&bad) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(named), "{bad:?}: {m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    fn mutable(pairs: &[(&str, &str)]) -> Result<Mutable, Error> {
        Mutable::parse(&owned(pairs))
    }

    #[test]
    fn mutable_parameters_are_tags_squash_and_max_files_only() {
        assert!(mutable(&[]).unwrap().is_empty());
        let m = mutable(&[(TAGS, "x, y"), (ROOT_SQUASH, "none")]).unwrap();
        assert_eq!(m.tags, Some(vec!["x".to_string(), "y".to_string()]));
        assert_eq!(m.squash, Some(SquashPolicy::None));
        assert_eq!(mutable(&[(TAGS, "")]).unwrap().tags, Some(vec![]));
        let files = mutable(&[(MAX_FILES, "100")]).unwrap();
        assert_eq!(files.max_files, Some(100));
        assert!(files.check_subdirectory().is_ok());
        assert!(
            matches!(files.check_filesystem(), Err(Error::InvalidArgument(m)) if m.contains(MAX_FILES))
        );
        assert!(m.check_filesystem().is_ok());
        assert!(
            matches!(m.check_subdirectory(), Err(Error::InvalidArgument(m)) if m.contains(TAGS))
        );
        for bad in [
            vec![(SPACE_ID, "7")],
            vec![(SPACE_LABEL, "other")],
            vec![("capacity", "10Gi")],
            vec![(ROOT_SQUASH, "sometimes")],
            vec![(MAX_FILES, "many")],
            vec![(VOLUME_TYPE, "subdirectory")],
            vec![(SHARED_FS_ID, "3")],
        ] {
            assert!(
                matches!(mutable(&bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn pool_classes() {
        let pool = |pairs: &[(&str, &str)]| match subdir(pairs).map(|s| s.parent) {
            Ok(ParentRef::Pool(p)) => Ok(p),
            Ok(other) => panic!("not a pool: {other:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(
            pool(&[(POOL, "small")]).unwrap(),
            PoolParams {
                name: "small".into(),
                filesystem_bytes: pool::DEFAULT_FILESYSTEM_BYTES,
                max_filesystems: pool::DEFAULT_MAX_FILESYSTEMS,
                spares: pool::DEFAULT_SPARES,
            }
        );
        let p = pool(&[
            (POOL, "team-a"),
            (POOL_FILESYSTEM_SIZE, "500Gi"),
            (POOL_MAX_FILESYSTEMS, "3"),
            (POOL_SPARES, "1"),
        ])
        .unwrap();
        assert_eq!(
            (p.filesystem_bytes, p.max_filesystems, p.spares),
            (500 << 30, 3, 1)
        );
        for (bad, names) in [
            (vec![(POOL, "a"), (SHARED_FS_ID, "7")], SHARED_FS_ID),
            (vec![(POOL, "a"), (SHARED_FS_LABEL, "x")], SHARED_FS_LABEL),
            (vec![(SHARED_FS_ID, "7"), (POOL_SPARES, "1")], POOL_SPARES),
            (vec![(POOL, "Big")], POOL),
            (vec![(POOL, "-a")], POOL),
            (vec![(POOL, "a_b")], POOL),
            (vec![(POOL, "abcdefghijklmnopqrstuvwxyz")], POOL),
            (
                vec![(POOL, "a"), (POOL_FILESYSTEM_SIZE, "512Mi")],
                POOL_FILESYSTEM_SIZE,
            ),
            (
                vec![(POOL, "a"), (POOL_FILESYSTEM_SIZE, "lots")],
                POOL_FILESYSTEM_SIZE,
            ),
            (
                vec![(POOL, "a"), (POOL_MAX_FILESYSTEMS, "0")],
                POOL_MAX_FILESYSTEMS,
            ),
            (
                vec![(POOL, "a"), (POOL_MAX_FILESYSTEMS, "101")],
                POOL_MAX_FILESYSTEMS,
            ),
            (
                vec![(POOL, "a"), (POOL_MAX_FILESYSTEMS, "2"), (POOL_SPARES, "2")],
                POOL_SPARES,
            ),
        ] {
            match subdir(&bad) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(names), "{bad:?}: {m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(matches!(
            parse(&[(SPACE_ID, "1"), (POOL, "a")]),
            Err(Error::InvalidArgument(m)) if m.contains(POOL)
        ));
    }
}
