//! What the backward keeps and what it recomputes: the [`Checkpoint`] policies.
//!
//! - `none`: every saved tensor is kept.
//! - `cheap` (the default): the fewest bytes kept from which the backward can make again,
//!   by cheap ops, everything it reads: a minimum cut of the joint graph ([`super::cut`]), as
//!   PyTorch's min-cut partitioner chooses.
//! - checkpoints (`every:N`, named nodes, `auto`): cut positions in the forward order.
//!   What crosses a cut (made before it and read by a forward node after it, or made by the
//!   cut's node and saved) is kept, as is every saved tensor after the last cut (its
//!   backward follows at once); every other saved tensor is recomputed in the backward from
//!   the nearest kept tensors (Chen et al. 2016's segments).
//! - `auto`: if the plan without recomputation fits the budget, that; else the cuts with
//!   the fewest recomputed FLOPs that fit: on forwards of up to 64 nodes the exact search
//!   of [`super::exact`] when it proves its answer within a bound of states; otherwise the
//!   first configuration that fits from a pool of simple rules, a dynamic program's
//!   answers and the certified lower bound's configurations (see [`super::auto`] and
//!   [`super::bound`]). `auto` runs in both backward orders where the second may help (see
//!   `plan_training`) and keeps the answer with fewer FLOPs.

use memplan_ir::{IndexVec, NodeId, TensorId, TensorKind};

use super::derive::Base;
use super::{Checkpoint, TrainingOptions};
use crate::error::PlanError;
use crate::options::PlanOptions;
use crate::plan::Plan;

/// What [`choose`] decided.
#[derive(Clone, Debug)]
pub(crate) struct Choice {
    /// Per tensor: may the backward read it as it is (forward-made tensors only; others
    /// true).
    pub keep: IndexVec<TensorId, bool>,
    /// The forward nodes after which a checkpoint is set.
    pub checkpoints: Vec<String>,
    /// Whether cheap ops are recomputed (the `cheap` policy's minimum cut, under the
    /// checkpoints if any).
    pub cheap: bool,
    /// The plan of the chosen step, when the search already made it.
    pub plan: Option<Plan>,
}

/// Cheap ops: element-wise, views, transposes, casts.
pub(super) const CHEAP: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "Cast",
    "Ceil",
    "Clip",
    "Cos",
    "Div",
    "Equal",
    "Erf",
    "Exp",
    "Flatten",
    "Floor",
    "Gelu",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "IsInf",
    "IsNaN",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "Max",
    "Min",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pow",
    "Reciprocal",
    "Relu",
    "Reshape",
    "Round",
    "Sigmoid",
    "Sign",
    "Sin",
    "Slice",
    "Softplus",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Tanh",
    "Transpose",
    "Unsqueeze",
    "Where",
    "com.microsoft.Gelu",
    "com.microsoft.FastGelu",
    "com.microsoft.QuickGelu",
];

pub(super) fn all_kept(base: &Base) -> IndexVec<TensorId, bool> {
    IndexVec::from_elem(true, base.graph.tensors().len())
}

/// Decides what the backward recomputes under `options.checkpoint`.
pub(crate) fn choose(base: &Base, options: &TrainingOptions) -> Result<Choice, PlanError> {
    let plain = |keep, cheap| Choice {
        keep,
        checkpoints: Vec::new(),
        cheap,
        plan: None,
    };
    match &options.checkpoint {
        Checkpoint::None => Ok(plain(all_kept(base), false)),
        Checkpoint::Cheap => Ok(plain(super::cut::min_cut_keep(base, &options.plan), true)),
        Checkpoint::Every(n) => {
            if *n == 0 {
                return Err(PlanError::Training {
                    reason: "every:0 sets no checkpoint: give every:N with N of 1 or more"
                        .to_owned(),
                });
            }
            let cuts: Vec<u32> = (0..last_cut(base))
                .filter(|p| (p + 1) % (*n as u32) == 0)
                .collect();
            Ok(cut_choice(base, &spans(base, &options.plan), &cuts))
        }
        Checkpoint::After(names) => {
            let mut cuts = Vec::new();
            for name in names {
                let n = base
                    .graph
                    .find_node(name)
                    .filter(|n| (n.0 as usize) < base.n_forward)
                    .ok_or_else(|| PlanError::UnknownCheckpoint { name: name.clone() })?;
                cuts.push(n.0);
            }
            cuts.sort_unstable();
            cuts.dedup();
            Ok(cut_choice(base, &spans(base, &options.plan), &cuts))
        }
        Checkpoint::Auto { budget } => super::auto::auto(base, options, *budget),
    }
}

/// Cut positions run over `0..last_cut` (a cut after the loss would keep nothing).
pub(super) fn last_cut(base: &Base) -> u32 {
    u32::try_from(base.n_forward.saturating_sub(1)).unwrap_or(u32::MAX)
}

/// Per forward-made tensor: its producer's position and the last forward node reading it.
pub(super) struct Spans {
    pub prod: IndexVec<TensorId, u32>,
    pub last_read: IndexVec<TensorId, u32>,
    pub saved: IndexVec<TensorId, bool>,
    /// Forward-made tensors that stay in memory whatever the cuts: graph outputs (live to
    /// the end) and tensors computed at load from weights alone ([`Base::folded`]).
    pub pinned: IndexVec<TensorId, bool>,
    /// What the `cheap` policy keeps ([`super::cut::min_cut_keep`]): checkpoints drop more.
    pub cheap: IndexVec<TensorId, bool>,
}

pub(super) fn spans(base: &Base, options: &PlanOptions) -> Spans {
    let g = &base.graph;
    let n = g.tensors().len();
    let mut prod = IndexVec::from_elem(0, n);
    let mut last_read = IndexVec::from_elem(0, n);
    for (id, node) in g.nodes().iter_enumerated().take(base.n_forward) {
        for &y in &node.outputs {
            prod[y] = id.0;
            last_read[y] = id.0;
        }
    }
    for (id, node) in g.nodes().iter_enumerated().take(base.n_forward) {
        for x in node.present_inputs() {
            last_read[x] = last_read[x].max(id.0);
        }
    }
    let mut saved = IndexVec::from_elem(false, n);
    for &t in &base.saved {
        saved[t] = true;
    }
    let mut pinned = base.folded.clone();
    for (t, x) in g.tensors().iter_enumerated() {
        if x.kind != TensorKind::Activation {
            pinned[t] = true;
        }
    }
    Spans {
        prod,
        last_read,
        saved,
        pinned,
        cheap: super::cut::min_cut_keep(base, options),
    }
}

/// What cuts at `cuts` (sorted positions) keep (see the module docs). Every forward-made
/// tensor of a segment but the last is dropped unless it crosses the segment's end, saved
/// for the backward or not: a dropped saved tensor is recomputed from the segment's kept
/// inputs, through whatever the segment computed on the way (keeping an intermediate alive
/// for its recomputation would only move the bytes, not free them).
pub(super) fn keep_for(base: &Base, spans: &Spans, cuts: &[u32]) -> IndexVec<TensorId, bool> {
    let mut keep = spans.cheap.clone();
    let last = cuts.last().copied();
    for (t, made) in base.forward_made.iter_enumerated() {
        if !made || spans.pinned[t] {
            continue;
        }
        let p = spans.prod[t];
        if last.is_none_or(|l| p > l) {
            continue;
        }
        let i = cuts.partition_point(|&c| c < p);
        let crosses = cuts
            .get(i)
            .is_some_and(|&c| c < spans.last_read[t] || c == p);
        keep[t] = crosses;
    }
    keep
}

pub(super) fn cut_choice(base: &Base, spans: &Spans, cuts: &[u32]) -> Choice {
    Choice {
        keep: keep_for(base, spans, cuts),
        checkpoints: cuts
            .iter()
            .map(|&c| base.graph.node(NodeId(c)).name.clone())
            .collect(),
        cheap: true,
        plan: None,
    }
}
