//! Local improvement of an order: move a node, or a chain of nodes, to the earliest or
//! latest step that lowers the model's peak, and repeat until no move gains.
//!
//! The profile (bytes during each step, and after the last one) lives in a segment tree
//! ([`Profile`]). Moving node `v` from step `p` to a later step `q` (at most the step
//! before its first successor) changes the profile only between `p` and `q`: the steps it
//! jumps over lose its outputs and hold its inputs longer where it becomes their last
//! reader; a node there that was the last reader of one of them may lose its in-place
//! write. Moving it earlier (no earlier than the step after its last predecessor) is the
//! mirror image. So a move is tried as a few range adds on the tree, read as the new
//! maximum, and undone; only a move that pays rewrites the steps it spans.
//!
//! A move pays when it lowers the peak, or keeps it and lowers the number of steps at the
//! peak. Per node the targets are the extremes of its window and the steps just past (or
//! just before) the last (first) peak step in it; only nodes whose window holds a peak step
//! are tried. A node whose move alone does not pay is tried again with the nodes that only
//! feed it (a convert feeding a matmul: when the matmul moves later they come along and run
//! right before it), or, moving earlier, with the nodes that only it feeds.
//!
//! Passes over the nodes in step order repeat until one gains nothing or the work budget
//! (a count of tree operations, nodes visited and steps rewritten) is spent, so the result
//! depends only on the input.

use memplan_ir::NodeId;

use super::model::Model;
use super::profile::{ABSENT, Profile};

/// The largest chain moved with one node.
const MAX_CHAIN: usize = 8;

/// Improves `order` (a topological order of `model`'s nodes) within `budget` units of
/// work; returns the improved order and the number of moves made.
pub(crate) fn improve(model: &Model, order: &[NodeId], budget: u64) -> (Vec<NodeId>, u32) {
    let mut s = Local::new(model, order);
    let mut moves = 0u32;
    'passes: loop {
        let mut gained = false;
        let nodes = s.order.clone();
        for v in nodes {
            if s.work > budget {
                break 'passes;
            }
            if s.try_node(v) {
                gained = true;
                moves += 1;
            }
        }
        if !gained {
            break;
        }
    }
    (s.order.iter().map(|&n| NodeId(n)).collect(), moves)
}

/// A move worked out before it is made.
#[derive(Clone, Debug, Default)]
struct Move {
    node: u32,
    from: usize,
    to: usize,
    /// Range adds over the steps in between, in current positions.
    adds: Vec<(usize, usize, i128)>,
    /// New step terms (`created - saved + workspace`) of other nodes: (position, node, term).
    terms: Vec<(usize, u32, i128)>,
    /// The moved node's value at its new step, and its new term.
    value: i128,
    term: i128,
    /// Groups whose last reader changes: (group, new last reader).
    last: Vec<(u32, u32)>,
}

struct Local<'m> {
    model: &'m Model,
    n: usize,
    order: Vec<u32>,
    pos: Vec<usize>,
    /// Per group, the reader that runs last (`None`: nobody reads it).
    last_reader: Vec<Option<u32>>,
    /// Per node, `created - saved + workspace` at its current step.
    term: Vec<i128>,
    /// Position `i < n`: bytes during step `i`; position `n`: bytes after the last step.
    profile: Profile,
    work: u64,
}

impl<'m> Local<'m> {
    fn new(model: &'m Model, order: &[NodeId]) -> Local<'m> {
        let n = order.len();
        let order: Vec<u32> = order.iter().map(|n| n.0).collect();
        let mut pos = vec![0usize; model.len()];
        for (i, &m) in order.iter().enumerate() {
            if let Some(p) = pos.get_mut(m as usize) {
                *p = i;
            }
        }
        let last_reader: Vec<Option<u32>> = (0..model.groups() as u32)
            .map(|g| {
                model
                    .consumers(g)
                    .iter()
                    .copied()
                    .max_by_key(|&c| pos[c as usize])
            })
            .collect();
        let mut s = Local {
            model,
            n,
            order,
            pos,
            last_reader,
            term: vec![0; model.len()],
            profile: Profile::new(&[]),
            work: 0,
        };
        for i in 0..n {
            let m = s.order[i];
            let term = s.term_of(m, |g| s.is_last(g, m));
            s.term[m as usize] = term;
        }
        // Live bytes before each step (position n: after the last step).
        let mut delta = vec![0i128; n + 2];
        for g in 0..model.groups() as u32 {
            let created = model.creator(g).is_some();
            if created && !model.outlives_creator(g) {
                continue;
            }
            let start = model.creator(g).map_or(0, |c| s.pos[c as usize] + 1);
            // A graph input nobody reads stays live throughout, as in the model.
            let end = if model.outlives_creator(g) {
                s.death(g) + 1
            } else {
                n + 1
            };
            if start < end {
                delta[start] += i128::from(model.size(g));
                delta[end.min(n + 1)] -= i128::from(model.size(g));
            }
        }
        let mut values = Vec::with_capacity(n + 1);
        let mut live: i128 = 0;
        for (i, d) in delta.iter().take(n + 1).enumerate() {
            live += d;
            values.push(live + s.order.get(i).map_or(0, |&m| s.term[m as usize]));
        }
        s.profile = Profile::new(&values);
        s.work = (n as u64).saturating_mul(2);
        s
    }

    /// The step after which group `g` (one that outlives its creator) is freed: its last
    /// reader's, or `n` for a pinned group.
    fn death(&self, g: u32) -> usize {
        if self.model.pinned(g) {
            return self.n;
        }
        self.last_reader
            .get(g as usize)
            .copied()
            .flatten()
            .map_or(0, |r| self.pos[r as usize])
    }

    fn is_last(&self, g: u32, m: u32) -> bool {
        !self.model.pinned(g) && self.last_reader.get(g as usize).copied().flatten() == Some(m)
    }

    fn term_of(&self, m: u32, last: impl Fn(u32) -> bool) -> i128 {
        i128::from(self.model.created_bytes(m)) - i128::from(self.model.saved(m, last))
            + i128::from(self.model.workspace(m))
    }

    /// Live bytes before step `i` (`i == n`: after the last step).
    fn live_before(&mut self, i: usize) -> i128 {
        let v = self.profile.get(i);
        v - self.order.get(i).map_or(0, |&m| self.term[m as usize])
    }

    /// The steps `m` may move to: after its last predecessor, before its first successor.
    fn window(&self, m: u32) -> (usize, usize) {
        let deps = &self.model.deps;
        let lo = deps
            .preds
            .get(m as usize)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|&p| self.pos[p as usize] + 1)
            .max()
            .unwrap_or(0);
        let hi = deps
            .succs
            .get(m as usize)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|&s| self.pos[s as usize])
            .min()
            .unwrap_or(self.n)
            .saturating_sub(1);
        (lo, hi)
    }

    /// Works out moving `v` to step `q` (inside its window, not its own step).
    fn plan(&mut self, v: u32, q: usize) -> Move {
        let model = self.model;
        let p = self.pos[v as usize];
        let mut mv = Move {
            node: v,
            from: p,
            to: q,
            ..Move::default()
        };
        let outliving: i128 = model
            .creates(v)
            .iter()
            .filter(|&&g| model.outlives_creator(g))
            .map(|&g| i128::from(model.size(g)))
            .sum();
        let mut v_last: Vec<u32> = Vec::new();
        // Nodes whose last-reader status changes, with the group.
        let mut others: Vec<(u32, u32)> = Vec::new();
        self.work += 1 + model.reads(v).len() as u64;
        if q > p {
            let mut all: i128 = -outliving;
            let mut extended: i128 = 0;
            for &g in model.reads(v) {
                if model.pinned(g) {
                    continue;
                }
                let d = self.death(g);
                let size = i128::from(model.size(g));
                if d == p {
                    all += size;
                    extended += size;
                    v_last.push(g);
                } else if d <= q {
                    mv.adds.push((d + 1, q, size));
                    extended += size;
                    v_last.push(g);
                    others.push((self.order[d], g));
                    mv.last.push((g, v));
                }
            }
            mv.adds.push((p + 1, q, all));
            let before = self.live_before(q + 1) - outliving + extended;
            mv.term = self.term_of(v, |g| v_last.contains(&g));
            mv.value = before + mv.term;
        } else {
            let mut all: i128 = outliving;
            for &g in model.reads(v) {
                if model.pinned(g) || self.death(g) != p {
                    continue;
                }
                let size = i128::from(model.size(g));
                let consumers = model.consumers(g);
                self.work += consumers.len() as u64;
                let r = consumers
                    .iter()
                    .filter(|&&c| c != v)
                    .map(|&c| self.pos[c as usize])
                    .max();
                match r {
                    Some(r) if r >= q => {
                        mv.adds.push((r + 1, p - 1, -size));
                        others.push((self.order[r], g));
                        mv.last.push((g, self.order[r]));
                    }
                    _ => {
                        all -= size;
                        v_last.push(g);
                    }
                }
            }
            mv.adds.push((q, p - 1, all));
            let before = self.live_before(q);
            mv.term = self.term_of(v, |g| v_last.contains(&g));
            mv.value = before + mv.term;
        }
        others.sort_unstable();
        let mut i = 0;
        while let Some(&(r, _)) = others.get(i) {
            let groups: Vec<u32> = others
                .iter()
                .skip(i)
                .take_while(|o| o.0 == r)
                .map(|o| o.1)
                .collect();
            i += groups.len();
            let later = q > p;
            let term = self.term_of(r, |g| {
                if groups.contains(&g) {
                    !later
                } else {
                    self.is_last(g, r)
                }
            });
            if term != self.term[r as usize] {
                mv.terms.push((self.pos[r as usize], r, term));
            }
        }
        mv
    }

    fn apply_deltas(&mut self, mv: &Move, sign: i128) {
        for &(l, r, d) in &mv.adds {
            self.profile.add(l, r, sign * d);
        }
        for &(at, m, term) in &mv.terms {
            self.profile
                .add(at, at, sign * (term - self.term[m as usize]));
        }
        self.work += 2 * (mv.adds.len() + mv.terms.len()) as u64;
    }

    /// The peak and the number of steps at it if `mv` were made.
    fn evaluate(&mut self, mv: &Move) -> (i128, u32) {
        let old = self.profile.get(mv.from);
        self.apply_deltas(mv, 1);
        self.profile.assign(mv.from, &[ABSENT]);
        let (m, c) = self.profile.max();
        self.apply_deltas(mv, -1);
        self.profile.assign(mv.from, &[old]);
        match mv.value.cmp(&m) {
            std::cmp::Ordering::Greater => (mv.value, 1),
            std::cmp::Ordering::Equal => (m, c + 1),
            std::cmp::Ordering::Less => (m, c),
        }
    }

    /// Makes `mv`.
    fn make(&mut self, mv: &Move) {
        self.apply_deltas(mv, 1);
        let (p, q) = (mv.from, mv.to);
        let (lo, hi) = (p.min(q), p.max(q));
        let mut values = self.profile.values(lo, hi);
        if q > p {
            values.remove(0);
            values.push(mv.value);
            self.order[lo..=hi].rotate_left(1);
        } else {
            values.pop();
            values.insert(0, mv.value);
            self.order[lo..=hi].rotate_right(1);
        }
        self.profile.assign(lo, &values);
        for i in lo..=hi {
            let m = self.order[i];
            self.pos[m as usize] = i;
        }
        for &(_, m, term) in &mv.terms {
            self.term[m as usize] = term;
        }
        self.term[mv.node as usize] = mv.term;
        for &(g, r) in &mv.last {
            if let Some(slot) = self.last_reader.get_mut(g as usize) {
                *slot = Some(r);
            }
        }
        self.work += (hi - lo + 1) as u64;
    }

    /// Tries the moves of `v`; makes the best one that pays. Returns whether it moved.
    fn try_node(&mut self, v: u32) -> bool {
        let current = self.profile.max();
        let (peak, _) = current;
        let p = self.pos[v as usize];
        let (lo, hi) = self.window(v);
        self.work += 1;
        if lo.min(p) > hi.max(p) || self.profile.range_max(lo.min(p), hi.max(p)) < peak {
            return false;
        }
        let mut targets: Vec<usize> = Vec::with_capacity(4);
        if hi > p {
            targets.push(hi);
            if let Some(q) = self.profile.find(p + 1, hi, peak, true) {
                targets.push(q);
            }
        }
        if lo < p {
            targets.push(lo);
            if let Some(q) = self.profile.find(lo, p - 1, peak, false) {
                targets.push(q);
            }
        }
        targets.sort_unstable();
        targets.dedup();
        let mut best: Option<((i128, u32), Move)> = None;
        for &q in &targets {
            let mv = self.plan(v, q);
            let score = self.evaluate(&mv);
            if score < current && best.as_ref().is_none_or(|(b, _)| score < *b) {
                best = Some((score, mv));
            }
        }
        if let Some((_, mv)) = best {
            self.make(&mv);
            return true;
        }
        for &q in &targets {
            if self.try_chain(v, q, current) {
                return true;
            }
        }
        false
    }

    /// The nodes that may travel with `v` to step `q`, nearest first, at most
    /// [`MAX_CHAIN`]. Moving later: predecessors whose other successors all run after `q`
    /// (so they can run right before `v`), transitively. Moving earlier: successors whose
    /// other predecessors all run before `q`, transitively.
    fn chain(&mut self, v: u32, q: usize) -> Vec<u32> {
        let later = q > self.pos[v as usize];
        let deps = &self.model.deps;
        let (up, down) = if later {
            (&deps.preds, &deps.succs)
        } else {
            (&deps.succs, &deps.preds)
        };
        let mut chain: Vec<u32> = Vec::new();
        let mut frontier = vec![v];
        let mut checked: u64 = 0;
        while let Some(m) = frontier.pop() {
            for &u in up.get(m as usize).map_or(&[][..], Vec::as_slice) {
                if chain.len() >= MAX_CHAIN || chain.contains(&u) {
                    continue;
                }
                let free = down.get(u as usize).is_some_and(|d| {
                    d.iter().all(|&w| {
                        w == v
                            || chain.contains(&w)
                            || if later {
                                self.pos[w as usize] > q
                            } else {
                                self.pos[w as usize] < q
                            }
                    })
                });
                checked += 1;
                if free {
                    chain.push(u);
                    frontier.push(u);
                }
            }
        }
        self.work += checked;
        if later {
            chain.sort_by_key(|&u| std::cmp::Reverse(self.pos[u as usize]));
        } else {
            chain.sort_by_key(|&u| self.pos[u as usize]);
        }
        chain
    }

    /// Moves `v` to `q` with its chain packed beside it; keeps the result if it beats
    /// `current`, else undoes it.
    fn try_chain(&mut self, v: u32, q: usize, current: (i128, u32)) -> bool {
        let p = self.pos[v as usize];
        let later = q > p;
        let chain = self.chain(v, q);
        if chain.is_empty() {
            return false;
        }
        let mut done: Vec<(u32, usize, usize)> = Vec::with_capacity(chain.len() + 1);
        let mv = self.plan(v, q);
        self.make(&mv);
        done.push((v, p, q));
        for u in chain {
            let from = self.pos[u as usize];
            let (lo, hi) = self.window(u);
            let to = if later { hi } else { lo };
            if to == from || (later && to < from) || (!later && to > from) {
                continue;
            }
            let mv = self.plan(u, to);
            self.make(&mv);
            done.push((u, from, to));
        }
        if self.profile.max() < current {
            return true;
        }
        for &(m, from, to) in done.iter().rev() {
            debug_assert_eq!(self.pos[m as usize], to);
            let mv = self.plan(m, from);
            self.make(&mv);
        }
        false
    }
}

#[cfg(test)]
impl Local<'_> {
    /// The profile's peak, for tests.
    fn peak(&self) -> i128 {
        self.profile.max().0
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Rng, algorithms, models, random_graph};
    use super::*;

    /// The state `s` would have if built from scratch for its current order.
    fn assert_fresh(s: &mut Local<'_>, what: &str) {
        let order: Vec<NodeId> = s.order.iter().map(|&n| NodeId(n)).collect();
        let mut fresh = Local::new(s.model, &order);
        assert_eq!(
            s.profile.values(0, s.n),
            fresh.profile.values(0, s.n),
            "{what}"
        );
        assert_eq!(s.term, fresh.term, "{what}");
        for g in 0..s.model.groups() as u32 {
            if !s.model.consumers(g).is_empty() {
                assert_eq!(s.death(g), fresh.death(g), "{what}: group {g}");
            }
        }
        assert_eq!(s.peak(), i128::from(s.model.peak(&order)), "{what}");
    }

    /// Every move's evaluation equals the profile rebuilt after making it, and making it
    /// leaves the state a fresh build would have; undoing restores it.
    #[test]
    fn a_move_is_evaluated_exactly_and_made_exactly() {
        for seed in 1..=25 {
            let graph = random_graph(seed, 30);
            let mut rng = Rng(seed);
            for model in models(&graph) {
                for (name, f) in algorithms().into_iter().take(4) {
                    let order = f(&model);
                    let mut s = Local::new(&model, &order);
                    assert_fresh(&mut s, name);
                    for _ in 0..60 {
                        let v = s.order[rng.below(s.n as u64) as usize];
                        let p = s.pos[v as usize];
                        let (lo, hi) = s.window(v);
                        if lo >= hi {
                            continue;
                        }
                        let q = lo + rng.below((hi - lo + 1) as u64) as usize;
                        if q == p {
                            continue;
                        }
                        let mv = s.plan(v, q);
                        let predicted = s.evaluate(&mv);
                        assert_fresh(&mut s, "evaluation leaves no trace");
                        s.make(&mv);
                        assert_eq!(s.pos[v as usize], q);
                        assert_eq!(
                            s.profile.max(),
                            predicted,
                            "seed {seed} {name}: {v} {p}->{q}"
                        );
                        assert_fresh(&mut s, "after a move");
                        if rng.below(3) == 0 {
                            let back = s.plan(v, p);
                            s.make(&back);
                            assert_fresh(&mut s, "after undoing");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn chains_move_together_and_are_undone_when_they_do_not_pay() {
        for seed in 30..=45 {
            let graph = random_graph(seed, 30);
            for model in models(&graph) {
                let order = super::super::heuristics::breadth_first(&model);
                let mut s = Local::new(&model, &order);
                for i in 0..s.n {
                    let v = s.order[i];
                    let before = s.order.clone();
                    let current = s.profile.max();
                    let p = s.pos[v as usize];
                    let (lo, hi) = s.window(v);
                    for q in [lo, hi] {
                        if q == p || s.pos[v as usize] != p {
                            continue;
                        }
                        if s.try_chain(v, q, current) {
                            assert!(s.profile.max() < current);
                        } else {
                            assert_eq!(s.order, before, "seed {seed}: undone");
                        }
                        assert_fresh(&mut s, "after a chain");
                        assert!(
                            model
                                .deps
                                .respects(&s.order.iter().map(|&n| NodeId(n)).collect::<Vec<_>>())
                        );
                    }
                }
            }
        }
    }
}
