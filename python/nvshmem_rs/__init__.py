"""Python bindings of nvshmem-rs, a symmetric-memory runtime over NVIDIA NVSHMEM.

    import nvshmem_rs as nv
    nv.init()                      # nvsh run's environment, MPI, or a single PE
    # under torchrun: nv.init_with_store(store), the unique ID passed through torch's store
    print(nv.rank(), nv.world_size())
    nv.finalize()                  # also done at interpreter exit

Symmetric memory and collectives on torch tensors (python/README.md):

    import torch
    x = nv.zeros(1024, dtype=torch.float32)   # symmetric, a CUDA tensor over it (DLPack)
    x += nv.rank()
    nv.allreduce(x)                           # in place, on torch's current stream
    y = torch.ones(1024, device="cuda")        # ordinary CUDA memory works too (staged)
    nv.allreduce(y, op="max")

Beside the collectives (allreduce, broadcast, reduce, allgather(v), reduce_scatter,
alltoall(v), grouped_p2p, barrier; team= over a split_strided team): pipeline Channels,
SparseAllreduce, tune_allreduce, and buffers registered into the heap (alloc(registered=True)).
`python -m nvshmem_rs.bench` times allreduce against torch's NCCL and SymmetricMemory paths.

Dropping a symmetric object (a buffer or a tensor over one, a team, a channel, a sparse
allreduce) frees nothing at once: it is freed at the next collection point (an allocation or
creation, barrier_all(), collect(), finalize()) once every PE has dropped it, so PEs may drop
in any order (pending_releases() counts what waits).

Errors of the runtime raise NvshmemError with the Rust error's message (its `kind` names the
variant); wrong arguments raise ValueError or TypeError. Dtypes are the library's names ("f32",
"bf16", ...); torch_dtype_name() and dtype_from_torch() map them to PyTorch's as plain strings.
The package imports without torch; only zeros() and empty() import it. The torch.distributed
backend "nvsh" is a module of its own, which imports torch: `import nvshmem_rs.distributed`.
"""

import atexit
import os
import warnings

from . import _native

from ._native import (
    NvshmemError,
    SparseAllreduce as _SparseAllreduce,
    SymmetricBuffer,
    Team,
    __version__,
    alloc,
    barrier_all,
    check,
    collect,
    configure,
    device,
    dtype_from_torch,
    dtype_size,
    dtypes,
    finalize,
    init,
    is_initialized,
    local_rank,
    nvshmem_version,
    pending_releases,
    rank,
    reserve_staging,
    split_strided,
    torch_dtype_name,
    unique_id,
    world_size,
)

__all__ = [
    "Channel",
    "NvshmemError",
    "SparseAllreduce",
    "SymmetricBuffer",
    "Team",
    "__version__",
    "alloc",
    "allgather",
    "allgatherv",
    "allreduce",
    "alltoall",
    "alltoallv",
    "barrier",
    "barrier_all",
    "broadcast",
    "check",
    "collect",
    "configure",
    "device",
    "empty",
    "dtype_from_torch",
    "dtype_size",
    "dtypes",
    "finalize",
    "grouped_p2p",
    "init",
    "init_with_store",
    "is_initialized",
    "local_rank",
    "nvshmem_version",
    "pending_releases",
    "rank",
    "reduce",
    "reduce_scatter",
    "reserve_staging",
    "split_strided",
    "torch_dtype_name",
    "tune_allreduce",
    "unique_id",
    "world_size",
    "zeros",
]


# The hot path of a training step is the native function itself, no Python frame around it;
# every call's default stream (torch's current one, on its tensors' device) is read there.
allreduce = _native.allreduce


def broadcast(tensor, output=None, root=0, stream=None, team=None):
    """Every PE's output = the root PE's `tensor`; in place on `tensor` when `output` is None.
    Over a team, `root` is a team rank."""
    _native.broadcast(tensor, output, root, stream, team)


def reduce(tensor, output=None, root=0, op="sum", stream=None, team=None):
    """The root's output = op(tensor of every PE); in place on `tensor` when `output` is None.
    Other PEs' outputs are left alone. Over a team, `root` is a team rank."""
    _native.reduce(tensor, output, root, op, stream, team)


def allgather(input, output, stream=None, team=None):
    """Block r of `output` (PEs x input.numel() elements) = PE r's `input`."""
    _native.allgather(input, output, stream, team)


def reduce_scatter(input, output, op="sum", stream=None, team=None):
    """`output` = op over PEs of block [rank] of their `input` (PEs x output.numel()
    elements)."""
    _native.reduce_scatter(input, output, op, stream, team)


def alltoall(input, output, stream=None, team=None):
    """Block s of `output` = block [rank] of PE s's `input`; one block per PE, no overlap."""
    _native.alltoall(input, output, stream, team)


def allgatherv(input, output, counts, displs=None, stream=None):
    """PE r's `input` (counts[r] elements) into output[displs[r]:] on every PE; every PE
    passes the same counts and displs (default: packed in PE order). On the caller's own
    memory, reserve_staging("allgatherv", bytes) first (the sizes differ between PEs)."""
    _native.allgatherv(input, output, list(counts), None if displs is None else list(displs),
                       stream)


def alltoallv(input, output, send_counts, recv_counts, send_displs=None, recv_displs=None,
              stream=None):
    """Part r of `input` (send_counts[r] elements at send_displs[r]) to PE r; part s of
    `output` (recv_counts[s] at recv_displs[s]) from PE s. Displacements default to the parts
    packed in PE order. On the caller's own memory, reserve_staging("alltoallv", bytes) first."""
    _native.alltoallv(input, output, list(send_counts), list(recv_counts),
                      None if send_displs is None else list(send_displs),
                      None if recv_displs is None else list(recv_displs),
                      stream)


def grouped_p2p(ops, stream=None):
    """Sends and receives as one launch (NCCL's grouped calls, torch's batch_isend_irecv):
    `ops` is a list of ("send", tensor, peer) and ("recv", tensor, peer); each send needs its
    receive on the peer, same size and dtype. On the caller's own memory,
    reserve_staging("grouped_p2p", bytes) first (only the PEs with transfers take part)."""
    ops = list(ops)
    _native.grouped_p2p(ops, stream)


def tune_allreduce(input, output, op="sum", algos=None, candidates=None, warmup=3, runs=10,
                   stream=None):
    """Times our allreduce algorithms (`algos`, default all) on `input` -> `output` (symmetric
    tensors, nvshmem_rs.zeros) and `candidates` of your own ({name: callable(stream)}, each
    enqueueing one collective call on the raw stream handle it is given, e.g. a torch op under
    torch.cuda.ExternalStream(stream); not calling nvshmem_rs), `warmup` untimed and `runs`
    timed runs each. Collective, every PE alike. Returns (winner, {name: microseconds}), the
    median over runs of each run's slowest PE; the output is undefined afterwards."""
    return _native.tune_allreduce(input, output, op, None if algos is None else list(algos),
                                  candidates, warmup, runs, stream)


class Channel:
    """A pipeline channel (docs/channels.md): `slots` receive slots of `max_elems` elements of
    `dtype` on every PE, made collectively (every PE, same arguments, same order; released
    in the same order too). send() and recv() enqueue on torch's current stream by default
    and return at once: a send waits on the GPU for a free slot on the peer, a receive for the
    next message from it. A PE receives on one channel from one peer (a channel per sender);
    messages from a sender arrive in order; a receive names the length sent (its tensor's
    numel). check() raises what a wait recorded (a timeout names the peer)."""

    def __init__(self, max_elems, dtype=None, slots=2, timeout_ms=None):
        self._ch = _native.Channel(max_elems, dtype, slots, timeout_ms)

    def send(self, tensor, peer, stream=None):
        self._ch.send(tensor, peer, stream)

    def recv(self, tensor, peer, stream=None):
        self._ch.recv(tensor, peer, stream)

    def check(self):
        self._ch.check()

    dtype = property(lambda self: self._ch.dtype)
    torch_dtype = property(lambda self: self._ch.torch_dtype)
    slots = property(lambda self: self._ch.slots)
    max_elems = property(lambda self: self._ch.max_elems)

    def __repr__(self):
        return repr(self._ch)


class SparseAllreduce:
    """The sparse gradient allreduce: each call every PE selects `density` of its gradient of
    `length` elements (with error feedback: plus what it held back before), the selections are
    exchanged, and every PE's output becomes their sum (`average`: mean). Methods: topk,
    topk_aopt, gaussiank, gaussiank_concat, gtopk, oktopk, topk_sa, gaussiank_sa; dtypes
    float32 and bfloat16. Made collectively over the world (every PE, same arguments, same
    order; released likewise); `team=` runs it over a split team. run() enqueues on torch's
    current stream by default."""

    def __init__(self, length, method="topk", density=0.01, dtype=None, error_feedback=True,
                 average=False, team=None):
        self._s = _SparseAllreduce(length, method, density, dtype, error_feedback, average,
                                   team)
        # The team stays while this runs over it: released together, the agreed release
        # frees this first (newest first).
        self._team = team

    def run(self, grad, out=None, stream=None):
        """One allreduce of `grad` into `out` (in place on `grad` without `out`)."""
        self._s.run(grad, out, stream)

    def clear_residual(self, stream=None):
        self._s.clear_residual(stream)

    k = property(lambda self: self._s.k)
    length = property(lambda self: self._s.length)
    dtype = property(lambda self: self._s.dtype)


def barrier(stream=None, team=None):
    """A barrier over every PE (or `team`'s) in stream order (default: torch's current
    stream)."""
    _native.barrier(stream, team)


# The launcher variables that init_with_store sets for the call of init("launcher") (the
# names `nvsh run` gives them, src/bootstrap/mod.rs), then restores.
_LAUNCH_VARS = ("NVSH_RANK", "NVSH_LOCAL_RANK", "NVSH_WORLD_SIZE", "NVSH_LOCAL_WORLD_SIZE",
                "NVSH_UNIQUE_ID")
STORE_KEY = "nvshmem_rs/unique_id"


def _env_int(name, given):
    if given is not None:
        return int(given)
    value = os.environ.get(name)
    if value is None:
        raise ValueError(
            f"init_with_store: {name} is not set and no value was passed; pass it (or start "
            "the job with torchrun, which sets RANK, WORLD_SIZE, LOCAL_RANK and "
            "LOCAL_WORLD_SIZE)"
        )
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"init_with_store: {name}={value!r} is not an integer") from None


def init_with_store(store, rank=None, world_size=None, local_rank=None,
                    local_world_size=None, key=STORE_KEY):
    """Initialises NVSHMEM over a job whose processes share a store, as NCCL's init does:
    rank 0 makes the unique ID (unique_id()) and sets it under `key`, the others wait for it
    there (store.get blocks, up to the store's timeout); then every process joins NVSHMEM's
    unique-ID bootstrap as `nvsh run` would have started it.

    `store` is anything with set(key, value) and get(key) shared by the job's processes: a
    torch.distributed TCPStore or FileStore, torchrun's, or the default group's
    (torch.distributed.distributed_c10d._get_default_store()). rank, world_size, local_rank and
    local_world_size default to torchrun's RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE;
    local_rank picks the GPU. `key` must be new to the store (one init per job and store).
    """
    rank = _env_int("RANK", rank)
    world_size = _env_int("WORLD_SIZE", world_size)
    local_rank = _env_int("LOCAL_RANK", local_rank) if local_rank is not None or \
        "LOCAL_RANK" in os.environ else rank
    local_world_size = _env_int("LOCAL_WORLD_SIZE", local_world_size) \
        if local_world_size is not None or "LOCAL_WORLD_SIZE" in os.environ else world_size
    if not 0 <= rank < world_size or not 0 <= local_rank < local_world_size:
        raise ValueError(
            f"init_with_store: rank {rank} of {world_size}, local rank {local_rank} of "
            f"{local_world_size}: expected 0 <= rank < world_size and 0 <= local_rank < "
            "local_world_size"
        )
    if rank == 0:
        uid = unique_id()
        store.set(key, uid)
    else:
        uid = store.get(key)
        if isinstance(uid, (bytes, bytearray)):
            uid = uid.decode()
    saved = {k: os.environ.get(k) for k in _LAUNCH_VARS}
    os.environ.update(NVSH_RANK=str(rank), NVSH_LOCAL_RANK=str(local_rank),
                      NVSH_WORLD_SIZE=str(world_size),
                      NVSH_LOCAL_WORLD_SIZE=str(local_world_size), NVSH_UNIQUE_ID=uid)
    try:
        init("launcher")
    finally:
        # Read at init only: the variables go again, so that processes this one starts are
        # not taken for PEs of its job.
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _torch_tensor(shape, dtype, zeroed, registered):
    import torch

    buf = alloc(shape, torch.float32 if dtype is None else dtype, zeroed=zeroed,
                registered=registered)
    return torch.from_dlpack(buf)


def zeros(shape, dtype=None, registered=False):
    """A zero-filled symmetric allocation (collective) as a torch CUDA tensor on this PE's
    GPU, without a copy (DLPack). dtype: a torch.dtype or a name; default torch.float32.
    registered: this PE's own memory registered into the symmetric heap instead (alloc())."""
    return _torch_tensor(shape, dtype, True, registered)


def empty(shape, dtype=None, registered=False):
    """As zeros(), contents undefined (no zeroing, still collective)."""
    return _torch_tensor(shape, dtype, False, registered)


def _finalize_at_exit():
    # NVSHMEM is finalised before the interpreter tears down. A runtime held by another
    # thread is finalised when that thread ends (its thread-local handle is dropped then;
    # Python joins non-daemon threads before it runs atexit).
    # Buffers still referenced at exit are expected (globals): finalize's warning that they
    # must not be used any more says nothing to a process that is ending.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            finalize()
    except NvshmemError as err:
        if err.kind != "WrongThread":
            raise


atexit.register(_finalize_at_exit)
