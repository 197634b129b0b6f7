//! `memplan._memplan`: the compiled half of the `memplan` Python package (PyO3, abi3 for
//! CPython 3.9 and later). The package's Python half (`python/memplan`) re-exports these
//! names, holds the exceptions, NumPy's side of `solve` and the PyTorch exporter.
//!
//! Every function takes the facade's options by keyword ([`memplan::options`]), so a
//! keyword is parsed, checked and documented in one place for the command line and for
//! Python. Work runs with the GIL released. Failures become the package's exceptions by
//! their kind (`error::to_py`): bad input, an unknown option or a wrong type, an unsafe
//! plan, "does not fit".

mod args;
mod error;
mod graph;
mod model;
mod plan;
mod solve;

use pyo3::prelude::*;

/// The compiled module.
#[pymodule]
fn _memplan(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<graph::Graph>()?;
    m.add_class::<plan::Plan>()?;
    m.add_class::<plan::Buffer>()?;
    m.add_class::<plan::CheckReport>()?;
    m.add_class::<model::Estimate>()?;
    m.add_class::<model::FitResult>()?;
    m.add_class::<model::ServingCapacity>()?;
    m.add_function(wrap_pyfunction!(graph::load, m)?)?;
    m.add_function(wrap_pyfunction!(plan::plan, m)?)?;
    m.add_function(wrap_pyfunction!(plan::check, m)?)?;
    m.add_function(wrap_pyfunction!(model::estimate, m)?)?;
    m.add_function(wrap_pyfunction!(model::fit, m)?)?;
    m.add_function(wrap_pyfunction!(model::serving, m)?)?;
    m.add_function(wrap_pyfunction!(solve::solve_buffers, m)?)?;
    m.add_function(wrap_pyfunction!(args::keywords, m)?)?;
    m.add_function(wrap_pyfunction!(args::parse_size, m)?)?;
    Ok(())
}
