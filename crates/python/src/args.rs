//! Python arguments as the facade's: keyword arguments as [`Value`]s handed to the facade's
//! setters (which know every option and refuse the others by name), sizes as ints or
//! strings, and sources (a path, bytes, an `onnx.ModelProto`, a dict) as bytes.

use memplan::options::Value;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};

use crate::error::{input, option};

/// A Python value as an option's [`Value`]; a type no option takes is an `OptionError`
/// naming `keyword`.
pub fn value(keyword: &str, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    let py = v.py();
    if v.is_none() {
        return Ok(Value::None);
    }
    if v.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(v.extract::<bool>()?));
    }
    if v.is_instance_of::<PyInt>() {
        return v
            .extract::<i128>()
            .map(Value::Int)
            .map_err(|_| input(py, format!("option `{keyword}`: {v} is out of range")));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(Value::Float(v.extract::<f64>()?));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(Value::Str(v.extract::<String>()?));
    }
    if let Some(path) = fspath(v)? {
        return Ok(Value::Str(path));
    }
    if let Ok(dict) = v.cast::<PyDict>() {
        let mut pairs = Vec::with_capacity(dict.len());
        for (k, x) in dict.iter() {
            let name: String = k.extract().map_err(|_| {
                option(
                    py,
                    format!("option `{keyword}` takes names as keys, not {k}"),
                )
            })?;
            if x.is_instance_of::<PyBool>() || !x.is_instance_of::<PyInt>() {
                return Err(option(
                    py,
                    format!(
                        "option `{keyword}`: the value of `{name}` must be an integer, not {}",
                        type_name(&x)
                    ),
                ));
            }
            let n: i128 = x.extract().map_err(|_| {
                input(
                    py,
                    format!("option `{keyword}`: {name} = {x} is out of range"),
                )
            })?;
            pairs.push((name, n));
        }
        return Ok(Value::Map(pairs));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for x in v.try_iter()? {
            let x = x?;
            let text: String = x.extract().map_err(|_| {
                option(
                    py,
                    format!(
                        "option `{keyword}` takes a list of strings; it holds {}",
                        type_name(&x)
                    ),
                )
            })?;
            items.push(text);
        }
        return Ok(Value::List(items));
    }
    Err(option(
        py,
        format!("option `{keyword}` cannot take {}", type_name(v)),
    ))
}

/// `os.fspath(v)` for a path-like object, `None` for anything else.
pub fn fspath(v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if !v.hasattr("__fspath__")? {
        return Ok(None);
    }
    let path = v.call_method0("__fspath__")?;
    if path.is_instance_of::<PyString>() {
        return Ok(Some(path.extract()?));
    }
    Err(input(v.py(), "a path must name a file in text, not bytes"))
}

/// The name of `v`'s type, for errors.
pub fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map_or_else(|_| "an object".to_owned(), |n| n.to_string())
}

/// Applies every keyword of `kwargs` with `set` (which refuses the ones it does not know).
pub fn apply(
    kwargs: Option<&Bound<'_, PyDict>>,
    mut set: impl FnMut(&str, &Value) -> memplan::Result<()>,
) -> PyResult<()> {
    let Some(kwargs) = kwargs else {
        return Ok(());
    };
    for (k, v) in kwargs.iter() {
        let keyword: String = k.extract()?;
        let value = value(&keyword, &v)?;
        set(&keyword, &value).map_err(|e| crate::error::to_py(v.py(), &e))?;
    }
    Ok(())
}

/// What a source argument holds.
pub enum Source {
    /// A file to read.
    Path(String),
    /// Bytes in memory (a serialized ONNX model, a JSON text).
    Bytes(Vec<u8>),
}

/// A graph or config source: a path (`str` or path-like), `bytes`, a `bytearray`, an object
/// with `SerializeToString()` (an `onnx.ModelProto`), or a `dict` (JSON).
pub fn source(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Source> {
    let py = v.py();
    if v.is_instance_of::<PyString>() {
        return Ok(Source::Path(v.extract()?));
    }
    if let Some(path) = fspath(v)? {
        return Ok(Source::Path(path));
    }
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(Source::Bytes(b.as_bytes().to_vec()));
    }
    if let Ok(b) = v.cast::<PyByteArray>() {
        return Ok(Source::Bytes(b.to_vec()));
    }
    if v.hasattr("SerializeToString")? {
        let bytes = v.call_method0("SerializeToString")?;
        return Ok(Source::Bytes(bytes.extract::<Vec<u8>>()?));
    }
    if v.is_instance_of::<PyDict>() {
        let text: String = py.import("json")?.call_method1("dumps", (v,))?.extract()?;
        return Ok(Source::Bytes(text.into_bytes()));
    }
    Err(option(
        py,
        format!(
            "{what} must be a path, bytes, an onnx.ModelProto or a dict, not {}",
            type_name(v)
        ),
    ))
}

/// The keywords each function takes, with the flags they mirror: `{"plan": [(keyword,
/// flag), ...], ...}`.
#[pyfunction]
pub fn keywords(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for (name, list) in [
        ("plan", memplan::options::PLAN_KEYWORDS),
        ("check", memplan::check::CHECK_KEYWORDS),
        ("workload", memplan::estimate::WORKLOAD_KEYWORDS),
        ("serving", memplan::fit::SERVING_KEYWORDS),
    ] {
        out.set_item(name, list.to_vec())?;
    }
    Ok(out)
}

/// A size in bytes: `"24GiB"`, `"512MiB"` (powers of 1024), `"24GB"` (powers of 1000), or
/// an int; negative sizes are refused.
///
/// >>> memplan.parse_size("1.5GiB")
/// 1610612736
#[pyfunction]
pub fn parse_size(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    let py = v.py();
    let value = value("size", v)?;
    memplan::options::as_size("size", &value).map_err(|e| crate::error::to_py(py, &e))
}
