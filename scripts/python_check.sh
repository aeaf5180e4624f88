#!/usr/bin/env bash
# The Python package's check (scripts/check.sh runs it, so CI does): a virtual environment with
# maturin and pytest from PyPI, the package built into it from python/ (maturin develop, the
# dev profile), then its CPU tests (python/tests/; those that need a GPU skip and say so).
#   scripts/python_check.sh
# Needs python3 with venv and the build's environment (scripts/setup_env.sh, then source its
# env.sh). The venv stays in the cargo target folder, so that a rerun skips the downloads.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v python3 >/dev/null || { echo "python_check.sh: error: python3 not found" >&2; exit 1; }
target=${CARGO_TARGET_DIR:-target}
venv=$target/python-venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || {
        echo "python_check.sh: error: python3 -m venv failed (on Debian/Ubuntu: apt-get install" \
            "python3-venv)" >&2
        exit 1
    }
fi
venv=$(cd "$venv" && pwd)
# Pinned below a major version each: a new major cannot change the check unseen. 1.9.4: the
# first maturin that sets PYO3_BUILD_EXTENSION_MODULE (python/Cargo.toml says why).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "maturin>=1.9.4,<2" "pytest>=7,<10"
VIRTUAL_ENV=$venv PATH="$venv/bin:$PATH" maturin develop --quiet --manifest-path python/Cargo.toml
# -rs: every skip with its reason; -p no:cacheprovider: nothing written into the source tree.
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider python/tests
