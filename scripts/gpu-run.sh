#!/usr/bin/env bash
# Developer helper for a session on the GPU machine (no Rust there): unpacks the bundle made by
# scripts/gpu-bundle.sh and runs the named steps, logs under $OUT (or ./gpu-out). Steps:
#   tests        every GPU test binary of the bundle
#   memcheck     compute-sanitizer memcheck on a few small GEMM tests
#   timing       the benchmark's timing self-check
#   bench-quick  fused-gemm-bench --quick;  bench  the full shape table
#   tiles        every compiled tile of the plain GEMM on a few large shapes
#   sweep        the planner sweep (construction vs exhaustive timing)
#   minilm       MiniLM GPU tests and the end-to-end benchmark (needs FUSED_GEMM_MODEL_DIR)
#   waves        the wave scheduler tests and benchmark
#   hopper       the sm_90a mainloop tests, its cuBLASLt benchmark and the SASS check
#   stages       what each epilogue stage costs on the sm_90a mainloop (HOPPER_BENCH_STAGES)
#   control      device-side loops/branches: tests, benchmark, PyTorch baseline (if torch imports)
# Example: scripts/gpu-session.sh target/gpu-bundle.txz tests bench-quick
set -uo pipefail
bundle="$1"; shift
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
work=/tmp/fg-bundle; rm -rf "$work"; mkdir -p "$work"
tar -C "$work" -xJf "$bundle" || exit 2
b="$work/gpu-bundle"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for step in "$@"; do
    echo "=== $step ($(date +%T))"
    case "$step" in
        tests) "$b/run.sh" > "$out/tests.log" 2>&1; grep -E "^=== |FAILED|panicked|test result|PASSED" "$out/tests.log" ;;
        memcheck) timeout 300 compute-sanitizer --tool memcheck "$b/tests/gpu_gemm" scale_and_bias misaligned degenerate --test-threads=1 > "$out/memcheck.log" 2>&1; tail -4 "$out/memcheck.log" ;;
        timing) "$b/bin/fused-gemm-bench" timing 2>&1 | tail -8 ;;
        bench-quick) "$b/bin/fused-gemm-bench" --quick --out "$out" > "$out/bench-quick.log" 2>&1; tail -30 "$out/bench-quick.log" ;;
        bench) "$b/bin/fused-gemm-bench" --out "$out" > "$out/bench.log" 2>&1; tail -60 "$out/bench.log" ;;
        tiles) "$b/bin/tile_probe" > "$out/tiles.log" 2>&1; cat "$out/tiles.log" ;;
        sweep) "$b/bin/plan_sweep" > "$out/sweep.log" 2>&1; cp "$root"/bench/results/plan_sweep-* "$out/" 2>/dev/null; tail -12 "$out/sweep.log" ;;
        minilm) "$b/tests/gpu_minilm" --test-threads=1 --nocapture > "$out/minilm-tests.log" 2>&1; grep -E "cos|FAILED|panicked|test result" "$out/minilm-tests.log" | tail -25
                "$root/bench/minilm/bench.sh" --bin "$b/bin/fused-gemm" --out "$out" > "$out/minilm-bench.log" 2>&1; tail -30 "$out/minilm-bench.log" ;;
        waves) "$b/tests/gpu_waves" --test-threads=1 --nocapture > "$out/waves-tests.log" 2>&1; grep -E "FAILED|panicked|test result" "$out/waves-tests.log"
               WAVES_RESULTS_DIR="$out" "$b/bin/waves" > "$out/waves-bench.log" 2>&1; tail -30 "$out/waves-bench.log" ;;
        hopper) timeout 300 "$b/tests/gpu_hopper" --test-threads=1 --nocapture > "$out/hopper-tests.log" 2>&1; grep -E "FAILED|panicked|test result|err" "$out/hopper-tests.log" | tail -30
                HOPPER_BENCH_OUT="$out" timeout 300 "$b/bin/hopper" > "$out/hopper-bench.log" 2>&1; tail -40 "$out/hopper-bench.log"
                c="$out/fused_gemm.sm_90a.cubin"
                if [ -f "$c" ] && command -v cuobjdump > /dev/null; then
                    cuobjdump --dump-sass "$c" > "$out/sm90a.sass"
                    # Per Hopper entry point (`__sm90tma_` in the name): HGMMA present, no local memory.
                    awk '/Function :/ { f = $3 } f ~ /__sm90tma_/ { seen[f] = 1 } f ~ /__sm90tma_/ && /HGMMA/ { h[f]++ }
                         f ~ /__sm90tma_/ && /(STL|LDL)/ { l[f]++ }
                         END { for (x in seen) { n++; if (h[x] > 0) nh++; if (l[x] > 0) { nl++; print "local memory in " x ": " l[x] } }
                               printf "Hopper entry points: %d, with HGMMA: %d, with local loads/stores: %d\n", n, nh, nl }' "$out/sm90a.sass" | tail -15
                    xz -T4 "$out/sm90a.sass"
                fi ;;
        stages) HOPPER_BENCH_STAGES=1 timeout 300 "$b/bin/hopper" > "$out/stages.log" 2>&1; cat "$out/stages.log" ;;
        control) timeout 900 "$b/tests/gpu_control" --test-threads=1 --nocapture > "$out/control-tests.log" 2>&1; grep -E "FAILED|panicked|test result|rel error" "$out/control-tests.log"
                 timeout 900 "$b/bin/control" --out "$out" ${CONTROL_BENCH_ARGS:-} > "$out/control-bench.log" 2>&1; tail -50 "$out/control-bench.log"
                 if python3 -c "import torch" 2>/dev/null; then timeout 900 python3 "$root/bench/control/torch_control.py" --json "$out/control-torch.json" > "$out/control-torch.log" 2>&1; tail -3 "$out/control-torch.log"; fi ;;
        *) echo "unknown step $step" ;;
    esac
done
