//! What every part of the controller shares, below all that uses it: the
//! `Controller` value and what it is built from (`controller`), and every
//! piece of state it holds whose room would otherwise import it back: the
//! Space cache (`spaces`), the in-doubt records (`in_doubt`), the keys of
//! its locks (`lock_keys`), the walks of ListVolumes (`walks`), the
//! cluster as Kubernetes shows it (`cluster`), the marks on what the
//! driver makes (`tags`), the access-policy queue and cache (`acl`), the
//! fill jobs (`fills`) and the directory kind's other memories
//! (`directory`). Nothing here imports a handler, the seam or a kind's
//! logic.

pub(crate) mod acl;
pub(crate) mod cluster;
pub(crate) mod controller;
pub(crate) mod directory;
pub(crate) mod fills;
pub(crate) mod in_doubt;
pub(crate) mod lock_keys;
pub(crate) mod spaces;
pub(crate) mod tags;
pub(crate) mod walks;
