#!/usr/bin/env bash
# Device call of 2026-12-04 (session 7): row-reduction cooperative kernels touch the constant bank in every warp at kernel start (M, K, group_m). t8 first; then bin/hopper (new) and bin/hopper-old (bdbf201) interleaved new1/old1/new2/old2; then Nsight Compute of the 128x256 LayerNorm group kernel at attn out; then all GPU tests.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
echo "=== t8 $(date +%T)"
timeout 200 $b/tests/gpu_hopper --test-threads=1 --nocapture t8_ > $OUT/t8.log 2>&1; rc=$?; echo rc=$rc
grep -E "test result|panicked|FAILED" $OUT/t8.log | head -20
[ $rc = 0 ] || exit 3
for r in new1 old1 new2 old2; do
tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
bin=$b/bin/hopper; [[ $r == old* ]] && bin=$b/bin/hopper-old
echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
HOPPER_BENCH_OUT=$tmp timeout 110 $bin >> $OUT/bench.log 2>&1; echo rc=$?
cp $tmp/hopper-h200.csv $OUT/$r.csv
[[ $r == new1 ]] && cp $tmp/hopper-h200.md $tmp/hopper-h200.png $OUT/ 2>/dev/null
grep -E "layernorm|attn out" $OUT/$r.csv | cut -d, -f1,2,6,9
done
echo "=== ncu $(date +%T)"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
HOPPER_BENCH_ROWS="attn out" HOPPER_BENCH_ONCE=1 HOPPER_BENCH_OUT=/tmp/o-ncu timeout 150 $ncu --set full -k regex:layer_norm.*t128x256 -c 1 -f -o /tmp/prof $b/bin/hopper > $OUT/ncu-run.log 2>&1; echo rc=$?
$ncu --import /tmp/prof.ncu-rep --page details --csv > $OUT/ncu-details.csv 2>&1
$ncu --import /tmp/prof.ncu-rep --page source --csv --print-source sass > $OUT/ncu-sampling.csv 2>&1
xz -9 $OUT/ncu-sampling.csv
grep -E '"Duration"|"Executed Instructions"|Warp Cycles Per Issued' $OUT/ncu-details.csv | cut -d, -f13-16
echo "=== tests $(date +%T)"
FG_TEST_TIMEOUT=200 $b/run.sh > $OUT/tests.log 2>&1; grep -E "^=== |FAILED|panicked|test result|PASSED" $OUT/tests.log
echo "=== done $(date +%T)"
