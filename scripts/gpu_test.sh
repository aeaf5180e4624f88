#!/usr/bin/env bash
# Runs every GPU test on a GPU machine, each with the PE count it needs, and the ring exchange
# with 1 PE, under `nvsh run -n 2` and under mpirun. Ends with one line "N passed, N failed".
#   scripts/gpu_test.sh [BIN_DIR]
# BIN_DIR holds what scripts/build_gpu_bins.sh made (default .gpu/bin); where cargo exists and
# BIN_DIR is missing, they are built first. NVSHMEM allows one init per process, so each test
# runs in a process (or job) of its own: tests named peN_* run under `nvsh run -n N` (one GPU
# per PE where there are enough, else all on GPU 0), the others (pe1_*) alone. MPIRUN overrides the mpirun command (e.g. with --allow-run-as-root).
# GPU_TEST_FILTER limits the tests to names containing it; GPU_TEST_TIMEOUT (seconds, default
# 300) bounds each case. Logs go to GPU_TEST_LOG_DIR if set.
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
logdir=${GPU_TEST_LOG_DIR:-$(mktemp -d)}
mkdir -p "$logdir"

passed=0 failed=0 failures=()
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# Only the GPUs the processes will see count: a CUDA_VISIBLE_DEVICES list narrows them.
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    visible=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
    [ "$visible" -lt "$gpus" ] && gpus=$visible
fi
# run_case NAME COMMAND...: runs it with a time limit, prints its output, counts the outcome.
run_case() {
    local name=$1
    shift
    local log
    log="$logdir/$(echo "$name" | tr -c 'A-Za-z0-9_.-' '_').log"
    echo "=== $name"
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
    local rc=$?
    cat "$log"
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        echo "PASS $name"
    else
        failed=$((failed + 1))
        failures+=("$name")
        [ $rc -eq 124 ] && echo "(timed out after ${limit}s)"
        echo "FAIL $name (exit $rc)"
    fi
}

for t in "$bin"/test-*; do
    [ -x "$t" ] || continue
    for name in $("$t" --list --ignored --format terse 2>/dev/null | sed -n 's/: test$//p'); do
        [ -z "$filter" ] || [[ "$name" == *"$filter"* ]] || continue
        short=${name##*::}
        pes=1
        [[ "$short" =~ ^pe([0-9]+)_ ]] && pes=${BASH_REMATCH[1]}
        if [ "$pes" -eq 1 ]; then
            run_case "$(basename "$t") $name" "$t" --ignored --exact "$name" --test-threads=1
        elif [ "$pes" -le "$gpus" ]; then
            run_case "$(basename "$t") $name [$pes PEs]" "$nvsh" run -n "$pes" -- "$t" --ignored --exact "$name" --test-threads=1
        else
            # More PEs than GPUs: all on GPU 0 (puts and signals work with several PEs per GPU).
            run_case "$(basename "$t") $name [$pes PEs on GPU 0]" "$nvsh" run -n "$pes" --gpus 0 -- "$t" --ignored --exact "$name" --test-threads=1
        fi
    done
done

if [ -z "$filter" ] || [[ ring_exchange == *"$filter"* ]]; then
    run_case "ring_exchange, 1 PE" "$bin/ring_exchange"
    run_case "ring_exchange, nvsh run -n 2" "$nvsh" run -n 2 -- "$bin/ring_exchange"
    # shellcheck disable=SC2086 # MPIRUN may carry flags
    run_case "ring_exchange, mpirun -np 2" $mpirun -np 2 "$bin/ring_exchange"
fi
if [ -z "$filter" ] || [[ "nvsh info" == *"$filter"* ]]; then
    run_case "nvsh info" "$nvsh" info
fi

[ ${#failures[@]} -eq 0 ] || printf 'failed: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
