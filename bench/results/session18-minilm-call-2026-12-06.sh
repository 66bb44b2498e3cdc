#!/usr/bin/env bash
# Fourth device call of 2026-12-06 (session 18), on the machine the third call
# (session18-tests-call-2026-12-06.sh) left warm: gpu_minilm of the fix from /tmp/fg3 on the
# f16 all-MiniLM-L6-v2, joined from the third call's 32 MB (target/dev-model/model.part-a) and
# this call's rest (target/mparts/model.part-b), md5 checked.
set -uo pipefail
t=/tmp/fg3/gpu-bundle/tests/gpu_minilm
[ -x $t ] || { echo "the third call's kit is gone"; exit 2; }
m=/tmp/fg3/model; rm -rf $m; mkdir -p $m
cat target/dev-model/model.part-a target/mparts/model.part-b > $m/model.safetensors || exit 3
cp target/dev-model/config.json target/dev-model/tokenizer.json $m/
md5sum $m/model.safetensors | tee $OUT/model-md5.txt
grep -q d4de54caa8f3eb97338092ed74db1b8c $OUT/model-md5.txt || { echo "model md5 differs"; exit 4; }
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
export FUSED_GEMM_MODEL_DIR=$m
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 $t --test-threads=1 --nocapture > $OUT/minilm.log 2>&1; echo rc=$?
grep -E "FAILED|panicked|test result|skipping|cos|^test " $OUT/minilm.log | head -40
