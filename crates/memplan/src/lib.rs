//! memplan in one dependency: the library crates re-exported, and everything the `memplan`
//! command prints or writes as library functions that the command (and the Python package)
//! call.
//!
//! - The layers: [`ir`] (the graph IR), [`packing`] (buffers with lifetimes in, offsets
//!   out), [`planner`] (the graph planner and its verifier), [`arena`] (layouts, the host
//!   arena and its byte-pattern check), [`tracker`] (estimates, budgets, fitting) and, with
//!   the `onnx` feature, [`onnx`].
//! - [`load`]: a graph from memplan JSON or ONNX told apart by content, `--dim` values, and a
//!   graph made ready for planning ([`load::prepare`]).
//! - [`options`]: every planning option by name ([`options::PlanSettings::set`]), as the
//!   command line and the Python package spell them, turned into the planner's options.
//! - [`plan`]: plan a prepared graph as `memplan plan` does, verified, forward or a training
//!   step ([`plan::Planned`]), and its plan file.
//! - [`report`], [`picture`]: the text report and the SVG and HTML pictures of a plan.
//! - [`check`]: the verifier and the plan run on a host arena with the byte-pattern check.
//! - [`solve`]: the limits `memplan solve` gives the packing engine.
//! - [`inspect`], [`compare`]: a graph's summary; strategies, schedules and aliasing
//!   compared.
//! - [`training`]: a training step's report, plan file and batch fit; training state in
//!   ONNX Runtime's graphs.
//! - [`estimate`], [`fit`]: a transformer's memory from its config, the largest batch or
//!   context that fits, a serving engine's KV cache.
//!
//! Features: `onnx` (default) reads `.onnx` files; `cuda` adds the device arena and a
//! device's free memory as a budget.
//!
//! Failures are one [`Error`] whose [`ErrorKind`] says bad input, an unsafe plan or "does
//! not fit". What a function assumed or noticed on the way (a data-dependent size planned
//! at its bound, inputs found to be training state) goes to a [`Notes`] sink, which the
//! command prints on standard error and the Python package keeps.
//!
//! ```
//! let graph = memplan::load::default_graph().unwrap();
//! let settings = memplan::options::PlanSettings::default();
//! let mut notes = Vec::new();
//! let (graph, options) = memplan::load::prepare(graph, &settings, &mut notes).unwrap();
//! let planned = memplan::plan::plan(&graph, &settings, &options).unwrap();
//! assert!(planned.plan().arena_bytes >= planned.plan().lower_bound_bytes);
//! let report = planned.report(10).unwrap();
//! assert!(report.starts_with("graph light_densenet121_b1: "));
//! ```

pub use memplan_cuda_arena as arena;
pub use memplan_ir as ir;
pub use memplan_layout as layout;
#[cfg(feature = "onnx")]
pub use memplan_onnx as onnx;
pub use memplan_packing as packing;
pub use memplan_planner as planner;
pub use memplan_tracker as tracker;

pub mod check;
pub mod compare;
mod error;
pub mod estimate;
pub mod fit;
pub mod inspect;
pub mod load;
pub mod options;
pub mod output;
pub mod picture;
pub mod plan;
pub mod report;
pub mod solve;
pub mod step_graph;
pub mod training;

pub use error::{Context, Error, ErrorKind, Result, chain, chain_report, flag_advice, kind_of};

/// Where the notes of a function go: what it assumed or noticed on the way, one line each
/// (the command prints them on standard error unless `--quiet`).
pub trait Notes {
    /// One note.
    fn note(&mut self, text: String);
}

impl Notes for Vec<String> {
    fn note(&mut self, text: String) {
        self.push(text);
    }
}

impl<F: FnMut(String)> Notes for F {
    fn note(&mut self, text: String) {
        self(text);
    }
}

/// A sink that drops every note.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl Notes for Quiet {
    fn note(&mut self, _text: String) {}
}

/// `memplan VERSION`: what the plan files this facade writes say produced them.
pub const PRODUCED_BY: &str = concat!("memplan ", env!("CARGO_PKG_VERSION"));

/// A size for people: `6.89 MiB`, `43.50 GiB`, `512 B`.
pub fn size(bytes: u64) -> String {
    memplan_ir::HumanBytes(bytes).to_string()
}

/// Digits grouped by thousands: `6,738,415,616`.
pub fn group_digits(value: u64) -> String {
    memplan_ir::Grouped(value).to_string()
}
