#!/usr/bin/env bash
# Runs every GPU test on a GPU machine and ends with one line "N passed, N failed".
#   scripts/gpu_test.sh [BIN_DIR]
# BIN_DIR holds what scripts/build_gpu_bins.sh made (default .gpu/bin); where cargo exists and
# BIN_DIR is missing, they are built first. Each test executable runs with --include-ignored,
# one test at a time (NVSHMEM allows one init per process, and tests share the GPUs).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${1:-.gpu/bin}
if [ ! -d "$bin" ] && command -v cargo >/dev/null; then
    scripts/build_gpu_bins.sh "$bin" || exit 1
fi
[ -d "$bin" ] || { echo "gpu_test.sh: no $bin; run scripts/build_gpu_bins.sh first" >&2; exit 1; }

passed=0 failed=0
record() { # name status
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "PASS $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi
}

for t in "$bin"/test-*; do
    [ -x "$t" ] || continue
    log=$(mktemp)
    "$t" --include-ignored --test-threads=1 >"$log" 2>&1
    rc=$?
    cat "$log"
    # Count the individual tests of this executable from libtest's summary line.
    summary=$(grep -E '^test result:' "$log" | tail -n 1)
    p=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$summary")
    f=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$summary")
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    if [ $rc -ne 0 ] && [ "${f:-0}" = 0 ]; then record "$(basename "$t") (exit $rc)" 1; fi
    rm -f "$log"
done

# The end-to-end binary on one PE.
"$bin/nvsh" info
record "nvsh info" $?

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
