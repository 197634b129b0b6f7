//! The largest value of a shape symbol (batch, sequence length) whose plan fits a budget.
//!
//! "Fits" means the plan's peak is within the budget, where the peak is what
//! `memplan plan` reports: the activation arena plus the weight region, plus the bytes of
//! graph inputs and outputs the caller provides when [`FitRequest::count_caller_io`] is set
//! (see [`plan_peak`]). Peaks grow with the symbol, so [`largest_fitting`] searches
//! exponentially then by bisection. A value whose lower bound (the weights plus the largest
//! tensor the arena holds) is already over the budget is rejected without planning, and a
//! value whose sizes overflow 64 bits does not fit any budget. The answer `N` is then
//! checked by planning: the plan at `N` fits (and passes [`verify_plan`]), and a plan at
//! `N + 1` does not (unless `N` is the top of the range).

use memplan_ir::GraphError as _;
use memplan_ir::{Bindings, Graph, SizeError, SymbolId, TensorKind};
use memplan_planner::{Plan, PlanContext, PlanError, PlanOptions, verify_plan};

use crate::search::largest_fitting;

/// What to fit.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FitRequest {
    /// The symbol to maximise (`batch`, `seq`).
    pub symbol: String,
    /// The budget in bytes.
    pub budget: u64,
    /// The smallest value to consider (1 by default).
    pub min: u64,
    /// The largest value to consider (`u32::MAX` by default).
    pub max: u64,
    /// Count graph inputs and outputs that live outside the arena (caller-owned).
    pub count_caller_io: bool,
}

impl FitRequest {
    /// This request with [`min`](FitRequest::min) set to `min`.
    pub fn with_min(mut self, min: u64) -> FitRequest {
        self.min = min;
        self
    }

    /// This request with [`max`](FitRequest::max) set to `max`.
    pub fn with_max(mut self, max: u64) -> FitRequest {
        self.max = max;
        self
    }

    /// This request with [`count_caller_io`](FitRequest::count_caller_io) set to `count_caller_io`.
    pub fn with_count_caller_io(mut self, count_caller_io: bool) -> FitRequest {
        self.count_caller_io = count_caller_io;
        self
    }
}

impl FitRequest {
    /// Fit `symbol` into `budget` bytes over `1..=u32::MAX`, the caller's inputs and outputs
    /// not counted.
    pub fn new(symbol: impl Into<String>, budget: u64) -> FitRequest {
        FitRequest {
            symbol: symbol.into(),
            budget,
            min: 1,
            max: u64::from(u32::MAX),
            count_caller_io: false,
        }
    }
}

/// The answer of [`fit_graph`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GraphFit {
    /// The symbol.
    pub symbol: String,
    /// The budget.
    pub budget: u64,
    /// The largest value that fits; `None` when even [`FitRequest::min`] does not.
    pub value: Option<u64>,
    /// The bindings of every symbol at that value (at `min` when nothing fits).
    pub bindings: Bindings,
    /// The plan at that value (verified); `None` when nothing fits.
    pub plan: Option<Plan>,
    /// The graph that plan names when the options fuse kernels ([`PlanOptions::fuse`]): the
    /// graph fused at that value. `None` without fusions (the plan names the graph given).
    pub graph: Option<Graph>,
    /// The peak at that value (at `min` when nothing fits; `u64::MAX` when the sizes at `min`
    /// overflow 64 bits).
    pub peak_bytes: u64,
    /// The peak at `value + 1`, planned to show it does not fit; `None` when `value` is the
    /// top of the range or nothing fits.
    pub next_peak_bytes: Option<u64>,
    /// Plans made.
    pub plans: u32,
    /// Values considered.
    pub probes: u32,
}

/// Why a fit could not be answered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FitError {
    /// The graph has no such symbol.
    #[error("graph `{graph}` has no symbol `{symbol}` ({})", describe_symbols(.symbols))]
    NoSymbol {
        /// The graph.
        graph: String,
        /// The symbol asked for.
        symbol: String,
        /// The symbols it has.
        symbols: Vec<String>,
    },
    /// Other symbols have no value.
    #[error("graph `{graph}` has symbols with no value: {}", .symbols.join(", "))]
    Unbound {
        /// The graph.
        graph: String,
        /// The unbound symbols, by name.
        symbols: Vec<String>,
    },
    /// An empty range.
    #[error("empty range: the smallest value {min} is above the largest {max}")]
    EmptyRange {
        /// Smallest value.
        min: u64,
        /// Largest value.
        max: u64,
    },
    /// Planning failed for a reason other than size.
    #[error("planning at {symbol} = {value}: {error}")]
    Plan {
        /// The symbol.
        symbol: String,
        /// Its value.
        value: u64,
        /// Why.
        error: PlanError,
    },
    /// The plan at the answer failed the verifier (a planner bug).
    #[error("the plan at {symbol} = {value} fails the plan verifier: {problems}")]
    Verify {
        /// The symbol.
        symbol: String,
        /// Its value.
        value: u64,
        /// The verifier's report.
        problems: String,
    },
}

fn describe_symbols(symbols: &[String]) -> String {
    if symbols.is_empty() {
        "it has no symbolic dims".to_owned()
    } else {
        format!("it has: {}", symbols.join(", "))
    }
}

/// The peak of `plan`: arena plus weight region, plus the bytes of graph inputs and outputs
/// kept outside the arena when `count_caller_io` is set ([`Plan::device_bytes`], sized with
/// the plan's bindings). `None` on overflow or when a caller-owned size is unknown.
pub fn plan_peak(graph: &Graph, plan: &Plan, count_caller_io: bool) -> Option<u64> {
    let device = plan.device_bytes(graph).ok()?;
    Some(if count_caller_io {
        device.total
    } else {
        device.planned()
    })
}

/// What one value gave.
#[derive(Clone, Copy, Debug)]
enum Probe {
    /// Planned: its peak.
    Planned(u64),
    /// Not planned: a lower bound already over the budget (`None`: past 64 bits).
    Bounded(Option<u64>),
}

/// A lower bound on the peak at `bindings`: the weights plus the largest tensor the arena
/// holds, plus caller-owned inputs and outputs when counted. `None` when a size overflows.
fn lower_bound(
    graph: &Graph,
    options: &PlanOptions,
    bindings: &Bindings,
    count_caller_io: bool,
) -> Result<Option<u64>, PlanError> {
    let mut weights: u64 = 0;
    let mut largest: u64 = 0;
    let mut caller: u64 = 0;
    for t in graph.tensors().iter() {
        let bytes = match t.bytes(bindings) {
            Ok(b) => b,
            Err(SizeError::Overflow) => return Ok(None),
            // Let the planner report anything else, in its own words.
            Err(_) => return Ok(Some(0)),
        };
        let in_arena = match t.kind {
            TensorKind::Weight | TensorKind::State => {
                weights = match weights.checked_add(bytes) {
                    Some(w) => w,
                    None => return Ok(None),
                };
                continue;
            }
            TensorKind::Activation => true,
            TensorKind::Input => options.inputs_in_arena,
            TensorKind::Output => options.outputs_in_arena,
        };
        if in_arena {
            largest = largest.max(bytes);
        } else if count_caller_io {
            caller = match caller.checked_add(bytes) {
                Some(c) => c,
                None => return Ok(None),
            };
        }
    }
    Ok(weights
        .checked_add(largest)
        .and_then(|v| v.checked_add(caller)))
}

/// The largest value of `request.symbol` whose plan of `graph` (planned with `options`,
/// whose bindings give every other symbol) fits `request.budget`.
///
/// ```
/// use memplan_ir::{DType, Graph, Node, Tensor, TensorKind};
/// use memplan_planner::PlanOptions;
/// use memplan_tracker::{FitRequest, fit_graph};
///
/// // y = relu(x), x and y f32[batch, 1024]: 4 KiB each per batch element.
/// let json = r#"{"name": "g", "symbols": ["batch"], "tensors": [
///   {"name": "x", "dtype": "f32", "shape": ["batch", 1024], "kind": "input"},
///   {"name": "h", "dtype": "f32", "shape": ["batch", 1024], "kind": "activation"},
///   {"name": "y", "dtype": "f32", "shape": ["batch", 1024], "kind": "output"}],
///   "nodes": [{"name": "n0", "op": "Exp", "inputs": ["x"], "outputs": ["h"]},
///             {"name": "n1", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]}"#;
/// let graph = Graph::from_json(json).unwrap();
/// let fit = fit_graph(&graph, &PlanOptions::default(), &FitRequest::new("batch", 1 << 20))
///     .unwrap();
/// // x is an input (never overwritten), h and y share bytes: 8 KiB per element.
/// assert_eq!(fit.value, Some(128));
/// assert!(fit.peak_bytes <= 1 << 20 && fit.next_peak_bytes.unwrap() > 1 << 20);
/// ```
pub fn fit_graph(
    graph: &Graph,
    options: &PlanOptions,
    request: &FitRequest,
) -> Result<GraphFit, FitError> {
    let symbol = graph
        .find_symbol(&request.symbol)
        .ok_or_else(|| FitError::NoSymbol {
            graph: graph.name.clone(),
            symbol: request.symbol.clone(),
            symbols: graph.symbols().iter().cloned().collect(),
        })?;
    let unbound: Vec<String> = graph
        .symbols()
        .iter_enumerated()
        // A broadcast or quotient symbol follows from its dims (the planner resolves it).
        .filter(|&(id, _)| {
            id != symbol && options.bindings.get(id).is_none() && !graph.is_derived(id)
        })
        .map(|(_, name)| name.clone())
        .collect();
    if !unbound.is_empty() {
        return Err(FitError::Unbound {
            graph: graph.name.clone(),
            symbols: unbound,
        });
    }
    if request.min > request.max {
        return Err(FitError::EmptyRange {
            min: request.min,
            max: request.max,
        });
    }

    // Kernels are fused once for every value (what they replace does not depend on sizes);
    // the `constants` fusion, which measures, at each value.
    let kernels_fused;
    let graph = if options.fuse.is_none() {
        graph
    } else {
        let kernels = options
            .clone()
            .with_fuse(options.fuse.with_constants(false));
        kernels_fused = memplan_planner::fuse_graph(graph, &kernels)
            .map_err(|error| FitError::Plan {
                symbol: request.symbol.clone(),
                value: request.min,
                // The error renders with the graph's names wherever it is printed.
                error: error.found_in(|| graph.clone()),
            })?
            .graph;
        &kernels_fused
    };
    let mut fitter = Fitter {
        graph,
        options,
        request,
        symbol,
        probes: Vec::new(),
        best: None,
        plans: 0,
        work: PlanContext::new(),
    };
    let outcome = largest_fitting(request.min, request.max, |v| {
        Ok(match fitter.probe(v, false)? {
            Probe::Planned(peak) => peak <= request.budget,
            Probe::Bounded(_) => false,
        })
    })?;

    let mut fused_graph = None;
    let (value, plan, bindings, peak_bytes, next_peak_bytes) = match outcome.largest {
        Some(n) => {
            let next = if n < request.max {
                match fitter.probe(n + 1, true)? {
                    Probe::Planned(peak) => Some(peak),
                    Probe::Bounded(bound) => Some(bound.unwrap_or(u64::MAX)),
                }
            } else {
                None
            };
            let (value, plan, bindings, peak, planned) =
                fitter.best.take().ok_or_else(|| FitError::Verify {
                    symbol: request.symbol.clone(),
                    value: n,
                    problems: "no plan was kept for the answer (a bug in the search)".to_owned(),
                })?;
            let planned_graph = planned.as_ref().unwrap_or(graph);
            if let Err(problems) = verify_plan(planned_graph, &plan) {
                return Err(FitError::Verify {
                    symbol: request.symbol.clone(),
                    value,
                    problems: problems.with_graph(planned_graph).to_string(),
                });
            }
            fused_graph = planned;
            (Some(value), Some(plan), bindings, peak, next)
        }
        None => {
            // Plan the smallest value to report its real peak (the search may have ruled it
            // out by the bound alone).
            let peak = match fitter.probe(request.min, true)? {
                Probe::Planned(p) | Probe::Bounded(Some(p)) => p,
                Probe::Bounded(None) => u64::MAX,
            };
            (None, None, fitter.bindings(request.min), peak, None)
        }
    };
    Ok(GraphFit {
        symbol: request.symbol.clone(),
        budget: request.budget,
        value,
        bindings,
        plan,
        graph: fused_graph,
        peak_bytes,
        next_peak_bytes,
        plans: fitter.plans,
        probes: outcome.probes,
    })
}

struct Fitter<'a> {
    graph: &'a Graph,
    options: &'a PlanOptions,
    request: &'a FitRequest,
    symbol: SymbolId,
    probes: Vec<(u64, Probe)>,
    /// The largest fitting value planned so far, with its plan, bindings, peak and the
    /// graph the plan names.
    best: Option<(u64, Plan, Bindings, u64, Option<Graph>)>,
    plans: u32,
    /// The planner's working memory, reused by every plan of the search.
    work: PlanContext,
}

impl Fitter<'_> {
    fn bindings(&self, value: u64) -> Bindings {
        let given = self.options.bindings.clone().with(self.symbol, value);
        // With the broadcast symbols that value decides (dims that do not broadcast are left
        // for the planner to report).
        self.graph.resolve(&given).unwrap_or(given)
    }

    fn cached(&self, value: u64) -> Option<Probe> {
        self.probes
            .iter()
            .find(|(v, _)| *v == value)
            .map(|&(_, p)| p)
    }

    /// The peak at `value`, planned unless the lower bound already rules it out (or
    /// `must_plan` is set and the sizes are representable).
    fn probe(&mut self, value: u64, must_plan: bool) -> Result<Probe, FitError> {
        if let Some(p @ Probe::Planned(_)) = self.cached(value) {
            return Ok(p);
        }
        let bindings = self.bindings(value);
        // The error renders with the graph's names wherever it is printed (one planned here
        // carries the fused graph already).
        let plan_error = |error: PlanError| FitError::Plan {
            symbol: self.request.symbol.clone(),
            value,
            error: error.found_in(|| self.graph.clone()),
        };
        let bound = lower_bound(
            self.graph,
            self.options,
            &bindings,
            self.request.count_caller_io,
        )
        .map_err(plan_error)?;
        let probe = match bound {
            None => Probe::Bounded(None),
            Some(b) if b > self.request.budget && !must_plan => Probe::Bounded(Some(b)),
            Some(_) => {
                let options = self.options.clone().with_bindings(bindings.clone());
                self.plans += 1;
                let fused = if options.fuse.is_none() {
                    Ok(None)
                } else {
                    memplan_planner::fuse_graph(self.graph, &options).map(|f| Some(f.graph))
                };
                let planned = match fused {
                    Ok(Some(g)) => match self.work.plan(&g, &options) {
                        Ok(p) => Ok((p, Some(g))),
                        // The fused graph is made here: the error carries it.
                        Err(e) => Err(e.found_in(|| g)),
                    },
                    Ok(None) => self.work.plan(self.graph, &options).map(|p| (p, None)),
                    Err(e) => Err(e),
                };
                match planned {
                    Ok((plan, fused)) => {
                        let g = fused.as_ref().unwrap_or(self.graph);
                        match plan_peak(g, &plan, self.request.count_caller_io) {
                            Some(peak) => {
                                let better = self.best.as_ref().is_none_or(|b| b.0 < value);
                                if peak <= self.request.budget && better {
                                    self.best = Some((value, plan, bindings, peak, fused));
                                }
                                Probe::Planned(peak)
                            }
                            None => Probe::Bounded(None),
                        }
                    }
                    // Byte sizes past 64 bits fit no budget.
                    Err(PlanError::Overflow { .. }) => Probe::Bounded(None),
                    Err(error) => return Err(plan_error(error)),
                }
            }
        };
        self.probes.push((value, probe));
        Ok(probe)
    }
}
