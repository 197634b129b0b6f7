//! `--checkpoint auto`: the checkpoint cuts with the fewest recomputed FLOPs whose plan fits
//! a budget of device memory (arena, persistent region and the caller's inputs and
//! outputs).
//!
//! On forwards of up to [`EXACT_MAX_FORWARD`] nodes the exact search ([`super::exact`]) runs
//! first, with at most [`EXACT_MAX_STATES`] states: when it proves its answer, that is the
//! answer (the fewest FLOPs of any set of cuts). A search proven at one budget is proven at
//! every larger one, and an answer proven is at or below every configuration of the pool,
//! so answers stay monotone in the budget across the switch. Otherwise (longer forwards, or
//! no proof in time):
//!
//! The search chooses from a pool of configurations (sets of cut positions, see
//! [`super::recompute`] for what a set of cuts keeps) that does not depend on the budget:
//!
//! - no cut (nothing recomputed);
//! - the simple rules a person would try: `every:N` for `N` about √n (Chen et al.) and for
//!   powers of two and their one-and-a-half multiples; per-block cuts, at the inputs of every
//!   repeated block of ops (a transformer's layers, a ResNet's blocks: [`repeated_blocks`]),
//!   and at every second one; a cut after every expensive op (matrix products,
//!   convolutions, attention), so that only cheap ops run again;
//! - the cuts a dynamic program over candidate positions finds for a ladder of budgets
//!   spanning all it can reach: a segment `(a, b]` costs the FLOPs of recomputing it, and
//!   the live bytes at the steps of its forward and backward are what the cuts before `a`
//!   keep plus what the segment itself needs, both measured on the real step graph (views,
//!   in-place writes and Concat parts included), from a few dozen configurations that
//!   together show every segment, measured on up to 8 threads (the answer does not depend
//!   on how many). On a chain this decomposition is exact. The program runs over two
//!   candidate sets: the positions with the fewest crossing bytes (where a segment is cheap
//!   to close), and those with the positions whose crossing tensors cost the most FLOPs to
//!   remake per byte (right after a transformer's Q, K and V projections);
//! - on forwards of up to 300 nodes, the cuts of the certified lower bound's programme
//!   ([`super::bound`]) at every budget of a ladder spanning all it reaches: the fewest
//!   FLOPs under a memory model that is never above the measured peak, so each is the
//!   optimum at any budget where its plan fits.
//!
//! The pool is ordered by recomputed FLOPs (counted from what each configuration keeps,
//! without building its step), then by the number of cuts and the cuts themselves, and the
//! answer is the first configuration that fits: its measured peak (the arena's lower bound)
//! plus the bytes outside the arena within the budget, and then its plan. So a larger budget
//! never gets more recomputation (whatever fits a budget fits a larger one, and the order is
//! the same), and no rule of the pool that fits is beaten.
//!
//! On forwards of up to 300 nodes the programme's answers, walked down from the budget
//! asked in segments whose ends do not depend on it ([`Segmented`]), join that order by
//! FLOPs: where the programme's own answer at the budget is met and its plan fits, it is
//! the answer, and `auto` equals the lower bound there (the optimum). The configurations a
//! budget meets are a set that grows with the budget (the walk of a segment is a function
//! of the segment alone, and the walk of a segment passes into the walks of the segments
//! below), so the answers stay monotone with every segment capped at [`WALK_PER_SEGMENT`]
//! configurations and the programme's fronts merged or not. When nothing fits, the least
//! total any configuration of the pool's plan reaches is reported (configurations planned in
//! order of measured peak until the next one cannot be lower), so that budget is met when
//! asked for; where a model exists, the pool's order holds the configuration that lowers that
//! least furthest among the programme's answers below it ([`Prepared::lowered`]), found only
//! where it may come before the answer ([`Prepared::lowered_floor`]). The walk stops as soon
//! as every configuration it has still to yield recomputes at least the pool's next
//! ([`Segmented::next`]), and the programme's answers are kept per budget, so a budget
//! whose pool configuration fits early pays for little of the walk.
//!
//! What the search finds the same at every budget (the pool, the model, measured peaks and
//! plans) is kept across calls in one process for the last few steps ([`Prepared`]): a
//! second budget on the same graph costs its walk and its plans only.

use std::collections::BTreeMap;

use memplan_ir::{Bindings, IndexVec, TensorId, TensorKind};

use super::TrainingOptions;
use super::bound::Model;
use super::derive::{Base, Derived};
use super::recompute::{CHEAP, Choice, Spans, all_kept, cut_choice, keep_for, last_cut, spans};
use crate::error::PlanError;
use crate::plan::Plan;
use crate::planner::PlanContext;

/// A configuration of the pool: its cuts, and its measured peak when known.
type Config = (Vec<u32>, Option<u64>);

/// The longest forward (in nodes) `auto` runs the exact search on first.
const EXACT_MAX_FORWARD: usize = 64;

/// The most configurations the exact search inside `auto` pops before it gives up.
const EXACT_MAX_STATES: usize = 5_000;

/// The most configurations of the bound's programme outside the pool each round of
/// lowering the least named when nothing fits tries.
const MODEL_WALK: usize = 16;

/// The most times the least reported when nothing fits is lowered by a walk of the bound's
/// programme from one byte below it.
const MODEL_LEAST_ROUNDS: usize = 2;

/// The segments of the walk `auto` merges into its pool's order ([`Segmented`]): the model
/// bytes of the step without recomputation cut into this many equal parts.
const WALK_SEGMENTS: u64 = 1024;

/// The most configurations outside the pool whose model bytes lie in one segment that the
/// walk ([`Segmented`]) takes.
const WALK_PER_SEGMENT: usize = 64;

/// The answers of the bound's programme that `auto` merges into its pool's order by FLOPs:
/// a walk down the programme's answers in segments whose ends do not depend on the budget
/// asked, so that the answers are monotone in the budget with every segment capped.
///
/// Anchors `A_0 = 0 < A_1 < ... < A_S` cut `[0, top]` (`top` a figure of the step alone, `S`
/// [`WALK_SEGMENTS`]) into segments `(A_{k-1}, A_k]`, and `A_{S+1} = u64::MAX`. The walk
/// `P(k)` solves the programme at `x = A_k`, then: a merged front ([`Model::solve`]) ends
/// the segment, and `P(k)` goes on as `P(k-1)`; no answer ends the walk (nothing passes
/// below either); an answer `c` with model bytes `m`:
///
/// - at or below `A_{k-1}`: `P(k)` goes on as `P(j)`, `j` the segment of `m` (solved
///   again at `A_j`);
/// - inside the segment: `c` is taken (yielded unless the pool holds it), and the walk
///   solves again at `m - 1`, as `P(k-1)` when that is `A_{k-1}`; but the
///   ([`WALK_PER_SEGMENT`] + 1)-th configuration outside the pool of the segment is not
///   taken, and `P(k)` goes on as `P(k-1)`.
///
/// So `P(k)` is a function of `k` alone, and `P(k) ⊆ P(k+1)` (as sets): `P(k+1)` is the
/// configurations of its own segment followed by `P(k)`, or it jumps to `P(j)`, `j ≤ k`,
/// from an answer `c` with model bytes in segment `j`; an unmerged answer is the least
/// configuration of one total order passing the model's test (see [`Model::solve`]), so `c`
/// is also the answer at every anchor between (where unmerged), and each `P(i)`, `j < i ≤
/// k`, jumps to `P(j)` too (or, merged, goes on as `P(i-1)`). A budget `B` walks
/// `P(K)`, `K` the least segment with `A_K ≥ B`: the configurations it meets grow with the
/// budget, and so does the set of those that fit, whatever the caps cut off or the merged
/// fronts stop. Its configurations come in the total order (each is the answer at a budget
/// below the previous one's), so merging them into the pool's order by FLOPs gives the least
/// FLOPs of pool and walk that fits: more budget never means more recomputation.
///
/// Where the programme's own answer at `B` is met, and its plan fits, it is the answer
/// (the optimum). It is met unless the front at `A_K` or below is merged, or `P(K)` takes
/// [`WALK_PER_SEGMENT`] configurations with model bytes in `(B, A_K]` first: an answer with
/// model bytes below `A_{K-1}` is the answer at `A_{K-1}`, the first `P(K-1)` meets.
struct Segmented<'a> {
    model: &'a Model,
    in_pool: &'a std::collections::BTreeSet<&'a Vec<u32>>,
    /// The programme's answers at the budgets solved so far in this process (a function
    /// of the budget alone), when kept ([`Prepared`]).
    solved: Option<&'a std::sync::Mutex<Solves>>,
    /// At most the recomputed FLOPs of every configuration the walk has still to yield
    /// (the least of the model at the last budget solved bounds every answer below it).
    floor: u64,
    /// `top` of the anchors.
    top: u64,
    /// The current segment `k` (`0`: the walk is over).
    segment: u64,
    /// The budget the next solve is at, in `(A_{k-1}, A_k]`.
    at: u64,
    /// The configurations outside the pool the current segment has taken.
    taken: usize,
    /// `S` ([`WALK_SEGMENTS`]; tests use fewer).
    segments: u64,
    /// The cap of a segment ([`WALK_PER_SEGMENT`]; tests use less).
    per_segment: usize,
    /// How many times a cap cut a segment short.
    capped: usize,
}

impl<'a> Segmented<'a> {
    /// The walk `P(K)` for `budget` (see the type's docs); `top` is the model bytes of the
    /// step without recomputation.
    fn new(
        model: &'a Model,
        budget: u64,
        in_pool: &'a std::collections::BTreeSet<&'a Vec<u32>>,
        solved: &'a std::sync::Mutex<Solves>,
    ) -> Segmented<'a> {
        let (segments, per_segment) = (WALK_SEGMENTS, WALK_PER_SEGMENT);
        #[cfg(test)]
        let (segments, per_segment) = tests::WALK_CAPS.get().unwrap_or((segments, per_segment));
        let mut walk = Segmented::with(model, budget, in_pool, segments, per_segment);
        walk.solved = Some(solved);
        walk
    }

    /// [`Segmented::new`] with `segments` segments capped at `per_segment` configurations.
    fn with(
        model: &'a Model,
        budget: u64,
        in_pool: &'a std::collections::BTreeSet<&'a Vec<u32>>,
        segments: u64,
        per_segment: usize,
    ) -> Segmented<'a> {
        let top = model.none_bytes();
        let mut walk = Segmented {
            model,
            in_pool,
            solved: None,
            floor: 0,
            top,
            segment: 0,
            at: 0,
            taken: 0,
            segments,
            per_segment,
            capped: 0,
        };
        walk.enter(walk.segment_of(budget));
        walk
    }

    /// The upper end `A_k` of segment `k` (`A_0 = 0`, `A_{S+1} = u64::MAX`).
    fn anchor(&self, k: u64) -> u64 {
        if k > self.segments {
            return u64::MAX;
        }
        u64::try_from(u128::from(self.top) * u128::from(k) / u128::from(self.segments.max(1)))
            .unwrap_or(u64::MAX)
    }

    /// The segment holding `bytes`: the least `k` with `A_k ≥ bytes`.
    fn segment_of(&self, bytes: u64) -> u64 {
        // The anchors are non-decreasing in `k`: bisection over `0..=S + 1`.
        let (mut lo, mut hi) = (0u64, self.segments + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.anchor(mid) >= bytes {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// Starts `P(k)`.
    fn enter(&mut self, k: u64) {
        self.segment = k;
        self.at = self.anchor(k);
        self.taken = 0;
    }

    /// The programme's answer at `budget` and whether a front was merged ([`Model::solve`]
    /// with fronts of [`super::bound::WALK_FRONT`]), kept when the walk keeps answers.
    fn solve(&self, budget: u64) -> Solve {
        solve_kept(self.model, self.solved, budget)
    }

    /// The next configuration of the walk outside the pool: its recomputed FLOPs, cuts and
    /// model bytes; `None` when the walk is over, or when every configuration it has still
    /// to yield recomputes at least `limit` FLOPs ([`Segmented::floor`] reached `limit`: the
    /// walk pauses there, and a later call with a larger `limit` goes on from it).
    ///
    /// Ends: every solve either lowers the segment, or takes a configuration inside it at a
    /// budget below the last one's (each new: the answers are strictly increasing in one
    /// order), so there are at most `S + 1` segments, each with at most
    /// [`WALK_PER_SEGMENT`] + 1 configurations outside the pool and two solves that lead
    /// to another segment, plus the pool's configurations and recomputing nothing once.
    fn next(&mut self, limit: u64) -> Option<(u64, Vec<u32>, u64)> {
        while self.segment > 0 && self.floor < limit {
            let low = self.anchor(self.segment - 1);
            let (answer, merged) = self.solve(self.at);
            // Every answer at this budget or below recomputes at least the least FLOPs here,
            // which a merged front's answer bounds from below.
            self.floor = self.floor.max(answer.as_ref().map_or(u64::MAX, |a| a.0));
            if merged {
                self.enter(self.segment - 1);
                continue;
            }
            let Some((flops, cuts)) = answer else {
                self.segment = 0;
                return None;
            };
            let bytes = match &cuts {
                Some(c) => self.model.config(c).1,
                None => self.model.none_bytes(),
            };
            if bytes <= low {
                self.enter(self.segment_of(bytes));
                continue;
            }
            let outside = cuts.as_ref().filter(|c| !self.in_pool.contains(c));
            if outside.is_some() {
                self.taken += 1;
                if self.taken > self.per_segment {
                    self.capped += 1;
                    #[cfg(test)]
                    tests::CAPPED.set(tests::CAPPED.get() + 1);
                    self.enter(self.segment - 1);
                    continue;
                }
            }
            // `low < bytes <= at`: the next budget stays in the segment or is its floor.
            self.at = bytes.min(self.at).saturating_sub(1);
            if self.at <= low {
                self.enter(self.segment - 1);
            }
            if let Some(c) = outside {
                return Some((flops, c.clone(), bytes));
            }
        }
        if self.segment == 0 {
            self.floor = u64::MAX;
        }
        None
    }
}

/// The programme's answer at `budget` and whether a front was merged ([`Model::solve`] with
/// fronts of [`super::bound::WALK_FRONT`]), kept in `kept` when given.
fn solve_kept(model: &Model, kept: Option<&std::sync::Mutex<Solves>>, budget: u64) -> Solve {
    if let Some(hit) = kept.and_then(|k| lock_solves(k).get(&budget).cloned()) {
        return hit;
    }
    let solved = model.solve(budget, super::bound::WALK_FRONT);
    let solve = (solved.answer, solved.merged);
    if let Some(k) = kept {
        let mut k = lock_solves(k);
        if k.len() < MEMO_SOLVES {
            k.insert(budget, solve.clone());
        }
    }
    solve
}

/// The kept answers (a poisoned lock only means another search panicked; what it holds is
/// whole).
fn lock_solves(m: &std::sync::Mutex<Solves>) -> std::sync::MutexGuard<'_, Solves> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What [`Model::solve`] answered at one budget: the answer and whether a front was merged.
type Solve = (Option<(u64, Option<Vec<u32>>)>, bool);

/// The programme's answers kept per budget ([`Segmented::solve`]).
type Solves = BTreeMap<u64, Solve>;

/// The most answers of the programme one [`Prepared`] keeps.
const MEMO_SOLVES: usize = 8192;

/// Budgets of the ladder the bound's programme is run at, between the least it reaches and
/// the step without recomputation.
const MODEL_LADDER: u64 = 24;

/// Budgets of the ladder the dynamic program is run at, between the least it reaches and
/// the step without recomputation.
const LADDER: u64 = 48;

/// What `auto` finds the same at every budget for one step and options, kept across calls
/// in one process ([`prepared`]): the bytes outside the arena, the measured peak of the step
/// without recomputation, the pool in its order and the bound's model (built when first
/// needed), and the measured peaks and plans of the configurations met so far. Each is a
/// function of the step and the options alone, so an answer is the same with it or
/// without it.
struct Prepared {
    outside: u64,
    none_peak: u64,
    pooled: std::sync::OnceLock<Pooled>,
    memo: std::sync::Mutex<Memo>,
    /// The programme's answers per budget ([`Segmented::solve`]).
    solves: std::sync::Mutex<Solves>,
}

/// A configuration of the pool in its order: its recomputed FLOPs, the configuration
/// (`None` recomputes nothing, `Some(cuts)` the cheap policy with those checkpoints), and its
/// measured peak when the pool's search measured it.
type Ordered = (u64, Option<Vec<u32>>, Option<u64>);

/// The pool in its order and the bound's model, and what is known of the configuration
/// that lowers the least named below the pool's own ([`Prepared::lowered`]), found when
/// first needed.
struct Pooled {
    order: Vec<Ordered>,
    model: Option<Model>,
    /// The least total a plan of `order` reaches, and the cuts of its configuration.
    pool_least: std::sync::OnceLock<(u64, usize)>,
    /// At most the recomputed FLOPs of the lowering configuration.
    lowered_floor: std::sync::OnceLock<u64>,
    /// The lowering configuration: its total, recomputed FLOPs and cuts.
    lowered: std::sync::OnceLock<Option<(u64, u64, Vec<u32>)>>,
}

/// Measured peaks and plan totals (with the plans) of configurations, at most
/// [`MEMO_PEAKS`] and [`MEMO_PLANS`] of them.
#[derive(Default)]
struct Memo {
    peaks: BTreeMap<Option<Vec<u32>>, u64>,
    plans: BTreeMap<Option<Vec<u32>>, (u64, Plan)>,
}

/// The most measured peaks one [`Prepared`] keeps.
const MEMO_PEAKS: usize = 4096;
/// The most plans one [`Prepared`] keeps.
const MEMO_PLANS: usize = 64;
/// The most steps whose [`Prepared`] the process keeps (the oldest goes first).
const PREPARED_STEPS: usize = 4;

/// The key of a [`Prepared`]: the step's graph, its forward's length, and the options but
/// the budget (the op table, and the rest as text).
type PreparedKey = (memplan_ir::Graph, usize, memplan_ir::OpTable, String);

/// The [`Prepared`] of the last [`PREPARED_STEPS`] steps `auto` searched.
static PREPARED: std::sync::Mutex<Vec<(PreparedKey, std::sync::Arc<Prepared>)>> =
    std::sync::Mutex::new(Vec::new());

/// The [`Prepared`] of `base` under `options` (any budget): kept from an earlier call, or
/// measured now and kept.
fn prepared(
    base: &Base,
    options: &TrainingOptions,
    work: &mut PlanContext,
) -> Result<std::sync::Arc<Prepared>, PlanError> {
    // The options but the budget, as text (the op table apart: its rules are a hash map,
    // listed in no fixed order).
    let mut unbudgeted = options.clone();
    unbudgeted.checkpoint = super::Checkpoint::Auto { budget: 0 };
    let table = std::mem::replace(&mut unbudgeted.plan.op_table, memplan_ir::OpTable::empty());
    let key: PreparedKey = (
        base.graph.clone(),
        base.n_forward,
        table,
        format!("{unbudgeted:?}"),
    );
    // A poisoned lock only means another search panicked; what it holds is whole.
    let lock = || {
        PREPARED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    if let Some((_, p)) = lock().iter().find(|(k, _)| *k == key) {
        return Ok(std::sync::Arc::clone(p));
    }
    let none = base.materialize(&all_kept(base))?;
    // Everything but the arena: the persistent region and the caller's inputs and outputs.
    let outside = crate::planner::persistent_bytes(&none.graph, &options.plan)
        .map_err(PlanError::in_graph(&none.graph))?
        .saturating_add(caller_bytes(&none, options));
    let none_peak = measured_peak(&none, options, work)?;
    let p = std::sync::Arc::new(Prepared {
        outside,
        none_peak,
        pooled: std::sync::OnceLock::new(),
        memo: std::sync::Mutex::new(Memo::default()),
        solves: std::sync::Mutex::new(Solves::new()),
    });
    let mut kept = lock();
    if kept.len() >= PREPARED_STEPS {
        kept.remove(0);
    }
    kept.push((key, std::sync::Arc::clone(&p)));
    Ok(p)
}

impl Prepared {
    fn memo(&self) -> std::sync::MutexGuard<'_, Memo> {
        self.memo
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The pool in its order and the bound's model, built at the first call.
    fn pooled(&self, of: &Of<'_>, work: &mut PlanContext) -> Result<&Pooled, PlanError> {
        let Of {
            base,
            options,
            spans,
        } = *of;
        if let Some(p) = self.pooled.get() {
            return Ok(p);
        }
        // Configurations: `None` recomputes nothing, `Some(cuts)` the cheap policy with
        // those checkpoints. Ordered by recomputed FLOPs, then fewer cuts, then the cuts.
        let mut order: Vec<Ordered> = vec![(0, None, Some(self.none_peak))];
        // The bound's model (forwards of up to 300 nodes): a configuration whose model
        // bytes are over the budget cannot fit, and is neither measured nor planned.
        let model = Model::new(base, options, spans, work)?;
        #[cfg_attr(not(test), expect(unused_mut))]
        let mut pooled = pool(base, options, spans, self.none_peak, model.as_ref())?;
        // Tests may leave the pool but recomputing nothing.
        #[cfg(test)]
        if tests::POOL_NONE_ONLY.get() {
            pooled.clear();
        }
        for (cuts, peak) in pooled {
            let keep = keep_for(base, spans, &cuts);
            let flops = recompute_flops_of(base, &keep, &options.plan.bindings);
            order.push((flops, Some(cuts), peak));
        }
        order.sort_by(|a, b| {
            let cuts = |c: &Option<Vec<u32>>| c.as_ref().map(Vec::len);
            a.0.cmp(&b.0)
                .then(cuts(&a.1).cmp(&cuts(&b.1)))
                .then(a.1.cmp(&b.1))
        });
        // Another thread may have set it meanwhile: the same figures.
        Ok(self.pooled.get_or_init(|| Pooled {
            order,
            model,
            pool_least: std::sync::OnceLock::new(),
            lowered_floor: std::sync::OnceLock::new(),
            lowered: std::sync::OnceLock::new(),
        }))
    }

    /// The least total a plan of `order` reaches, and the number of cuts of its
    /// configuration, planning in order of measured peak (or model bytes, when higher: a
    /// lower bound of the plan's total) while the next could still be lower.
    fn least(
        &self,
        of: &Of<'_>,
        order: &[Ordered],
        model: Option<&Model>,
        work: &mut PlanContext,
    ) -> Result<(u64, usize), PlanError> {
        let mut by_peak: Vec<(u64, usize)> = Vec::with_capacity(order.len());
        for (i, (_, config, known)) in order.iter().enumerate() {
            let peak = match known {
                Some(p) => *p,
                None => self.peak(of, config, work)?,
            };
            let floor = match (model, config) {
                (Some(m), Some(cuts)) => m.config(cuts).1,
                _ => 0,
            };
            by_peak.push((peak.saturating_add(self.outside).max(floor), i));
        }
        by_peak.sort_unstable();
        let mut least: (u64, usize) = (u64::MAX, 0);
        for (key, i) in by_peak {
            if key >= least.0 {
                break;
            }
            let config = &order[i].1;
            let (t, _) = self.plan(of, config, work)?;
            if t < least.0 {
                least = (t, config.as_ref().map_or(0, Vec::len));
            }
        }
        Ok(least)
    }

    /// The least total a plan of the pool reaches and the cuts of its configuration
    /// ([`Prepared::least`]; kept).
    fn pool_least(
        &self,
        of: &Of<'_>,
        pooled: &Pooled,
        work: &mut PlanContext,
    ) -> Result<(u64, usize), PlanError> {
        once(&pooled.pool_least, || {
            self.least(of, &pooled.order, pooled.model.as_ref(), work)
        })
    }

    /// At most the recomputed FLOPs of the lowering configuration ([`Prepared::lowered`];
    /// `u64::MAX` when there is none): the least of the programme one byte below the pool's
    /// least (every answer it walks to passes there), or what a merged front bounds it by
    /// (kept).
    fn lowered_floor(
        &self,
        of: &Of<'_>,
        pooled: &Pooled,
        work: &mut PlanContext,
    ) -> Result<u64, PlanError> {
        once(&pooled.lowered_floor, || {
            Ok(
                match (
                    &pooled.model,
                    self.pool_least(of, pooled, work)?.0.checked_sub(1),
                ) {
                    (Some(m), Some(below)) => m
                        .solve(below, super::bound::WALK_FRONT)
                        .answer
                        .map_or(u64::MAX, |a| a.0),
                    _ => u64::MAX,
                },
            )
        })
    }

    /// The configuration outside the pool with the least total below the pool's least,
    /// among the answers of the bound's programme one after the other from one byte below it
    /// ([`Model::walk`], [`MODEL_WALK`] of them outside the pool), and again from below
    /// that one's (at most [`MODEL_LEAST_ROUNDS`] times): its total, FLOPs and cuts (kept).
    /// It belongs to the pool's order: `auto` finds it when an answer may come after it
    /// ([`Prepared::lowered_floor`]), and names its total when nothing fits.
    fn lowered(
        &self,
        of: &Of<'_>,
        pooled: &Pooled,
        work: &mut PlanContext,
    ) -> Result<Option<(u64, u64, Vec<u32>)>, PlanError> {
        once(&pooled.lowered, || self.search_lowered(of, pooled, work))
    }

    /// [`Prepared::lowered`], searched.
    fn search_lowered(
        &self,
        of: &Of<'_>,
        pooled: &Pooled,
        work: &mut PlanContext,
    ) -> Result<Option<(u64, u64, Vec<u32>)>, PlanError> {
        let Some(model) = pooled.model.as_ref() else {
            return Ok(None);
        };
        let in_order: std::collections::BTreeSet<&Vec<u32>> =
            pooled.order.iter().filter_map(|e| e.1.as_ref()).collect();
        let mut least = self.pool_least(of, pooled, work)?.0;
        let mut lowered = None;
        for _ in 0..MODEL_LEAST_ROUNDS {
            let Some(below) = least.checked_sub(1) else {
                break;
            };
            let mut walk = model.walk(below);
            let mut found: Option<(u64, u64, Vec<u32>)> = None;
            let mut tried = 0;
            while tried < MODEL_WALK {
                let Some((flops, cuts, _)) = walk.next_config() else {
                    break;
                };
                if in_order.contains(&cuts) {
                    continue;
                }
                tried += 1;
                let under = found.as_ref().map_or(below, |f| f.0.saturating_sub(1));
                let config = Some(cuts);
                if self.peak(of, &config, work)?.saturating_add(self.outside) > under {
                    continue;
                }
                let (t, _) = self.plan(of, &config, work)?;
                if t <= under
                    && let Some(cuts) = config
                {
                    found = Some((t, flops, cuts));
                }
            }
            match found {
                Some(f) => {
                    least = f.0;
                    lowered = Some(f);
                }
                None => break,
            }
        }
        Ok(lowered)
    }

    /// The measured peak of `config`'s step (kept once measured).
    fn peak(
        &self,
        of: &Of<'_>,
        config: &Option<Vec<u32>>,
        work: &mut PlanContext,
    ) -> Result<u64, PlanError> {
        let Of {
            base,
            options,
            spans,
        } = *of;
        if let Some(&p) = self.memo().peaks.get(config) {
            return Ok(p);
        }
        let derived = base.materialize(&keep_of(base, spans, config))?;
        let p = measured_peak(&derived, options, work)?;
        let mut memo = self.memo();
        if memo.peaks.len() < MEMO_PEAKS {
            memo.peaks.insert(config.clone(), p);
        }
        Ok(p)
    }

    /// The total device bytes of `config`'s plan, and the plan (kept once planned).
    fn plan(
        &self,
        of: &Of<'_>,
        config: &Option<Vec<u32>>,
        work: &mut PlanContext,
    ) -> Result<(u64, Plan), PlanError> {
        let Of {
            base,
            options,
            spans,
        } = *of;
        if let Some(p) = self.memo().plans.get(config) {
            return Ok(p.clone());
        }
        let derived = base.materialize(&keep_of(base, spans, config))?;
        let plan = work
            .plan(&derived.graph, &options.plan)
            .map_err(PlanError::in_graph(&derived.graph))?;
        let planned = (total_bytes(&derived, &plan), plan);
        let mut memo = self.memo();
        if memo.plans.len() < MEMO_PLANS {
            memo.plans.insert(config.clone(), planned.clone());
        }
        Ok(planned)
    }
}

/// What `cell` holds, or `make`'s value, kept there.
fn once<T: Clone>(
    cell: &std::sync::OnceLock<T>,
    make: impl FnOnce() -> Result<T, PlanError>,
) -> Result<T, PlanError> {
    if let Some(v) = cell.get() {
        return Ok(v.clone());
    }
    let v = make()?;
    // Another thread may have set it meanwhile: the same value.
    Ok(cell.get_or_init(|| v).clone())
}

/// The step a search of `auto` is on: its base, the options and the spans of its tensors.
#[derive(Clone, Copy)]
struct Of<'a> {
    base: &'a Base,
    options: &'a TrainingOptions,
    spans: &'a Spans,
}

/// What a configuration keeps: `None` everything, `Some(cuts)` the cheap policy with those
/// checkpoints.
fn keep_of(base: &Base, spans: &Spans, config: &Option<Vec<u32>>) -> IndexVec<TensorId, bool> {
    match config {
        None => all_kept(base),
        Some(cuts) => keep_for(base, spans, cuts),
    }
}

/// The search of `auto` (see the module docs).
pub(super) fn auto(
    base: &Base,
    options: &TrainingOptions,
    budget: u64,
) -> Result<Choice, PlanError> {
    // The planner's working memory, reused by every measurement and plan of the search.
    let mut work = PlanContext::new();
    let spans = spans(base, &options.plan);
    let prep = prepared(base, options, &mut work)?;
    let of = Of {
        base,
        options,
        spans: &spans,
    };
    let (outside, none_peak) = (prep.outside, prep.none_peak);
    // Nothing recomputed: first in the pool's order, and often enough the answer.
    if none_peak.saturating_add(outside) <= budget {
        let (total, plan) = prep.plan(&of, &None, &mut work)?;
        if total <= budget {
            return Ok(Choice {
                keep: all_kept(base),
                checkpoints: Vec::new(),
                cheap: false,
                plan: Some(plan),
            });
        }
    }
    // On small forwards, the exact search first: its answer when it proves one.
    if base.n_forward <= EXACT_MAX_FORWARD {
        let found = super::exact::search(
            base,
            options,
            &spans,
            budget,
            EXACT_MAX_STATES,
            true,
            &mut work,
        )?;
        if found.proven
            && let Some(best) = found.best
        {
            return Ok(config_choice(base, &spans, best.cuts.as_ref(), best.plan));
        }
    }
    let pooled = prep.pooled(&of, &mut work)?;
    let (order, model) = (&pooled.order, pooled.model.as_ref());
    let floor = |config: &Option<Vec<u32>>| -> u64 {
        match (model, config) {
            (Some(m), Some(cuts)) => m.config(cuts).1,
            _ => 0,
        }
    };
    // Each measured peak known: the pool's search's, or one measured before.
    let mut peaks: Vec<Option<u64>> = {
        let memo = prep.memo();
        order
            .iter()
            .map(|e| e.2.or_else(|| memo.peaks.get(&e.1).copied()))
            .collect()
    };
    // The answers of the bound's programme walked down from this budget in segments
    // ([`Segmented`]), merged into the pool's order by FLOPs: the first configuration of
    // either that fits is the answer (but for the lowering configuration, below). The walk
    // passes over the pool's configurations but the lowering one (a set that does not
    // depend on the budget).
    let in_pool: std::collections::BTreeSet<&Vec<u32>> =
        order.iter().filter_map(|e| e.1.as_ref()).collect();
    let mut walk = model.map(|m| Segmented::new(m, budget, &in_pool, &prep.solves));
    let mut head: Option<(u64, Vec<u32>, u64)> = None;
    let mut i = 0usize;
    let found: Option<Found> = loop {
        // The walk goes on only while it may yield a configuration before the pool's next
        // (which comes first at equal FLOPs).
        if head.is_none()
            && let Some(w) = walk.as_mut()
        {
            head = w.next(order.get(i).map_or(u64::MAX, |e| e.0));
        }
        let from_pool = match (&head, order.get(i)) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some((wf, _, _)), Some(e)) => e.0 <= *wf,
        };
        let (flops, config): (u64, Option<Vec<u32>>) = if from_pool {
            i += 1;
            let config = order[i - 1].1.clone();
            if peaks[i - 1].is_some_and(|p| p.saturating_add(outside) > budget)
                || floor(&config) > budget
            {
                continue;
            }
            (order[i - 1].0, config)
        } else if let Some((flops, cuts, bytes)) = head.take() {
            // Model bytes over the budget: its plan cannot fit.
            if bytes > budget {
                continue;
            }
            (flops, Some(cuts))
        } else {
            break None;
        };
        // The measured peak bounds the plan's arena from below: a configuration whose peak
        // is over the budget is not planned.
        let peak = match (from_pool, from_pool.then(|| peaks[i - 1]).flatten()) {
            (_, Some(p)) => p,
            _ => prep.peak(&of, &config, &mut work)?,
        };
        if from_pool {
            peaks[i - 1] = Some(peak);
        }
        if peak.saturating_add(outside) > budget {
            continue;
        }
        let (total, plan) = prep.plan(&of, &config, &mut work)?;
        if total <= budget {
            break Some((flops, config, from_pool, total, plan));
        }
    };
    // The configuration that lowers the least below the pool's own ([`Prepared::lowered`])
    // belongs to the pool's order: it is the answer where it fits and comes first (by FLOPs,
    // before the walk's at equal FLOPs, and after fewer cuts among the pool's). It is found
    // only where it may come first.
    let first = |lf: u64, lc: &Vec<u32>| match &found {
        None => true,
        Some((f, c, true, ..)) => {
            (lf, Some(lc.len()), Some(lc)) < (*f, c.as_ref().map(Vec::len), c.as_ref())
        }
        Some((f, _, false, ..)) => lf <= *f,
    };
    let may = match &found {
        None => true,
        // First without planning: a pool configuration's total is at or above the pool's
        // least, so the programme's least one byte below it bounds the lowering
        // configuration's FLOPs from below too.
        Some((f, _, from_pool, t, _)) => match model {
            None => false,
            Some(m) => {
                let below = t.checked_sub(1).filter(|_| *from_pool);
                below.is_none_or(|b| {
                    solve_kept(m, Some(&prep.solves), b)
                        .0
                        .is_some_and(|a| a.0 <= *f)
                }) && prep.lowered_floor(&of, pooled, &mut work)? <= *f
            }
        },
    };
    let lowered = if may {
        prep.lowered(&of, pooled, &mut work)?
    } else {
        None
    };
    if let Some((t, lf, lc)) = &lowered
        && *t <= budget
        && first(*lf, lc)
    {
        let config = Some(lc.clone());
        let (_, plan) = prep.plan(&of, &config, &mut work)?;
        return Ok(config_choice(base, &spans, config.as_ref(), plan));
    }
    if let Some((_, config, _, _, plan)) = found {
        return Ok(config_choice(base, &spans, config.as_ref(), plan));
    }
    // Nothing fits: the least total a plan of the pool reaches, or the lowering
    // configuration's.
    let least = match lowered {
        Some((t, _, lc)) => (t, lc.len()),
        None => prep.pool_least(&of, pooled, &mut work)?,
    };
    Err(PlanError::BudgetTooSmall {
        budget,
        minimum: least.0,
        checkpoints: least.1,
    })
}

/// The first configuration that fits in `auto`'s merged order: its FLOPs, the configuration,
/// whether the pool's, its plan's total and the plan.
type Found = (u64, Option<Vec<u32>>, bool, u64, Plan);

/// The choice of a configuration (`None` recomputes nothing, `Some(cuts)` the cheap policy
/// with those checkpoints) and its plan.
fn config_choice(base: &Base, spans: &Spans, cuts: Option<&Vec<u32>>, plan: Plan) -> Choice {
    let mut choice = match cuts {
        None => Choice {
            keep: all_kept(base),
            checkpoints: Vec::new(),
            cheap: false,
            plan: None,
        },
        Some(cuts) => cut_choice(base, spans, cuts),
    };
    choice.plan = Some(plan);
    choice
}

/// The configurations the search chooses from (see the module docs), each with its measured
/// peak when the search already measured it; `none_peak` the measured peak of the step
/// without recomputation.
fn pool(
    base: &Base,
    options: &TrainingOptions,
    spans: &Spans,
    none_peak: u64,
    model: Option<&Model>,
) -> Result<BTreeMap<Vec<u32>, Option<u64>>, PlanError> {
    let n = last_cut(base);
    let mut pool: BTreeMap<Vec<u32>, Option<u64>> = BTreeMap::new();
    // The cheap policy alone.
    pool.insert(Vec::new(), None);
    for every in baselines(n) {
        pool.entry((0..n).filter(|p| (p + 1) % every == 0).collect())
            .or_insert(None);
    }
    let blocks = repeated_blocks(base);
    if !blocks.is_empty() {
        pool.entry(blocks.iter().copied().step_by(2).collect())
            .or_insert(None);
        pool.entry(blocks).or_insert(None);
    }
    pool.entry(after_expensive(base)).or_insert(None);
    // The dynamic program's answers at every budget of the ladder, and the configurations it
    // measured.
    let cands = candidates(base, spans, &options.plan.bindings, MAX_REMAKE_CANDIDATES);
    let cx = Context {
        base,
        options,
        spans,
        cands: &cands,
    };
    for (cuts, peak) in dp_ladder(&cx, none_peak)? {
        let slot = pool.entry(cuts).or_insert(None);
        *slot = slot.or(peak);
    }
    // The bound's programme's answers ([`super::bound`]): the fewest FLOPs under a memory
    // model never above the plan's, so each is the optimum wherever its plan fits: at a
    // ladder of budgets spanning all it reaches, independent of the budget asked (the walk
    // from the budget asked down joins them in [`auto`]).
    if let Some(model) = model {
        let hi = none_peak.saturating_add(model.outside());
        let least = model.least_budget();
        for k in 0..=MODEL_LADDER {
            let b = least.saturating_add(
                u64::try_from(
                    u128::from(hi.saturating_sub(least)) * u128::from(k) / u128::from(MODEL_LADDER),
                )
                .unwrap_or(u64::MAX),
            );
            if let Some((_, Some(cuts))) = model.least(b) {
                pool.entry(cuts).or_insert(None);
            }
        }
    }
    pool.retain(|cuts, _| cuts.iter().all(|&c| c < n));
    Ok(pool)
}

/// The configurations the dynamic program measured (with their measured peaks) and its
/// cuts at every budget of a ladder from the least it reaches to `hi` (see the module
/// docs).
fn dp_ladder(cx: &Context<'_>, hi: u64) -> Result<Vec<Config>, PlanError> {
    let m = cx.cands.len();
    // Index 0 is the start, 1..=m the candidates, m + 1 the end.
    let keep_of = |i: usize| {
        if i == 0 || i > m {
            0
        } else {
            cx.cands[i - 1].1
        }
    };
    let pos_of = |i: usize| {
        if i == 0 {
            None
        } else {
            cx.cands.get(i - 1).map(|c| c.0)
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
    let mut out: Vec<Config> = Vec::new();
    for (idx, costs) in configs.iter().zip(measured) {
        let mut bounds = vec![0usize];
        bounds.extend(idx.iter().copied());
        bounds.push(m + 1);
        record(&bounds, &costs, &keep_of, &mut seg);
        // Every measured configuration is a candidate too (the finest cuts reach the least
        // memory the segments show).
        out.push((
            idx.iter().filter_map(|&i| pos_of(i)).collect(),
            Some(costs.peak),
        ));
    }
    // The least budget the program reaches, by bisection.
    let (mut lo, mut top) = (0u64, hi.max(1));
    if dp(&seg, m, top, &keep_of, &pos_of).is_none() {
        return Ok(out);
    }
    while lo < top {
        let mid = lo + (top - lo) / 2;
        if dp(&seg, m, mid, &keep_of, &pos_of).is_some() {
            top = mid;
        } else {
            lo = mid + 1;
        }
    }
    let least = top;
    for k in 0..=LADDER {
        let b = least.saturating_add(
            u64::try_from(
                u128::from(hi.saturating_sub(least)) * u128::from(k) / u128::from(LADDER),
            )
            .unwrap_or(u64::MAX),
        );
        if let Some(cuts) = dp(&seg, m, b, &keep_of, &pos_of) {
            out.push((cuts, None));
        }
    }
    Ok(out)
}

/// The FLOPs [`Base::materialize`] recomputes for `keep`: the nodes that make again the
/// dropped tensors the backward reads, and the dropped tensors those read, each once (a
/// normalisation's output from kept statistics by its apply, one op per element).
pub(super) fn recompute_flops_of(
    base: &Base,
    keep: &IndexVec<TensorId, bool>,
    bindings: &Bindings,
) -> u64 {
    recomputed(base, keep, bindings).0
}

/// [`recompute_flops_of`], and the dropped tensors made again, in id order: two keeps
/// that make the same dropped tensors again materialize the same step (the nodes that run
/// again are their producers, each a normalisation's apply exactly when its statistics are
/// not among them and its output is).
pub(super) fn recomputed(
    base: &Base,
    keep: &IndexVec<TensorId, bool>,
    bindings: &Bindings,
) -> (u64, Vec<TensorId>) {
    let dropped = |t: TensorId| base.forward_made[t] && !keep.get(t).copied().unwrap_or(true);
    let roots: Vec<TensorId> = base
        .later
        .iter()
        .flat_map(|(n, _)| n.present_inputs())
        .filter(|&t| dropped(t))
        .collect();
    let mut made: IndexVec<TensorId, bool> = IndexVec::from_elem(false, base.graph.tensors().len());
    let flops = remake_walk(base, &dropped, &roots, &mut made, &mut Vec::new(), bindings);
    let made = made
        .iter_enumerated()
        .filter(|&(t, &m)| m && dropped(t))
        .map(|(t, _)| t)
        .collect();
    (flops, made)
}

/// The FLOPs of making `roots` again through the `dropped` tensors they need, each node
/// once (a normalisation's output from kept statistics by its apply, one op per element),
/// as [`Base::materialize`] remakes them: marks in `made` (and lists in `touched`) every
/// tensor made again.
pub(super) fn remake_walk(
    base: &Base,
    dropped: &dyn Fn(TensorId) -> bool,
    roots: &[TensorId],
    made: &mut IndexVec<TensorId, bool>,
    touched: &mut Vec<TensorId>,
    bindings: &Bindings,
) -> u64 {
    let g = &base.graph;
    let mut stack: Vec<TensorId> = roots.to_vec();
    let mut flops = 0u64;
    while let Some(t) = stack.pop() {
        if made[t] {
            continue;
        }
        let Some(p) = base.producer[t] else { continue };
        let node = g.node(p);
        let apply = super::cut::normalization_apply(node).filter(|(_, _, stats)| {
            node.outputs.first() == Some(&t)
                && stats
                    .iter()
                    .all(|&o| node.outputs.get(o).is_some_and(|&s| !dropped(s)))
        });
        match apply {
            Some((_, inputs, _)) => {
                made[t] = true;
                touched.push(t);
                flops = flops.saturating_add(g.tensor(t).elements(bindings).unwrap_or(0));
                stack.extend(
                    inputs
                        .iter()
                        .filter_map(|&i| node.inputs.get(i).copied().flatten())
                        .filter(|&x| dropped(x)),
                );
            }
            None => {
                for &o in &node.outputs {
                    if !made[o] {
                        made[o] = true;
                        touched.push(o);
                    }
                }
                flops = flops.saturating_add(super::flops::node_flops(g, node, bindings));
                stack.extend(node.present_inputs().filter(|&x| dropped(x)));
            }
        }
    }
    flops
}

/// Ops whose outputs are expensive to make again.
const EXPENSIVE: &[&str] = &[
    "Attention",
    "Conv",
    "ConvTranspose",
    "Einsum",
    "GRU",
    "Gemm",
    "LSTM",
    "MatMul",
    "RNN",
    "com.microsoft.Attention",
    "com.microsoft.FusedMatMul",
    "com.microsoft.GroupQueryAttention",
    "com.microsoft.MultiHeadAttention",
];

/// Cuts after every expensive forward op (what crosses them is kept: at least their
/// outputs, while they are read), so that only cheap ops run again.
fn after_expensive(base: &Base) -> Vec<u32> {
    let n = last_cut(base);
    base.graph
        .nodes()
        .iter_enumerated()
        .take(base.n_forward)
        .filter(|(id, node)| id.0 < n && EXPENSIVE.contains(&node.op.as_str()))
        .map(|(id, _)| id.0)
        .collect()
}

/// Cuts at the inputs of every repeated block of the forward: the run of ops (by op and
/// input count) of at least [`MIN_BLOCK`] nodes that repeats most, by the nodes its
/// non-overlapping occurrences cover (ties: more occurrences, then the earliest); a cut
/// right before each occurrence. Empty when no run repeats.
pub(super) fn repeated_blocks(base: &Base) -> Vec<u32> {
    let g = &base.graph;
    let n = base.n_forward;
    // Each node's kind as a small integer, in order of first appearance.
    let mut kinds: Vec<(String, usize)> = Vec::new();
    let seq: Vec<u64> = g
        .nodes()
        .iter()
        .take(n)
        .map(|node| {
            let key = (node.op.clone(), node.inputs.len());
            let k = kinds.iter().position(|x| *x == key).unwrap_or_else(|| {
                kinds.push(key);
                kinds.len() - 1
            });
            k as u64 + 1
        })
        .collect();
    let max_len = (n / 2).min(MAX_BLOCK);
    // (covered nodes, occurrences, -first start) of the best run, and its starts.
    let mut best: Option<((usize, usize, isize), Vec<usize>)> = None;
    const BASE: u64 = 1_000_003;
    for len in MIN_BLOCK..=max_len {
        // Rolling hashes of every window of `len` nodes.
        let mut pow: u64 = 1;
        for _ in 0..len {
            pow = pow.wrapping_mul(BASE);
        }
        let mut h: u64 = 0;
        let mut windows: Vec<(u64, usize)> = Vec::with_capacity(n);
        for (i, &k) in seq.iter().enumerate() {
            h = h.wrapping_mul(BASE).wrapping_add(k);
            if i >= len {
                h = h.wrapping_sub(seq[i - len].wrapping_mul(pow));
            }
            if i + 1 >= len {
                windows.push((h, i + 1 - len));
            }
        }
        windows.sort_unstable();
        let mut i = 0;
        while i < windows.len() {
            let mut j = i;
            while j < windows.len() && windows[j].0 == windows[i].0 {
                j += 1;
            }
            if j - i >= 2 {
                // Non-overlapping occurrences equal to the first (hashes may collide).
                let first = windows[i].1;
                let mut starts: Vec<usize> = Vec::new();
                for &(_, s) in &windows[i..j] {
                    let same = seq[s..s + len] == seq[first..first + len];
                    if same && starts.last().is_none_or(|&l| s >= l + len) {
                        starts.push(s);
                    }
                }
                if starts.len() >= 2 {
                    let key = (starts.len() * len, starts.len(), -(starts[0] as isize));
                    if best.as_ref().is_none_or(|(k, _)| key > *k) {
                        best = Some((key, starts));
                    }
                }
            }
            i = j;
        }
    }
    let last = last_cut(base);
    best.map(|(_, starts)| {
        starts
            .into_iter()
            .filter(|&s| s >= 1)
            .map(|s| (s - 1) as u32)
            .filter(|&c| c < last)
            .collect()
    })
    .unwrap_or_default()
}

/// The fewest nodes a repeated block has.
const MIN_BLOCK: usize = 3;
/// The most nodes a repeated block has.
const MAX_BLOCK: usize = 400;

/// What one search of [`auto`] works with.
struct Context<'a> {
    base: &'a Base,
    options: &'a TrainingOptions,
    spans: &'a Spans,
    /// Candidate cut positions and their crossing bytes.
    cands: &'a [(u32, u64)],
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
        .map_err(PlanError::in_graph(&d.graph))
}

/// Bytes of the graph inputs and outputs the options leave to the caller.
pub(super) fn caller_bytes(d: &Derived, options: &TrainingOptions) -> u64 {
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
pub(super) fn total_bytes(d: &Derived, plan: &Plan) -> u64 {
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
    use std::cell::Cell;
    use std::collections::BTreeSet;

    use memplan_ir::{DType, GraphBuilder};

    use super::*;
    use crate::step::{Checkpoint, Loss};

    thread_local! {
        /// The segments and the cap of [`Segmented`] on this thread, when a test sets them.
        pub(super) static WALK_CAPS: Cell<Option<(u64, usize)>> = const { Cell::new(None) };
        /// How many times a cap of [`Segmented`] cut a segment short on this thread.
        pub(super) static CAPPED: Cell<usize> = const { Cell::new(0) };
        /// Whether the pool holds only recomputing nothing on this thread (so that a
        /// configuration lowers the least).
        pub(super) static POOL_NONE_ONLY: Cell<bool> = const { Cell::new(false) };
    }

    /// Every configuration the segmented walk from `budget` meets, with `segments` segments
    /// capped at `per`.
    fn segmented(
        model: &Model,
        budget: u64,
        in_pool: &BTreeSet<&Vec<u32>>,
        segments: u64,
        per: usize,
    ) -> (Vec<(u64, Vec<u32>, u64)>, usize) {
        let mut walk = Segmented::with(model, budget, in_pool, segments, per);
        let mut out = Vec::new();
        while let Some(e) = walk.next(u64::MAX) {
            out.push(e);
        }
        // The same walk paused at every floor it reaches: the same configurations, none
        // below the floor promised before it.
        let mut paused = Segmented::with(model, budget, in_pool, segments, per);
        let (mut again, mut limit) = (Vec::new(), 0u64);
        loop {
            let promised = paused.floor;
            match paused.next(limit) {
                Some(e) => {
                    assert!(e.0 >= promised, "{e:?} below the floor {promised}");
                    again.push(e);
                }
                None if paused.floor == u64::MAX => break,
                None => {
                    assert!(paused.floor >= limit);
                    limit = paused.floor.saturating_add(1);
                }
            }
        }
        assert_eq!(again, out, "paused at {budget}");
        (out, walk.capped)
    }

    /// The walk of a budget is a function of its segment, it grows with the budget and
    /// passes into the walks of the segments below, with every cap binding or none; its
    /// configurations come in order of FLOPs with their model's figures; and where no cap
    /// binds, the programme's own answer at the budget is among them.
    #[test]
    fn the_segmented_walk_is_a_function_of_the_segment_and_grows_with_the_budget() {
        let (_, _, _, model) = super::super::bound::tests::skips_model(&mut PlanContext::new());
        let top = model.none_bytes();
        let lo = model.least_budget().saturating_sub(top / 64);
        let budgets: Vec<u64> = (0..=96u64)
            .map(|k| lo + (top + top / 64 - lo) * k / 96)
            .collect();
        let (all, _) = segmented(&model, top, &BTreeSet::new(), 1, usize::MAX);
        assert!(all.len() >= 3, "{}", all.len());
        // One of the top walk's configurations in the pool: passed over, never counted.
        let pooled: Vec<Vec<u32>> = vec![all[1].1.clone()];
        let in_pool: BTreeSet<&Vec<u32>> = pooled.iter().collect();
        for (segments, per) in [(3, 1), (8, 1), (16, 2), (WALK_SEGMENTS, WALK_PER_SEGMENT)] {
            let probe = Segmented::with(&model, 0, &in_pool, segments, per);
            let mut capped = 0;
            let walks: Vec<Vec<(u64, Vec<u32>, u64)>> = budgets
                .iter()
                .map(|&b| {
                    let (w, c) = segmented(&model, b, &in_pool, segments, per);
                    capped += c;
                    w
                })
                .collect();
            for (&b, w) in budgets.iter().zip(&walks) {
                let mut seen = BTreeSet::new();
                for pair in w.windows(2) {
                    assert!(
                        pair[0].0 <= pair[1].0,
                        "{segments}x{per} at {b}: FLOPs fall"
                    );
                }
                for (flops, cuts, bytes) in w {
                    assert_eq!(model.config(cuts), (*flops, *bytes));
                    assert!(!in_pool.contains(cuts) && seen.insert(cuts.clone()));
                }
                // Below the budget's segment: the walk of each lower anchor, exactly.
                let k = probe.segment_of(b);
                for j in (1..k).step_by(usize::try_from(k / 7).unwrap_or(1).max(1)) {
                    let a = probe.anchor(j);
                    let below: Vec<_> = w.iter().filter(|e| e.2 <= a).cloned().collect();
                    assert_eq!(below, segmented(&model, a, &in_pool, segments, per).0);
                }
            }
            for (i, pair) in budgets.windows(2).enumerate() {
                let (small, large) = (&walks[i], &walks[i + 1]);
                if probe.segment_of(pair[0]) == probe.segment_of(pair[1]) {
                    assert_eq!(small, large, "{segments}x{per}: {pair:?} in one segment");
                }
                for e in small {
                    assert!(large.contains(e), "{segments}x{per}: {e:?} at {pair:?}");
                }
            }
            if per == 1 {
                assert!(capped > 0, "{segments}x{per}: no cap binds");
            } else if capped == 0 {
                for (&b, w) in budgets.iter().zip(&walks) {
                    if let Some((f, Some(c))) = model.least(b)
                        && !in_pool.contains(&c)
                    {
                        assert!(w.contains(&(f, c.clone(), model.config(&c).1)), "at {b}");
                    }
                }
            }
        }
    }

    /// Residual blocks of MatMul, Tanh, a gate by an earlier block's output and Add: 80
    /// forward nodes, past the exact search, so that `auto` answers from its pool and the
    /// walk.
    fn long_blocks() -> memplan_ir::Graph {
        long_blocks_named("long_blocks")
    }

    /// [`long_blocks`] named `name` (the steps `auto` keeps are told apart by their graphs).
    fn long_blocks_named(name: &str) -> memplan_ir::Graph {
        let mut b = GraphBuilder::new(name);
        let mut x = b.input("x", DType::F32, [16, 32]);
        let mut made = vec![x];
        for j in 0..20 {
            let w = b.weight(format!("w{j}"), DType::F32, [32, 32]);
            let y = b.op("MatMul", &[x, w], DType::F32, [16, 32]);
            let a = b.op("Tanh", &[y], DType::F32, [16, 32]);
            let a = b.op("Mul", &[a, made[j / 2]], DType::F32, [16, 32]);
            x = b.op("Add", &[x, a], DType::F32, [16, 32]);
            made.push(x);
        }
        b.mark_output(x);
        b.build().unwrap()
    }

    /// `auto`'s answers at 25 budgets from the least it names to the step without
    /// recomputation never recompute more for more budget, each fits and passes the
    /// verifier: with every configuration of the walk outside the pool cut by the caps
    /// (the pool alone), with 3 segments of one configuration each, and as shipped, which
    /// never recomputes more than the pool alone. (The caps bind in
    /// [`the_segmented_walk_is_a_function_of_the_segment_and_grows_with_the_budget`].)
    #[test]
    fn answers_are_monotone_in_the_budget_with_any_caps() {
        let g = long_blocks();
        let options = |budget| TrainingOptions {
            loss: Loss::None,
            checkpoint: Checkpoint::Auto { budget },
            ..TrainingOptions::default()
        };
        let total = |s: &crate::step::TrainingStep| s.plan.device_bytes(&s.graph).unwrap().total;
        let mut pool_alone: Vec<u64> = Vec::new();
        for caps in [Some((3, 0)), Some((3, 1)), None] {
            WALK_CAPS.set(caps);
            CAPPED.set(0);
            let least = match crate::step::plan_training(&g, &options(0)) {
                Err(PlanError::BudgetTooSmall { minimum, .. }) => minimum,
                other => panic!("{:?}", other.map(|s| total(&s))),
            };
            let most = total(&crate::step::plan_training(&g, &options(u64::MAX)).unwrap());
            assert!(least < most);
            let mut last = u64::MAX;
            let mut answers = Vec::new();
            for k in 0..=24u64 {
                let budget = least + (most - least) * k * k / 576;
                let s = crate::step::plan_training(&g, &options(budget)).unwrap();
                crate::verify_plan(&s.graph, &s.plan).unwrap();
                assert!(total(&s) <= budget, "{caps:?} at {budget}");
                let f = s.summary.recompute.flops;
                assert!(f <= last, "{caps:?} at {budget}: {f} after {last}");
                last = f;
                answers.push((budget, f));
            }
            let distinct: BTreeSet<u64> = answers.iter().map(|a| a.1).collect();
            assert!(distinct.len() >= 4, "{caps:?}: {distinct:?}");
            if caps == Some((3, 0)) {
                pool_alone = answers.iter().map(|a| a.1).collect();
            } else if caps.is_none() {
                for (a, p) in answers.iter().zip(&pool_alone) {
                    assert!(a.1 <= *p, "at {}: {} above the pool's {p}", a.0, a.1);
                }
            }
        }
        WALK_CAPS.set(None);
    }

    /// With a pool of recomputing nothing alone, a configuration of the programme lowers the
    /// least; where it fits, no answer recomputes more than it (it belongs to the pool's
    /// order, though found only where it may come first).
    #[test]
    fn no_answer_recomputes_more_than_the_lowering_configuration_where_it_fits() {
        POOL_NONE_ONLY.set(true);
        let g = long_blocks_named("long_blocks_lowered");
        let options = |budget| TrainingOptions {
            loss: Loss::None,
            checkpoint: Checkpoint::Auto { budget },
            ..TrainingOptions::default()
        };
        let base = Base::new(&g, &options(0)).unwrap();
        let spans = spans(&base, &options(0).plan);
        let mut work = PlanContext::new();
        let prep = prepared(&base, &options(0), &mut work).unwrap();
        let of = Of {
            base: &base,
            options: &options(0),
            spans: &spans,
        };
        let pooled = prep.pooled(&of, &mut work).unwrap();
        let lowered = prep.lowered(&of, pooled, &mut work);
        let least = prep.pool_least(&of, pooled, &mut work);
        let mut answers = Vec::new();
        if let (Ok(Some((t, _, _))), Ok((least, _))) = (&lowered, &least) {
            // With the walk cut short (and as shipped), where it may not meet the lowering
            // configuration.
            for caps in [Some((2, 1)), Some((8, 1)), None] {
                WALK_CAPS.set(caps);
                for k in 0..10u64 {
                    let budget = t + (least - t) * k / 10;
                    let choice = auto(&base, &options(budget), budget);
                    answers.push((
                        budget,
                        choice.map(|c| {
                            // Its plan fits and passes the verifier.
                            let derived = base.materialize(&c.keep).unwrap();
                            let plan = c.plan.as_ref().unwrap();
                            crate::verify_plan(&derived.graph, plan).unwrap();
                            assert!(total_bytes(&derived, plan) <= budget);
                            recompute_flops_of(&base, &c.keep, &options(0).plan.bindings)
                        }),
                    ));
                }
            }
        }
        WALK_CAPS.set(None);
        POOL_NONE_ONLY.set(false);
        let (t, flops, _) = lowered.unwrap().expect("a lowering configuration");
        assert!(t < least.unwrap().0);
        assert_eq!(answers.len(), 30);
        for (budget, f) in answers {
            let f = f.unwrap();
            assert!(f <= flops, "at {budget}: {f} above {flops}");
        }
    }

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
        let spans = spans(&base, &options.plan);
        let cands = candidates(&base, &spans, &options.plan.bindings, MAX_REMAKE_CANDIDATES);
        let cx = Context {
            base: &base,
            options: &options,
            spans: &spans,
            cands: &cands,
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
