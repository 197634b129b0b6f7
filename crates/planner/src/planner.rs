//! The graph planner: sequences the phases, nothing else.
//!
//! 1. validate the graph; compute sizes and [`regions`](crate::regions) (bytes, residence,
//!    alignment), each node's memory semantics and the [`workspace`](crate::workspace) of
//!    each node with bodies (by planning the bodies), once;
//! 2. [`ordering`](crate::ordering): choose the schedule (given, or memory-aware);
//! 3. [`liveness`](crate::liveness): lifetimes over that schedule;
//! 4. [`aliasing`](crate::aliasing): views and in-place writes group tensors into storages;
//! 5. [`placement`](crate::placement): the arena engine places storages, weights get their
//!    own region.
//!
//! The result is deterministic: no phase iterates a hash map into its output, and every
//! search is bounded by counts, not by time (see [`crate::PlanOptions`]).

use std::cell::{OnceCell, RefCell, RefMut};

use memplan_ir::{Bindings, Graph, IndexVec, MemorySemantics, NodeId, SymbolId, TensorId};
use memplan_packing::Solver;

use crate::aliasing::{AliasPolicy, Aliases, ConcatParts};
use crate::bounded::Varying;
use crate::concat;
use crate::error::{PlanError, ShapeProblem};
use crate::liveness::{Lifetimes, check_schedule};
use crate::mutation;
use crate::options::{PlanOptions, ScheduleMode};
use crate::ordering::{self, deps, model::Model};
use crate::placement::{Placed, Storages, naive_bytes, place, place_weights};
use crate::plan::{
    AliasKind, BodyPlan, OrderCandidate, Plan, PlanSettings, PlanStats, ScheduleChoice,
};
use crate::regions::Regions;
use crate::workspace::{Workspaces, workspace_sizes};

/// The planner's working memory, kept from one plan to the next (regalloc2's `Ctx`): the
/// vectors of one analysis (lifetimes, aliases, storages), which concat elision and the
/// memory-aware order refill up to thousands of times per plan, and the packing engine's
/// [`Solver`]. Everything is cleared and refilled, not reallocated; nothing a plan returns
/// depends on what an earlier one left behind. [`plan_graph`] uses a fresh one; a caller
/// that plans many times (`memplan fit`, `memplan compare`) keeps one and calls
/// [`PlanContext::plan`].
#[derive(Debug, Default)]
pub struct PlanContext {
    lifetimes: Lifetimes,
    aliases: Aliases,
    storages: Storages,
    solver: Solver,
}

impl PlanContext {
    /// A context with no vectors allocated yet.
    pub fn new() -> PlanContext {
        PlanContext::default()
    }

    /// [`plan_graph`], in this context's working memory.
    pub fn plan(&mut self, graph: &Graph, options: &PlanOptions) -> Result<Plan, PlanError> {
        if needs_fusing(graph, options) {
            graph.validate().map_err(PlanError::Invalid)?;
            // Where no pattern matches, the graph is planned as it is. Either way it is
            // validated once: the rewrite of a valid graph is valid (it keeps a subset of
            // the tensors as they were, names its nodes apart and places each fused node
            // after what it reads), which debug builds check.
            return match crate::fuse::fuse_changes(graph, options, false)? {
                Some(fused) => {
                    debug_assert!(
                        fused.graph.validate().is_ok(),
                        "the fused graph of a valid graph is valid"
                    );
                    // The fused graph is this call's own: its errors carry it.
                    self.plan_checked(&fused.graph, options, true)
                        .map_err(PlanError::in_graph(&fused.graph))
                }
                None => self.plan_checked(graph, options, true),
            };
        }
        self.plan_as_given(graph, options)
    }

    /// Plans `graph` as it is (fused already, if `options.fuse` asks for fusions).
    pub(crate) fn plan_as_given(
        &mut self,
        graph: &Graph,
        options: &PlanOptions,
    ) -> Result<Plan, PlanError> {
        self.plan_checked(graph, options, false)
    }

    /// [`PlanContext::plan_as_given`], validating `graph` first unless `valid` (it was just
    /// validated).
    fn plan_checked(
        &mut self,
        graph: &Graph,
        options: &PlanOptions,
        valid: bool,
    ) -> Result<Plan, PlanError> {
        let options = &*resolved(graph, options)?;
        let ctx = Context::new_checked(graph, options, self, valid)?;
        let given: Vec<NodeId> = graph.nodes().iter_enumerated().map(|(n, _)| n).collect();
        let model = ctx.model()?;
        let (schedule, choice, runners_up) = ordering::choose(
            options.schedule,
            given,
            (options.schedule == ScheduleMode::Memory).then_some(&model),
            &options.ordering,
            &mut |o| ctx.peak(o),
        )?;
        ctx.finish(schedule, choice, &runners_up, &model)
    }
}

/// What every phase needs about the graph, computed once, and the working memory its
/// analyses run in.
struct Context<'a> {
    graph: &'a Graph,
    /// The caller's options, with the broadcast symbols its bindings decide resolved.
    options: &'a PlanOptions,
    regions: Regions,
    semantics: IndexVec<NodeId, Vec<MemorySemantics>>,
    /// Workspace bytes of each node (0 without bodies).
    workspace: IndexVec<NodeId, u64>,
    /// The plans of each node's bodies, which its workspace carries.
    body_plans: IndexVec<NodeId, Vec<BodyPlan>>,
    /// The tensors that vary with a bounded symbol (see [`crate::bounded`]).
    varying: Varying,
    /// The tensors some node writes in place (see [`crate::mutation`]).
    mutated: IndexVec<TensorId, bool>,
    /// Who makes and who reads each tensor, for concat elision's candidates: made at the
    /// first elision, then kept for every order measured.
    links: OnceCell<concat::Links>,
    /// Where analyses run: one at a time, each refilling the vectors of the last.
    work: RefCell<&'a mut PlanContext>,
}

impl<'a> Context<'a> {
    fn new(
        graph: &'a Graph,
        options: &'a PlanOptions,
        work: &'a mut PlanContext,
    ) -> Result<Context<'a>, PlanError> {
        Context::new_checked(graph, options, work, false)
    }

    /// [`Context::new`], validating `graph` unless `valid` (the caller just did).
    fn new_checked(
        graph: &'a Graph,
        options: &'a PlanOptions,
        work: &'a mut PlanContext,
        valid: bool,
    ) -> Result<Context<'a>, PlanError> {
        if !valid {
            graph.validate().map_err(PlanError::Invalid)?;
        }
        check_shapes(graph, options)?;
        let regions = Regions::new(graph, options)?;
        let varying = Varying::new(graph, &options.bounded)?;
        let mut semantics = graph
            .nodes()
            .iter()
            .map(|node| options.op_table.semantics(graph, node, &options.bindings))
            .collect();
        varying.restrict(graph, &mut semantics);
        let mutated = mutation::mutated(graph, &options.op_table);
        mutation::unshare(graph, &mutated, &mut semantics);
        let Workspaces {
            bytes: workspace,
            bodies: body_plans,
        } = workspace_sizes(graph, options)?;
        Ok(Context {
            graph,
            options,
            regions,
            semantics,
            workspace,
            body_plans,
            varying,
            mutated,
            links: OnceCell::new(),
            work: RefCell::new(work),
        })
    }

    fn policy(&self) -> AliasPolicy {
        AliasPolicy {
            views: self.options.views,
            inplace: self.options.inplace,
            inplace_over_inputs: self.options.inplace_over_inputs,
        }
    }

    /// Lifetimes, aliases and storages of `order`, in the working memory (held until the
    /// result is dropped: one analysis at a time).
    fn analyze(
        &self,
        order: &[NodeId],
        policy: AliasPolicy,
        parts: Option<&ConcatParts>,
    ) -> Result<RefMut<'_, &'a mut PlanContext>, PlanError> {
        let mut guard = self.work.borrow_mut();
        let w: &mut PlanContext = &mut guard;
        w.lifetimes.fill(self.graph, order, &self.mutated)?;
        w.aliases.fill(
            self.graph,
            order,
            &self.regions,
            &w.lifetimes,
            &self.semantics,
            policy,
            parts,
        );
        w.storages.fill(
            &self.regions,
            &w.aliases,
            order,
            &self.workspace,
            self.options.alignment,
        );
        Ok(guard)
    }

    /// [`place`] of the analysis in the working memory, with its solver; and how many
    /// storages it placed.
    fn place(&self, mut w: RefMut<'_, &'a mut PlanContext>) -> Result<(Placed, usize), PlanError> {
        let w: &mut PlanContext = &mut w;
        let placed = place(
            &self.regions,
            &w.lifetimes,
            &w.aliases,
            &w.storages,
            self.options,
            &mut w.solver,
        )?;
        Ok((placed, w.storages.roots.len()))
    }

    /// The peak of `order`: the lower bound of its lifetimes with the chosen aliasing.
    fn peak(&self, order: &[NodeId]) -> Result<u64, PlanError> {
        Ok(self.elide(order)?.1)
    }

    /// The Concat parts that lower the peak of `order` (see [`concat::choose`]), and that
    /// peak.
    fn elide(&self, order: &[NodeId]) -> Result<(Option<ConcatParts>, u64), PlanError> {
        let base = self.analyze(order, self.policy(), None)?;
        let peak = base.storages.lower_bound();
        if !self.options.concat_elision {
            return Ok((None, peak));
        }
        let area = base.storages.area();
        let mut candidates = concat::candidates(
            self.graph,
            self.links.get_or_init(|| concat::Links::new(self.graph)),
            order,
            &self.regions,
            &self.semantics,
            &base.aliases,
            &self.options.bindings,
            &self.varying,
        );
        drop(base);
        // A tensor written in place keeps its bytes to itself: it is no Concat part.
        for c in &mut candidates {
            c.parts.retain(|&(x, _, _)| !self.mutated[x]);
        }
        candidates.retain(|c| !c.parts.is_empty());
        if candidates.is_empty() {
            return Ok((None, peak));
        }
        let chosen = concat::choose(
            self.graph.tensors().len(),
            &candidates,
            (peak, area),
            &mut |parts| {
                let w = self.analyze(order, self.policy(), Some(parts))?;
                Ok((w.storages.lower_bound(), w.storages.area()))
            },
        )?;
        Ok(match chosen {
            Some((parts, (peak, _))) => (Some(parts), peak),
            None => (None, peak),
        })
    }

    fn model(&self) -> Result<Model, PlanError> {
        let given: Vec<NodeId> = self
            .graph
            .nodes()
            .iter_enumerated()
            .map(|(n, _)| n)
            .collect();
        let views_only = AliasPolicy {
            inplace: false,
            inplace_over_inputs: false,
            ..self.policy()
        };
        let views = self.analyze(&given, views_only, None)?;
        let constraints = deps::order_constraints(self.graph, &self.options.op_table);
        Ok(Model::new(
            self.graph,
            &self.regions,
            &views.aliases,
            self.options,
            &self.semantics,
            &self.workspace,
            deps::Deps::new(self.graph, &constraints),
        ))
    }

    fn settings(&self) -> PlanSettings {
        let o = self.options;
        PlanSettings {
            bindings: self
                .graph
                .symbols()
                .iter_enumerated()
                .filter_map(|(s, name)| Some((name.clone(), o.bindings.get(s)?)))
                .collect(),
            bounded: self
                .graph
                .symbols()
                .iter_enumerated()
                .filter(|(s, _)| o.bounded.contains(s) && o.bindings.get(*s).is_some())
                .map(|(_, name)| name.clone())
                .collect(),
            views: o.views,
            inplace: o.inplace,
            inplace_over_inputs: o.inplace_over_inputs,
            concat_elision: o.concat_elision,
            inputs_in_arena: o.inputs_in_arena,
            outputs_in_arena: o.outputs_in_arena,
            strategy: o.strategy.name().to_owned(),
            schedule: o.schedule,
            op_table: o.op_table.clone(),
            fold_weights: o.fold_weights,
            attention: o.attention,
            fuse: o.fuse,
            dtype_alignment: o.dtype_alignment.clone(),
        }
    }

    /// Places `schedule`: with the Concat parts that lower its peak, or without them where
    /// placement missed that peak and the plan without them is smaller, so elision never
    /// costs bytes. Returns the placement and its storage count.
    fn place_order(&self, schedule: &[NodeId]) -> Result<(Placed, usize), PlanError> {
        let (parts, _) = self.elide(schedule)?;
        let (mut placed, mut storage_count) =
            self.place(self.analyze(schedule, self.policy(), parts.as_ref())?)?;
        if parts.is_some() && placed.arena_bytes > placed.lower_bound {
            let (plain, plain_count) =
                self.place(self.analyze(schedule, self.policy(), None)?)?;
            if plain.arena_bytes < placed.arena_bytes {
                placed = plain;
                storage_count = plain_count;
            }
        }
        Ok((placed, storage_count))
    }

    fn finish(
        &self,
        mut schedule: Vec<NodeId>,
        mut choice: ScheduleChoice,
        runners_up: &[ordering::RunnerUp],
        model: &Model,
    ) -> Result<Plan, PlanError> {
        let (mut placed, mut storage_count) = self.place_order(&schedule)?;
        // Where placement misses the chosen order's peak, a runner-up whose peak is below
        // the arena may pack smaller: place the given order (as the given schedule is
        // placed, so that the arena is never above that one's) and a few others, and keep
        // the smallest arena (the first on ties). On graphs of more than
        // `RETRY_ANY_MISS_MAX_STORAGES` storages the others are placed only where the miss
        // is more than a thousandth: placing thousands of storages again costs more than
        // such a miss is worth. Runners-up come in the order `ordering::choose` ranks them.
        let missed = placed.arena_bytes.saturating_sub(placed.lower_bound);
        let mut tries =
            if missed > placed.lower_bound / 1000 || storage_count <= RETRY_ANY_MISS_MAX_STORAGES {
                self.options.ordering.placement_tries
            } else {
                0
            };
        for r in runners_up {
            if placed.arena_bytes <= placed.lower_bound {
                break;
            }
            if r.peak >= placed.arena_bytes {
                continue;
            }
            if r.name != "given" {
                if tries == 0 {
                    continue;
                }
                tries -= 1;
            }
            let (other, other_count) = self.place_order(&r.order)?;
            if other.arena_bytes < placed.arena_bytes {
                placed = other;
                storage_count = other_count;
                schedule.clone_from(&r.order);
                choice.chosen.clone_from(&r.name);
            }
        }
        // The chosen order's peak is the lower bound of the lifetimes placed: where
        // placement kept the plain lifetimes over the Concat parts elided (they packed
        // smaller), that is the plain one, a little above the order's measured peak.
        choice.peak = placed.lower_bound;
        choice.any_order_bound = model.order_free_bound(&schedule);
        for w in &mut placed.workspaces {
            w.bodies.clone_from(&self.body_plans[w.node]);
        }
        let (weights, weight_bytes) = place_weights(&self.regions)?;
        let none = AliasPolicy {
            views: false,
            inplace: false,
            inplace_over_inputs: false,
        };
        let unaliased_lower_bound = self.analyze(&schedule, none, None)?.storages.lower_bound();
        let count = |kind| {
            placed
                .buffers
                .iter()
                .filter(|b| b.alias_kind() == Some(kind))
                .count()
        };
        let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(Plan {
            graph: self.graph.name.clone(),
            arena_bytes: placed.arena_bytes,
            lower_bound_bytes: placed.lower_bound,
            naive_bytes: naive_bytes(&self.regions)?,
            weight_bytes,
            alignment: self.options.alignment,
            schedule,
            settings: self.settings(),
            stats: PlanStats {
                unaliased_lower_bound,
                views: to_u32(count(AliasKind::View)),
                inplace: to_u32(count(AliasKind::InPlace)),
                parts: to_u32(count(AliasKind::Part)),
                storages: to_u32(storage_count),
                placed_by: placed.placed_by,
                proven_optimal: placed.proven_optimal,
                schedule: choice,
            },
            buffers: placed.buffers,
            weights,
            workspaces: placed.workspaces,
        })
    }
}

/// Up to this many storages, a memory-aware order whose placement misses its peak by any
/// amount gets runners-up placed too (see `Context::finish`); above it, only a miss of more
/// than a thousandth does.
const RETRY_ANY_MISS_MAX_STORAGES: usize = 2_000;

/// `options` with the broadcast and quotient symbols its bindings decide resolved (borrowed
/// as they are when the graph has none).
fn resolved<'a>(
    graph: &Graph,
    options: &'a PlanOptions,
) -> Result<std::borrow::Cow<'a, PlanOptions>, PlanError> {
    if graph.symbol_broadcasts().is_empty() && graph.symbol_quotients().is_empty() {
        return Ok(std::borrow::Cow::Borrowed(options));
    }
    let bindings = graph.resolve(&options.bindings).map_err(PlanError::Bind)?;
    Ok(std::borrow::Cow::Owned(PlanOptions {
        bindings,
        ..options.clone()
    }))
}

/// The declared shapes of `graph` against their ops' rules ([`Graph::shape_conflicts`]) at
/// the bindings planned, and, for each symbol planned at its bound, at 0, 1, 2, half the
/// bound and one below it (the other bounded symbols kept at their bounds, or at what their
/// own bounds then allow), and with every bounded symbol at 0: the plan must hold across
/// the range. Dims declared with a bounded symbol follow the data and are not compared; a
/// dim declared without one is claimed for every value. The first conflict is the error.
fn check_shapes(graph: &Graph, options: &PlanOptions) -> Result<(), PlanError> {
    let mut tries = vec![options.bindings.clone()];
    let bounded: Vec<SymbolId> = options
        .bounded
        .iter()
        .copied()
        .filter(|&s| options.bindings.get(s).is_some())
        .collect();
    let clamp = |mut b: Bindings| -> Bindings {
        // A bounded symbol whose bound mentions a lowered one stays within that bound.
        for (s, bound) in graph.symbol_bounds() {
            if let (Some(v), Ok(max)) = (b.get(*s), bound.eval(&b))
                && v > max
            {
                b.set(*s, max);
            }
        }
        b
    };
    for &s in &bounded {
        let top = options.bindings.get(s).unwrap_or(0);
        let mut values = vec![0, 1, 2, top / 2, top.saturating_sub(1)];
        values.retain(|&v| v < top);
        values.sort_unstable();
        values.dedup();
        for v in values {
            tries.push(clamp(options.bindings.clone().with(s, v)));
        }
    }
    if !bounded.is_empty() {
        let mut zero = options.bindings.clone();
        for &s in &bounded {
            zero.set(s, 0);
        }
        tries.push(clamp(zero));
    }
    // Every data-dependent symbol (one with a bound) follows the data, planned at its bound
    // or not: the runtime's dim is what the op makes.
    let mut varying = bounded.clone();
    varying.extend(graph.symbol_bounds().iter().map(|(s, _)| *s));
    for b in tries {
        let Ok(b) = graph.resolve(&b) else { continue };
        if let Some(c) = graph.shape_conflicts(&b, &varying).into_iter().next() {
            let node = graph.node(c.node);
            let at = graph
                .symbols()
                .iter_enumerated()
                .filter(|(s, _)| !graph.is_derived(*s))
                .filter_map(|(s, name)| Some((name.clone(), b.get(s)?)))
                .collect();
            return Err(PlanError::DeclaredShape {
                node: c.node,
                output: c.output,
                problem: Box::new(ShapeProblem {
                    op: node.op.clone(),
                    conflict: c.kind,
                    at,
                }),
            });
        }
    }
    Ok(())
}

/// The ordering model of `graph` under `options` (for the ordering module's tests).
#[cfg(test)]
pub(crate) fn ordering_model(graph: &Graph, options: &PlanOptions) -> Result<Model, PlanError> {
    Context::new(graph, options, &mut PlanContext::new())?.model()
}

/// Whether `options` ask for fusions `graph` has not had (see [`crate::fuse_graph`]).
fn needs_fusing(graph: &Graph, options: &PlanOptions) -> bool {
    if options.fuse.is_none() {
        return false;
    }
    let done = graph
        .metadata_value(crate::fuse::FUSED_MARK)
        .and_then(|m| crate::options::Fusions::parse(m).ok())
        .unwrap_or(crate::options::Fusions::NONE);
    let wanted = options.fuse.names();
    !wanted.iter().all(|w| done.names().contains(w))
}

/// Plans `graph`: schedule, lifetimes, aliasing, arena offsets and weight offsets. With
/// fusions ([`PlanOptions::fuse`]), the graph planned is `graph` as [`crate::fuse_graph`]
/// rewrites it, and the plan's tensors and nodes are that graph's ([`plan_fused`] returns
/// both).
pub fn plan_graph(graph: &Graph, options: &PlanOptions) -> Result<Plan, PlanError> {
    PlanContext::new().plan(graph, options)
}

/// `graph` fused as `options.fuse` asks ([`crate::fuse_graph`]; as it is without fusions),
/// and its plan.
pub fn plan_fused(
    graph: &Graph,
    options: &PlanOptions,
) -> Result<(crate::fuse::FusedGraph, Plan), PlanError> {
    let fused = crate::fuse::fuse_graph(graph, options)?;
    let plan = PlanContext::new()
        .plan_as_given(&fused.graph, options)
        .map_err(PlanError::in_graph(&fused.graph))?;
    Ok((fused, plan))
}

/// Plans `graph` for a schedule the caller chose (a topological order of every node).
pub fn plan_with_schedule(
    graph: &Graph,
    schedule: &[NodeId],
    options: &PlanOptions,
) -> Result<Plan, PlanError> {
    with_schedule(graph, schedule, options, |ctx| {
        let peak = ctx.peak(schedule)?;
        let choice = ScheduleChoice {
            mode: ScheduleMode::Given,
            chosen: "caller".to_owned(),
            given_peak: peak,
            peak,
            candidates: vec![OrderCandidate {
                name: "caller".to_owned(),
                peak,
            }],
            exact: false,
            any_order_bound: 0,
        };
        ctx.finish(schedule.to_vec(), choice, &[], &ctx.model()?)
    })
}

/// `f` run on the context of `graph` under `options`, once `schedule` is checked to be an
/// order the graph allows.
fn with_schedule<T>(
    graph: &Graph,
    schedule: &[NodeId],
    options: &PlanOptions,
    f: impl FnOnce(&Context<'_>) -> Result<T, PlanError>,
) -> Result<T, PlanError> {
    if needs_fusing(graph, options) {
        return Err(PlanError::NotFused {
            graph: graph.name.clone(),
            fusions: options.fuse.describe(),
        });
    }
    let options = &*resolved(graph, options)?;
    let mut work = PlanContext::new();
    let ctx = Context::new(graph, options, &mut work)?;
    check_schedule(graph, schedule)?;
    mutation::check_order(graph, &options.op_table, schedule)?;
    f(&ctx)
}

/// What `graph` needs run in its node order under `options`, without placing anything or
/// eliding Concat inputs: the lower bound of its arena with the chosen views and in-place
/// writes, plus its persistent region (weights, tensors computed at load); and which tensors
/// are live at a step where the arena peaks. The measure the `constants` fusion compares
/// variants of a graph by, and what it tries to change.
pub(crate) fn given_order_need(
    graph: &Graph,
    options: &PlanOptions,
) -> Result<(u64, IndexVec<TensorId, bool>), PlanError> {
    let options = &*resolved(graph, options)?;
    let mut work = PlanContext::new();
    let ctx = Context::new(graph, options, &mut work)?;
    let order: Vec<NodeId> = graph.nodes().ids().collect();
    let w = ctx.analyze(&order, ctx.policy(), None)?;
    let peak = w.storages.lower_bound();
    // The steps at the peak: live bytes per step from the storages' lifetimes.
    let steps = order.len() + 1;
    let mut diff = vec![0i128; steps + 1];
    for b in &w.storages.problem.buffers {
        let (s, e) = (b.start as usize, (b.end as usize).min(steps));
        if s < e {
            diff[s] += i128::from(b.size);
            diff[e] -= i128::from(b.size);
        }
    }
    let mut live = 0i128;
    let mut at_peak = vec![false; steps];
    let mut most = 0i128;
    for (step, d) in diff.iter().take(steps).enumerate() {
        live += d;
        if live > most {
            most = live;
            at_peak.iter_mut().for_each(|p| *p = false);
        }
        if live == most {
            at_peak[step] = true;
        }
    }
    let live_at_peak: IndexVec<TensorId, bool> = graph
        .tensors()
        .ids()
        .map(|t| {
            let (first, last) = (w.lifetimes.first[t] as usize, w.lifetimes.last[t] as usize);
            (first..=last.min(steps - 1)).any(|s| at_peak.get(s).copied().unwrap_or(false))
        })
        .collect();
    drop(w);
    let (_, weights) = place_weights(&ctx.regions)?;
    let need = peak
        .checked_add(weights)
        .ok_or_else(|| PlanError::Overflow {
            what: format!("adding the weights of graph `{}` to its arena", graph.name),
        })?;
    Ok((need, live_at_peak))
}

/// The persistent region's size for `graph` under `options` (weights and training state,
/// laid out as a plan lays them out).
pub(crate) fn persistent_bytes(graph: &Graph, options: &PlanOptions) -> Result<u64, PlanError> {
    let regions = Regions::new(graph, options)?;
    Ok(place_weights(&regions)?.1)
}

/// Live arena bytes at each step of `graph` run in node order under `options` (views,
/// in-place writes and, when the options elide them, the Concat parts the plan of that
/// order would elide): the profile the training step's checkpoint search measures. Its
/// largest value is the lower bound of the plan of `graph` in node order.
pub(crate) fn step_profile(
    graph: &Graph,
    options: &PlanOptions,
    work: &mut PlanContext,
) -> Result<Vec<u64>, PlanError> {
    step_profile_in(graph, options, work, 1)
}

/// [`step_profile`] counted as the packing's lower bound counts one alignment `class`: the
/// buffers aligned to at least `class`, each rounded up to it. The arena is at least the most
/// of it less `class - 1`.
pub(crate) fn step_profile_in(
    graph: &Graph,
    options: &PlanOptions,
    work: &mut PlanContext,
    class: u64,
) -> Result<Vec<u64>, PlanError> {
    let ctx = Context::new(graph, options, work)?;
    let order: Vec<NodeId> = graph.nodes().iter_enumerated().map(|(n, _)| n).collect();
    let (parts, _) = ctx.elide(&order)?;
    let w = ctx.analyze(&order, ctx.policy(), parts.as_ref())?;
    let mut diff = vec![0i128; order.len() + 2];
    for b in &w.storages.problem.buffers {
        let align = if b.align.is_power_of_two() {
            b.align
        } else {
            1
        };
        if align < class {
            continue;
        }
        let size = memplan_packing::align_up(b.size, class).unwrap_or(u64::MAX);
        let (s, e) = (b.start as usize, (b.end as usize).min(order.len() + 1));
        if let (Some(x), true) = (diff.get_mut(s), s < e) {
            *x += i128::from(size);
            diff[e] -= i128::from(size);
        }
    }
    let mut live: i128 = 0;
    Ok(diff
        .iter()
        .take(order.len().max(1))
        .map(|d| {
            live += d;
            u64::try_from(live.max(0)).unwrap_or(u64::MAX)
        })
        .collect())
}

/// The peak of `graph` run in `schedule` order under `options` (the lower bound of the
/// lifetimes with the chosen aliasing), without placing anything.
pub fn peak_bytes(
    graph: &Graph,
    schedule: &[NodeId],
    options: &PlanOptions,
) -> Result<u64, PlanError> {
    with_schedule(graph, schedule, options, |ctx| ctx.peak(schedule))
}
