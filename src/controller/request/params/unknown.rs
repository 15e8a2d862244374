//! Keys of the driver's own prefix that it does not know: a typo in a
//! StorageClass (`on-delet: retain`) would otherwise quietly mean the
//! default (deleting data). Such a key is InvalidArgument, naming the
//! nearest key the class may have; keys of other prefixes are someone
//! else's (the provisioner's `csi.storage.k8s.io/*`) and never looked at.

use super::keys::*;
use crate::Error;
use std::collections::HashMap;

/// The prefix of every key of the driver's.
pub const PREFIX: &str = "linodenfs.csi.linode.com/";

/// Every StorageClass key.
pub const CLASS_KEYS: [&str; 20] = [
    SPACE_ID,
    SPACE_LABEL,
    TAGS,
    ROOT_SQUASH,
    VOLUME_TYPE,
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
];

/// InvalidArgument for the first key of `raw` (in key order) under the
/// driver's prefix that is not one of `known`, in a class of kind `class`
/// (`StorageClass`, `VolumeSnapshotClass`…).
pub fn refuse_unknown(
    raw: &HashMap<String, String>,
    known: &[&str],
    class: &str,
) -> Result<(), Error> {
    let mut ours: Vec<&String> = raw
        .keys()
        .filter(|k| k.starts_with(PREFIX) && !known.contains(&k.as_str()))
        .collect();
    ours.sort();
    let Some(key) = ours.first() else {
        return Ok(());
    };
    let hint = match nearest(key, known) {
        Some(near) => format!("; did you mean {near}?"),
        None => format!(": the driver takes no {class} parameter of its own"),
    };
    Err(Error::InvalidArgument(format!(
        "unknown {class} parameter {key}{hint}"
    )))
}

/// The key of `known` fewest edits away from `key`.
fn nearest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    known.iter().copied().min_by_key(|k| edits(key, k))
}

/// Levenshtein distance, by characters.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_typo_of_a_key_is_refused_naming_the_key_it_meant() {
        let raw = class(&[
            ("linodenfs.csi.linode.com/space-id", "1"),
            ("linodenfs.csi.linode.com/on-delet", "retain"),
        ]);
        let e = refuse_unknown(&raw, &CLASS_KEYS, "StorageClass").unwrap_err();
        assert_eq!(
            e,
            Error::InvalidArgument(
                "unknown StorageClass parameter linodenfs.csi.linode.com/on-delet; did you mean linodenfs.csi.linode.com/on-delete?"
                    .into()
            )
        );
    }

    #[test]
    fn keys_of_other_prefixes_and_known_keys_pass() {
        let raw = class(&[
            ("linodenfs.csi.linode.com/space-id", "1"),
            ("csi.storage.k8s.io/pvc/name", "data"),
            ("space-id", "1"),
        ]);
        assert_eq!(refuse_unknown(&raw, &CLASS_KEYS, "StorageClass"), Ok(()));
    }

    #[test]
    fn a_class_that_takes_no_key_of_ours_says_so() {
        let raw = class(&[("linodenfs.csi.linode.com/tags", "a")]);
        let e = refuse_unknown(&raw, &[], "VolumeSnapshotClass").unwrap_err();
        assert!(
            e.message()
                .ends_with("the driver takes no VolumeSnapshotClass parameter of its own"),
            "{e:?}"
        );
    }

    #[test]
    fn edits_count_insertions_deletions_and_substitutions() {
        assert_eq!(edits("on-delet", "on-delete"), 1);
        assert_eq!(edits("quota", "qouta"), 2);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("same", "same"), 0);
    }
}
