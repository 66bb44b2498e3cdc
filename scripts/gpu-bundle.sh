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
cargo build --workspace --release --locked --bins --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys, shutil, os
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bin" in m["target"]["kind"]:
        shutil.copy(m["executable"], os.path.join(sys.argv[1], "bin"))
' "$out"
cp scripts/bundle-run.sh "$out/run.sh"
chmod +x "$out/run.sh"
echo "bundle: $out ($(du -sh "$out" | cut -f1)); run it with $out/run.sh" >&2
# One compressed file to carry to the GPU machine: every binary embeds the same PTX and cubins,
# which a large xz dictionary stores once (~8 MB instead of ~80 MB with gzip). Unpack with
# `tar xJf gpu-bundle.txz`.
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T2 -1 --lzma2=preset=1,dict=256MiB > "$out.txz"
echo "bundle archive: $out.txz ($(du -sh "$out.txz" | cut -f1))" >&2
