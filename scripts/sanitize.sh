#!/usr/bin/env bash
# Runs every GPU test binary of a bundle (scripts/gpu-bundle.sh) under compute-sanitizer's
# memcheck, racecheck, synccheck and initcheck, prints one summary and fails on any finding,
# on a test that fails under a tool, or on a run that does not finish.
#
#   sanitize.sh [BUNDLE_DIR] [TEST_FILTER]
#
# BUNDLE_DIR defaults to the folder holding this script (the bundle copies it there). Env:
#   SANITIZE_TOOLS     tools to run (default "memcheck racecheck synccheck initcheck")
#   SANITIZE_TIMEOUT   seconds per binary and tool (default 1800)
#   SANITIZE_LOGS      folder for the full logs (default a temporary one, printed)
# A finding is an error of memcheck, synccheck or initcheck, or a racecheck error or warning.
# The stress binary runs smaller under the tools (FUSED_GEMM_FUZZ_CASES 100,
# FUSED_GEMM_STRESS_OPS 400, unless set). Tests a tool cannot run are listed in
# sanitize.exclude beside this script, one per line:
#   tool binary test-name reason...
# and are skipped (libtest's --skip, which matches substrings of test names) and printed with
# their reason in the summary.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bundle="${1:-$here}"
filter="${2:-}"
tools="${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}"
logs="${SANITIZE_LOGS:-$(mktemp -d)}"
mkdir -p "$logs"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
export FUSED_GEMM_REQUIRE_GPU=1
export FUSED_GEMM_FUZZ_CASES="${FUSED_GEMM_FUZZ_CASES:-100}"
export FUSED_GEMM_STRESS_OPS="${FUSED_GEMM_STRESS_OPS:-400}"
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [ ! -x "$sanitizer" ]; then
    echo "sanitize.sh: compute-sanitizer not found (PATH or /usr/local/cuda/bin)" >&2
    exit 2
fi
exclude_file="$here/sanitize.exclude"
[ -f "$exclude_file" ] || exclude_file="$bundle/sanitize.exclude"
echo "sanitize.sh: $("$sanitizer" --version | tail -1); logs in $logs"

findings=0
rows=()
excluded=()
for tool in $tools; do
    for bin in "$bundle"/tests/gpu_*; do
        name="$(basename "$bin")"
        skips=()
        if [ -f "$exclude_file" ]; then
            while read -r t b test reason; do
                [ "$t" = "$tool" ] && [ "$b" = "$name" ] || continue
                skips+=(--skip "$test")
                excluded+=("$tool $name $test: $reason")
            done < <(grep -v '^\s*#' "$exclude_file" | grep -v '^\s*$')
        fi
        log="$logs/$tool-$name.log"
        extra=()
        [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
        # shellcheck disable=SC2086
        timeout "${SANITIZE_TIMEOUT:-1800}" "$sanitizer" --tool "$tool" ${extra[@]+"${extra[@]}"} \
            --print-limit 20 "$bin" --test-threads=1 ${filter:+"$filter"} ${skips[@]+"${skips[@]}"} \
            > "$log" 2>&1
        status=$?
        # memcheck, synccheck, initcheck: "ERROR SUMMARY: N errors" (a second line past the
        # print limit says how many were not printed); racecheck: "RACECHECK SUMMARY: N hazards
        # displayed (E errors, W warnings)".
        errors="$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) errors?$/\1/p' "$log" | tail -1)"
        hazards="$(sed -nE 's/.*RACECHECK SUMMARY: .*\(([0-9]+) errors?, ([0-9]+) warnings?\).*/\1 + \2/p' "$log" | tail -1)"
        n=$(( ${errors:-0} + ${hazards:-0} ))
        tests="$(grep -E '^test result: ' "$log" | tail -1 | sed -E 's/^test result: //')"
        if [ "$status" = 124 ]; then
            verdict="did not finish in ${SANITIZE_TIMEOUT:-1800} s"
            findings=$((findings + 1))
        elif [ "$n" -gt 0 ] || [ "$status" != 0 ]; then
            verdict="$n finding(s), exit status $status"
            findings=$((findings + 1))
        else
            verdict="clean"
        fi
        rows+=("$(printf '%-10s %-20s %-45s %s' "$tool" "$name" "$verdict" "${tests:-no test result}")")
        echo "${rows[${#rows[@]}-1]}"
    done
done

echo
echo "=== sanitizer summary ($(date -u +%FT%TZ))"
printf '%s\n' "${rows[@]}"
if [ ${#excluded[@]} -gt 0 ]; then
    echo "--- excluded"
    printf '%s\n' "${excluded[@]}"
fi
if [ "$findings" -gt 0 ]; then
    echo "SANITIZERS FOUND PROBLEMS in $findings run(s); logs in $logs"
    exit 1
fi
echo "NO SANITIZER FINDINGS; logs in $logs"
