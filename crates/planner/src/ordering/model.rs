//! The memory model the ordering search works in: view groups, their sizes and consumers.
//!
//! Views do not depend on the order, so each *group* (a storage root and every view inside
//! it) is fixed before the search. A group is allocated when its root is produced (graph
//! inputs: before the first step) and freed after the last node reading any of its members
//! has run, unless it holds a graph output (then it is pinned). With in-place writes on, an
//! output may reuse the group of an input whose every other reader has already run; that
//! saves the output's bytes during the step. The memory after a step depends only on the set
//! of executed nodes; the memory during a step also on the node run (and its workspace, for
//! a node that runs bodies).
//!
//! The model is used to *rank* orders. The order finally chosen is measured exactly by the
//! planner (the lower bound of its lifetimes with the chosen aliasing).

use memplan_ir::{Graph, IndexVec, NodeId, TensorId, TensorKind};

use crate::aliasing::Aliases;
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
    pub preds: Vec<Vec<u32>>,
    pub succs: Vec<Vec<u32>>,
    group_size: Vec<u64>,
    /// Each group's bytes before alignment (what the lower bound of an order counts).
    group_bytes: Vec<u64>,
    group_consumers: Vec<Vec<u32>>,
    group_pinned: Vec<bool>,
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
}

impl Model {
    /// The model of `graph` with the view groups in `views` (aliasing computed with views
    /// only).
    pub fn new(
        graph: &Graph,
        regions: &Regions,
        views: &Aliases,
        options: &PlanOptions,
        semantics: &IndexVec<NodeId, Vec<memplan_ir::MemorySemantics>>,
        workspace: &IndexVec<NodeId, u64>,
    ) -> Model {
        let n_nodes = graph.nodes().len();
        let producers = graph.producers();
        let mut preds = vec![Vec::new(); n_nodes];
        let mut succs = vec![Vec::new(); n_nodes];
        for (n, node) in graph.nodes().iter_enumerated() {
            for t in node.present_inputs() {
                if let Some(p) = producers.get(t).copied().flatten()
                    && let (Some(ps), Some(ss)) =
                        (preds.get_mut(n.0 as usize), succs.get_mut(p.0 as usize))
                {
                    ps.push(p.0);
                    ss.push(n.0);
                }
            }
        }
        for v in preds.iter_mut().chain(succs.iter_mut()) {
            v.sort_unstable();
            v.dedup();
        }

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
            // A read of only the shape (Shape, Size) does not keep the bytes alive.
            for t in memplan_ir::data_inputs(node) {
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
        let mut initial: u64 = 0;
        let produced: Vec<bool> = {
            let mut p = vec![false; group_size.len()];
            for c in &creates {
                for &g in c {
                    if let Some(x) = p.get_mut(g as usize) {
                        *x = true;
                    }
                }
            }
            p
        };
        for (g, &size) in group_size.iter().enumerate() {
            if !produced[g] {
                initial = initial.saturating_add(size);
            }
        }
        Model {
            preds,
            succs,
            group_size,
            group_bytes,
            group_consumers,
            group_pinned,
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
        }
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.preds.len()
    }

    fn size(&self, g: u32) -> u64 {
        self.group_size[g as usize]
    }

    fn bytes(&self, g: u32) -> u64 {
        self.group_bytes[g as usize]
    }

    fn pinned(&self, g: u32) -> bool {
        self.group_pinned[g as usize]
    }

    /// Whether every reader of group `g` other than `n` is in `done`.
    fn others_done(&self, g: u32, n: u32, done: &NodeSet) -> bool {
        self.group_consumers
            .get(g as usize)
            .is_some_and(|c| c.iter().all(|&m| m == n || done.contains(m)))
    }

    /// Running `n` after `done` with `live` bytes allocated: `(bytes during the step, bytes
    /// after it)`.
    pub fn step(&self, done: &NodeSet, live: u64, n: u32) -> (u64, u64) {
        let ni = n as usize;
        let mut created: u64 = 0;
        let mut freed: u64 = 0;
        for &g in self.creates.get(ni).map_or(&[][..], Vec::as_slice) {
            created = created.saturating_add(self.size(g));
            if !self.pinned(g)
                && self
                    .group_consumers
                    .get(g as usize)
                    .is_none_or(Vec::is_empty)
            {
                freed = freed.saturating_add(self.size(g));
            }
        }
        let mut saved: u64 = 0;
        let mut used: smallvec::SmallVec<[u32; 2]> = smallvec::SmallVec::new();
        for (gy, cands) in self.inplace.get(ni).map_or(&[][..], Vec::as_slice) {
            if let Some(&g) = cands
                .iter()
                .find(|&&g| !used.contains(&g) && !self.pinned(g) && self.others_done(g, n, done))
            {
                used.push(g);
                saved = saved.saturating_add(self.size(*gy).min(self.size(g)));
            }
        }
        for &g in self.input_groups.get(ni).map_or(&[][..], Vec::as_slice) {
            if !self.pinned(g) && self.others_done(g, n, done) {
                freed = freed.saturating_add(self.size(g));
            }
        }
        let during = live
            .saturating_add(created)
            .saturating_sub(saved)
            .saturating_add(self.workspace[ni]);
        let after = live.saturating_add(created).saturating_sub(freed);
        (during, after)
    }

    /// Bytes every topological order holds live at some moment, so no order's peak is
    /// lower: the largest of the arena inputs before the first step, the pinned groups
    /// (graph outputs) after the last, and for each node the groups it reads and creates
    /// during its step, less the most its in-place writes could save, plus its workspace (a
    /// Concat whose inputs may be elided counts its output only).
    pub fn order_free_bound(&self) -> u64 {
        let pinned: u64 = (0..self.group_size.len() as u32)
            .filter(|&g| self.pinned(g))
            .fold(0u64, |a, g| a.saturating_add(self.bytes(g)));
        let mut produced = vec![false; self.group_bytes.len()];
        for &g in self.creates.iter().flatten() {
            produced[g as usize] = true;
        }
        let initial: u64 = self
            .group_bytes
            .iter()
            .zip(&produced)
            .filter(|&(_, &p)| !p)
            .fold(0u64, |a, (&b, _)| a.saturating_add(b));
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
            let mut used: smallvec::SmallVec<[u32; 2]> = smallvec::SmallVec::new();
            let mut saved: u64 = 0;
            for (gy, cands) in &self.inplace[n] {
                if let Some(&g) = cands
                    .iter()
                    .find(|&&g| !used.contains(&g) && !self.pinned(g))
                {
                    used.push(g);
                    saved = saved.saturating_add(self.bytes(*gy).min(self.bytes(g)));
                }
            }
            bound = bound.max(held.saturating_sub(saved).saturating_add(self.workspace[n]));
        }
        bound
    }

    /// The model's peak for a whole order (given as graph node ids).
    pub fn peak(&self, order: &[NodeId]) -> u64 {
        let mut done = NodeSet::new(self.len());
        let mut live = self.initial;
        let mut peak = live;
        for &n in order {
            let (during, after) = self.step(&done, live, n.0);
            peak = peak.max(during);
            live = after;
            done.insert(n.0);
        }
        peak
    }
}
