#!/usr/bin/env bash
# Runs a GPU bundle (scripts/gpu-bundle.sh) on a GPU host, which needs no Rust: unpacks the
# archive and runs the named steps, each step's output in a log file. Usage:
#   scripts/gpu-run.sh [--log-dir DIR] BUNDLE.txz STEP...
# Logs go to DIR (the option comes first), else $FUSED_GEMM_LOG_DIR, else ./gpu-logs. Steps:
#   tests        every GPU test binary of the bundle (gpu_minilm needs FUSED_GEMM_MODEL_DIR)
#   memcheck     compute-sanitizer memcheck on a few small GEMM tests
#   timing       the benchmark's timing self-check
#   compare      bench/compare/run.sh on the bundle's binaries (the curated comparison table;
#                CODA_SITE and FUSED_GEMM_MODEL_DIR as that script says); compare-quick: --quick
#   tiles        every compiled tile of the plain GEMM on a few large shapes
#   sweep        the planner sweep (construction vs exhaustive timing)
#   minilm       the MiniLM GPU tests (needs FUSED_GEMM_MODEL_DIR)
#   waves        the wave scheduler tests and benchmark
#   hopper       the sm_90a mainloop tests
#   stages       what each epilogue stage costs on the sm_90a mainloop
#   control      device-side loops/branches: tests, benchmark, PyTorch baseline (if torch imports)
# Example: scripts/gpu-run.sh target/gpu-bundle.txz tests compare
set -uo pipefail
logs="${FUSED_GEMM_LOG_DIR:-./gpu-logs}"
case "${1:-}" in
--log-dir) logs="${2:?--log-dir needs a directory}"; shift 2 ;;
--log-dir=*) logs="${1#--log-dir=}"; shift ;;
esac
if [ $# -lt 1 ]; then
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
bundle="$1"; shift
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$logs" && logs="$(cd "$logs" && pwd)" || exit 2
work="$(mktemp -d "${TMPDIR:-/tmp}/fg-bundle.XXXXXX")" || exit 2
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf "$bundle" || exit 2
# The archive holds one folder (gpu-bundle, or the name given to scripts/gpu-bundle.sh).
b="$(dirname "$(find "$work" -mindepth 2 -maxdepth 2 -name run.sh | head -1)")"
[ -x "$b/run.sh" ] || { echo "gpu-run.sh: no run.sh in $bundle" >&2; exit 2; }
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
echo "logs: $logs"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
failed=()
for step in "$@"; do
    echo "=== $step ($(date +%T))"
    case "$step" in
        tests) "$b/run.sh" > "$logs/tests.log" 2>&1 || failed+=(tests)
               grep -E "panicked|^FAILED" "$logs/tests.log" | tail -30
               sed -n '/^=== summary/,$p' "$logs/tests.log" ;;
        memcheck) timeout 300 compute-sanitizer --tool memcheck "$b/tests/gpu_gemm" scale_and_bias misaligned degenerate --test-threads=1 > "$logs/memcheck.log" 2>&1; tail -4 "$logs/memcheck.log" ;;
        timing) "$b/bin/fused-gemm-bench" timing 2>&1 | tail -8 ;;
        compare) "$root/bench/compare/run.sh" --bin-dir "$b/bin" --work "$logs/compare-work" \
                     > "$logs/compare.log" 2>&1 || failed+=(compare); tail -80 "$logs/compare.log" ;;
        compare-quick) "$root/bench/compare/run.sh" --quick --bin-dir "$b/bin" \
                     --work "$logs/compare-quick-work" --out "$logs/compare-quick" \
                     > "$logs/compare-quick.log" 2>&1 || failed+=(compare-quick)
                       tail -60 "$logs/compare-quick.log" ;;
        tiles) "$b/bin/tile_probe" > "$logs/tiles.log" 2>&1; cat "$logs/tiles.log" ;;
        sweep) PLAN_SWEEP_RESULTS_DIR="$logs" "$b/bin/plan_sweep" > "$logs/sweep.log" 2>&1
               tail -12 "$logs/sweep.log" ;;
        minilm) "$b/tests/gpu_minilm" --test-threads=1 --nocapture > "$logs/minilm-tests.log" 2>&1; grep -E "cos|FAILED|panicked|test result" "$logs/minilm-tests.log" | tail -25 ;;
        waves) "$b/tests/gpu_waves" --test-threads=1 --nocapture > "$logs/waves-tests.log" 2>&1; grep -E "FAILED|panicked|test result" "$logs/waves-tests.log"
               WAVES_RESULTS_DIR="$logs" "$b/bin/waves" > "$logs/waves-bench.log" 2>&1; tail -30 "$logs/waves-bench.log" ;;
        hopper) timeout 300 "$b/tests/gpu_hopper" --test-threads=1 --nocapture > "$logs/hopper-tests.log" 2>&1; grep -E "FAILED|panicked|test result|err" "$logs/hopper-tests.log" | tail -30 ;;
        stages) timeout 300 "$b/bin/stages" > "$logs/stages.log" 2>&1; cat "$logs/stages.log" ;;
        control) timeout 900 "$b/tests/gpu_control" --test-threads=1 --nocapture > "$logs/control-tests.log" 2>&1; grep -E "FAILED|panicked|test result|rel error" "$logs/control-tests.log"
                 timeout 900 "$b/bin/control" --out "$logs" ${CONTROL_BENCH_ARGS:-} > "$logs/control-bench.log" 2>&1; tail -50 "$logs/control-bench.log"
                 if python3 -c "import torch" 2>/dev/null; then timeout 900 python3 "$root/bench/control/torch_control.py" --json "$logs/control-torch.json" > "$logs/control-torch.log" 2>&1; tail -3 "$logs/control-torch.log"; fi ;;
        *) echo "unknown step $step"; failed+=("$step") ;;
    esac
done
# Exit status: 0 when the tests and comparison steps passed and every step was known.
[ ${#failed[@]} -eq 0 ] || { echo "gpu-run.sh: failed: ${failed[*]}" >&2; exit 1; }
