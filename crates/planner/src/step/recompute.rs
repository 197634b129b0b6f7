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
//!   the fewest recomputed FLOPs that fit. The search is a dynamic program over candidate
//!   cut positions (Revolve's and Checkmate's problem restricted to segments): a segment
//!   `(a, b]` costs the FLOPs of recomputing it, and the live bytes at the steps of its
//!   forward and backward are what the cuts before `a` keep plus what the segment itself
//!   needs, both measured on the real step graph (views, in-place writes and all). On a
//!   chain this decomposition is exact, so the answer is the optimum; on other graphs it is
//!   checked by planning, the budget of the search tightened by the excess until the plan
//!   fits, and compared with `every:N` checkpointing for every `N`. It runs twice, the
//!   better answer kept: over the positions with the fewest crossing bytes (where a segment
//!   is cheap to close), then over those and the positions whose crossing tensors cost the
//!   most FLOPs to remake per byte (right after a transformer's Q, K and V projections).

use memplan_ir::{Bindings, IndexVec, NodeId, TensorId, TensorKind};

use super::derive::{Base, Derived};
use super::{Checkpoint, TrainingOptions};
use crate::error::PlanError;
use crate::plan::Plan;
use crate::planner::PlanContext;

/// What [`choose`] decided.
#[derive(Clone, Debug)]
pub(crate) struct Choice {
    /// Per tensor: may the backward read it as it is (forward-made tensors only; others
    /// true).
    pub keep: IndexVec<TensorId, bool>,
    /// The forward nodes after which a checkpoint is set.
    pub checkpoints: Vec<String>,
    /// The plan of the chosen step, when the search already made it.
    pub plan: Option<Plan>,
}

/// Cheap ops: element-wise, views, transposes, casts.
const CHEAP: &[&str] = &[
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

fn all_kept(base: &Base) -> IndexVec<TensorId, bool> {
    IndexVec::from_elem(true, base.graph.tensors().len())
}

/// Decides what the backward recomputes under `options.checkpoint`.
pub(crate) fn choose(base: &Base, options: &TrainingOptions) -> Result<Choice, PlanError> {
    let plain = |keep| Choice {
        keep,
        checkpoints: Vec::new(),
        plan: None,
    };
    match &options.checkpoint {
        Checkpoint::None => Ok(plain(all_kept(base))),
        Checkpoint::Cheap => Ok(plain(super::cut::min_cut_keep(base, &options.plan))),
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
            Ok(cut_choice(base, &cuts))
        }
        Checkpoint::After(names) => {
            let mut cuts = Vec::new();
            for name in names {
                let n = base
                    .graph
                    .find_node(name)
                    .filter(|n| (n.0 as usize) < base.n_forward)
                    .ok_or_else(|| PlanError::Training {
                        reason: format!("--checkpoint names `{name}`, which is no forward node"),
                    })?;
                cuts.push(n.0);
            }
            cuts.sort_unstable();
            cuts.dedup();
            Ok(cut_choice(base, &cuts))
        }
        Checkpoint::Auto { budget } => auto(base, options, *budget),
    }
}

/// Cut positions run over `0..last_cut` (a cut after the loss would keep nothing).
fn last_cut(base: &Base) -> u32 {
    u32::try_from(base.n_forward.saturating_sub(1)).unwrap_or(u32::MAX)
}

/// Per forward-made tensor: its producer's position and the last forward node reading it.
struct Spans {
    prod: IndexVec<TensorId, u32>,
    last_read: IndexVec<TensorId, u32>,
    saved: IndexVec<TensorId, bool>,
    /// Forward-made tensors that stay in memory whatever the cuts: graph outputs (live to
    /// the end) and tensors computed at load from weights alone ([`Base::folded`]).
    pinned: IndexVec<TensorId, bool>,
}

fn spans(base: &Base) -> Spans {
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
    }
}

/// What cuts at `cuts` (sorted positions) keep (see the module docs). Every forward-made
/// tensor of a segment but the last is dropped unless it crosses the segment's end, saved
/// for the backward or not: a dropped saved tensor is recomputed from the segment's kept
/// inputs, through whatever the segment computed on the way (keeping an intermediate alive
/// for its recomputation would only move the bytes, not free them).
fn keep_for(base: &Base, spans: &Spans, cuts: &[u32]) -> IndexVec<TensorId, bool> {
    let mut keep = all_kept(base);
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

fn cut_choice(base: &Base, cuts: &[u32]) -> Choice {
    let spans = spans(base);
    Choice {
        keep: keep_for(base, &spans, cuts),
        checkpoints: cuts
            .iter()
            .map(|&c| base.graph.node(NodeId(c)).name.clone())
            .collect(),
        plan: None,
    }
}

/// Per cut position `c` in `0..last_cut`: the bytes of the tensors crossing it (made at or
/// before it and read by a forward node after it, or made by its node and saved), and the
/// FLOPs keeping them saves: each tensor's [`remake_flops`].
fn crossings(base: &Base, spans: &Spans, bindings: &Bindings) -> Vec<(u64, u64)> {
    let g = &base.graph;
    let n = last_cut(base) as usize;
    let remake = remake_flops(base, spans, bindings);
    // Tensor t crosses every c in [prod, end): c < last_read, or c == prod when saved.
    let mut diff = vec![(0i128, 0i128); n + 1];
    for (t, made) in base.forward_made.iter_enumerated() {
        if !made || g.tensor(t).kind != TensorKind::Activation {
            continue;
        }
        let p = spans.prod[t] as usize;
        let end = (spans.last_read[t] as usize)
            .max(if spans.saved[t] { p + 1 } else { p })
            .min(n);
        if p >= end {
            continue;
        }
        let bytes = i128::from(g.tensor(t).bytes(bindings).unwrap_or(0));
        let flops = i128::from(remake[t]);
        diff[p].0 += bytes;
        diff[p].1 += flops;
        diff[end].0 -= bytes;
        diff[end].1 -= flops;
    }
    let (mut bytes, mut flops) = (0i128, 0i128);
    diff.iter()
        .take(n)
        .map(|&(b, f)| {
            bytes += b;
            flops += f;
            let clamp = |x: i128| u64::try_from(x.max(0)).unwrap_or(u64::MAX);
            (clamp(bytes), clamp(flops))
        })
        .collect()
}

/// Per tensor: the FLOPs of remaking it, its producer's, followed back through cheap ops
/// ([`CHEAP`]) with one input that a segment would recompute (a bias Add, a reshape, a
/// transpose, an activation) to the op that did the work: Q, K and V after their
/// projections' bias, reshape and transpose cost their projection's FLOPs.
fn remake_flops(base: &Base, spans: &Spans, bindings: &Bindings) -> IndexVec<TensorId, u64> {
    let g = &base.graph;
    let mut remake: IndexVec<TensorId, u64> = IndexVec::from_elem(0, g.tensors().len());
    for node in g.nodes().iter().take(base.n_forward) {
        let own = super::flops::node_flops(g, node, bindings);
        let mut made = node
            .present_inputs()
            .filter(|&x| base.forward_made[x] && !spans.pinned[x]);
        let upstream = match (made.next(), made.next()) {
            (Some(x), None) if CHEAP.contains(&node.op.as_str()) => remake[x],
            _ => 0,
        };
        for &y in &node.outputs {
            remake[y] = own.saturating_add(upstream);
        }
    }
    remake
}

/// The most candidate cut positions chosen for their few crossing bytes.
const MAX_CANDIDATES: usize = 40;

/// The most further candidates chosen for the FLOPs their crossing tensors would cost to
/// remake, per crossing byte.
const MAX_REMAKE_CANDIDATES: usize = 12;

/// Candidate cut positions, with their crossing bytes: every position on small graphs; on
/// larger ones the [`MAX_CANDIDATES`] positions with the least crossing bytes, spread over
/// the graph (where a segment is cheap to close: a residual stream alone crosses), and the
/// `remake_most` others whose crossing tensors cost the most FLOPs to remake
/// per byte, spread the same way (where keeping what crosses saves recomputing expensive
/// ops: right after attention's Q, K and V projections, or an MLP's first layer). Without
/// the second kind every candidate of a transformer sits on the residual stream, and each
/// segment recomputes all of its block's projections.
fn candidates(
    base: &Base,
    spans: &Spans,
    bindings: &Bindings,
    remake_most: usize,
) -> Vec<(u32, u64)> {
    let all: Vec<(u32, u64, u64)> = crossings(base, spans, bindings)
        .into_iter()
        .zip(0u32..)
        .map(|((bytes, flops), c)| (c, bytes, flops))
        .collect();
    if all.len() <= MAX_CANDIDATES + remake_most {
        return all.into_iter().map(|(c, b, _)| (c, b)).collect();
    }
    let gap = (all.len() / (2 * MAX_CANDIDATES)).max(1) as u32;
    let mut chosen: Vec<(u32, u64)> = Vec::new();
    let pick = |order: &[(u32, u64, u64)], most: usize, chosen: &mut Vec<(u32, u64)>| {
        let mut picked = 0;
        for &(c, b, _) in order {
            if picked >= most {
                break;
            }
            if chosen.iter().all(|&(d, _)| d.abs_diff(c) >= gap) {
                chosen.push((c, b));
                picked += 1;
            }
        }
    };
    let mut by_bytes = all.clone();
    by_bytes.sort_by_key(|&(c, b, _)| (b, c));
    pick(&by_bytes, MAX_CANDIDATES, &mut chosen);
    let mut by_remake: Vec<(u32, u64, u64)> = all.into_iter().filter(|x| x.2 > 0).collect();
    // Remake FLOPs per crossing byte, most first: f1 / b1 > f2 / b2 as f1 * b2 > f2 * b1.
    by_remake.sort_by(|x, y| {
        let lhs = u128::from(y.2) * u128::from(x.1.max(1));
        let rhs = u128::from(x.2) * u128::from(y.1.max(1));
        lhs.cmp(&rhs).then(x.0.cmp(&y.0))
    });
    pick(&by_remake, remake_most, &mut chosen);
    chosen.sort_unstable();
    chosen
}

/// The live-bytes profile of a materialized step and its total device bytes besides the
/// arena.
fn profile(
    d: &Derived,
    options: &TrainingOptions,
    work: &mut PlanContext,
) -> Result<Vec<u64>, PlanError> {
    crate::planner::step_profile(&d.graph, &options.plan, work)
}

fn recompute_flops(d: &Derived, options: &TrainingOptions) -> u64 {
    d.recompute
        .iter()
        .map(|&n| super::flops::node_flops(&d.graph, d.graph.node(n), &options.plan.bindings))
        .fold(0, u64::saturating_add)
}

/// Bytes of the graph inputs and outputs the options leave to the caller.
fn caller_bytes(d: &Derived, options: &TrainingOptions) -> u64 {
    d.graph
        .tensors()
        .iter()
        .filter(|t| {
            (t.kind == TensorKind::Input && !options.plan.inputs_in_arena)
                || (t.kind == TensorKind::Output && !options.plan.outputs_in_arena)
        })
        .filter_map(|t| t.bytes(&options.plan.bindings).ok())
        .fold(0, u64::saturating_add)
}

/// Total device bytes of a plan: arena, persistent region and caller-owned inputs and
/// outputs ([`Plan::device_bytes`]); `u64::MAX`, which fits no budget, when it has no
/// answer.
pub(crate) fn total_bytes(d: &Derived, plan: &Plan) -> u64 {
    plan.device_bytes(&d.graph).map_or(u64::MAX, |b| b.total)
}

/// One segment measurement: the most live bytes at its steps less what earlier cuts keep,
/// and its recompute FLOPs.
#[derive(Clone, Copy, Debug)]
struct Segment {
    need: u64,
    flops: u64,
}

/// Checkpoint intervals the search compares itself with: `every:N` for `N` about the square
/// root of the forward's length (Chen et al.'s √n) and for powers of two and their
/// one-and-a-half multiples.
fn baselines(n: u32) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    let root = f64::from(n).sqrt().round() as u32;
    out.push(root.max(1));
    let mut k = 1u32;
    while k < n {
        out.push(k);
        out.push(k.saturating_add(k / 2).max(1));
        k = k.saturating_mul(2);
    }
    out.sort_unstable();
    out.dedup();
    out.retain(|&e| e >= 1 && e <= n.max(1));
    out
}

/// The most live bytes of a step, measured (views and in-place writes, no placement).
fn measured_peak(
    d: &Derived,
    options: &TrainingOptions,
    work: &mut PlanContext,
) -> Result<u64, PlanError> {
    Ok(profile(d, options, work)?.into_iter().max().unwrap_or(0))
}

/// The search of `auto` (see the module docs).
fn auto(base: &Base, options: &TrainingOptions, budget: u64) -> Result<Choice, PlanError> {
    // The planner's working memory, reused by every measurement and plan of the search.
    let mut work = PlanContext::new();
    let none = all_kept(base);
    let d = base.materialize(&none)?;
    let caller = caller_bytes(&d, options);
    // Everything but the arena: the persistent region and the caller's inputs and outputs.
    let outside = crate::planner::persistent_bytes(&d.graph, &options.plan)?.saturating_add(caller);
    let none_peak = measured_peak(&d, options, &mut work)?;
    let mut total = none_peak.saturating_add(outside);
    if total <= budget {
        let plan = work.plan(&d.graph, &options.plan)?;
        total = total_bytes(&d, &plan);
        if total <= budget {
            return Ok(Choice {
                keep: none,
                checkpoints: Vec::new(),
                plan: Some(plan),
            });
        }
    }
    let spans = spans(base);
    // Two searches, each keeping what the other cannot beat: over the positions with the
    // fewest crossing bytes, then over those and the positions whose crossing tensors are
    // the most expensive to remake. Neither dominates: the second reaches cuts right after
    // a transformer's projections, the first measures its segments at a finer grain.
    let mut best: Option<(u64, Choice)> = None;
    let mut least: Option<(u64, usize)> = None;
    let mut searched: Vec<Vec<(u32, u64)>> = Vec::new();
    for remake_most in [0, MAX_REMAKE_CANDIDATES] {
        let cands = candidates(base, &spans, &options.plan.bindings, remake_most);
        if searched.contains(&cands) {
            continue;
        }
        let cx = Context {
            base,
            options,
            budget,
            outside,
            spans: &spans,
            cands: &cands,
            baselines: searched.is_empty(),
        };
        match search(&cx, total, best.as_ref().map(|b| b.0), &mut work)? {
            Outcome::Fits(flops, choice) => best = Some((flops, *choice)),
            Outcome::Least(t, cuts) => {
                if least.is_none_or(|x| t < x.0) {
                    least = Some((t, cuts));
                }
            }
        }
        searched.push(cands);
    }
    if let Some((_, choice)) = best {
        return Ok(choice);
    }
    let least = match least {
        Some(l) if l.0 != u64::MAX => l,
        _ => {
            let plan = work.plan(&d.graph, &options.plan)?;
            (total_bytes(&d, &plan), 0)
        }
    };
    Err(PlanError::BudgetTooSmall {
        budget,
        minimum: least.0,
        checkpoints: least.1,
    })
}

/// What one search of [`auto`] works with.
struct Context<'a> {
    base: &'a Base,
    options: &'a TrainingOptions,
    budget: u64,
    /// The bytes outside the arena.
    outside: u64,
    spans: &'a Spans,
    /// Candidate cut positions and their crossing bytes.
    cands: &'a [(u32, u64)],
    /// Whether to try `every:N` for the [`baselines`] too (the first search does).
    baselines: bool,
}

/// What one [`search`] found.
enum Outcome {
    /// The choice with the fewest recomputed FLOPs that fits, and those FLOPs.
    Fits(u64, Box<Choice>),
    /// Nothing that fits: the least total found and its number of cuts (`u64::MAX` when it
    /// planned nothing).
    Least(u64, usize),
}

/// One search over the candidates of `cx`: [`Outcome::Fits`] only for a choice that
/// recomputes fewer FLOPs than `beat`. `total` is the step's modelled total without
/// recomputation.
fn search(
    cx: &Context<'_>,
    total: u64,
    beat: Option<u64>,
    work: &mut PlanContext,
) -> Result<Outcome, PlanError> {
    let Context {
        base,
        options,
        budget,
        outside,
        spans,
        cands,
        baselines: _,
    } = *cx;
    let m = cands.len();
    // Index 0 is the start, 1..=m the candidates, m + 1 the end.
    let keep_of = |i: usize| if i == 0 || i > m { 0 } else { cands[i - 1].1 };
    let pos_of = |i: usize| {
        if i == 0 {
            None
        } else {
            cands.get(i - 1).map(|c| c.0)
        }
    };
    let span = if m <= 24 { m + 1 } else { 12 };
    // The measured configurations: every `d_gap`-th candidate cut, from each offset.
    let configs: Vec<Vec<usize>> = (1..=span)
        .flat_map(|d_gap| {
            (0..d_gap).map(move |offset| (1..=m).filter(|i| (i - 1) % d_gap == offset).collect())
        })
        .collect();
    let measured = measure_all(cx, &configs, measure_threads())?;
    let mut seg: Vec<Vec<Option<Segment>>> = vec![vec![None; m + 2]; m + 2];
    let mut best_seen: Option<(u64, Vec<u32>)> = None;
    for (idx, costs) in configs.iter().zip(measured) {
        let mut bounds = vec![0usize];
        bounds.extend(idx.iter().copied());
        bounds.push(m + 1);
        record(&bounds, &costs, &keep_of, &mut seg);
        if best_seen.as_ref().is_none_or(|(p, _)| costs.peak < *p) {
            let cuts: Vec<u32> = idx.iter().filter_map(|&i| pos_of(i)).collect();
            best_seen = Some((costs.peak, cuts));
        }
    }
    // A choice that fits: its recomputed FLOPs, cuts and plan.
    let mut found: Option<(u64, Vec<u32>, Plan)> = None;
    let mut try_cuts = |cuts: Vec<u32>,
                        found: &mut Option<(u64, Vec<u32>, Plan)>,
                        best_seen: &mut Option<(u64, Vec<u32>)>|
     -> Result<Option<u64>, PlanError> {
        let derived = base.materialize(&keep_for(base, spans, &cuts))?;
        let flops = recompute_flops(&derived, options);
        if found.as_ref().is_some_and(|f| f.0 <= flops) || beat.is_some_and(|b| b <= flops) {
            return Ok(None);
        }
        let peak = measured_peak(&derived, options, work)?;
        if best_seen.as_ref().is_none_or(|(p, _)| peak < *p) {
            *best_seen = Some((peak, cuts.clone()));
        }
        // The measured peak is the arena's lower bound: plan only what may fit.
        let over = peak.saturating_add(outside).saturating_sub(budget);
        if over > 0 {
            return Ok(Some(over));
        }
        let plan = work.plan(&derived.graph, &options.plan)?;
        let t = total_bytes(&derived, &plan);
        if t <= budget {
            *found = Some((flops, cuts, plan));
            Ok(Some(0))
        } else {
            Ok(Some(t - budget))
        }
    };
    let mut arena_budget = budget.saturating_sub(outside);
    for _ in 0..8 {
        let Some(cuts) = dp(&seg, m, arena_budget, &keep_of, &pos_of) else {
            break;
        };
        match try_cuts(cuts, &mut found, &mut best_seen)? {
            Some(0) | None => break,
            Some(over) => {
                arena_budget = arena_budget.saturating_sub(over.max(options.plan.alignment));
            }
        }
    }
    // Checkpoints every N forward nodes: the search must do no worse.
    let n = last_cut(base);
    let every_n = if cx.baselines {
        baselines(n)
    } else {
        Vec::new()
    };
    for every in every_n {
        let cuts: Vec<u32> = (0..n).filter(|p| (p + 1) % every == 0).collect();
        try_cuts(cuts, &mut found, &mut best_seen)?;
    }
    if let Some((flops, cuts, plan)) = found {
        let mut c = cut_choice(base, &cuts);
        c.plan = Some(plan);
        return Ok(Outcome::Fits(flops, Box::new(c)));
    }
    // The least memory found: the cuts whose modelled peak is least (a bisection on the
    // search's budget), and the least measured configuration, each planned.
    let mut tries: Vec<Vec<u32>> = Vec::new();
    let (mut lo, mut hi) = (0u64, budget.max(1).saturating_mul(4).max(total));
    if dp(&seg, m, hi, &keep_of, &pos_of).is_some() {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if dp(&seg, m, mid, &keep_of, &pos_of).is_some() {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if let Some(cuts) = dp(&seg, m, hi, &keep_of, &pos_of) {
            tries.push(cuts);
        }
    }
    if let Some((_, cuts)) = best_seen {
        tries.push(cuts);
    }
    let mut least = (u64::MAX, 0usize);
    let mut fits: Option<(u64, Vec<u32>, Plan)> = None;
    for cuts in tries {
        let derived = base.materialize(&keep_for(base, spans, &cuts))?;
        let plan = work.plan(&derived.graph, &options.plan)?;
        let t = total_bytes(&derived, &plan);
        if t < least.0 {
            least = (t, cuts.len());
        }
        let flops = recompute_flops(&derived, options);
        if t <= budget
            && fits.as_ref().is_none_or(|f| flops < f.0)
            && beat.is_none_or(|b| flops < b)
        {
            fits = Some((flops, cuts, plan));
        }
    }
    // The least-memory choice may fit where the search's model said it would not.
    if let Some((flops, cuts, plan)) = fits {
        let mut c = cut_choice(base, &cuts);
        c.plan = Some(plan);
        return Ok(Outcome::Fits(flops, Box::new(c)));
    }
    Ok(Outcome::Least(least.0, least.1))
}

/// The most threads that measure configurations at once.
const MAX_MEASURE_THREADS: usize = 8;

/// The threads [`measure_all`] uses: the machine's, up to [`MAX_MEASURE_THREADS`].
fn measure_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_MEASURE_THREADS)
}

/// What one measured configuration shows: per segment (between consecutive bounds), the
/// most live bytes at its steps and the FLOPs recomputed in it; and the step's peak.
struct Costs {
    need: Vec<u64>,
    flops: Vec<u64>,
    peak: u64,
}

/// Measures each configuration (candidate indices cut, ascending) on the real step, on up
/// to `threads` threads. Each configuration is measured alone, so the answer does not depend
/// on `threads`; it is in the order of `configs`.
fn measure_all(
    cx: &Context<'_>,
    configs: &[Vec<usize>],
    threads: usize,
) -> Result<Vec<Costs>, PlanError> {
    let one = |idx: &[usize], work: &mut PlanContext| -> Result<Costs, PlanError> {
        let cuts: Vec<u32> = idx.iter().map(|&i| cx.cands[i - 1].0).collect();
        let derived = cx.base.materialize(&keep_for(cx.base, cx.spans, &cuts))?;
        let prof = profile(&derived, cx.options, work)?;
        Ok(costs(&derived, &prof, idx, cx.cands, cx.options))
    };
    let threads = threads.clamp(1, configs.len().max(1));
    if threads == 1 {
        let mut work = PlanContext::new();
        return configs.iter().map(|c| one(c, &mut work)).collect();
    }
    let mut out: Vec<Option<Result<Costs, PlanError>>> = (0..configs.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let one = &one;
                scope.spawn(move || {
                    let mut work = PlanContext::new();
                    configs
                        .iter()
                        .enumerate()
                        .skip(t)
                        .step_by(threads)
                        .map(|(i, c)| (i, one(c, &mut work)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(done) => {
                    for (i, r) in done {
                        out[i] = Some(r);
                    }
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    out.into_iter()
        .map(|r| r.expect("every configuration is measured by one thread"))
        .collect()
}

/// The [`Costs`] of one configuration: `idx` are the candidate indices cut (1-based).
fn costs(
    derived: &Derived,
    prof: &[u64],
    idx: &[usize],
    cands: &[(u32, u64)],
    options: &TrainingOptions,
) -> Costs {
    let k = idx.len() + 1;
    let mut need = vec![0u64; k];
    let mut flops = vec![0u64; k];
    // The segment of forward position x: the first whose ending cut is at or after x.
    let segment_of = |x: u32| -> usize { idx.partition_point(|&i| cands[i - 1].0 < x) };
    let mut is_recompute = vec![false; derived.graph.nodes().len()];
    for &n in &derived.recompute {
        is_recompute[n.0 as usize] = true;
    }
    for (n, &x) in derived.pos.iter_enumerated() {
        let s = segment_of(x);
        if let Some(&live) = prof.get(n.0 as usize) {
            need[s] = need[s].max(live);
        }
        if is_recompute[n.0 as usize] {
            flops[s] = flops[s].saturating_add(super::flops::node_flops(
                &derived.graph,
                derived.graph.node(n),
                &options.plan.bindings,
            ));
        }
    }
    Costs {
        need,
        flops,
        peak: prof.iter().copied().max().unwrap_or(0),
    }
}

/// Records the segments one measured configuration shows: `bounds` are candidate indices
/// (0 the start, m + 1 the end), consecutive ones a segment.
fn record(
    bounds: &[usize],
    costs: &Costs,
    keep_of: &dyn Fn(usize) -> u64,
    seg: &mut [Vec<Option<Segment>>],
) {
    let mut before: u64 = 0;
    for s in 0..bounds.len() - 1 {
        let (a, b) = (bounds[s], bounds[s + 1]);
        if seg[a][b].is_none() {
            seg[a][b] = Some(Segment {
                need: costs.need[s].saturating_sub(before),
                flops: costs.flops[s],
            });
        }
        before = before.saturating_add(keep_of(a));
    }
}

/// The cuts with the fewest recomputed FLOPs whose modelled peak fits `budget`: a dynamic
/// program over candidate indices keeping, at each, the Pareto front of (bytes kept by the
/// cuts so far, FLOPs).
fn dp(
    seg: &[Vec<Option<Segment>>],
    m: usize,
    budget: u64,
    keep_of: &dyn Fn(usize) -> u64,
    pos_of: &dyn Fn(usize) -> Option<u32>,
) -> Option<Vec<u32>> {
    // Per index: (kept so far excluding the index's own, flops, parent index, parent slot).
    let mut fronts: Vec<Vec<(u64, u64, usize, usize)>> = vec![Vec::new(); m + 2];
    fronts[0].push((0, 0, usize::MAX, usize::MAX));
    for b in 1..=m + 1 {
        let mut next: Vec<(u64, u64, usize, usize)> = Vec::new();
        for a in 0..b {
            let Some(s) = seg[a][b] else { continue };
            for (slot, &(kept, flops, _, _)) in fronts[a].iter().enumerate() {
                if kept.saturating_add(s.need) <= budget {
                    next.push((
                        kept.saturating_add(keep_of(a)),
                        flops.saturating_add(s.flops),
                        a,
                        slot,
                    ));
                }
            }
        }
        // Pareto: kept ascending, flops strictly descending.
        next.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
        let mut front: Vec<(u64, u64, usize, usize)> = Vec::new();
        for e in next {
            if front.last().is_none_or(|l| e.1 < l.1) {
                front.push(e);
            }
        }
        fronts[b] = front;
    }
    let end = &fronts[m + 1];
    let (mut at, mut slot) = {
        let best = end
            .iter()
            .enumerate()
            .min_by(|x, y| x.1.1.cmp(&y.1.1).then(x.1.0.cmp(&y.1.0)))?;
        (m + 1, best.0)
    };
    let mut cuts = Vec::new();
    while at != 0 {
        let (_, _, pa, ps) = fronts[at][slot];
        if at <= m
            && let Some(p) = pos_of(at)
        {
            cuts.push(p);
        }
        at = pa;
        slot = ps;
        if at == usize::MAX {
            break;
        }
    }
    cuts.reverse();
    Some(cuts)
}

#[cfg(test)]
mod tests {
    use memplan_ir::{DType, GraphBuilder};

    use super::*;
    use crate::step::Loss;

    /// A chain of MatMuls with a Relu and a residual Add per block: 60 forward positions,
    /// more than the candidates, so both kinds of candidate are chosen.
    fn blocks() -> memplan_ir::Graph {
        let mut b = GraphBuilder::new("blocks");
        let mut x = b.input("x", DType::F32, [8, 64]);
        for j in 0..20 {
            let w = b.weight(format!("w{j}"), DType::F32, [64, 64]);
            let y = b.op("MatMul", &[x, w], DType::F32, [8, 64]);
            let r = b.op("Relu", &[y], DType::F32, [8, 64]);
            x = b.op("Add", &[x, r], DType::F32, [8, 64]);
        }
        b.mark_output(x);
        b.build().unwrap()
    }

    #[test]
    fn measurements_do_not_depend_on_the_threads() {
        let options = TrainingOptions {
            loss: Loss::None,
            ..TrainingOptions::default()
        };
        let base = Base::new(&blocks(), &options).unwrap();
        let spans = spans(&base);
        let cands = candidates(&base, &spans, &options.plan.bindings, MAX_REMAKE_CANDIDATES);
        let cx = Context {
            base: &base,
            options: &options,
            budget: u64::MAX,
            outside: 0,
            spans: &spans,
            cands: &cands,
            baselines: true,
        };
        let m = cands.len();
        let configs: Vec<Vec<usize>> = (1..=5)
            .flat_map(|d| (0..d).map(move |o| (1..=m).filter(|i| (i - 1) % d == o).collect()))
            .collect();
        let one = measure_all(&cx, &configs, 1).unwrap();
        let three = measure_all(&cx, &configs, 3).unwrap();
        assert_eq!(one.len(), configs.len());
        let key = |c: &Costs| (c.need.clone(), c.flops.clone(), c.peak);
        for (a, b) in one.iter().zip(&three) {
            assert_eq!(key(a), key(b));
        }
        // Cutting more recomputes less: all cut (d = 1) recomputes nothing, and one in five
        // recomputes something.
        assert_eq!(one[0].flops.iter().sum::<u64>(), 0);
        assert!(one.last().unwrap().flops.iter().sum::<u64>() > 0);
    }
}
