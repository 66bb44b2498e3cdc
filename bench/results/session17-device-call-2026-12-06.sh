#!/usr/bin/env bash
# Session 17 device call 1 (2026-12-06): the named barriers as non-aligned `barrier.sync`
# (the fix for norm_dump's hang with the global exchange). Kit: scripts/gpu-bundle.sh of a7063bf
# with 3e1a0b8's gate and t15 change undone (norm_dump with both exchanges, t15 on both), every
# GPU test binary but gpu_minilm and bin/{hopper,fused-gemm-bench,fused-gemm}, stripped, as
# target/kit.txz.
# 1. gpu_hopper, every test: t15 again covers norm_dump with both exchanges.
# 2. The BERT-large rows with HOPPER_BENCH_NORM_DUMP=1, three times: "ours" is the default
#    path, the forced tiles run the chunked epilogue, in the same rounds.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/device.txt
echo "=== gpu_hopper $(date +%T)"
timeout 330 $b/tests/gpu_hopper --test-threads=1 --nocapture > $OUT/hopper-tests.log 2>&1; rc=$?; echo rc=$rc
grep -E "^test |test result|panicked|norm_dump routes" $OUT/hopper-tests.log | cut -c1-160 | head -80
[ $rc = 0 ] || tail -40 $OUT/hopper-tests.log
for r in 1 2 3; do
  tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
  echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
  HOPPER_BENCH_NORM_DUMP=1 HOPPER_BENCH_ROWS="BERT-large" HOPPER_BENCH_OUT=$tmp timeout 80 $b/bin/hopper >> $OUT/bench.log 2>&1; echo rc=$?
  cp $tmp/hopper-*.csv $OUT/bert-$r.csv 2>/dev/null
  grep -E "layernorm" $OUT/bert-$r.csv | cut -d, -f1,2,6,9,11
done
echo "=== done $(date +%T)"
