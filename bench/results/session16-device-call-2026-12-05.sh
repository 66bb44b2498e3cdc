#!/usr/bin/env bash
# Session 16 device call 1 (2026-12-05): Overrides::norm_dump's first GPU run, on the kit of
# 489567d (scripts/gpu-bundle.sh, then /work/scratch-style kit: every GPU test binary but
# gpu_minilm, bin/{hopper,fused-gemm-bench,fused-gemm}, stripped, as target/kit.txz, plus
# old/hopper, the benchmark of 32ced56, the last commit before the chunked epilogue).
# 1. gpu_hopper (t15: norm_dump against the register path and the f64 reference; t8, t9: the
#    default path, meant unchanged), then every other GPU test binary.
# 2. The BERT-large rows, alternating: new with HOPPER_BENCH_NORM_DUMP=1 (forced tiles run the
#    chunked epilogue, "ours" the default path), then 32ced56's benchmark; twice.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/device.txt
echo "=== gpu_hopper $(date +%T)"
timeout 240 $b/tests/gpu_hopper --test-threads=1 --nocapture > $OUT/hopper-tests.log 2>&1; rc=$?; echo rc=$rc
grep -E "^test |test result|panicked|norm_dump" $OUT/hopper-tests.log | head -40
[ $rc = 0 ] || { tail -60 $OUT/hopper-tests.log; }
for r in 1 2; do
  for v in new old; do
    tmp=/tmp/o-$v-$r; rm -rf $tmp; mkdir -p $tmp
    bin=$b/bin/hopper; [ $v = old ] && bin=$work/old/hopper
    echo "=== bench $v $r $(date +%T)" | tee -a $OUT/bench.log
    HOPPER_BENCH_NORM_DUMP=1 HOPPER_BENCH_ROWS="BERT-large" HOPPER_BENCH_OUT=$tmp timeout 150 $bin >> $OUT/bench.log 2>&1; echo rc=$?
    cp $tmp/hopper-*.csv $OUT/bert-$v-$r.csv 2>/dev/null
    grep -E "layernorm" $OUT/bert-$v-$r.csv | cut -d, -f1-12
  done
done
echo "=== other tests $(date +%T)"
for t in $b/tests/*; do
  n=$(basename $t); [ $n = gpu_hopper ] && continue
  timeout 200 $t --test-threads=1 > $OUT/$n.log 2>&1; echo "$n rc=$? $(grep 'test result' $OUT/$n.log)"
done 2>&1 | tee $OUT/other-tests.txt
echo "=== done $(date +%T)"
