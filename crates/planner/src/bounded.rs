//! Plans at upper bounds: data-dependent sizes planned at their bounds must serve every
//! smaller value too.
//!
//! [`crate::PlanOptions::bounded`] names the symbols whose binding is an upper bound, not a
//! value (`memplan plan --bound`): at run time each is anything from 0 to it. A tensor whose
//! dims or element count mention one of them *varies*. Sizes need nothing more: a size is a
//! polynomial with no negative term in a bounded symbol (checked here: a size that could
//! grow as the symbol falls is [`PlanError::FallingSize`]), so the bytes placed at the bound
//! hold every smaller value. Places inside another tensor do need more, since they move
//! with the sizes before them (a Split chunk after a data-dependent chunk, a Slice `[-2:]` of
//! a data-dependent length, a Concat part after a data-dependent part). So, where a varying
//! tensor is involved, an alias is kept only when it is the same at every value:
//!
//! - a view: at offset 0, of a tensor with the same element count as a polynomial (a
//!   Reshape, Flatten, Squeeze, Unsqueeze, Identity or same-dtype Cast of all of it);
//! - an in-place write: over an input with the same element count as a polynomial;
//! - a Concat part: when the Concat's inputs agree with its output off the axis and the
//!   output's axis is their sum (as polynomials), the part's offset mentions no bounded
//!   symbol (the axis lengths before it and the dims after the axis are constants), and,
//!   when the output has more than one row, neither does the row's length (the stride
//!   between the part's runs: the output's axis and the dims after it).
//!
//! Everything else becomes a copy. The plan verifier checks such plans again at smaller
//! values (`verify_plan` re-sizes the buffers and checks the same offsets there).

use memplan_ir::{
    Attr, Expr, Graph, IndexVec, MemorySemantics, Node, NodeId, SymbolId, Tensor, TensorId,
};

use crate::error::PlanError;

/// Which tensors vary with a bounded symbol.
#[derive(Clone, Debug)]
pub(crate) struct Varying {
    symbols: Vec<SymbolId>,
    varies: IndexVec<TensorId, bool>,
}

fn mentions(e: &Expr, symbols: &[SymbolId]) -> bool {
    e.symbols().iter().any(|s| symbols.contains(s))
}

/// The element count as a polynomial (`None` if it overflows).
fn elements(t: &Tensor) -> Option<Expr> {
    t.elements_expr().ok()
}

impl Varying {
    /// The varying tensors of `graph` for the bounded symbols `bounded`; an error when a
    /// size could fall as a bounded symbol grows.
    pub fn new(graph: &Graph, bounded: &[SymbolId]) -> Result<Varying, PlanError> {
        let mut symbols = bounded.to_vec();
        symbols.sort_unstable();
        symbols.dedup();
        let mut varies = IndexVec::from_elem(false, graph.tensors().len());
        if symbols.is_empty() {
            return Ok(Varying { symbols, varies });
        }
        for (t, tensor) in graph.tensors().iter_enumerated() {
            let exprs = tensor.shape.iter().chain(tensor.element_count.as_ref());
            for e in exprs {
                if e.falls_with(&symbols) {
                    let symbol = e
                        .symbols()
                        .into_iter()
                        .find(|s| symbols.contains(s))
                        .and_then(|s| graph.symbols().get(s).cloned())
                        .unwrap_or_default();
                    return Err(PlanError::FallingSize {
                        tensor: t,
                        dim: e.display(graph.symbols()).to_string(),
                        symbol,
                    });
                }
                varies[t] |= mentions(e, &symbols);
            }
        }
        Ok(Varying { symbols, varies })
    }

    /// Whether no bounded symbol is involved at all.
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    fn varies(&self, t: TensorId) -> bool {
        self.varies.get(t).copied().unwrap_or(false)
    }

    /// Whether `x` and `y` hold the same number of elements for every value.
    fn same_count(graph: &Graph, x: TensorId, y: TensorId) -> bool {
        let (Some(xt), Some(yt)) = (graph.tensors().get(x), graph.tensors().get(y)) else {
            return false;
        };
        xt.dtype == yt.dtype && elements(xt).is_some_and(|e| Some(e) == elements(yt))
    }

    /// Drops from `semantics` every alias that a varying tensor could move (see the module
    /// docs).
    pub fn restrict(&self, graph: &Graph, semantics: &mut IndexVec<NodeId, Vec<MemorySemantics>>) {
        if self.is_empty() {
            return;
        }
        for n in graph.nodes().ids() {
            let (node, Some(sems)) = (graph.node(n), semantics.get_mut(n)) else {
                continue;
            };
            for (&y, sem) in node.outputs.iter().zip(sems.iter_mut()) {
                let input = |i: usize| node.inputs.get(i).copied().flatten();
                match sem {
                    MemorySemantics::View { input: i, offset } => {
                        let keep = input(*i).is_some_and(|x| {
                            !(self.varies(x) || self.varies(y))
                                || (*offset == 0 && Self::same_count(graph, x, y))
                        });
                        if !keep {
                            *sem = MemorySemantics::Opaque;
                        }
                    }
                    MemorySemantics::InPlace { inputs } => {
                        inputs.retain(|i| {
                            input(*i).is_some_and(|x| {
                                !(self.varies(x) || self.varies(y)) || Self::same_count(graph, x, y)
                            })
                        });
                        if inputs.is_empty() {
                            *sem = MemorySemantics::Opaque;
                        }
                    }
                    MemorySemantics::Opaque => {}
                }
            }
        }
    }

    /// Whether input `pos` of Concat `node` may be written into the output at the offset
    /// and row stride it has at the bounds: always when nothing of the Concat varies;
    /// otherwise when the output's shape is its inputs' as polynomials and neither the
    /// part's offset nor (with several rows) the output's row length mentions a bounded
    /// symbol.
    pub fn part_holds(&self, graph: &Graph, node: &Node, pos: usize) -> bool {
        let ids: Vec<TensorId> = node
            .inputs
            .iter()
            .flatten()
            .copied()
            .chain(node.outputs.first().copied())
            .collect();
        if ids.iter().all(|&t| !self.varies(t)) {
            return true;
        }
        let Some(y) = node.outputs.first().and_then(|&y| graph.tensors().get(y)) else {
            return false;
        };
        let rank = y.shape.len();
        let Some(axis) = node
            .attr("axis")
            .and_then(Attr::as_int)
            .and_then(|a| memplan_ir::axis_index(a, rank))
        else {
            return false;
        };
        let mut along = Expr::constant(0);
        let mut before = Expr::constant(0);
        for (k, x) in node.inputs.iter().enumerate() {
            let Some(xt) = x.and_then(|x| graph.tensors().get(x)) else {
                return false;
            };
            if xt.shape.len() != rank || (0..rank).any(|d| d != axis && xt.shape[d] != y.shape[d]) {
                return false;
            }
            if k == pos {
                before = along.clone();
            }
            let Ok(next) = along.checked_add(&xt.shape[axis]) else {
                return false;
            };
            along = next;
        }
        // The offset is `before * inner * bits / 8`: fixed when `before` is 0, or when
        // neither `before` nor the dims after the axis mention a bounded symbol.
        let fixed = before.as_constant() == Some(0)
            || (!mentions(&before, &self.symbols)
                && y.shape[axis + 1..]
                    .iter()
                    .all(|d| !mentions(d, &self.symbols)));
        // With more than one row the part's runs are the output's row apart:
        // `y.shape[axis..] * bits / 8`, fixed only when none of those dims mentions a
        // bounded symbol (`[x; a]` along axis 1 with `a[2, k]` puts `x`'s second row
        // `(64 + k) * 4` bytes after its first, which moves with `k`).
        let one_row = y.shape[..axis].iter().all(|d| d.as_constant() == Some(1));
        let stride_fixed = one_row || y.shape[axis..].iter().all(|d| !mentions(d, &self.symbols));
        along == y.shape[axis] && fixed && stride_fixed
    }
}
