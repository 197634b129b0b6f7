//! Which axes of a chain's first tensor each axis of a later tensor holds, through the
//! layout ops exporters put around attention (`Transpose`, `Reshape`, `Unsqueeze`,
//! `Squeeze`, `Flatten`, `Expand`) and the ops that keep a layout (a scale by a scalar, a
//! `Cast`).
//!
//! An axis is a list of *atoms*, major first: axes of the source (a reshape merges them, a
//! transpose moves them) or repeats (an `Expand` of a unit axis: grouped-query attention's
//! `repeat_kv`). A unit axis holds no atom. A reshape that would split a source axis, or an
//! op this module does not know, ends the tracking: the kernel then reads the tensor before
//! it. Dims are compared as polynomials in the shape symbols, so a chain tracked once holds
//! at every binding.

use memplan_ir::{Attr, Expr, NodeId, TensorId};

use super::Cx;

/// One atom of an axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Atom {
    /// Axis `i` of the source.
    Source(usize),
    /// A broadcast the chain adds: every index along it reads the same source element.
    Repeat,
}

/// The atoms of each axis of one tensor of a chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Axes(Vec<Vec<(Atom, Expr)>>);

fn is_one(e: &Expr) -> bool {
    e.as_constant() == Some(1)
}

impl Axes {
    /// The source of a chain: tensor `t`, each axis its own atom (unit axes none).
    pub fn of(cx: &Cx<'_>, t: TensorId) -> Axes {
        Axes(
            cx.g.tensor(t)
                .shape
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    if is_one(d) {
                        Vec::new()
                    } else {
                        vec![(Atom::Source(i), d.clone())]
                    }
                })
                .collect(),
        )
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The source axis that axis `axis` is, alone.
    pub fn single(&self, axis: usize) -> Option<usize> {
        match self.0.get(axis)?.as_slice() {
            [(Atom::Source(i), _)] => Some(*i),
            _ => None,
        }
    }

    /// Whether axis `axis` holds source atoms only (no repeat).
    pub fn plain(&self, axis: usize) -> bool {
        self.0
            .get(axis)
            .is_some_and(|a| a.iter().all(|(x, _)| matches!(x, Atom::Source(_))))
    }

    /// Whether every repeat atom follows a source atom in its axis (grouped-query
    /// attention's `(kv_heads, groups)` merged into the query heads), or is an axis alone (a
    /// single key-value head broadcast).
    pub fn repeats_grouped(&self) -> bool {
        self.0.iter().all(|axis| {
            axis.iter().enumerate().all(|(k, (a, _))| {
                *a != Atom::Repeat
                    || axis.len() == 1
                    || (k > 0 && matches!(axis[k - 1].0, Atom::Source(_)))
            })
        })
    }

    /// The atoms after node `n`, which reads this tensor and writes `out` (an op that keeps
    /// the layout, or one of the layout ops above); `None` where the op would break the
    /// tracking.
    pub fn through(&self, cx: &Cx<'_>, n: NodeId, out: TensorId) -> Option<Axes> {
        let node = cx.node(n);
        let shape = &cx.g.tensor(out).shape;
        match node.op.as_str() {
            "Transpose" => {
                let rank = self.rank();
                let perm: Vec<usize> = match node.attr("perm").and_then(Attr::as_ints) {
                    Some(p) => p
                        .iter()
                        .map(|&v| usize::try_from(v).ok().filter(|&v| v < rank))
                        .collect::<Option<_>>()?,
                    None => (0..rank).rev().collect(),
                };
                let mut seen = vec![false; rank];
                for &p in &perm {
                    if std::mem::replace(&mut seen[p], true) {
                        return None;
                    }
                }
                (perm.len() == rank && shape.len() == rank)
                    .then(|| Axes(perm.iter().map(|&p| self.0[p].clone()).collect()))
            }
            "Reshape" | "Flatten" | "Unsqueeze" | "Squeeze" => self.regroup(shape),
            "Expand" => self.expand(shape),
            "Mul" | "Div" | "Cast" | "Identity" | "Dropout" => {
                (shape.len() == self.rank()).then(|| self.clone())
            }
            _ => None,
        }
    }

    /// The same atoms in the same order, grouped into axes of `dims`.
    fn regroup(&self, dims: &[Expr]) -> Option<Axes> {
        let mut atoms = self.0.iter().flatten();
        let mut out = Vec::with_capacity(dims.len());
        for d in dims {
            let mut axis = Vec::new();
            let mut product = Expr::constant(1);
            while product != *d {
                let (a, e) = atoms.next()?;
                product = product.checked_mul(e).ok()?;
                axis.push((*a, e.clone()));
            }
            out.push(axis);
        }
        atoms.next().is_none().then_some(Axes(out))
    }

    /// The atoms after an `Expand` to `dims`: unit axes that grow become repeats; the others
    /// keep their atoms.
    fn expand(&self, dims: &[Expr]) -> Option<Axes> {
        let extra = dims.len().checked_sub(self.rank())?;
        let mut out = Vec::with_capacity(dims.len());
        for (j, d) in dims.iter().enumerate() {
            let axis: &[(Atom, Expr)] = if j < extra { &[] } else { &self.0[j - extra] };
            let product = axis
                .iter()
                .try_fold(Expr::constant(1), |p, (_, e)| p.checked_mul(e).ok())?;
            if product == *d {
                out.push(axis.to_vec());
            } else if axis.is_empty() {
                out.push(vec![(Atom::Repeat, d.clone())]);
            } else {
                return None;
            }
        }
        Some(Axes(out))
    }
}
