//! The parent of directory volumes and its files: the shared filesystems
//! a cluster's classes name (`classes`), mounted on the controller
//! (`shares`, as last read: `parent_cache`), and what the driver keeps on
//! them: each volume's directory and marker (`files`), the small files it
//! writes (`own_files`), what deleted volumes keep (`kept`) and the
//! records of directory snapshots (`records`). It never calls the
//! controller's state or the Linode API.

pub(crate) mod classes;
pub(crate) mod files;
pub(crate) mod kept;
pub(crate) mod own_files;
pub(crate) mod parent_cache;
pub(crate) mod records;
pub(crate) mod shares;
