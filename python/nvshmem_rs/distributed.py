"""A torch.distributed backend over nvshmem_rs: `backend="nvsh"`.

    import torch.distributed as dist
    import nvshmem_rs.distributed as nvd     # registers the backend "nvsh"
    nvd.init_process_group()                 # rank and world size from the runtime
    dist.all_reduce(t)                        # on torch's current stream, as NCCL's calls

Start the job with `nvsh run -n N -- python train.py`: NVSHMEM bootstraps itself from that
launcher's environment, so the backend needs no store. dist.init_process_group(backend="nvsh",
...) works too, with any store or init_method, as long as its rank and world size are the
runtime's (nvshmem_rs.rank(), world_size()). Under torchrun (or any launch that gives torch a
store, without `nvsh run`), the backend brings NVSHMEM up through the store torch hands it, as
NCCL passes its unique ID: rank 0 makes the ID, the others read it there
(nvshmem_rs.init_with_store).

What runs: all_reduce (SUM, AVG, MAX, MIN, PRODUCT), broadcast, reduce, all_gather,
all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single with equal splits, barrier,
and so DistributedDataParallel. Everything else (other reduce ops, uneven splits, subgroups,
send/recv, CPU tensors) raises before anything runs. Each call enqueues its work on torch's
current stream of the tensors' device and returns a completed Work whose future carries CUDA
events: later work on that stream, or on a stream that waits for the work, sees the results.

The runtime stays on one thread (nvshmem_rs's rule), while DDP issues its all_reduce from
autograd's backward thread. So when no thread has called nvshmem_rs.init() yet, the backend
starts the runtime on a thread of its own and runs every call there; the calling thread only
names the stream. Where init() was called first, the backend runs on that thread and refuses
calls from others (DDP on CUDA then fails: create the process group first).

Importing this module imports torch; `import nvshmem_rs` alone does not.
"""

import hashlib
import os
import queue
import tempfile
import threading

try:
    import torch
except ImportError as err:
    raise ImportError(
        "nvshmem_rs.distributed is a torch.distributed backend and needs PyTorch: install torch "
        "(with CUDA) into this Python; the rest of nvshmem_rs works without it"
    ) from err
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

import nvshmem_rs as nv

BACKEND = "nvsh"

__all__ = [
    "BACKEND", "NvshProcessGroup", "default_store", "init_process_group", "register",
    "runtime_call",
]

# torch's reduce ops that the library has, by its names; the others are refused.
_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.PRODUCT: "prod",
}


def _op_name(op):
    """The library's name of a torch ReduceOp (or RedOpType); ValueError for the others."""
    kind = getattr(op, "op", op)  # a ReduceOp instance carries its RedOpType in .op
    for known, name in _OPS.items():
        if kind == known:
            return name
    raise ValueError(
        f"the nvsh backend cannot reduce with {kind}: it has SUM, AVG, MAX, MIN and PRODUCT "
        "(BAND, BOR, BXOR and PREMUL_SUM are not there); use one of those"
    )


class _Runtime:
    """Where nvshmem_rs's calls run: this thread when it holds the runtime already, else a
    thread of the backend's own that calls init() and then runs the calls given to it."""

    def __init__(self, start=None):
        """`start` brings the runtime up on the backend's thread: nv.init (the default, from
        the launcher's environment) or nv.init_with_store over torch's store."""
        self._jobs = None
        if nv.is_initialized():
            self._thread = threading.current_thread()
            return
        self._jobs = queue.SimpleQueue()
        started = {}
        ready = threading.Event()
        # Not a daemon: its end finalises NVSHMEM (the thread-local handle drops), which must
        # happen before the interpreter goes. It ends once the main thread has ended.
        self._thread = threading.Thread(
            target=self._serve, args=(start or nv.init, started, ready),
            name="nvshmem_rs-backend"
        )
        self._thread.start()
        ready.wait()
        if "error" in started:
            self._thread.join()
            raise started["error"]

    def _serve(self, start, started, ready):
        try:
            start()
            torch.cuda.set_device(nv.device())
        except BaseException as err:  # handed to the creating thread, which raises it
            started["error"] = err
            ready.set()
            return
        ready.set()
        main = threading.main_thread()
        while True:
            try:
                job = self._jobs.get(timeout=0.2)
            except queue.Empty:
                # threading's shutdown marks the main thread stopped before it joins the
                # others: the signal to finalise and let the interpreter end.
                if not main.is_alive():
                    break
                continue
            fn, args, box, done = job
            try:
                box["value"] = fn(*args)
            except BaseException as err:
                box["error"] = err
            done.set()
        # A call that came in while the main thread ended must not wait forever.
        while True:
            try:
                _, _, box, done = self._jobs.get_nowait()
            except queue.Empty:
                break
            box["error"] = RuntimeError("the nvsh backend's runtime thread ended at exit")
            done.set()
        # The process is ending: errors here have no one to go to.
        try:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass
        try:
            nv.finalize()
        except Exception:  # noqa: BLE001
            pass

    def call(self, fn, *args):
        """fn(*args) on the runtime's thread; its result, or its exception raised here."""
        if self._jobs is None or threading.current_thread() is self._thread:
            try:
                return fn(*args)
            except nv.NvshmemError as err:
                if err.kind == "WrongThread":
                    raise RuntimeError(
                        f"{err} (the nvsh backend was created after nvshmem_rs.init() on "
                        f"thread {self._thread.name}, and this call came from "
                        f"{threading.current_thread().name}, as DDP's backward does: create "
                        "the process group before calling nvshmem_rs.init(), and the backend "
                        "runs every call on a thread of its own)"
                    ) from err
                raise
        if not self._thread.is_alive():
            raise RuntimeError("the nvsh backend's runtime thread has ended (interpreter exit)")
        box, done = {}, threading.Event()
        self._jobs.put((fn, args, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box.get("value")


_runtime = None
_runtime_lock = threading.Lock()


def _get_runtime(start=None):
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = _Runtime(start)
        return _runtime


def _from_nvsh_run():
    """Whether `nvsh run` (or another holder of its variables) started this process."""
    return "NVSH_RANK" in os.environ


def _store_start(store, rank, size):
    """How the backend brings NVSHMEM up from torch's store (torchrun and other env://
    launches): None where the runtime needs none (already up, `nvsh run`, one process)."""
    if _runtime is not None or nv.is_initialized() or _from_nvsh_run() or size == 1:
        return None
    return lambda: nv.init_with_store(store, rank=rank, world_size=size)


def runtime_call(fn, *args):
    """fn(*args) where the backend runs nvshmem_rs's calls (starting the runtime there if
    needed): e.g. runtime_call(nvshmem_rs.zeros, 1024) for a symmetric tensor while the
    backend holds the runtime on its own thread."""
    return _get_runtime().call(fn, *args)


def _whoami():
    return nv.rank(), nv.world_size(), nv.device()


def _one(tensors, what):
    """The single tensor of a list (torch passes lists; the backend takes one per call)."""
    if isinstance(tensors, torch.Tensor):
        return tensors
    tensors = list(tensors)
    if len(tensors) != 1:
        raise ValueError(
            f"{what}: the nvsh backend takes one tensor per call (one GPU per process), got "
            f"{len(tensors)}"
        )
    return tensors[0]


class NvshProcessGroup(dist.ProcessGroup):
    """torch.distributed's process group over every PE of the nvshmem_rs job."""

    def __init__(self, rank, size, start=None):
        super().__init__(rank, size)
        self._rt = _get_runtime(start)
        pe, npes, dev = self._rt.call(_whoami)
        if (rank, size) != (pe, npes):
            raise ValueError(
                f"the nvsh backend was asked for rank {rank} of {size}, but this process is PE "
                f"{pe} of {npes}: it runs over every PE of the job, so pass "
                "rank=nvshmem_rs.rank() and world_size=nvshmem_rs.world_size() (or use "
                "nvshmem_rs.distributed.init_process_group()); subgroups are not there yet"
            )
        self._rank, self._size = rank, size
        self._device = torch.device("cuda", dev)

    def getBackendName(self):
        return BACKEND

    def __repr__(self):
        return f"NvshProcessGroup(rank={self._rank}, size={self._size})"

    # --- helpers ------------------------------------------------------------------------

    def _check(self, what, *tensors):
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
            if t.device != self._device:
                raise ValueError(
                    f"{what}: the tensor is on {t.device}, but the nvsh backend runs on this "
                    f"PE's GPU, {self._device}: move it there first (CPU tensors are not "
                    "supported)"
                )

    def _stream(self):
        # Named on the calling thread: torch's current stream is per thread.
        return torch.cuda.current_stream(self._device).cuda_stream

    def _run(self, fn, *args):
        return self._rt.call(fn, *args)

    def _done(self, result):
        """A Work that is complete: the collective is on the stream already. The future's
        CUDA events (set_result records them on the current stream) order its users, such as
        DDP's callbacks, after it."""
        devices = [self._device] if self._device.type == "cuda" else None
        fut = torch.futures.Future(devices=devices)
        fut.set_result(result)
        return _create_work_from_future(fut)

    # --- collectives --------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "all_reduce")
        op = _op_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        self._check("all_reduce", t)
        self._run(nv.allreduce, t, None, op, "auto", self._stream())
        return self._done([t])

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        self._check("broadcast", t)
        root = opts.rootRank if opts is not None else 0
        self._run(nv.broadcast, t, None, root, self._stream())
        return self._done([t])

    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce")
        root = opts.rootRank if opts is not None else 0
        op = _op_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        self._check("reduce", t)
        self._run(nv.reduce, t, None, root, op, self._stream())
        return self._done([t])

    def allgather(self, output_tensors, input_tensors, opts=None):
        """dist.all_gather (and DDP's check of parameter shapes): a list of world_size
        outputs, gathered into one staging tensor and copied out on the same stream."""
        t = _one(input_tensors, "all_gather")
        outs = list(_one(output_tensors, "all_gather"))
        if len(outs) != self._size:
            raise ValueError(
                f"all_gather: expected {self._size} output tensors (one per PE), got {len(outs)}"
            )
        self._check("all_gather", t, *outs)
        for o in outs:
            if o.numel() != t.numel() or o.dtype != t.dtype:
                raise ValueError(
                    "all_gather: every output must have the input's size and dtype "
                    f"({t.numel()} x {t.dtype}), got {o.numel()} x {o.dtype}"
                )
        src = t.contiguous()
        flat = torch.empty(self._size * t.numel(), dtype=t.dtype, device=self._device)
        self._run(nv.allgather, src, flat, self._stream())
        for i, o in enumerate(outs):
            o.copy_(flat[i * t.numel():(i + 1) * t.numel()].view(o.shape))
        return self._done(outs)

    def _allgather_base(self, output, input, opts=None):
        self._check("all_gather_into_tensor", output, input)
        self._run(nv.allgather, input, output, self._stream())
        return self._done([output])

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _op_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        self._check("reduce_scatter_tensor", output, input)
        self._run(nv.reduce_scatter, input, output, op, self._stream())
        return self._done([output])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        for name, splits, t in (("input", input_split_sizes, input),
                                ("output", output_split_sizes, output)):
            splits = list(splits or [])
            if not splits:
                continue
            rows = t.shape[0] if t.dim() else 1
            even = rows // self._size
            if len(splits) != self._size or any(s != even for s in splits) or \
                    even * self._size != rows:
                raise ValueError(
                    f"all_to_all_single: the nvsh backend takes equal splits only, got "
                    f"{name}_split_sizes={splits} for {rows} rows over {self._size} PEs; pass "
                    "None (equal blocks of the first dimension); uneven splits (alltoallv) "
                    "are not there yet"
                )
        self._check("all_to_all_single", output, input)
        self._run(nv.alltoall, input, output, self._stream())
        return self._done([output])

    def barrier(self, opts=None):
        """A barrier over every PE in stream order, then waited for on the host, as NCCL's
        barrier blocks the caller: after it every PE has reached it."""
        stream = torch.cuda.current_stream(self._device)
        self._run(nv.barrier, stream.cuda_stream)
        stream.synchronize()
        self._run(nv.check)
        return self._done([])

    # The names that newer PyTorch gives the single-tensor collectives.
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base


def _create(store, rank, size, timeout):
    # Under `nvsh run` the store is not needed (NVSHMEM bootstraps from the launcher's
    # environment); under torchrun it carries NVSHMEM's unique ID, as it carries NCCL's.
    return NvshProcessGroup(rank, size, _store_start(store, rank, size))


def register():
    """Registers the backend "nvsh" with torch.distributed (done at import; again is a
    no-op)."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, devices=["cuda"])


def default_store(size):
    """A store for init_process_group: our backend uses none, but torch wants one. Under
    `nvsh run` a FileStore named from the job's unique ID, shared by its processes (so that
    torch's optional store barrier, TORCH_DIST_INIT_BARRIER=1, works); else each process's
    own HashStore, which is enough for one PE and for our backend."""
    uid = os.environ.get("NVSH_UNIQUE_ID")
    if not uid or size == 1:
        return dist.HashStore()
    tag = hashlib.sha256(uid.encode()).hexdigest()[:16]
    return dist.FileStore(os.path.join(tempfile.gettempdir(), f"nvshmem_rs-{tag}.store"), size)


def _torchrun():
    """Whether torchrun (or another env:// launch) started this process as one of several,
    and not `nvsh run`."""
    return not _from_nvsh_run() and "RANK" in os.environ and \
        int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_process_group(**kwargs):
    """dist.init_process_group(backend="nvsh") with this PE's rank and world size and a
    store; keyword arguments (timeout, group_name, ...) go to it unchanged. Under torchrun,
    torch's env:// rendezvous (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) makes the store
    and the backend brings NVSHMEM up through it."""
    register()
    if _runtime is None and not nv.is_initialized() and _torchrun():
        dist.init_process_group(backend=BACKEND, **kwargs)
        return
    pe, npes, _ = _get_runtime().call(_whoami)
    kwargs.setdefault("rank", pe)
    kwargs.setdefault("world_size", npes)
    if "init_method" not in kwargs:
        kwargs.setdefault("store", default_store(kwargs["world_size"]))
    dist.init_process_group(backend=BACKEND, **kwargs)


register()
