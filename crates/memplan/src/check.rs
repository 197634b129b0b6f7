//! The check of `memplan check`: a plan verified by the independent plan verifier, then
//! executed on a host arena with the byte-pattern check, and what was found, as text or
//! JSON.
//!
//! Every node writes a distinct pattern into its outputs (views and in-place outputs write
//! through their storage) and checks, before it reads, that each input still holds its
//! writer's pattern; graph outputs are checked once more after the last step. A plan the
//! verifier rejects is unsafe whatever the bytes say; its bytes are still run where they can
//! be, to show what gets clobbered, and where they cannot (an arena too small for its
//! buffers) the answer stays "unsafe" with the problems listed. [`load_plan`] reads a plan
//! file (a training step's too) for its graph.

use std::fmt::Write as _;
use std::time::Instant;

use memplan_cuda_arena::{
    CheckArena, CheckOptions, HalfFormat, Layout, LayoutOptions, Region, Sampling,
    run_check_observed,
};
use memplan_ir::{AnyEntity, Graph, GraphError};
use memplan_planner::{Plan, PlanOptions, PlanViolation, PlanViolations, verify_plan};

use crate::options::{Value, as_bool, as_choice, as_count, unknown_option};
use crate::{Context, Error, Result, bail, group_digits, size as mib};

/// How to check: what `memplan check` is told besides the plan.
#[derive(Clone, Copy, Debug)]
pub struct CheckSettings {
    /// Store f32 weights at half precision in a side region.
    pub half_weights: Option<HalfFormat>,
    /// Check the ends of every read and one block per stride instead of every byte.
    pub sample: Option<u64>,
    /// Threads for writing and checking large tensors (default: the machine's, at most 8).
    pub threads: Option<usize>,
    /// Problems and clobbered tensors listed at most.
    pub max_report: usize,
    /// Write and check the weights too.
    pub check_weights: bool,
    /// Fail on aliases the check cannot confirm (custom ops) instead of trusting them.
    pub strict: bool,
    /// The JSON report instead of the text (`CheckOutcome::text` holds it).
    pub json: bool,
}

impl Default for CheckSettings {
    fn default() -> CheckSettings {
        CheckSettings {
            half_weights: None,
            sample: None,
            threads: None,
            max_report: 20,
            check_weights: false,
            strict: false,
            json: false,
        }
    }
}

/// The check settings by keyword, beside their flags.
pub const CHECK_KEYWORDS: &[(&str, &str)] = &[
    ("half_weights", "--half-weights"),
    ("sample", "--sample"),
    ("threads", "--threads"),
    ("max_report", "--max-report"),
    ("check_weights", "--check-weights"),
    ("strict", "--strict"),
];

impl CheckSettings {
    /// Sets the setting `keyword` (see [`CHECK_KEYWORDS`]); [`Value::None`] its default.
    pub fn set(&mut self, keyword: &str, value: &Value) -> Result<()> {
        let none = *value == Value::None;
        let defaults = CheckSettings::default();
        match keyword {
            "half_weights" if none => self.half_weights = None,
            "half_weights" => {
                self.half_weights = as_choice(
                    keyword,
                    value,
                    &[
                        ("off", None),
                        ("f16", Some(HalfFormat::F16)),
                        ("bf16", Some(HalfFormat::BF16)),
                    ],
                )?;
            }
            "sample" if none => self.sample = None,
            "sample" => self.sample = Some(as_count(keyword, value)?),
            "threads" if none => self.threads = None,
            "threads" => {
                let n = as_count(keyword, value)?;
                self.threads =
                    Some(usize::try_from(n).map_err(|_| {
                        Error::input(format!("option `threads`: {n} is too large"))
                    })?);
            }
            "max_report" if none => self.max_report = defaults.max_report,
            "max_report" => {
                let n = as_count(keyword, value)?;
                self.max_report = usize::try_from(n).unwrap_or(usize::MAX);
            }
            "check_weights" => self.check_weights = !none && as_bool(keyword, value)?,
            "strict" => self.strict = !none && as_bool(keyword, value)?,
            _ => {
                let known: Vec<&str> = CHECK_KEYWORDS.iter().map(|(k, _)| *k).collect();
                return Err(unknown_option("check", keyword, &known));
            }
        }
        Ok(())
    }
}

/// What [`check`] found.
#[derive(Clone, Debug)]
pub struct CheckOutcome {
    /// Every byte held and the verifier passed the plan (the command exits 0; else 1).
    pub ok: bool,
    /// What `memplan check` prints: the text report, or the JSON with `settings.json`.
    pub text: String,
    /// The JSON report (figures, problems and clobbered tensors, by id and name).
    pub json: serde_json::Value,
    /// Whether the plan's bytes were run (a plan the verifier rejects may not lay out).
    pub executed: bool,
}

/// Checks `plan`, a plan of `graph`: the verifier, then the plan run on a host arena with
/// the byte-pattern check; `progress` hears the steps checked and the steps in all. An
/// unsafe plan is an answer (`ok` false), not an error; an error is a plan that cannot be
/// laid out or run although the verifier accepts it.
///
/// The plan's own figures are checked with it ([`memplan_planner::verify_plan_figures`]): a
/// plan whose arena, weight region or lower bound is not what its buffers make is unsafe too.
pub fn check(
    graph: &Graph,
    plan: &Plan,
    settings: &CheckSettings,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<CheckOutcome> {
    let figures = memplan_planner::verify_plan_figures(graph, plan);
    check_with(graph, plan, figures, settings, progress)
}

/// [`check`] with what is wrong with the plan's figures found already (by [`load_plan`], at
/// the plan's own bindings, before any re-sizing to `--dim` values).
pub fn check_with(
    graph: &Graph,
    plan: &Plan,
    figures: Vec<PlanViolation>,
    settings: &CheckSettings,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<CheckOutcome> {
    let mut unsafe_text = String::new();
    // The plan verifier first: a plan it rejects is unsafe whatever the bytes say. The
    // pattern check still runs where the plan can be laid out, to show what gets clobbered.
    // A plan whose figures are not its own is rejected with it.
    let verdict = match (verify_plan(graph, plan), figures) {
        (Ok(()), f) if f.is_empty() => Ok(()),
        (Ok(()), f) => Err(PlanViolations(f)),
        (Err(mut p), f) => {
            p.0.extend(f);
            Err(p)
        }
    };
    let json = settings.json;
    let problem_lines: Vec<String> = match &verdict {
        Err(problems) => problems
            .0
            .iter()
            .map(|p| p.with_graph(graph).to_string())
            .collect(),
        Ok(()) => Vec::new(),
    };
    let problem_findings: Vec<serde_json::Value> = match &verdict {
        Err(problems) => problems
            .0
            .iter()
            .zip(&problem_lines)
            .map(|(p, line)| finding(graph, line, &p.entities()))
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
        for p in problem_lines.iter().take(settings.max_report) {
            text.push_str(&format!("  - {p}\n"));
        }
        if n > settings.max_report {
            text.push_str(&format!(
                "  ... and {} more problems\n",
                n - settings.max_report
            ));
        }
        unsafe_text = text;
    }
    let mut layout_options = LayoutOptions::default();
    layout_options.half_weights = settings.half_weights;
    // The verifier has run (above): lay the plan out without running it again. A plan it
    // rejects is still executed, so that its bytes show what goes wrong.
    let rejected = verdict.is_err();
    let layout = match Layout::new_unverified(graph, plan, &layout_options) {
        Ok(layout) => layout,
        // A plan the verifier rejects may not even lay out (an alignment of 0): the answer
        // is still "unsafe", with its problems listed, not an error.
        Err(e) if rejected => {
            return not_executed(
                settings,
                graph,
                plan,
                &problem_findings,
                &e.to_string(),
                unsafe_text,
            );
        }
        Err(e) => {
            return Err(Error::wrap(e).context(format!("laying out the plan of `{}`", graph.name)));
        }
    };
    let sampling = match settings.sample {
        None => Sampling::Full,
        Some(0) => bail!("--sample needs a stride above 0"),
        Some(stride) => Sampling::Sampled {
            block: 4096.min(stride),
            stride,
        },
    };
    let start = Instant::now();
    let mut arena = CheckArena::new(layout.clone()).context("allocating the host arena")?;
    if let Some(n) = settings.threads {
        arena.set_threads(n);
    }
    let options = CheckOptions::default()
        .with_sampling(sampling)
        .with_skip_weights(!settings.check_weights)
        .with_strict(settings.strict);
    let total_steps = plan.schedule.len();
    let run = run_check_observed(
        graph,
        &layout,
        &mut arena,
        options,
        &plan.settings.op_table,
        &mut |done, _| progress(u64::from(done), total_steps as u64),
    );
    let report = match run {
        Ok(report) => report,
        // Ranges past the arena's end (a plan whose arena is too small): the verifier says
        // so already; the bytes cannot be run.
        Err(e) if rejected => {
            return not_executed(
                settings,
                graph,
                plan,
                &problem_findings,
                &e.to_string(),
                unsafe_text,
            );
        }
        Err(e) => return Err(Error::wrap(e)),
    };
    let seconds = start.elapsed().as_secs_f64();

    let mut out = unsafe_text;
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
    for line in report.render_trusted(graph) {
        let _ = writeln!(out, "{line}");
    }
    if report.unplaced_reads > 0 {
        let _ = writeln!(
            out,
            "skipped {} reads of tensors outside the arena",
            group_digits(report.unplaced_reads)
        );
    }
    let ok = if report.is_clean() && !rejected {
        let _ = writeln!(out, "ok: no live tensor was clobbered ({seconds:.2} s)");
        true
    } else if report.is_clean() {
        let _ = writeln!(
            out,
            "no live tensor was clobbered in this run, but the plan verifier rejects the plan ({seconds:.2} s)"
        );
        false
    } else {
        let lines = report.render_clobbers(graph);
        let _ = writeln!(
            out,
            "CLOBBERED: {} problem{} with the bytes ({seconds:.2} s)",
            group_digits(lines.len() as u64),
            if lines.len() == 1 { "" } else { "s" }
        );
        for line in lines.iter().take(settings.max_report) {
            let _ = writeln!(out, "  {line}");
        }
        if lines.len() > settings.max_report {
            let _ = writeln!(out, "  ... and {} more", lines.len() - settings.max_report);
        }
        false
    };
    {
        // The same total as the plan file's: the regions as laid out (the half region with
        // --half-weights), then the inputs and outputs left to the caller.
        // u64::MAX when the total has no answer (past 2^64, or a caller-owned size unknown).
        let total = plan
            .device_bytes(graph)
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
            "clobbered": report.render_clobbers(graph),
            "clobber_findings": report
                .findings(graph)
                .iter()
                .map(|(line, about)| finding(graph, line, about))
                .collect::<Vec<_>>(),
            "executed": true,
            "ok": report.is_clean() && !rejected,
        });
        Ok(CheckOutcome {
            ok,
            text: if json { pretty(&v)? } else { out },
            json: v,
            executed: true,
        })
    }
}

fn pretty(v: &serde_json::Value) -> Result<String> {
    let mut text = serde_json::to_string_pretty(v)?;
    text.push('\n');
    Ok(text)
}

/// The answer for a plan the verifier rejects and whose bytes cannot be run (`why`): exit 1,
/// the problems listed (text, or JSON with `"executed": false` and `"ok": false`).
fn not_executed(
    settings: &CheckSettings,
    graph: &Graph,
    plan: &Plan,
    findings: &[serde_json::Value],
    why: &str,
    unsafe_text: String,
) -> Result<CheckOutcome> {
    {
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
        let text = if settings.json {
            pretty(&v)?
        } else {
            format!("{unsafe_text}the plan's bytes were not run on a host arena: {why}\n")
        };
        Ok(CheckOutcome {
            ok: false,
            text,
            json: v,
            executed: false,
        })
    }
}

/// One problem in `memplan check --format json`: its message, and the tensors and nodes it
/// is about by id (their index in the graph's JSON lists; `memplan plan --html`'s page
/// shows tensor `N` with `?tensor_id=N`) and name (absent for an id the graph lacks).
fn finding(graph: &Graph, message: &str, about: &[AnyEntity]) -> serde_json::Value {
    let entry = |id: u32, name: Option<&str>| serde_json::json!({ "id": id, "name": name });
    let tensors: Vec<serde_json::Value> = about
        .iter()
        .filter_map(|e| match *e {
            AnyEntity::Tensor(t) => {
                Some(entry(t.0, graph.tensors().get(t).map(|x| x.name.as_str())))
            }
            _ => None,
        })
        .collect();
    let nodes: Vec<serde_json::Value> = about
        .iter()
        .filter_map(|e| match *e {
            AnyEntity::Node(n) => Some(entry(n.0, graph.nodes().get(n).map(|x| x.name.as_str()))),
            _ => None,
        })
        .collect();
    serde_json::json!({ "message": message, "tensors": tensors, "nodes": nodes })
}

/// A plan read from a plan file by [`load_plan`].
#[derive(Debug)]
pub struct LoadedPlan {
    /// The graph the plan is of (the step's, for a training plan).
    pub graph: Graph,
    /// The plan (at the `dims` asked for).
    pub plan: Plan,
    /// What is wrong with the file's own figures, at its own bindings
    /// ([`memplan_planner::verify_plan_figures`]; give them to [`check_with`]).
    pub figures: Vec<PlanViolation>,
}

/// The plan in a plan file (`text`, named `label` in errors) for `graph`: a training step's
/// plan is a plan of the step derived from `graph` with the options the file records
/// (`options` gives the rest, as the command's planning flags would), or, when `graph` is
/// the step graph itself (its name is the plan's), of `graph`; either way the step graph the
/// file records ([`crate::step_graph`]) must be that graph, and the file's `training`
/// figures must be the derived step's. With `dims`, the plan at those values, its own or
/// smaller values of the symbols it was planned at the bounds of.
pub fn load_plan(
    graph: Graph,
    text: &str,
    label: &str,
    options: PlanOptions,
    dims: &[(String, u64)],
) -> Result<LoadedPlan> {
    let value: Option<serde_json::Value> = serde_json::from_str(text).ok();
    let planned_for: Option<String> = value
        .as_ref()
        .and_then(|v| v.get("graph")?.as_str().map(str::to_owned));
    let recorded = match &value {
        Some(v) => crate::step_graph::recorded(v)?,
        None => None,
    };
    // A training step's plan is a plan of the step derived from the forward graph, with the
    // options the plan records; given the step graph itself, of that graph.
    let mut derived = None;
    let graph = match crate::training::options_from_plan(text, options)? {
        // A plan of a fused graph names the fused graph: fuse it again with the options the
        // plan records, and check the rewrite.
        None if text.contains("\"fuse\"") => {
            let options = Plan::options_in_json(&graph, text)
                .with_context(|| format!("reading the settings of the plan in {label}"))?;
            if options.fuse.is_none() {
                graph
            } else {
                let fused = memplan_planner::fuse_graph(&graph, &options)
                    .map_err(crate::error::named(&graph))
                    .with_context(|| format!("fusing graph `{}`", graph.name))?;
                crate::plan::verify_fused(&graph, &fused.graph)?;
                fused.graph
            }
        }
        None => graph,
        Some(_) if planned_for.as_deref() == Some(graph.name.as_str()) => {
            if let Some(r) = &recorded {
                crate::step_graph::matches(r, &graph, "the graph given")?;
            }
            graph
        }
        Some(mut training) => {
            training.plan.bindings = recorded_bindings(text, &graph)?;
            let step = memplan_planner::plan_training(&graph, &training)
                .map_err(crate::error::named(&graph))
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
    let plan = Plan::from_json(&graph, text).map_err(|e| {
        let other = planned_for
            .as_deref()
            .filter(|name| *name != graph.name)
            .map_or_else(String::new, |name| {
                format!(
                    " (the plan was made for graph `{name}`, this is `{}`)",
                    graph.name
                )
            });
        Error::wrap(e).context(format!("reading the plan in {label}{other}"))
    })?;
    // A plan of another graph is bad input, not an unsafe plan.
    plan.settings.bindings_for(&graph).map_err(|name| {
        crate::err!(
            "the plan in {label} binds symbol `{name}`, which graph `{}` does not have",
            graph.name
        )
    })?;
    if let (Some((step, training)), Some(v)) = (&derived, &value) {
        let file = v.get("training").unwrap_or(&serde_json::Value::Null);
        crate::step_graph::check_training_object(file, step, &plan, training)
            .with_context(|| format!("reading the plan in {label}"))?;
    }
    // The plan's own figures, at its own bindings (a plan re-sized below its bounds keeps
    // the figures of the bound).
    let figures = memplan_planner::verify_plan_figures(&graph, &plan);
    let dims = crate::load::unique_dims(dims)?;
    if dims.is_empty() {
        return Ok(LoadedPlan {
            graph,
            plan,
            figures,
        });
    }
    let plan = plan.at_values(&graph, &dims).with_context(|| {
        format!(
            "checking the plan in {label} at {}",
            dims.iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    Ok(LoadedPlan {
        graph,
        plan,
        figures,
    })
}

/// The bindings a plan file records (`settings.bindings`), for `graph`'s symbols; none when
/// it records none.
fn recorded_bindings(text: &str, graph: &Graph) -> Result<memplan_ir::Bindings> {
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
