#!/usr/bin/env bash
# Runs every GPU test on a GPU machine, each with the PE count it needs, and the ring exchange
# with 1 PE, under `nvsh run -n 2` and under mpirun. Ends with one line
#   N passed, N failed, N skipped of N expected
#   scripts/gpu_test.sh [BIN_DIR]
# BIN_DIR holds what scripts/build_gpu_bins.sh made (default .gpu/bin); where cargo exists and
# BIN_DIR is missing, they are built first. NVSHMEM allows one init per process, so each test
# runs in a process (or job) of its own: tests named peN_* run under `nvsh run -n N` (one GPU
# per PE where there are enough, else all on GPU 0), the others (pe1_*) alone. MPIRUN overrides
# the mpirun command (e.g. with --allow-run-as-root).
#
# What is expected comes first: a manifest (in the log folder) of every case, from each test
# binary's `--list --ignored`. A binary that cannot list its tests (a missing library, say) is a
# failed case, as is a folder without test binaries. Each case then ends as
#   PASS  exit 0, and every process's libtest summary counts a passed test;
#   SKIP  exit 0, and the test printed a line `NVSH_TEST_SKIP: <reason>` (tests/common skip()):
#         it could not do its work on this machine. Counted apart, listed with the reason, and
#         not a failure;
#   FAIL  anything else, a case that ran no test included.
# The exit status is non-zero when a case failed, when a case of the manifest did not end as
# one of these, or when GPU_TEST_FILTER matched no case.
# GPU_TEST_FILTER limits the cases to names containing it, GPU_TEST_EXCLUDE leaves out names
# containing it (to split a suite over several runs; the count left out is printed);
# GPU_TEST_TIMEOUT (seconds, default 300) bounds each case. Logs go to GPU_TEST_LOG_DIR if set.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${1:-.gpu/bin}
if [ ! -d "$bin" ] && command -v cargo >/dev/null; then
    scripts/build_gpu_bins.sh "$bin" || exit 1
fi
[ -x "$bin/nvsh" ] || { echo "gpu_test.sh: no $bin/nvsh; run scripts/build_gpu_bins.sh first" >&2; exit 1; }
nvsh=$bin/nvsh
mpirun=${MPIRUN:-mpirun}
limit=${GPU_TEST_TIMEOUT:-300}
filter=${GPU_TEST_FILTER:-}
exclude=${GPU_TEST_EXCLUDE:-}
excluded=0
logdir=${GPU_TEST_LOG_DIR:-$(mktemp -d)}
mkdir -p "$logdir"
manifest=$logdir/manifest.txt
skip_marker='NVSH_TEST_SKIP: '

passed=0 failed=0 skipped=0 expected=0 failures=() skips=()
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# Only the GPUs the processes will see count: a CUDA_VISIBLE_DEVICES list narrows them.
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    visible=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
    [ "$visible" -lt "$gpus" ] && gpus=$visible
fi

# fail_case NAME WHY: a case that failed without running (it still counts as expected).
fail_case() {
    expected=$((expected + 1))
    failed=$((failed + 1))
    failures+=("$1 ($2)")
    echo "FAIL $1 ($2)"
}

# run_case NAME PROCESSES COMMAND...: runs it with a time limit, prints its output, counts the
# outcome. PROCESSES is how many libtest summaries must count a passed test (0: not libtest).
run_case() {
    local name=$1 procs=$2
    shift 2
    local log
    log="$logdir/$(echo "$name" | tr -c 'A-Za-z0-9_.-' '_').log"
    echo "=== $name"
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1 </dev/null
    local rc=$?
    cat "$log"
    # libtest reports "test result: ok. 1 passed; ..." per process ("[rank] " before it under
    # nvsh run); a test renamed or filtered away reports 0 passed and must not pass.
    local ran
    ran=$(grep -cE 'test result: ok\. [1-9][0-9]* passed' "$log")
    local reason
    reason=$(grep -o -m1 "$skip_marker.*" "$log" | sed "s/^$skip_marker//")
    if [ $rc -eq 0 ] && [ "$ran" -lt "$procs" ]; then
        rc=-1
    fi
    if [ $rc -eq 0 ] && [ -n "$reason" ]; then
        skipped=$((skipped + 1))
        skips+=("$name: $reason")
        echo "SKIP $name: $reason"
    elif [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        echo "PASS $name"
    else
        failed=$((failed + 1))
        local why="exit $rc"
        [ $rc -eq 124 ] && why="timed out after ${limit}s"
        [ $rc -eq -1 ] && why="exit 0 but $ran of $procs processes ran a test"
        failures+=("$name ($why)")
        echo "FAIL $name ($why)"
    fi
}

# The manifest: one line per expected case, "BINARY NAME PES", or "- NAME" for the others.
: >"$manifest"
shopt -s nullglob
binaries=("$bin"/test-*)
[ ${#binaries[@]} -gt 0 ] || fail_case "test binaries" "none in $bin: run scripts/build_gpu_bins.sh"
for t in "${binaries[@]}"; do
    listing="$logdir/$(basename "$t").list"
    "$t" --list --ignored --format terse >"$listing" 2>&1 </dev/null
    rc=$?
    if [ $rc -ne 0 ]; then
        cat "$listing"
        fail_case "$(basename "$t") --list" "exit $rc: cannot list its tests"
        continue
    fi
    for name in $(sed -n 's/: test$//p' "$listing"); do
        [ -z "$filter" ] || [[ "$name" == *"$filter"* ]] || continue
        if [ -n "$exclude" ] && [[ "$name" == *"$exclude"* ]]; then
            excluded=$((excluded + 1))
            continue
        fi
        short=${name##*::}
        pes=1
        [[ "$short" =~ ^pe([0-9]+)_ ]] && pes=${BASH_REMATCH[1]}
        echo "$t $name $pes" >>"$manifest"
    done
done
if [ -z "$filter" ] || [[ ring_exchange == *"$filter"* ]]; then
    printf -- '- %s\n' "ring_exchange, 1 PE" "ring_exchange, nvsh run -n 2" \
        "ring_exchange, mpirun -np 2" >>"$manifest"
fi
if [ -z "$filter" ] || [[ "nvsh info" == *"$filter"* ]]; then
    echo "- nvsh info" >>"$manifest"
fi
cases=$(grep -c . "$manifest")
expected=$((expected + cases))
echo "gpu_test.sh: $expected cases expected (manifest: $manifest)"
[ -z "$exclude" ] || echo "gpu_test.sh: $excluded case(s) left out by GPU_TEST_EXCLUDE='$exclude'"
if [ -n "$filter" ] && [ "$cases" -eq 0 ]; then
    echo "gpu_test.sh: GPU_TEST_FILTER='$filter' matched no case" >&2
fi

# The manifest is read on fd 3: the cases get /dev/null as stdin.
while read -r t name pes <&3; do
    if [ "$t" = - ]; then
        label="$name $pes"
        case "$label" in
        "ring_exchange, 1 PE") run_case "$label" 0 "$bin/ring_exchange" ;;
        "ring_exchange, nvsh run -n 2") run_case "$label" 0 "$nvsh" run -n 2 -- "$bin/ring_exchange" ;;
        # shellcheck disable=SC2086 # MPIRUN may carry flags
        "ring_exchange, mpirun -np 2") run_case "$label" 0 $mpirun -np 2 "$bin/ring_exchange" ;;
        "nvsh info") run_case "$label" 0 "$nvsh" info ;;
        esac
    elif [ "$pes" -eq 1 ]; then
        run_case "$(basename "$t") $name" 1 "$t" --ignored --exact "$name" --test-threads=1
    elif [ "$pes" -le "$gpus" ]; then
        run_case "$(basename "$t") $name [$pes PEs]" "$pes" "$nvsh" run -n "$pes" -- "$t" --ignored --exact "$name" --test-threads=1
    else
        # More PEs than GPUs: all on GPU 0 (puts and signals work with several PEs per GPU).
        run_case "$(basename "$t") $name [$pes PEs on GPU 0]" "$pes" "$nvsh" run -n "$pes" --gpus 0 -- "$t" --ignored --exact "$name" --test-threads=1
    fi
done 3<"$manifest"

ended=$((passed + failed + skipped))
if [ "$ended" -ne "$expected" ]; then
    failures+=("$((expected - ended)) expected cases did not end (see $manifest)")
    failed=$((failed + expected - ended))
fi
echo
[ ${#skips[@]} -eq 0 ] || printf 'skipped: %s\n' "${skips[@]}"
[ ${#failures[@]} -eq 0 ] || printf 'failed: %s\n' "${failures[@]}"
[ -n "$filter" ] && [ "$cases" -eq 0 ] && echo "GPU_TEST_FILTER='$filter' matched no case"
echo "$passed passed, $failed failed, $skipped skipped of $expected expected"
[ "$failed" -eq 0 ] && [ "$expected" -gt 0 ] && { [ -z "$filter" ] || [ "$cases" -gt 0 ]; }
