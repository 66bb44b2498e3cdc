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
#   SANITIZE_JOBS      runs at once (default 1)
#   SANITIZE_BINS      test binaries to run, in this order (default every tests/gpu_*, by
#                      name); longest first keeps a time-limited sweep from ending on a long run
# A finding is an error of memcheck, synccheck or initcheck, or a racecheck error or warning.
# The stress binary runs smaller under the tools (FUSED_GEMM_FUZZ_CASES 40 and
# FUSED_GEMM_STRESS_OPS 40 unless set: 46 s under memcheck on an H100), and so do the other
# GPU tests: FUSED_GEMM_SANITIZE=1 (unless set) gives them sanitizer-sized shapes chosen to
# keep their paths, as racecheck instruments every shared-memory access
# (fused_gemm::host::testing::sanitizing). Tests a tool
# cannot run are listed in sanitize.exclude beside this script, one per line:
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
export FUSED_GEMM_FUZZ_CASES="${FUSED_GEMM_FUZZ_CASES:-40}"
export FUSED_GEMM_STRESS_OPS="${FUSED_GEMM_STRESS_OPS:-40}"
export FUSED_GEMM_SANITIZE="${FUSED_GEMM_SANITIZE:-1}"
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [ ! -x "$sanitizer" ]; then
    echo "sanitize.sh: compute-sanitizer not found (PATH or /usr/local/cuda/bin)" >&2
    exit 2
fi
exclude_file="$here/sanitize.exclude"
[ -f "$exclude_file" ] || exclude_file="$bundle/sanitize.exclude"
echo "sanitize.sh: $("$sanitizer" --version | tail -1); logs in $logs"

# One (tool, binary) run: its log, and a row file whose first word is "ok" or "finding".
run_one() {
    local tool="$1" bin="$2" name skips=() extra log status errors hazards n unchecked tests verdict
    name="$(basename "$bin")"
    if [ -f "$exclude_file" ]; then
        while read -r t b test reason; do
            [ "$t" = "$tool" ] && [ "$b" = "$name" ] || continue
            skips+=(--skip "$test")
            echo "$tool $name $test: $reason" >> "$logs/excluded.txt"
        done < <(grep -v '^\s*#' "$exclude_file" | grep -v '^\s*$')
    fi
    log="$logs/$tool-$name.log"
    # The error-path tests provoke API errors on purpose (a capture that synchronizes, a missing
    # entry point) and assert the typed error the library returns; a finding is a kernel fault.
    extra=(--report-api-errors no)
    [ "$tool" = racecheck ] && extra+=(--racecheck-report hazard)
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
    # Launches the tool could not instrument (it ran out of device memory beside other runs)
    # are counted in its error summary but are not kernel findings; say so, so that the run
    # is repeated with fewer SANITIZE_JOBS rather than debugged.
    unchecked="$(grep -c 'Internal Sanitizer Error' "$log")"
    tests="$(grep -E '^test result: ' "$log" | tail -1 | sed -E 's/^test result: //')"
    if [ "$status" = 124 ]; then
        verdict="finding did not finish in ${SANITIZE_TIMEOUT:-1800} s"
    elif [ "$status" = 137 ] || [ "$status" = 9 ]; then
        verdict="finding killed (exit status $status; host memory?), fewer SANITIZE_JOBS"
    elif grep -q "process didn't terminate successfully" "$log"; then
        verdict="finding the test process crashed (exit status $status)"
    elif [ "$unchecked" -gt 0 ] && [ "$n" -le "$unchecked" ] && [ "$status" = 0 ]; then
        verdict="finding $unchecked launch(es) unchecked (tool out of memory), fewer SANITIZE_JOBS"
    elif [ "$n" -gt 0 ] || [ "$status" != 0 ]; then
        verdict="finding $n finding(s), exit status $status"
    elif [ -z "$tests" ]; then
        verdict="finding no test result: the binary did not finish"
    else
        verdict="ok clean"
    fi
    printf '%s %-10s %-20s %-45s %s\n' "${verdict%% *}" "$tool" "$name" "${verdict#* }" \
        "${tests:-no test result}" > "$logs/$tool-$name.row"
    cut -d' ' -f2- "$logs/$tool-$name.row"
}

# SANITIZE_JOBS runs several at once: the tools' slowdown is mostly per launch, so one GPU
# serves several instrumented processes. But each tool reserves device memory of its own, and
# racecheck keeps host memory for every CTA launched until a test ends (tens of GB for one
# test at sanitizer-sized shapes). On an 80 GB H100 with 128 GB of host memory, five at once
# (two racecheck) left synccheck launches unchecked ("Unable to allocate enough memory") and
# got a racecheck run killed; both count as findings here. So run racecheck alone
# (SANITIZE_TOOLS=racecheck SANITIZE_JOBS=1) and the other three tools fewer at a time.
jobs="${SANITIZE_JOBS:-1}"
rm -f "$logs"/*.row "$logs/excluded.txt"
pairs=()
if [ -n "${SANITIZE_BINS:-}" ]; then
    bins=()
    for name in $SANITIZE_BINS; do
        if [ ! -x "$bundle/tests/$name" ]; then
            echo "sanitize.sh: no test binary $bundle/tests/$name" >&2
            exit 2
        fi
        bins+=("$bundle/tests/$name")
    done
else
    bins=("$bundle"/tests/gpu_*)
fi
for tool in $tools; do
    for bin in "${bins[@]}"; do
        pairs+=("$tool $bin")
    done
done
running=0
for pair in "${pairs[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    # shellcheck disable=SC2086
    run_one $pair &
    running=$((running + 1))
done
wait

findings=0
rows=()
for pair in "${pairs[@]}"; do
    read -r tool bin <<< "$pair"
    row="$(cat "$logs/$tool-$(basename "$bin").row")"
    [ "${row%% *}" = ok ] || findings=$((findings + 1))
    rows+=("${row#* }")
done
excluded=()
[ -f "$logs/excluded.txt" ] && mapfile -t excluded < "$logs/excluded.txt"

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
