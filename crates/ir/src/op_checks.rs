//! Validation of what ops say about themselves: the parameters the memory rules read, and
//! declared output shapes against what the op makes from its inputs.
//!
//! A graph file can declare anything; the memory rules ([`crate::OpTable`] and the two
//! independent checkers) trust an op's declared shapes and parameters to decide views and
//! in-place writes. So a declared shape that the op cannot produce, or a parameter its
//! definition forbids, is a validation error here rather than a plan built on a lie:
//!
//! - Concat: `axis` in range, inputs of the output's rank that agree with it off the axis
//!   and fill the axis exactly;
//! - Split: `axis` in range, `num_outputs` (when given) the node's output count, `split`
//!   sizes non-negative, one per output, summing to the axis;
//! - Slice: `starts`, `ends`, `axes`, `steps` of equal length, axes in range and each once,
//!   no step of 0;
//! - element-wise ops (the broadcasting ops and the unary ones), row-wise normalisations,
//!   BatchNormalization, Clip, Dropout: output 0 has the shape the inputs broadcast to (the
//!   first input's shape for the ops elementwise in their first input);
//! - GroupNormalization: `num_groups` at least 1 and dividing the channels.
//!
//! Only what can be told is compared: two constant dims that differ, a rank that differs,
//! a sum that differs by a constant. Symbolic dims that may agree at run time pass.

use crate::dim::Expr;
use crate::graph::{Attr, Graph, Node, Shape};
use crate::semantics::{ELEMENTWISE_FIRST_OPS, ELEMENTWISE_OPS, ROW_WISE_OPS};
use crate::validate::ValidationError;

impl Graph {
    /// Appends every op parameter and declared shape problem (see the module docs).
    pub(crate) fn check_op_params(&self, errors: &mut Vec<ValidationError>) {
        for node in self.nodes().iter() {
            let op = node.op.as_str();
            let mut bad = |reason: String| {
                errors.push(ValidationError::BadParameter {
                    node: node.name.clone(),
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
            let expected = if ELEMENTWISE_OPS.contains(&op) {
                self.broadcast(node)
            } else if ELEMENTWISE_FIRST_OPS.contains(&op)
                || ROW_WISE_OPS.contains(&op)
                || op == "BatchNormalization"
            {
                self.input_shape(node, 0)
                    .map(|s| s.iter().cloned().map(Some).collect())
            } else if op == "Concat" {
                self.concat_shape(node)
            } else {
                None
            };
            if let (Some(expected), Some(&y)) = (expected, node.outputs.first())
                && let Some(out) = self.tensors().get(y)
                && !agrees(&out.shape, &expected)
            {
                let show = |d: Option<&Expr>| {
                    d.map_or_else(|| "?".to_owned(), |d| d.display(self.symbols()).to_string())
                };
                errors.push(ValidationError::WrongShape {
                    node: node.name.clone(),
                    op: node.op.clone(),
                    output: out.name.clone(),
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
        let Some(axis) = node.attr("axis").and_then(Attr::as_int) else {
            bad("has no integer `axis`".to_owned());
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

/// `axis` of a tensor of `rank` dims as an index, negative axes counting from the end.
fn axis_index(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis.checked_add(r)? } else { axis };
    usize::try_from(a).ok().filter(|&a| a < rank)
}

/// Whether two dims certainly differ: both constant and unequal, or differing by a constant.
fn differ(a: &Expr, b: &Expr) -> bool {
    a.checked_sub(b)
        .ok()
        .and_then(|d| d.as_constant())
        .is_some_and(|d| d != 0)
}

/// Whether a declared shape can be what the op makes (`None` dims match anything).
fn agrees(declared: &Shape, expected: &[Option<Expr>]) -> bool {
    declared.len() == expected.len()
        && declared
            .iter()
            .zip(expected)
            .all(|(d, e)| e.as_ref().is_none_or(|e| !differ(d, e)))
}

fn dims_text(dims: impl Iterator<Item = String>) -> String {
    format!("[{}]", dims.collect::<Vec<_>>().join(", "))
}
