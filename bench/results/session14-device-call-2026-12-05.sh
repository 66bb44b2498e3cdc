#!/usr/bin/env bash
# Device call of 2026-12-05 (session 14): the kit of 3f95781 (scripts/gpu-bundle.sh; every GPU
# test binary and bin/{hopper,fused-gemm-bench,fused-gemm}, stripped) plus an f16 copy of
# all-MiniLM-L6-v2 (`fused-gemm convert-model`), packed as target/kit.txz. Runs every GPU test
# (gpu_minilm with the model), the SASS check, the Hopper benchmark with its autotuned column and
# the main benchmark's quick table. Results go straight to $OUT, so a timeout keeps what is done.
# The kit and the model do not fit one call's 64 MiB carry together: this call also carries the
# model's first 32 MB (target/mparts/model.part-a) and keeps it in target/dev-model for the
# next call (bench/results/session14-minilm-call-2026-12-05.sh) on the same warm machine.
set -uo pipefail
mkdir -p target/dev-model && cp target/mparts/model.part-a target/dev-model/ 2>/dev/null
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/device.txt
if [ -z "${BENCH_ONLY:-}" ]; then
  echo "=== tests $(date +%T)"
  FG_TEST_TIMEOUT=200 $b/run.sh > $OUT/tests.log 2>&1
  grep -E "^=== |FAILED|panicked|test result|PASSED|skipping" $OUT/tests.log
fi
echo "=== hopper bench $(date +%T)"
tmp=/tmp/o2; rm -rf $tmp; mkdir -p $tmp
HOPPER_BENCH_OUT=$tmp timeout 280 $b/bin/hopper > $OUT/hopper-bench.log 2>&1; echo rc=$?
cp $tmp/hopper-*.csv $tmp/hopper-*.md $tmp/hopper-*.png $tmp/hopper-*.json $OUT/ 2>/dev/null
grep -E "^\| " $tmp/hopper-*.md | cut -d'|' -f2-12
tail -3 $OUT/hopper-bench.log
echo "=== sass $(date +%T)"
c=$tmp/fused_gemm.sm_90a.cubin
if [ -f "$c" ]; then
  cuobjdump --dump-sass "$c" > /tmp/sm90a.sass
  awk '/Function :/ { f = $3 } f ~ /__sm90tma_/ { seen[f] = 1 } f ~ /__sm90tma_/ && /HGMMA/ { h[f]++ }
       f ~ /__sm90tma_/ && /(STL|LDL)/ { l[f]++ }
       END { for (x in seen) { n++; if (h[x] > 0) nh++; if (l[x] > 0) { nl++; print "local memory in " x ": " l[x] } }
             printf "Hopper entry points: %d, with HGMMA: %d, with local loads/stores: %d\n", n, nh, nl }' /tmp/sm90a.sass | tail -5 | tee $OUT/sass.txt
fi
echo "=== bench-quick $(date +%T)"
timeout 120 $b/bin/fused-gemm-bench --quick --out $OUT > $OUT/bench-quick.log 2>&1; echo rc=$?; tail -25 $OUT/bench-quick.log
echo "=== done $(date +%T)"
