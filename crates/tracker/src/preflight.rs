//! Pre-flight: does a plan fit the memory there is, and if not, what would?
//!
//! [`preflight`] compares a plan's peak ([`crate::plan_peak`]) with a budget: a number the
//! caller gives, or the free memory of a device (the CLI asks the CUDA driver when built
//! with `--features cuda`). When it does not fit, the error states the bytes needed and
//! available and, when a symbol is named, the largest value of it that would fit
//! (searched with [`crate::fit_graph`]).

use memplan_ir::Graph;
use memplan_planner::{Plan, PlanOptions};

use crate::fit::{FitError, FitRequest, fit_graph, plan_peak};

/// A plan that fits, and by how much.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Headroom {
    /// Bytes the plan needs.
    pub needed: u64,
    /// Bytes available.
    pub available: u64,
}

impl Headroom {
    /// Bytes left over.
    pub fn free(&self) -> u64 {
        self.available - self.needed
    }
}

/// What would fit instead, for [`PreflightError::DoesNotFit`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Suggestion {
    /// No symbol was named.
    None,
    /// The largest value of the symbol that fits.
    Largest {
        /// The symbol.
        symbol: String,
        /// Its largest fitting value.
        value: u64,
    },
    /// Even the smallest value of the symbol does not fit.
    Nothing {
        /// The symbol.
        symbol: String,
    },
}

/// Why a pre-flight check failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PreflightError {
    /// The plan needs more than is available.
    #[error("graph `{graph}` needs {} but only {} are available{}",
        memplan_ir::ExactBytes(*.needed), memplan_ir::ExactBytes(*.available), describe(.suggestion))]
    DoesNotFit {
        /// The graph.
        graph: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
        /// What would fit.
        suggestion: Suggestion,
    },
    /// The peak does not fit in 64 bits.
    #[error("the peak of graph `{0}` overflows 64 bits")]
    Overflow(String),
    /// Searching for a value that fits failed.
    #[error(transparent)]
    Fit(#[from] FitError),
}

fn describe(s: &Suggestion) -> String {
    match s {
        Suggestion::None => String::new(),
        Suggestion::Largest { symbol, value } => {
            format!("; the largest {symbol} that fits is {value}")
        }
        Suggestion::Nothing { symbol } => format!("; no value of {symbol} fits"),
    }
}

/// Checks that `plan` (made from `graph` with `options`) fits in `available` bytes. On
/// failure, and when `symbol` is given, searches for the largest value of it that fits.
///
/// ```
/// use memplan_ir::Graph;
/// use memplan_planner::{PlanOptions, plan_graph};
/// use memplan_tracker::{PreflightError, Suggestion, preflight};
/// let json = r#"{"name": "g", "symbols": ["batch"], "tensors": [
///   {"name": "x", "dtype": "f32", "shape": ["batch", 256], "kind": "input"},
///   {"name": "y", "dtype": "f32", "shape": ["batch", 256], "kind": "output"}],
///   "nodes": [{"name": "n", "op": "Exp", "inputs": ["x"], "outputs": ["y"]}]}"#;
/// let graph = Graph::from_json(json).unwrap();
/// let options = PlanOptions::default().with_bindings(graph.bind(&[("batch", 64)]).unwrap());
/// let plan = plan_graph(&graph, &options).unwrap(); // 2 × 64 KiB
/// assert!(preflight(&graph, &options, &plan, 1 << 17, false, Some("batch")).is_ok());
/// let err = preflight(&graph, &options, &plan, 100_000, false, Some("batch")).unwrap_err();
/// let PreflightError::DoesNotFit { suggestion, .. } = &err else { panic!() };
/// assert_eq!(suggestion, &Suggestion::Largest { symbol: "batch".into(), value: 48 });
/// ```
pub fn preflight(
    graph: &Graph,
    options: &PlanOptions,
    plan: &Plan,
    available: u64,
    count_caller_io: bool,
    symbol: Option<&str>,
) -> Result<Headroom, PreflightError> {
    let needed = plan_peak(graph, plan, count_caller_io)
        .ok_or_else(|| PreflightError::Overflow(graph.name.clone()))?;
    if needed <= available {
        return Ok(Headroom { needed, available });
    }
    let suggestion = match symbol {
        None => Suggestion::None,
        Some(symbol) => {
            let request = FitRequest {
                count_caller_io,
                ..FitRequest::new(symbol, available)
            };
            match fit_graph(graph, options, &request)?.value {
                Some(value) => Suggestion::Largest {
                    symbol: symbol.to_owned(),
                    value,
                },
                None => Suggestion::Nothing {
                    symbol: symbol.to_owned(),
                },
            }
        }
    };
    Err(PreflightError::DoesNotFit {
        graph: graph.name.clone(),
        needed,
        available,
        suggestion,
    })
}
