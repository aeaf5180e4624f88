#!/usr/bin/env bash
# Runs compute-sanitizer on the ring exchange, on allreduce under each of its protocols, on the
# broadcast / allgather / alltoall / reduce-scatter / reduce kernels (the split and pull
# protocols too), on the exchanges (alltoallv's one launch too), on the team barrier, on the
# channel and on the barrier, each as 2 PEs under `nvsh run -n 2`, with each tool:
#   memcheck   out-of-bounds and misaligned accesses, leaks, CUDA API errors;
#   racecheck  shared-memory hazards only: it does not see races on global memory, so the
#              cross-PE protocols (flags and data in symmetric global memory) are not covered
#              by it; the tests' result checks and the soak are what catch those;
#   synccheck  invalid uses of __syncthreads and warp-level synchronisation;
#   initcheck  reads of device global memory never written. Not in the default set: across
#              PEs it also reports the first touch of each peer word through the P2P mapping
#              (an atomic on a peer's barrier or credit counter, a pull protocol's load of a
#              peer's input), which the peer initialised in its own process where this
#              process's tool cannot see it. Its runs are judged by reading those reports: a
#              read of this PE's own memory is a finding. (Symmetric memory is zeroed with
#              the runtime's own memset, which it does see; nvshmem_calloc's zeroing it does
#              not.)
# Ends with one line per run and "N clean, N with errors". Needs a GPU machine with
# compute-sanitizer (CUDA toolkit) and the binaries of scripts/build_gpu_bins.sh:
#   scripts/sanitize.sh [BIN_DIR]          (default .gpu/bin)
# A run is clean only when the tool and the program exit 0 and, for a test binary, every PE's
# libtest summary counts a passed test: a renamed test that runs nothing is an error, not clean.
# SANITIZER overrides the compute-sanitizer command; SANITIZE_TOOLS (default memcheck racecheck
# synccheck; add initcheck by naming it) and
# SANITIZE_FILTER (case names containing it) narrow the runs, and a filter that matches no case
# is an error; SANITIZE_JOBS (default 1) runs that many racecheck/synccheck runs at once; SANITIZE_TIMEOUT (seconds,
# default 600) bounds each run; logs go to
# SANITIZE_LOG_DIR if set.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${1:-.gpu/bin}
san=${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
limit=${SANITIZE_TIMEOUT:-600}
tools=${SANITIZE_TOOLS:-memcheck racecheck synccheck}
filter=${SANITIZE_FILTER:-}
jobs=${SANITIZE_JOBS:-1}
logdir=${SANITIZE_LOG_DIR:-$(mktemp -d)}
mkdir -p "$logdir"
[ -x "$san" ] || { echo "sanitize.sh: compute-sanitizer not found (set SANITIZER)" >&2; exit 2; }
for f in nvsh ring_exchange test-allreduce test-channel test-rma test-collectives test-exchange; do
    [ -x "$bin/$f" ] || { echo "sanitize.sh: no $bin/$f; run scripts/build_gpu_bins.sh" >&2; exit 2; }
done
# NVSHMEM's VMM-based heap confuses the sanitizer's allocation tracking.
export NVSHMEM_DISABLE_CUDA_VMM=1
# NVSHMEM's init builds NCCL teams, and NCCL probes kernels not built for this GPU: 48 reported
# cudaErrorNoKernelImageForDevice API errors per run, all inside ncclCommInitRank. The runtime
# uses neither NVSHMEM's collectives nor NCCL, so leave NCCL out of the runs under test.
export NVSHMEM_DISABLE_NCCL=1
# The tools patch each module at its first launch, which takes a PE tens of seconds for the
# allreduce module; a peer already waiting inside a kernel would pass the 60 s deadline (seen
# under initcheck: the first call timed out and left its poisoned output). A hang still ends at
# SANITIZE_TIMEOUT.
export NVSH_TIMEOUT_MS=${NVSH_TIMEOUT_MS:-600000}

clean=0 dirty=0 runs=0 lines=() results=()
# run_one NAME TOOL LIBTEST [VAR=VALUE...] -- ARGS...: one 2-PE run under TOOL; its verdict
# line goes to stdout and to NAME_TOOL.result in the log folder.
run_one() {
    local name=$1 tool=$2 libtest=$3 vars=()
    shift 3
    while [ "$1" != -- ]; do
        vars+=("$1")
        shift
    done
    shift
    local log="$logdir/${name}_$tool.log" line
    timeout --kill-after=10 "$limit" env "${vars[@]}" "$bin/nvsh" run -n 2 -- \
        "$san" --tool "$tool" --error-exitcode 99 "$@" >"$log" 2>&1 </dev/null
    local rc=$?
    local summary
    summary=$(grep -hE "(ERROR|RACECHECK) SUMMARY" "$log" | sed -E 's/.*(ERROR|RACECHECK) SUMMARY: //' | sort | uniq -c | tr '\n' ' ')
    # Each of the 2 PEs prints "test result: ok. 1 passed; ..." when its test ran.
    local ran
    ran=$(grep -cE 'test result: ok\. [1-9][0-9]* passed' "$log")
    if [ $rc -eq 0 ] && [ "$libtest" -eq 1 ] && [ "$ran" -lt 2 ]; then
        line="ERRORS $name $tool: exit 0 but $ran of 2 PEs ran a test (renamed?) (see $log)"
    elif [ $rc -eq 0 ]; then
        line="CLEAN $name $tool: ${summary:-no summary}"
    else
        line="ERRORS $name $tool (exit $rc): ${summary:-no summary} (see $log)"
    fi
    echo "$line" >"$logdir/${name}_$tool.result"
    echo "$line"
}

# check NAME [VAR=VALUE...] -- ARGS...: one 2-PE run of ARGS under each tool, with the
# variables in its environment. ARGS of a test binary name one test. With SANITIZE_JOBS > 1
# the racecheck and synccheck runs go in the background, at most that many at once (their cost
# is mostly on the CPU); memcheck and initcheck runs always run alone.
check() {
    local name=$1 vars=()
    shift
    while [ "$1" != -- ]; do
        vars+=("$1")
        shift
    done
    shift
    [ -z "$filter" ] || [[ "$name" == *"$filter"* ]] || return 0
    local libtest=0
    [[ "$(basename "$1")" == test-* ]] && libtest=1
    for tool in $tools; do
        runs=$((runs + 1))
        results+=("$logdir/${name}_$tool.result")
        rm -f "$logdir/${name}_$tool.result"
        if [ "$jobs" -gt 1 ] && [[ "$tool" == racecheck || "$tool" == synccheck ]]; then
            while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
                wait -n
            done
            run_one "$name" "$tool" "$libtest" "${vars[@]}" -- "$@" &
        else
            # memcheck and initcheck alone: 8 at once on one H200 never exited (each PE had
            # printed its result; killed after 400-500 s), one at a time they take about 60 s.
            while [ "$(jobs -rp | wc -l)" -gt 0 ]; do
                wait -n
            done
            run_one "$name" "$tool" "$libtest" "${vars[@]}" -- "$@"
        fi
    done
}

ar=("$bin/test-allreduce" --ignored --exact pe2_allreduce_as_the_environment_chooses --test-threads=1)
# Each allreduce protocol, forced through the environment as the library reads it
# (src/coll/allreduce/settings.rs; settings() writes 1T as 1024G); the test asserts that the settings and the algorithm it was given
# are the ones that ran (NVSH_TEST_EXPECT_*), so a variable that stopped working fails the run.
check ring_exchange -- "$bin/ring_exchange"
check allreduce_oneshot_low_latency NVSH_ALLREDUCE_ALGO=oneshot NVSH_TEST_EXPECT_ALGO=oneshot \
    "NVSH_TEST_EXPECT_SETTINGS=low-latency one-shot up to" -- "${ar[@]}"
check allreduce_oneshot NVSH_ALLREDUCE_ALGO=oneshot NVSH_ALLREDUCE_LL_MAX=0 \
    NVSH_TEST_EXPECT_ALGO=oneshot "NVSH_TEST_EXPECT_SETTINGS=low-latency one-shot off" -- "${ar[@]}"
check allreduce_twoshot_slots NVSH_ALLREDUCE_ALGO=twoshot NVSH_ALLREDUCE_DIRECT_MIN=1T \
    NVSH_TEST_EXPECT_ALGO=twoshot "NVSH_TEST_EXPECT_SETTINGS=direct two-shot from 1024G" -- "${ar[@]}"
check allreduce_twoshot_direct_pull NVSH_ALLREDUCE_ALGO=twoshot NVSH_ALLREDUCE_DIRECT_MIN=0 \
    NVSH_ALLREDUCE_PUSH_MIN=1T NVSH_TEST_EXPECT_ALGO=twoshot \
    "NVSH_TEST_EXPECT_SETTINGS=direct two-shot from 0 (no push)" -- "${ar[@]}"
check allreduce_twoshot_push NVSH_ALLREDUCE_ALGO=twoshot NVSH_ALLREDUCE_DIRECT_MIN=0 \
    NVSH_ALLREDUCE_PUSH_MIN=0 NVSH_TEST_EXPECT_ALGO=twoshot \
    "NVSH_TEST_EXPECT_SETTINGS=push from 0 out of place" -- "${ar[@]}"
check allreduce_ring NVSH_ALLREDUCE_ALGO=ring NVSH_TEST_EXPECT_ALGO=ring -- "${ar[@]}"
check allreduce_recursive_doubling NVSH_ALLREDUCE_ALGO=rd NVSH_TEST_EXPECT_ALGO=rd -- "${ar[@]}"
# The path between nodes: NVSHMEM puts and quiets instead of direct stores.
check allreduce_nvshmem_puts NVSH_NO_DIRECT=1 NVSH_ALLREDUCE_ALGO=oneshot NVSH_TEST_EXPECT_ALGO=oneshot \
    "NVSH_TEST_EXPECT_SETTINGS=NVSHMEM puts only" -- "${ar[@]}"
check allreduce_refused_call -- "$bin/test-allreduce" --ignored --exact \
    pe2_mismatched_lengths_are_refused --test-threads=1
check allreduce_push_pull -- "$bin/test-allreduce" --ignored --exact \
    pe2_push_and_pull_back_to_back_with_the_grid_changing_between_calls --test-threads=1
# The collective family: every collective in a replayed graph (segmented reductions), then 1000
# calls back to back mixing them.
check collectives_graph -- "$bin/test-collectives" --ignored --exact \
    pe2_replays_of_a_captured_graph_of_every_collective_see_fresh_data --test-threads=1
check collectives_back_to_back -- "$bin/test-collectives" --ignored --exact \
    pe2_a_thousand_back_to_back_calls_mixing_every_collective --test-threads=1
check team_barrier -- "$bin/test-collectives" --ignored --exact \
    pe2_a_team_barrier_waits_for_every_member_and_orders_their_puts --test-threads=1
# The exchanges (alltoallv, allgatherv, grouped send/recv): a replayed graph of all three, then
# 1000 calls back to back, then the same through NVSHMEM puts only.
check exchange_graph -- "$bin/test-exchange" --ignored --exact \
    pe2_replays_of_a_captured_graph_of_exchanges_see_fresh_data --test-threads=1
check exchange_back_to_back -- "$bin/test-exchange" --ignored --exact \
    pe2_a_thousand_back_to_back_exchanges --test-threads=1
check exchange_mismatch -- "$bin/test-exchange" --ignored --exact \
    pe2_mismatched_transfers_fail_on_both_ends_and_the_runtime_goes_on --test-threads=1
# The paths that hand a peer the address of a buffer (prims/exchange.cuh sym_word): alltoallv's
# one launch (skewed sizes, then sizes that differ between the ends), the split and the pull.
# Under this script's static heap each process maps a symmetric object at its own address.
check exchange_parts -- "$bin/test-exchange" --ignored --exact \
    pe2_every_exchange_skewed_and_zero_counts --test-threads=1
check exchange_parts_mismatch -- "$bin/test-exchange" --ignored --exact \
    pe2_alltoallv_parts_that_differ_fail_on_both_ends --test-threads=1
check family_split -- "$bin/test-collectives" --ignored --exact \
    pe2_split_broadcast_and_reduce_on_two_pes --test-threads=1
check family_pull -- "$bin/test-collectives" --ignored --exact \
    pe2_pull_reduce_and_reduce_scatter_on_two_pes --test-threads=1
check channel -- "$bin/test-channel" --ignored --exact \
    pe2_forward_and_backward_channels_at_once_like_a_pipeline --test-threads=1
check barrier -- "$bin/test-rma" --ignored --exact pe2_barrier_orders_puts_before_reads \
    --test-threads=1
# The background runs (each writes its own log and result file).
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do
    wait -n
done
for r in "${results[@]}"; do
    line=$(cat "$r" 2>/dev/null) || line="ERRORS $(basename "$r" .result): the run left no verdict"
    case $line in
    CLEAN*) clean=$((clean + 1)) ;;
    *) dirty=$((dirty + 1)) ;;
    esac
    lines+=("$line")
done
echo
[ ${#lines[@]} -eq 0 ] || printf '%s\n' "${lines[@]}"
if [ "$runs" -eq 0 ]; then
    echo "sanitize.sh: nothing ran (SANITIZE_FILTER='$filter', SANITIZE_TOOLS='$tools')"
    dirty=1
fi
echo "$clean clean, $dirty with errors"
[ "$dirty" -eq 0 ]
