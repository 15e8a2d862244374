# Thin wrappers over the commands CI runs (.ci/run), so a recipe that passes
# here passes there. `just --list` shows them all.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Image coordinates; override from the environment or as `just IMAGE_VERSION=dev image-build`.
IMAGE_REPO := env_var_or_default("IMAGE_REPO", "docker.io/linode/linode-nfs-csi")
IMAGE_VERSION := env_var_or_default("IMAGE_VERSION", "v" + `sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1`)
PLATFORM := env_var_or_default("PLATFORM", "linux/amd64")
# podman when it is installed, docker otherwise.
ENGINE := env_var_or_default("CONTAINER_ENGINE", `command -v podman >/dev/null 2>&1 && echo podman || echo docker`)
# Stamped into the binary's version; empty outside a git checkout.
REV := `git rev-parse --short=12 HEAD 2>/dev/null || true`

default:
    @just --list

# Release build of the driver binary
build:
    cargo build --release

# The whole test suite, as CI runs it
test:
    bash .ci/test

# Clippy on every target, warnings are errors
lint:
    cargo clippy --all-targets -- -D warnings

# Format the code
fmt:
    cargo fmt

# Static musl binary via zig; checks linkage, size and that it serves from an empty chroot
static:
    bash .ci/static

# Build the container image for PLATFORM (uses vendor/ offline when present)
image-build:
    {{ENGINE}} build -f Containerfile --platform {{PLATFORM}} --build-arg REV={{REV}} -t {{IMAGE_REPO}}:{{IMAGE_VERSION}} .

# Build, then push IMAGE_REPO:IMAGE_VERSION
image-push: image-build
    {{ENGINE}} push {{IMAGE_REPO}}:{{IMAGE_VERSION}}

# Render every kustomization and validate it against the Kubernetes schemas
kustomize-check:
    bash kustomize/check.sh

# Vendor all crates into vendor/ for offline and image builds
vendor:
    bash .ci/vendor

# Prove an offline build from vendor/ works (no network, empty CARGO_HOME)
vendor-check:
    bash .ci/vendor-check

# The whole driver on this machine against embedded fakes
dev:
    cargo run --release -- dev

# Benchmarks
bench:
    bash .ci/bench

# Run every fuzz target (or those named) for SECONDS each; needs nightly
fuzz SECONDS="60" *TARGETS="":
    bash .ci/fuzz {{SECONDS}} {{TARGETS}}

# Merge what fuzzing found into fuzz/corpus and minimise it
fuzz-cmin *TARGETS="":
    bash .ci/fuzz cmin {{TARGETS}}

# The full fault campaign (thousands of sequences, faults, SIGKILL restarts); CHAOS_SEED replays one
chaos:
    bash .ci/chaos

# Everything CI runs
ci:
    bash .ci/run
