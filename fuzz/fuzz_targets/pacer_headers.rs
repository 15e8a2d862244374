#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linode_nfs_csi::fuzzing::pacer_headers(data));
