"""GPU cases: symmetric tensors (DLPack) and the collectives on torch tensors, on every PE of the
job, values checked against a CPU reference with every output poisoned first. They need torch
with CUDA and run in processes of their own, one per PE (NVSHMEM comes up once per process, and
the CPU tests beside them need it down):

    NVSHMEM_RS_GPU_TESTS=1 nvsh run -n 2 -- python -m pytest -q -rs -p no:cacheprovider \\
        python/tests/test_gpu_tensors.py

(one PE: the same without `nvsh run -n 2 --`). Every PE runs the same tests in the same order,
as collectives need; elsewhere they skip and say why. Torch is imported only when they run."""

import gc

import pytest

import nvshmem_rs as nv
from conftest import skip_unless_gpu_run, torch_with_cuda

skip_unless_gpu_run(__file__)

LIBRARY_DTYPES = [name for name, _, _ in nv.dtypes()]
REDUCIBLE = [d for d in LIBRARY_DTYPES if d != "u8"]
# Relative tolerance against the float64 reference (values are small integers: sums are exact
# in every type; averages round).
RTOL = {"f32": 1e-6, "f64": 1e-12, "f16": 1e-3, "bf16": 1e-2}
KINDS = ["symmetric", "own"]
POISON = 77


@pytest.fixture(scope="module")
def torch():
    torch = torch_with_cuda()
    nv.init()
    torch.cuda.set_device(nv.device())
    yield torch
    torch.cuda.synchronize()
    _finalize_with_a_buffer_alive(torch)


def _finalize_with_a_buffer_alive(torch):
    """finalize() while a buffer is referenced: it warns, and the buffer refuses export."""
    kept = nv.alloc(4, "f32")
    with pytest.warns(RuntimeWarning, match="1 symmetric buffer"):
        nv.finalize()
    assert not kept.is_alive
    with pytest.raises(nv.NvshmemError) as err:
        kept.__dlpack__()
    assert err.value.kind == "Finalized"
    del kept  # must not free anything now (nor crash)
    gc.collect()


def tdtype(torch, name):
    return getattr(torch, nv.torch_dtype_name(name))


def values(torch, rank, n, name):
    """PE `rank`'s input: small integers, exact in every dtype, different on every PE."""
    return (torch.arange(n, dtype=torch.int64) % 7 + 1 + rank).to(tdtype(torch, name))


def as_f64(t):
    return t.detach().cpu().double()


def tensor(torch, kind, n, name):
    """A CUDA tensor of `n` elements, symmetric or torch's own, filled with POISON."""
    dtype = tdtype(torch, name)
    t = nv.empty(n, dtype) if kind == "symmetric" else torch.empty(n, dtype=dtype, device="cuda")
    t.copy_(torch.full((n,), POISON, dtype=torch.int64).to(dtype))
    return t


def loaded(torch, kind, host):
    t = tensor(torch, kind, host.numel(), nv.dtype_from_torch(host.dtype))
    t.copy_(host)
    return t


def done(torch):
    """Waits for the stream, then raises what a kernel recorded."""
    torch.cuda.current_stream().synchronize()
    nv.check()


# --- symmetric tensors ---------------------------------------------------------------------


@pytest.mark.parametrize("name", LIBRARY_DTYPES)
def test_zeros_is_a_zero_filled_cuda_tensor_on_this_pe(torch, name):
    t = nv.zeros((3, 5), tdtype(torch, name))
    assert t.is_cuda and t.device.index == nv.device()
    assert t.shape == (3, 5) and t.dtype == tdtype(torch, name) and t.is_contiguous()
    assert bool(t.cpu().view(torch.uint8).eq(0).all())


def test_the_tensor_is_the_buffer_without_a_copy(torch):
    buf = nv.alloc((2, 4), "i32")
    a, b = torch.from_dlpack(buf), torch.from_dlpack(buf)
    assert a.data_ptr() == b.data_ptr() == buf.data_ptr()
    assert (buf.shape, buf.dtype, buf.numel(), buf.nbytes) == ((2, 4), "i32", 8, 32)
    a.fill_(5)
    assert int(b.sum()) == 40


def test_the_memory_lives_while_a_tensor_over_it_does(torch):
    buf = nv.alloc(16, "f32")
    t = torch.from_dlpack(buf)
    del buf
    gc.collect()
    t.fill_(3)
    assert float(t.sum()) == 48.0


def test_capsules_of_both_dlpack_versions(torch):
    buf = nv.alloc(6, "bf16")
    legacy = buf.__dlpack__()
    assert type(legacy).__name__ == "PyCapsule"
    t = torch.utils.dlpack.from_dlpack(legacy)
    assert t.data_ptr() == buf.data_ptr() and t.dtype == torch.bfloat16
    versioned = buf.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(versioned)
    del versioned  # never consumed: its destructor releases it
    gc.collect()
    with pytest.raises(BufferError):
        buf.__dlpack__(copy=True)


# --- collectives ----------------------------------------------------------------------------


def reference(torch, op, parts):
    stack = torch.stack([p.to(torch.float64) for p in parts])
    if op == "sum":
        return stack.sum(0)
    if op == "max":
        return stack.max(0).values
    if op == "min":
        return stack.min(0).values
    if op == "prod":
        return stack.prod(0)
    return stack.sum(0) / len(parts)


def check(torch, got, expected, name):
    torch.testing.assert_close(as_f64(got), expected, rtol=RTOL.get(name, 0), atol=0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", REDUCIBLE)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_allreduce_every_dtype_and_op(torch, kind, name, op):
    n, world, me = 1000, nv.world_size(), nv.rank()
    x = loaded(torch, kind, values(torch, me, n, name))
    out = tensor(torch, kind, n, name)
    nv.allreduce(x, out, op=op)
    done(torch)
    expected = reference(torch, op, [values(torch, p, n, name) for p in range(world)])
    check(torch, out, expected, name)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("algo", ["auto", "oneshot", "twoshot", "ring", "rd"])
@pytest.mark.parametrize("n", [1, 1000, 600_000])
def test_allreduce_algorithms_in_place(torch, kind, algo, n):
    world, me = nv.world_size(), nv.rank()
    x = loaded(torch, kind, values(torch, me, n, "f32"))
    used = nv.allreduce(x, algo=algo)
    done(torch)
    assert used in ("oneshot", "twoshot", "ring", "rd") and (algo == "auto" or used == algo)
    check(torch, x, reference(torch, "sum", [values(torch, p, n, "f32") for p in range(world)]),
          "f32")


def test_allreduce_avg_truncates_integers(torch):
    world, me, n = nv.world_size(), nv.rank(), 100
    x = loaded(torch, "own", values(torch, me, n, "i32"))
    nv.allreduce(x, op="avg")
    done(torch)
    total = sum(values(torch, p, n, "i64") for p in range(world))
    check(torch, x, torch.div(total, world, rounding_mode="trunc").to(torch.float64), "i32")


def test_allreduce_on_a_side_stream(torch):
    world, me, n = nv.world_size(), nv.rank(), 4096
    x = loaded(torch, "own", values(torch, me, n, "f32"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        nv.allreduce(x)  # the wrapper passes the current stream: `side`
        x.mul_(2)
    side.synchronize()
    nv.check()
    expected = 2 * reference(torch, "sum", [values(torch, p, n, "f32") for p in range(world)])
    check(torch, x, expected, "f32")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", LIBRARY_DTYPES)
def test_broadcast_from_every_root(torch, kind, name):
    world, me, n = nv.world_size(), nv.rank(), 777
    for root in range(world):
        x = loaded(torch, kind, values(torch, me, n, name))
        out = tensor(torch, kind, n, name)
        nv.broadcast(x, out, root=root)
        nv.broadcast(x, root=root)  # in place
        done(torch)
        check(torch, out, as_f64(values(torch, root, n, name)), name)
        check(torch, x, as_f64(values(torch, root, n, name)), name)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["f32", "bf16", "i64"])
def test_reduce_to_every_root(torch, kind, name):
    world, me, n = nv.world_size(), nv.rank(), 500
    expected = reference(torch, "sum", [values(torch, p, n, name) for p in range(world)])
    for root in range(world):
        x = loaded(torch, kind, values(torch, me, n, name))
        out = tensor(torch, kind, n, name)
        nv.reduce(x, out, root=root)
        done(torch)
        if me == root:
            check(torch, out, expected, name)
        else:
            check(torch, out, torch.full((n,), float(POISON), dtype=torch.float64), name)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", LIBRARY_DTYPES)
def test_allgather(torch, kind, name):
    world, me, n = nv.world_size(), nv.rank(), 300
    x = loaded(torch, kind, values(torch, me, n, name))
    out = tensor(torch, kind, world * n, name)
    nv.allgather(x, out)
    done(torch)
    # Each part in float64 first: torch's CPU kernels lack some of the unsigned types.
    expected = torch.cat([values(torch, p, n, name).double() for p in range(world)])
    check(torch, out, expected, name)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", REDUCIBLE)
def test_reduce_scatter(torch, kind, name):
    world, me, n = nv.world_size(), nv.rank(), 300
    x = loaded(torch, kind, values(torch, me, world * n, name))
    out = tensor(torch, kind, n, name)
    nv.reduce_scatter(x, out)
    done(torch)
    full = reference(torch, "sum", [values(torch, p, world * n, name) for p in range(world)])
    check(torch, out, full[me * n:(me + 1) * n], name)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", LIBRARY_DTYPES)
def test_alltoall(torch, kind, name):
    world, me, n = nv.world_size(), nv.rank(), 200
    x = loaded(torch, kind, values(torch, me, world * n, name))
    out = tensor(torch, kind, world * n, name)
    nv.alltoall(x, out)
    done(torch)
    expected = torch.cat([values(torch, s, world * n, name)[me * n:(me + 1) * n].double()
                          for s in range(world)])
    check(torch, out, expected, name)


def test_barriers(torch):
    nv.barrier()
    nv.barrier_all()
    done(torch)


def test_a_shape_error_of_the_library_raises_with_its_text(torch):
    world = nv.world_size()
    x = torch.ones(4, device="cuda")
    out = torch.empty(world * 4 + 1, device="cuda")
    with pytest.raises(nv.NvshmemError, match="allgather") as err:
        nv.allgather(x, out)
    assert err.value.kind == "CollectiveShape"
    done(torch)


def test_a_tensor_of_another_gpu_is_refused(torch):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs a second GPU visible to this process")
    other = (nv.device() + 1) % torch.cuda.device_count()
    x = torch.ones(4, device=f"cuda:{other}")
    with pytest.raises(nv.NvshmemError, match=f"on cuda:{other}, but this PE runs on") as err:
        nv.allreduce(x, stream=0)
    assert err.value.kind == "WrongDevice"
