//! A directory volume's beginning and end: CreateVolume (`create`: its
//! directory, marker and quota, on a named parent or one a pool places it
//! on, then its fill), DeleteVolume (`delete`), and GetCapacity, what a
//! class can still give a new volume (`capacity`).

pub(crate) mod capacity;
pub(crate) mod create;
pub(crate) mod delete;
