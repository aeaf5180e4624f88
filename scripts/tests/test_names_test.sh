#!/usr/bin/env bash
# Tests of scripts/test_names.py on a fixture tree: tests a script names by --exact (on its
# line or after a backslash continuation) pass where tests/X.rs declares them (gpu_test! on one
# line or several, or a plain peN_ function); a renamed test, a changed PE count and a missing
# test file each fail, naming file:line; variables and comments are left alone.
# Run: bash scripts/tests/test_names_test.sh
set -uo pipefail

# shellcheck source=scripts/tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

fixture() {
    rm -rf "$WORK/t"
    mkdir -p "$WORK/t/tests" "$WORK/t/scripts"
    cat >"$WORK/t/tests/exchange.rs" <<'RS'
gpu_test!(2, every_exchange);
gpu_test!(
    4,
    lines_back_to_back
);
#[test]
#[ignore]
fn pe3_a_plain_one() {}
RS
    cat >"$WORK/t/scripts/san.sh" <<'SH'
#!/usr/bin/env bash
check a -- "$bin/test-exchange" --ignored --exact pe2_every_exchange --test-threads=1
check b -- "$bin/test-exchange" --ignored --exact \
    pe4_lines_back_to_back --test-threads=1
ar=("$bin/test-exchange" --exact pe3_a_plain_one)
# "$bin/test-gone" --exact pe2_commented_out
run_case x 1 "$t" --ignored --exact "$name"
SH
}

run() {
    TEST_NAMES_ROOT="$WORK/t" python3 "$ROOT/scripts/test_names.py" >"$WORK/out" 2>&1
}

t_named_tests_that_exist_pass() {
    fixture
    run || fail "clean tree: $(cat "$WORK/out")"
    expect_out "test_names: all 3 tests named by scripts exist" "clean tree: no verdict"
}

t_a_renamed_test_fails() {
    fixture
    sed -i 's/lines_back_to_back/lines_in_a_row/' "$WORK/t/tests/exchange.rs"
    run && fail "renamed test passed: $(cat "$WORK/out")"
    expect_out "scripts/san.sh:3: pe4_lines_back_to_back (not a test of tests/exchange.rs)" \
        "renamed test not named"
}

t_a_test_of_other_pes_fails() {
    fixture
    sed -i 's/gpu_test!(2, every_exchange)/gpu_test!(3, every_exchange)/' "$WORK/t/tests/exchange.rs"
    run && fail "PE count change passed: $(cat "$WORK/out")"
    expect_out "scripts/san.sh:2: pe2_every_exchange" "PE count change not named"
}

t_a_missing_test_file_fails() {
    fixture
    mv "$WORK/t/tests/exchange.rs" "$WORK/t/tests/exchanges.rs"
    run && fail "missing file passed: $(cat "$WORK/out")"
    expect_out "scripts/san.sh:2: test-exchange (no tests/exchange.rs)" "missing file not named"
}

run_tests
