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
use std::time::Instant;

use anyhow::{Context, bail};
use memplan_cuda_arena::{
    CheckOptions, HalfFormat, HostArena, Layout, LayoutOptions, Region, Sampling,
    run_check_observed,
};
use memplan_ir::{AnyEntity, GraphError};
use memplan_planner::{Plan, plan_graph, verify_plan};

use crate::plan::PlanningArgs;
use crate::progress::Progress;
use crate::step_graph::Recorded;

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
    training: crate::training::TrainingArgs,
}

use crate::ui::size as mib;
use memplan_tracker::group_digits;

/// The plan in `path` for its graph: the graph given, or the embedded one when the plan
/// is the embedded graph's (a plan of another graph names it, so the error can too). With
/// `--dim` values, the plan at those values: its own, or smaller values of the symbols it was
/// planned at the bounds of (`--bound`).
fn read_plan(args: &Args, path: &std::path::Path) -> anyhow::Result<ReadPlan> {
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
    let recorded = match &value {
        Some(v) => crate::step_graph::recorded(v)?,
        None => None,
    };
    // A training plan that holds its step graph is checked against it with no graph given.
    let held = match &recorded {
        Some(Recorded::Embedded(g, _)) if args.planning.graph.is_none() => Some((**g).clone()),
        _ => None,
    };
    if args.planning.graph.is_none()
        && held.is_none()
        && let Some(name) = &planned_for
        && name != crate::load::DEFAULT_GRAPH_NAME
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
    // A training step's plan is a plan of the step derived from the forward graph, with the
    // options the plan records; given the step graph itself (its name is the plan's), the
    // plan is checked against that graph. Either way, the step graph the file records must
    // be that graph.
    let mut derived = None;
    let graph = match crate::training::options_from_plan(&text, args.planning.options()?)? {
        None => graph,
        Some(_) if planned_for.as_deref() == Some(graph.name.as_str()) => {
            if let Some(r) = &recorded {
                crate::step_graph::matches(r, &graph, "the graph given")?;
            }
            graph
        }
        Some(mut training) => {
            training.plan.bindings = recorded_bindings(&text, &graph)?;
            let step = memplan_planner::plan_training(&graph, &training)
                .with_context(|| format!("deriving the training step of graph `{}`", graph.name))?;
            if let Some(r) = &recorded {
                crate::step_graph::matches(
                    r,
                    &step.graph,
                    &format!("the step graph `{}` derives", graph.name),
                )?;
            }
            let g = step.graph.clone();
            derived = Some((step, training));
            g
        }
    };
    let plan = Plan::from_json(&graph, &text).map_err(|e| {
        let other = planned_for
            .as_deref()
            .filter(|name| *name != graph.name)
            .map_or_else(String::new, |name| {
                format!(
                    " (the plan was made for graph `{name}`, this is `{}`)",
                    graph.name
                )
            });
        anyhow::Error::new(e).context(format!("reading the plan in {}{other}", path.display()))
    })?;
    // A plan of another graph is bad input, not an unsafe plan.
    plan.settings.bindings_for(&graph).map_err(|name| {
        anyhow::anyhow!(
            "the plan in {} binds symbol `{name}`, which graph `{}` does not have",
            path.display(),
            graph.name
        )
    })?;
    if let (Some((step, training)), Some(v)) = (&derived, &value) {
        let file = v.get("training").unwrap_or(&serde_json::Value::Null);
        crate::step_graph::check_training_object(file, step, &plan, training)
            .with_context(|| format!("reading the plan in {}", path.display()))?;
    }
    // The plan's own figures, at its own bindings (a plan re-sized below its bounds keeps
    // the figures of the bound).
    let figures = memplan_planner::verify_plan_figures(&graph, &plan);
    let dims = crate::load::unique_dims(args.planning.dims())?;
    if dims.is_empty() {
        return Ok((graph, plan, figures));
    }
    let plan = plan.at_values(&graph, &dims).with_context(|| {
        format!(
            "checking the plan in {} at {}",
            path.display(),
            dims.iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    Ok((graph, plan, figures))
}

/// A graph, its plan, and what is wrong with the plan's own figures.
type ReadPlan = (memplan_ir::Graph, Plan, Vec<memplan_planner::PlanViolation>);

/// The bindings a plan file records (`settings.bindings`), for `graph`'s symbols; none when
/// it records none.
fn recorded_bindings(
    text: &str,
    graph: &memplan_ir::Graph,
) -> anyhow::Result<memplan_ir::Bindings> {
    let v: serde_json::Value = serde_json::from_str(text).context("reading the plan as JSON")?;
    let mut out = memplan_ir::Bindings::new();
    let Some(list) = v
        .pointer("/settings/bindings")
        .and_then(serde_json::Value::as_array)
    else {
        return Ok(out);
    };
    for pair in list {
        let (Some(name), Some(value)) = (
            pair.get(0).and_then(serde_json::Value::as_str),
            pair.get(1).and_then(serde_json::Value::as_u64),
        ) else {
            bail!("the plan's settings.bindings holds {pair}, not a [name, value] pair");
        };
        let s = graph.find_symbol(name).with_context(|| {
            format!(
                "the plan binds symbol `{name}`, which graph `{}` does not have",
                graph.name
            )
        })?;
        out.set(s, value);
    }
    Ok(out)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (graph, plan, figures) = match &args.plan {
        Some(path) => read_plan(&args, path)?,
        None => {
            let (graph, options) = args.planning.load_planned("checking")?;
            match args.training.options(&options)? {
                // A training step derived from the forward graph.
                Some(training) => {
                    let step =
                        memplan_planner::plan_training(&graph, &training).with_context(|| {
                            format!("planning the training step of graph `{}`", graph.name)
                        })?;
                    let figures = memplan_planner::verify_plan_figures(&step.graph, &step.plan);
                    (step.graph, step.plan, figures)
                }
                None => {
                    let plan = plan_graph(&graph, &options)
                        .with_context(|| format!("planning graph `{}`", graph.name))?;
                    let figures = memplan_planner::verify_plan_figures(&graph, &plan);
                    (graph, plan, figures)
                }
            }
        }
    };
    // The plan verifier first: a plan it rejects is unsafe whatever the bytes say. The
    // pattern check still runs where the plan can be laid out, to show what gets clobbered.
    // A plan whose figures are not its own is rejected with it.
    let verdict = match (verify_plan(&graph, &plan), figures) {
        (Ok(()), f) if f.is_empty() => Ok(()),
        (Ok(()), f) => Err(memplan_planner::PlanViolations(f)),
        (Err(mut p), f) => {
            p.0.extend(f);
            Err(p)
        }
    };
    let json = args.format == crate::plan::Format::Json;
    let problem_lines: Vec<String> = match &verdict {
        Err(problems) => problems
            .0
            .iter()
            .map(|p| p.with_graph(&graph).to_string())
            .collect(),
        Ok(()) => Vec::new(),
    };
    let problem_findings: Vec<serde_json::Value> = match &verdict {
        Err(problems) => problems
            .0
            .iter()
            .zip(&problem_lines)
            .map(|(p, line)| finding(&graph, line, &p.entities()))
            .collect(),
        Ok(()) => Vec::new(),
    };
    if let Err(problems) = &verdict
        && !json
    {
        let n = problems.0.len();
        let mut text = format!(
            "UNSAFE: the plan has {n} problem{}:\n",
            if n == 1 { "" } else { "s" }
        );
        for p in problem_lines.iter().take(args.max_report) {
            text.push_str(&format!("  - {p}\n"));
        }
        if n > args.max_report {
            text.push_str(&format!(
                "  ... and {} more problems\n",
                n - args.max_report
            ));
        }
        crate::ui::print(&text)?;
    }
    let half_weights = match args.half_weights {
        HalfWeights::Off => None,
        HalfWeights::F16 => Some(HalfFormat::F16),
        HalfWeights::Bf16 => Some(HalfFormat::BF16),
    };
    let layout_options = LayoutOptions { half_weights };
    // The verifier has run (above): lay the plan out without running it again. A plan it
    // rejects is still executed, so that its bytes show what goes wrong.
    let rejected = verdict.is_err();
    let layout = match Layout::new_unverified(&graph, &plan, &layout_options) {
        Ok(layout) => layout,
        // A plan the verifier rejects may not even lay out (an alignment of 0): the answer
        // is still "unsafe", with its problems listed, not an error.
        Err(e) if rejected => {
            return not_executed(&args, &graph, &plan, &problem_findings, &e.to_string());
        }
        Err(e) => {
            return Err(
                anyhow::Error::new(e).context(format!("laying out the plan of `{}`", graph.name))
            );
        }
    };
    let sampling = match args.sample {
        None => Sampling::Full,
        Some(0) => bail!("--sample needs a stride above 0"),
        Some(stride) => Sampling::Sampled {
            block: 4096.min(stride),
            stride,
        },
    };
    let start = Instant::now();
    let mut arena = HostArena::new(layout.clone()).context("allocating the host arena")?;
    if let Some(n) = args.threads {
        arena.set_threads(n);
    }
    let options = CheckOptions {
        sampling,
        skip_weights: !args.check_weights,
        strict: args.strict,
        salt: None,
    };
    let mut progress = Progress::new(plan.schedule.len() as u64, "steps checked");
    let total_steps = plan.schedule.len();
    let run = run_check_observed(
        &graph,
        &layout,
        &mut arena,
        options,
        &plan.settings.op_table,
        &mut |done, _| progress.set(u64::from(done)),
    );
    progress.finish();
    let report = match run {
        Ok(report) => report,
        // Ranges past the arena's end (a plan whose arena is too small): the verifier says
        // so already; the bytes cannot be run.
        Err(e) if rejected => {
            return not_executed(&args, &graph, &plan, &problem_findings, &e.to_string());
        }
        Err(e) => return Err(e.into()),
    };
    let seconds = start.elapsed().as_secs_f64();

    let mut out = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "graph {}: {} steps, {} tensors",
        graph.name,
        group_digits(u64::from(report.steps)),
        group_digits(graph.tensors().len() as u64)
    );
    let _ = writeln!(
        out,
        "arena {} + weights {}{}",
        mib(layout.region_bytes(Region::Arena)),
        mib(layout.region_bytes(Region::Weights)),
        match layout.half_format() {
            Some(f) => format!(
                " + half weights {} ({:?})",
                mib(layout.region_bytes(Region::Half)),
                f
            ),
            None => String::new(),
        }
    );
    let _ = writeln!(
        out,
        "wrote {} tensors ({}), checked {} reads ({}{})",
        group_digits(report.writes),
        mib(report.bytes_written),
        group_digits(report.reads),
        mib(report.bytes_checked),
        if report.sampled {
            ", sampled"
        } else {
            ", every byte"
        }
    );
    if report.weight_reads_skipped > 0 {
        let _ = writeln!(
            out,
            "weights not materialised: {} weight reads skipped (--check-weights checks them)",
            group_digits(report.weight_reads_skipped)
        );
    }
    for line in report.render_trusted(&graph) {
        let _ = writeln!(out, "{line}");
    }
    if report.unplaced_reads > 0 {
        let _ = writeln!(
            out,
            "skipped {} reads of tensors outside the arena",
            group_digits(report.unplaced_reads)
        );
    }
    let code = if report.is_clean() && !rejected {
        let _ = writeln!(out, "ok: no live tensor was clobbered ({seconds:.2} s)");
        ExitCode::SUCCESS
    } else if report.is_clean() {
        let _ = writeln!(
            out,
            "no live tensor was clobbered in this run, but the plan verifier rejects the plan ({seconds:.2} s)"
        );
        ExitCode::from(1)
    } else {
        let lines = report.render_clobbers(&graph);
        let _ = writeln!(
            out,
            "CLOBBERED: {} problem{} with the bytes ({seconds:.2} s)",
            group_digits(lines.len() as u64),
            if lines.len() == 1 { "" } else { "s" }
        );
        for line in lines.iter().take(args.max_report) {
            let _ = writeln!(out, "  {line}");
        }
        if lines.len() > args.max_report {
            let _ = writeln!(out, "  ... and {} more", lines.len() - args.max_report);
        }
        ExitCode::from(1)
    };
    if json {
        // The same total as the plan file's: the regions as laid out (the half region with
        // --half-weights), then the inputs and outputs left to the caller.
        // u64::MAX when the total has no answer (past 2^64, or a caller-owned size unknown).
        let total = plan
            .device_bytes(&graph)
            .ok()
            .and_then(|d| {
                layout
                    .total_bytes()?
                    .checked_add(d.caller_inputs)?
                    .checked_add(d.caller_outputs)
            })
            .unwrap_or(u64::MAX);
        let v = serde_json::json!({
            "graph": graph.name,
            "steps": total_steps,
            "tensors": graph.tensors().len(),
            "arena_bytes": layout.region_bytes(Region::Arena),
            "weight_bytes": layout.region_bytes(Region::Weights),
            "half_weight_bytes": layout.region_bytes(Region::Half),
            "total_bytes": total,
            "writes": report.writes,
            "bytes_written": report.bytes_written,
            "reads": report.reads,
            "bytes_checked": report.bytes_checked,
            "sampled": report.sampled,
            "weight_reads_skipped": report.weight_reads_skipped,
            "verifier_problems": problem_lines,
            "verifier_findings": problem_findings,
            "clobbered": report.render_clobbers(&graph),
            "clobber_findings": report
                .findings(&graph)
                .iter()
                .map(|(line, about)| finding(&graph, line, about))
                .collect::<Vec<_>>(),
            "executed": true,
            "ok": report.is_clean() && !rejected,
        });
        out = serde_json::to_string_pretty(&v)?;
        out.push('\n');
    }
    crate::ui::print(&out)?;
    Ok(code)
}

/// The answer for a plan the verifier rejects and whose bytes cannot be run (`why`): exit 1,
/// the problems listed (text, or JSON with `"executed": false` and `"ok": false`).
fn not_executed(
    args: &Args,
    graph: &memplan_ir::Graph,
    plan: &Plan,
    findings: &[serde_json::Value],
    why: &str,
) -> anyhow::Result<ExitCode> {
    let out = if args.format == crate::plan::Format::Json {
        let v = serde_json::json!({
            "graph": graph.name,
            "steps": plan.schedule.len(),
            "tensors": graph.tensors().len(),
            "arena_bytes": plan.arena_bytes,
            "weight_bytes": plan.weight_bytes,
            "half_weight_bytes": 0,
            "total_bytes": plan.device_bytes(graph).map_or(u64::MAX, |d| d.total),
            "writes": 0,
            "bytes_written": 0,
            "reads": 0,
            "bytes_checked": 0,
            "sampled": false,
            "weight_reads_skipped": 0,
            "verifier_problems": findings.iter().map(|f| &f["message"]).collect::<Vec<_>>(),
            "verifier_findings": findings,
            "clobbered": [],
            "clobber_findings": [],
            "executed": false,
            "ok": false,
        });
        let mut text = serde_json::to_string_pretty(&v)?;
        text.push('\n');
        text
    } else {
        format!("the plan's bytes were not run on a host arena: {why}\n")
    };
    crate::ui::print(&out)?;
    Ok(ExitCode::from(1))
}

/// One problem in `memplan check --format json`: its message, and the tensors and nodes it
/// is about by id (their index in the graph's JSON lists; `memplan plan --html`'s page
/// shows tensor `N` with `?tensor_id=N`) and name (absent for an id the graph lacks).
fn finding(graph: &memplan_ir::Graph, message: &str, about: &[AnyEntity]) -> serde_json::Value {
    let entry = |id: u32, name: Option<&str>| serde_json::json!({ "id": id, "name": name });
    let tensors: Vec<serde_json::Value> = about
        .iter()
        .filter_map(|e| match *e {
            AnyEntity::Tensor(t) => {
                Some(entry(t.0, graph.tensors().get(t).map(|x| x.name.as_str())))
            }
            AnyEntity::Node(_) => None,
        })
        .collect();
    let nodes: Vec<serde_json::Value> = about
        .iter()
        .filter_map(|e| match *e {
            AnyEntity::Node(n) => Some(entry(n.0, graph.nodes().get(n).map(|x| x.name.as_str()))),
            AnyEntity::Tensor(_) => None,
        })
        .collect();
    serde_json::json!({ "message": message, "tensors": tensors, "nodes": nodes })
}
