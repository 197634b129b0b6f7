//! `memplan.solve`'s compiled half: a packing problem as three (or four) little-endian
//! `int64` byte strings, one value per buffer (NumPy's `tobytes()`, no Python object per
//! buffer), solved by the packing engine with `memplan solve`'s limits, the offsets handed
//! back the same way as `uint64`.

use memplan::solve::SolveSettings;
use memplan_packing::{Buffer, Gap, Problem};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::error::{IntoPy as _, input, raise};

/// `bytes` as `int64` values, named `what` in errors.
fn column(py: Python<'_>, what: &str, bytes: &[u8]) -> PyResult<Vec<i64>> {
    if !bytes.len().is_multiple_of(8) {
        return Err(input(
            py,
            format!("`{what}`: not a whole number of int64 values"),
        ));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect())
}

/// The first negative value of `values`, as an error naming `what` and the buffer.
fn non_negative(py: Python<'_>, what: &str, values: &[i64]) -> PyResult<()> {
    match values.iter().position(|&v| v < 0) {
        Some(i) => Err(input(
            py,
            format!(
                "`{what}`[{i}] is {}: buffers' times and sizes are non-negative",
                values[i]
            ),
        )),
        None => Ok(()),
    }
}

/// Solves the packing problem of `lower`, `upper` (half-open lifetimes `[lower, upper)`) and
/// `size` (each an `int64` byte string), with `alignment` per buffer if given. Returns
/// `(offsets as uint64 bytes, arena_bytes, lower_bound_bytes, proven_optimal, produced_by)`;
/// raises `DoesNotFitError` when nothing found fits `capacity`.
#[pyfunction]
#[pyo3(signature = (lower, upper, size, alignment=None, *, capacity=None, strategy="auto", minimize=false, time_limit=None, node_limit=None, gap=0.0, threads=0))]
#[allow(
    clippy::too_many_arguments,
    reason = "the keyword arguments of a Python function"
)]
pub fn solve_buffers<'py>(
    py: Python<'py>,
    lower: &[u8],
    upper: &[u8],
    size: &[u8],
    alignment: Option<&[u8]>,
    capacity: Option<u64>,
    strategy: &str,
    minimize: bool,
    time_limit: Option<f64>,
    node_limit: Option<u64>,
    gap: f64,
    threads: usize,
) -> PyResult<(Bound<'py, PyBytes>, u64, u64, bool, String)> {
    let (lower, upper, size) = (
        column(py, "lower", lower)?,
        column(py, "upper", upper)?,
        column(py, "size", size)?,
    );
    let alignment = alignment.map(|a| column(py, "alignment", a)).transpose()?;
    let n = lower.len();
    if upper.len() != n || size.len() != n || alignment.as_ref().is_some_and(|a| a.len() != n) {
        return Err(input(
            py,
            format!(
                "lower, upper and size{} must have one value per buffer: {n}, {}, {}{}",
                if alignment.is_some() {
                    " and alignment"
                } else {
                    ""
                },
                upper.len(),
                size.len(),
                alignment
                    .as_ref()
                    .map_or_else(String::new, |a| format!(", {}", a.len()))
            ),
        ));
    }
    for (what, values) in [("lower", &lower), ("upper", &upper), ("size", &size)] {
        non_negative(py, what, values)?;
    }
    if let Some(a) = &alignment {
        non_negative(py, "alignment", a)?;
    }
    let strategy = strategy.parse().map_err(|_| {
        input(
            py,
            format!(
                "strategy `{strategy}` is not one of {}",
                memplan_packing::Strategy::ALL
                    .map(memplan_packing::Strategy::name)
                    .join(", ")
            ),
        )
    })?;
    let gap = Gap::from_fraction(gap).ok_or_else(|| {
        input(
            py,
            format!("gap {gap} is not a fraction of the lower bound (0, 0.001, 0.05, ...)"),
        )
    })?;
    let settings = SolveSettings {
        strategy,
        capacity,
        minimize,
        time_limit,
        node_limit,
        gap,
        threads,
    };
    let outcome = py
        .detach(|| -> memplan::Result<_> {
            let options = memplan::solve::options(&settings)?;
            #[allow(clippy::cast_sign_loss, reason = "checked non-negative above")]
            let buffers: Vec<Buffer> = (0..n)
                .map(|i| Buffer {
                    align: alignment.as_ref().map_or(1, |a| a[i] as u64),
                    ..Buffer::new(lower[i] as u64, upper[i] as u64, size[i] as u64)
                })
                .collect();
            let problem = Problem::new(buffers);
            let outcome = memplan_packing::solve(&problem, &options)
                .map_err(|e| memplan::Error::wrap(e).context("cannot solve"))?;
            let offsets: Option<Vec<u8>> = outcome
                .solution
                .as_ref()
                .map(|s| s.offsets.iter().flat_map(|o| o.to_le_bytes()).collect());
            Ok((outcome, offsets))
        })
        .py(py)?;
    let (outcome, offsets) = outcome;
    let Some(offsets) = offsets else {
        let capacity = outcome.capacity.unwrap_or_default();
        return Err(raise(
            py,
            "DoesNotFitError",
            format!(
                "no placement found fits the capacity of {} (smallest found: {}; lower bound {})",
                memplan_ir::ExactBytes(capacity),
                memplan_ir::ExactBytes(outcome.arena),
                memplan_ir::ExactBytes(outcome.lower_bound)
            ),
        ));
    };
    Ok((
        PyBytes::new(py, &offsets),
        outcome.arena,
        outcome.lower_bound,
        outcome.proven_optimal,
        outcome.produced_by.to_string(),
    ))
}
