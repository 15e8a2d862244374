//! The volume kinds and the one seam the RPC handlers call them through
//! (`seam`): whole Linode NFS filesystems (`filesystem`) and quota-capped
//! directories of shared ones (`directory`), with what both share: the
//! publish target of a volume (`publishing`), a snapshot's POST
//! (`snapshot_post`) and what a restore copies (`restorable`).

pub mod directory;
pub mod filesystem;
pub(crate) mod publishing;
pub(crate) mod restorable;
pub mod seam;
pub(crate) mod snapshot_post;
