#!/usr/bin/env bash
# The test suite: sets everything up on a fresh machine, then runs every test.
# Without a CUDA driver the GPU tests return early: libtest counts them as passed and keeps
# their skip message with the captured output, so this script says so once, before and after.
# On a GPU host, run them from the bundle of scripts/gpu-bundle.sh: its runner sets
# FUSED_GEMM_REQUIRE_GPU=1, under which a GPU test that finds no GPU fails.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
# Incremental caches double the target dir and buy nothing on a one-shot clean build.
export CARGO_INCREMENTAL=0
cargo fmt --all -- --check
no_gpu=""
libs=$(ldconfig -p 2>/dev/null || true)
if [[ $libs != *libcuda.so.1* ]]; then
    no_gpu="ldconfig lists no CUDA driver (libcuda.so.1): the GPU tests \
({,host/,cli/}tests/gpu_*.rs) print why they skip, return at once and count as passed; \
scripts/gpu-bundle.sh builds them for a GPU host"
    echo "test.sh: $no_gpu" >&2
fi
status=0
cargo test --workspace --locked --no-fail-fast "$@" || status=$?
[ -z "$no_gpu" ] || echo "test.sh: $no_gpu" >&2
exit "$status"
