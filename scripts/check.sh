#!/usr/bin/env bash
# The project's test command, and exactly what CI runs (.ci/run): installs what the build needs
# (scripts/setup_env.sh, arguments passed on), then formatting, lints and the CPU-side tests.
# Tests that need GPUs are #[ignore]d here; scripts/gpu_test.sh runs them on a GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup_env.sh "$@"
# shellcheck source=/dev/null
source .deps/env.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
