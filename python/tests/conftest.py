"""Helpers of the tests: init runs in a child interpreter with a chosen environment, since
NVSHMEM comes up once per process and the bootstraps read the environment; and the guard that
the GPU test files share (skip_unless_gpu_run, torch_with_cuda)."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

# Every variable the bootstraps read (src/bootstrap/mod.rs): removed from the child's
# environment, so that the runner's own launcher (CI under srun, say) cannot change a case.
LAUNCH_VARS = [
    "NVSH_RANK",
    "NVSH_LOCAL_RANK",
    "NVSH_WORLD_SIZE",
    "NVSH_LOCAL_WORLD_SIZE",
    "NVSH_UNIQUE_ID",
    "NVSH_BOOTSTRAP",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_LOCAL_RANK",
    "PMIX_RANK",
    "PMIX_NAMESPACE",
    "PMI_FD",
    "PMI_PORT",
    "PMI_JOBID",
    "NVSH_PMI",
    "NVSHMEM_BOOTSTRAP",
    "NVSHMEM_BOOTSTRAP_PMI",
    "NVSHMEM_BOOTSTRAP_PMI_PLUGIN",
    "NVSHMEM_BOOTSTRAP_PMI2_PLUGIN",
    "NVSHMEM_BOOTSTRAP_PMIX_PLUGIN",
    "MPI_LOCALRANKID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_STEP_NUM_TASKS",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
]

# The child prints one JSON line: what init (and the calls after it) did. A process that
# aborted prints nothing, which fails the test.
CHILD = r"""
import json, sys
import nvshmem_rs as nv
args = json.loads(sys.argv[1])
out = {}
try:
    nv.init(*args)
    out["ok"] = True
    out["rank"], out["world_size"] = nv.rank(), nv.world_size()
    nv.finalize()
    try:
        nv.init(*args)
        out["reinit"] = "ok"
    except nv.NvshmemError as err:
        out["reinit"] = err.kind
except Exception as err:
    out.update(ok=False, type=type(err).__name__, kind=getattr(err, "kind", None), message=str(err))
print("RESULT " + json.dumps(out))
"""


def run_init(env=None, args=()):
    """init(*args) in a child interpreter whose launcher variables are exactly `env`; returns
    the child's report (dict)."""
    child_env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    child_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(list(args))],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"the child exited with {proc.returncode} and no report (an abort?)\n"
        f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
    )
    return json.loads(lines[-1][len("RESULT "):])


def gpu_visible():
    """Whether this machine shows an NVIDIA GPU (nvidia-smi lists one)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


@pytest.fixture
def needs_gpu():
    if not gpu_visible():
        pytest.skip("needs an NVIDIA GPU (nvidia-smi -L lists none)")


@pytest.fixture
def needs_no_gpu():
    if gpu_visible():
        pytest.skip("checks init on a machine without a GPU; this one has one")


# The GPU test files (test_gpu_*.py) run in processes of their own, one per PE, with this set
# (scripts/python_gpu_test.sh sets it); in the CPU run beside the other tests they skip.
GPU_RUN_VAR = "NVSHMEM_RS_GPU_TESTS"


def skip_unless_gpu_run(test_file):
    """At the top of a GPU test file: skips the whole file unless GPU_RUN_VAR=1, saying how to
    run it."""
    name = pathlib.Path(test_file).name
    if os.environ.get(GPU_RUN_VAR) != "1":
        pytest.skip(f"GPU tests run in their own processes: {GPU_RUN_VAR}=1 nvsh run -n 2 -- "
                    f"python -m pytest python/tests/{name} (scripts/python_gpu_test.sh "
                    f"python/tests/{name})", allow_module_level=True)


def torch_with_cuda():
    """torch, where it is installed and sees a CUDA GPU; else the calling test or fixture
    skips (never passes)."""
    torch = pytest.importorskip("torch", reason="the GPU tests need PyTorch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU that torch sees")
    return torch
