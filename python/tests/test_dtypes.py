"""The dtype table: the library's names, torch's names as plain strings, sizes."""

import pytest

import nvshmem_rs as nv

# The mapping as PyTorch spells it (torch.<name>); written out here so that a change to the
# Rust table is caught.
EXPECTED = {
    "f32": ("float32", 4),
    "f64": ("float64", 8),
    "f16": ("float16", 2),
    "bf16": ("bfloat16", 2),
    "i32": ("int32", 4),
    "i64": ("int64", 8),
    "u32": ("uint32", 4),
    "u64": ("uint64", 8),
    "u8": ("uint8", 1),
}


def test_table_lists_every_dtype_once():
    table = nv.dtypes()
    assert {name: (torch, size) for name, torch, size in table} == EXPECTED
    assert len(table) == len(EXPECTED)
    assert len({torch for _, torch, _ in table}) == len(table)


@pytest.mark.parametrize("name,torch,size", [(k, t, s) for k, (t, s) in EXPECTED.items()])
def test_both_directions_and_size(name, torch, size):
    assert nv.torch_dtype_name(name) == torch
    assert nv.dtype_from_torch(torch) == name
    assert nv.dtype_from_torch("torch." + torch) == name
    assert nv.dtype_size(name) == size


def test_a_torch_dtype_object_is_read_by_its_str():
    # Stands in for torch.bfloat16 without importing torch: a class of module "torch" whose
    # str() is "torch.bfloat16", as torch.dtype's is.
    fake = type("dtype", (), {"__module__": "torch", "__str__": lambda self: "torch.bfloat16"})
    assert nv.dtype_from_torch(fake()) == "bf16"


@pytest.mark.parametrize("bad", ["float", "fp32", "F32", "", "bfloat16"])
def test_unknown_library_names_raise_value_error(bad):
    with pytest.raises(ValueError, match="unknown dtype .*the library's dtypes are f32, f64"):
        nv.torch_dtype_name(bad)
    with pytest.raises(ValueError, match="unknown dtype"):
        nv.dtype_size(bad)


@pytest.mark.parametrize("bad", ["int8", "bool", "complex64", "torch.int16", "f32"])
def test_torch_dtypes_without_a_counterpart_raise_value_error(bad):
    with pytest.raises(ValueError, match="has no counterpart in the library; it takes float32"):
        nv.dtype_from_torch(bad)


@pytest.mark.parametrize("bad", [4, None, 1.5, b"float32", object()])
def test_non_strings_raise_type_error(bad):
    with pytest.raises(TypeError, match="takes a torch dtype name"):
        nv.dtype_from_torch(bad)
    with pytest.raises(TypeError):
        nv.torch_dtype_name(bad)
