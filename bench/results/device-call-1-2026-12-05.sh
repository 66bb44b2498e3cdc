#!/usr/bin/env bash
# Device call 1 (2026-12-05): every GPU test of the HEAD bundle except gpu_minilm, then the hopper benchmark, then the SASS check.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit1.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
git log --oneline -1
echo "=== tests $(date +%T)"
FG_TEST_TIMEOUT=200 $b/run.sh > $OUT/tests.log 2>&1; grep -E "^=== |FAILED|panicked|test result|PASSED" $OUT/tests.log
echo "=== bench $(date +%T)"
HOPPER_BENCH_OUT=$OUT timeout 200 $b/bin/hopper > $OUT/hopper-bench.log 2>&1; echo rc=$?
tail -45 $OUT/hopper-bench.log
echo "=== sass $(date +%T)"
c=$OUT/fused_gemm.sm_90a.cubin
if [ -f $c ]; then
  cuobjdump --dump-sass $c > /tmp/sm90a.sass 2>&1 || /usr/local/cuda/bin/cuobjdump --dump-sass $c > /tmp/sm90a.sass
  awk '/Function :/ { f = $3 } f ~ /__sm90tma_/ { seen[f] = 1 } f ~ /__sm90tma_/ && /HGMMA/ { h[f]++ }
       f ~ /__sm90tma_/ && /(STL|LDL)/ { l[f]++ }
       END { for (x in seen) { n++; if (h[x] > 0) nh++; if (l[x] > 0) { nl++; print "local memory in " x ": " l[x] } }
             printf "Hopper entry points: %d, with HGMMA: %d, with local loads/stores: %d\n", n, nh, nl }' /tmp/sm90a.sass | tail -15
  rm -f $c
else ls $OUT; fi
echo "=== done $(date +%T)"
