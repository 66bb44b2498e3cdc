#!/usr/bin/env bash
# Builds every test binary, the CLI and the benchmarks in release mode, with their PTX embedded,
# into one folder (default target/gpu-bundle) that runs on a GPU machine without Rust:
#   scripts/gpu-bundle.sh            # build
#   target/gpu-bundle/run.sh         # on the GPU machine: run all GPU tests
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
out="${1:-target/gpu-bundle}"
rm -rf "$out"
mkdir -p "$out/tests" "$out/bin"
cargo test --workspace --release --locked --no-run --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys, shutil, os
out = sys.argv[1]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    # GPU tests only: CPU tests run in CI, and some need network access the GPU machine lacks.
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] and m["target"]["name"].startswith("gpu_"):
        shutil.copy(m["executable"], os.path.join(out, "tests", m["target"]["name"]))
' "$out"
cargo build --workspace --release --locked --bins
for b in target/release/fused-gemm target/release/fused-gemm-bench*; do
    [ -f "$b" ] && [ -x "$b" ] && cp "$b" "$out/bin/"
done
cp scripts/bundle-run.sh "$out/run.sh"
chmod +x "$out/run.sh"
echo "bundle: $out ($(du -sh "$out" | cut -f1)); run it with $out/run.sh" >&2
# One compressed file to carry to the GPU machine (the embedded PTX compresses well).
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
echo "bundle archive: $out.tgz ($(du -sh "$out.tgz" | cut -f1))" >&2
