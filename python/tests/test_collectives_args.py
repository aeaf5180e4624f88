"""Argument checks of the collectives and of alloc() without a GPU or torch: small fake tensors
with data_ptr(), numel(), dtype, is_cuda and device stand in for torch's. Each check comes before
the runtime is needed, so these run before init; a well-formed call then meets NotInitialized."""

import sys

import pytest

import nvshmem_rs as nv


class FakeDevice:
    def __init__(self, kind="cuda", index=0):
        self.type, self.index = kind, index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class FakeTensor:
    """What the bindings read of a torch.Tensor, and nothing else."""

    def __init__(self, numel=8, dtype="torch.float32", device="cuda", contiguous=True,
                 ptr=0x7F0000000000):
        self.dtype = dtype
        self.device = FakeDevice(device, 0 if device == "cuda" else None)
        self.is_cuda = device == "cuda"
        self._numel, self._contiguous, self._ptr = numel, contiguous, ptr

    def data_ptr(self):
        return self._ptr

    def numel(self):
        return self._numel

    def is_contiguous(self):
        return self._contiguous


# Every collective with well-formed arguments (stream left to the call: no torch here, so 0).
CALLS = {
    "allreduce": lambda: nv.allreduce(FakeTensor()),
    "broadcast": lambda: nv.broadcast(FakeTensor(), root=0),
    "reduce": lambda: nv.reduce(FakeTensor(), FakeTensor(ptr=0x7F0000100000)),
    "allgather": lambda: nv.allgather(FakeTensor(4), FakeTensor(8, ptr=0x7F0000100000)),
    "reduce_scatter": lambda: nv.reduce_scatter(FakeTensor(8), FakeTensor(4, ptr=0x7F0000100000)),
    "alltoall": lambda: nv.alltoall(FakeTensor(8), FakeTensor(8, ptr=0x7F0000100000)),
    "barrier": lambda: nv.barrier(),
    "barrier_all": lambda: nv.barrier_all(),
    "check": lambda: nv.check(),
    "alloc": lambda: nv.alloc((2, 3), "bf16"),
    "alloc registered": lambda: nv.alloc(8, "f32", registered=True),
    "allgatherv": lambda: nv.allgatherv(FakeTensor(4), FakeTensor(8, ptr=0x7F0000100000), [4, 4]),
    "alltoallv": lambda: nv.alltoallv(FakeTensor(8), FakeTensor(8, ptr=0x7F0000100000), [4, 4],
                                      [4, 4], [0, 4], [0, 4]),
    "grouped_p2p": lambda: nv.grouped_p2p([("send", FakeTensor(), 1),
                                           ("recv", FakeTensor(ptr=0x7F0000100000), 1)]),
    "reserve_staging": lambda: nv.reserve_staging("alltoallv", 1 << 20),
    "configure": lambda: nv.configure(slot_bytes=8 << 20),
    "Channel": lambda: nv.Channel(1024, "bf16", slots=2),
    "split_strided": lambda: nv.split_strided(0, 2, 1),
    "SparseAllreduce": lambda: nv.SparseAllreduce(1024, "gtopk", 0.01, "bf16"),
    "tune_allreduce": lambda: nv.tune_allreduce(FakeTensor(), FakeTensor(ptr=0x7F0000100000),
                                                candidates={"mine": lambda stream: None}),
}


def test_torch_is_not_loaded_by_these_tests():
    assert "torch" not in sys.modules


@pytest.mark.parametrize("name", sorted(CALLS))
def test_well_formed_calls_before_init_raise_not_initialized(name):
    assert not nv.is_initialized()
    with pytest.raises(nv.NvshmemError, match=r"not initialised; call nvshmem_rs\.init\(\)") as err:
        CALLS[name]()
    assert err.value.kind == "NotInitialized"
    assert str(err.value).startswith(name.split()[0] + ":")


@pytest.mark.parametrize("name", ["allreduce", "broadcast", "reduce"])
def test_a_host_tensor_is_refused_with_where_it_is(name):
    call = getattr(nv, name)
    with pytest.raises(ValueError, match=rf"{name}: the input is on cpu, not on a CUDA device"):
        call(FakeTensor(device="cpu"))


def test_a_host_output_is_refused_too():
    with pytest.raises(ValueError, match="allgather: the output is on cpu"):
        nv.allgather(FakeTensor(4), FakeTensor(8, device="cpu"))


@pytest.mark.parametrize("bad", [[1.0, 2.0], 3, None, "tensor"])
def test_objects_that_are_not_tensors_raise_type_error(bad):
    with pytest.raises(TypeError, match="allreduce: the input must be a CUDA torch.Tensor"):
        nv.allreduce(bad)


def test_a_non_contiguous_tensor_is_refused():
    with pytest.raises(ValueError, match=r"not contiguous.*tensor\.contiguous\(\)"):
        nv.alltoall(FakeTensor(8), FakeTensor(8, contiguous=False))


def test_input_and_output_of_other_dtypes_raise_type_error():
    with pytest.raises(TypeError, match="the input is float32 and the output float16"):
        nv.allreduce(FakeTensor(), FakeTensor(dtype="torch.float16"))
    with pytest.raises(TypeError, match="the input is int64 and the output int32"):
        nv.allgather(FakeTensor(4, dtype="torch.int64"), FakeTensor(8, dtype="torch.int32"))


@pytest.mark.parametrize("name", ["allreduce", "broadcast", "reduce", "alltoall"])
def test_elementwise_sizes_must_match(name):
    with pytest.raises(ValueError, match=rf"{name}: the input holds 8 elements and the output 6"):
        getattr(nv, name)(FakeTensor(8), FakeTensor(6))


@pytest.mark.parametrize("dtype", ["torch.int8", "torch.bool", "torch.complex64"])
def test_a_dtype_the_library_lacks_is_named(dtype):
    with pytest.raises(ValueError, match=rf"the input's dtype: torch dtype .{dtype}. has no "
                                         "counterpart in the library"):
        nv.allreduce(FakeTensor(dtype=dtype))


@pytest.mark.parametrize("name", ["allreduce", "reduce", "reduce_scatter"])
def test_uint8_cannot_be_reduced(name):
    args = (FakeTensor(8, dtype="torch.uint8"), FakeTensor(8, dtype="torch.uint8", ptr=1 << 40))
    with pytest.raises(TypeError, match=rf"{name}: uint8 \(u8\) tensors cannot be reduced; "
                                        "the reductions take float32"):
        getattr(nv, name)(*args)


def test_uint8_moves_where_nothing_is_reduced():
    # Past the argument checks: only the missing runtime stops it.
    with pytest.raises(nv.NvshmemError, match="not initialised"):
        nv.allgather(FakeTensor(4, dtype="torch.uint8"), FakeTensor(8, dtype="torch.uint8"))


def test_an_unknown_op_lists_the_ops():
    with pytest.raises(ValueError, match='unknown op "mean"; expected one of sum, prod, min, max, '
                                         "avg"):
        nv.allreduce(FakeTensor(), op="mean")


def test_an_unknown_algorithm_gives_the_library_text():
    with pytest.raises(ValueError, match="allreduce: .*auto, oneshot, twoshot, ring, rd or hier"):
        nv.allreduce(FakeTensor(), algo="tree")


def test_a_stream_object_is_read_through_cuda_stream():
    stream = type("Stream", (), {"cuda_stream": 0})()
    with pytest.raises(nv.NvshmemError, match="not initialised"):
        nv.allreduce(FakeTensor(), stream=stream)


@pytest.mark.parametrize("stream", ["0", 1.5, object(), type("S", (), {"cuda_stream": "x"})()])
def test_a_stream_of_another_kind_is_refused_before_init(stream):
    for call in (lambda: nv.allreduce(FakeTensor(), stream=stream),
                 lambda: nv.broadcast(FakeTensor(), stream=stream),
                 lambda: nv.barrier(stream=stream)):
        with pytest.raises(TypeError, match=r"stream must be a cudaStream_t as an int, an object "
                                            r"with cuda_stream \(torch\.cuda\.Stream\) or None"):
            call()


def test_allreduce_is_the_native_function_with_its_keywords():
    # No Python frame on the hot path; the public names of its arguments stay.
    assert nv.allreduce is nv._native.allreduce
    with pytest.raises(nv.NvshmemError, match="not initialised"):
        nv.allreduce(tensor=FakeTensor(), output=None, op="sum", algo="auto", stream=None,
                     team=None)


@pytest.mark.parametrize("shape,message", [
    (0, "holds no elements"),
    ((4, 0), "holds no elements"),
    ((-1,), "negative dimension"),
])
def test_alloc_refuses_empty_and_negative_shapes(shape, message):
    with pytest.raises(ValueError, match=message):
        nv.alloc(shape)


def test_alloc_refuses_a_shape_of_another_type():
    with pytest.raises(TypeError, match="alloc: shape must be an int or a sequence of ints"):
        nv.alloc("8")


@pytest.mark.parametrize("dtype", ["float", "int8", "F32", 7])
def test_alloc_refuses_unknown_dtypes(dtype):
    with pytest.raises((ValueError, TypeError), match="alloc: dtype .* is neither a library "
                                                      "dtype \\(f32, f64"):
        nv.alloc(4, dtype)


@pytest.mark.parametrize("dtype", ["f16", "float16", "torch.float16"])
def test_alloc_takes_library_and_torch_names(dtype):
    # Accepted names reach the runtime check.
    with pytest.raises(nv.NvshmemError, match="alloc: the runtime is not initialised"):
        nv.alloc(4, dtype)


def test_symmetric_buffers_come_only_from_alloc():
    with pytest.raises(TypeError):
        nv.SymmetricBuffer()


def test_a_transfer_of_another_kind_is_refused():
    with pytest.raises(ValueError, match='grouped_p2p: transfer kind "put"; expected "send" or '
                                         '"recv"'):
        nv.grouped_p2p([("put", FakeTensor(), 1)])


@pytest.mark.parametrize("bad", [("send", FakeTensor()), FakeTensor(), ("send", FakeTensor(), "1")])
def test_a_transfer_that_is_not_a_triple_is_refused(bad):
    with pytest.raises(TypeError, match=r"grouped_p2p: each transfer is a tuple \("):
        nv.grouped_p2p([bad])


def test_a_transfer_buffer_on_the_host_is_refused():
    with pytest.raises(ValueError, match="grouped_p2p: the receive buffer is on cpu"):
        nv.grouped_p2p([("recv", FakeTensor(device="cpu"), 1)])


def test_an_empty_group_still_needs_the_runtime():
    with pytest.raises(nv.NvshmemError, match="not initialised"):
        nv.grouped_p2p([])


def test_an_unknown_sparse_method_gives_the_library_text():
    with pytest.raises(nv.NvshmemError, match='no method named "dgc"; pass one of topk') as err:
        nv.SparseAllreduce(1024, "dgc")
    assert err.value.kind == "SparseConfig"


def test_a_team_argument_must_be_a_team():
    with pytest.raises(TypeError):
        nv.allreduce(FakeTensor(), team="evens")
    with pytest.raises(TypeError):
        nv.Team()


def test_a_channel_of_an_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="Channel: dtype 'int8' is neither a library dtype"):
        nv.Channel(16, "int8")


def test_api_of_tensors_and_collectives():
    for name in ["alloc", "zeros", "empty", "SymmetricBuffer", "allreduce", "broadcast", "reduce",
                 "allgather", "reduce_scatter", "alltoall", "barrier", "barrier_all", "check",
                 "allgatherv", "alltoallv", "grouped_p2p", "reserve_staging", "configure",
                 "Channel", "init_with_store", "unique_id", "split_strided", "Team",
                 "tune_allreduce", "SparseAllreduce"]:
        assert name in nv.__all__ and hasattr(nv, name), name
    assert nv.SymmetricBuffer.__module__ == "nvshmem_rs"
