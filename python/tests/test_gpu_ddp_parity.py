"""GPU case: DDP over backend "nvsh" trains to the parameters DDP over NCCL reaches (50 steps,
same init and data; python/examples/ddp_parity.py says what is compared and why). One process
per PE, at 2 and 4 PEs:

    NVSHMEM_RS_GPU_TESTS=1 nvsh run -n 2 -- python -m pytest -q -rs -p no:cacheprovider \\
        python/tests/test_gpu_ddp_parity.py

Elsewhere it skips and says why."""

import importlib.util
import pathlib

import pytest

from conftest import skip_unless_gpu_run, torch_with_cuda

skip_unless_gpu_run(__file__)

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "ddp_parity.py"


@pytest.fixture(scope="module")
def parity():
    torch_with_cuda()
    spec = importlib.util.spec_from_file_location("ddp_parity", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # sets NVSHMEM_DISABLE_NCCL before the runtime starts
    nccl = mod.start()
    yield mod, nccl
    import torch
    import torch.distributed as dist

    torch.cuda.synchronize()
    dist.destroy_process_group()


def test_ddp_over_nvsh_matches_ddp_over_nccl(parity):
    mod, nccl = parity
    r = mod.compare(steps=mod.STEPS, nccl_group=nccl)
    print(r)
    assert r["nvsh_same_on_every_rank"], "the nvsh run left ranks with different parameters"
    assert r["nccl_same_on_every_rank"], "the NCCL run left ranks with different parameters"
    if r["world_size"] <= 2:
        # Each sum is of at most two terms: no order to differ in.
        assert r["equal"], r
    assert r["within_bound"], r
