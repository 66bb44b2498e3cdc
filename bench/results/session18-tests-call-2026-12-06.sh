#!/usr/bin/env bash
# Third device call of 2026-12-06 (session 18): every GPU test of the fix (tail_fixup's
# barriers aligned again, thread 0's arrival predicated asm). Kit: scripts/gpu-bundle.sh of the
# working tree, every test binary stripped, as target/kit.txz. With it the first 32 MB of the
# f16 all-MiniLM-L6-v2 written by `fused-gemm convert-model` (target/mparts/model.part-a), its
# config and tokenizer, kept in target/dev-model for the fourth call
# (session18-minilm-call-2026-12-06.sh), which runs gpu_minilm from this call's /tmp/fg3 with
# the whole model: kit, model and working tree do not fit one call's 64 MiB.
set -uo pipefail
mkdir -p target/dev-model && cp target/mparts/model.part-a target/mparts/config.json \
  target/mparts/tokenizer.json target/dev-model/
work=/tmp/fg3; rm -rf $work; mkdir -p $work
o=/tmp/fg3-out; rm -rf $o; mkdir -p $o
tar -C $work -xJf target/kit.txz || exit 2
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $o/device.txt
FG_TEST_TIMEOUT=200 $work/gpu-bundle/run.sh > $o/tests.log 2>&1
grep -E "^=== |FAILED|panicked|test result|PASSED" $o/tests.log
tar -C $o -cJf $OUT/tests.txz .
