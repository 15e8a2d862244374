//! Rust types generated from `proto/csi.proto` and `proto/pluginregistration.proto`
//! by `build.rs`. Nothing here is written by hand. The generated code follows
//! its own conventions, so lints are relaxed for this module only.
#![allow(
    clippy::all,
    dead_code,
    missing_docs,
    non_camel_case_types,
    non_snake_case
)]
#![allow(
    non_upper_case_globals,
    trivial_casts,
    unsafe_code,
    unused_imports,
    unused_results,
    unused_mut
)]

pub mod csi {
    include!(concat!(env!("OUT_DIR"), "/csi.rs"));
}

pub mod csi_grpc {
    include!(concat!(env!("OUT_DIR"), "/csi_grpc.rs"));
}

pub mod pluginregistration {
    include!(concat!(env!("OUT_DIR"), "/pluginregistration.rs"));
}

pub mod pluginregistration_grpc {
    include!(concat!(env!("OUT_DIR"), "/pluginregistration_grpc.rs"));
}
