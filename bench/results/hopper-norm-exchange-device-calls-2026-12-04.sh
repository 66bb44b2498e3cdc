# ---- target/dev-p.sh
#!/usr/bin/env bash
# Device call A of 2026-12-04 (session 3): row norms over several tiles exchange statistics through global memory under a cooperative launch. t8 (both exchanges) first; then the benchmark, new against c8fb1ca, interleaved.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
tar -C $work -xJf target/c8-hopper.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
echo "=== t8 $(date +%T)"
timeout 200 $b/tests/gpu_hopper --test-threads=1 --nocapture t8_ > $OUT/t8.log 2>&1; rc=$?; echo rc=$rc
grep -E "test result|panicked|FAILED|constant rows" $OUT/t8.log | head -20
grep -E "norm (Cluster|Global)" $OUT/t8.log | awk '{print $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14}' | head -70
[ $rc = 0 ] || exit 3
for r in new1 old1 new2 old2; do
tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
bin=$b/bin/hopper; [[ $r == old* ]] && bin=$work/old/hopper
echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
HOPPER_BENCH_OUT=$tmp timeout 110 $bin >> $OUT/bench.log 2>&1; echo rc=$?
cp $tmp/hopper-h200.csv $OUT/$r.csv
grep -E "^\| " $OUT/bench.log | tail -19 | cut -d'|' -f2-9 | grep -E "layernorm|swiglu"
done
echo "=== done $(date +%T)"
# ---- target/dev-r.sh
#!/usr/bin/env bash
# Device call C of 2026-12-04 (session 3): ncu of the 128x256 cooperative LayerNorm kernel with the global statistics exchange at BERT-large attn out (4096x1024x1024) and FFN down: details, then per-SASS-instruction warp-state samples.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz gpu-bundle/bin/hopper || exit 2
bin=$work/gpu-bundle/bin/hopper
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
for row in "attn out" "FFN down"; do
tag=${row// /_}
echo "=== ncu details $row $(date +%T)"
HOPPER_BENCH_ROWS="BERT-large $row" timeout 200 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section InstructionStats \
  -k regex:'h_bias_residual_layer_norm__sm90tma.*t128x256' --launch-count 1 --csv --page details $bin > $OUT/ncu-$tag.csv 2> $OUT/ncu-$tag.err; echo rc=$?
grep -E "\"Duration\"|Stall|Warp Cycles Per Issued|Registers Per|Memory Throughput|DRAM Throughput|Compute \(SM\)|Executed Instructions\"|Grid Size|Block Limit|Achieved Occ" $OUT/ncu-$tag.csv | awk -F'","' '{print $(NF-2)" | "$(NF-1)" | "$NF}' | head -40
done
echo "=== ncu source attn out $(date +%T)"
HOPPER_BENCH_ROWS="BERT-large attn out" timeout 250 ncu --clock-control none --section WarpStateStats --section SourceCounters \
  -k regex:'h_bias_residual_layer_norm__sm90tma.*t128x256' --launch-count 1 --csv --page source --print-source sass $bin > $OUT/ncu-src.csv 2> $OUT/ncu-src.err; echo rc=$?
wc -l $OUT/ncu-src.csv; xz -9 $OUT/ncu-src.csv
echo "=== done $(date +%T)"
# ---- target/dev-s.sh
#!/usr/bin/env bash
# Device call D of 2026-12-04 (session 3): as call A (dev-p.sh), with the row-norm epilogue looping over its chunks (rotation) instead of writing them out. t8 first; then the benchmark against c8fb1ca, interleaved.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
tar -C $work -xJf target/c8-hopper.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
echo "=== t8 $(date +%T)"
timeout 200 $b/tests/gpu_hopper --test-threads=1 --nocapture t8_ > $OUT/t8.log 2>&1; rc=$?; echo rc=$rc
grep -E "test result|panicked|FAILED|constant rows" $OUT/t8.log | head -20
grep -E "norm (Cluster|Global)" $OUT/t8.log | awk '{print $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14}' | head -70
[ $rc = 0 ] || exit 3
for r in new1 old1 new2 old2; do
tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
bin=$b/bin/hopper; [[ $r == old* ]] && bin=$work/old/hopper
echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
HOPPER_BENCH_OUT=$tmp timeout 110 $bin >> $OUT/bench.log 2>&1; echo rc=$?
cp $tmp/hopper-h200.csv $OUT/$r.csv
grep -E "^\| " $OUT/bench.log | tail -19 | cut -d'|' -f2-9 | grep -E "layernorm|swiglu"
done
echo "=== done $(date +%T)"
# ---- target/dev-t.sh
#!/usr/bin/env bash
# Device call E of 2026-12-04 (session 3): the final kit (98547a8: global exchange, model fit). The benchmark against c8fb1ca, interleaved; then all GPU tests.
set -uo pipefail
work=/tmp/fg; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
tar -C $work -xJf target/c8-hopper.txz || exit 2
b=$work/gpu-bundle
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for r in new1 old1 new2 old2; do
tmp=/tmp/o-$r; rm -rf $tmp; mkdir -p $tmp
bin=$b/bin/hopper; [[ $r == old* ]] && bin=$work/old/hopper
echo "=== bench $r $(date +%T)" | tee -a $OUT/bench.log
HOPPER_BENCH_OUT=$tmp timeout 110 $bin >> $OUT/bench.log 2>&1; echo rc=$?
cp $tmp/hopper-h200.csv $OUT/$r.csv
grep -E "^\| " $OUT/bench.log | tail -19 | cut -d'|' -f2-9 | grep -E "layernorm|gelu"
done
echo "=== tests $(date +%T)"
FG_TEST_TIMEOUT=200 $b/run.sh > $OUT/tests.log 2>&1; grep -E "^=== |FAILED|panicked|test result|PASSED" $OUT/tests.log
echo "=== done $(date +%T)"
