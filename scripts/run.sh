#!/usr/bin/env bash
# The README's main command: sentence embeddings with all-MiniLM-L6-v2 through fused-gemm.
# Installs the toolchain, fetches the model (once), builds the tool and prints the cosine
# similarity of a few example sentences. Runs on the GPU when a CUDA driver is present and on the
# CPU otherwise (said on stderr). Extra arguments go to `fused-gemm embed` (e.g. --timings,
# --device cpu) and relative paths in them are read from the caller's directory.
# The example sentences come on the tool's stdin, which `embed` reads only when given no
# sentence and no --file: `scripts/run.sh "a sentence" "another"` or `scripts/run.sh --file F`
# embed those instead. With --file this script's stdin is the tool's (--file /dev/stdin works);
# otherwise it is not read (piped sentences need --file /dev/stdin).
set -euo pipefail
# Through a symbolic link too: the repository is where the script itself lies.
root="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
# setup.sh sets $toolchain: rustup picks the pinned one from the caller's directory otherwise.
. "$root/scripts/setup.sh"
"$root/scripts/fetch-model.sh"
similarity=(--similarity)
file=""
for arg in "$@"; do
    case "$arg" in
    --) break ;;
    --similarity) similarity=() ;;
    --file | --file=* | -f | -f?*) file=1 ;;
    esac
done
quiet=(--quiet)
if [ ! -x "${CARGO_TARGET_DIR:-$root/target}/release/fused-gemm" ]; then
    # The first build is long and would otherwise be silent: cargo shows its progress.
    echo "run.sh: first build of fused-gemm in release mode (minutes; cargo shows its progress," \
        "and the kernels' device build stays on \"Compiling fused-gemm\" for about 4 of them)" >&2
    quiet=()
fi
run=(env RUSTUP_TOOLCHAIN="$toolchain" cargo run --manifest-path "$root/Cargo.toml" --release
    "${quiet[@]}" --locked -p fused-gemm-cli -- embed "${similarity[@]}" "$@")
if [ -n "$file" ]; then
    exec "${run[@]}"
fi
exec "${run[@]}" <<'SENTENCES'
A man is eating food.
A man is eating a piece of bread.
The girl is carrying a baby.
A monkey is playing drums.
Un homme mange de la nourriture.
Fused kernels keep the GEMM epilogue in registers.
SENTENCES
