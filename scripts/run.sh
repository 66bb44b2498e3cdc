#!/usr/bin/env bash
# The README's main command: sentence embeddings with all-MiniLM-L6-v2 through fused-gemm.
# Installs the toolchain, fetches the model (once), builds the tool and prints the cosine
# similarity of a few example sentences. Runs on the GPU when a CUDA driver is present and on the
# CPU otherwise (said on stderr). Extra arguments go to `fused-gemm embed` (e.g. --timings).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
scripts/fetch-model.sh
cargo run --release --quiet -p fused-gemm-cli -- embed --similarity --device auto "$@" \
    "A man is eating food." \
    "A man is eating a piece of bread." \
    "The girl is carrying a baby." \
    "A monkey is playing drums." \
    "Un homme mange de la nourriture." \
    "Fused kernels keep the GEMM epilogue in registers."
