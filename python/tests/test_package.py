"""The package imports without a GPU or torch and exposes the first slice's API."""

import re
import sys
import threading

import pytest

import nvshmem_rs as nv


def test_imports_without_torch():
    assert "torch" not in sys.modules


def test_api_of_the_first_slice():
    for name in ["init", "finalize", "is_initialized", "rank", "world_size", "local_rank",
                 "device", "dtypes", "torch_dtype_name", "dtype_from_torch", "dtype_size",
                 "nvshmem_version", "NvshmemError"]:
        assert name in nv.__all__ and hasattr(nv, name), name
    assert re.fullmatch(r"\d+\.\d+\.\d+", nv.__version__)


def test_nvshmem_version_is_the_loaded_host_library():
    major, _minor, _patch = map(int, nv.nvshmem_version().split("."))
    assert major >= 3


def test_error_class_is_a_runtime_error_with_a_kind():
    assert issubclass(nv.NvshmemError, RuntimeError)
    assert nv.NvshmemError.__module__ == "nvshmem_rs"
    assert nv.NvshmemError("by hand").kind is None


@pytest.mark.parametrize("call", [nv.rank, nv.world_size, nv.local_rank, nv.device])
def test_calls_before_init_raise_not_initialized(call):
    assert not nv.is_initialized()
    with pytest.raises(nv.NvshmemError, match=r"not initialised; call nvshmem_rs\.init\(\)") as err:
        call()
    assert err.value.kind == "NotInitialized"
    assert call.__name__ in str(err.value)


def test_finalize_without_init_does_nothing():
    nv.finalize()
    nv.finalize()
    assert not nv.is_initialized()


def test_another_thread_before_init_is_not_initialized_either():
    seen = []
    t = threading.Thread(target=lambda: seen.append(_kind_of(nv.rank)))
    t.start()
    t.join()
    assert seen == ["NotInitialized"]


def _kind_of(call):
    try:
        call()
    except nv.NvshmemError as err:
        return err.kind
    return None
