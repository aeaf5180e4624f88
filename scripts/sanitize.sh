#!/usr/bin/env bash
# Runs compute-sanitizer (memcheck, then racecheck) on the ring exchange, two allreduce tests (the
# second pushes and pulls two-shot messages back to back) and a channel test, each as 2 PEs under
# `nvsh run -n 2`, and ends with one line per run and
# "N clean, N with errors". Needs a GPU machine with compute-sanitizer (CUDA toolkit) and the
# binaries of scripts/build_gpu_bins.sh:
#   scripts/sanitize.sh [BIN_DIR]          (default .gpu/bin)
# SANITIZER overrides the compute-sanitizer command; SANITIZE_TIMEOUT (seconds, default 600)
# bounds each run; logs go to SANITIZE_LOG_DIR if set.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${1:-.gpu/bin}
san=${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
limit=${SANITIZE_TIMEOUT:-600}
logdir=${SANITIZE_LOG_DIR:-$(mktemp -d)}
mkdir -p "$logdir"
[ -x "$san" ] || { echo "sanitize.sh: compute-sanitizer not found (set SANITIZER)" >&2; exit 2; }
for f in nvsh ring_exchange test-allreduce test-channel; do
    [ -x "$bin/$f" ] || { echo "sanitize.sh: no $bin/$f; run scripts/build_gpu_bins.sh" >&2; exit 2; }
done
# NVSHMEM's VMM-based heap confuses the sanitizer's allocation tracking.
export NVSHMEM_DISABLE_CUDA_VMM=1
# NVSHMEM's init builds NCCL teams, and NCCL probes kernels not built for this GPU: 48 reported
# cudaErrorNoKernelImageForDevice API errors per run, all inside ncclCommInitRank. The runtime
# uses neither NVSHMEM's collectives nor NCCL, so leave NCCL out of the runs under test.
export NVSHMEM_DISABLE_NCCL=1

clean=0 dirty=0 lines=()
# check NAME ARGS...: one 2-PE run of ARGS under each tool.
check() {
    local name=$1
    shift
    for tool in memcheck racecheck; do
        local log="$logdir/${name}_$tool.log"
        timeout --kill-after=10 "$limit" "$bin/nvsh" run -n 2 -- \
            "$san" --tool "$tool" --error-exitcode 99 "$@" >"$log" 2>&1
        local rc=$?
        local summary
        summary=$(grep -hE "(ERROR|RACECHECK) SUMMARY" "$log" | sed -E 's/.*(ERROR|RACECHECK) SUMMARY: //' | sort | uniq -c | tr '\n' ' ')
        if [ $rc -eq 0 ]; then
            clean=$((clean + 1))
            lines+=("CLEAN $name $tool: ${summary:-no summary}")
        else
            dirty=$((dirty + 1))
            lines+=("ERRORS $name $tool (exit $rc): ${summary:-no summary} (see $log)")
        fi
        echo "${lines[-1]}"
    done
}

check ring_exchange "$bin/ring_exchange"
check allreduce "$bin/test-allreduce" --ignored --exact pe2_mismatched_lengths_are_refused --test-threads=1
check allreduce_push_pull "$bin/test-allreduce" --ignored --exact \
    pe2_push_and_pull_back_to_back_with_the_grid_changing_between_calls --test-threads=1
check channel "$bin/test-channel" --ignored --exact pe2_forward_and_backward_channels_at_once_like_a_pipeline --test-threads=1
echo
printf '%s\n' "${lines[@]}"
echo "$clean clean, $dirty with errors"
[ "$dirty" -eq 0 ]
