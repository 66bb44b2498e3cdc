#!/usr/bin/env bash
# Device call of 2026-12-05 (session 14): the retained workspace growth (host::gemm::Growing).
# gpu_gemm (its new graphs_survive_workspace_growth), gpu_runtime, gpu_hopper (t14 tunes with
# shared workspaces) and gpu_waves, from target/kit.txz (scripts/gpu-bundle.sh, then these four
# test binaries stripped and packed).
set -uo pipefail
work=/tmp/fg3; rm -rf $work; mkdir -p $work
tar -C $work -xJf target/kit.txz || exit 2
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
for t in gpu_gemm gpu_runtime gpu_hopper gpu_waves; do
  echo "=== $t"
  timeout 240 $work/gpu-bundle/tests/$t --test-threads=1 --nocapture > $OUT/$t.log 2>&1 || echo "FAILED: $t"
  grep -E "FAILED|panicked|test result" $OUT/$t.log
done
grep -A8 "graphs_survive" $OUT/gpu_gemm.log
cd $OUT && tar -cJf logs.tar.xz gpu_*.log && rm gpu_*.log
