//! How the fake writes and reads the wire: the error envelope
//! (`api_error`), the JSON of each record (`render`) and a backend
//! variant's rewrite of it (`dialect`), and how list endpoints filter and
//! page (`query`). None of it changes the state.

pub(super) mod api_error;
pub(super) mod dialect;
pub(super) mod query;
pub(super) mod render;
