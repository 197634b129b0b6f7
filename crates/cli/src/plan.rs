//! `memplan plan`: plan a graph's memory — schedule, lifetimes, aliasing, arena offsets —
//! and print it as a text report or as the plan JSON downstream tools read.
//!
//! With `-o FILE` the output is written atomically (a temporary file in the same folder,
//! then a rename), so an error never leaves a half-written file. Every plan is
//! checked by the independent plan verifier (unless `--no-verify`); a plan that fails it is
//! not written, its problems are printed, and the exit status is 1.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use memplan_ir::{Bindings, Graph};
use memplan_packing::Strategy;
use memplan_planner::{PlanOptions, ScheduleMode, plan_graph, verify_plan};

use crate::load::{self, DEFAULT_GRAPH_NAME};

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A readable report.
    Text,
    /// The plan JSON.
    Json,
}

/// Which execution order to plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Schedule {
    /// The graph's node order.
    Given,
    /// A memory-aware order, never worse than the given one.
    Memory,
}

/// The graph and the planning options, shared by `memplan plan` and `memplan check`.
#[derive(Debug, clap::Args)]
pub struct PlanningArgs {
    /// Graph file (memplan JSON or .onnx). Without one, the embedded default graph.
    pub graph: Option<PathBuf>,
    /// Execution order: the graph's own, or a memory-aware one.
    #[arg(long, value_enum, default_value_t = Schedule::Given)]
    schedule: Schedule,
    /// Packing strategy (`auto`: every heuristic, then the exact search within its budget).
    #[arg(long, default_value = "auto", value_parser = strategy_parser())]
    strategy: Strategy,
    /// Do not write outputs over dead inputs.
    #[arg(long)]
    no_inplace: bool,
    /// Do not place view outputs (Reshape, contiguous Slice, ...) inside their inputs.
    #[arg(long)]
    no_views: bool,
    /// Alignment of every buffer offset in bytes (a power of two).
    #[arg(long, default_value_t = 256)]
    align: u64,
    /// Leave graph inputs out of the arena (the caller provides them).
    #[arg(long)]
    caller_inputs: bool,
    /// Leave graph outputs out of the arena (the caller provides them).
    #[arg(long)]
    caller_outputs: bool,
    /// Value of a shape symbol, NAME=VALUE (repeatable), e.g. `--dim batch=8`.
    #[arg(long = "dim", value_parser = load::parse_dim)]
    dims: Vec<(String, u64)>,
    /// Plan every data-dependent size that the graph bounds (a NonZero count, a Slice with
    /// runtime bounds, ...) at its bound, so that the plan holds for any smaller value; says
    /// which sizes it bounded. `--dim` values win over bounds.
    #[arg(long)]
    bound: bool,
}

impl PlanningArgs {
    /// Loads the graph as it is, symbols and all, with the planner options carrying the
    /// `--dim` values as bindings (for `fit` and `preflight`, which plan at several values).
    pub fn load_symbolic(&self) -> anyhow::Result<(Graph, PlanOptions)> {
        let graph = load::load_graph(self.graph.as_deref())?;
        let pairs: Vec<(&str, u64)> = self.dims.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let options = PlanOptions {
            bindings: graph.bind(&pairs).map_err(anyhow::Error::msg)?,
            ..self.options()?
        };
        Ok((graph, options))
    }

    /// Whether `--dim NAME=...` was given.
    pub fn binds(&self, name: &str) -> bool {
        self.dims.iter().any(|(n, _)| n == name)
    }

    /// The alignment asked for, checked to be a power of two.
    pub fn align(&self) -> anyhow::Result<u64> {
        if !self.align.is_power_of_two() {
            bail!("--align {} is not a power of two", self.align);
        }
        Ok(self.align)
    }

    /// Loads the graph with every symbol bound; `verb` says what happens to the embedded
    /// default when no file is given.
    pub fn load(&self, verb: &str) -> anyhow::Result<Graph> {
        if self.graph.is_none() {
            eprintln!("no graph given: {verb} the embedded {DEFAULT_GRAPH_NAME}");
        }
        load::load_static(self.graph.as_deref(), &self.dims, self.bound)
    }

    /// The planner options these arguments ask for.
    pub fn options(&self) -> anyhow::Result<PlanOptions> {
        Ok(PlanOptions {
            bindings: Bindings::new(),
            schedule: match self.schedule {
                Schedule::Given => ScheduleMode::Given,
                Schedule::Memory => ScheduleMode::Memory,
            },
            views: !self.no_views,
            inplace: !self.no_inplace,
            inputs_in_arena: !self.caller_inputs,
            outputs_in_arena: !self.caller_outputs,
            alignment: self.align()?,
            strategy: self.strategy,
            ..PlanOptions::default()
        })
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    planning: PlanningArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the output to FILE (atomically) instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Skip the independent plan verifier (by default every plan is checked before it is
    /// written).
    #[arg(long)]
    no_verify: bool,
    /// Accepted for compatibility: plans are verified by default.
    #[arg(long, hide = true)]
    verify: bool,
    /// How many of the largest buffers the text report lists.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

/// The packing strategies by name, listed in `--help` from [`Strategy::ALL`], so a new
/// strategy needs no change here.
pub fn strategy_parser() -> impl clap::builder::TypedValueParser<Value = Strategy> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(Strategy::ALL.map(Strategy::name))
        .map(|name| name.parse::<Strategy>().unwrap_or_default())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = args.planning.options()?;
    let graph = args.planning.load("planning")?;
    let plan =
        plan_graph(&graph, &options).with_context(|| format!("planning graph `{}`", graph.name))?;
    let verify = !args.no_verify;
    if verify && let Err(problems) = verify_plan(&graph, &plan) {
        eprintln!("error: {problems}");
        return Ok(ExitCode::from(1));
    }
    let mut text = match args.format {
        Format::Json => plan.to_json(&graph),
        Format::Text => plan.report(&graph, args.top),
    };
    if verify && args.format == Format::Text {
        text.push_str("verified: the plan passes the plan verifier\n");
    }
    match &args.output {
        Some(path) => crate::output::write_atomically(path, text.as_bytes())?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .context("writing to standard output")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
