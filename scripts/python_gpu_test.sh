#!/usr/bin/env bash
# The Python package's GPU tests (python/tests/test_gpu_tensors.py, or the file named) in this
# process, one PE, or as one PE of `nvsh run -n N -- scripts/python_gpu_test.sh [FILE]`;
# scripts/gpu_test.sh runs both, for each file. One file a run: NVSHMEM comes up once per process.
# The files: test_gpu_tensors.py, test_gpu_distributed.py, test_gpu_bindings.py and
# test_gpu_ddp_parity.py (each at 1, 2 and 4 PEs; cases that need a peer skip at 1).
#   scripts/python_gpu_test.sh [python/tests/test_gpu_distributed.py]
# Needs a Python with nvshmem_rs and PyTorch with CUDA installed: NVSHMEM_RS_PYTHON names it
# (default python3). Without one it prints `NVSH_TEST_SKIP: <reason>` and exits 0, which
# gpu_test.sh counts as a skip; a pytest run in which no test passed fails.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=${NVSHMEM_RS_PYTHON:-python3}
tests=${1:-python/tests/test_gpu_tensors.py}
[ -f "$tests" ] || { echo "python_gpu_test.sh: error: no test file $tests" >&2; exit 2; }
if ! why=$("$py" - <<'PY' 2>&1
import importlib.util, sys
missing = [m for m in ("nvshmem_rs", "torch", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit("no " + ", ".join(missing) + " in " + sys.executable)
import torch
if not torch.cuda.is_available():
    sys.exit("torch " + torch.__version__ + " sees no CUDA GPU")
PY
); then
    echo "NVSH_TEST_SKIP: python GPU tests: ${why:-$py not found} (install python/ and torch" \
        "into a Python and set NVSHMEM_RS_PYTHON to it)"
    exit 0
fi
log=$(mktemp)
NVSHMEM_RS_GPU_TESTS=1 "$py" -m pytest -q -rs -p no:cacheprovider \
    "$tests" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
# All skipped (a fixture that could not start) must not pass.
if [ "$rc" -eq 0 ] && ! grep -qE '[1-9][0-9]* passed' "$log"; then
    echo "python_gpu_test.sh: no test passed" >&2
    rc=1
fi
rm -f "$log"
exit "$rc"
