#!/usr/bin/env bash
# The README's main command: sentence embeddings with all-MiniLM-L6-v2 through fused-gemm.
# Installs the toolchain, fetches the model (once), builds the tool and prints the cosine
# similarity of a few example sentences. Runs on the GPU when a CUDA driver is present and on the
# CPU otherwise (said on stderr). Extra arguments go to `fused-gemm embed` (e.g. --timings).
# The example sentences come on the tool's stdin, which `embed` reads only when given no
# sentence and no --file: `scripts/run.sh "a sentence" "another"` or `scripts/run.sh --file F`
# embed those instead. This script's own stdin is not read: pass text with --file.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
scripts/fetch-model.sh
cargo run --release --quiet -p fused-gemm-cli -- embed --similarity --device auto "$@" <<'SENTENCES'
A man is eating food.
A man is eating a piece of bread.
The girl is carrying a baby.
A monkey is playing drums.
Un homme mange de la nourriture.
Fused kernels keep the GEMM epilogue in registers.
SENTENCES
