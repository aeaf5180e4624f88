# Shared by the scripts that run an issue's acceptance on a GPU machine step by step
# (eight_gpus.sh, four_gpus.sh; sourced). The caller sets `logs` (a folder) and `nvsh` (the
# nvsh binary), then calls prepare_steps.

# prepare_steps GPUS SCRIPT: exits 2 unless this machine has GPUS GPUs (one PE per GPU); makes
# $logs, sets `limit` (seconds a command may take: STEP_TIMEOUT, default 580) and keeps NVLink
# multicast off (INSTALL.md; the benches compare with NCCL's own transports).
prepare_steps() {
    local gpus
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ "$gpus" -lt "$1" ]; then
        echo "$2: this machine has $gpus GPU(s); these runs need $1 (one PE per GPU)" >&2
        exit 2
    fi
    mkdir -p "$logs" || exit 2
    limit=${STEP_TIMEOUT:-580}
    export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NCCL=1
}

# run NAME COMMAND...: output in $logs/NAME.log; false when the command failed or timed out.
run() {
    local name=$1
    shift
    echo "=== $name: $*"
    timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc (output in $logs/$name.log)"
    [ $rc -eq 0 ]
}

# bench_at PES NAME COLLECTIVE ARGS...: nvsh bench at PES PEs, JSON in $logs/NAME.json.
bench_at() {
    local pes=$1 name=$2 c=$3
    shift 3
    run "$name" "$nvsh" run -n "$pes" -- "$nvsh" bench "$c" "$@" --json --out "$logs/$name.json"
}

# run_steps NAME...: runs `step NAME` (the caller's) for each, then one line per step ("ok" or
# "failed"); false if any failed.
run_steps() {
    local s failed=0 results=()
    for s in "$@"; do
        if step "$s"; then
            results+=("$s: ok")
        else
            results+=("$s: failed (see $logs)")
            failed=$((failed + 1))
        fi
    done
    echo
    printf '%s\n' "${results[@]}"
    [ "$failed" -eq 0 ]
}
