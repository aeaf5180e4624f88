# Shared by the script tests (sourced): ROOT (the repository), WORK (a scratch folder removed
# on exit); fail MESSAGE marks the running test failed; expect_out checks a checker's output; run_tests runs every function named t_*
# of the caller, prints "ok" or "FAIL" per test and exits non-zero if any failed.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FAILED=0

fail() {
    echo "FAIL: $*"
    FAILED=1
}

# expect_out PATTERN WHAT: the checker's output ($WORK/out) has a line matching PATTERN, else
# the test fails with WHAT and the output.
expect_out() {
    grep -q "$1" "$WORK/out" || fail "$2: $(cat "$WORK/out")"
}

run_tests() {
    local t before
    for t in $(declare -F | awk '{print $3}' | grep '^t_'); do
        before=$FAILED
        FAILED=0
        "$t"
        if [ $FAILED = 0 ]; then echo "ok   $t"; else echo "FAIL $t"; fi
        FAILED=$((before | FAILED))
    done
    exit $FAILED
}
