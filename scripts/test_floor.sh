#!/usr/bin/env bash
# Fails when a `cargo test` log shows fewer passed tests than the floor kept in .ci/min_tests,
# so that tests lost by a rename, a filter or a target that stopped building cannot go unseen
# (cargo reports success when it runs nothing).
#   scripts/test_floor.sh LOG
# Sums N of every "test result: ok. N passed; ..." line. Raise the floor when adding tests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log=${1:?usage: scripts/test_floor.sh CARGO_TEST_LOG}
floor=$(grep -E '^[0-9]+$' .ci/min_tests | head -n 1)
[ -n "$floor" ] || { echo "test_floor.sh: no number in .ci/min_tests" >&2; exit 1; }
ran=$(sed -nE 's/^test result: [A-Za-z]+\. ([0-9]+) passed;.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
if [ "$ran" -lt "$floor" ]; then
    echo "test_floor.sh: $ran tests passed, fewer than the floor of $floor (.ci/min_tests)" >&2
    exit 1
fi
echo "test_floor.sh: $ran tests passed (floor $floor, .ci/min_tests)"
