#!/usr/bin/env bash
# Device call of 2026-12-05 (session 14): the host hardening of 222106b (workspace growth inside a capture). Every GPU test binary
# but gpu_minilm (the kit of scripts/gpu-bundle.sh, stripped, as target/kit.txz), then a
# throw-away gpu_gemm built without the fix (grow allocating on the captured stream):
# a_capture_grows_the_workspace_outside_the_graph is expected to fail there (it may also fault: it runs last).
set -uo pipefail
work=/tmp/fg6; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
FG_TEST_TIMEOUT=200 $work/gpu-bundle/run.sh > $OUT/tests.log 2>&1
grep -E "^=== |FAILED|panicked|test result|PASSED" $OUT/tests.log
grep -A3 -E "graphs_outlive|graphs_survive|a_capture_grows" $OUT/tests.log | grep -vE "^--$" | head -12
echo "=== without the fix"
for i in 1 2 3; do
  timeout 120 $work/sab/gpu_gemm_sabotaged a_capture_grows --test-threads=1 --nocapture 2>&1 | grep -E "rel err|panicked|probe|test result|error" | head -4
done > $OUT/sabotaged.log 2>&1
cat $OUT/sabotaged.log
cd $OUT && tar -cJf logs.tar.xz tests.log sabotaged.log && rm tests.log
