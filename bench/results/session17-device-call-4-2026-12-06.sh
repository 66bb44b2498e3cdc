#!/usr/bin/env bash
# Session 17 device call 4 (2026-12-06). Kit: gpu_hopper and bin/hopper of 5303a3e (aligned
# bar.sync on the hot paths again, barrier.sync only after thread 0's branches), plus
# old/hopper (32ced56) and head/hopper (d689282: every named barrier non-aligned).
# 1. The BERT-large rows, alternating 5303a3e, d689282 and 32ced56, twice.
# 2. gpu_hopper.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/device.txt
for r in 1 2; do
  for v in new head old; do
    tmp=/tmp/o-$v-$r; rm -rf $tmp; mkdir -p $tmp
    bin=$b/bin/hopper; [ $v = old ] && bin=$work/old/hopper; [ $v = head ] && bin=$work/head/hopper
    echo "=== bench $v $r $(date +%T)" | tee -a $OUT/bench.log
    HOPPER_BENCH_ROWS="BERT-large" HOPPER_BENCH_OUT=$tmp timeout 80 $bin >> $OUT/bench.log 2>&1; echo rc=$?
    cp $tmp/hopper-*.csv $OUT/bert-$v-$r.csv 2>/dev/null
    cut -d, -f1,2,6,9,11 $OUT/bert-$v-$r.csv | cut -c1-170
  done
done
echo "=== gpu_hopper $(date +%T)"
timeout 150 $b/tests/gpu_hopper --test-threads=1 > /tmp/gpu_hopper.log 2>&1; echo "gpu_hopper rc=$? $(grep 'test result' /tmp/gpu_hopper.log)"
grep -E "^test .*(FAILED|ok)$|panicked" /tmp/gpu_hopper.log | tail -20
echo "=== done $(date +%T)"
