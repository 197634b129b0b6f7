//! Validation of what ops say about themselves: the parameters the memory rules read, and
//! declared output shapes against what the op makes from its inputs.
//!
//! A graph file can declare anything; the memory rules ([`crate::OpTable`] and the two
//! independent checkers) trust an op's declared shapes and parameters to decide views and
//! in-place writes. So a declared shape that the op cannot produce, or a parameter its
//! definition forbids, is a validation error here rather than a plan built on a lie:
//!
//! - Concat: `axis` in range, inputs of the output's rank that agree with it off the axis
//!   and fill the axis exactly (a Concat without an axis, which no memory rule reads, is not
//!   checked);
//! - Split: `axis` in range, `num_outputs` (when given) the node's output count, `split`
//!   sizes non-negative, one per output, summing to the axis;
//! - Slice: `starts`, `ends`, `axes`, `steps` of equal length, axes in range and each once,
//!   no step of 0;
//! - element-wise ops (the broadcasting ops and the unary ones), row-wise normalisations,
//!   BatchNormalization, Clip, Dropout, and Concat: output 0 has the element count of the
//!   shape the inputs broadcast to (the first input's count for the ops elementwise in their
//!   first input; the inputs' sum along the axis for a Concat). The count is what views and
//!   in-place writes rest on; a rank written differently with the same count is left alone;
//! - GroupNormalization: `num_groups` at least 1 and dividing the channels.
//!
//! Only what can be told is compared: counts or dims that differ by a constant. Symbolic
//! dims that may agree at run time pass.

use crate::axis_index;
use crate::dim::Expr;
use crate::graph::{Attr, Graph, Node, Shape};
use crate::semantics::{ELEMENTWISE_FIRST_OPS, ELEMENTWISE_OPS, ROW_WISE_OPS};
use crate::validate::ValidationError;

impl Graph {
    /// Appends every op parameter and declared shape problem (see the module docs).
    pub(crate) fn check_op_params(&self, errors: &mut Vec<ValidationError>) {
        for (n, node) in self.nodes().iter_enumerated() {
            let op = node.op.as_str();
            let mut bad = |reason: String| {
                errors.push(ValidationError::BadParameter {
                    node: n,
                    op: node.op.clone(),
                    reason,
                });
            };
            match op {
                "Concat" => self.check_concat(node, &mut bad),
                "Split" => self.check_split(node, &mut bad),
                "Slice" => self.check_slice(node, &mut bad),
                "GroupNormalization" => self.check_groups(node, &mut bad),
                _ => {}
            }
            let present: Vec<_> = node.inputs.iter().flatten().collect();
            let first_only = ELEMENTWISE_FIRST_OPS.contains(&op)
                || ROW_WISE_OPS.contains(&op)
                || op == "BatchNormalization"
                || (ELEMENTWISE_OPS.contains(&op) && present.len() == 1);
            let (expected, count) = if first_only {
                // The first input's shape, and its element count as it states it (a tensor
                // whose dims depend on data may carry its count).
                let x = present.first().and_then(|&&x| self.tensors().get(x));
                (
                    x.map(|x| x.shape.iter().cloned().map(Some).collect::<Vec<_>>()),
                    x.and_then(|x| x.elements_expr().ok()),
                )
            } else if ELEMENTWISE_OPS.contains(&op) {
                let shape = self.broadcast(node);
                let count = shape.as_ref().and_then(|s| product(s));
                (shape, count)
            } else if op == "Concat" {
                let shape = self.concat_shape(node);
                let count = shape.as_ref().and_then(|s| product(s));
                (shape, count)
            } else {
                (None, None)
            };
            // The element count is what the memory rules rest on (an in-place write needs its
            // input's count, a view its bytes): a count that certainly differs is the error.
            // A rank or dim written differently with the same count is left alone.
            if let (Some(expected), Some(count), Some(&y)) = (expected, count, node.outputs.first())
                && let Some(out) = self.tensors().get(y)
                && out
                    .elements_expr()
                    .is_ok_and(|declared| differ(&declared, &count))
            {
                let show = |d: Option<&Expr>| {
                    d.map_or_else(|| "?".to_owned(), |d| d.display(self.symbols()).to_string())
                };
                errors.push(ValidationError::WrongShape {
                    node: n,
                    op: node.op.clone(),
                    output: y,
                    declared: dims_text(out.shape.iter().map(|d| show(Some(d)))),
                    expected: dims_text(expected.iter().map(|d| show(d.as_ref()))),
                });
            }
        }
    }

    fn input_shape(&self, node: &Node, i: usize) -> Option<&Shape> {
        let t = node.inputs.get(i).copied().flatten()?;
        Some(&self.tensors().get(t)?.shape)
    }

    /// The integers of attribute `name`, else of the constant input at `pos` (`None` when
    /// neither is known).
    fn ints(&self, node: &Node, name: &str, pos: usize) -> Option<Vec<i64>> {
        if let Some(a) = node.attr(name) {
            return a.as_ints().map(<[i64]>::to_vec);
        }
        let t = node.inputs.get(pos).copied().flatten()?;
        self.tensors().get(t)?.int_value.clone()
    }

    /// The shape multidirectional broadcasting gives output 0 from the present inputs;
    /// `None` for a dim that cannot be told.
    fn broadcast(&self, node: &Node) -> Option<Vec<Option<Expr>>> {
        let shapes: Vec<&Shape> = node
            .inputs
            .iter()
            .flatten()
            .map(|&t| self.tensors().get(t).map(|x| &x.shape))
            .collect::<Option<_>>()?;
        let rank = shapes.iter().map(|s| s.len()).max()?;
        let one = Expr::constant(1);
        let mut out = Vec::with_capacity(rank);
        for k in 0..rank {
            // Dims aligned from the right; a missing dim is 1.
            let dims: Vec<&Expr> = shapes
                .iter()
                .filter_map(|s| s.len().checked_sub(rank - k).map(|i| &s[i]))
                .filter(|d| **d != one)
                .collect();
            out.push(match dims.split_first() {
                None => Some(one.clone()),
                Some((first, rest)) if rest.iter().all(|d| d == first) => Some((*first).clone()),
                Some(_) => None,
            });
        }
        Some(out)
    }

    /// Output 0 of a Concat from its inputs: each dim off the axis as the first input has it,
    /// the axis the sum of the inputs'.
    fn concat_shape(&self, node: &Node) -> Option<Vec<Option<Expr>>> {
        let first = self.input_shape(node, 0)?;
        let axis = axis_index(node.attr("axis")?.as_int()?, first.len())?;
        let mut out: Vec<Option<Expr>> = first.iter().cloned().map(Some).collect();
        let mut along = Expr::constant(0);
        for &x in node.inputs.iter().flatten() {
            let shape = &self.tensors().get(x)?.shape;
            along = along.checked_add(shape.get(axis)?).ok()?;
        }
        out[axis] = Some(along);
        Some(out)
    }

    fn check_concat(&self, node: &Node, bad: &mut dyn FnMut(String)) {
        let Some(y) = node.outputs.first().and_then(|&y| self.tensors().get(y)) else {
            return;
        };
        let rank = y.shape.len();
        // Without an axis no memory rule reads the Concat (it is a copy): nothing to check.
        let Some(axis) = node.attr("axis").and_then(Attr::as_int) else {
            return;
        };
        let Some(a) = axis_index(axis, rank) else {
            bad(format!("`axis` {axis} is out of range for rank {rank}"));
            return;
        };
        for &x in node.inputs.iter().flatten() {
            let Some(t) = self.tensors().get(x) else {
                continue;
            };
            if t.shape.len() != rank {
                bad(format!(
                    "input `{}` has rank {}, the output rank {rank}",
                    t.name,
                    t.shape.len()
                ));
                continue;
            }
            if let Some(k) = (0..rank).find(|&k| k != a && differ(&t.shape[k], &y.shape[k])) {
                bad(format!(
                    "input `{}` has {} at dim {k} where the output has {}",
                    t.name,
                    t.shape[k].display(self.symbols()),
                    y.shape[k].display(self.symbols())
                ));
            }
        }
    }

    fn check_split(&self, node: &Node, bad: &mut dyn FnMut(String)) {
        let Some(x) = self.input_shape(node, 0) else {
            return;
        };
        let axis = node.attr("axis").and_then(Attr::as_int).unwrap_or(0);
        let Some(a) = axis_index(axis, x.len()) else {
            bad(format!(
                "`axis` {axis} is out of range for rank {}",
                x.len()
            ));
            return;
        };
        let outputs = node.outputs.len();
        if let Some(attr) = node.attr("num_outputs") {
            match attr.as_int() {
                Some(n) if usize::try_from(n).is_ok_and(|n| n == outputs) => {}
                Some(n) => bad(format!(
                    "`num_outputs` is {n}, but the node has {outputs} outputs"
                )),
                None => bad("`num_outputs` is not an integer".to_owned()),
            }
        }
        let Some(split) = self.ints(node, "split", 1) else {
            return;
        };
        if let Some(&v) = split.iter().find(|&&v| v < 0) {
            bad(format!("`split` has a negative size ({v})"));
            return;
        }
        if split.len() != outputs {
            bad(format!(
                "`split` has {} sizes for {outputs} outputs",
                split.len()
            ));
        }
        let Some(dim) = x[a].as_constant() else {
            return;
        };
        match split.iter().try_fold(0i64, |acc, &v| acc.checked_add(v)) {
            Some(sum) if sum == dim => {}
            Some(sum) => bad(format!(
                "`split` sums to {sum}, but axis {a} of the input has {dim}"
            )),
            None => bad("`split` sums past 2^63".to_owned()),
        }
    }

    fn check_slice(&self, node: &Node, bad: &mut dyn FnMut(String)) {
        let Some(x) = self.input_shape(node, 0) else {
            return;
        };
        let rank = x.len();
        let (Some(starts), Some(ends)) = (self.ints(node, "starts", 1), self.ints(node, "ends", 2))
        else {
            return;
        };
        let given = |name: &str, pos: usize| {
            node.attr(name).is_some() || node.inputs.get(pos).copied().flatten().is_some()
        };
        let axes = self.ints(node, "axes", 3);
        let steps = self.ints(node, "steps", 4);
        let n = starts.len();
        let lengths = [
            ("ends", Some(ends.len())),
            ("axes", axes.as_ref().map(Vec::len)),
            ("steps", steps.as_ref().map(Vec::len)),
        ];
        for (name, len) in lengths {
            if let Some(len) = len
                && len != n
            {
                bad(format!("`{name}` has {len} values, `starts` {n}"));
                return;
            }
        }
        if let Some(steps) = &steps
            && steps.contains(&0)
        {
            bad("a step of 0".to_owned());
        }
        let axes = match axes {
            Some(a) => a,
            None if given("axes", 3) => return,
            None => (0..i64::try_from(n).unwrap_or(i64::MAX)).collect(),
        };
        let mut seen = vec![false; rank];
        for &axis in &axes {
            match axis_index(axis, rank) {
                None => bad(format!("axis {axis} is out of range for rank {rank}")),
                Some(a) if std::mem::replace(&mut seen[a], true) => {
                    bad(format!("axis {a} is sliced more than once"));
                }
                Some(_) => {}
            }
        }
    }

    fn check_groups(&self, node: &Node, bad: &mut dyn FnMut(String)) {
        let Some(groups) = node.attr("num_groups").and_then(Attr::as_int) else {
            return;
        };
        if groups < 1 {
            bad(format!("`num_groups` is {groups}; it must be at least 1"));
            return;
        }
        if let Some(c) = self
            .input_shape(node, 0)
            .and_then(|x| x.get(1))
            .and_then(Expr::as_constant)
            && c % groups != 0
        {
            bad(format!(
                "`num_groups` {groups} does not divide the {c} channels"
            ));
        }
    }
}

/// Whether two dims certainly differ: both constant and unequal, or differing by a constant.
fn differ(a: &Expr, b: &Expr) -> bool {
    a.checked_sub(b)
        .ok()
        .and_then(|d| d.as_constant())
        .is_some_and(|d| d != 0)
}

/// The product of dims that are all known.
fn product(dims: &[Option<Expr>]) -> Option<Expr> {
    dims.iter().try_fold(Expr::constant(1), |acc, d| {
        acc.checked_mul(d.as_ref()?).ok()
    })
}

fn dims_text(dims: impl Iterator<Item = String>) -> String {
    format!("[{}]", dims.collect::<Vec<_>>().join(", "))
}
