//! The dependency model every ordering algorithm goes through.
//!
//! A node runs after every node whose output it reads (data edges: it needs the value, even
//! when it reads only the tensor's shape) and after every node an *order constraint* puts
//! before it. The portfolio's algorithms, the search over executed sets and local
//! improvement read `preds` and `succs` from here and from nothing else, and [`choose`]
//! keeps only orders that respect them, so a rule that restricts reordering is added in one
//! place: [`order_constraints`].
//!
//! Nodes are `u32` indices in graph order. `preds[n]` lists `n`'s data predecessors in the
//! order of its inputs (each once), then its constraint predecessors; `succs[n]` is
//! ascending. There are no self edges and no duplicates.
//!
//! [`choose`]: super::choose

use memplan_ir::{Graph, NodeId, OpTable};

/// Predecessors and successors of every node.
#[derive(Clone, Debug, Default)]
pub(crate) struct Deps {
    pub preds: Vec<Vec<u32>>,
    pub succs: Vec<Vec<u32>>,
}

impl Deps {
    /// The data edges of `graph` plus `constraints` (pairs `(before, after)`; pairs naming
    /// no node, or a node twice, are ignored).
    pub fn new(graph: &Graph, constraints: &[(NodeId, NodeId)]) -> Deps {
        let n = graph.nodes().len();
        let producers = graph.producers();
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (id, node) in graph.nodes().iter_enumerated() {
            let Some(ps) = preds.get_mut(id.0 as usize) else {
                continue;
            };
            for t in node.present_inputs() {
                if let Some(p) = producers.get(t).copied().flatten()
                    && p != id
                    && !ps.contains(&p.0)
                {
                    ps.push(p.0);
                }
            }
        }
        for &(before, after) in constraints {
            if before != after
                && (before.0 as usize) < n
                && let Some(ps) = preds.get_mut(after.0 as usize)
                && !ps.contains(&before.0)
            {
                ps.push(before.0);
            }
        }
        let mut succs: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (i, ps) in (0u32..).zip(&preds) {
            for &p in ps {
                if let Some(s) = succs.get_mut(p as usize) {
                    s.push(i);
                }
            }
        }
        Deps { preds, succs }
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.preds.len()
    }

    /// A topological order (Kahn's algorithm, smallest index first); shorter than the
    /// node count only if the edges have a cycle.
    pub fn topological(&self) -> Vec<u32> {
        let mut waiting: Vec<usize> = self.preds.iter().map(Vec::len).collect();
        let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<u32>> = (0u32..)
            .zip(&waiting)
            .filter(|&(_, &w)| w == 0)
            .map(|(i, _)| std::cmp::Reverse(i))
            .collect();
        let mut order = Vec::with_capacity(self.len());
        while let Some(std::cmp::Reverse(m)) = heap.pop() {
            order.push(m);
            for &s in self.succs.get(m as usize).map_or(&[][..], Vec::as_slice) {
                if let Some(w) = waiting.get_mut(s as usize) {
                    *w = w.saturating_sub(1);
                    if *w == 0 {
                        heap.push(std::cmp::Reverse(s));
                    }
                }
            }
        }
        order
    }

    /// Whether `order` runs every node once, each after all of its predecessors.
    pub fn respects(&self, order: &[NodeId]) -> bool {
        if order.len() != self.len() {
            return false;
        }
        let mut done = vec![false; self.len()];
        for &n in order {
            let i = n.0 as usize;
            let ready = self
                .preds
                .get(i)
                .is_some_and(|ps| ps.iter().all(|&p| done.get(p as usize) == Some(&true)));
            match done.get_mut(i) {
                Some(d) if ready && !*d => *d = true,
                _ => return false,
            }
        }
        true
    }
}

/// Pairs `(before, after)` of nodes whose relative order no reordering may change, beyond
/// the data edges: for every node that writes a tensor in place while it stays live (an
/// optimizer step, a gradient accumulator: [`crate::mutation`]) and every other reader of
/// that tensor, the pair that keeps the reader on the side of the write it has in node
/// order. Other in-place writes only take over an input nobody reads later, which the memory
/// model decides per order, so they add nothing here.
pub(crate) fn order_constraints(graph: &Graph, table: &OpTable) -> Vec<(NodeId, NodeId)> {
    crate::mutation::order_edges(graph, table)
}
