//! The access-policy state of the controller: the queue of changes to
//! each filesystem's ACL (`queue`) and what it knows of each ACL (`cache`).
//! Applying them is `controller::acl`'s.

pub(crate) mod cache;
pub(crate) mod queue;
