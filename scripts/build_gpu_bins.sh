#!/usr/bin/env bash
# Builds release binaries for a GPU machine and copies them into one folder (default .gpu/bin):
# nvsh, the examples, and every test executable as test-<name>. scripts/gpu_test.sh runs them
# there; that machine needs the NVIDIA driver and the NVSHMEM host library, not cargo.
#   scripts/build_gpu_bins.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-.gpu/bin}
mkdir -p "$out"
[ -n "${NVSHMEM_HOME:-}" ] || { [ -f .deps/env.sh ] && source .deps/env.sh; }

cargo build --release --bins --examples
cp target/release/nvsh "$out/"
find target/release/examples -maxdepth 1 -type f -executable ! -name '*-*' -exec cp {} "$out/" \;
# Test executables carry a hash in their names; cargo reports them as JSON.
cargo test --release --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys, shutil, os
out = sys.argv[1]
for line in sys.stdin:
    msg = json.loads(line)
    exe = msg.get("executable")
    if msg.get("reason") == "compiler-artifact" and exe and msg["profile"]["test"]:
        name = msg["target"]["name"].replace("-", "_")
        shutil.copy(exe, os.path.join(out, "test-" + name))
' "$out"
ls "$out"
