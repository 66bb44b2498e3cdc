#!/usr/bin/env bash
# Device call of 2026-12-05 (session 14): overlapping captures on two threads (a count of captures in progress decides when event tracking comes back). Every GPU test binary
# but gpu_minilm (the kit of scripts/gpu-bundle.sh, stripped, as target/kit.txz), then a
# throw-away gpu_runtime built with the old graph.rs (each capture restores the flag it found):
# overlapping_captures_on_two_threads is expected to fail there.
set -uo pipefail
work=/tmp/fg7; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
FG_TEST_TIMEOUT=200 $work/gpu-bundle/run.sh > $OUT/tests.log 2>&1
grep -E "^=== |FAILED|panicked|test result|PASSED" $OUT/tests.log
grep -A3 -E "overlapping_captures" $OUT/tests.log | grep -vE "^--$" | head -12
echo "=== without the fix"
for i in 1 2 3; do
  timeout 120 $work/sab/gpu_runtime_sabotaged overlapping --test-threads=1 --nocapture 2>&1 | grep -E "panicked|survives|test result|rror" | head -4
done > $OUT/sabotaged.log 2>&1
cat $OUT/sabotaged.log
cd $OUT && tar -cJf logs.tar.xz tests.log sabotaged.log && rm tests.log
