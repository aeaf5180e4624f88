#!/usr/bin/env bash
# The project's test command, and exactly what CI runs (.ci/run): installs what the build needs
# (scripts/setup_env.sh, arguments passed on), then formatting, the scripts' tests, the layer
# and named-path checks, lints, the CPU-side tests (doc tests included), which must pass at
# least as many tests as .ci/min_tests says (scripts/test_floor.sh), the Python package's tests
# (scripts/python_check.sh) and the API docs.
# Tests that need GPUs are #[ignore]d here; scripts/gpu_test.sh runs them on a GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for tool in cargo rustfmt cargo-clippy; do
    command -v "$tool" >/dev/null || {
        echo "check.sh: error: $tool not found: install Rust 1.85+ with rustup, plus the" \
            "rustfmt and clippy components (rustup component add rustfmt clippy)" >&2
        exit 1
    }
done

scripts/setup_env.sh "$@"
# The env file is in the prefix the set-up just used: --prefix DIR if given, else .deps.
prefix=.deps
while [ $# -gt 0 ]; do
    case "$1" in
    --prefix) prefix=${2:-}; shift ;;
    --prefix=*) prefix=${1#*=} ;;
    esac
    shift
done
# shellcheck source=/dev/null
source "$prefix/env.sh"
# Disk: a full debug build of every test and example holds about 8 GB, most of it debug info
# and incremental state, and a CI run once died of a full disk. Line tables keep backtraces'
# file:line; incremental state buys nothing on a one-shot build. A caller's own setting wins.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"

cargo fmt --all -- --check
# The set-up and check scripts themselves, with stubs (no network, root or GPU). That test runs
# a copy of this script without its tests/ folder: there it is skipped, not recursed into.
if [ -f scripts/tests/setup_scripts_test.sh ]; then
    bash scripts/tests/setup_scripts_test.sh
    bash scripts/tests/imports_test.sh
    bash scripts/tests/paths_test.sh
    bash scripts/tests/test_names_test.sh
fi
# The library's layers and no import cycle in any crate, and every repository path that the
# docs and comments name exists (both absent from that copy too).
if [ -f scripts/imports.py ]; then
    python3 scripts/imports.py
fi
if [ -f scripts/paths.py ]; then
    python3 scripts/paths.py
fi
# Every GPU test a script names with --exact exists (a rename is found here, not on a GPU).
if [ -f scripts/test_names.py ]; then
    python3 scripts/test_names.py
fi
cargo clippy --workspace --all-targets --all-features -- -D warnings
# cargo reports success however few tests ran: count them against the floor in .ci/min_tests.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"
scripts/test_floor.sh "$log"
# The Python package (python/): maturin and pytest from PyPI in a venv, the package built there,
# its CPU tests run (absent from the set-up test's copy of this script, like the checks above).
if [ -f scripts/python_check.sh ]; then
    scripts/python_check.sh
fi
# The library's API docs, with the write-ups of docs/ that its modules include: no warnings
# (every intra-doc link resolves).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p nvshmem
