"""GPU cases of the torch.distributed backend "nvsh": every collective it has against a CPU
reference with outputs poisoned first, and a few DistributedDataParallel steps against a
single-process run on the whole batch. One process per PE:

    NVSHMEM_RS_GPU_TESTS=1 nvsh run -n 2 -- python -m pytest -q -rs -p no:cacheprovider \\
        python/tests/test_gpu_distributed.py

(one PE: the same without `nvsh run -n 2 --`). The backend holds the runtime on a thread of its
own (DDP's backward calls it from autograd's thread), so these tests never call nv.init()
themselves. Elsewhere they skip and say why."""

import pytest

import nvshmem_rs as nv
from conftest import skip_unless_gpu_run, torch_with_cuda

skip_unless_gpu_run(__file__)

POISON = 77.0


@pytest.fixture(scope="module")
def env():
    torch = torch_with_cuda()
    import torch.distributed as dist

    import nvshmem_rs.distributed as nvd

    rank, size = nvd.runtime_call(nv.rank), nvd.runtime_call(nv.world_size)
    torch.cuda.set_device(nvd.runtime_call(nv.device))
    dist.init_process_group(backend="nvsh", store=nvd.default_store(size), rank=rank,
                            world_size=size)
    assert dist.get_backend() == "nvsh"
    assert (dist.get_rank(), dist.get_world_size()) == (rank, size)
    yield torch, dist
    torch.cuda.synchronize()
    dist.destroy_process_group()


def values(torch, rank, n, dtype):
    """PE `rank`'s input: small integers, exact in every dtype, different on every PE."""
    return (torch.arange(n, dtype=torch.int64) % 7 + 1 + rank).to(dtype)


def poisoned(torch, n, dtype):
    return torch.full((n,), POISON, dtype=dtype, device="cuda")


def close(torch, got, expected, rtol=0.0):
    torch.cuda.current_stream().synchronize()
    torch.testing.assert_close(got.detach().cpu().double(), expected.double(), rtol=rtol,
                               atol=0)


@pytest.mark.parametrize("op", ["SUM", "AVG", "MAX"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_all_reduce(env, op, dtype):
    torch, dist = env
    dt = getattr(torch, dtype)
    world, me, n = dist.get_world_size(), dist.get_rank(), 1000
    x = values(torch, me, n, dt).cuda()
    dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
    stack = torch.stack([values(torch, p, n, torch.float64) for p in range(world)])
    expected = {"SUM": stack.sum(0), "AVG": stack.mean(0), "MAX": stack.max(0).values}[op]
    close(torch, x, expected, rtol=1e-2 if dtype == "bfloat16" else 1e-6)


def test_all_reduce_async_work_orders_later_work(env):
    torch, dist = env
    world, me, n = dist.get_world_size(), dist.get_rank(), 4096
    x = values(torch, me, n, torch.float32).cuda()
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    x.mul_(2)
    expected = 2 * sum(values(torch, p, n, torch.float64) for p in range(world))
    close(torch, x, expected)
    assert work.is_completed()


def test_all_gather_into_tensor(env):
    torch, dist = env
    world, me, n = dist.get_world_size(), dist.get_rank(), 300
    out = poisoned(torch, world * n, torch.float32)
    dist.all_gather_into_tensor(out, values(torch, me, n, torch.float32).cuda())
    close(torch, out, torch.cat([values(torch, p, n, torch.float64) for p in range(world)]))


def test_all_gather_into_a_list(env):
    torch, dist = env
    world, me, n = dist.get_world_size(), dist.get_rank(), 300
    outs = [poisoned(torch, n, torch.int64).view(3, 100) for _ in range(world)]
    dist.all_gather(outs, values(torch, me, n, torch.int64).cuda().view(3, 100))
    for p, o in enumerate(outs):
        close(torch, o.view(-1), values(torch, p, n, torch.float64))


@pytest.mark.parametrize("op", ["SUM", "MAX"])
def test_reduce_scatter_tensor(env, op):
    torch, dist = env
    world, me, n = dist.get_world_size(), dist.get_rank(), 300
    out = poisoned(torch, n, torch.float32)
    dist.reduce_scatter_tensor(out, values(torch, me, world * n, torch.float32).cuda(),
                               op=getattr(dist.ReduceOp, op))
    stack = torch.stack([values(torch, p, world * n, torch.float64) for p in range(world)])
    full = stack.sum(0) if op == "SUM" else stack.max(0).values
    close(torch, out, full[me * n:(me + 1) * n])


def test_all_to_all_single(env):
    torch, dist = env
    world, me, n = dist.get_world_size(), dist.get_rank(), 200
    out = poisoned(torch, world * n, torch.float32).view(world, n)
    dist.all_to_all_single(out, values(torch, me, world * n, torch.float32).cuda().view(world, n))
    expected = torch.cat([values(torch, s, world * n, torch.float64)[me * n:(me + 1) * n]
                          for s in range(world)])
    close(torch, out.view(-1), expected)
    # Equal splits spelt out are taken as well; uneven ones are refused before anything runs.
    out2 = poisoned(torch, world * n, torch.float32).view(world, n)
    dist.all_to_all_single(out2, values(torch, me, world * n, torch.float32).cuda()
                           .view(world, n), [1] * world, [1] * world)
    close(torch, out2.view(-1), expected)
    if world > 1:
        with pytest.raises(ValueError, match="equal splits only"):
            dist.all_to_all_single(out2, out, [world] + [0] * (world - 1), None)


def test_broadcast_from_every_root(env):
    torch, dist = env
    world, me, n = dist.get_world_size(), dist.get_rank(), 777
    for root in range(world):
        x = values(torch, me, n, torch.float32).cuda()
        dist.broadcast(x, src=root)
        close(torch, x, values(torch, root, n, torch.float64))


def test_reduce_to_every_root(env):
    torch, dist = env
    world, me, n = dist.get_world_size(), dist.get_rank(), 500
    expected = sum(values(torch, p, n, torch.float64) for p in range(world))
    for root in range(world):
        x = values(torch, me, n, torch.float32).cuda()
        dist.reduce(x, dst=root)
        if me == root:
            close(torch, x, expected)


def test_barrier(env):
    torch, dist = env
    for _ in range(3):
        dist.barrier()


def test_refusals(env):
    torch, dist = env
    x = torch.ones(4, device="cuda")
    with pytest.raises(ValueError, match="cannot reduce"):
        dist.all_reduce(x, op=dist.ReduceOp.BAND)
    with pytest.raises(ValueError, match="is on cpu"):
        dist.all_reduce(torch.ones(4))


def test_ddp_matches_one_process_on_the_whole_batch(env):
    torch, dist = env
    world, me, batch, steps = dist.get_world_size(), dist.get_rank(), 4, 5
    torch.manual_seed(1234)  # the same model and data on every PE
    init = torch.nn.Linear(8, 3)
    data = [(torch.randn(world * batch, 8), torch.randn(world * batch, 3)) for _ in range(steps)]

    ref = torch.nn.Linear(8, 3).cuda()
    ref.load_state_dict(init.state_dict())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for x, y in data:
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x.cuda()), y.cuda()).backward()
        ref_opt.step()

    model = torch.nn.Linear(8, 3).cuda()
    model.load_state_dict(init.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for x, y in data:
        mine = slice(me * batch, (me + 1) * batch)
        opt.zero_grad()
        # The mean over this PE's rows; DDP averages the gradients over PEs, which is the
        # gradient of the mean over the whole batch.
        torch.nn.functional.mse_loss(ddp(x[mine].cuda()), y[mine].cuda()).backward()
        opt.step()
    torch.cuda.synchronize()

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = torch.full((world * flat.numel(),), POISON, device="cuda")
    dist.all_gather_into_tensor(every, flat)
    every = every.view(world, -1).cpu()
    for p in range(world):
        assert torch.equal(every[p], every[0]), f"PE {p}'s parameters differ from PE 0's"
    for got, want in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), rtol=1e-5,
                                   atol=1e-6)
