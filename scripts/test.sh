#!/usr/bin/env bash
# The test suite: sets everything up on a fresh machine, then runs every test.
# GPU tests skip with a message when no CUDA driver is present (run them on a GPU machine with
# scripts/gpu-bundle.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
# Incremental caches double the target dir and buy nothing on a one-shot clean build.
export CARGO_INCREMENTAL=0
cargo fmt --all -- --check
cargo test --workspace --locked --no-fail-fast "$@"
