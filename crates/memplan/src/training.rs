//! Training steps: `memplan plan MODEL --training adamw` (and `check`, `fit`) plan a
//! training step derived from a forward model ([`memplan_planner::plan_training`]); this
//! module holds the step's report, its plan file and its batch fit. ONNX Runtime's own
//! training graphs plan as they are, their parameters and gradient buffers recognised as
//! persistent state ([`mark_persistent`]), and an optimizer graph's sequence inputs are
//! sized from a parameter list (`--parameters FILE`, [`parameter_dims`]).
//!
//! The plan JSON of a training step gains a `training` object (one line, after
//! `total_bytes`): `optimizer`, `loss`, `fused_optimizer`, `accumulate`, `optimizer_kernel`,
//! `checkpoint` (the policy), `checkpoints` (the forward nodes after which one is set),
//! `cheap_recompute` (whether cheap ops are recomputed), `parameters`,
//! `parameter_elements`, `saved_bytes`, `weight_bytes`, `gradient_bytes`,
//! `optimizer_state_bytes`, `persistent_bytes`, `recompute` (`nodes`, `flops`,
//! `forward_flops`), `phases` (first and last step of `forward`, `backward`, `optimizer`)
//! and what `check --plan` needs to derive the same step again (`master_weights`, `frozen`,
//! `training_unknown`, `pointwise_fusion`).

use std::fmt::Write as _;
use std::path::Path;

use memplan_ir::GraphError as _;
use memplan_ir::{Graph, OpTable, TensorKind};
use memplan_planner::{
    Checkpoint, Loss, ORT_GRAD_BUFFER, Optimizer, OptimizerKernel, Phase, PlanOptions, StateReason,
    TrainingOptions, TrainingStep, UnknownOps, mark_state,
};

use crate::{Context, Notes, Result, bail, group_digits, size};

/// Parses an optimizer name (`sgd`, `momentum`, `adam`, `adamw`), with the planner's message.
pub fn parse_optimizer(s: &str) -> Result<Optimizer, String> {
    s.parse()
        .map_err(|e: memplan_planner::UnknownName| e.to_string())
}

/// Parses an optimizer kernel (`fused`, `foreach`, `per-tensor`), with the planner's message.
pub fn parse_kernel(s: &str) -> Result<OptimizerKernel, String> {
    s.parse()
        .map_err(|e: memplan_planner::UnknownName| e.to_string())
}

/// Parses a loss name (`cross-entropy`, `mse`, `none`), with the planner's message.
pub fn parse_loss(s: &str) -> Result<Loss, String> {
    s.parse()
        .map_err(|e: memplan_planner::UnknownName| e.to_string())
}

/// Parses a checkpoint policy: `cheap`, `none`, `every:N`, `NODE,...` or `auto` (which
/// needs `budget`).
pub fn parse_checkpoint(s: &str, budget: Option<u64>) -> Result<Checkpoint> {
    Ok(match s {
        "cheap" => Checkpoint::Cheap,
        "none" => Checkpoint::None,
        "auto" => Checkpoint::Auto {
            budget: budget.context("--checkpoint auto needs --budget SIZE (e.g. 24GiB)")?,
        },
        _ => match s.strip_prefix("every:") {
            Some(n) => Checkpoint::Every(
                n.parse()
                    .ok()
                    .filter(|&n: &usize| n > 0)
                    .with_context(|| format!("`{s}`: every:N needs N of 1 or more"))?,
            ),
            None => {
                let nodes: Vec<String> = s
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect();
                if nodes.is_empty() {
                    bail!("--checkpoint `{s}` names no node");
                }
                Checkpoint::After(nodes)
            }
        },
    })
}
/// Makes the graph inputs that are training state persistent (ONNX Runtime's naming, ops
/// that update them, `--persistent` patterns) and says how many.
pub fn mark_persistent(
    graph: &mut Graph,
    patterns: &[String],
    notes: &mut dyn Notes,
) -> Result<()> {
    let marked = mark_state(graph, &OpTable::default(), patterns)?;
    if marked.is_empty() {
        return Ok(());
    }
    let count = |r: StateReason| marked.iter().filter(|(_, x)| *x == r).count();
    let mut why = Vec::new();
    for (r, what) in [
        (
            StateReason::OrtNaming,
            "parameters and gradient buffers by ONNX Runtime's naming",
        ),
        (StateReason::Updated, "updated in place"),
        (StateReason::Pattern, "by --persistent"),
    ] {
        let n = count(r);
        if n > 0 {
            why.push(format!("{n} {what}"));
        }
    }
    notes.note(format!(
        "{} graph inputs are training state ({}): kept in the persistent region",
        marked.len(),
        why.join(", ")
    ));
    Ok(())
}

/// `--dim` values sizing an optimizer graph's sequence inputs (`params_len`,
/// `params_item`, ...) from the parameters of `file` (ONNX Runtime's training graph: the
/// inputs beside a gradient buffer; a forward model: its float weights of rank 1 or more):
/// each sequence is planned as its items back to back, one item of all their elements.
pub fn parameter_dims(
    graph: &Graph,
    file: &Path,
    notes: &mut dyn Notes,
) -> Result<Vec<(String, u64)>> {
    let source = crate::load::load_graph(Some(file))?;
    let bound = crate::load::bind_dims(source.clone(), &[], false)?;
    let mut elements: u64 = 0;
    let mut count = 0u64;
    for t in bound.tensors().iter() {
        let is_param = match t.kind {
            TensorKind::Input => bound
                .find_tensor(&format!("{}{ORT_GRAD_BUFFER}", t.name))
                .is_some(),
            TensorKind::Weight | TensorKind::State => {
                t.dtype.is_float() && !t.shape.is_empty() && !t.name.ends_with(ORT_GRAD_BUFFER)
            }
            _ => false,
        };
        if is_param {
            let n = t.static_elements().with_context(|| {
                format!(
                    "parameter `{}` of {} has no static size",
                    t.name,
                    file.display()
                )
            })?;
            elements = elements
                .checked_add(n)
                .context("the parameters' elements overflow")?;
            count += 1;
        }
    }
    if count == 0 {
        bail!("{} has no parameters", file.display());
    }
    let mut dims = Vec::new();
    for t in graph.tensors().iter() {
        let names: Vec<String> = t
            .shape
            .iter()
            .flat_map(|d| d.symbols())
            .filter_map(|s| graph.symbols().get(s).cloned())
            .collect();
        let (len, item) = (format!("{}_len", t.name), format!("{}_item", t.name));
        if names.contains(&len) && names.contains(&item) {
            dims.push((len, 1));
            dims.push((item, elements));
        }
    }
    if dims.is_empty() {
        bail!(
            "--parameters sizes sequence inputs, and graph `{}` has none",
            graph.name
        );
    }
    notes.note(format!(
        "sequence inputs sized from {} parameters of {} ({} elements each)",
        group_digits(count),
        file.display(),
        group_digits(elements)
    ));
    Ok(dims)
}

/// The `training` object of the plan JSON (see the module docs).
pub fn training_json(step: &TrainingStep, options: &TrainingOptions) -> serde_json::Value {
    let s = &step.summary;
    let phase = |p: Phase| {
        let steps = phase_steps(step, p);
        match (steps.first(), steps.last()) {
            (Some(a), Some(b)) => serde_json::json!([a, b]),
            _ => serde_json::Value::Null,
        }
    };
    serde_json::json!({
        "optimizer": s.optimizer.name(),
        "loss": s.loss.name(),
        "fused_optimizer": s.fused_optimizer,
        "accumulate": s.accumulate,
        "optimizer_kernel": s.optimizer_kernel.name(),
        "checkpoint": s.checkpoint,
        "checkpoints": s.checkpoints,
        "cheap_recompute": s.cheap_recompute,
        "parameters": s.parameters.len(),
        "parameter_elements": s.parameter_elements,
        "saved_bytes": s.saved_bytes,
        "weight_bytes": s.weight_bytes,
        "gradient_bytes": s.gradient_bytes,
        "optimizer_state_bytes": s.optimizer_state_bytes,
        "persistent_bytes": s.persistent_bytes,
        "recompute": {
            "nodes": s.recompute.nodes,
            "flops": s.recompute.flops,
            "forward_flops": s.recompute.forward_flops,
        },
        "phases": {
            "forward": phase(Phase::Forward),
            "backward": phase(Phase::Backward),
            "optimizer": phase(Phase::Optimizer),
        },
        "master_weights": options.master_weights,
        "pointwise_fusion": options.pointwise_fusion,
        "frozen": options.frozen,
        "training_unknown": match options.unknown_ops {
            UnknownOps::Refuse => "refuse",
            UnknownOps::SaveAll => "save-all",
            _ => "other",
        },
    })
}

/// The plan JSON of a training step: the plain plan JSON with the `training` object after
/// `total_bytes`, then the step's graph (`step_graph`: in the file, or, with `beside`, the
/// name of the file the caller writes it to, and its digest; see [`crate::step_graph`]).
pub fn plan_json(
    step: &TrainingStep,
    options: &TrainingOptions,
    beside: Option<&str>,
) -> Result<String> {
    let graph = crate::step_graph::header_value(&step.graph, beside)?;
    crate::plan::plan_file(
        &step.graph,
        &step.plan,
        Some(training_json(step, options)),
        Some(graph),
    )
}

/// The training options a plan file records (its `training` object), with the
/// checkpoints it chose, so that `check --plan` derives the same step.
pub fn options_from_plan(text: &str, plan: PlanOptions) -> Result<Option<TrainingOptions>> {
    let v: serde_json::Value = serde_json::from_str(text).context("reading the plan as JSON")?;
    let Some(t) = v.get("training") else {
        return Ok(None);
    };
    let field = |k: &str| {
        t.get(k)
            .with_context(|| format!("the plan's `training` object has no `{k}`"))
    };
    let name = |k: &str| -> Result<String> {
        field(k)?
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("`training.{k}` is not a string"))
    };
    let names = |k: &str| -> Result<Vec<String>> {
        match t.get(k) {
            None => Ok(Vec::new()),
            Some(v) => v
                .as_array()
                .with_context(|| format!("`training.{k}` is not a list"))?
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_owned)
                        .with_context(|| format!("`training.{k}` holds a non-string"))
                })
                .collect(),
        }
    };
    let policy = name("checkpoint")?;
    let checkpoints = names("checkpoints")?;
    // What `auto` (or `every:N`) chose: checkpoints recompute cheap ops too; without any, the
    // cheap policy or nothing (plans written before `cheap_recompute` recomputed nothing
    // without checkpoints).
    let cheap = t
        .get("cheap_recompute")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let checkpoint = match policy.as_str() {
        "cheap" => Checkpoint::Cheap,
        "none" => Checkpoint::None,
        _ if checkpoints.is_empty() && cheap => Checkpoint::Cheap,
        _ if checkpoints.is_empty() => Checkpoint::None,
        _ => Checkpoint::After(checkpoints),
    };
    Ok(Some(
        TrainingOptions::default()
            .with_plan(plan)
            .with_optimizer(parse_optimizer(&name("optimizer")?).map_err(crate::Error::input)?)
            .with_loss(parse_loss(&name("loss")?).map_err(crate::Error::input)?)
            .with_fused_optimizer(field("fused_optimizer")?.as_bool().unwrap_or(false))
            .with_accumulate(
                t.get("accumulate")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(true),
            )
            .with_optimizer_kernel(match t.get("optimizer_kernel") {
                None => OptimizerKernel::Fused,
                Some(v) => parse_kernel(
                    v.as_str()
                        .context("`training.optimizer_kernel` is not a string")?,
                )
                .map_err(crate::Error::input)?,
            })
            .with_checkpoint(checkpoint)
            .with_unknown_ops(
                if t.get("training_unknown").and_then(|v| v.as_str()) == Some("save-all") {
                    UnknownOps::SaveAll
                } else {
                    UnknownOps::Refuse
                },
            )
            .with_master_weights(
                t.get("master_weights")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(true),
            )
            .with_frozen(names("frozen")?)
            .with_pointwise_fusion(
                t.get("pointwise_fusion")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false),
            ),
    ))
}

/// The training section of the text report.
pub fn report(step: &TrainingStep) -> String {
    let s = &step.summary;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\ntraining step: {}, {} loss, {}, {} optimizer kernel",
        s.optimizer,
        s.loss.name(),
        if s.fused_optimizer {
            "each update right after its gradient, in the backward"
        } else if s.accumulate {
            "gradients accumulated in a persistent region"
        } else {
            "each gradient live until its update after the backward"
        },
        s.optimizer_kernel
    );
    let row = |out: &mut String, name: &str, bytes: u64, what: &str| {
        let _ = writeln!(out, "  {name:<17}{:>12}  {what}", size(bytes));
    };
    row(
        &mut out,
        "weights",
        s.weight_bytes,
        &format!(
            "{} trained parameters ({} elements) and constants",
            group_digits(s.parameters.len() as u64),
            group_digits(s.parameter_elements)
        ),
    );
    row(
        &mut out,
        "+ gradients",
        s.gradient_bytes,
        &if s.accumulate {
            "one per parameter, persistent (accumulated across micro-steps)".to_owned()
        } else {
            format!(
                "none persistent: {} of gradients, each in the arena until its update",
                size(s.all_gradient_bytes)
            )
        },
    );
    let buffers = s.optimizer.state_buffers();
    row(
        &mut out,
        "+ optimizer state",
        s.optimizer_state_bytes,
        &if buffers.is_empty() {
            "none (plain SGD)".to_owned()
        } else {
            format!(
                "{} per parameter (f32 master weights for 16-bit ones)",
                buffers.join(" and ")
            )
        },
    );
    row(
        &mut out,
        "= persistent",
        s.persistent_bytes,
        "the persistent region, aligned as placed",
    );
    row(
        &mut out,
        "saved",
        s.saved_bytes,
        &format!(
            "{} forward tensors kept for the backward (inputs included), in the arena",
            group_digits(s.saved.len() as u64)
        ),
    );
    let r = &s.recompute;
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let share = if r.forward_flops == 0 {
        0.0
    } else {
        100.0 * r.flops as f64 / r.forward_flops as f64
    };
    let _ = writeln!(
        out,
        "  {:<17}{} nodes, {} FLOPs ({share:.1}% of the forward's {}); checkpoint policy {}{}",
        "recompute",
        group_digits(r.nodes),
        group_digits(r.flops),
        group_digits(r.forward_flops),
        s.checkpoint,
        if s.checkpoints.is_empty() {
            String::new()
        } else {
            format!(", {} checkpoints", s.checkpoints.len())
        }
    );
    let mut phases = Vec::new();
    for p in [Phase::Forward, Phase::Backward, Phase::Optimizer] {
        let steps = phase_steps(step, p);
        if let (Some(a), Some(b)) = (steps.first(), steps.last()) {
            phases.push(format!("{} {a}-{b} ({} steps)", p.name(), steps.len()));
        }
    }
    let _ = writeln!(out, "  {:<17}{}", "phases", phases.join(", "));
    out
}

/// What `memplan fit MODEL --training OPTIMIZER` asks for.
#[derive(Clone, Copy, Debug)]
pub struct FitRequest<'a> {
    /// The symbol to maximise.
    pub symbol: &'a str,
    /// The device memory to fit.
    pub budget: u64,
    /// Smallest value considered.
    pub min: u64,
    /// Largest value considered.
    pub max: u64,
}

/// The answer of [`fit`]: the largest value that fits and its step, or none.
#[derive(Debug)]
pub struct TrainingFit {
    /// The symbol fitted.
    pub symbol: String,
    /// The largest value whose step fits; `None` when not even the smallest does.
    pub value: Option<u64>,
    /// The device memory asked to fit.
    pub budget: u64,
    /// The smallest value considered (`--min`).
    pub min: u64,
    /// Device bytes at `value`, or at `min` when nothing fits (`u64::MAX` past 2^64).
    pub total: u64,
    /// The training step planned at `value` (verified).
    pub step: Option<TrainingStep>,
    /// Device bytes at `value + 1` (`Some(None)`: past 2^64); `None` at the top of the range.
    pub next: Option<Option<u64>>,
    /// Training steps planned.
    pub plans: u32,
    /// Values tried.
    pub probes: u32,
}

impl TrainingFit {
    /// The one-line JSON of `memplan fit --format json`.
    pub fn json(&self) -> String {
        let breakdown = self.step.as_ref().filter(|_| self.value.is_some()).map_or(
            serde_json::Value::Null,
            |s| {
                serde_json::json!({
                    "arena_bytes": s.plan.arena_bytes,
                    "persistent_bytes": s.plan.weight_bytes,
                    "caller_io_bytes": self.total
                        .saturating_sub(s.plan.arena_bytes.saturating_add(s.plan.weight_bytes)),
                    "total_bytes": self.total,
                })
            },
        );
        let next = self.value.zip(self.next).map(|(n, t)| (n + 1, t));
        crate::fit::fit_json(
            &self.symbol,
            self.value,
            self.budget,
            self.total,
            breakdown,
            next,
        )
    }

    /// The text of `memplan fit`: the answer, then the step's report listing `top` buffers.
    pub fn text(&self, top: usize) -> Result<String> {
        let symbol = &self.symbol;
        let mut out = String::new();
        match (self.value, &self.step) {
            (Some(n), Some(s)) => {
                let total = self.total;
                let _ = writeln!(out, "{symbol} = {n}");
                let _ = writeln!(
                    out,
                    "needs {} ({} bytes: arena {} + persistent {}) within the budget of {}",
                    size(total),
                    group_digits(total),
                    size(s.plan.arena_bytes),
                    size(s.plan.weight_bytes),
                    memplan_ir::ExactBytes(self.budget)
                );
                let _ = match self.next {
                    Some(Some(t)) => writeln!(
                        out,
                        "{symbol} = {} needs {}: over the budget",
                        n + 1,
                        memplan_ir::ExactBytes(t)
                    ),
                    Some(None) => writeln!(out, "{symbol} = {}: sizes past 2^64 bytes", n + 1),
                    None => writeln!(
                        out,
                        "{symbol} = {n} is the top of the range searched (--max)"
                    ),
                };
                out.push('\n');
                out.push_str(&crate::report::plan_report(&s.graph, &s.plan, top)?);
                out.push_str(&report(s));
                out.push_str("\nverified: the plan passes the independent plan verifier\n");
            }
            _ => {
                out.push_str(&crate::fit::nothing_fits(
                    symbol,
                    self.min,
                    self.total,
                    "",
                    self.budget,
                ));
            }
        }
        Ok(out)
    }
}

/// `memplan fit MODEL --training OPTIMIZER --symbol batch --budget B`: the largest value of
/// the symbol whose training step (recomputing under the budget with `--checkpoint auto`)
/// fits, checked by planning at `N` (fits, verified) and `N + 1` (does not). `graph` and
/// `plan_options` come from [`crate::load::prepare_symbolic`]; `settings` give the optimizer
/// and the step's options.
pub fn fit(
    graph: &Graph,
    plan_options: &PlanOptions,
    settings: &crate::options::PlanSettings,
    request: &FitRequest<'_>,
) -> Result<TrainingFit> {
    use memplan_planner::{PlanError, plan_training, verify_plan};
    let symbol = request.symbol;
    if settings.dims.iter().any(|(n, _)| n == symbol) {
        bail!("--dim {symbol}=... fixes the symbol being fitted; leave it out");
    }
    let optimizer = settings
        .training
        .context("fitting a training step needs --training OPTIMIZER")?;
    let id = graph.find_symbol(symbol).with_context(|| {
        format!(
            "graph `{}` has no symbol `{symbol}` (it has: {})",
            graph.name,
            graph
                .symbols()
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let unbound: Vec<String> = graph
        .symbols()
        .iter_enumerated()
        .filter(|&(s, _)| s != id && plan_options.bindings.get(s).is_none())
        .map(|(_, n)| format!("--dim {n}=N"))
        .collect();
    if !unbound.is_empty() {
        bail!("graph `{}` needs {}", graph.name, unbound.join(" "));
    }
    if request.min > request.max {
        bail!("--min {} is above --max {}", request.min, request.max);
    }
    let options_at = |v: u64| -> Result<TrainingOptions> {
        let plan = plan_options
            .clone()
            .with_bindings(plan_options.bindings.clone().with(id, v));
        settings.step_options(plan, optimizer, Some(request.budget))
    };
    // The total device bytes at `v`, `None` when nothing fits (or sizes pass 2^64).
    let mut plans = 0u32;
    let mut at =
        |v: u64| -> Result<(Option<u64>, Option<TrainingStep>)> {
            plans += 1;
            let options = options_at(v)?;
            match plan_training(graph, &options).map_err(crate::error::named(graph)) {
                Ok(s) => match s.plan.device_bytes(&s.graph) {
                    Ok(d) => Ok((Some(d.total), Some(s))),
                    // Past 2^64 bytes: nothing fits.
                    Err(memplan_planner::DeviceBytesError::Overflow) => Ok((None, None)),
                    Err(e) => Err(crate::Error::wrap(e)
                        .context(format!("the device memory at {symbol} = {v}"))),
                },
                Err(PlanError::BudgetTooSmall { minimum, .. }) => Ok((Some(minimum), None)),
                // A size (in the step's graph, say) past 64 bits: nothing fits.
                Err(e)
                    if matches!(
                        e.inner(),
                        PlanError::Overflow { .. } | PlanError::Size { .. }
                    ) =>
                {
                    Ok((None, None))
                }
                Err(e) => Err(crate::Error::wrap(e)
                    .context(format!("planning the training step at {symbol} = {v}"))),
            }
        };
    let mut best: Option<(u64, u64, TrainingStep)> = None;
    let mut seen: Vec<(u64, Option<u64>)> = Vec::new();
    let outcome = memplan_tracker::largest_fitting(request.min, request.max, |v| {
        let (total, s) = at(v)?;
        seen.push((v, total));
        let fits = total.is_some_and(|t| t <= request.budget) && s.is_some();
        if let (true, Some(s), Some(t)) = (fits, s, total)
            && best.as_ref().is_none_or(|b| b.0 < v)
        {
            best = Some((v, t, s));
        }
        Ok::<_, crate::Error>(fits)
    })?;
    let next = match outcome.largest {
        Some(n) if n < request.max => match seen.iter().find(|(v, _)| *v == n + 1) {
            Some(&(_, t)) => Some(t),
            None => Some(at(n + 1)?.0),
        },
        _ => None,
    };
    let (value, total, step) = match (outcome.largest, best) {
        (Some(n), Some((v, t, s))) if n == v => {
            verify_plan(&s.graph, &s.plan).map_err(|p| {
                crate::Error::new(
                    crate::ErrorKind::Unsafe,
                    format!(
                        "the plan at {symbol} = {n} fails the verifier: {}",
                        p.with_graph(&s.graph)
                    ),
                )
            })?;
            (Some(n), t, Some(s))
        }
        _ => {
            let t = seen
                .iter()
                .find(|(v, _)| *v == request.min)
                .and_then(|x| x.1)
                .unwrap_or(u64::MAX);
            (None, t, None)
        }
    };
    Ok(TrainingFit {
        symbol: symbol.to_owned(),
        value,
        budget: request.budget,
        min: request.min,
        total,
        step,
        next,
        plans,
        probes: outcome.probes,
    })
}

/// The steps of `step`'s schedule in phase `p`, in order.
fn phase_steps(step: &TrainingStep, p: Phase) -> Vec<usize> {
    step.plan
        .schedule
        .iter()
        .enumerate()
        .filter(|&(_, n)| step.summary.phases.get(*n) == Some(&p))
        .map(|(i, _)| i)
        .collect()
}

/// The phase of each step of `step`'s schedule, for the pictures.
pub fn step_phases(step: &TrainingStep) -> Vec<Phase> {
    step.plan
        .schedule
        .iter()
        .map(|&n| s_phase(step, n))
        .collect()
}

fn s_phase(step: &TrainingStep, n: memplan_ir::NodeId) -> Phase {
    step.summary
        .phases
        .get(n)
        .copied()
        .unwrap_or(Phase::Forward)
}
