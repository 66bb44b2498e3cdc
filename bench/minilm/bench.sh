#!/usr/bin/env bash
# The encoder forward pass on one GPU host, back to back: ours with the LayerNorms fused and
# deferred (`fused-gemm bench --layer-norm`), and PyTorch (eager, torch.compile, CUDA graph),
# on all-MiniLM-L6-v2 (batch 1, 32, 256) and on BERT-base's shapes with random weights (batch
# 1, 128), sequence length 128; the JSON of every side in --out, then the tables (table.py).
#
#   bench/minilm/bench.sh --model-dir DIR [--bin-dir DIR] [--out DIR] [--dtype f16|bf16]
#                         [--compile-budget SECONDS]
#
# --model-dir: an all-MiniLM-L6-v2 folder (`fused-gemm convert-model --dtype f16 -o DIR` writes
# a 45 MB one); its tokenizer also serves the BERT-base model this script writes with
# `fused-gemm random-model`. --bin-dir: where the `fused-gemm` binary is (default
# target/gpu-bundle/bin, then target/release). --out: default target/encoder-bench.
# --dtype: our storage dtype (PyTorch runs fp16). --compile-budget: the seconds each PyTorch
# run may spend, torch.compile last (default 150).
# Exit status: 0 when every step finished, 1 otherwise, 2 for bad arguments.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
model="" bin_dir="" out="$root/target/encoder-bench" dtype=f16 budget=150
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
need() { [ $# -ge 2 ] || { echo "bench.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --model-dir) need "$@"; model="$2"; shift 2 ;;
        --bin-dir) need "$@"; bin_dir="$2"; shift 2 ;;
        --out) need "$@"; out="$2"; shift 2 ;;
        --dtype) need "$@"; dtype="$2"; shift 2 ;;
        --compile-budget) need "$@"; budget="$2"; shift 2 ;;
        *) echo "bench.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
    esac
done
[ -n "$model" ] || { echo "bench.sh: --model-dir is required (--help)" >&2; exit 2; }
[ -f "$model/model.safetensors" ] || { echo "bench.sh: no model.safetensors in $model" >&2; exit 2; }
if [ -z "$bin_dir" ]; then
    for d in "$root/target/gpu-bundle/bin" "$root/target/release"; do
        if [ -x "$d/fused-gemm" ]; then bin_dir="$d"; break; fi
    done
fi
cli="$bin_dir/fused-gemm"
[ -x "$cli" ] || { echo "bench.sh: no fused-gemm binary (scripts/gpu-bundle.sh builds it, or pass --bin-dir)" >&2; exit 2; }
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" PYTHONUNBUFFERED=1
mkdir -p "$out"
failed=()
# step NAME COMMAND...: runs it, its output on the terminal, and notes a failure.
step() {
    local name="$1"; shift
    echo "=== $name" >&2
    "$@" || failed+=("$name")
}
bert="$out/bert-base-model"
if ! [ -f "$bert/model.safetensors" ]; then
    step bert-model "$cli" random-model --preset bert-base --dtype "$dtype" --model-dir "$model" -o "$bert"
fi
for spec in "minilm $model 1,32,256" "bert $bert 1,128"; do
    read -r name dir batches <<< "$spec"
    for ln in fused deferred; do
        step "$name-$ln" "$cli" bench --model-dir "$dir" --dtype "$dtype" --batch-sizes "$batches" \
            --seq-len 128 --layer-norm "$ln" --json "$out/$name-$ln.json"
    done
    step "$name-torch" python3 "$root/bench/minilm/pytorch_baseline.py" --model-dir "$dir" \
        --batch-sizes "$batches" --seq-len 128 --budget-s "$budget" --json "$out/$name-torch.json"
done
python3 "$root/bench/minilm/table.py" "$out" minilm bert | tee "$out/tables.md" || failed+=(tables)
if [ ${#failed[@]} -gt 0 ]; then
    echo "bench.sh: failed: ${failed[*]}" >&2
    exit 1
fi
