//! The memory model the ordering search works in: view groups, their sizes and readers.
//!
//! Views do not depend on the order, so each *group* (a storage root and every view inside
//! it) is fixed before the search. A group is allocated when its root is produced (graph
//! inputs: before the first step) and freed after the last node reading any of its members'
//! bytes has run ([`crate::liveness::byte_reads`], the rule lifetimes use too), unless it
//! holds a graph output (then it is pinned). With in-place writes on, an output may reuse
//! the group of an input whose every other reader has already run; that saves the output's
//! bytes during the step. The memory after a step depends only on the set of executed
//! nodes; the memory during a step also on the node run (and its workspace, for a node that
//! runs bodies). Which node may run when is the [`Deps`] model's business, not this one's.
//!
//! The model is used to *rank* orders. The order finally chosen is measured exactly by the
//! planner (the lower bound of its lifetimes with the chosen aliasing).

use memplan_ir::{Graph, IndexVec, NodeId, TensorId, TensorKind};

use super::deps::Deps;
use crate::aliasing::Aliases;
use crate::liveness::byte_reads;
use crate::options::PlanOptions;
use crate::regions::Regions;
use memplan_packing::align_up;

/// A set of executed nodes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct NodeSet(pub Vec<u64>);

impl NodeSet {
    pub fn new(n: usize) -> NodeSet {
        NodeSet(vec![0; n.div_ceil(64)])
    }

    pub fn contains(&self, i: u32) -> bool {
        self.0
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }

    pub fn insert(&mut self, i: u32) {
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            *w |= 1u64 << (i % 64);
        }
    }
}

/// The graph as the ordering search sees it; nodes and groups are plain `u32` indices into
/// the vectors here (nodes in graph order).
#[derive(Clone, Debug)]
pub(crate) struct Model {
    /// Which node may run after which: the one dependency model (see [`Deps`]).
    pub deps: Deps,
    group_size: Vec<u64>,
    /// Each group's bytes before alignment (what the lower bound of an order counts).
    group_bytes: Vec<u64>,
    /// The nodes reading each group's bytes, ascending, each once.
    group_consumers: Vec<Vec<u32>>,
    group_pinned: Vec<bool>,
    /// The node creating each group (`None`: a graph input, live before the first step).
    group_creator: Vec<Option<u32>>,
    /// Bytes live before the first step (graph inputs in the arena).
    pub initial: u64,
    creates: Vec<Vec<u32>>,
    input_groups: Vec<Vec<u32>>,
    /// Per node: (group the output creates, groups it may overwrite in place).
    inplace: Vec<Vec<(u32, Vec<u32>)>>,
    /// Per node: workspace bytes live during its step only (bodies it runs).
    workspace: Vec<u64>,
    /// Per node: a Concat whose inputs may be written into its output (Concat elision on),
    /// so that they need not be live beside it.
    concat: Vec<bool>,
    /// Per node: it has one output, of one element (XLA's "effective scalar").
    scalar: Vec<bool>,
    /// Per node: its rank among the node names in byte order (XLA's tie-break by name).
    name_rank: Vec<u32>,
}

impl Model {
    /// The model of `graph` with the view groups in `views` (aliasing computed with views
    /// only) and the dependencies `deps`.
    pub fn new(
        graph: &Graph,
        regions: &Regions,
        views: &Aliases,
        options: &PlanOptions,
        semantics: &IndexVec<NodeId, Vec<memplan_ir::MemorySemantics>>,
        workspace: &IndexVec<NodeId, u64>,
        deps: Deps,
    ) -> Model {
        let n_nodes = graph.nodes().len();
        let mut group_of: IndexVec<TensorId, Option<u32>> =
            IndexVec::from_elem(None, graph.tensors().len());
        let mut group_size = Vec::new();
        let mut group_bytes = Vec::new();
        let mut group_pinned = Vec::new();
        let mut group_root = Vec::new();
        for r in views.roots(regions) {
            group_of[r] = u32::try_from(group_size.len()).ok();
            let size = align_up(regions.bytes_of(r), regions.align[r]).unwrap_or(u64::MAX);
            group_size.push(size);
            group_bytes.push(regions.bytes_of(r));
            group_pinned.push(false);
            group_root.push(r);
        }
        for (t, &r) in views.root.iter_enumerated() {
            if regions.in_arena(t) {
                let g = group_of.get(r).copied().flatten();
                group_of[t] = g;
                if let (Some(g), Some(tensor)) = (g, graph.tensors().get(t))
                    && tensor.kind == TensorKind::Output
                    && let Some(p) = group_pinned.get_mut(g as usize)
                {
                    *p = true;
                }
            }
        }
        let mut group_consumers = vec![Vec::new(); group_size.len()];
        let mut input_groups = vec![Vec::new(); n_nodes];
        let mut creates = vec![Vec::new(); n_nodes];
        let mut inplace = vec![Vec::new(); n_nodes];
        for (n, node) in graph.nodes().iter_enumerated() {
            let ni = n.0 as usize;
            for t in byte_reads(node) {
                if let Some(g) = group_of.get(t).copied().flatten() {
                    if let Some(c) = group_consumers.get_mut(g as usize) {
                        c.push(n.0);
                    }
                    if let Some(ig) = input_groups.get_mut(ni) {
                        ig.push(g);
                    }
                }
            }
            let sems = semantics.get(n);
            for (j, &y) in node.outputs.iter().enumerate() {
                let Some(gy) = group_of.get(y).copied().flatten() else {
                    continue;
                };
                if group_root.get(gy as usize) != Some(&y) {
                    continue;
                }
                if let Some(c) = creates.get_mut(ni) {
                    c.push(gy);
                }
                let Some(memplan_ir::MemorySemantics::InPlace { inputs }) =
                    sems.and_then(|s| s.get(j))
                else {
                    continue;
                };
                if !options.inplace {
                    continue;
                }
                let mut cands = Vec::new();
                for &i in inputs {
                    let Some(x) = node.inputs.get(i).copied().flatten() else {
                        continue;
                    };
                    let Some(gx) = group_of.get(x).copied().flatten() else {
                        continue;
                    };
                    let ok = views.may_take_over(
                        graph,
                        regions,
                        node,
                        x,
                        y,
                        options.inplace_over_inputs,
                    );
                    if ok && !cands.contains(&gx) {
                        cands.push(gx);
                    }
                }
                if !cands.is_empty()
                    && let Some(ip) = inplace.get_mut(ni)
                {
                    ip.push((gy, cands));
                }
            }
        }
        for v in group_consumers.iter_mut().chain(input_groups.iter_mut()) {
            v.sort_unstable();
            v.dedup();
        }
        let mut group_creator: Vec<Option<u32>> = vec![None; group_size.len()];
        for (n, c) in (0u32..).zip(&creates) {
            for &g in c {
                if let Some(x) = group_creator.get_mut(g as usize) {
                    *x = Some(n);
                }
            }
        }
        let initial = group_size
            .iter()
            .zip(&group_creator)
            .filter(|(_, c)| c.is_none())
            .fold(0u64, |a, (&s, _)| a.saturating_add(s));
        let scalar = graph
            .nodes()
            .iter()
            .map(|node| {
                node.outputs.len() == 1
                    && node.outputs.iter().all(|&y| {
                        graph
                            .tensors()
                            .get(y)
                            .and_then(|t| t.elements(&options.bindings).ok())
                            == Some(1)
                    })
            })
            .collect();
        let mut by_name: Vec<u32> = (0..n_nodes as u32).collect();
        by_name.sort_by(|&a, &b| {
            let name = |i: u32| graph.nodes().get(NodeId(i)).map_or("", |n| n.name.as_str());
            name(a).cmp(name(b)).then(a.cmp(&b))
        });
        let mut name_rank = vec![0u32; n_nodes];
        for (rank, &i) in (0u32..).zip(&by_name) {
            if let Some(r) = name_rank.get_mut(i as usize) {
                *r = rank;
            }
        }
        Model {
            deps,
            group_size,
            group_bytes,
            group_consumers,
            group_pinned,
            group_creator,
            initial,
            creates,
            input_groups,
            inplace,
            workspace: workspace.as_slice().to_vec(),
            concat: graph
                .nodes()
                .iter()
                .map(|n| options.concat_elision && n.op == "Concat")
                .collect(),
            scalar,
            name_rank,
        }
    }

    /// The same model with node `old` renamed `new_of[old]` (`new_of` a permutation of
    /// the node indices): the algorithms that break ties by node index see another order
    /// of the same graph. Groups keep their indices; lists documented as ascending stay
    /// ascending; node names keep their ranks.
    pub fn renumbered(&self, new_of: &[u32]) -> Model {
        let n = self.len();
        let map = |m: u32| new_of.get(m as usize).copied().unwrap_or(m);
        let mut old_of = vec![0u32; n];
        for (old, &new) in (0u32..).zip(new_of) {
            if let Some(o) = old_of.get_mut(new as usize) {
                *o = old;
            }
        }
        let permute = |v: &[Vec<u32>], sort: bool| -> Vec<Vec<u32>> {
            old_of
                .iter()
                .map(|&o| {
                    let mut x: Vec<u32> = v
                        .get(o as usize)
                        .map_or(&[][..], Vec::as_slice)
                        .iter()
                        .map(|&m| map(m))
                        .collect();
                    if sort {
                        x.sort_unstable();
                    }
                    x
                })
                .collect()
        };
        Model {
            deps: Deps {
                preds: permute(&self.deps.preds, false),
                succs: permute(&self.deps.succs, true),
            },
            group_size: self.group_size.clone(),
            group_bytes: self.group_bytes.clone(),
            group_consumers: self
                .group_consumers
                .iter()
                .map(|c| {
                    let mut c: Vec<u32> = c.iter().map(|&m| map(m)).collect();
                    c.sort_unstable();
                    c
                })
                .collect(),
            group_pinned: self.group_pinned.clone(),
            group_creator: self.group_creator.iter().map(|c| c.map(map)).collect(),
            initial: self.initial,
            creates: old_of
                .iter()
                .map(|&o| self.creates.get(o as usize).cloned().unwrap_or_default())
                .collect(),
            input_groups: old_of
                .iter()
                .map(|&o| {
                    self.input_groups
                        .get(o as usize)
                        .cloned()
                        .unwrap_or_default()
                })
                .collect(),
            inplace: old_of
                .iter()
                .map(|&o| self.inplace.get(o as usize).cloned().unwrap_or_default())
                .collect(),
            workspace: old_of
                .iter()
                .map(|&o| self.workspace.get(o as usize).copied().unwrap_or(0))
                .collect(),
            concat: old_of
                .iter()
                .map(|&o| self.concat.get(o as usize).copied().unwrap_or(false))
                .collect(),
            scalar: old_of
                .iter()
                .map(|&o| self.scalar.get(o as usize).copied().unwrap_or(false))
                .collect(),
            name_rank: old_of
                .iter()
                .map(|&o| self.name_rank.get(o as usize).copied().unwrap_or(u32::MAX))
                .collect(),
        }
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.deps.len()
    }

    /// The number of groups.
    pub fn groups(&self) -> usize {
        self.group_size.len()
    }

    /// Group `g`'s size in the arena (aligned).
    pub fn size(&self, g: u32) -> u64 {
        self.group_size[g as usize]
    }

    fn bytes(&self, g: u32) -> u64 {
        self.group_bytes[g as usize]
    }

    /// Whether group `g` holds a graph output (live to the end).
    pub fn pinned(&self, g: u32) -> bool {
        self.group_pinned[g as usize]
    }

    /// The nodes reading group `g`'s bytes, ascending.
    pub fn consumers(&self, g: u32) -> &[u32] {
        self.group_consumers
            .get(g as usize)
            .map_or(&[][..], Vec::as_slice)
    }

    /// The node creating group `g` (`None` for a graph input).
    pub fn creator(&self, g: u32) -> Option<u32> {
        self.group_creator.get(g as usize).copied().flatten()
    }

    /// The groups node `n` creates.
    pub fn creates(&self, n: u32) -> &[u32] {
        self.creates.get(n as usize).map_or(&[][..], Vec::as_slice)
    }

    /// The groups whose bytes node `n` reads, ascending.
    pub fn reads(&self, n: u32) -> &[u32] {
        self.input_groups
            .get(n as usize)
            .map_or(&[][..], Vec::as_slice)
    }

    /// Node `n`'s rank among the node names in byte order.
    pub fn name_rank(&self, n: u32) -> u32 {
        self.name_rank.get(n as usize).copied().unwrap_or(u32::MAX)
    }

    /// Whether node `n` is an effective scalar (one output of one element).
    pub fn scalar(&self, n: u32) -> bool {
        self.scalar.get(n as usize).copied().unwrap_or(false)
    }

    /// The bytes node `n` creates.
    pub fn created_bytes(&self, n: u32) -> u64 {
        self.creates(n)
            .iter()
            .fold(0u64, |a, &g| a.saturating_add(self.size(g)))
    }

    /// Whether group `g` outlives the step that creates it (someone reads it, or it holds an
    /// output); a group that does not is freed right after its step.
    pub fn outlives_creator(&self, g: u32) -> bool {
        self.pinned(g) || !self.consumers(g).is_empty()
    }

    /// What running `n` saves by writing in place, when `last(g)` says whether `n` is the
    /// last reader of group `g` still to run.
    pub fn saved(&self, n: u32, last: impl Fn(u32) -> bool) -> u64 {
        let mut saved: u64 = 0;
        let mut used: smallvec::SmallVec<[u32; 2]> = smallvec::SmallVec::new();
        for (gy, cands) in self.inplace.get(n as usize).map_or(&[][..], Vec::as_slice) {
            if let Some(&g) = cands
                .iter()
                .find(|&&g| !used.contains(&g) && !self.pinned(g) && last(g))
            {
                used.push(g);
                saved = saved.saturating_add(self.size(*gy).min(self.size(g)));
            }
        }
        saved
    }

    /// Node `n`'s workspace bytes (live during its step only).
    pub fn workspace(&self, n: u32) -> u64 {
        self.workspace.get(n as usize).copied().unwrap_or(0)
    }

    /// Running `n` with `live` bytes allocated, when `last(g)` says whether `n` is the last
    /// reader of group `g` still to run: `(bytes during the step, bytes after it)`.
    fn eval(&self, n: u32, live: u64, last: impl Fn(u32) -> bool) -> (u64, u64) {
        let mut created: u64 = 0;
        let mut freed: u64 = 0;
        for &g in self.creates(n) {
            created = created.saturating_add(self.size(g));
            if !self.outlives_creator(g) {
                freed = freed.saturating_add(self.size(g));
            }
        }
        for &g in self.reads(n) {
            if !self.pinned(g) && last(g) {
                freed = freed.saturating_add(self.size(g));
            }
        }
        let during = live
            .saturating_add(created)
            .saturating_sub(self.saved(n, &last))
            .saturating_add(self.workspace(n));
        let after = live.saturating_add(created).saturating_sub(freed);
        (during, after)
    }

    /// Running `n` after `done` with `live` bytes allocated: `(bytes during the step, bytes
    /// after it)`.
    pub fn step(&self, done: &NodeSet, live: u64, n: u32) -> (u64, u64) {
        self.eval(n, live, |g| {
            self.consumers(g)
                .iter()
                .all(|&m| m == n || done.contains(m))
        })
    }

    /// Bytes every topological order holds live at some moment, so no order's peak is
    /// lower (`order` only picks where to look; any order gives a valid bound):
    ///
    /// - the arena inputs before the first step, and the pinned groups (graph outputs)
    ///   after the last;
    /// - at each node, the groups it reads and creates, less the most its in-place writes
    ///   could save, plus its workspace (a Concat whose inputs may be elided counts its
    ///   output only);
    /// - at a node `v`, every group created by `v` or an ancestor of `v` (or live from the
    ///   start) and read by `v` or a descendant of `v` (or pinned): in any order it is
    ///   allocated before `v`'s step ends and freed after it. This is what makes the bound
    ///   see a training step's saved activations. A node unrelated to `v` that reads groups
    ///   made before `v` and makes groups read after it holds one side or the other during
    ///   `v`'s step: the smaller side counts (each group once per target). It is computed,
    ///   64 nodes at a time with
    ///   bit masks of ancestors and descendants, for the nodes at `order`'s highest steps
    ///   and a spread of others; groups a Concat may absorb are left out of it.
    pub fn order_free_bound(&self, order: &[NodeId]) -> u64 {
        let pinned: u64 = (0..self.group_size.len() as u32)
            .filter(|&g| self.pinned(g))
            .fold(0u64, |a, g| a.saturating_add(self.bytes(g)));
        let initial: u64 = (0..self.group_size.len() as u32)
            .filter(|&g| self.creator(g).is_none())
            .fold(0u64, |a, g| a.saturating_add(self.bytes(g)));
        let mut bound = initial.max(pinned);
        let mut touched: Vec<u32> = Vec::new();
        for n in 0..self.len() {
            touched.clear();
            if !self.concat[n] {
                touched.extend_from_slice(&self.input_groups[n]);
            }
            touched.extend_from_slice(&self.creates[n]);
            touched.sort_unstable();
            touched.dedup();
            let held = touched
                .iter()
                .fold(0u64, |a, &g| a.saturating_add(self.bytes(g)));
            let n = n as u32;
            bound = bound.max(
                held.saturating_sub(self.most_saved(n))
                    .saturating_add(self.workspace(n)),
            );
        }
        bound.max(self.held_across(&self.bound_targets(order)))
    }

    /// The most node `n`'s in-place writes could save during its step (unaligned bytes).
    fn most_saved(&self, n: u32) -> u64 {
        let mut used: smallvec::SmallVec<[u32; 2]> = smallvec::SmallVec::new();
        let mut saved: u64 = 0;
        for (gy, cands) in self.inplace.get(n as usize).map_or(&[][..], Vec::as_slice) {
            if let Some(&g) = cands
                .iter()
                .find(|&&g| !used.contains(&g) && !self.pinned(g))
            {
                used.push(g);
                saved = saved.saturating_add(self.bytes(*gy).min(self.bytes(g)));
            }
        }
        saved
    }

    /// Where to evaluate [`Model::held_across`]: the nodes at `order`'s 128 highest steps
    /// (during the step), then 64 more spread evenly over `order`, each once.
    fn bound_targets(&self, order: &[NodeId]) -> Vec<u32> {
        let mut sim = Sim::new(self);
        let mut steps: Vec<(u64, usize)> = order
            .iter()
            .enumerate()
            .map(|(i, n)| (sim.run(n.0).0, i))
            .collect();
        steps.sort_by_key(|&(during, i)| (std::cmp::Reverse(during), i));
        let mut targets: Vec<u32> = steps
            .iter()
            .take(128)
            .filter_map(|&(_, i)| order.get(i).map(|n| n.0))
            .collect();
        let stride = (order.len() / 64).max(1);
        targets.extend(order.iter().step_by(stride).take(64).map(|n| n.0));
        let mut seen = vec![false; self.len()];
        targets.retain(|&t| match seen.get_mut(t as usize) {
            Some(s) if !*s => {
                *s = true;
                true
            }
            _ => false,
        });
        targets
    }

    /// The largest, over `targets`, of the bytes every order holds during the target's step
    /// (see [`Model::order_free_bound`]).
    fn held_across(&self, targets: &[u32]) -> u64 {
        let n = self.len();
        let topo = self.deps.topological();
        if topo.len() != n {
            return 0;
        }
        // Groups a Concat may absorb share its output's bytes: left out.
        let mut absorbed = vec![false; self.group_size.len()];
        for (c, groups) in self.input_groups.iter().enumerate() {
            if self.concat.get(c) == Some(&true) {
                for &g in groups {
                    absorbed[g as usize] = true;
                }
            }
        }
        let mut best: u64 = 0;
        let mut anc = vec![0u64; n];
        let mut desc = vec![0u64; n];
        // Per group, the targets of this block whose sum already holds it.
        let mut used = vec![0u64; self.group_size.len()];
        for block in targets.chunks(64) {
            anc.iter_mut().for_each(|a| *a = 0);
            desc.iter_mut().for_each(|d| *d = 0);
            for (i, &t) in block.iter().enumerate() {
                anc[t as usize] |= 1u64 << i;
                desc[t as usize] |= 1u64 << i;
            }
            // anc[u]: the targets `u` is an ancestor of (or is); desc[u]: the targets `u`
            // descends from (or is).
            for &u in topo.iter().rev() {
                let mut m = anc[u as usize];
                for &s in &self.deps.succs[u as usize] {
                    m |= anc[s as usize];
                }
                anc[u as usize] = m;
            }
            for &u in &topo {
                let mut m = desc[u as usize];
                for &p in &self.deps.preds[u as usize] {
                    m |= desc[p as usize];
                }
                desc[u as usize] = m;
            }
            let mut sums = [0u64; 64];
            // Per group, the targets at which it is made by an ancestor (or the target) and
            // read by a descendant (or the target).
            let made_of = |g: u32| self.creator(g).map_or(u64::MAX, |c| anc[c as usize]);
            let read_of = |g: u32| {
                if self.pinned(g) {
                    u64::MAX
                } else {
                    self.consumers(g)
                        .iter()
                        .fold(0u64, |m, &c| m | desc[c as usize])
                }
            };
            for g in 0..self.group_size.len() as u32 {
                if absorbed[g as usize] {
                    continue;
                }
                add_at(&mut sums, made_of(g) & read_of(g), self.bytes(g));
            }
            // A node `c` unrelated to the target that reads groups made before it and makes
            // groups read after it: in any order either `c` has not run (its inputs are
            // live) or it has (its outputs are). The smaller side counts, each group at most
            // once per target.
            used.iter_mut().for_each(|u| *u = 0);
            let all = if block.len() == 64 {
                u64::MAX
            } else {
                (1u64 << block.len()) - 1
            };
            for &c in &topo {
                let apart = all & !(anc[c as usize] | desc[c as usize]);
                if apart == 0 {
                    continue;
                }
                let ins: Vec<(u32, u64)> = self.input_groups[c as usize]
                    .iter()
                    .filter(|&&g| !absorbed[g as usize])
                    .map(|&g| (g, apart & made_of(g) & !read_of(g)))
                    .filter(|&(_, m)| m != 0)
                    .collect();
                let outs: Vec<(u32, u64)> = self.creates[c as usize]
                    .iter()
                    .filter(|&&g| !absorbed[g as usize])
                    .map(|&g| (g, apart & read_of(g)))
                    .filter(|&(_, m)| m != 0)
                    .collect();
                let mut targets =
                    ins.iter().fold(0u64, |m, x| m | x.1) & outs.iter().fold(0u64, |m, x| m | x.1);
                while targets != 0 {
                    let i = targets.trailing_zeros();
                    targets &= targets - 1;
                    let bit = 1u64 << i;
                    let side = |side: &[(u32, u64)], used: &[u64]| {
                        side.iter()
                            .filter(|&&(g, m)| m & bit != 0 && used[g as usize] & bit == 0)
                            .fold(0u64, |a, &(g, _)| a.saturating_add(self.bytes(g)))
                    };
                    let (i_bytes, o_bytes) = (side(&ins, &used), side(&outs, &used));
                    if i_bytes == 0 || o_bytes == 0 {
                        continue;
                    }
                    for &(g, m) in ins.iter().chain(&outs) {
                        if m & bit != 0 {
                            used[g as usize] |= bit;
                        }
                    }
                    sums[i as usize] = sums[i as usize].saturating_add(i_bytes.min(o_bytes));
                }
            }
            for (i, &t) in block.iter().enumerate() {
                let held = sums[i]
                    .saturating_sub(self.most_saved(t))
                    .saturating_add(self.workspace(t));
                best = best.max(held);
            }
        }
        best
    }

    /// The model's peak for a whole order (given as graph node ids).
    pub fn peak(&self, order: &[NodeId]) -> u64 {
        let mut sim = Sim::new(self);
        for &n in order {
            sim.run(n.0);
        }
        sim.peak
    }
}

/// Adds `bytes` to `sums[i]` for every bit `i` of `mask`.
fn add_at(sums: &mut [u64; 64], mut mask: u64, bytes: u64) {
    while mask != 0 {
        let i = mask.trailing_zeros() as usize;
        sums[i] = sums[i].saturating_add(bytes);
        mask &= mask - 1;
    }
}

/// Runs nodes one at a time, keeping per group the count of its readers still to run, so a
/// step costs the node's degree.
#[derive(Clone, Debug)]
pub(crate) struct Sim<'m> {
    model: &'m Model,
    remaining: Vec<u32>,
    /// Bytes live now.
    pub live: u64,
    /// The most bytes live at any step so far.
    pub peak: u64,
}

impl<'m> Sim<'m> {
    /// Before the first step.
    pub fn new(model: &'m Model) -> Sim<'m> {
        Sim {
            model,
            remaining: model
                .group_consumers
                .iter()
                .map(|c| u32::try_from(c.len()).unwrap_or(u32::MAX))
                .collect(),
            live: model.initial,
            peak: model.initial,
        }
    }

    /// Readers of group `g` still to run.
    pub fn remaining(&self, g: u32) -> u32 {
        self.remaining.get(g as usize).copied().unwrap_or(0)
    }

    /// Running `n` next: `(bytes during the step, bytes after it)`.
    pub fn eval(&self, n: u32) -> (u64, u64) {
        self.model.eval(n, self.live, |g| self.remaining(g) == 1)
    }

    /// Runs `n`; returns `(bytes during the step, bytes after it)`.
    pub fn run(&mut self, n: u32) -> (u64, u64) {
        let (during, after) = self.eval(n);
        for &g in self.model.reads(n) {
            if let Some(r) = self.remaining.get_mut(g as usize) {
                *r = r.saturating_sub(1);
            }
        }
        self.live = after;
        self.peak = self.peak.max(during);
        (during, after)
    }
}
