#!/usr/bin/env bash
# The GPU bundle's test runner (copied to gpu-bundle/run.sh by scripts/gpu-bundle.sh): runs every
# test binary of the bundle, then prints how many tests passed and failed in each. Arguments go
# to every binary (a test-name filter, --ignored). Test output is not captured, so GPU tests'
# error measurements appear in the log.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
# This runs on a GPU host: a GPU test that finds no GPU (or gpu_minilm no model) fails instead
# of skipping.
export FUSED_GEMM_REQUIRE_GPU=1
log="$(mktemp)"; trap 'rm -f "$log"' EXIT
fail=0 passed=0 failed=0 binaries=0 unfinished=0
summary=()
for t in "$here"/tests/*; do
    name="$(basename "$t")"
    binaries=$((binaries + 1))
    echo "=== $name"
    # A hung kernel must not stall the whole run: each binary gets FG_TEST_TIMEOUT seconds.
    timeout "${FG_TEST_TIMEOUT:-300}" "$t" --test-threads=1 --nocapture "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    # libtest's last line: "test result: ok. 11 passed; 0 failed; 0 ignored; ...".
    result="$(grep -E '^test result: ' "$log" | tail -1)"
    p="$(sed -nE 's/.* ([0-9]+) passed;.*/\1/p' <<< "$result")"
    f="$(sed -nE 's/.* ([0-9]+) failed;.*/\1/p' <<< "$result")"
    if [ -n "$p" ] && [ -n "$f" ]; then
        passed=$((passed + p)) failed=$((failed + f))
        line="$name: $p passed, $f failed"
    else
        unfinished=$((unfinished + 1))
        why="exit status $status"
        [ "$status" = 124 ] && why="timed out after ${FG_TEST_TIMEOUT:-300} s"
        line="$name: did not finish ($why)"
    fi
    if [ "$status" != 0 ]; then
        echo "FAILED: $name"
        fail=1
    fi
    summary+=("$line")
done
echo "=== summary"
printf '%s\n' "${summary[@]}"
echo "total: $passed passed, $failed failed in $binaries binaries; $unfinished did not finish"
[ $fail = 0 ] && echo "ALL GPU BUNDLE TESTS PASSED" || echo "SOME GPU BUNDLE TESTS FAILED"
exit $fail
