//! Planning as `memplan plan` does it: a prepared graph ([`crate::load::prepare`]) planned
//! with the settings' options, forward or as a training step derived from it, and checked by
//! the independent plan verifier unless the settings say not to. A [`Planned`] gives what
//! the command writes: the text report, the plan file, the pictures.
//!
//! A plan the verifier rejects is an [`ErrorKind::Unsafe`] error listing its problems; a
//! `checkpoint="auto"` budget below what any recomputation reaches is
//! [`ErrorKind::DoesNotFit`].

use memplan_ir::{Graph, GraphError as _};
use memplan_planner::{
    FusedGraph, Plan, PlanOptions, TrainingOptions, TrainingStep, plan_graph, verify_plan,
};

use crate::options::PlanSettings;
use crate::picture::Picture;
use crate::{Context, Error, ErrorKind, Result};

/// A plan as `memplan plan` makes it: of the graph, or of a training step derived from it.
#[derive(Debug)]
pub struct Planned {
    kind: Kind,
    /// Whether the independent plan verifier passed the plan (`false`: it did not run).
    pub verified: bool,
    /// What was fused (`--fuse`), as the report's line says it ([`fused_line`]).
    pub fused: Option<String>,
}

#[derive(Debug)]
enum Kind {
    // Boxed: the plans are large, and a step larger still.
    Forward {
        graph: Box<Graph>,
        plan: Box<Plan>,
    },
    Training {
        step: Box<TrainingStep>,
        options: Box<TrainingOptions>,
    },
}

/// The line the report ends with when the verifier passed the plan.
pub const VERIFIED: &str = "\nverified: the plan passes the independent plan verifier\n";

impl Planned {
    /// A plan of `graph` made elsewhere, `verified` or not.
    pub fn new(graph: Graph, plan: Plan, verified: bool) -> Planned {
        Planned {
            kind: Kind::Forward {
                graph: Box::new(graph),
                plan: Box::new(plan),
            },
            verified,
            fused: None,
        }
    }

    /// The graph planned: the one given, or the training step's (forward, loss, backward,
    /// optimizer).
    pub fn graph(&self) -> &Graph {
        match &self.kind {
            Kind::Forward { graph, .. } => graph,
            Kind::Training { step, .. } => &step.graph,
        }
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        match &self.kind {
            Kind::Forward { plan, .. } => plan,
            Kind::Training { step, .. } => &step.plan,
        }
    }

    /// The training step and its options, for a training plan.
    pub fn training(&self) -> Option<(&TrainingStep, &TrainingOptions)> {
        match &self.kind {
            Kind::Forward { .. } => None,
            Kind::Training { step, options } => Some((step.as_ref(), options.as_ref())),
        }
    }

    /// The text report of `memplan plan`, listing the `top` largest buffers, with the
    /// training section for a step and the verifier's line when it ran.
    pub fn report(&self, top: usize) -> Result<String> {
        let mut text = crate::report::plan_report(self.graph(), self.plan(), top)?;
        if let Some((step, _)) = self.training() {
            text.push_str(&crate::training::report(step));
        }
        if let Some(line) = &self.fused {
            text.push_str(line);
            text.push('\n');
        }
        if self.verified {
            text.push_str(VERIFIED);
        }
        Ok(text)
    }

    /// The plan file, byte for byte what `memplan plan --format json` writes. A training
    /// plan holds its step graph ([`crate::step_graph`]).
    pub fn to_json(&self) -> Result<String> {
        self.to_json_beside(None)
    }

    /// [`Planned::to_json`], a training plan naming its step graph as the file `beside`
    /// (which the caller writes [`Planned::graph`]'s `to_json()` to: `memplan plan
    /// --emit-graph FILE`) instead of holding it.
    pub fn to_json_beside(&self, beside: Option<&str>) -> Result<String> {
        match &self.kind {
            Kind::Forward { graph, plan } => plan_json(graph, plan),
            Kind::Training { step, options } => crate::training::plan_json(step, options, beside),
        }
    }

    /// What the pictures draw (with the training phases for a step).
    pub fn picture(&self) -> Picture {
        let picture = Picture::new(self.graph(), self.plan());
        match self.training() {
            Some((step, _)) => picture.with_phases(&crate::training::step_phases(step)),
            None => picture,
        }
    }

    /// The SVG picture of `memplan plan --svg`.
    pub fn svg(&self) -> String {
        crate::picture::svg::render(&self.picture())
    }

    /// The HTML page of `memplan plan --html`.
    pub fn html(&self) -> String {
        crate::picture::html::render(&self.picture())
    }
}

/// Plans `graph` (prepared by [`crate::load::prepare`], which made `options`) as the settings
/// ask: a training step when `settings.training` names an optimizer, verified unless
/// `settings.verify` is off.
pub fn plan(graph: &Graph, settings: &PlanSettings, options: &PlanOptions) -> Result<Planned> {
    let mut fused_what = None;
    let kind = match settings.training_options(options)? {
        Some(training) => {
            let step = match memplan_planner::plan_training(graph, &training)
                .map_err(crate::error::named(graph))
            {
                Ok(step) => step,
                Err(e @ memplan_planner::PlanError::BudgetTooSmall { .. }) => {
                    return Err(Error::wrap(e)
                        .context(format!("planning the training step of `{}`", graph.name))
                        .with_kind(ErrorKind::DoesNotFit));
                }
                Err(e) => {
                    return Err(Error::wrap(e).context(format!(
                        "planning the training step of graph `{}`",
                        graph.name
                    )));
                }
            };
            Kind::Training {
                step: Box::new(step),
                options: Box::new(training),
            }
        }
        None => {
            let (graph, plan, fused) = plan_checked_fusion(graph.clone(), options)?;
            fused_what = fused.as_ref().and_then(fused_line);
            Kind::Forward {
                graph: Box::new(graph),
                plan: Box::new(plan),
            }
        }
    };
    let planned = Planned {
        kind,
        verified: false,
        fused: fused_what,
    };
    if !settings.verify {
        return Ok(planned);
    }
    verify(planned.graph(), planned.plan())?;
    Ok(Planned {
        verified: true,
        ..planned
    })
}

/// Fuses `graph` as `options` ask, checks the rewrite with the verifier's own statement of
/// each fused kernel ([`memplan_planner::verify_fusion`]), and plans the fused graph: the
/// graph the plan names, the plan, and the fusion. Without fusions, the graph as it is.
pub fn plan_checked_fusion(
    graph: Graph,
    options: &PlanOptions,
) -> Result<(Graph, Plan, Option<FusedGraph>)> {
    if options.fuse.is_none() {
        let plan = plan_graph(&graph, options)
            .map_err(crate::error::named(&graph))
            .with_context(|| format!("planning graph `{}`", graph.name))?;
        return Ok((graph, plan, None));
    }
    let (fused, plan) = memplan_planner::plan_fused(&graph, options)
        .map_err(crate::error::named(&graph))
        .with_context(|| format!("planning graph `{}`", graph.name))?;
    verify_fused(&graph, &fused.graph)?;
    Ok((fused.graph.clone(), plan, Some(fused)))
}

/// The fusion verifier on `fused`, a rewrite of `original`: a failure is an
/// [`ErrorKind::Unsafe`] error (a bug in the matcher).
pub fn verify_fused(original: &Graph, fused: &Graph) -> Result<()> {
    memplan_planner::verify_fusion(original, fused).map_err(|e| {
        Error::new(
            ErrorKind::Unsafe,
            format!(
                "the fusion of graph `{}` fails the verifier (a bug in the matcher): {e}",
                original.name
            ),
        )
    })
}

/// One line saying what was fused: `fused: 12 attention, 16 conv-add` (`None` when
/// nothing was).
pub fn fused_line(fused: &FusedGraph) -> Option<String> {
    let mut parts: Vec<String> = fused
        .counts()
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    if fused.remade > 0 {
        parts.push(format!(
            "{} constant-building node copies made where used",
            fused.remade
        ));
    }
    (!parts.is_empty()).then(|| format!("fused: {}", parts.join(", ")))
}

/// The independent plan verifier, then the plan's own figures
/// ([`memplan_planner::verify_plan_figures`]), their problems (tensors by name) as an
/// [`ErrorKind::Unsafe`] error.
pub fn verify(graph: &Graph, plan: &Plan) -> Result<()> {
    verify_with_figures(graph, plan)
        .map_err(|problems| Error::new(ErrorKind::Unsafe, problems.with_graph(graph).to_string()))
}

/// [`verify_plan`], then the plan's own figures ([`memplan_planner::verify_plan_figures`]):
/// the problems of both.
pub fn verify_with_figures(
    graph: &Graph,
    plan: &Plan,
) -> std::result::Result<(), memplan_planner::PlanViolations> {
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
pub fn plan_json(graph: &Graph, plan: &Plan) -> Result<String> {
    plan_file(graph, plan, None, None)
}

/// [`plan_json`] with a training step's `training` object and its `step_graph`.
pub fn plan_file(
    graph: &Graph,
    plan: &Plan,
    training: Option<serde_json::Value>,
    step_graph: Option<serde_json::Value>,
) -> Result<String> {
    let header = memplan_planner::PlanHeader::default()
        .with_produced_by(Some(crate::PRODUCED_BY.to_owned()))
        .with_training(training)
        .with_step_graph(step_graph);
    plan.to_json_file(graph, &header)
        .with_context(|| format!("writing the plan of graph `{}`", graph.name))
}
