//! `memplan check`: plan a graph (or read a plan JSON), execute the plan on a host arena with
//! the byte-pattern check, and report whether any live tensor was clobbered.
//!
//! Every node writes a distinct pattern into its outputs (views and in-place outputs write
//! through their storage) and checks, before it reads, that each input still holds its
//! writer's pattern; graph outputs are checked once more after the last step. Exit status: 0
//! when every byte held, 1 when a tensor was clobbered, 2 on an error (the plan could not be
//! made, read or laid out).
//!
//! The planning options are those of `memplan plan`. With `--plan FILE` the plan is read from
//! a `memplan plan --format json` file instead (with the alignment, bindings and aliasing
//! policy it records), which lets any plan, hand-edited ones included, be checked; `--dim`
//! values must then be the plan's own, or smaller values of the symbols it was planned at
//! the bounds of (the plan is re-sized and checked there). Either way the plan verifier runs
//! first: a plan it rejects is reported (tensors by name) and the exit status is 1; its bytes
//! are still run where they can be, to show what gets clobbered, and where they cannot (an
//! arena too small for its buffers) the answer stays exit 1 with the problems listed.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use memplan::check::CheckSettings;
use memplan_cuda_arena::HalfFormat;

use crate::plan::PlanningArgs;
use crate::progress::Progress;

/// Storage of `f32` weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HalfWeights {
    /// As planned (full precision).
    Off,
    /// In a half region as binary16.
    F16,
    /// In a half region as bfloat16.
    Bf16,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    planning: PlanningArgs,
    /// Check this plan (`memplan plan --format json` output; `-` reads standard input)
    /// instead of planning.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Store f32 weights at half precision in a side region.
    #[arg(long, value_enum, default_value_t = HalfWeights::Off)]
    half_weights: HalfWeights,
    /// Check the ends of every read and one block per stride instead of every byte
    /// (`--sample 65536`: a 4 KiB block every 64 KiB). Writes stay whole.
    #[arg(long, value_name = "STRIDE")]
    sample: Option<u64>,
    /// Threads for writing and checking large tensors (default: the machine's, at most 8).
    #[arg(long)]
    threads: Option<usize>,
    /// Print at most this many verifier problems and clobbered tensors.
    #[arg(long, default_value_t = 20)]
    max_report: usize,
    /// Write and check the weights too (by default only the activation arena is
    /// materialised: no activation write can reach the weight region).
    #[arg(long)]
    check_weights: bool,
    /// Fail on aliases the check cannot confirm (custom ops) instead of trusting them.
    #[arg(long)]
    strict: bool,
    /// Output format (JSON: the figures, the problems and the clobbered tensors).
    #[arg(long, value_enum, default_value_t = crate::plan::Format::Text)]
    format: crate::plan::Format,
    #[command(flatten)]
    training: crate::training_args::TrainingArgs,
}

/// The plan in `path` for its graph: the graph given, or the embedded one when the plan
/// is the embedded graph's (a plan of another graph names it, so the error can too). With
/// `--dim` values, the plan at those values: its own, or smaller values of the symbols it was
/// planned at the bounds of (`--bound`).
///
/// A training plan file holds its step graph (or names it, with its digest): the plan is
/// checked against that graph, which must be the one the model given derives; with no
/// graph given, against the graph it holds.
fn read_plan(args: &Args, path: &std::path::Path) -> anyhow::Result<memplan::check::LoadedPlan> {
    // The file records the settings it was made with; an option that would plan otherwise
    // is not silently dropped.
    let flags = args.planning.planning_flags();
    if !flags.is_empty() {
        bail!(
            "{} plan a graph, but --plan checks a plan already made, with the settings its file records: leave {} out, or leave out --plan to plan and check with {}",
            flags.join(", "),
            if flags.len() == 1 { "it" } else { "them" },
            if flags.len() == 1 { "it" } else { "them" },
        );
    }
    let text = crate::ui::read_text(path)?;
    let value: Option<serde_json::Value> = serde_json::from_str(&text).ok();
    let planned_for: Option<String> = value
        .as_ref()
        .and_then(|v| v.get("graph")?.as_str().map(str::to_owned));
    // A training plan that holds its step graph is checked against it with no graph given.
    let held = match value.as_ref() {
        Some(v) if args.planning.graph.is_none() => match memplan::step_graph::recorded(v)? {
            Some(memplan::step_graph::Recorded::Embedded(g, _)) => Some(*g),
            _ => None,
        },
        _ => None,
    };
    if args.planning.graph.is_none()
        && held.is_none()
        && let Some(name) = &planned_for
        && name != memplan::load::DEFAULT_GRAPH_NAME
    {
        bail!(
            "the plan in {} is for graph `{name}`: give its graph file (memplan check GRAPH --plan {})",
            path.display(),
            path.display()
        );
    }
    let graph = match held {
        Some(g) => g,
        None => args.planning.load_marked()?,
    };
    let label = path.display().to_string();
    Ok(memplan::check::load_plan(
        graph,
        &text,
        &label,
        args.planning.options()?,
        args.planning.dims(),
    )?)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (graph, plan, figures) = match &args.plan {
        Some(path) => {
            let loaded = read_plan(&args, path)?;
            (loaded.graph, loaded.plan, Some(loaded.figures))
        }
        None => {
            let settings = args.planning.settings(Some(&args.training));
            let (graph, options) = args.planning.load_planned("checking", &settings)?;
            match settings.training_options(&options)? {
                // A training step derived from the forward graph.
                Some(training) => {
                    let step = memplan_planner::plan_training(&graph, &training)
                        .map_err(|e| e.found_in(|| graph.clone()))
                        .with_context(|| {
                            format!("planning the training step of graph `{}`", graph.name)
                        })?;
                    (step.graph, step.plan, None)
                }
                None => {
                    let (graph, plan, _) = memplan::plan::plan_checked_fusion(graph, &options)?;
                    (graph, plan, None)
                }
            }
        }
    };
    let settings = CheckSettings {
        half_weights: match args.half_weights {
            HalfWeights::Off => None,
            HalfWeights::F16 => Some(HalfFormat::F16),
            HalfWeights::Bf16 => Some(HalfFormat::BF16),
        },
        sample: args.sample,
        threads: args.threads,
        max_report: args.max_report,
        check_weights: args.check_weights,
        strict: args.strict,
        json: args.format == crate::plan::Format::Json,
    };
    let mut progress: Option<Progress> = None;
    // A plan read from a file is checked with the figures it was read with (a plan re-sized
    // to --dim values keeps the figures of its own bindings); a plan made here, with its own.
    let figures = figures.unwrap_or_else(|| memplan_planner::verify_plan_figures(&graph, &plan));
    let outcome =
        memplan::check::check_with(&graph, &plan, figures, &settings, &mut |done, total| {
            progress
                .get_or_insert_with(|| Progress::new(total, "steps checked"))
                .set(done);
        });
    if let Some(p) = progress {
        p.finish();
    }
    let outcome = outcome?;
    crate::ui::print(&outcome.text)?;
    Ok(if outcome.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
