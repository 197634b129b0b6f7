//! Elementwise operators: unary ops and activations, broadcasting binary ops, variadic ops,
//! comparisons and logic, `Where`, casts, and normalizations whose main output has the input's
//! shape.
//!
//! Integer values are computed for the ops that build shapes (`Add`, `Sub`, `Mul`, `Div`,
//! `Neg`, `Max`, `Min`, comparisons, `Where`, casts) when the operands are flat values of equal
//! length or one of them is a single element; anything else leaves the value unknown.

use memplan_ir::{DType, Expr, Shape};

use super::InferError;
use super::{Ctx, Output, Res, add, broadcast, mul, norm_axis, sub};
use crate::tensor;
use crate::value::Value;

/// Unary ops whose output has the input's dtype and shape.
const SAME: &[&str] = &[
    "Relu",
    "Sigmoid",
    "Tanh",
    "Gelu",
    "Erf",
    "HardSwish",
    "HardSigmoid",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "Softplus",
    "Softsign",
    "Mish",
    "Swish",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Abs",
    "Sin",
    "Cos",
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Softmax",
    "LogSoftmax",
    "Hardmax",
    "LRN",
    "CumSum",
    "InstanceNormalization",
    "GroupNormalization",
    "MeanVarianceNormalization",
    "LpNormalization",
    "Clip",
    "Shrink",
    "ThresholdedRelu",
    "Trilu",
    "BitwiseNot",
    "ScatterND",
    "ScatterElements",
    "Scatter",
    "ReverseSequence",
    "Neg",
    "Identity",
    "RMSNormalization",
    "RotaryEmbedding",
    "CumProd",
];

/// Broadcasting binary ops whose output has the first input's dtype.
const BINARY: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "PRelu",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
];

/// Broadcasting ops whose output is bool.
const COMPARE: &[&str] = &[
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
];

/// Variadic broadcasting ops.
const VARIADIC: &[&str] = &["Sum", "Mean", "Max", "Min"];

pub(super) fn infer(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let out = match op {
        _ if SAME.contains(&op) => {
            let x = ctx.input(0)?;
            if op == "CumSum" || op == "CumProd" {
                // The axis is a scalar tensor; where it is known, it must name an axis.
                if let Some(axis) = ctx
                    .opt(1)
                    .and_then(|a| a.value)
                    .and_then(|v| v.const_ints())
                    .and_then(|v| v.first().copied())
                {
                    norm_axis(axis, x.shape.len())?;
                }
            }
            if op == "GroupNormalization" {
                let groups = ctx.required_int("num_groups")?;
                if groups < 1 {
                    return Err(InferError::AttrTooSmall {
                        name: "num_groups".to_owned(),
                        value: groups,
                        min: 1,
                    });
                }
            }
            let value = match op {
                "Identity" => x.value.cloned(),
                "Neg" => x
                    .value
                    .and_then(|v| map_ints(v, |e| mul(e, &Expr::constant(-1)).ok())),
                _ => None,
            };
            vec![Output::with_value(x.dtype, x.shape.clone(), value)]
        }
        "Not" | "IsNaN" | "IsInf" => {
            let x = ctx.input(0)?;
            let value = (op == "Not")
                .then(|| {
                    x.value.and_then(|v| {
                        map_ints(v, |e| {
                            e.as_constant().map(|c| Expr::constant(i64::from(c == 0)))
                        })
                    })
                })
                .flatten();
            vec![Output::with_value(DType::Bool, x.shape.clone(), value)]
        }
        _ if BINARY.contains(&op) || COMPARE.contains(&op) => {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            let shape = broadcast(ctx, a.shape, b.shape)?;
            let dtype = if COMPARE.contains(&op) {
                DType::Bool
            } else {
                a.dtype
            };
            let value = match (a.value, b.value) {
                (Some(va), Some(vb)) => binary_value(ctx, op, va, vb, &shape),
                _ => None,
            };
            vec![Output::with_value(dtype, shape, value)]
        }
        _ if VARIADIC.contains(&op) => {
            let first = ctx.input(0)?;
            let mut shape = first.shape.clone();
            let mut value = first.value.cloned();
            for input in ctx.inputs.iter().skip(1).flatten() {
                shape = broadcast(ctx, &shape, input.shape)?;
                value = match (&value, input.value) {
                    (Some(va), Some(vb)) if op != "Mean" => binary_value(ctx, op, va, vb, &shape),
                    _ => None,
                };
            }
            vec![Output::with_value(first.dtype, shape, value)]
        }
        "Where" => {
            let (c, x, y) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
            let shape = broadcast(ctx, &broadcast(ctx, c.shape, x.shape)?, y.shape)?;
            let value = match (c.value, x.value, y.value) {
                (Some(vc), Some(vx), Some(vy)) => where_value(vc, vx, vy, &shape),
                _ => None,
            };
            vec![Output::with_value(x.dtype, shape, value)]
        }
        "Cast" => {
            let x = ctx.input(0)?;
            let to = ctx.required_int("to")?;
            let dtype = dtype_attr("to", to)?;
            let value = x.value.and_then(|v| v.cast(!dtype.is_float()));
            vec![Output::with_value(dtype, x.shape.clone(), value)]
        }
        "CastLike" => {
            let (x, like) = (ctx.input(0)?, ctx.input(1)?);
            let value = x.value.and_then(|v| v.cast(!like.dtype.is_float()));
            vec![Output::with_value(like.dtype, x.shape.clone(), value)]
        }
        "Dropout" => {
            let x = ctx.input(0)?;
            vec![
                Output::with_value(x.dtype, x.shape.clone(), x.value.cloned()),
                Output::new(DType::Bool, x.shape.clone()),
            ]
        }
        "BatchNormalization" => {
            let x = ctx.input(0)?;
            let c: Shape = ctx.input(1)?.shape.clone();
            vec![
                Output::new(x.dtype, x.shape.clone()),
                Output::new(x.dtype, c.clone()),
                Output::new(x.dtype, c.clone()),
                Output::new(x.dtype, c.clone()),
                Output::new(x.dtype, c),
            ]
        }
        "LayerNormalization" => {
            let x = ctx.input(0)?;
            let axis = norm_axis(ctx.attrs.int_or("axis", -1), x.shape.len())?;
            let stats = memplan_ir::ones_from(x.shape, axis);
            let stash = tensor::dtype(
                i32::try_from(ctx.attrs.int_or("stash_type", 1)).unwrap_or(1),
                "",
            )
            .unwrap_or(DType::F32);
            vec![
                Output::new(x.dtype, x.shape.clone()),
                Output::new(stash, stats.clone()),
                Output::new(stash, stats),
            ]
        }
        "QuantizeLinear" => {
            let x = ctx.input(0)?;
            let dtype = match (
                ctx.opt(2),
                ctx.attrs.int("output_dtype").filter(|&c| c != 0),
            ) {
                (Some(z), _) => z.dtype,
                (None, Some(code)) => dtype_attr("output_dtype", code)?,
                (None, None) => DType::U8,
            };
            vec![Output::new(dtype, x.shape.clone())]
        }
        "DynamicQuantizeLinear" => {
            let x = ctx.input(0)?;
            vec![
                Output::new(DType::U8, x.shape.clone()),
                Output::new(DType::F32, Shape::new()),
                Output::new(DType::U8, Shape::new()),
            ]
        }
        "Bernoulli" => {
            let x = ctx.input(0)?;
            let dtype = ctx.dtype_or("dtype", x.dtype)?;
            vec![Output::new(dtype, x.shape.clone())]
        }
        "Det" => {
            let x = ctx.input(0)?;
            let lead = x.spatial()?;
            vec![Output::new(
                x.dtype,
                x.shape.iter().take(lead).cloned().collect(),
            )]
        }
        "DequantizeLinear" => {
            let x = ctx.input(0)?;
            vec![Output::new(ctx.input(1)?.dtype, x.shape.clone())]
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// A dtype given as an ONNX code in the attribute `name`.
pub(crate) fn dtype_attr(name: &str, code: i64) -> Res<DType> {
    i32::try_from(code)
        .ok()
        .and_then(|c| tensor::dtype(c, "").ok())
        .ok_or_else(|| InferError::DType {
            what: format!("attribute `{name}`"),
            code,
        })
}

/// Applies `f` to every integer of a value.
fn map_ints(v: &Value, f: impl Fn(&Expr) -> Option<Expr>) -> Option<Value> {
    v.ints()?
        .iter()
        .map(f)
        .collect::<Option<Vec<_>>>()
        .map(Value::Ints)
}

/// The element count of a constant shape, if it is one.
fn count(shape: &Shape) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, d| {
        acc.checked_mul(usize::try_from(d.as_constant()?).ok()?)
    })
}

/// Pairs of elements for a broadcast of flat values: equal lengths, or one side a single element.
fn pairs<'v>(a: &'v [Expr], b: &'v [Expr], n: usize) -> Option<Vec<(&'v Expr, &'v Expr)>> {
    let at = |v: &'v [Expr], i: usize| if v.len() == 1 { v.first() } else { v.get(i) };
    if !(a.len() == n || a.len() == 1) || !(b.len() == n || b.len() == 1) {
        return None;
    }
    (0..n).map(|i| Some((at(a, i)?, at(b, i)?))).collect()
}

/// Integer division truncating toward zero, as ONNX integer `Div` does. A symbolic value
/// divided by a positive constant it may not divide (the exporters' shape arithmetic:
/// `height // 2`, the dynamo exporter's `(samples // 80 - 3) // 2` for a strided
/// convolution's length) is a quotient symbol ([`Ctx::quotient`]): such values are sizes, so
/// rounding down is truncating, and a value that turns out negative once the dims are bound
/// is an error then, never a wrong size.
fn div(ctx: &Ctx<'_>, a: &Expr, b: &Expr) -> Option<Expr> {
    match (a.as_constant(), b.as_constant()) {
        (Some(x), Some(y)) => x.checked_div(y).map(Expr::constant),
        (None, Some(y)) if y >= 1 => ctx.quotient(a, y, false).ok(),
        _ => a.div_exact(b),
    }
}

/// Integer `Mod` of a symbolic value by a positive constant: `a - b * floor(a / b)` (the
/// window padding `(7 - width % 7) % 7`), with the quotient as in [`div`].
fn modulo(ctx: &Ctx<'_>, a: &Expr, b: &Expr) -> Option<Expr> {
    let y = b.as_constant().filter(|&y| y >= 1)?;
    let q = ctx.quotient(a, y, false).ok()?;
    sub(a, &mul(b, &q).ok()?).ok()
}

/// Comparisons, logic, `Mod`, `Max` and `Min` of two integer values. Symbolic values are
/// compared through their difference: symbols are dims, never negative, so `seq+1` is never
/// equal to -1 and `2*seq` is at least `seq` (the TorchScript exporter builds every `expand`
/// from an `Equal(shape, -1)`).
fn compare(op: &str, a: &Expr, b: &Expr) -> Option<Expr> {
    if let (Some(x), Some(y)) = (a.as_constant(), b.as_constant()) {
        let r = match op {
            // Integer `Mod` (fmod = 0) takes the divisor's sign, like Python's `%`.
            "Mod" => {
                return x
                    .checked_rem_euclid(y)
                    .map(|r| Expr::constant(if r != 0 && y < 0 { r + y } else { r }));
            }
            "And" => x != 0 && y != 0,
            "Or" => x != 0 || y != 0,
            "Xor" => (x != 0) != (y != 0),
            _ => return order(op, a, b),
        };
        return Some(Expr::constant(i64::from(r)));
    }
    order(op, a, b)
}

/// `Equal`, the orderings, `Max` and `Min` of `a` and `b`, when the sign of `a - b` is known
/// for every value of the symbols.
fn order(op: &str, a: &Expr, b: &Expr) -> Option<Expr> {
    let d = a.checked_sub(b).ok()?;
    let (lo, hi) = (d.min_value(), d.max_value());
    let positive = lo.is_some_and(|v| v > 0);
    let non_negative = lo.is_some_and(|v| v >= 0);
    let negative = hi.is_some_and(|v| v < 0);
    let non_positive = hi.is_some_and(|v| v <= 0);
    let truth = |yes: bool, no: bool| match (yes, no) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    let r = match op {
        "Equal" => truth(non_negative && non_positive, positive || negative)?,
        "Less" => truth(negative, non_negative)?,
        "Greater" => truth(positive, non_positive)?,
        "LessOrEqual" => truth(non_positive, positive)?,
        "GreaterOrEqual" => truth(non_negative, negative)?,
        "Max" | "Min" => {
            let a_larger = truth(non_negative, non_positive)?;
            return Some(if a_larger == (op == "Max") { a } else { b }.clone());
        }
        _ => return None,
    };
    Some(Expr::constant(i64::from(r)))
}

/// The value of a broadcasting binary op on integer values.
fn binary_value(ctx: &Ctx<'_>, op: &str, a: &Value, b: &Value, shape: &Shape) -> Option<Value> {
    let n = count(shape)?;
    let (a, b) = (a.ints()?, b.ints()?);
    let out = pairs(a, b, n)?
        .into_iter()
        .map(|(x, y)| match op {
            "Add" | "Sum" => add(x, y).ok(),
            "Sub" => sub(x, y).ok(),
            "Mul" => mul(x, y).ok(),
            "Div" => div(ctx, x, y),
            "Mod" if !(x.is_constant() && y.is_constant()) => modulo(ctx, x, y),
            _ => compare(op, x, y),
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Value::Ints(out))
}

/// The value of `Where` on integer values.
fn where_value(c: &Value, x: &Value, y: &Value, shape: &Shape) -> Option<Value> {
    let n = count(shape)?;
    let c = c.const_ints()?;
    let (x, y) = (x.ints()?, y.ints()?);
    let pick = |v: &[Expr], i: usize| {
        if v.len() == 1 {
            v.first().cloned()
        } else {
            v.get(i).cloned()
        }
    };
    if !(c.len() == n || c.len() == 1)
        || !(x.len() == n || x.len() == 1)
        || !(y.len() == n || y.len() == 1)
    {
        return None;
    }
    (0..n)
        .map(|i| {
            let cond = if c.len() == 1 { c.first() } else { c.get(i) };
            if *cond? != 0 { pick(x, i) } else { pick(y, i) }
        })
        .collect::<Option<Vec<_>>>()
        .map(Value::Ints)
}
