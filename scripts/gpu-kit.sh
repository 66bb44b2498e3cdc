#!/usr/bin/env bash
# A small archive of part of the GPU bundle (scripts/gpu-bundle.sh, built first), for when the
# whole bundle is too large to carry: same layout, so scripts/gpu-run.sh runs it.
#   scripts/gpu-kit.sh ARCHIVE.txz FILE...   (FILE relative to target/gpu-bundle)
#   scripts/gpu-kit.sh target/control-kit.txz tests/gpu_control bin/control
set -euo pipefail
cd "$(dirname "$0")/.."
archive="${1:?usage: scripts/gpu-kit.sh ARCHIVE.txz FILE...}"; shift
src=target/gpu-bundle
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/gpu-bundle/tests" "$tmp/gpu-bundle/bin"
for f in "$@"; do cp "$src/$f" "$tmp/gpu-bundle/$f"; done
cp "$src/run.sh" "$tmp/gpu-bundle/run.sh"
# Every binary embeds the same PTX and cubins: a dictionary larger than one binary stores them once.
tar -C "$tmp" -cf - gpu-bundle | xz -T1 -9 --lzma2=preset=9,dict=768MiB > "$archive"
echo "kit: $archive ($(du -sh "$archive" | cut -f1))" >&2
