//! Known values of small tensors, tracked through the graph for shape inference.
//!
//! Integer values are [`Expr`]s, so `Shape` of a tensor with a symbolic dim yields a symbolic
//! value (`batch`), and `Gather`/`Concat`/`Mul` of those build Reshape targets such as
//! `[12*batch, seq, 64]`. Values are flat, in row-major order, and never longer than
//! [`crate::tensor::MAX_VALUE_ELEMENTS`]: a larger result is simply not tracked.

use memplan_ir::Expr;

use crate::tensor::MAX_VALUE_ELEMENTS;

/// The value of a small tensor.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// Integers and bools, possibly symbolic.
    Ints(Vec<Expr>),
    /// Floats.
    Floats(Vec<f64>),
}

impl Value {
    /// The number of elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            Value::Ints(v) => v.len(),
            Value::Floats(v) => v.len(),
        }
    }

    /// The integers, if this is an integer value.
    pub(crate) fn ints(&self) -> Option<&[Expr]> {
        match self {
            Value::Ints(v) => Some(v),
            Value::Floats(_) => None,
        }
    }

    /// The integers as constants, if all are.
    pub(crate) fn const_ints(&self) -> Option<Vec<i64>> {
        self.ints()?.iter().map(Expr::as_constant).collect()
    }

    /// The values as floats (integers must be constants).
    pub(crate) fn floats(&self) -> Option<Vec<f64>> {
        match self {
            Value::Floats(v) => Some(v.clone()),
            Value::Ints(v) => v
                .iter()
                .map(|e| e.as_constant().map(|c| c as f64))
                .collect(),
        }
    }

    /// The elements at `indices`, in that order (for Gather and Slice of flat values).
    pub(crate) fn pick(&self, indices: &[usize]) -> Option<Value> {
        Some(match self {
            Value::Ints(v) => Value::Ints(
                indices
                    .iter()
                    .map(|&i| v.get(i).cloned())
                    .collect::<Option<_>>()?,
            ),
            Value::Floats(v) => Value::Floats(
                indices
                    .iter()
                    .map(|&i| v.get(i).copied())
                    .collect::<Option<_>>()?,
            ),
        })
    }

    /// The value with every element converted for a cast to an integer (`to_int`) or float type.
    pub(crate) fn cast(&self, to_int: bool) -> Option<Value> {
        match (self, to_int) {
            (Value::Ints(v), true) => Some(Value::Ints(v.clone())),
            (Value::Ints(_), false) => Some(Value::Floats(self.floats()?)),
            (Value::Floats(v), true) => v
                .iter()
                .map(|&f| {
                    (f.is_finite() && f.abs() < 9.0e18).then(|| Expr::constant(f.trunc() as i64))
                })
                .collect::<Option<Vec<_>>>()
                .map(Value::Ints),
            (Value::Floats(v), false) => Some(Value::Floats(v.clone())),
        }
    }

    /// `n` copies of one element (ConstantOfShape, Expand of a scalar), if small enough.
    pub(crate) fn splat(&self, n: u64) -> Option<Value> {
        if n > MAX_VALUE_ELEMENTS || self.len() != 1 {
            return None;
        }
        let n = usize::try_from(n).ok()?;
        self.pick(&vec![0; n])
    }
}

/// Concatenates flat values of the same kind.
pub(crate) fn concat<'a>(parts: impl IntoIterator<Item = &'a Value>) -> Option<Value> {
    let mut ints = Vec::new();
    let mut floats = Vec::new();
    for p in parts {
        match p {
            Value::Ints(v) => ints.extend(v.iter().cloned()),
            Value::Floats(v) => floats.extend(v.iter().copied()),
        }
    }
    match (ints.is_empty(), floats.is_empty()) {
        (_, true) => Some(Value::Ints(ints)),
        (true, false) => Some(Value::Floats(floats)),
        (false, false) => None,
    }
}
