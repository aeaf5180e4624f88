#!/usr/bin/env bash
# Issue 40's runs on an 8-GPU machine (one PE per GPU), step by step so that each fits a call:
#   scripts/eight_gpus.sh BIN_DIR DATA_FILE LOG_DIR [STEP ...]
# BIN_DIR holds what scripts/build_gpu_bins.sh made (nvsh, nvsh-gpt, the test binaries),
# DATA_FILE is Tiny Shakespeare (any text works), LOG_DIR receives each step's output and JSON.
# Steps (default: all, in this order):
#   suite     the whole GPU suite, cases side by side (GPU_TEST_PARALLEL=1), resumable: run it
#             again with the same LOG_DIR after a cut-off and it runs only what has no verdict
#   allreduce nvsh bench allreduce at 8 PEs, f32 and bf16, 4 KiB to 256 MiB, every algorithm
#             against nccl and nccl-sym (back to back and after compute)
#   family    every family collective at 8 PEs, the same sizes, ours against nccl and nccl-sym
#   train     the GPT-2-shaped model: PP=1 on one GPU, PP=8, PP=4 x DP=2 and DP=8 (tokens/s
#             from `nvsh-gpt summary`), then the parity check of PP=2 against PP=1
#   sparse    nvsh bench sparse at 8 PEs, densities 0.1% and 1%, 16 to 256 MiB
# STEP_TIMEOUT bounds each command (default 580 s). Ends with one line per step, "ok" or the
# failing command's status; exit status 0 only if every step ran to the end.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ $# -lt 3 ]; then
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
bin=$1 data=$2 logs=$3
shift 3
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(suite allreduce family train sparse)
nvsh=$bin/nvsh gpt=$bin/nvsh-gpt
for f in "$nvsh" "$gpt"; do
    [ -x "$f" ] || { echo "eight_gpus.sh: $f not found or not executable" >&2; exit 2; }
done
[ -r "$data" ] || { echo "eight_gpus.sh: cannot read $data" >&2; exit 2; }
# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh
prepare_steps 8 eight_gpus.sh

# bench NAME COLLECTIVE ARGS...: nvsh bench at 8 PEs, JSON in LOG_DIR/NAME.json.
bench() {
    bench_at 8 "$@"
}

sizes=(-b 4K -e 256M -f 4 -n 5 -d f32,bf16)
model=(--layers 12 --width 768 --heads 12 --context 1024 -b 4 -m 8 --steps 30 --warmup 10
    --val-every 0 --val-batches 1 --sample-tokens 0 --print-every 5)

step() {
    case $1 in
    suite)
        GPU_TEST_PARALLEL=1 GPU_TEST_RESUME=1 GPU_TEST_LOG_DIR="$logs/suite" \
            run suite scripts/gpu_test.sh "$bin" ;;
    allreduce)
        bench allreduce_8 allreduce "${sizes[@]}" --algos oneshot,twoshot,ring,rd,auto,nccl,nccl-sym ;;
    family)
        local ok=0 c
        for c in broadcast reduce allgather allgatherv reduce-scatter alltoall alltoallv \
            sendrecv-ring sendrecv-all; do
            bench "${c}_8" "$c" "${sizes[@]}" --algos ours,nccl,nccl-sym || ok=1
        done
        return $ok ;;
    train)
        local ok=0 name
        run train_pp1 "$gpt" train --data "$data" --log-json "$logs/train_pp1.json" "${model[@]}" || ok=1
        for name in "pp8:--pp 8" "pp4dp2:--pp 4 --dp 2" "dp8:--dp 8"; do
            # shellcheck disable=SC2086 # the flags are words
            run "train_${name%%:*}" "$nvsh" run -n 8 -- "$gpt" train --data "$data" \
                --log-json "$logs/train_${name%%:*}.json" "${model[@]}" ${name#*:} || ok=1
        done
        for name in pp1 pp8 pp4dp2 dp8; do
            [ -f "$logs/train_$name.json" ] &&
                echo "$name: $("$gpt" summary "$logs/train_$name.json" --skip 3)"
        done | tee "$logs/train_summary.txt"
        run train_parity scripts/gpt_acceptance.sh "$bin" "$data" "$logs/parity" parity || ok=1
        return $ok ;;
    sparse)
        bench sparse_8 sparse --densities 0.001,0.01 -b 16M -e 256M -f 4 ;;
    *)
        echo "eight_gpus.sh: unknown step $1 (suite, allreduce, family, train, sparse)" >&2
        return 2 ;;
    esac
}

run_steps "${steps[@]}"
