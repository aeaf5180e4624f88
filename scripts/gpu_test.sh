#!/usr/bin/env bash
# Runs every GPU test on a GPU machine, each with the PE count it needs, and the ring exchange
# with 1 PE, under `nvsh run -n 2` and under mpirun. Ends with one line
#   N passed, N failed, N skipped of N expected
#   scripts/gpu_test.sh [BIN_DIR]
# BIN_DIR holds what scripts/build_gpu_bins.sh made (default .gpu/bin); where cargo exists and
# BIN_DIR is missing, they are built first. NVSHMEM allows one init per process, so each test
# runs in a process (or job) of its own: tests named peN_* run under `nvsh run -n N` (one GPU
# per PE where there are enough; else, where N is a multiple of the GPUs, the same number of PEs
# on each GPU, otherwise all on GPU 0), the others (pe1_*) alone. The Python package's GPU tests
# (tensors, then the torch.distributed backend, each file in processes of its own: NVSHMEM comes
# up once per process) run with 1 and 2 PEs (scripts/python_gpu_test.sh; NVSHMEM_RS_PYTHON
# names a Python with nvshmem_rs and torch, else they skip). MPIRUN overrides the mpirun
# command (e.g. with --allow-run-as-root).
#
# GPU_TEST_PARALLEL=1 runs cases side by side on disjoint GPUs: cases of N PEs (N at most the
# GPUs) run GPUS/N at a time, each on N GPUs of its own (every GPU stays visible, its own
# first: CUDA_VISIBLE_DEVICES is rotated), smallest N first; cases of more PEs than GPUs then
# run one at a time. The same cases and verdicts; for correctness only, never for timing.
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
# GPU_TEST_MIN_PES leaves out the cases of fewer PEs (to run only what a machine with fewer GPUs
# runs differently: GPU_TEST_MIN_PES=3 with CUDA_VISIBLE_DEVICES=0,1), GPU_TEST_MAX_PES those of
# more (GPU_TEST_MAX_PES=2 on a 2-GPU machine: cases of 3 or 4 PEs share a GPU there, in time
# slices that make some take minutes; run them where each PE has a GPU).
# GPU_TEST_SHARD=K/N keeps every Nth case from the Kth on (1 <= K <= N), counted before
# GPU_TEST_RESUME drops any, so N runs with K=1..N (on disjoint CUDA_VISIBLE_DEVICES, say)
# share one suite: two 2-GPU lanes of a 4-GPU machine run the 2-GPU suite in half the time.
# GPU_TEST_TIMEOUT (seconds, default 300) bounds each case. Logs go to GPU_TEST_LOG_DIR if set.
# GPU_TEST_RESUME=1 with the GPU_TEST_LOG_DIR of a run that was cut off (a machine's time limit)
# runs only the cases without a verdict there; the earlier verdicts count in the summary.
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
min_pes=${GPU_TEST_MIN_PES:-1}
max_pes=${GPU_TEST_MAX_PES:-1000000}
parallel=${GPU_TEST_PARALLEL:-0}
excluded=0
shard=${GPU_TEST_SHARD:-1/1}
if ! [[ "$shard" =~ ^([0-9]+)/([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -lt 1 ] ||
    [ "${BASH_REMATCH[1]}" -gt "${BASH_REMATCH[2]}" ]; then
    echo "gpu_test.sh: GPU_TEST_SHARD='$shard' is not K/N with 1 <= K <= N (e.g. 1/2)" >&2
    exit 2
fi
shard_k=${BASH_REMATCH[1]} shard_n=${BASH_REMATCH[2]} shard_seen=0 shard_other=0
# in_shard: whether the next case (in manifest order) belongs to this shard.
in_shard() {
    shard_seen=$((shard_seen + 1))
    [ $(((shard_seen - 1) % shard_n)) -eq $((shard_k - 1)) ] && return 0
    shard_other=$((shard_other + 1))
    return 1
}
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
# The GPUs as CUDA names them here (the inherited list, else 0..gpus-1), for the lanes.
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    IFS=, read -r -a gpu_ids <<<"$CUDA_VISIBLE_DEVICES"
else
    gpu_ids=()
    for ((g = 0; g < gpus; g++)); do gpu_ids+=("$g"); done
fi
results_dir=$logdir/results
mkdir -p "$results_dir"
earlier=$logdir/earlier_results.txt
if [ "${GPU_TEST_RESUME:-0}" = 1 ]; then
    cat "$results_dir"/*.txt >>"$earlier" 2>/dev/null
else
    rm -f "$earlier"
fi
touch "$earlier"
rm -f "$results_dir"/*.txt "$logdir"/lane_*
# The cases with a verdict from an earlier run, as the manifest names them (a verdict line's
# name less its " [N PEs...]" suffix). A file, not a pipeline: `grep -q` leaving a pipeline
# early fails it under pipefail.
done_names=$logdir/earlier_names.txt
cut -f2 "$earlier" | sed 's/ \[[^]]*\]$//' >"$done_names"
done_before() {
    grep -qxF -- "$1" "$done_names"
}
resumed=0
# Each case's verdict is a line "PASS|SKIP|FAIL<TAB>name<TAB>reason" in this file (one per lane).
results=$results_dir/main.txt

# fail_case NAME WHY: a case that failed without running (it still counts as expected).
fail_case() {
    expected=$((expected + 1))
    printf 'FAIL\t%s\t%s\n' "$1" "$2" >>"$results"
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
        printf 'SKIP\t%s\t%s\n' "$name" "$reason" >>"$results"
        echo "SKIP $name: $reason"
    elif [ $rc -eq 0 ]; then
        printf 'PASS\t%s\t\n' "$name" >>"$results"
        echo "PASS $name"
    else
        local why="exit $rc"
        [ $rc -eq 124 ] && why="timed out after ${limit}s"
        [ $rc -eq -1 ] && why="exit 0 but $ran of $procs processes ran a test"
        printf 'FAIL\t%s\t%s\n' "$name" "$why" >>"$results"
        echo "FAIL $name ($why)"
    fi
}

# The manifest: one line per expected case, "BINARY NAME PES", or "- PES LABEL" for the others.
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
        if [ "$pes" -lt "$min_pes" ] || [ "$pes" -gt "$max_pes" ]; then
            excluded=$((excluded + 1))
            continue
        fi
        in_shard || continue
        if done_before "$(basename "$t") $name"; then
            resumed=$((resumed + 1))
            continue
        fi
        echo "$t $name $pes" >>"$manifest"
    done
done
# add_other LABEL PES: a case that is not a test binary's.
add_other() {
    [ "$min_pes" -le "$2" ] && [ "$2" -le "$max_pes" ] || return 0
    [ -z "$filter" ] || [[ "$1" == *"$filter"* ]] || [[ ring_exchange == *"$filter"* && "$1" == ring_exchange* ]] || return 0
    in_shard || return 0
    if done_before "$1"; then
        resumed=$((resumed + 1))
        return 0
    fi
    printf -- '- %s %s\n' "$2" "$1" >>"$manifest"
}
add_other "ring_exchange, 1 PE" 1
add_other "ring_exchange, nvsh run -n 2" 2
add_other "ring_exchange, mpirun -np 2" 2
add_other "nvsh info" 1
add_other "python tensors, 1 PE" 1
add_other "python tensors, nvsh run -n 2" 2
add_other "python torch.distributed, 1 PE" 1
add_other "python torch.distributed, nvsh run -n 2" 2
cases=$(grep -c . "$manifest")
expected=$((expected + cases + resumed))
[ "$resumed" -eq 0 ] || echo "gpu_test.sh: $resumed case(s) have a verdict from the earlier run (GPU_TEST_RESUME)"
echo "gpu_test.sh: $expected cases expected (manifest: $manifest)"
[ -z "$exclude" ] && [ "$min_pes" -le 1 ] && [ -z "${GPU_TEST_MAX_PES:-}" ] ||
    echo "gpu_test.sh: $excluded case(s) left out by GPU_TEST_EXCLUDE='$exclude' / GPU_TEST_MIN_PES=$min_pes / GPU_TEST_MAX_PES=${GPU_TEST_MAX_PES:-none}"
[ "$shard_n" -eq 1 ] ||
    echo "gpu_test.sh: shard $shard: $shard_other case(s) belong to the other shards"
if [ -n "$filter" ] && [ "$cases" -eq 0 ]; then
    echo "gpu_test.sh: GPU_TEST_FILTER='$filter' matched no case" >&2
fi

# PEs of a manifest line.
line_pes() {
    local t a b
    read -r t a b <<<"$1"
    if [ "$t" = - ]; then echo "$a"; else echo "$b"; fi
}

# run_entry T A B: one case of the manifest, "BINARY NAME PES" or "- PES LABEL".
run_entry() {
    local t=$1 name=$2 pes=$3
    if [ "$t" = - ]; then
        local label=$3
        case "$label" in
        "ring_exchange, 1 PE") run_case "$label" 0 "$bin/ring_exchange" ;;
        "ring_exchange, nvsh run -n 2") run_case "$label" 0 "$nvsh" run -n 2 -- "$bin/ring_exchange" ;;
        # shellcheck disable=SC2086 # MPIRUN may carry flags
        "ring_exchange, mpirun -np 2") run_case "$label" 0 $mpirun -np 2 "$bin/ring_exchange" ;;
        "nvsh info") run_case "$label" 0 "$nvsh" info ;;
        # The Python package (scripts/python_gpu_test.sh: a skip where no Python has it).
        "python tensors, 1 PE") run_case "$label" 0 scripts/python_gpu_test.sh ;;
        "python tensors, nvsh run -n 2") run_case "$label" 0 "$nvsh" run -n 2 -- scripts/python_gpu_test.sh ;;
        "python torch.distributed, 1 PE") run_case "$label" 0 scripts/python_gpu_test.sh \
            python/tests/test_gpu_distributed.py ;;
        "python torch.distributed, nvsh run -n 2") run_case "$label" 0 "$nvsh" run -n 2 -- \
            scripts/python_gpu_test.sh python/tests/test_gpu_distributed.py ;;
        esac
    elif [ "$pes" -eq 1 ]; then
        run_case "$(basename "$t") $name" 1 "$t" --ignored --exact "$name" --test-threads=1
    elif [ "$pes" -le "$gpus" ]; then
        run_case "$(basename "$t") $name [$pes PEs]" "$pes" "$nvsh" run -n "$pes" -- "$t" --ignored --exact "$name" --test-threads=1
    elif [ "$gpus" -gt 1 ] && [ $((pes % gpus)) -eq 0 ]; then
        # More PEs than GPUs, the same number on each (local rank % GPUs).
        local all
        all=$(seq -s, 0 $((gpus - 1)))
        run_case "$(basename "$t") $name [$pes PEs on $gpus GPUs]" "$pes" "$nvsh" run -n "$pes" --gpus "$all" -- "$t" --ignored --exact "$name" --test-threads=1
    else
        # More PEs than GPUs: all on GPU 0 (puts and signals work with several PEs per GPU).
        run_case "$(basename "$t") $name [$pes PEs on GPU 0]" "$pes" "$nvsh" run -n "$pes" --gpus 0 -- "$t" --ignored --exact "$name" --test-threads=1
    fi
}

# run_lines FILE: the cases of FILE (manifest lines) one after another. Read on fd 3: the
# cases get /dev/null as stdin.
run_lines() {
    local t a b
    while read -r t a b <&3; do
        run_entry "$t" "$a" "$b"
    done 3<"$1"
}

if [ "$parallel" = 1 ] && [ "$gpus" -ge 2 ]; then
    later=$logdir/lane_later.lines
    : >"$later"
    widths=()
    while read -r line; do
        w=$(line_pes "$line")
        if [ "$w" -gt "$gpus" ]; then
            echo "$line" >>"$later"
        else
            echo "$line" >>"$logdir/lane_width_$w.lines"
            [[ " ${widths[*]} " == *" $w "* ]] || widths+=("$w")
        fi
    done <"$manifest"
    [ ${#widths[@]} -eq 0 ] || mapfile -t widths < <(printf '%s\n' "${widths[@]}" | sort -n)
    for w in "${widths[@]}"; do
        lanes=$((gpus / w))
        echo "gpu_test.sh: cases of $w PE(s): $lanes at a time"
        pids=()
        for ((k = 0; k < lanes; k++)); do
            awk -v n="$lanes" -v k="$k" 'NR % n == k' "$logdir/lane_width_$w.lines" \
                >"$logdir/lane_${w}_$k.lines"
            # This lane's GPUs first, the others after them (still visible: a test may use a
            # second GPU of its own).
            rotated=("${gpu_ids[@]:$((k * w))}" "${gpu_ids[@]:0:$((k * w))}")
            (
                IFS=,
                export CUDA_VISIBLE_DEVICES="${rotated[*]}"
                unset IFS
                results=$results_dir/lane_${w}_$k.txt
                run_lines "$logdir/lane_${w}_$k.lines"
            ) >"$logdir/lane_${w}_$k.out" 2>&1 &
            pids+=($!)
        done
        for p in "${pids[@]}"; do
            wait "$p"
        done
        for ((k = 0; k < lanes; k++)); do
            cat "$logdir/lane_${w}_$k.out"
        done
    done
    run_lines "$later"
else
    run_lines "$manifest"
fi

# The verdicts of every lane, and of the earlier run; a case with two keeps its later one.
declare -A verdict_of=() why_of=()
order=()
while IFS=$'\t' read -r verdict name why; do
    [ -n "$name" ] || continue
    [ -n "${verdict_of[$name]+x}" ] || order+=("$name")
    verdict_of[$name]=$verdict
    why_of[$name]=$why
done < <(cat "$earlier" "$results_dir"/*.txt 2>/dev/null)
for name in "${order[@]}"; do
    why=${why_of[$name]}
    case "${verdict_of[$name]}" in
    PASS) passed=$((passed + 1)) ;;
    SKIP)
        skipped=$((skipped + 1))
        skips+=("$name: $why")
        ;;
    FAIL)
        failed=$((failed + 1))
        failures+=("$name ($why)")
        ;;
    esac
done

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
