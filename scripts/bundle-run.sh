#!/usr/bin/env bash
# Runs every test binary of the bundle (built by scripts/gpu-bundle.sh) and prints a summary.
# Test output is not captured, so GPU tests' error measurements appear in the log.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
fail=0
for t in "$here"/tests/*; do
    echo "=== $(basename "$t")"
    # A hung kernel must not eat the session: each binary gets FG_TEST_TIMEOUT seconds.
    if ! timeout "${FG_TEST_TIMEOUT:-300}" "$t" --test-threads=1 --nocapture "$@"; then
        echo "FAILED: $(basename "$t")"
        fail=1
    fi
done
[ $fail = 0 ] && echo "ALL GPU BUNDLE TESTS PASSED" || echo "SOME GPU BUNDLE TESTS FAILED"
exit $fail
