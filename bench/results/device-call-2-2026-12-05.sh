#!/usr/bin/env bash
# Device call 2 (2026-12-05): the touch patch (hopper-touch-constants-2026-12-04.patch) on 15efb44: bin/hopper (touch) vs bin/hopper-old (HEAD) interleaved new1/old1/new2/old2; gpu_minilm on an f16 copy of all-MiniLM-L6-v2; Nsight Compute of the 128x256 LayerNorm kernel at attn out.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit2.txz || exit 2
tar -C $work -xJf target/model.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for r in new1 old1 new2 old2; do
  tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
  bin=$b/bin/hopper; [[ $r == old* ]] && bin=$b/bin/hopper-old
  echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
  HOPPER_BENCH_OUT=$tmp timeout 110 $bin >> $OUT/bench.log 2>&1; echo rc=$?
  cp $tmp/hopper-h200.csv $OUT/$r.csv
  grep -E "layernorm" $OUT/$r.csv | cut -d, -f1,2,6,9,11
done
echo "=== gpu_minilm $(date +%T)"
FUSED_GEMM_MODEL_DIR=$work/model timeout 200 $b/tests/gpu_minilm --test-threads=1 --nocapture > $OUT/minilm-tests.log 2>&1; echo rc=$?
grep -E "cos|FAILED|panicked|test result" $OUT/minilm-tests.log | tail -25
echo "=== ncu $(date +%T)"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
HOPPER_BENCH_ROWS="attn out" HOPPER_BENCH_ONCE=1 HOPPER_BENCH_OUT=/tmp/o-ncu timeout 150 $ncu --set full -k regex:layer_norm.*t128x256 -c 1 -f -o /tmp/prof $b/bin/hopper > /tmp/ncu-run.log 2>&1; echo rc=$?
$ncu --import /tmp/prof.ncu-rep --page details --csv > $OUT/ncu-details.csv 2>&1
grep -E '"Duration"|"Executed Instructions"|Warp Cycles Per Issued' $OUT/ncu-details.csv | cut -d, -f13-16
echo "=== done $(date +%T)"
