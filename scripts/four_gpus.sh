#!/usr/bin/env bash
# What issues 35, 37 and 39 wait for on a 4-GPU machine (one PE per GPU), step by step so that
# each fits a call:
#   scripts/four_gpus.sh BIN_DIR LOG_DIR [STEP ...]
# BIN_DIR holds what scripts/build_gpu_bins.sh made (nvsh and the test binaries); LOG_DIR
# receives each step's output and JSON. Steps (default: nodes family allreduce sparse):
#   nodes     every GPU test with pretend nodes (2 x 2, 4 x 1, 2 x 1) and the hierarchical
#             ones, then allgather, reduce-scatter, broadcast and alltoall at 2 x 2 to 16 MiB,
#             flat (NVSH_FAMILY_HIER_MIN=1T) then by node-aware steps (=0), NODES_RUNS times
#             each (default 1), and the allreduce's algorithms there: `nvsh compare
#             LOG_DIR/nodes_C_hier_*.json --before LOG_DIR/nodes_C_flat_*.json` sets them side
#             by side (docs/nodes.md)
#   family    the family collectives at 4 PEs, f32 and bf16, 4 KiB to 256 MiB, ours against
#             nccl and nccl-sym, back to back and after compute (issue 35's table): those of
#             FAMILY_COLLECTIVES (default all seven; name a few per call where one call's
#             limit cuts the list)
#   allreduce the allreduce at 4 PEs, every algorithm and auto against nccl and nccl-sym
#   sparse    the sparse allreduce's GPU tests of 3 and 4 PEs (every method against the seed's
#             CPU reference, the bit-identical replicas), then nvsh bench sparse at 4 PEs,
#             densities 0.1% and 1%, 16 to 256 MiB
#   suite     the whole GPU suite, cases side by side (GPU_TEST_PARALLEL=1), resumable: run it
#             again with the same LOG_DIR after a cut-off and it runs only what has no verdict
# STEP_TIMEOUT bounds each command (default 580 s). Ends with one line per step, "ok" or
# failed; exit status 0 only if every step ran to the end.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ $# -lt 2 ]; then
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
bin=$1 logs=$2
shift 2
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(nodes family allreduce sparse)
nvsh=$bin/nvsh
[ -x "$nvsh" ] || { echo "four_gpus.sh: $nvsh not found or not executable" >&2; exit 2; }
# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh
prepare_steps 4 four_gpus.sh

sizes=(-b 4K -e 256M -f 4 -n 5 -d f32,bf16)

# tests NAME DIR FILTER [EXCLUDE]: the GPU tests of the binaries in DIR whose names contain
# FILTER (and not EXCLUDE).
tests() {
    GPU_TEST_FILTER=$3 GPU_TEST_EXCLUDE=${4:-} GPU_TEST_LOG_DIR="$logs/$1" \
        run "$1" scripts/gpu_test.sh "$2"
}

step() {
    local ok=0 c k
    case $1 in
    nodes)
        tests nodes_tests "$bin" pretend || ok=1
        tests nodes_hier_tests "$bin" hierarchical pretend || ok=1
        for c in allgather reduce-scatter broadcast alltoall; do
            for k in $(seq "${NODES_RUNS:-1}"); do
                NVSH_PRETEND_NODE_SIZE=2 NVSH_FAMILY_HIER_MIN=1T \
                    bench_at 4 "nodes_${c}_flat_$k" "$c" -b 4K -e 16M -f 4 -n 5 -d bf16 \
                    --algos ours,nccl || ok=1
                NVSH_PRETEND_NODE_SIZE=2 NVSH_FAMILY_HIER_MIN=0 \
                    bench_at 4 "nodes_${c}_hier_$k" "$c" -b 4K -e 16M -f 4 -n 5 -d bf16 \
                    --algos ours,nccl || ok=1
            done
        done
        NVSH_PRETEND_NODE_SIZE=2 bench_at 4 nodes_allreduce allreduce -b 64K -e 16M -f 4 \
            -n 5 -d bf16 --algos hier,oneshot,twoshot,ring,rd,nccl || ok=1
        return $ok ;;
    family)
        local all="broadcast reduce allgather allgatherv reduce-scatter alltoall alltoallv"
        for c in ${FAMILY_COLLECTIVES:-$all}; do
            bench_at 4 "${c}_4" "$c" "${sizes[@]}" --algos ours,nccl,nccl-sym || ok=1
        done
        return $ok ;;
    allreduce)
        bench_at 4 allreduce_4 allreduce "${sizes[@]}" \
            --algos oneshot,twoshot,ring,rd,auto,nccl,nccl-sym ;;
    sparse)
        # The sparse allreduce's cases of 3 and 4 PEs only (the bit-identical replicas among
        # them): its binary alone in a folder, every case name starting "pe".
        local only=$logs/sparse_bin
        mkdir -p "$only" &&
            ln -sf "$(realpath "$nvsh")" "$(realpath "$bin/test-sparse_allreduce")" "$only/" ||
            return 1
        GPU_TEST_MIN_PES=3 tests sparse_tests "$only" pe || ok=1
        bench_at 4 sparse_4 sparse --densities 0.001,0.01 -b 16M -e 256M -f 4 || ok=1
        return $ok ;;
    suite)
        GPU_TEST_PARALLEL=1 GPU_TEST_RESUME=1 GPU_TEST_LOG_DIR="$logs/suite" \
            run suite scripts/gpu_test.sh "$bin" ;;
    *)
        echo "four_gpus.sh: unknown step $1 (nodes, family, allreduce, sparse, suite)" >&2
        return 2 ;;
    esac
}

run_steps "${steps[@]}"
