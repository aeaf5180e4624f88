"""GPU cases of the bindings beyond test_gpu_tensors.py: allgatherv, alltoallv, grouped
send/recv, pipeline channels, an allreduce captured in a CUDA graph and replayed, the errors
of these calls, and the data-parallel and pipeline examples. Values checked against a CPU
reference with outputs poisoned first. One process per PE:

    NVSHMEM_RS_GPU_TESTS=1 nvsh run -n 2 -- python -m pytest -q -rs -p no:cacheprovider \\
        python/tests/test_gpu_bindings.py

(also at 1 PE and under `nvsh run -n 4`; the cases that need a peer skip at 1 PE). Elsewhere
they skip and say why."""

import importlib.util
import pathlib

import pytest

import nvshmem_rs as nv
from conftest import skip_unless_gpu_run, torch_with_cuda

skip_unless_gpu_run(__file__)

POISON = 77.0
EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
KINDS = ["symmetric", "own"]


@pytest.fixture(scope="module")
def torch():
    torch = torch_with_cuda()
    nv.init()
    torch.cuda.set_device(nv.device())
    yield torch
    torch.cuda.synchronize()
    nv.finalize()


def values(torch, rank, n, salt=0):
    """PE `rank`'s data: small integers, exact in float32, different on every PE."""
    return ((torch.arange(n, dtype=torch.int64) * 3 + salt) % 11 + 1 + 100 * rank).float()


def buffer(torch, kind, n, every=None):
    """A float32 CUDA tensor of n elements, symmetric or torch's own, poisoned. A symmetric
    allocation is collective and of one size on every PE: `every` elements (default n), of
    which the first n are returned."""
    t = nv.empty(every or n, torch.float32)[:n] if kind == "symmetric" else \
        torch.empty(n, dtype=torch.float32, device="cuda")
    t.fill_(POISON)
    return t


def done(torch):
    torch.cuda.current_stream().synchronize()
    nv.check()


def needs_peers():
    if nv.world_size() < 2:
        pytest.skip("needs 2 PEs or more (nvsh run -n 2)")


@pytest.mark.parametrize("kind", KINDS)
def test_allgatherv_with_a_count_per_pe(torch, kind):
    me, world = nv.rank(), nv.world_size()
    counts = [100 * (r + 1) + r for r in range(world)]
    displs = [sum(counts[:r]) + 8 * r for r in range(world)]  # gaps between the parts
    total = displs[-1] + counts[-1] + 8
    nv.reserve_staging("allgatherv", 2 * 4 * total + 4096)
    src = buffer(torch, kind, counts[me], every=max(counts))
    src.copy_(values(torch, me, counts[me]))
    out = buffer(torch, kind, total)
    nv.allgatherv(src, out, counts, displs)
    done(torch)
    got = out.cpu()
    for r in range(world):
        assert torch.equal(got[displs[r]:displs[r] + counts[r]], values(torch, r, counts[r])), r
    # The gaps are left alone.
    assert float(got[displs[0] + counts[0]]) == POISON


@pytest.mark.parametrize("kind", KINDS)
def test_alltoallv_with_sizes_per_pair(torch, kind):
    me, world = nv.rank(), nv.world_size()
    size = lambda s, r: 50 + 7 * s + 3 * r  # noqa: E731  (elements PE s sends to PE r)
    send_counts = [size(me, r) for r in range(world)]
    recv_counts = [size(s, me) for s in range(world)]
    nv.reserve_staging("alltoallv", 4 * (sum(size(s, r) for s in range(world)
                                              for r in range(world))) * 2 + 4096 * world)
    most = max(max(sum(size(s, r) for r in range(world)) for s in range(world)),
               max(sum(size(s, r) for s in range(world)) for r in range(world)))
    src = buffer(torch, kind, sum(send_counts), every=most)
    src.copy_(values(torch, me, src.numel()))
    out = buffer(torch, kind, sum(recv_counts), every=most)
    nv.alltoallv(src, out, send_counts, recv_counts)
    done(torch)
    got, at = out.cpu(), 0
    for s in range(world):
        their = values(torch, s, sum(size(s, r) for r in range(world)))
        start = sum(size(s, r) for r in range(me))
        assert torch.equal(got[at:at + recv_counts[s]], their[start:start + size(s, me)]), s
        at += recv_counts[s]


@pytest.mark.parametrize("kind", KINDS)
def test_grouped_send_recv_around_a_ring(torch, kind):
    needs_peers()
    me, world = nv.rank(), nv.world_size()
    n = 3000
    nv.reserve_staging("grouped_p2p", 2 * (4 * n + 256) * 2)
    nxt, prev = (me + 1) % world, (me - 1) % world
    send = buffer(torch, kind, n)
    send.copy_(values(torch, me, n))
    recv = buffer(torch, kind, n)
    nv.grouped_p2p([("send", send, nxt), ("recv", recv, prev)])
    done(torch)
    assert torch.equal(recv.cpu(), values(torch, prev, n))


def test_channel_forward_and_back(torch):
    needs_peers()
    me, world = nv.rank(), nv.world_size()
    n = 4096
    # Collective: every PE makes both.
    fwd = nv.Channel(n, torch.float32, slots=2)
    bwd = nv.Channel(n, "f32", slots=2)
    assert (fwd.max_elems, fwd.slots, fwd.dtype) == (n, 2, "f32")
    if world % 2 == 0 or me < world - 1:
        peer = me ^ 1
        if me % 2 == 0:
            for k in range(5):  # more messages than slots: the sender waits on the GPU
                fwd.send(values(torch, me, n, k).cuda(), peer)
            for k in range(5):
                got = torch.full((n,), POISON, device="cuda")
                bwd.recv(got, peer)
                done(torch)
                assert torch.equal(got.cpu(), 2 * values(torch, me, n, k)), k
        else:
            for k in range(5):
                got = torch.full((n,), POISON, device="cuda")
                fwd.recv(got, peer)
                bwd.send(got * 2, peer)
    done(torch)
    fwd.check()
    bwd.check()
    with pytest.raises(TypeError, match="carries float32"):
        fwd.send(torch.zeros(4, dtype=torch.float64, device="cuda"), 0)
    with pytest.raises(ValueError, match="larger max_elems"):
        fwd.send(torch.zeros(n + 1, device="cuda"), 0)
    del fwd, bwd  # collective, same order on every PE


@pytest.mark.parametrize("kind", KINDS)
def test_allreduce_captured_in_a_cuda_graph(torch, kind):
    me, world = nv.rank(), nv.world_size()
    n = 10000
    x = buffer(torch, kind, n)
    x.zero_()
    nv.allreduce(x)  # first call outside capture: it makes the workspace (and staging)
    done(torch)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        nv.allreduce(x)
    for k in range(3):
        x.copy_(values(torch, me, n, k))
        graph.replay()
        done(torch)
        want = sum(values(torch, r, n, k) for r in range(world))
        assert torch.equal(x.cpu(), want), k


def test_the_tuner_times_our_algorithms_and_a_candidate_of_ours(torch):
    n = 1 << 16
    x, y = nv.zeros(n, torch.float32), nv.zeros(n, torch.float32)

    def torch_copy(stream):  # a candidate of the caller's: a torch op on the stream given
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            y.copy_(x)

    winner, times = nv.tune_allreduce(x, y, algos=["oneshot", "twoshot"],
                                      candidates={"copy": torch_copy}, warmup=2, runs=5)
    done(torch)
    assert set(times) == {"oneshot", "twoshot", "copy"}, times
    assert winner in times and all(t >= 0 for t in times.values()), times
    with pytest.raises(ValueError, match="symmetric tensors"):
        own = torch.zeros(n, device="cuda")
        nv.tune_allreduce(own, own)


def test_a_candidate_that_raises_raises_its_own_exception(torch):
    x, y = nv.zeros(1024, torch.float32), nv.zeros(1024, torch.float32)

    def broken(stream):
        raise KeyError("the candidate's own error")

    # Every PE raises at the same candidate, so no PE waits for another.
    with pytest.raises(KeyError, match="the candidate's own error"):
        nv.tune_allreduce(x, y, algos=[], candidates={"broken": broken}, warmup=0, runs=1)
    done(torch)


def test_collectives_over_a_team_of_the_even_pes(torch):
    me, world = nv.rank(), nv.world_size()
    size = (world + 1) // 2
    team = nv.split_strided(0, 2, size)  # collective over the world
    assert (team.size, team.start, team.stride) == (size, 0, 2)
    assert team.is_member == (me % 2 == 0)
    evens = range(0, world, 2)
    n = 1000
    # Symmetric tensors, made on every PE (collective) before the members' calls: a team
    # smaller than the world cannot grow a staging area for ordinary tensors at a call.
    x, y = nv.zeros(n, torch.float32), nv.zeros(n, torch.float32)
    src, out = nv.zeros(n, torch.float32), buffer(torch, "symmetric", size * n)
    x.copy_(values(torch, me, n))
    y.copy_(values(torch, me, n))
    src.copy_(values(torch, me, n))
    if team.is_member:
        assert team.rank == me // 2
        nv.allreduce(x, team=team)
        done(torch)
        assert torch.equal(x.cpu(), sum(values(torch, r, n) for r in evens))
        nv.broadcast(y, root=size - 1, team=team)  # a team rank: world PE 2 (size - 1)
        nv.allgather(src, out, team=team)
        nv.barrier(team=team)
        done(torch)
        assert torch.equal(y.cpu(), values(torch, 2 * (size - 1), n))
        assert torch.equal(out.cpu(), torch.cat([values(torch, r, n) for r in evens]))
    else:
        assert team.rank == -1
        with pytest.raises(nv.NvshmemError) as err:
            nv.allreduce(x, team=team)
        assert err.value.kind == "NotInTeam", err.value
    done(torch)
    nv.barrier_all()
    del team  # queued; freed (its workspaces, then the team) at the next collection point


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("method", ["topk", "gtopk", "oktopk"])
def test_the_sparse_allreduce_sums_what_every_pe_selected(torch, dtype, method):
    me, world = nv.rank(), nv.world_size()
    n, k = 4096, 64
    dt = getattr(torch, dtype)

    def grad(pe):  # k nonzeros: exactly what a top-k at density k/n selects
        g = torch.zeros(n, dtype=torch.float64)
        j = torch.arange(k)
        g[(j * 61 + pe * 7) % n] = (1 + j % 5 + pe).double()
        return g

    sp = nv.SparseAllreduce(n, method, density=k / n, dtype=dt, error_feedback=False)
    assert (sp.k, sp.length, sp.dtype) == (k, n, nv.dtype_from_torch(dt))
    out = torch.full((n,), POISON, dtype=dt, device="cuda")
    sp.run(grad(me).to(dt).cuda(), out)
    done(torch)
    want = sum(grad(p) for p in range(world))
    if method == "topk":  # every selected pair arrives: the exact sum
        assert torch.equal(out.cpu().double(), want)
    else:  # others may drop pairs (gTop-k keeps k globally); never invent any
        got = out.cpu().double()
        assert bool(((got == 0) | (got <= want + 1e-9)).all()), (got, want)
    with pytest.raises(ValueError, match="made for 4096"):
        sp.run(torch.zeros(n + 1, dtype=dt, device="cuda"))
    del sp  # queued; freed when every PE has released it, at a collection point


def test_a_registered_buffer_is_moved_as_symmetric_memory(torch):
    me, world = nv.rank(), nv.world_size()
    n = 1 << 20
    buf = nv.alloc(n, "f32", registered=True)  # collective: own VMM memory, registered
    x = torch.from_dlpack(buf)
    assert x.data_ptr() == buf.data_ptr() and bool((x == 0).all())
    for k in range(2):  # reused: the same buffer, new data
        x.copy_(values(torch, me, n, k))
        nv.allreduce(x)
        done(torch)
        assert torch.equal(x.cpu(), sum(values(torch, r, n, k) for r in range(world))), k
    y = nv.zeros(n, torch.float32)
    nv.allreduce(x, output=y[:n])  # registered in, symmetric out
    done(torch)
    del x, buf  # queued; unregistered and freed at the next collection point
    done(torch)


def test_configure_after_the_workspaces_are_made_raises(torch):
    x = nv.zeros(16, torch.float32)
    nv.allreduce(x)
    done(torch)
    with pytest.raises(ValueError, match="before it"):
        nv.configure(slot_bytes=nv.configure() + 4096)


def test_wrong_counts_raise_before_anything_runs(torch):
    x = nv.zeros(16, torch.float32)
    with pytest.raises(ValueError, match="one count per PE"):
        nv.allgatherv(x, x, [1] * (nv.world_size() + 1))
    with pytest.raises(ValueError, match='"send" or "recv"'):
        nv.grouped_p2p([("put", x, 0)])


def allreduce_works(torch):
    """An allocation (a collection point) and an allreduce on it, checked."""
    me, world = nv.rank(), nv.world_size()
    x = nv.zeros(4096, torch.float32)
    x.copy_(values(torch, me, 4096))
    nv.allreduce(x)
    done(torch)
    assert torch.equal(x.cpu(), sum(values(torch, r, 4096) for r in range(world)))


def test_frees_in_other_orders_on_other_pes(torch):
    nv.collect()
    before = nv.pending_releases()  # what some PE still holds (none, as the tests go)
    a, b = nv.alloc(1000), nv.zeros(2000, torch.float32)
    c = nv.alloc(3000, "bf16", registered=True)
    # Each PE drops in its own order: nothing is freed at a drop, only queued.
    if nv.rank() % 2 == 0:
        del a, b, c
    else:
        del c, b, a
    assert nv.pending_releases() == before + 3
    assert nv.collect() == 3  # every PE queued all three: freed in one order everywhere
    assert nv.pending_releases() == before
    allreduce_works(torch)


def test_what_only_some_pes_released_waits_for_the_others(torch):
    needs_peers()
    nv.collect()
    before = nv.pending_releases()
    x = nv.zeros(5000, torch.float32)
    if nv.rank() == 0:
        del x
    assert nv.collect() == 0  # PE 0 released it, the others hold it: kept everywhere
    assert nv.pending_releases() == before + (1 if nv.rank() == 0 else 0)
    allreduce_works(torch)  # allocations and collectives go on meanwhile
    # What allreduce_works dropped, which every PE released; x stays queued on PE 0 alone.
    assert nv.collect() == 1
    assert nv.pending_releases() == before + (1 if nv.rank() == 0 else 0)
    if nv.rank() != 0:
        del x
    assert nv.collect() == 1
    assert nv.pending_releases() == before


def test_a_cycle_collected_by_the_gc_on_one_pe_only(torch):
    import gc

    needs_peers()
    gc.collect()
    nv.collect()
    before = nv.pending_releases()
    gc.disable()
    try:
        class Holder:
            pass

        h = Holder()
        h.me = h  # a cycle: only the cyclic GC frees it
        h.buf = nv.zeros(1000, torch.float32)
        h.team = nv.split_strided(0, 1, nv.world_size())
        h.sparse = nv.SparseAllreduce(4096, "topk", density=1 / 64, team=h.team)
        h.channel = nv.Channel(256, torch.float32)
        del h
        if nv.rank() == 0:
            gc.collect()
        assert nv.collect() == 0  # PE 0 released four objects, the others none yet
        assert nv.pending_releases() == before + (4 if nv.rank() == 0 else 0)
        allreduce_works(torch)
        nv.barrier_all()  # a collection point too
        gc.collect()  # now every PE has released them
        assert nv.pending_releases() == before + 4
        # Freed newest first (the sparse allreduce before the team it runs over).
        assert nv.collect() == 4
    finally:
        gc.enable()
    allreduce_works(torch)


def test_a_buffer_released_on_another_thread_is_freed_too(torch):
    import threading

    nv.collect()
    before = nv.pending_releases()
    holder = [nv.alloc(1000)]
    t = threading.Thread(target=holder.clear)
    t.start()
    t.join()
    assert nv.pending_releases() == before + 1
    assert nv.collect() == 1
    allreduce_works(torch)


def test_memory_released_in_a_loop_is_reused(torch):
    # 32 x 64 MiB, more than the symmetric heap holds unless the released ones are freed:
    # each allocation frees the one before the last (released when x was rebound).
    x = None
    for i in range(32):
        x = nv.zeros(16 << 20, torch.float32)
        x.fill_(i)
    done(torch)
    del x
    assert nv.collect() == 2  # the last two: x's last value and the one before it


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_data_parallel_example(torch):
    ok, diff = load("data_parallel").run(steps=10)
    assert ok, diff


def test_the_pipeline_example(torch):
    if nv.world_size() % 2:
        pytest.skip("the pipeline pairs PEs: needs an even number (nvsh run -n 2)")
    ok, diff = load("pipeline").run(steps=5)
    assert ok, diff
