//! What a publish or unpublish of a volume does to access policies, as a
//! volume kind answers it (`kind::publish_target`, `kind::unpublish`) for
//! the handlers to carry out through the access-policy queue. Data only.

use crate::handles::VolumeId;

/// Whose access policy a publish changes, and how.
pub struct Target {
    /// The filesystem whose ACL admits the node.
    pub acl: VolumeId,
    /// A node the ACL already admits needs no queued write. A directory
    /// always queues, so that an unpublish of a sibling that read the
    /// cluster's attachments before this publish is refused as overtaken.
    pub admitted_is_done: bool,
}

/// What an unpublish does to the ACL.
pub enum Unpublish {
    /// Revoke the node from this filesystem's ACL.
    Revoke(VolumeId),
    /// Leave the ACL as it is, for this reason (logged).
    Keep(String),
}
