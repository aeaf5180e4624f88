"""The torch.distributed backend "nvsh" (nvshmem_rs.distributed) without a GPU: registration,
init_process_group, and what each collective hands the runtime or refuses. A fake runtime
stands in for NVSHMEM (one PE's results: inputs copied to outputs), and the group's device is
set to the CPU so that calls go through. Each case runs in a child interpreter: torch must not
be loaded into the interpreter of the other tests (they check that nvshmem_rs does not import
it), and torch.distributed's default group is per process. They skip where torch is absent."""

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch (CPU build is enough)")

PREAMBLE = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
import torch.distributed as dist
import nvshmem_rs as nv
import nvshmem_rs.distributed as nvd

class FakeRuntime:
    # What nvshmem_rs would do on one PE; every call is recorded by name and arguments.
    def __init__(self, who):
        self.who, self.calls = who, []

    def call(self, fn, *args):
        if fn is nvd._whoami:
            return self.who
        self.calls.append([fn.__name__] + [a if isinstance(a, (int, str, type(None)))
                                           else "tensor" for a in args])
        if fn.__name__ in ("allgather", "alltoall"):
            args[1].view(-1)[: args[0].numel()].copy_(args[0].view(-1))
        if fn.__name__ == "reduce_scatter":
            args[1].view(-1).copy_(args[0].view(-1)[: args[1].numel()])

def start(who, rank=None, size=None, **kw):
    rt = nvd._runtime = FakeRuntime(who)
    store = dist.HashStore()
    dist.init_process_group(backend="nvsh", store=store,
                            rank=who[0] if rank is None else rank,
                            world_size=who[1] if size is None else size, **kw)
    return rt

def on_cpu():
    # The group's device as the CPU, and stream 0: the calls then run without a GPU.
    pg = dist.distributed_c10d._get_default_group()
    pg._device = torch.device("cpu")
    pg._stream = lambda: 0
    return pg

def refused(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except (ValueError, TypeError, RuntimeError) as err:
        return type(err).__name__ + ": " + str(err)
    return None

out = {}
"""


def run_child(body):
    code = PREAMBLE + textwrap.dedent(body) + '\nprint("RESULT " + json.dumps(out))\n'
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"the child exited with {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.skipif(HAS_TORCH, reason="checks the import error where torch is absent")
def test_without_torch_the_backend_says_it_needs_torch():
    code = ("import sys, nvshmem_rs\n"
            "try:\n    import nvshmem_rs.distributed\n"
            "except ImportError as err:\n    print('ERR', err)\n"
            "print('torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ERR nvshmem_rs.distributed is a torch.distributed backend and needs PyTorch" \
        in proc.stdout


def test_importing_the_package_does_not_import_the_backend():
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys, nvshmem_rs; print('nvshmem_rs.distributed' in sys.modules, "
         "'torch' in sys.modules)"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


@needs_torch
def test_registration_and_init_process_group():
    out = run_child("""
        nvd.register()  # again: a no-op
        out["listed"] = "nvsh" in dist.Backend.backend_list
        out["attr"] = dist.Backend.NVSH
        out["cuda_default"] = dist.Backend.default_device_backend_map.get("cuda")
        start((0, 1, 0))
        out["backend"] = dist.get_backend()
        out["rank"], out["size"] = dist.get_rank(), dist.get_world_size()
        out["pg"] = type(dist.distributed_c10d._get_default_group()).__name__
        out["name"] = dist.distributed_c10d._get_default_group().name()
        dist.destroy_process_group()
        out["destroyed"] = not dist.is_initialized()
    """)
    assert out == {"listed": True, "attr": "nvsh", "cuda_default": "nccl", "backend": "nvsh",
                   "rank": 0, "size": 1, "pg": "NvshProcessGroup", "name": "nvsh",
                   "destroyed": True}


@needs_torch
def test_the_helper_takes_rank_and_size_from_the_runtime():
    out = run_child("""
        nvd._runtime = FakeRuntime((0, 1, 0))
        nvd.init_process_group()
        out["backend"], out["size"] = dist.get_backend(), dist.get_world_size()
    """)
    assert out == {"backend": "nvsh", "size": 1}


@needs_torch
def test_a_rank_or_size_other_than_the_runtimes_is_refused():
    out = run_child("""
        nvd._runtime = FakeRuntime((0, 2, 0))
        out["rank"] = refused(dist.init_process_group, backend="nvsh",
                              store=dist.HashStore(), rank=1, world_size=2)
        out["size"] = refused(dist.init_process_group, backend="nvsh",
                              store=dist.HashStore(), rank=0, world_size=3)
    """)
    assert "asked for rank 1 of 2, but this process is PE 0 of 2" in out["rank"]
    assert "rank=nvshmem_rs.rank()" in out["rank"]
    assert "asked for rank 0 of 3" in out["size"]


@needs_torch
def test_collectives_hand_the_runtime_their_arguments():
    out = run_child("""
        rt = start((1, 2, 0))
        on_cpu()
        t = torch.arange(4, dtype=torch.float32)
        for op in ["SUM", "AVG", "MAX", "MIN", "PRODUCT"]:
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        dist.broadcast(t, src=1)
        dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
        dist.all_gather_into_tensor(torch.empty(8), t)
        dist.reduce_scatter_tensor(torch.empty(2), t, op=dist.ReduceOp.MIN)
        dist.all_to_all_single(torch.empty(4), t)
        dist.all_to_all_single(torch.empty(4), t, [2, 2], [2, 2])
        w = dist.all_reduce(t, async_op=True)
        out["work_done"] = w.is_completed()
        out["future"] = [x.tolist() for x in w.get_future().value()]
        parts = [torch.full((4,), -1.0) for _ in range(2)]
        dist.all_gather(parts, t)
        out["gathered"] = parts[0].tolist()
        out["calls"] = rt.calls
    """)
    assert out["calls"] == [
        ["allreduce", "tensor", None, "sum", "auto", 0],
        ["allreduce", "tensor", None, "avg", "auto", 0],
        ["allreduce", "tensor", None, "max", "auto", 0],
        ["allreduce", "tensor", None, "min", "auto", 0],
        ["allreduce", "tensor", None, "prod", "auto", 0],
        ["broadcast", "tensor", None, 1, 0],
        ["reduce", "tensor", None, 0, "max", 0],
        ["allgather", "tensor", "tensor", 0],
        ["reduce_scatter", "tensor", "tensor", "min", 0],
        ["alltoall", "tensor", "tensor", 0],
        ["alltoall", "tensor", "tensor", 0],
        ["allreduce", "tensor", None, "sum", "auto", 0],
        ["allgather", "tensor", "tensor", 0],
    ]
    assert out["work_done"] is True and out["future"] == [[0.0, 1.0, 2.0, 3.0]]
    assert out["gathered"] == [0.0, 1.0, 2.0, 3.0]


@needs_torch
def test_what_the_backend_refuses():
    out = run_child("""
        rt = start((0, 2, 0))
        t = torch.ones(4)
        # Before the group's device is the CPU: a CPU tensor is refused.
        out["cpu"] = refused(dist.all_reduce, t)
        on_cpu()
        out["band"] = refused(dist.all_reduce, t, op=dist.ReduceOp.BAND)
        out["premul"] = refused(dist.all_reduce, t,
                                op=dist._make_nccl_premul_sum(2.0))
        out["uneven"] = refused(dist.all_to_all_single, torch.empty(4), t, [1, 3], [1, 3])
        out["uneven_out"] = refused(dist.all_to_all_single, torch.empty(4), t, [1, 3], None)
        out["rs_op"] = refused(dist.reduce_scatter_tensor, torch.empty(2), t,
                               op=dist.ReduceOp.BXOR)
        out["gather_count"] = refused(dist.all_gather, [torch.empty(4)] * 3, t)
        out["gather_size"] = refused(dist.all_gather, [torch.empty(4), torch.empty(5)], t)
        out["calls"] = rt.calls
    """)
    assert "is on cpu, but the nvsh backend runs on this PE's GPU, cuda:0" in out["cpu"]
    assert out["band"].startswith("ValueError: the nvsh backend cannot reduce with")
    assert "SUM, AVG, MAX, MIN and PRODUCT" in out["band"]
    assert "cannot reduce" in out["premul"]
    assert "equal splits only" in out["uneven"] and "[1, 3]" in out["uneven"]
    assert "equal splits only" in out["uneven_out"]
    assert "cannot reduce" in out["rs_op"]
    assert "expected 2 output tensors" in out["gather_count"]
    assert "every output must have the input's size" in out["gather_size"]
    assert out["calls"] == []  # nothing reached the runtime


@needs_torch
def test_ddp_steps_through_the_backend_on_one_pe():
    # The plumbing DDP needs (its C++ reducer calls allreduce, broadcast and allgather through
    # torch's trampoline and reads the Work's future): one PE, so DDP's gradients equal a
    # plain model's.
    out = run_child("""
        rt = start((0, 1, 0))
        on_cpu()
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        ref = torch.nn.Linear(4, 2)
        ref.load_state_dict(model.state_dict())
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for step in range(3):
            x = torch.randn(8, 4)
            for m, o in ((ddp, opt), (ref, ref_opt)):
                o.zero_grad()
                m(x).square().sum().backward()
                o.step()
        out["same"] = all(torch.allclose(a, b) for a, b in
                          zip(model.parameters(), ref.parameters()))
        out["kinds"] = sorted({c[0] for c in rt.calls})
    """)
    assert out["same"] is True
    assert "allreduce" in out["kinds"]


@needs_torch
def test_the_runtime_thread_runs_every_call_and_finalises_at_exit():
    # nv.init and the calls stand in for the runtime, recording the thread they ran on: the
    # backend's own, whichever thread called (DDP's backward calls from autograd's thread).
    code = PREAMBLE + textwrap.dedent("""
        import threading
        seen = []
        nv.init = lambda: seen.append("init " + threading.current_thread().name)
        nv.finalize = lambda: print("FINALIZED on " + threading.current_thread().name,
                                    flush=True)
        torch.cuda.set_device = lambda dev: None
        nv.device = lambda: 0
        def whoami():
            seen.append("whoami " + threading.current_thread().name)
            return 0, 1, 0
        nvd._whoami = whoami
        nvd.init_process_group()
        def boom():
            raise ValueError("raised on the runtime thread")
        out["error"] = refused(nvd.runtime_call, boom)
        other = threading.Thread(target=lambda: nvd.runtime_call(whoami), name="other")
        other.start()
        other.join()
        out["seen"] = seen
        print("RESULT " + json.dumps(out), flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    out = json.loads(next(l for l in lines if l.startswith("RESULT "))[len("RESULT "):])
    assert out["seen"] == ["init nvshmem_rs-backend"] + ["whoami nvshmem_rs-backend"] * 3
    assert out["error"] == "ValueError: raised on the runtime thread"
    # The thread ended after the main thread did, and finalised there (the package's own
    # atexit hook then calls finalize on the main thread, a no-op for the real runtime).
    ends = [l for l in lines if l.startswith("FINALIZED")]
    assert ends[0] == "FINALIZED on nvshmem_rs-backend"
    assert lines.index(ends[0]) > lines.index(next(l for l in lines if l.startswith("RESULT")))


@needs_torch
def test_a_runtime_that_cannot_start_raises_its_error(needs_no_gpu):
    out = run_child("""
        import threading
        try:
            nvd.init_process_group()
        except nv.NvshmemError as err:
            out["error"], out["kind"] = "NvshmemError", err.kind
        out["threads"] = threading.active_count()
    """)
    assert out["error"] == "NvshmemError" and out["kind"]
    assert out["threads"] == 1  # the runtime's thread ended with the error
