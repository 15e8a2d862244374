//! The state of the jobs that fill new directory volumes: which run and
//! what each holds (`running`), the temporary clones they hold
//! (`holders`), their copies (`copies`), their phase and progress
//! (`progress`), what stops their waits (`stops`), and what the watch of
//! their claims keeps (`claims`). Running the jobs is
//! `kind::directory::restore`'s.

pub(crate) mod claims;
pub(crate) mod copies;
pub(crate) mod holders;
pub(crate) mod progress;
pub(crate) mod running;
pub(crate) mod stops;
