#!/usr/bin/env bash
# Acceptance runs of nvsh-gpt on a GPU machine (2 GPUs for the pipeline runs):
#   scripts/gpt_acceptance.sh BIN_DIR DATA_FILE LOG_DIR [parity|shakespeare|throughput ...]
# BIN_DIR holds nvsh and nvsh-gpt (e.g. target/release), DATA_FILE is Tiny Shakespeare (any
# text works), LOG_DIR receives every run's JSON log (NAME.json) and output (NAME.out). The
# optional names pick checks (default: all three):
#   parity       PP=2 (gpipe and 1f1b) losses equal PP=1 losses within 1e-5 relative at each
#                of the first 20 steps (fp32, same seed and data; the Shakespeare model).
#   shakespeare  6 layers, width 384, 6 heads, context 256, 64 sequences/step on one GPU:
#                validation loss < 1.7 within 10 minutes (training stops at 540 s, leaving
#                time for start-up and the last validation; the whole run is timed too).
#   throughput   12 layers, width 768, 12 heads, context 1024, 8 micro-batches of 4: PP=2 on
#                two GPUs >= 1.7x the tokens/s of PP=1 on one GPU, transfer on the critical
#                path < 3% of the step.
# Environment: GPT_TS_FLAGS adds flags to the Shakespeare run (e.g. --tf32), GPT_TP_STEPS
# sets the throughput runs' steps (default 30), RUN_TIMEOUT bounds each run (default 900 s).
# Ends with one line per check and "N passed, N failed"; exit status 0 only if all passed.
set -uo pipefail

if [ $# -lt 3 ]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
bin=$1 data=$2 logs=$3
shift 3
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(parity shakespeare throughput)
gpt=$bin/nvsh-gpt nvsh=$bin/nvsh
for f in "$gpt" "$nvsh"; do
    [ -x "$f" ] || { echo "gpt_acceptance.sh: $f not found or not executable" >&2; exit 2; }
done
[ -r "$data" ] || { echo "gpt_acceptance.sh: cannot read $data" >&2; exit 2; }
mkdir -p "$logs"
limit=${RUN_TIMEOUT:-900}
results=() passed=0 failed=0

# record PASS|FAIL TEXT
record() {
    results+=("$1 $2")
    if [ "$1" = PASS ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    echo "$1 $2"
}

# train NAME PES ARGS...: one training run (PES=1 alone, else under nvsh run -n PES); output
# in LOG_DIR/NAME.out, JSON records in LOG_DIR/NAME.json. Returns the run's exit status.
train() {
    local name=$1 pes=$2
    shift 2
    local cmd=("$gpt" train --data "$data" --log-json "$logs/$name.json" "$@")
    [ "$pes" -eq 1 ] || cmd=("$nvsh" run -n "$pes" -- "${cmd[@]}")
    echo "=== $name: ${cmd[*]}"
    local start=$SECONDS
    timeout --kill-after=10 "$limit" "${cmd[@]}" >"$logs/$name.out" 2>&1
    local rc=$?
    echo "$name: exit $rc after $((SECONDS - start)) s (output in $logs/$name.out)"
    grep -E '^(\[[0-9]+\] )?(summary|step .*val loss|nvsh-gpt: error)' "$logs/$name.out" | tail -4
    return $rc
}

# value KEY SUMMARY_LINE: the number after KEY= in an `nvsh-gpt summary` line.
value() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

parity() {
    local common=(--steps 20 --warmup 5 --val-every 0 --val-batches 4 --sample-tokens 0 --seed 1234)
    local ok=1
    train parity_pp1 1 "${common[@]}" || ok=0
    for s in gpipe 1f1b; do
        train "parity_pp2_$s" 2 "${common[@]}" --pp 2 --schedule "$s" || ok=0
    done
    [ $ok -eq 1 ] || { record FAIL "parity: a training run failed (see $logs/parity_*.out)"; return; }
    for s in gpipe 1f1b; do
        local out
        out=$("$gpt" compare "$logs/parity_pp1.json" "$logs/parity_pp2_$s.json" --rel 1e-5 --steps 20)
        local rc=$?
        echo "$out"
        if [ $rc -eq 0 ]; then
            record PASS "parity $s: $(head -1 <<<"$out")"
        else
            record FAIL "parity $s: $(head -1 <<<"$out")"
        fi
    done
}

shakespeare() {
    local start=$SECONDS
    # shellcheck disable=SC2086 # GPT_TS_FLAGS is a list of flags
    train shakespeare 1 --layers 6 --width 384 --heads 6 --context 256 -b 16 -m 4 \
        --steps 2500 --lr 1e-3 --warmup 100 --weight-decay 0.1 --clip 1.0 \
        --val-every 100 --val-batches 20 --max-seconds 540 --print-every 50 ${GPT_TS_FLAGS:-}
    local rc=$? wall=$((SECONDS - start))
    [ $rc -eq 0 ] || { record FAIL "shakespeare: the run failed (exit $rc)"; return; }
    local s
    s=$("$gpt" summary "$logs/shakespeare.json" --val-below 1.7)
    echo "$s"
    local step loss at
    step=$(value first_val_below_step "$s") loss=$(value first_val_below_loss "$s")
    at=$(value first_val_below_elapsed_s "$s")
    if [ -n "$step" ] && [ "$step" != none ] && [ "$wall" -le 600 ]; then
        record PASS "shakespeare: val loss $loss < 1.7 at step $step, $at s into training; best $(value best_val_loss "$s"); whole run ${wall} s"
    else
        record FAIL "shakespeare: best val loss $(value best_val_loss "$s"), first below 1.7 at step ${step:-?}; whole run ${wall} s"
    fi
}

throughput() {
    local steps=${GPT_TP_STEPS:-30}
    local big=(--layers 12 --width 768 --heads 12 --context 1024 -b 4 -m 8 --steps "$steps"
        --warmup 10 --val-every 0 --val-batches 1 --sample-tokens 0 --print-every 5)
    local ok=1
    train throughput_pp1 1 "${big[@]}" || ok=0
    train throughput_pp2 2 "${big[@]}" --pp 2 || ok=0
    [ $ok -eq 1 ] || { record FAIL "throughput: a training run failed"; return; }
    local s1 s2
    s1=$("$gpt" summary "$logs/throughput_pp1.json" --skip 3)
    s2=$("$gpt" summary "$logs/throughput_pp2.json" --skip 3)
    echo "PP=1: $s1"
    echo "PP=2: $s2"
    local t1 t2 tr
    t1=$(value tok_s "$s1") t2=$(value tok_s "$s2") tr=$(value transfer_pct "$s2")
    local verdict
    verdict=$(awk -v a="$t1" -v b="$t2" -v t="$tr" 'BEGIN {
        r = b / a; printf "%s speedup %.2fx (%.0f vs %.0f tok/s), transfer %.2f%% of the step",
            (r >= 1.7 && t < 3.0) ? "PASS" : "FAIL", r, b, a, t }')
    record "${verdict%% *}" "throughput: ${verdict#* }; wait $(value wait_pct "$s2")%, bubble $(value bubble_pct "$s2")%"
}

for c in "${checks[@]}"; do
    case $c in
    parity | shakespeare | throughput) "$c" ;;
    *) echo "gpt_acceptance.sh: unknown check $c (parity, shakespeare, throughput)" >&2; exit 2 ;;
    esac
done
echo
printf '%s\n' "${results[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
