//! What the directory kind remembers between calls beside its fills: the
//! directory snapshots waiting for a parent snapshot (`batches`), the
//! group snapshots being taken (`group_jobs`), the pools' hints
//! (`pools`) and autogrow's memory of each volume (`autogrowth`). Their
//! logic is the kind's.

pub(crate) mod autogrowth;
pub(crate) mod batches;
pub(crate) mod group_jobs;
pub(crate) mod pools;
