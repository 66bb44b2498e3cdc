# Device calls of 2026-12-04 (session 4), run as `bash target/dev-u.sh` and `bash target/dev-v.sh` with the kit (target/kit.txz: scripts/gpu-bundle.sh repacked to run.sh, bin/hopper and the 9 GPU test binaries) and 9b2c451's bin/hopper (target/k98-hopper.txz) carried.

## target/dev-u.sh
#!/usr/bin/env bash
# Device call 1 of 2026-12-04 (session 4): the row-norm group epilogue's apply pass as one loop. t8 first; then the benchmark against 9b2c451's (98547a8's kernels), interleaved new/old/new/old.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
tar -C $work -xJf target/k98-hopper.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
echo "=== t8 $(date +%T)"
timeout 200 $b/tests/gpu_hopper --test-threads=1 --nocapture t8_ > $OUT/t8.log 2>&1; rc=$?; echo rc=$rc
grep -E "test result|panicked|FAILED" $OUT/t8.log | head -20
[ $rc = 0 ] || exit 3
for r in new1 old1 new2 old2; do
tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
bin=$b/bin/hopper; [[ $r == old* ]] && bin=$work/old/hopper
echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
HOPPER_BENCH_OUT=$tmp timeout 110 $bin >> $OUT/bench.log 2>&1; echo rc=$?
cp $tmp/hopper-h200.csv $OUT/$r.csv
grep -E "layernorm|rms" $OUT/$r.csv | cut -d, -f1,2,6,9,11
done
echo "=== done $(date +%T)"

## target/dev-v.sh
#!/usr/bin/env bash
# Device call 2 of 2026-12-04 (session 4): all GPU tests of the kit.
set -uo pipefail
work=/tmp/fg
[ -d $work/gpu-bundle ] || { rm -rf $work; mkdir -p $work; tar -C $work -xJf target/kit.txz || exit 2; }
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
echo "=== tests $(date +%T)"
FG_TEST_TIMEOUT=200 $work/gpu-bundle/run.sh > $OUT/tests.log 2>&1; grep -E "^=== |FAILED|panicked|test result|PASSED" $OUT/tests.log
echo "=== done $(date +%T)"
