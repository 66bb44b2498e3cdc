#!/usr/bin/env bash
# Device call of 2026-12-05 (session 12), on an NVIDIA H100 80GB HBM3 (no H200 could be started):
# 036693f's kit (scripts/gpu-bundle.sh, then the GPU test binaries, bin/hopper and
# bin/fused-gemm-bench stripped and packed as target/kit.txz). All GPU tests, the Hopper benchmark
# twice, the SASS check with cuobjdump, the MiniLM tests (skipped: the model did not fit the 64 MiB
# carry next to the kit) and the main benchmark's quick table. Results: gpu-tests-h100-2026-12-05.log,
# hopper-h100-2026-12-05{.md,.png,-run1.csv,-run2.csv}, 2026-12-05T115044Z-bf16-nvidia-h100-80gb-hbm3.*
set -uo pipefail
R=$OUT; OUT=/tmp/res; rm -rf $OUT; mkdir -p $OUT
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
echo "=== tests $(date +%T)"
FG_TEST_TIMEOUT=240 $b/run.sh > $OUT/tests.log 2>&1; grep -E "^=== |FAILED|panicked|test result|PASSED" $OUT/tests.log
for r in 1 2; do
  tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
  echo "=== hopper bench $r $(date +%T)"
  HOPPER_BENCH_OUT=$tmp timeout 150 $b/bin/hopper > $OUT/hopper-bench$r.log 2>&1; echo rc=$?
  cp $tmp/hopper-h200.csv $OUT/hopper-h200-$r.csv 2>/dev/null
  [ $r = 1 ] && cp $tmp/hopper-h200.md $tmp/hopper-h200.png $OUT/ 2>/dev/null
  grep -E "layernorm" $tmp/hopper-h200.md | cut -d'|' -f2-9
done
echo "=== sass $(date +%T)"
c=/tmp/o-1/fused_gemm.sm_90a.cubin
if [ -f "$c" ]; then
  cuobjdump --dump-sass "$c" > /tmp/sm90a.sass
  awk '/Function :/ { f = $3 } f ~ /__sm90tma_/ { seen[f] = 1 } f ~ /__sm90tma_/ && /HGMMA/ { h[f]++ }
       f ~ /__sm90tma_/ && /(STL|LDL)/ { l[f]++ }
       END { for (x in seen) { n++; if (h[x] > 0) nh++; if (l[x] > 0) { nl++; print "local memory in " x ": " l[x] } }
             printf "Hopper entry points: %d, with HGMMA: %d, with local loads/stores: %d\n", n, nh, nl }' /tmp/sm90a.sass | tail -5 | tee $OUT/sass.txt
  md5sum $c | tee -a $OUT/sass.txt
fi
if [ -f target/model.txz ]; then
  echo "=== minilm $(date +%T)"
  mkdir -p /tmp/model && tar -C /tmp/model -xJf target/model.txz
  d=$(dirname "$(find /tmp/model -name config.json | head -1)")
  FUSED_GEMM_MODEL_DIR=$d timeout 240 $b/tests/gpu_minilm --test-threads=1 --nocapture > $OUT/minilm-tests.log 2>&1; echo rc=$?
  grep -E "cos|FAILED|panicked|test result" $OUT/minilm-tests.log | tail -8
fi
echo "=== bench-quick $(date +%T)"
timeout 200 $b/bin/fused-gemm-bench --quick --out $OUT > $OUT/bench-quick.log 2>&1; echo rc=$?; tail -25 $OUT/bench-quick.log
echo "=== done $(date +%T)"
tar -C /tmp -cJf $R/res.tar.xz res; ls -la $R
