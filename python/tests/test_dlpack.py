"""The DLPack capsules without a GPU: a probe capsule (made as SymmetricBuffer.__dlpack__ makes
its own, over no memory) read with ctypes structs written from dlpack.h, and released both ways
the protocol has: by a consumer's deleter call, or by the capsule when nobody took it. Each
tensor must be released exactly once."""

import ctypes
import gc

import pytest

import nvshmem_rs as nv
from nvshmem_rs import _native


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
get_pointer.restype = ctypes.c_void_p
get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
set_name = ctypes.pythonapi.PyCapsule_SetName
set_name.restype = ctypes.c_int
set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]

# (code, bits) of dlpack.h: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4.
CODES = {
    "f32": (2, 32), "f64": (2, 64), "f16": (2, 16), "bf16": (4, 16), "i32": (0, 32),
    "i64": (0, 64), "u32": (1, 32), "u64": (1, 64), "u8": (1, 8),
}
NAMES = {False: b"dltensor", True: b"dltensor_versioned"}


def managed(capsule, versioned):
    ptr = get_pointer(capsule, NAMES[versioned])
    kind = DLManagedTensorVersioned if versioned else DLManagedTensor
    return ptr, kind.from_address(ptr)


def test_the_probe_functions_are_private():
    assert not any(name.startswith("_dlpack") for name in nv.__all__)


@pytest.mark.parametrize("versioned", [False, True])
@pytest.mark.parametrize("name", sorted(CODES))
def test_the_tensor_reads_as_dlpack_h_lays_it_out(name, versioned):
    capsule = _native._dlpack_probe([2, 3, 4], name, versioned)
    ptr, m = managed(capsule, versioned)
    t = m.dl_tensor
    assert (t.device_type, t.device_id) == (2, 0)  # kDLCUDA
    assert (t.code, t.bits, t.lanes) == CODES[name] + (1,)
    assert t.ndim == 3 and t.byte_offset == 0
    assert [t.shape[i] for i in range(3)] == [2, 3, 4]
    assert [t.strides[i] for i in range(3)] == [12, 4, 1]  # in elements, row-major
    assert m.manager_ctx == ptr
    if versioned:
        assert (m.major, m.minor, m.flags) == (1, 0, 0)
    # Released here by the capsule (nobody consumed it).
    before = _native._dlpack_probes_released()
    del capsule, t, m
    gc.collect()
    assert _native._dlpack_probes_released() == before + 1


@pytest.mark.parametrize("versioned", [False, True])
def test_a_consumed_capsule_is_released_by_its_consumer_only(versioned):
    capsule = _native._dlpack_probe([5], "f32", versioned)
    ptr, m = managed(capsule, versioned)
    # What a consumer does: rename the capsule, then call the deleter when its tensor dies.
    assert set_name(capsule, b"used_" + NAMES[versioned]) == 0
    before = _native._dlpack_probes_released()
    del capsule
    gc.collect()
    assert _native._dlpack_probes_released() == before  # the consumer owns it now
    m.deleter(ptr)
    assert _native._dlpack_probes_released() == before + 1


def test_a_scalar_has_no_dimensions():
    capsule = _native._dlpack_probe([], "i64")
    _, m = managed(capsule, False)
    assert m.dl_tensor.ndim == 0
