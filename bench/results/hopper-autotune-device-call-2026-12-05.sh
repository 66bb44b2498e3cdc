#!/usr/bin/env bash
# Device call of 2026-12-05 (session 13): the kit of this session's HEAD (scripts/gpu-bundle.sh,
# then the GPU test binaries, bin/hopper and bin/fused-gemm-bench stripped and packed as
# target/kit.txz). All GPU tests (gpu_hopper's t14 checks the autotuner), the Hopper benchmark
# with its autotuned column, the SASS check with cuobjdump, and the main benchmark's quick table.
# With HOPPER_ONLY=1 only gpu_hopper's tests and the Hopper benchmark run.
set -uo pipefail
R=$OUT; OUT=/tmp/res; rm -rf $OUT; mkdir -p $OUT
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/device.txt
echo "=== tests $(date +%T)"
if [ -z "${HOPPER_ONLY:-}" ]; then
  FG_TEST_TIMEOUT=240 $b/run.sh > $OUT/tests.log 2>&1
else
  timeout 240 $b/tests/gpu_hopper --test-threads=1 --nocapture > $OUT/tests.log 2>&1
fi
grep -E "^=== |FAILED|panicked|test result|PASSED|tuned:|timed:" $OUT/tests.log
tmp=/tmp/o; rm -rf $tmp; mkdir -p $tmp
echo "=== hopper bench $(date +%T)"
HOPPER_BENCH_OUT=$tmp timeout 300 $b/bin/hopper > $OUT/hopper-bench.log 2>&1; echo rc=$?
cp $tmp/hopper-*.csv $tmp/hopper-*.md $tmp/hopper-*.png $tmp/hopper-*.json $OUT/ 2>/dev/null
grep -E "^\| " $tmp/hopper-*.md | cut -d'|' -f2-12
tail -3 $OUT/hopper-bench.log
if [ -z "${HOPPER_ONLY:-}" ]; then
  echo "=== sass $(date +%T)"
  c=$tmp/fused_gemm.sm_90a.cubin
  if [ -f "$c" ]; then
    cuobjdump --dump-sass "$c" > /tmp/sm90a.sass
    awk '/Function :/ { f = $3 } f ~ /__sm90tma_/ { seen[f] = 1 } f ~ /__sm90tma_/ && /HGMMA/ { h[f]++ }
         f ~ /__sm90tma_/ && /(STL|LDL)/ { l[f]++ }
         END { for (x in seen) { n++; if (h[x] > 0) nh++; if (l[x] > 0) { nl++; print "local memory in " x ": " l[x] } }
               printf "Hopper entry points: %d, with HGMMA: %d, with local loads/stores: %d\n", n, nh, nl }' /tmp/sm90a.sass | tail -5 | tee $OUT/sass.txt
    md5sum $c | tee -a $OUT/sass.txt
  fi
  echo "=== bench-quick $(date +%T)"
  timeout 200 $b/bin/fused-gemm-bench --quick --out $OUT > $OUT/bench-quick.log 2>&1; echo rc=$?; tail -25 $OUT/bench-quick.log
fi
echo "=== done $(date +%T)"
tar -C /tmp -cJf $R/res.tar.xz res; ls -la $R
