"""Python bindings of nvshmem-rs, a symmetric-memory runtime over NVIDIA NVSHMEM.

    import nvshmem_rs as nv
    nv.init()                      # nvsh run's environment, MPI, or a single PE
    print(nv.rank(), nv.world_size())
    nv.finalize()                  # also done at interpreter exit

Symmetric memory and collectives on torch tensors (python/README.md):

    import torch
    x = nv.zeros(1024, dtype=torch.float32)   # symmetric, a CUDA tensor over it (DLPack)
    x += nv.rank()
    nv.allreduce(x)                           # in place, on torch's current stream
    y = torch.ones(1024, device="cuda")        # ordinary CUDA memory works too (staged)
    nv.allreduce(y, op="max")

Errors of the runtime raise NvshmemError with the Rust error's message (its `kind` names the
variant); wrong arguments raise ValueError or TypeError. Dtypes are the library's names ("f32",
"bf16", ...); torch_dtype_name() and dtype_from_torch() map them to PyTorch's as plain strings.
The package imports without torch; only zeros() and empty() import it. The torch.distributed
backend "nvsh" is a module of its own, which imports torch: `import nvshmem_rs.distributed`.
"""

import atexit
import sys
import warnings

from . import _native

from ._native import (
    NvshmemError,
    SymmetricBuffer,
    __version__,
    alloc,
    barrier_all,
    check,
    device,
    dtype_from_torch,
    dtype_size,
    dtypes,
    finalize,
    init,
    is_initialized,
    local_rank,
    nvshmem_version,
    rank,
    torch_dtype_name,
    world_size,
)

__all__ = [
    "NvshmemError",
    "SymmetricBuffer",
    "__version__",
    "alloc",
    "allgather",
    "allreduce",
    "alltoall",
    "barrier",
    "barrier_all",
    "broadcast",
    "check",
    "device",
    "empty",
    "dtype_from_torch",
    "dtype_size",
    "dtypes",
    "finalize",
    "init",
    "is_initialized",
    "local_rank",
    "nvshmem_version",
    "rank",
    "reduce",
    "reduce_scatter",
    "torch_dtype_name",
    "world_size",
    "zeros",
]


def _stream(stream, *tensors):
    """The raw cudaStream_t to run on: `stream` as given (an int, or an object with
    `cuda_stream` such as torch.cuda.Stream), else torch's current stream on the first CUDA
    tensor's device when torch is loaded and has CUDA, else 0 (the default stream)."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    # Never imported here: torch tensors mean torch is loaded already.
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return 0
    device = None
    for t in tensors:
        d = getattr(t, "device", None)
        if isinstance(d, torch.device) and d.type == "cuda":
            device = d
            break
    return torch.cuda.current_stream(device).cuda_stream


def allreduce(tensor, output=None, op="sum", algo="auto", stream=None):
    """output = op(tensor of every PE), element-wise; in place on `tensor` when `output` is
    None. op: "sum", "prod", "min", "max", "avg"; algo: "auto", "oneshot", "twoshot", "ring",
    "rd". Runs on `stream` (default: torch's current stream) and returns the algorithm used."""
    return _native.allreduce(tensor, output, op, algo, _stream(stream, tensor, output))


def broadcast(tensor, output=None, root=0, stream=None):
    """Every PE's output = the root PE's `tensor`; in place on `tensor` when `output` is None."""
    _native.broadcast(tensor, output, root, _stream(stream, tensor, output))


def reduce(tensor, output=None, root=0, op="sum", stream=None):
    """The root's output = op(tensor of every PE); in place on `tensor` when `output` is None.
    Other PEs' outputs are left alone."""
    _native.reduce(tensor, output, root, op, _stream(stream, tensor, output))


def allgather(input, output, stream=None):
    """Block r of `output` (world_size() x input.numel() elements) = PE r's `input`."""
    _native.allgather(input, output, _stream(stream, input, output))


def reduce_scatter(input, output, op="sum", stream=None):
    """`output` = op over PEs of block [rank()] of their `input` (world_size() x
    output.numel() elements)."""
    _native.reduce_scatter(input, output, op, _stream(stream, input, output))


def alltoall(input, output, stream=None):
    """Block s of `output` = block [rank()] of PE s's `input`; world_size() blocks each, no
    overlap."""
    _native.alltoall(input, output, _stream(stream, input, output))


def barrier(stream=None):
    """A barrier over every PE in stream order (default: torch's current stream)."""
    _native.barrier(_stream(stream))


def _torch_tensor(shape, dtype, zeroed):
    import torch

    buf = alloc(shape, torch.float32 if dtype is None else dtype, zeroed=zeroed)
    return torch.from_dlpack(buf)


def zeros(shape, dtype=None):
    """A zero-filled symmetric allocation (collective) as a torch CUDA tensor on this PE's
    GPU, without a copy (DLPack). dtype: a torch.dtype or a name; default torch.float32."""
    return _torch_tensor(shape, dtype, True)


def empty(shape, dtype=None):
    """As zeros(), contents undefined (no zeroing, still collective)."""
    return _torch_tensor(shape, dtype, False)


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
