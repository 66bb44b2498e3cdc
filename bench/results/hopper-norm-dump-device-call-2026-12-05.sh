#!/usr/bin/env bash
# Device call for Overrides::norm_dump (session 15, 2026-12-05; not run: no GPU was lent after
# the change was built). Carry target/kit.txz, made by
#   scripts/gpu-bundle.sh && scripts/gpu-kit.sh target/kit.txz tests/gpu_hopper bin/hopper
# and run `bash bench/results/hopper-norm-dump-device-call-2026-12-05.sh` on the H200.
# 1. t15 (norm_dump against the register path and the f64 reference), then t8 and t9 (the
#    default path is meant to be unchanged).
# 2. The benchmark's BERT-large rows twice with HOPPER_BENCH_NORM_DUMP=1: in each run the
#    forced 128x256 coop tile (tile_times_ms) runs the chunked epilogue and the "ours" column
#    the register path, in the same interleaved rounds.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/device.txt
echo "=== t15 t8 t9 $(date +%T)"
timeout 300 $b/tests/gpu_hopper --test-threads=1 --nocapture t15_ t8_ t9_ > $OUT/tests.log 2>&1; rc=$?; echo rc=$rc
grep -E "test result|panicked|FAILED|norm_dump routes" $OUT/tests.log | head -30
[ $rc = 0 ] || { tail -40 $OUT/tests.log; exit 3; }
for r in 1 2; do
  tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
  echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
  HOPPER_BENCH_NORM_DUMP=1 HOPPER_BENCH_ROWS="BERT-large" HOPPER_BENCH_OUT=$tmp timeout 150 $b/bin/hopper >> $OUT/bench.log 2>&1; echo rc=$?
  cp $tmp/hopper-*.csv $OUT/norm-dump-$r.csv 2>/dev/null
  grep -E "layernorm" $OUT/norm-dump-$r.csv | cut -d, -f1,6,9,11
done
echo "=== done $(date +%T)"
