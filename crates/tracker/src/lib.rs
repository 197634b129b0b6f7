//! Will it fit? Memory estimates before allocation, a race-free budget tracker, pre-flight
//! checks and the largest batch (or context) that fits a budget.
//!
//! - [`fit_graph`]: the largest value of a shape symbol whose *plan* (arena + weight region,
//!   as `memplan plan` computes it) fits a budget, by exponential then binary search, the
//!   answer checked by planning at `N` (fits) and `N + 1` (does not).
//! - [`estimate`]: figures without a graph, with checked arithmetic: [`estimate::tensor_bytes`],
//!   attention ([`estimate::AttentionShape`]) and whole transformers from a Hugging Face
//!   `config.json` ([`estimate::TransformerConfig`], [`estimate::estimate`]): parameters,
//!   weights, KV cache, activations, gradients and optimizer states.
//! - [`MemoryTracker`]: run-time accounting against a limit where the check and the update
//!   are one compare-and-swap, with RAII [`Reservation`]s and per-[`Tag`] high-water marks.
//! - [`preflight`]: a plan against the memory available, naming what would fit instead.
//! - [`parse_size`] and [`HumanBytes`]: `24GiB`, `24GB`, `512MiB` in and out.
//!
//! ```
//! use memplan_ir::DType;
//! use memplan_tracker::estimate::{TransformerConfig, Workload, estimate};
//! use memplan_tracker::{largest_fitting, parse_size};
//!
//! let config = TransformerConfig::from_hf_json(r#"{"model_type": "gpt2", "n_embd": 768,
//!     "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}"#).unwrap();
//! assert_eq!(config.parameters().unwrap(), 124_439_808);
//! let budget = parse_size("8GiB").unwrap();
//! // The largest batch of 1024-token sequences GPT-2 serves in 8 GiB of f16.
//! let fit = largest_fitting(1, 1 << 20, |batch| {
//!     let e = estimate(&config, &Workload::inference(batch, 1024, DType::F16))?;
//!     Ok::<_, memplan_tracker::estimate::EstimateError>(e.total_bytes <= budget)
//! })
//! .unwrap();
//! assert!(fit.largest.is_some_and(|b| b > 1));
//! ```

pub mod estimate;
mod fit;
mod preflight;
mod search;
mod size;
mod sync;
mod tracker;

/// The graph crate whose types the tracker reads ([`fit_graph`]'s `Graph`, the estimates'
/// `DType`): `memplan_tracker::ir::DType` is `memplan_ir::DType`, so a tracker user needs no
/// `memplan-ir` dependency of its own.
pub use memplan_ir as ir;
/// The planner whose plans the tracker fits and checks ([`fit_graph`]'s `PlanOptions`,
/// [`preflight`]'s `Plan`).
pub use memplan_planner as planner;

pub use fit::{FitError, FitRequest, GraphFit, fit_graph, plan_peak};
pub use preflight::{Headroom, PreflightError, Suggestion, preflight};
pub use search::{BeyondOutcome, SearchOutcome, largest_fitting, largest_fitting_beyond};
pub use size::{HumanBytes, SizeParseError, group_digits, parse_size};
pub use tracker::{MemoryTracker, Reservation, Snapshot, Tag, TrackerError, Usage};
