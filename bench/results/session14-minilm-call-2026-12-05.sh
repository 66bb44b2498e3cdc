#!/usr/bin/env bash
# Second device call of 2026-12-05 (session 14), on the machine the first call
# (session14-device-call-2026-12-05.sh) left warm: gpu_minilm (target/kit2.txz, the test binary
# of 3f95781) on the f16 copy of all-MiniLM-L6-v2 written by `fused-gemm convert-model`, joined
# from the first call's 32 MB (target/dev-model/model.part-a) and this call's rest
# (target/mparts-b.tar), md5 checked.
set -uo pipefail
work=/tmp/fg2; rm -rf $work; mkdir -p $work/model
tar -C $work -xJf target/kit2.txz || exit 2
tar -C $work/model -xf target/mparts-b.tar || exit 2
cat target/dev-model/model.part-a $work/model/model.part-b > $work/model/model.safetensors || exit 3
rm $work/model/model.part-b
md5sum $work/model/model.safetensors | tee $OUT/model-md5.txt
grep -q d4de54caa8f3eb97338092ed74db1b8c $OUT/model-md5.txt || { echo "model md5 differs"; exit 4; }
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
export FUSED_GEMM_MODEL_DIR=$work/model
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
timeout 400 $work/gpu-bundle/tests/gpu_minilm --test-threads=1 --nocapture > $OUT/minilm.log 2>&1; echo rc=$?
grep -E "FAILED|panicked|test result|skipping|cosine|^test " $OUT/minilm.log | head -60
