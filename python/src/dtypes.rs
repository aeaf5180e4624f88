//! The dtype table: the library's names, PyTorch's as plain strings (torch is never imported),
//! and the parsing of dtype arguments.

use nvshmem::Dtype;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

/// PyTorch's name of a dtype. Exhaustive, so that a dtype added to the library fails to
/// compile here until it has one.
pub(crate) fn torch_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "float32",
        Dtype::F64 => "float64",
        Dtype::F16 => "float16",
        Dtype::Bf16 => "bfloat16",
        Dtype::I32 => "int32",
        Dtype::I64 => "int64",
        Dtype::U32 => "uint32",
        Dtype::U64 => "uint64",
        Dtype::U8 => "uint8",
    }
}

/// The library's names, for messages.
fn known() -> String {
    let names: Vec<&str> = Dtype::ALL.iter().map(|d| d.name()).collect();
    names.join(", ")
}

fn lookup(name: &str) -> PyResult<Dtype> {
    Dtype::ALL
        .iter()
        .copied()
        .find(|d| d.name() == name)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown dtype {name:?}: the library's dtypes are {}",
                known()
            ))
        })
}

/// Every dtype as (library name, torch name, bytes per element), in the library's order.
#[pyfunction]
pub(crate) fn dtypes() -> Vec<(&'static str, &'static str, usize)> {
    Dtype::ALL
        .iter()
        .map(|&d| (d.name(), torch_name(d), d.size()))
        .collect()
}

/// The torch name ("bfloat16") of a library dtype ("bf16").
#[pyfunction]
pub(crate) fn torch_dtype_name(dtype: &str) -> PyResult<&'static str> {
    lookup(dtype).map(torch_name)
}

/// The library dtype of a torch dtype, given by name ("bfloat16", "torch.bfloat16") or as a
/// torch.dtype object (read through str(), so torch is never imported here).
pub(crate) fn from_torch(dtype: &Bound<'_, PyAny>) -> PyResult<Dtype> {
    let text = if let Ok(s) = dtype.cast::<PyString>() {
        s.to_str()?.to_owned()
    } else if dtype
        .get_type()
        .getattr("__module__")?
        .extract::<String>()
        .is_ok_and(|m| m == "torch")
    {
        dtype.str()?.to_str()?.to_owned()
    } else {
        return Err(PyTypeError::new_err(format!(
            "dtype_from_torch takes a torch dtype name (\"bfloat16\") or a torch.dtype, not {}",
            dtype.get_type().name()?
        )));
    };
    let name = text.strip_prefix("torch.").unwrap_or(&text);
    Dtype::ALL
        .iter()
        .copied()
        .find(|&d| torch_name(d) == name)
        .ok_or_else(|| {
            let torch: Vec<&str> = Dtype::ALL.iter().map(|&d| torch_name(d)).collect();
            PyValueError::new_err(format!(
                "torch dtype {text:?} has no counterpart in the library; it takes {}",
                torch.join(", ")
            ))
        })
}

/// The library dtype ("bf16") of a torch dtype, given by name ("bfloat16", "torch.bfloat16")
/// or as a torch.dtype object (read through str(), so torch is never imported here).
#[pyfunction]
pub(crate) fn dtype_from_torch(dtype: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    from_torch(dtype).map(Dtype::name)
}

/// A dtype argument of `what`: a library name ("bf16"), a torch name ("bfloat16",
/// "torch.bfloat16") or a torch.dtype. The two sets of names do not overlap.
pub(crate) fn parse_dtype(what: &str, dtype: &Bound<'_, PyAny>) -> PyResult<Dtype> {
    if let Ok(s) = dtype.cast::<PyString>() {
        if let Some(d) = Dtype::ALL
            .iter()
            .find(|d| d.name() == s.to_str().unwrap_or(""))
        {
            return Ok(*d);
        }
    }
    from_torch(dtype).map_err(|e| {
        let message = format!(
            "{what}: dtype {} is neither a library dtype ({}) nor a torch dtype the library has",
            dtype
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "?".into()),
            known()
        );
        if e.is_instance_of::<PyTypeError>(dtype.py()) {
            PyTypeError::new_err(message)
        } else {
            PyValueError::new_err(message)
        }
    })
}

/// Bytes per element of a library dtype.
#[pyfunction]
pub(crate) fn dtype_size(dtype: &str) -> PyResult<usize> {
    lookup(dtype).map(Dtype::size)
}
