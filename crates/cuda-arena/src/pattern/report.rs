//! What a check finds: each [`Clobber`] and its [`Cause`], refused views, trusted aliases
//! and body runs, gathered in a [`CheckReport`] that renders them with the graph's names.

use memplan_ir::{AnyEntity, Entities, Graph, Grouped, NodeId, TensorId};
use memplan_planner::AliasKind;

use crate::layout::Region;

/// Why a tensor does not hold its pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// A later write covered the first wrong byte.
    Overwritten {
        /// The tensor whose write it was.
        by: TensorId,
        /// The step of that write (`None`: before step 0).
        step: Option<u32>,
    },
    /// The workspace of a node (scratch bytes of its bodies) covered the first wrong byte.
    Workspace {
        /// The node.
        node: NodeId,
        /// Its step.
        step: u32,
    },
    /// The tensor's writer had not run yet (the schedule reads it before producing it).
    NotYetWritten,
    /// The tensor is updated in place by `node`, and the read runs on the other side of that
    /// update than the graph's node order puts it.
    UpdateOrder {
        /// The updating node.
        node: NodeId,
    },
    /// The tensor is a view of a tensor that `node` updated in place after the view was
    /// made: the view shares the updated bytes, so it holds the new values where the
    /// program gives it the old ones.
    UpdatedUnder {
        /// The updating node.
        node: NodeId,
    },
    /// No write in the plan explains the bytes.
    Unexplained,
}

/// A tensor found not holding its pattern when read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Clobber {
    /// The tensor read.
    pub tensor: TensorId,
    /// The tensor whose pattern it should hold (itself, or its source's writer for a view).
    pub writer: TensorId,
    /// The step reading it; `None` for the check of graph outputs after the last step.
    pub step: Option<u32>,
    /// The node reading it (`None` after the last step).
    pub reader: Option<NodeId>,
    /// Its region.
    pub region: Region,
    /// Address of the first wrong byte.
    pub first_bad: u64,
    /// Wrong bytes among those checked.
    pub bad_bytes: u64,
    /// What happened.
    pub cause: Cause,
}

/// What is wrong with a view the plan claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ViewFault {
    /// The op's definition does not make this output a known byte range of an input.
    NotAView,
    /// The op selects the bytes from another input than the plan's parent.
    WrongSource {
        /// The input the op selects from.
        expected: TensorId,
    },
    /// The view does not start where the selected bytes are, or is not as long.
    WrongPlace {
        /// Where the selected bytes start in the region.
        expected_offset: u64,
        /// How many bytes the op selects.
        expected_bytes: u64,
    },
}

/// A view output the check refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BadView {
    /// The view.
    pub tensor: TensorId,
    /// The node producing it.
    pub node: NodeId,
    /// Its step.
    pub step: u32,
    /// What is wrong.
    pub fault: ViewFault,
}

/// An alias the check could not confirm and trusted (made by an `OpRule::Custom` op).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Trusted {
    /// The aliased output.
    pub tensor: TensorId,
    /// The node producing it.
    pub node: NodeId,
    /// View or in-place.
    pub alias: AliasKind,
}

/// One run of a body's plan inside its node's workspace, at the node's step.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BodyRun {
    /// The node.
    pub node: NodeId,
    /// The body's attribute.
    pub attr: String,
    /// The node's step.
    pub step: u32,
    /// The body's own check (tensors are the body graph's).
    pub report: CheckReport,
    /// The first byte range `[start, end)` of the workspace's region that the body's plan
    /// touched outside its workspace (not written: the plan does not fit).
    pub outside: Option<(u64, u64)>,
    /// A memory failure that stopped the run.
    pub failed: Option<String>,
}

impl BodyRun {
    fn is_clean(&self) -> bool {
        self.report.is_clean() && self.outside.is_none() && self.failed.is_none()
    }
}

/// The result of a pattern check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckReport {
    /// Steps executed.
    pub steps: u32,
    /// Tensors written (weights, inputs, node outputs that are not views).
    pub writes: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Reads checked (node inputs and final outputs with bytes).
    pub reads: u64,
    /// Of those, reads of a tensor that was checked whole and held, with no write touching
    /// it since: its bytes cannot have changed, so they were not read again.
    pub reads_unchanged: u64,
    /// Bytes checked.
    pub bytes_checked: u64,
    /// Reads of tensors the layout gives no bytes (skipped).
    pub unplaced_reads: u64,
    /// Reads of weights skipped ([`crate::CheckOptions::skip_weights`]).
    pub weight_reads_skipped: u64,
    /// Whether reads were sampled rather than checked whole.
    pub sampled: bool,
    /// Every clobbered tensor, once, at its first detection, in detection order.
    pub clobbers: Vec<Clobber>,
    /// Every view the check refuses, in schedule order.
    pub bad_views: Vec<BadView>,
    /// Aliases trusted, not verified, in schedule order.
    pub trusted: Vec<Trusted>,
    /// Every body run, in schedule order (the node's bodies in order), with its own report.
    pub bodies: Vec<BodyRun>,
    /// Fused kernels that need scratch ([`crate::fused_effects::needs_scratch`]) and ran
    /// with no workspace, in schedule order, with their steps.
    pub without_scratch: Vec<(NodeId, u32)>,
}

impl CheckReport {
    /// Whether no tensor was clobbered and every view holds the bytes its op selects, in
    /// the graph and in every body run.
    pub fn is_clean(&self) -> bool {
        self.clobbers.is_empty()
            && self.bad_views.is_empty()
            && self.without_scratch.is_empty()
            && self.bodies.iter().all(BodyRun::is_clean)
    }

    /// One line per clobber, then one per bad view and per fused kernel without its scratch,
    /// naming tensors and nodes by their graph
    /// names.
    pub fn render_clobbers(&self, graph: &Graph) -> Vec<String> {
        self.findings(graph)
            .into_iter()
            .map(|(line, _)| line)
            .collect()
    }

    /// The lines of [`CheckReport::render_clobbers`], each with the tensors and nodes of
    /// `graph` it is about (for a problem inside a body run: the node running the body).
    pub fn findings(&self, graph: &Graph) -> Vec<(String, Vec<AnyEntity>)> {
        let tname = |t: TensorId| {
            graph
                .tensors()
                .get(t)
                .map_or_else(|| t.to_string(), |x| format!("{t} `{}`", x.name))
        };
        let nname = |n: NodeId| {
            graph
                .nodes()
                .get(n)
                .map_or_else(|| n.to_string(), |x| format!("{n} `{}` ({})", x.name, x.op))
        };
        let clobbers = self.clobbers.iter().map(|c| {
            let when = match (c.step, c.reader) {
                (Some(s), Some(n)) => format!("step {s} ({}) reads", nname(n)),
                _ => "after the last step, graph output".to_owned(),
            };
            let whose = if c.writer == c.tensor {
                String::new()
            } else {
                format!(" (view of {})", tname(c.writer))
            };
            let cause = match c.cause {
                Cause::Overwritten { by, step: Some(s) } => {
                    format!("overwritten by {} at step {s}", tname(by))
                }
                Cause::Overwritten { by, step: None } => {
                    format!("overwritten by {} before step 0", tname(by))
                }
                Cause::Workspace { node, step } => {
                    format!(
                        "overwritten by the workspace of {} at step {step}",
                        nname(node)
                    )
                }
                Cause::NotYetWritten => "read before it was written".to_owned(),
                Cause::UpdateOrder { node } => format!(
                    "it holds another version than the graph's order gives this read (the update by {} is on the wrong side of it)",
                    nname(node)
                ),
                Cause::UpdatedUnder { node } => format!(
                    "it shares the bytes of a tensor that {} updated in place after it was made, so it holds the new values",
                    nname(node)
                ),
                Cause::Unexplained => "changed by no planned write".to_owned(),
            };
            let line = format!(
                "{when} {}{whose}: {} wrong bytes from {} offset {}; {cause}",
                tname(c.tensor),
                Grouped(c.bad_bytes),
                c.region,
                Grouped(c.first_bad)
            );
            let mut about = Entities::default();
            about.add(c.tensor).add(c.writer);
            match c.cause {
                Cause::Overwritten { by, .. } => {
                    about.add(by);
                }
                Cause::Workspace { node, .. }
                | Cause::UpdateOrder { node }
                | Cause::UpdatedUnder { node } => {
                    about.add(node);
                }
                Cause::NotYetWritten | Cause::Unexplained => {}
            }
            if let Some(n) = c.reader {
                about.add(n);
            }
            (line, about.into_vec())
        });
        let views = self.bad_views.iter().map(|v| {
            let what = match v.fault {
                ViewFault::NotAView => {
                    "is planned as a view, but the op's definition selects no byte range of an input"
                        .to_owned()
                }
                ViewFault::WrongSource { expected } => {
                    format!("is planned as a view of another input than {}", tname(expected))
                }
                ViewFault::WrongPlace {
                    expected_offset,
                    expected_bytes,
                } => format!(
                    "does not hold the bytes its op selects ({} bytes at offset {})",
                    Grouped(expected_bytes),
                    Grouped(expected_offset)
                ),
            };
            let line = format!("step {} ({}) view {} {what}", v.step, nname(v.node), tname(v.tensor));
            let mut about = Entities::default();
            about.add(v.tensor).add(v.node);
            if let ViewFault::WrongSource { expected } = v.fault {
                about.add(expected);
            }
            (line, about.into_vec())
        });
        let scratch = self.without_scratch.iter().map(|&(n, step)| {
            (
                format!(
                    "step {step} ({}) is a fused kernel that needs scratch, and the plan gives it no workspace",
                    nname(n)
                ),
                vec![AnyEntity::Node(n)],
            )
        });
        let mut lines: Vec<(String, Vec<AnyEntity>)> =
            clobbers.chain(views).chain(scratch).collect();
        for run in self.bodies.iter().filter(|r| !r.is_clean()) {
            let at = format!(
                "step {} ({}), body `{}`",
                run.step,
                nname(run.node),
                run.attr
            );
            let about = vec![AnyEntity::Node(run.node)];
            if let Some((start, end)) = run.outside {
                lines.push((
                    format!(
                        "{at}: its plan touches arena bytes {}..{}, outside the node's workspace",
                        Grouped(start),
                        Grouped(end)
                    ),
                    about.clone(),
                ));
            }
            if let Some(why) = &run.failed {
                lines.push((format!("{at}: could not be run: {why}"), about.clone()));
            }
            let body = graph
                .nodes()
                .get(run.node)
                .and_then(|n| n.bodies.iter().find(|b| b.attr == run.attr));
            if let Some(body) = body {
                for line in run.report.render_clobbers(&body.graph) {
                    lines.push((format!("{at}: {line}"), about.clone()));
                }
            }
        }
        lines
    }

    /// One line per trusted alias.
    pub fn render_trusted(&self, graph: &Graph) -> Vec<String> {
        self.trusted
            .iter()
            .map(|t| {
                let name = graph
                    .tensors()
                    .get(t.tensor)
                    .map_or("?", |x| x.name.as_str());
                let op = graph.nodes().get(t.node).map_or("?", |x| x.op.as_str());
                format!(
                    "{} `{name}` ({op}, {:?}): trusted, not verified",
                    t.tensor, t.alias
                )
            })
            .collect()
    }
}
