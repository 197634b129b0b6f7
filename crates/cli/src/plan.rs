//! `memplan plan`: plan a graph's memory — schedule, lifetimes, aliasing, arena offsets —
//! and print it as a text report or as the plan JSON downstream tools read.
//!
//! With `-o FILE` the output is written atomically (a temporary file in the same folder,
//! then a rename), so an error never leaves a half-written file. Every plan is
//! checked by the independent plan verifier (unless `--no-verify`); a plan that fails it is
//! not written, its problems are printed, and the exit status is 1.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use memplan_ir::GraphError as _;
use memplan_ir::{Bindings, Graph, OpRule, OpTable};
use memplan_packing::Strategy;
use memplan_planner::{AttentionKernel, PlanOptions, ScheduleMode, plan_graph, verify_plan};

use crate::load::{self, DEFAULT_GRAPH_NAME};
use crate::ui;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A readable report, sizes in human units.
    Text,
    /// JSON with exact byte counts (for `plan`, the plan file; see docs/FORMATS.md).
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

/// The kernel fused attention ops run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Attention {
    /// Kernels that materialise the scores (batch x heads x q x kv): the safe assumption.
    Eager,
    /// Flash kernels: per-row statistics only.
    Flash,
}

/// The graph and the planning options, shared by `memplan plan` and `memplan check`.
#[derive(Debug, clap::Args)]
pub struct PlanningArgs {
    /// Graph file: memplan JSON or ONNX (recognised by content), `-` for standard input.
    /// Without one, the embedded default graph.
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
    /// Do not let producers write straight into their slice of a Concat's output (by default
    /// each Concat's inputs are written there where that lowers the peak).
    #[arg(long)]
    no_concat_elision: bool,
    /// Plan tensors computed from weights alone (a tied embedding's transpose, a weight cast)
    /// as activations computed on every run, for runtimes that do not fold constants (by
    /// default they are computed once at load, in the weight region).
    #[arg(long)]
    no_fold_weights: bool,
    /// The kernel fused attention ops (ONNX `Attention`, ONNX Runtime's `Attention`,
    /// `MultiHeadAttention`, `GroupQueryAttention`) run with: `eager` gives each the scratch
    /// of its scores, `flash` per-row statistics only.
    #[arg(long, value_enum, default_value_t = Attention::Eager)]
    attention: Attention,
    /// Ops whose kernels need outputs of their own (never views, never in place), e.g.
    /// `--opaque Softmax,LayerNormalization` for kernels that cannot normalise in place.
    #[arg(long, value_name = "OP,...", value_delimiter = ',')]
    opaque: Vec<String>,
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
    /// runtime bounds, ...) at its bound, so that the plan holds for any smaller value (no
    /// view, Concat part or in-place write that such a value would move is made; the plan is
    /// verified below the bounds too); says which sizes it bounded. `--dim` values win over
    /// bounds.
    #[arg(long)]
    bound: bool,
    /// Graph inputs that are persistent training state (name patterns, `*` a wildcard):
    /// planned in the persistent region, never reused. ONNX Runtime's parameters and
    /// gradient buffers, and inputs an op updates in place, are recognised without it.
    #[arg(long, value_name = "PATTERN", value_delimiter = ',')]
    persistent: Vec<String>,
    /// Size an optimizer graph's sequence inputs from the parameters of this model (ONNX
    /// Runtime's training graph, or the forward model).
    #[arg(long, value_name = "FILE")]
    parameters: Option<PathBuf>,
}

impl PlanningArgs {
    /// The planning options given that a plan file already decides (`check --plan` reads
    /// them from the file): their flags, for an error that names them. A value equal to
    /// the default (`--align 256`) cannot be told from none.
    pub fn planning_flags(&self) -> Vec<&'static str> {
        let given = [
            (self.schedule != Schedule::Given, "--schedule"),
            (self.strategy != Strategy::default(), "--strategy"),
            (self.no_inplace, "--no-inplace"),
            (self.no_views, "--no-views"),
            (self.no_concat_elision, "--no-concat-elision"),
            (self.no_fold_weights, "--no-fold-weights"),
            (self.attention != Attention::Eager, "--attention"),
            (!self.opaque.is_empty(), "--opaque"),
            (self.align != 256, "--align"),
            (self.caller_inputs, "--caller-inputs"),
            (self.caller_outputs, "--caller-outputs"),
        ];
        given
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, flag)| flag)
            .collect()
    }

    /// Loads the graph as it is, symbols and all, with the planner options carrying the
    /// `--dim` values as bindings (for `fit` and `preflight`, which plan at several values).
    pub fn load_symbolic(&self) -> anyhow::Result<(Graph, PlanOptions)> {
        let mut graph = load::load_graph(self.graph.as_deref())?;
        crate::training::mark_persistent(&mut graph, &self.persistent)?;
        let options = PlanOptions {
            bindings: load::bindings(&graph, &self.dims)?,
            ..self.options()?
        };
        Ok((graph, options))
    }

    /// Loads the graph as it is, symbols and all, with `--persistent` inputs marked.
    pub fn load_marked(&self) -> anyhow::Result<Graph> {
        let mut graph = load::load_graph(self.graph.as_deref())?;
        crate::training::mark_persistent(&mut graph, &self.persistent)?;
        Ok(graph)
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

    /// The `--dim` values given.
    pub fn dims(&self) -> &[(String, u64)] {
        &self.dims
    }

    /// Loads the graph, symbols kept, with the planner options carrying the `--dim` values
    /// (and with `--bound` the bounds) as bindings, every size bound; `verb` says what
    /// happens to the embedded default when no file is given.
    pub fn load_planned(&self, verb: &str) -> anyhow::Result<(Graph, PlanOptions)> {
        if self.graph.is_none() {
            ui::note(format!(
                "no graph given: {verb} the embedded {DEFAULT_GRAPH_NAME}"
            ));
        }
        let mut graph = load::load_graph(self.graph.as_deref())?;
        crate::training::mark_persistent(&mut graph, &self.persistent)?;
        let mut dims = self.dims.clone();
        dims.extend(crate::training::extra_dims(
            &graph,
            self.parameters.as_ref(),
        )?);
        let (graph, bindings, bounded) = load::bind_for_planning(graph, &dims, self.bound)?;
        let options = PlanOptions {
            bindings,
            bounded,
            ..self.options()?
        };
        Ok((graph, options))
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
            concat_elision: !self.no_concat_elision,
            inputs_in_arena: !self.caller_inputs,
            outputs_in_arena: !self.caller_outputs,
            alignment: self.align()?,
            strategy: self.strategy,
            op_table: opaque_table(&self.opaque)?,
            fold_weights: !self.no_fold_weights,
            attention: match self.attention {
                Attention::Eager => AttentionKernel::Eager,
                Attention::Flash => AttentionKernel::Flash,
            },
            ..PlanOptions::default()
        })
    }
}

/// The default op table with `--opaque` ops made opaque. An op named in another case than
/// an op the table knows is an error (`softmax` for `Softmax`); an op the table does not
/// know, or already makes opaque, gets a note: it is opaque already, so the flag changes
/// nothing.
fn opaque_table(opaque: &[String]) -> anyhow::Result<OpTable> {
    let mut table = OpTable::default();
    let known = OpTable::default();
    for op in opaque {
        if !known.states(op) {
            if let Some(near) = known.ops().into_iter().find(|k| k.eq_ignore_ascii_case(op)) {
                bail!(
                    "--opaque {op}: no op is called `{op}`; op names are case-sensitive: did you mean `{near}`?"
                );
            }
            ui::note(format!(
                "note: --opaque {op}: no memory rule is known for `{op}`, so it is opaque already (op names are case-sensitive, as in the graph)"
            ));
        } else if *known.rule(op) == OpRule::Opaque {
            ui::note(format!(
                "note: --opaque {op}: `{op}` always needs outputs of its own already"
            ));
        }
        table.insert(op, OpRule::Opaque);
    }
    Ok(table)
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    planning: PlanningArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the report or plan to FILE (atomically) instead of standard output; `-` is
    /// standard output.
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
    /// Also draw the plan as an SVG picture (steps across, addresses up).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Also draw the plan as one self-contained HTML page (hover, zoom, search; offline).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write the graph the plan is a plan of to FILE, in the graph format (for a
    /// training step, the derived step graph, which a plan file otherwise holds itself: the
    /// file then names FILE and its digest instead).
    #[arg(long, value_name = "FILE")]
    emit_graph: Option<PathBuf>,
    #[command(flatten)]
    training: crate::training::TrainingArgs,
}

/// The packing strategies by name, listed in `--help` from [`Strategy::ALL`], so a new
/// strategy needs no change here.
pub fn strategy_parser() -> impl clap::builder::TypedValueParser<Value = Strategy> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(Strategy::ALL.map(Strategy::name))
        .map(|name| name.parse::<Strategy>().unwrap_or_default())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.top == 0 {
        bail!("--top 0 lists nothing: give at least 1");
    }
    let (graph, options) = args.planning.load_planned("planning")?;
    if let Some(training) = args.training.options(&options)? {
        return run_training(&args, &graph, &training);
    }
    let plan =
        plan_graph(&graph, &options).with_context(|| format!("planning graph `{}`", graph.name))?;
    let verify = !args.no_verify;
    if verify && let Err(problems) = verify_with_figures(&graph, &plan) {
        ui::eprint_line(format_args!("error: {}", problems.with_graph(&graph)));
        return Ok(ui::exit(ui::NEGATIVE));
    }
    if let Some(path) = &args.emit_graph {
        ui::write_output(Some(path), graph.to_json().as_bytes())?;
        ui::note(format!("wrote the graph of the plan to {}", path.display()));
    }
    let mut text = match args.format {
        Format::Json => plan_json(&graph, &plan)?,
        Format::Text => crate::report::plan_report(&graph, &plan, args.top)?,
    };
    if verify && args.format == Format::Text {
        text.push_str("\nverified: the plan passes the independent plan verifier\n");
    }
    if args.svg.is_some() || args.html.is_some() {
        write_pictures(&args, &crate::picture::Picture::new(&graph, &plan))?;
    }
    ui::write_output(args.output.as_deref(), text.as_bytes())?;
    Ok(ui::exit(ui::OK))
}

/// Writes the pictures `--svg` and `--html` ask for.
fn write_pictures(args: &Args, picture: &crate::picture::Picture) -> anyhow::Result<()> {
    if let Some(path) = &args.svg {
        ui::write_output(Some(path), crate::picture::svg::render(picture).as_bytes())?;
        ui::note(format!("wrote the SVG picture to {}", path.display()));
    }
    if let Some(path) = &args.html {
        ui::write_output(Some(path), crate::picture::html::render(picture).as_bytes())?;
        ui::note(format!("wrote the HTML picture to {}", path.display()));
    }
    Ok(())
}

/// `memplan plan MODEL --training OPTIMIZER`: the step derived from the forward graph.
fn run_training(
    args: &Args,
    forward: &Graph,
    training: &memplan_planner::TrainingOptions,
) -> anyhow::Result<ExitCode> {
    let step = match memplan_planner::plan_training(forward, training) {
        Ok(step) => step,
        Err(e @ memplan_planner::PlanError::BudgetTooSmall { .. }) => {
            ui::eprint_line(format_args!(
                "error: planning the training step of `{}`: {e}",
                forward.name
            ));
            return Ok(ui::exit(ui::NEGATIVE));
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!("planning the training step of graph `{}`", forward.name)
            });
        }
    };
    let verify = !args.no_verify;
    if verify && let Err(problems) = verify_with_figures(&step.graph, &step.plan) {
        ui::eprint_line(format_args!("error: {}", problems.with_graph(&step.graph)));
        return Ok(ui::exit(ui::NEGATIVE));
    }
    let mut text = match args.format {
        Format::Json => crate::training::plan_json(&step, training, args.emit_graph.as_deref())?,
        Format::Text => {
            let mut t = crate::report::plan_report(&step.graph, &step.plan, args.top)?;
            t.push_str(&crate::training::report(&step));
            t
        }
    };
    if args.format == Format::Text
        && let Some(path) = &args.emit_graph
    {
        crate::step_graph::header_value(&step.graph, Some(path))?;
    }
    if verify && args.format == Format::Text {
        text.push_str("\nverified: the plan passes the independent plan verifier\n");
    }
    if args.svg.is_some() || args.html.is_some() {
        let picture = crate::picture::Picture::new(&step.graph, &step.plan)
            .with_phases(&crate::training::step_phases(&step));
        write_pictures(args, &picture)?;
    }
    ui::write_output(args.output.as_deref(), text.as_bytes())?;
    Ok(ui::exit(ui::OK))
}

/// [`verify_plan`], then the plan's own figures ([`memplan_planner::verify_plan_figures`]):
/// the problems of both.
pub fn verify_with_figures(
    graph: &Graph,
    plan: &memplan_planner::Plan,
) -> Result<(), memplan_planner::PlanViolations> {
    let mut problems = match verify_plan(graph, plan) {
        Ok(()) => Vec::new(),
        Err(p) => p.0,
    };
    problems.extend(memplan_planner::verify_plan_figures(graph, plan));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(memplan_planner::PlanViolations(problems))
    }
}

/// The plan file: what produced it (the tool and its version) as its first key, and the
/// device totals after the weights, written whole by the planner's serialiser
/// ([`memplan_planner::Plan::to_json_file`]; [`memplan_planner::Plan::from_json`] ignores
/// both).
pub fn plan_json(graph: &Graph, plan: &memplan_planner::Plan) -> anyhow::Result<String> {
    plan_file(graph, plan, None, None)
}

/// [`plan_json`] with a training step's `training` object.
pub fn plan_file(
    graph: &Graph,
    plan: &memplan_planner::Plan,
    training: Option<serde_json::Value>,
    step_graph: Option<serde_json::Value>,
) -> anyhow::Result<String> {
    let header = memplan_planner::PlanHeader {
        produced_by: Some(format!("memplan {}", env!("CARGO_PKG_VERSION"))),
        training,
        step_graph,
    };
    plan.to_json_file(graph, &header)
        .with_context(|| format!("writing the plan of graph `{}`", graph.name))
}
