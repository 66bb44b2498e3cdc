#!/usr/bin/env bash
# Builds every GPU test binary, the CLI and the benchmarks in release mode, with their PTX
# embedded, into one folder (default target/gpu-bundle) that runs on a GPU host without Rust:
#   scripts/gpu-bundle.sh [DIR]                      # build DIR and DIR.txz
#   gpu-bundle/run.sh                                # on a GPU host: run all GPU tests
#   gpu-bundle/sanitize.sh                           # ... all of them under compute-sanitizer
#   scripts/gpu-run.sh target/gpu-bundle.txz tests   # or: unpack and run named steps, with logs
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
dest="${1:-target/gpu-bundle}"
rm -rf "$dest"
mkdir -p "$dest/tests" "$dest/bin"
cargo test --workspace --release --locked --no-run --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys, shutil, os
dest = sys.argv[1]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    # GPU tests only: CPU tests run in CI, and some need network access a GPU host may lack.
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] and m["target"]["name"].startswith("gpu_"):
        shutil.copy(m["executable"], os.path.join(dest, "tests", m["target"]["name"]))
' "$dest"
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
' "$dest"
cp scripts/bundle-run.sh "$dest/run.sh"
cp scripts/sanitize.sh scripts/sanitize.exclude "$dest/"
chmod +x "$dest/run.sh" "$dest/sanitize.sh"
echo "bundle: $dest ($(du -sh "$dest" | cut -f1)); run it with $dest/run.sh" >&2
# One compressed file to carry to a GPU host: every binary (about 250 MB) embeds the same PTX
# and cubins, which an xz dictionary larger than one binary stores once. One thread: xz's
# threads each start with an empty dictionary. Unpack with `tar xJf gpu-bundle.txz`.
tar -C "$(dirname "$dest")" -cf - "$(basename "$dest")" | xz -T1 -1 --lzma2=preset=1,dict=768MiB > "$dest.txz"
echo "bundle archive: $dest.txz ($(du -sh "$dest.txz" | cut -f1))" >&2
