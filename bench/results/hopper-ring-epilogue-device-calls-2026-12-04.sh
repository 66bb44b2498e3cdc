# Device calls of 2026-12-04 (session 5), each run with the kit (target/kit.txz) and the scripts carried.

## target/dev-w.sh
#!/usr/bin/env bash
# Device call 1 of 2026-12-04 (session 5): the residual of a row-norm group's last tile by TMA into the ring. t8 first; then the benchmark, forced tiles with the ring residual (ring) and with every residual from global memory (global, HOPPER_BENCH_GLOBAL_RESIDUAL=1), interleaved ring/global/ring/global.
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
for r in ring1 global1 ring2 global2; do
tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
g=; [[ $r == global* ]] && g=1
echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
if [ -n "$g" ]; then export HOPPER_BENCH_GLOBAL_RESIDUAL=1; else unset HOPPER_BENCH_GLOBAL_RESIDUAL; fi
HOPPER_BENCH_OUT=$tmp timeout 110 $b/bin/hopper >> $OUT/bench.log 2>&1; echo rc=$?
cp $tmp/hopper-h200.csv $OUT/$r.csv
grep -E "layernorm|rms" $OUT/$r.csv | cut -d, -f1,2,6,9,11
done
echo "=== done $(date +%T)"

## target/dev-y.sh
#!/usr/bin/env bash
# Device call 2 of 2026-12-04 (session 5): a row-norm group's last tile reads its residual from the ring and stores C from there with TMA. t8 first; then the benchmark's forced tiles three ways, interleaved twice: ring (both), direct (ring residual, C per thread: HOPPER_BENCH_DIRECT_STORE=1), old (residual from global memory and C per thread: both overrides, 819cf11's path).
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
for r in ring1 direct1 old1 ring2 direct2 old2; do
tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
unset HOPPER_BENCH_GLOBAL_RESIDUAL HOPPER_BENCH_DIRECT_STORE
[[ $r == direct* || $r == old* ]] && export HOPPER_BENCH_DIRECT_STORE=1
[[ $r == old* ]] && export HOPPER_BENCH_GLOBAL_RESIDUAL=1
echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
HOPPER_BENCH_OUT=$tmp timeout 110 $b/bin/hopper >> $OUT/bench.log 2>&1; echo rc=$?
cp $tmp/hopper-h200.csv $OUT/$r.csv
grep -E "layernorm|rms" $OUT/$r.csv | cut -d, -f1,6,9,11
done
echo "=== done $(date +%T)"

## target/dev-z.sh
#!/usr/bin/env bash
# Device call 3 of 2026-12-04 (session 5): the final kit (ring epilogue without the spill, planner picks the groups). t8; then the benchmark twice each way, interleaved: final (defaults) and old (forced tiles with the residual from global memory and C per thread: 819cf11's group path).
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
for r in final1 old1 final2 old2; do
tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
unset HOPPER_BENCH_GLOBAL_RESIDUAL HOPPER_BENCH_DIRECT_STORE
[[ $r == old* ]] && export HOPPER_BENCH_DIRECT_STORE=1 HOPPER_BENCH_GLOBAL_RESIDUAL=1
echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
HOPPER_BENCH_OUT=$tmp timeout 110 $b/bin/hopper >> $OUT/bench.log 2>&1; echo rc=$?
cp $tmp/hopper-h200.csv $OUT/$r.csv
[[ $r == final1 ]] && cp $tmp/hopper-h200.md $tmp/hopper-h200.png $OUT/ 2>/dev/null
grep -E "layernorm|rms" $OUT/$r.csv | cut -d, -f1,6,8,9,11
done
echo "=== done $(date +%T)"

## target/dev-x.sh
#!/usr/bin/env bash
# Device call 2 of 2026-12-04 (session 5): all GPU tests of the kit.
set -uo pipefail
work=/tmp/fg
[ -d $work/gpu-bundle ] || { rm -rf $work; mkdir -p $work; tar -C $work -xJf target/kit.txz || exit 2; }
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
echo "=== tests $(date +%T)"
FG_TEST_TIMEOUT=200 $work/gpu-bundle/run.sh > $OUT/tests.log 2>&1; grep -E "^=== |FAILED|panicked|test result|PASSED" $OUT/tests.log
echo "=== done $(date +%T)"
