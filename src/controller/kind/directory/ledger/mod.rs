//! The ledger of each shared parent: what its quotas promise and use
//! (`quotas`, listed one at a time: `quota_lists`), the active
//! controller's account of it (`account`), the room calls under way claim
//! of it (`room`), and the volumes' usage as last sampled (`observed`).
//! Plain accounting: it never calls the controller's state or the API.

pub(crate) mod account;
pub(crate) mod observed;
pub(crate) mod quota_lists;
pub(crate) mod quotas;
pub(crate) mod room;
