//! Generates the message types of the CSI and kubelet plugin-registration
//! protos (rust-protobuf 3, pure parser: no protoc) and their gRPC service
//! stubs (grpcio-compiler, which only reads rust-protobuf 2 descriptors, so
//! the parsed descriptors are round-tripped through their wire bytes).

use std::path::{Path, PathBuf};

/// Each `proto/<name>.proto` becomes `<name>.rs` and `<name>_grpc.rs`.
const PROTOS: &[&str] = &["csi", "pluginregistration"];

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=REV");
    for name in PROTOS {
        generate(name, &out);
    }
    println!("cargo:rustc-env=GIT_REVISION={}", git_revision());
}

fn generate(name: &str, out: &Path) {
    let file = format!("{name}.proto");
    let input = format!("proto/{file}");
    println!("cargo:rerun-if-changed={input}");

    protobuf_codegen::Codegen::new()
        .pure()
        .include("proto")
        .input(&input)
        .out_dir(out)
        .run_from_script();
    strip_inner_attributes(&out.join(format!("{name}.rs")));

    let parsed = protobuf_parse::Parser::new()
        .pure()
        .include("proto")
        .input(&input)
        .parse_and_typecheck()
        .unwrap_or_else(|e| panic!("parse {input}: {e}"));
    let descriptors: Vec<protobuf2::descriptor::FileDescriptorProto> = parsed
        .file_descriptors
        .iter()
        .map(|fd| {
            let bytes = protobuf::Message::write_to_bytes(fd).expect("encode descriptor");
            protobuf2::Message::parse_from_bytes(&bytes).expect("decode descriptor")
        })
        .collect();
    let generated = grpcio_compiler::codegen::gen(&descriptors, &[file]);
    let service = generated
        .into_iter()
        .find(|r| r.name.ends_with("_grpc.rs"))
        .unwrap_or_else(|| panic!("grpcio-compiler produced no service file for {input}"));
    let path = out.join(format!("{name}_grpc.rs"));
    std::fs::write(&path, service.content).expect("write service file");
    strip_inner_attributes(&path);
}

/// `include!` cannot take inner attributes or inner doc comments; the
/// including module carries the allowances instead (and `box_pointers` no
/// longer exists as a lint).
fn strip_inner_attributes(path: &Path) {
    let text = std::fs::read_to_string(path).expect("read generated file");
    let kept: Vec<String> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("#!["))
        .map(|l| match l.trim_start().strip_prefix("//!") {
            Some(rest) => format!("//{rest}"),
            None => l.to_string(),
        })
        .collect();
    std::fs::write(path, kept.join("\n")).expect("rewrite generated file");
}

/// `REV` (set by image builds) wins; otherwise the git HEAD when built from a
/// checkout; otherwise nothing.
fn git_revision() -> String {
    if let Ok(rev) = std::env::var("REV") {
        return rev;
    }
    watch_head();
    git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_default()
}

/// Re-run when HEAD moves. Git names the directories, because in a
/// worktree `.git` is a file and the branch's ref lives in the common git
/// directory (loose, or in `packed-refs`). Only existing paths are named:
/// cargo re-runs the script on every build for a missing one.
fn watch_head() {
    let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--absolute-git-dir"]),
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
    ) else {
        return;
    };
    let head = Path::new(&git_dir).join("HEAD");
    let mut watched = vec![head.clone()];
    if let Ok(text) = std::fs::read_to_string(&head) {
        if let Some(reference) = text.trim().strip_prefix("ref: ") {
            let loose = Path::new(&common).join(reference);
            // A packed ref becomes a loose file at the next commit: watch
            // the directory it will appear in.
            match loose.parent().filter(|_| !loose.exists()) {
                Some(dir) => watched.push(dir.to_path_buf()),
                None => watched.push(loose),
            }
            watched.push(Path::new(&common).join("packed-refs"));
        }
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn git(args: &[&str]) -> Option<String> {
    std::process::Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}
