"""Python bindings of nvshmem-rs, a symmetric-memory runtime over NVIDIA NVSHMEM.

    import nvshmem_rs as nv
    nv.init()                      # nvsh run's environment, MPI, or a single PE
    print(nv.rank(), nv.world_size())
    nv.finalize()                  # also done at interpreter exit

Errors of the runtime raise NvshmemError with the Rust error's message (its `kind` names the
variant); wrong arguments raise ValueError or TypeError. Dtypes are the library's names ("f32",
"bf16", ...); torch_dtype_name() and dtype_from_torch() map them to PyTorch's as plain strings,
so nothing here needs torch. Symmetric tensors and collectives are not bound yet.
"""

import atexit

from ._native import (
    NvshmemError,
    __version__,
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
    "__version__",
    "device",
    "dtype_from_torch",
    "dtype_size",
    "dtypes",
    "finalize",
    "init",
    "is_initialized",
    "local_rank",
    "nvshmem_version",
    "rank",
    "torch_dtype_name",
    "world_size",
]


def _finalize_at_exit():
    # NVSHMEM is finalised before the interpreter tears down. A runtime held by another
    # thread is finalised when that thread ends (its thread-local handle is dropped then;
    # Python joins non-daemon threads before it runs atexit).
    try:
        finalize()
    except NvshmemError as err:
        if err.kind != "WrongThread":
            raise


atexit.register(_finalize_at_exit)
