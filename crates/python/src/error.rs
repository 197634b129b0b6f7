//! The facade's errors as the package's exceptions (defined in `memplan/_errors.py`, so that
//! they can inherit from Python's own: `InputError` is a `ValueError`, `OptionError` a
//! `TypeError` too): the class by the error's kind, the message as the command line prints
//! it (each cause once).

use memplan::{Error, ErrorKind};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyType;

/// The exception class named `name` in `memplan._errors`.
fn class<'py>(py: Python<'py>, name: &str) -> Option<Bound<'py, PyType>> {
    let module = py.import("memplan._errors").ok()?;
    module.getattr(name).ok()?.cast_into::<PyType>().ok()
}

/// An exception of the package's class `name` (or `fallback` if the package is not there)
/// saying `message`.
pub fn raise(py: Python<'_>, name: &str, message: String) -> PyErr {
    match class(py, name) {
        Some(ty) => PyErr::from_type(ty, message),
        None => match name {
            "OptionError" => PyTypeError::new_err(message),
            "InputError" => PyValueError::new_err(message),
            _ => PyRuntimeError::new_err(message),
        },
    }
}

/// The exception for a facade error.
pub fn to_py(py: Python<'_>, error: &Error) -> PyErr {
    let name = match error.kind() {
        ErrorKind::Unsafe => "UnsafePlanError",
        ErrorKind::DoesNotFit => "DoesNotFitError",
        ErrorKind::Option => "OptionError",
        _ => "InputError",
    };
    raise(py, name, error.report())
}

/// An input error saying `message`.
pub fn input(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise(py, "InputError", message.into())
}

/// An option error (unknown keyword, wrong type) saying `message`.
pub fn option(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise(py, "OptionError", message.into())
}

/// Converts a facade result, raising its error.
pub trait IntoPy<T> {
    /// The value, or the error as the package's exception.
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for memplan::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, &e))
    }
}
