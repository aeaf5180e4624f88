#!/usr/bin/env bash
# Builds release binaries for a GPU machine and copies them into one folder (default .gpu/bin):
# nvsh, nvsh-gpt (the training loop), the examples and every test executable of the workspace as
# test-<name>. scripts/gpu_test.sh runs them
# there; that machine needs the NVIDIA driver, the NVSHMEM host library of the same version and
# (for mpirun runs) Open MPI, but no cargo.
#   scripts/build_gpu_bins.sh [OUT_DIR]
# nvsh is built without MPI (it runs anywhere); the examples and tests with the `mpi` feature so
# that they also start under mpirun.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-.gpu/bin}
mkdir -p "$out"
if [ -z "${NVSHMEM_HOME:-}" ] && [ -f .deps/env.sh ]; then
    # shellcheck source=/dev/null
    source .deps/env.sh
fi

# Where cargo puts them: CARGO_TARGET_DIR if set (a second checkout building beside this one).
rel=${CARGO_TARGET_DIR:-target}/release
cargo build --release --workspace --bins
cp "$rel/nvsh" "$rel/nvsh-gpt" "$out/"
cargo build --release --workspace --features nvshmem/mpi --examples
find "$rel/examples" -maxdepth 1 -type f -executable ! -name '*-*' -exec cp {} "$out/" \;
# Test executables carry a hash in their names; cargo reports them as JSON.
cargo test --release --workspace --features nvshmem/mpi --no-run --message-format=json |
    python3 -c '
import json, sys, shutil, os
out = sys.argv[1]
for line in sys.stdin:
    msg = json.loads(line)
    exe = msg.get("executable")
    if msg.get("reason") == "compiler-artifact" and exe and msg["profile"]["test"]:
        shutil.copy(exe, os.path.join(out, "test-" + msg["target"]["name"].replace("-", "_")))
' "$out"
ls "$out"
