//! The committed fuzz corpora (`fuzz/corpus/<target>/`) replayed through the
//! targets' entry points (`linode_nfs_csi::fuzzing`) on stable: every input
//! the fuzzer kept, and every crash it once found, keeps passing the
//! targets' properties in every `cargo test`, with or without a nightly
//! toolchain. Also keeps the target list, the corpora and `fuzz/` in step.

use linode_nfs_csi::fuzzing::TARGETS;
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn names_in(dir: &Path, suffix: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|n| n.strip_suffix(suffix).map(str::to_string))
        .collect()
}

#[test]
fn every_corpus_input_passes_its_target() {
    let mut failed = Vec::new();
    for (name, run) in TARGETS {
        let dir = fuzz_dir().join("corpus").join(name);
        let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{name}: empty corpus");
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            if catch_unwind(AssertUnwindSafe(|| run(&data))).is_err() {
                failed.push(input.display().to_string());
            }
        }
    }
    assert!(
        failed.is_empty(),
        "inputs that fail their target: {failed:#?}"
    );
}

#[test]
fn targets_corpora_and_fuzz_crate_agree() {
    let targets: BTreeSet<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(names_in(&fuzz_dir().join("fuzz_targets"), ".rs"), targets);
    assert_eq!(names_in(&fuzz_dir().join("corpus"), ""), targets);
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    for t in &targets {
        assert!(
            manifest.contains(&format!("name = \"{t}\"\npath = \"fuzz_targets/{t}.rs\"")),
            "fuzz/Cargo.toml has no [[bin]] for {t}"
        );
    }
}
