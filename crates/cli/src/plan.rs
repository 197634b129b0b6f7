//! `memplan plan`: plan a graph's memory — schedule, lifetimes, aliasing, arena offsets —
//! and print it as a text report or as the plan JSON downstream tools read.
//!
//! With `-o FILE` the output is written atomically (a temporary file in the same folder,
//! then a rename), so an error never leaves a half-written file. Every plan is
//! checked by the independent plan verifier (unless `--no-verify`); a plan that fails it is
//! not written, its problems are printed, and the exit status is 1.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use memplan::ErrorKind;
use memplan::load::{self, DEFAULT_GRAPH_NAME};
use memplan::options::PlanSettings;
use memplan_ir::Graph;
use memplan_packing::Strategy;
use memplan_planner::{AttentionKernel, Fusions, PlanOptions, ScheduleMode};

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

/// The kernel fused attention ops run with (and, with `--config`, transformers'
/// attention implementation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Attention {
    /// Kernels that materialise the scores (batch x heads x q x kv): the safe assumption.
    Eager,
    /// PyTorch's scaled_dot_product_attention: a fused kernel where one applies (per-row
    /// statistics, as flash).
    Sdpa,
    /// Flash kernels: per-row statistics only.
    Flash,
}

impl Attention {
    /// The estimator's attention implementation.
    pub fn implementation(self) -> memplan_tracker::estimate::AttentionImpl {
        use memplan_tracker::estimate::AttentionImpl;
        match self {
            Attention::Eager => AttentionImpl::Eager,
            Attention::Sdpa => AttentionImpl::Sdpa,
            Attention::Flash => AttentionImpl::Flash,
        }
    }
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
    /// `MultiHeadAttention`, `GroupQueryAttention`) run with: `eager` (the default for a
    /// graph) gives each the scratch of its scores, `flash` and `sdpa` per-row statistics
    /// only. With `--config`, transformers' attention implementation (default sdpa).
    #[arg(long, value_enum)]
    pub attention: Option<Attention>,
    /// The fused kernels the engine runs, planned as they run: a comma-separated list of
    /// attention, conv-add, gelu, silu, norm, bias-act, constants, or all; `none` (the
    /// default) plans the graph as it is written. The plan then names the fused graph's
    /// tensors and nodes (`memplan.Attention_...`).
    #[arg(long, value_name = "LIST", default_value = "none", value_parser = fusions_parser)]
    fuse: Fusions,
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
            (
                self.attention.is_some_and(|a| a != Attention::Eager),
                "--attention",
            ),
            (!self.fuse.is_none(), "--fuse"),
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

    /// The settings these arguments ask for (`training` fills the training step's).
    pub fn settings(&self, training: Option<&crate::training_args::TrainingArgs>) -> PlanSettings {
        let mut settings = PlanSettings {
            dims: self.dims.clone(),
            schedule: match self.schedule {
                Schedule::Given => ScheduleMode::Given,
                Schedule::Memory => ScheduleMode::Memory,
            },
            strategy: self.strategy,
            inplace: !self.no_inplace,
            views: !self.no_views,
            concat_elision: !self.no_concat_elision,
            fold_weights: !self.no_fold_weights,
            attention: match self.attention.unwrap_or(Attention::Eager) {
                Attention::Eager => AttentionKernel::Eager,
                Attention::Sdpa | Attention::Flash => AttentionKernel::Flash,
            },
            fuse: self.fuse,
            opaque: self.opaque.clone(),
            align: self.align,
            caller_inputs: self.caller_inputs,
            caller_outputs: self.caller_outputs,
            bound: self.bound,
            persistent: self.persistent.clone(),
            parameters: self.parameters.clone(),
            ..PlanSettings::default()
        };
        if let Some(training) = training {
            training.apply(&mut settings);
        }
        settings
    }

    /// Loads the graph as it is, symbols and all, with the planner options carrying the
    /// `--dim` values as bindings (for `fit` and `preflight`, which plan at several values).
    pub fn load_symbolic(&self, settings: &PlanSettings) -> anyhow::Result<(Graph, PlanOptions)> {
        let graph = load::load_graph(self.graph.as_deref())?;
        Ok(load::prepare_symbolic(graph, settings, &mut ui::Stderr)?)
    }

    /// Loads the graph as it is, symbols and all, with `--persistent` inputs marked.
    pub fn load_marked(&self) -> anyhow::Result<Graph> {
        let mut graph = load::load_graph(self.graph.as_deref())?;
        memplan::training::mark_persistent(&mut graph, &self.persistent, &mut ui::Stderr)?;
        Ok(graph)
    }

    /// Whether `--dim NAME=...` was given.
    pub fn binds(&self, name: &str) -> bool {
        self.dims.iter().any(|(n, _)| n == name)
    }

    /// The `--dim` values given.
    pub fn dims(&self) -> &[(String, u64)] {
        &self.dims
    }

    /// Loads the graph, symbols kept, with the planner options carrying the `--dim` values
    /// (and with `--bound` the bounds) as bindings, every size bound; `verb` says what
    /// happens to the embedded default when no file is given.
    pub fn load_planned(
        &self,
        verb: &str,
        settings: &PlanSettings,
    ) -> anyhow::Result<(Graph, PlanOptions)> {
        if self.graph.is_none() {
            ui::note(format!(
                "no graph given: {verb} the embedded {DEFAULT_GRAPH_NAME}"
            ));
        }
        let graph = load::load_graph(self.graph.as_deref())?;
        Ok(load::prepare(graph, settings, &mut ui::Stderr)?)
    }

    /// The planner options these arguments ask for.
    pub fn options(&self) -> anyhow::Result<PlanOptions> {
        Ok(self.settings(None).plan_options(&mut ui::Stderr)?)
    }
}

/// `--fuse`'s list.
pub fn fusions_parser(list: &str) -> Result<Fusions, String> {
    Fusions::parse(list).map_err(|e| e.to_string())
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
    training: crate::training_args::TrainingArgs,
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
    let mut settings = args.planning.settings(Some(&args.training));
    settings.verify = !args.no_verify;
    let (graph, options) = args.planning.load_planned("planning", &settings)?;
    let planned = match memplan::plan::plan(&graph, &settings, &options) {
        Ok(planned) => planned,
        // An unsafe plan, or a budget nothing fits: the answer is no.
        Err(e) if matches!(e.kind(), ErrorKind::Unsafe | ErrorKind::DoesNotFit) => {
            ui::eprint_line(format_args!("error: {}", ui::facade_report(&e)));
            return Ok(ui::exit(ui::NEGATIVE));
        }
        Err(e) => return Err(e.into()),
    };
    // The graph of the plan beside it: a training plan file then names it (and its digest)
    // instead of holding it.
    let beside = args.emit_graph.as_ref().map(|p| p.display().to_string());
    if let Some(path) = &args.emit_graph {
        ui::write_output(Some(path), planned.graph().to_json().as_bytes())?;
        ui::note(format!("wrote the graph of the plan to {}", path.display()));
    }
    let text = match args.format {
        Format::Json => planned.to_json_beside(beside.as_deref())?,
        Format::Text => planned.report(args.top)?,
    };
    if let Some(path) = &args.svg {
        ui::write_output(Some(path), planned.svg().as_bytes())?;
        ui::note(format!("wrote the SVG picture to {}", path.display()));
    }
    if let Some(path) = &args.html {
        ui::write_output(Some(path), planned.html().as_bytes())?;
        ui::note(format!("wrote the HTML picture to {}", path.display()));
    }
    ui::write_output(args.output.as_deref(), text.as_bytes())?;
    Ok(ui::exit(ui::OK))
}
