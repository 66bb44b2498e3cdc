#!/usr/bin/env bash
# Session 17 device call 3 (2026-12-06). Kit: scripts/gpu-bundle.sh of d689282 (the chunked
# row-norm epilogue removed, named barriers non-aligned), every GPU test binary but gpu_minilm,
# bin/hopper; plus two other benchmarks: old/hopper (32ced56, before the chunked epilogue) and
# new/hopper (a7063bf with the launcher's gate lifted: norm_dump with both exchanges).
# 1. The BERT-large rows, alternating d689282, a7063bf (HOPPER_BENCH_NORM_DUMP=1: "ours"
#    the default path, the forced tiles the chunked epilogue) and 32ced56, twice.
# 2. gpu_hopper, then every other GPU test binary.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/device.txt
for r in 1 2; do
  for v in head dump old; do
    tmp=/tmp/o-$v-$r; rm -rf $tmp; mkdir -p $tmp
    bin=$b/bin/hopper; [ $v = old ] && bin=$work/old/hopper; [ $v = dump ] && bin=$work/new/hopper
    echo "=== bench $v $r $(date +%T)" | tee -a $OUT/bench.log
    HOPPER_BENCH_NORM_DUMP=1 HOPPER_BENCH_ROWS="BERT-large" HOPPER_BENCH_OUT=$tmp timeout 80 $bin >> $OUT/bench.log 2>&1; echo rc=$?
    cp $tmp/hopper-*.csv $OUT/bert-$v-$r.csv 2>/dev/null
    cut -d, -f1,2,6,9,11 $OUT/bert-$v-$r.csv | cut -c1-170
  done
done
echo "=== gpu_hopper $(date +%T)"
timeout 150 $b/tests/gpu_hopper --test-threads=1 > /tmp/gpu_hopper.log 2>&1; echo "gpu_hopper rc=$? $(grep 'test result' /tmp/gpu_hopper.log)"
grep -E "^test .*(FAILED|ok)$|panicked" /tmp/gpu_hopper.log | tail -20
echo "=== other tests $(date +%T)"
for n in gpu_rowwise gpu_runtime gpu_waves gpu_basic gpu_bert gpu_control gpu_gemm gpu_macro_kernels; do
  timeout 100 $b/tests/$n --test-threads=1 > /tmp/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep 'test result' /tmp/$n.log)"
  [ $rc = 0 ] || grep -E "FAILED|panicked|^test " /tmp/$n.log | tail -8
done 2>&1 | tee $OUT/other-tests.txt
echo "=== done $(date +%T)"
