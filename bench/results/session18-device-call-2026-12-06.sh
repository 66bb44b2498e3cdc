#!/usr/bin/env bash
# Device call of 2026-12-06 (session 18): the final code of issue 9 (HEAD) on one machine.
# Kit: scripts/gpu-bundle.sh of HEAD, then every GPU test binary and bin/{hopper,fused-gemm-bench},
# stripped, as target/kit.txz; with it the first 32 MB of the f16 all-MiniLM-L6-v2 of
# `fused-gemm convert-model` (target/mparts/model.part-a), kept in target/dev-model for a later
# call; that machine was given back before one ran (the third call carried all of the model).
# Runs the Hopper benchmark (every row, the chart, the autotuned column), the SASS check and
# every GPU test (gpu_minilm skips here without the model). Logs and CSVs are packed into
# $OUT/out.txz (the tool returns at most 8 files a call).
set -uo pipefail
mkdir -p target/dev-model && cp target/mparts/model.part-a target/mparts/config.json \
  target/mparts/tokenizer.json target/dev-model/
work=/tmp/fg; rm -rf $work; mkdir -p $work
o=/tmp/fg-out; rm -rf $o; mkdir -p $o
pack() { tar -C $o -cJf $OUT/out.txz . 2>/dev/null; }
tar -C $work -xJf target/kit.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $o/device.txt

echo "=== hopper bench $(date +%T)"
HOPPER_BENCH_OUT=$o timeout 300 $b/bin/hopper > $o/hopper-bench.log 2>&1; echo rc=$?
grep -E "^\| " $o/hopper-*.md | cut -d'|' -f2-10
tail -3 $o/hopper-bench.log
pack

echo "=== sass $(date +%T)"
c=$o/fused_gemm.sm_90a.cubin
if [ -f "$c" ]; then
  cuobjdump --dump-sass "$c" > /tmp/sm90a.sass
  awk '/Function :/ { f = $3 } f ~ /__sm90tma_/ { seen[f] = 1 } f ~ /__sm90tma_/ && /HGMMA/ { h[f]++ }
       f ~ /__sm90tma_/ && /(STL|LDL)/ { l[f]++ }
       END { for (x in seen) { n++; if (h[x] > 0) nh++; if (l[x] > 0) { nl++; print "local memory in " x ": " l[x] } }
             printf "Hopper entry points: %d, with HGMMA: %d, with local loads/stores: %d\n", n, nh, nl }' /tmp/sm90a.sass | tail -5 | tee $o/sass.txt
  rm -f "$c"
fi

echo "=== tests $(date +%T)"
FG_TEST_TIMEOUT=200 $b/run.sh > $o/tests.log 2>&1
grep -E "^=== |FAILED|panicked|test result|PASSED|skipping" $o/tests.log
pack
echo "=== done $(date +%T)"
