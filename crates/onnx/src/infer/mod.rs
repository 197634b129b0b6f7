//! Shape inference: the dtype, shape and (for small int tensors) value of each node output.
//!
//! [`infer`] dispatches on the op type to one rule per operator family: [`elementwise`]
//! (unary, broadcasting binary and variadic ops, casts, comparisons), [`nn`] (convolution,
//! pooling, matrix products, normalization, recurrent layers, resize), [`movement`] (reshapes,
//! slicing, concatenation, padding, tiling), [`indexing`] (the `Gather` family, `OneHot`),
//! [`generate`] (`Shape`, `Size`, `ConstantOfShape`, `Range`, windows), [`reduce`]
//! (reductions, `ArgMax`, `TopK`, `Einsum`), [`signal`] (DFT, STFT, Col2Im and other recent
//! default-domain ops), [`sequence`] (sequences of tensors, planned as their items back to
//! back), [`contrib`] (ONNX Runtime's `com.microsoft` ops) and [`training`] (ONNX
//! Runtime's training ops: gradients, losses, accumulation, optimizers). Where a rule
//! needs a value only the data decides, [`data_dependent`] gives the output with fresh dims
//! instead, saying what it knows of their size.
//!
//! Invariants: rules read only their node and its inputs; all dim arithmetic is on [`Expr`]
//! with checked operations; a rule that cannot decide a dim returns an error that says what is
//! missing, never a guess: a dim only the data decides is a [`Dim::Data`], which the importer
//! turns into a fresh symbol. Values are propagated only where they stay small (see
//! [`crate::value`]), and a symbolic dim flows into values as the same [`Expr`].

mod along;
pub(crate) mod bounds;
mod contrib;
mod data_dependent;
mod elementwise;
mod generate;
mod indexing;
mod movement;
mod nn;
mod reduce;
mod sequence;
mod signal;
mod training;

use std::cell::RefCell;

use memplan_ir::{DType, Expr, IndexVec, Quotient, Shape, SymbolId};

pub(crate) use crate::error::{Counted, InferError, Quantity, Ranks, Refusal};
pub(crate) use along::Along;

use crate::attrs::NodeAttrs;
use crate::proto::NodeProto;
use crate::tensor::MAX_VALUE_ELEMENTS;
use crate::value::Value;

/// What inference says about one tensor.
pub(crate) type Res<T> = Result<T, InferError>;

/// One dim of an output as a rule states it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Dim {
    /// Known (a constant or an expression over the graph's symbols).
    Known(Expr),
    /// Decided by the data: the importer makes a fresh symbol for it, with this upper bound
    /// when the op gives one.
    Data(Option<Expr>),
    /// The same data-dependent dim as axis `axis` of the node's output `output` (an earlier
    /// one): TopK's values and indices share their length.
    Same {
        /// The earlier output.
        output: usize,
        /// Its axis.
        axis: usize,
    },
}

/// A node input as inference sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Input<'a> {
    /// Its name.
    pub(crate) name: &'a str,
    /// Element type.
    pub(crate) dtype: DType,
    /// Shape.
    pub(crate) shape: &'a Shape,
    /// Its value, when small and known.
    pub(crate) value: Option<&'a Value>,
    /// An upper bound of every element, each at least 0, when the data decides the values
    /// ([`bounds`]).
    pub(crate) bound: Option<&'a Expr>,
    /// What is known along one of its axes, when the data decides the values ([`along`]).
    pub(crate) along: Option<Along>,
}

impl<'a> Input<'a> {
    /// The error for this input's rank, which is not one of `expected`.
    pub(crate) fn rank_error(&self, expected: Ranks) -> InferError {
        InferError::rank(self.name, self.shape.len(), expected)
    }

    /// Dim `axis`, which the op needs: the input must have a rank above `axis`.
    pub(crate) fn dim(&self, axis: usize) -> Res<&'a Expr> {
        self.shape
            .get(axis)
            .ok_or_else(|| self.rank_error(Ranks::AtLeast(axis + 1)))
    }

    /// The last dim, which the op needs: the input must not be a scalar.
    pub(crate) fn last(&self) -> Res<&'a Expr> {
        self.shape
            .last()
            .ok_or_else(|| self.rank_error(Ranks::AtLeast(1)))
    }

    /// The rank as a value (`Shape`'s length, `NonZero`'s first dim).
    pub(crate) fn rank_value(&self) -> Res<i64> {
        i64::try_from(self.shape.len()).map_err(|_| InferError::overflow(Quantity::Rank))
    }

    /// The number of spatial dims after batch and channels: the rank less 2, which must be
    /// at least 2.
    pub(crate) fn spatial(&self) -> Res<usize> {
        self.shape
            .len()
            .checked_sub(2)
            .ok_or_else(|| self.rank_error(Ranks::AtLeast(2)))
    }
}

/// An inferred node output.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Output {
    /// Element type.
    pub(crate) dtype: DType,
    /// Shape; a data-dependent dim holds a placeholder `1` until the importer replaces it.
    pub(crate) shape: Shape,
    /// Value, when small and computable.
    pub(crate) value: Option<Value>,
    /// The data-dependent dims by axis: [`Dim::Data`] or [`Dim::Same`].
    pub(crate) data_dims: Vec<(usize, Dim)>,
    /// The element count when the dims depend on data but their product does not.
    pub(crate) element_count: Option<Expr>,
    /// An upper bound of every element (each at least 0), when the values are unknown but
    /// bounded ([`bounds`]).
    pub(crate) bound: Option<Expr>,
    /// What is known along one of its axes, when the values are unknown ([`along`]).
    pub(crate) along: Option<Along>,
}

impl Output {
    /// An output without a known value.
    pub(crate) fn new(dtype: DType, shape: Shape) -> Output {
        Output::with_value(dtype, shape, None)
    }

    /// An output with a value.
    pub(crate) fn with_value(dtype: DType, shape: Shape, value: Option<Value>) -> Output {
        Output {
            dtype,
            shape,
            value,
            data_dims: Vec::new(),
            element_count: None,
            bound: None,
            along: None,
        }
    }

    /// An output some of whose dims only the data decides.
    pub(crate) fn with_dims(dtype: DType, dims: Vec<Dim>) -> Output {
        let mut out = Output::new(dtype, Shape::with_capacity(dims.len()));
        for (axis, d) in dims.into_iter().enumerate() {
            match d {
                Dim::Known(e) => out.shape.push(e),
                d => {
                    out.shape.push(Expr::constant(1));
                    out.data_dims.push((axis, d));
                }
            }
        }
        out
    }

    /// The same output with its element count stated (the dims' product is not known, the
    /// count is).
    pub(crate) fn with_element_count(mut self, count: Expr) -> Output {
        if !self.data_dims.is_empty() {
            self.element_count = Some(count);
        }
        self
    }
}

/// One node, its attributes, inputs and opset, for the rules.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    /// The node.
    pub(crate) node: &'a NodeProto,
    /// Its attributes.
    pub(crate) attrs: NodeAttrs<'a>,
    /// The default-domain opset version the model imports.
    pub(crate) opset: i64,
    /// Inputs in operator order; `None` for an absent optional input.
    pub(crate) inputs: Vec<Option<Input<'a>>>,
    /// The graph's symbol names, so that messages name symbols as `inspect` does.
    pub(crate) symbols: &'a IndexVec<SymbolId, String>,
    /// The graph's quotient symbols so far, so that the same division of the same dim is the
    /// same symbol.
    pub(crate) quotients: &'a [(SymbolId, Quotient)],
    /// Symbols that follow from other dims, made by this node's rules: broadcasts that only
    /// the values decide ([`broadcast`]) and divisions that are not exact ([`Ctx::quotient`]),
    /// in the order made. The `i`-th is the provisional symbol numbered `symbols.len() + i`,
    /// which the importer creates under that id right after inference.
    pub(crate) derived: RefCell<Vec<Derived>>,
}

/// A symbol a rule made provisionally, and what it follows from.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Derived {
    /// The ONNX broadcast of two dims.
    Broadcast(Expr, Expr),
    /// A division rounded down or up.
    Quotient(Quotient),
}

impl<'a> Ctx<'a> {
    /// A context for `node` with no symbols made yet, in a graph whose quotient symbols are
    /// `quotients`.
    pub(crate) fn new(
        node: &'a NodeProto,
        opset: i64,
        inputs: Vec<Option<Input<'a>>>,
        symbols: &'a IndexVec<SymbolId, String>,
        quotients: &'a [(SymbolId, Quotient)],
    ) -> Ctx<'a> {
        Ctx {
            node,
            attrs: NodeAttrs(node),
            opset,
            inputs,
            symbols,
            quotients,
            derived: RefCell::new(Vec::new()),
        }
    }

    /// A dim as text, with the graph's symbol names (`12*batch`); a provisional broadcast
    /// symbol reads `broadcast(a, b)`, a provisional quotient `floor((h+1)/2)`.
    pub(crate) fn show(&self, d: &Expr) -> String {
        let known = self.symbols.len();
        if d.symbols().iter().all(|s| s.index() < known) {
            return d.display(self.symbols).to_string();
        }
        let mut names = self.symbols.clone();
        for d in self.derived.borrow().iter() {
            names.push(match d {
                Derived::Broadcast(a, b) => format!(
                    "broadcast({}, {})",
                    a.display(self.symbols),
                    b.display(self.symbols)
                ),
                Derived::Quotient(q) => q.display(self.symbols),
            });
        }
        d.display(&names).to_string()
    }

    /// Dims as text: `[batch, 8, seq]`.
    pub(crate) fn show_dims(&self, dims: &[Expr]) -> String {
        let parts: Vec<String> = dims.iter().map(|d| self.show(d)).collect();
        format!("[{}]", parts.join(", "))
    }

    /// A constant dim, for rules that need one.
    pub(crate) fn konst(&self, d: &Expr, what: &str) -> Res<i64> {
        d.as_constant().ok_or_else(|| InferError::SymbolicDim {
            what: what.to_owned(),
            dim: self.show(d),
        })
    }

    /// Rejects negative constant dims in a shape built from a value.
    pub(crate) fn check_dims(&self, shape: &Shape) -> Res<()> {
        match shape
            .iter()
            .find(|d| d.as_constant().is_some_and(|c| c < 0))
        {
            Some(d) => Err(InferError::NegativeDim {
                dim: self.show(d),
                shape: self.show_dims(shape),
            }),
            None => Ok(()),
        }
    }

    /// Input `i`, which must be present.
    pub(crate) fn input(&self, i: usize) -> Res<Input<'a>> {
        self.opt(i).ok_or(InferError::MissingInput { index: i })
    }

    /// The int attribute `name`, which must be given.
    pub(crate) fn required_int(&self, name: &str) -> Res<i64> {
        self.attrs
            .int(name)
            .ok_or_else(|| InferError::missing_attr(name))
    }

    /// The int list attribute `name`, which must be given.
    pub(crate) fn required_ints(&self, name: &str) -> Res<&'a [i64]> {
        self.attrs
            .ints(name)
            .ok_or_else(|| InferError::missing_attr(name))
    }

    /// The dtype the attribute `name` gives as an ONNX code, or `default` when it is absent.
    pub(crate) fn dtype_or(&self, name: &str, default: DType) -> Res<DType> {
        self.attrs
            .int(name)
            .map_or(Ok(default), |c| elementwise::dtype_attr(name, c))
    }

    /// Input `i`, if present.
    pub(crate) fn opt(&self, i: usize) -> Option<Input<'a>> {
        self.inputs.get(i).copied().flatten()
    }

    /// The integer value of input `i`, possibly symbolic.
    pub(crate) fn ints(&self, i: usize) -> Res<Vec<Expr>> {
        let input = self.input(i)?;
        input
            .value
            .and_then(Value::ints)
            .map(<[Expr]>::to_vec)
            .ok_or_else(|| InferError::UnknownValue {
                input: input.name.to_owned(),
            })
    }

    /// The first element of the integer value of input `i` (a count such as `K` or a depth),
    /// possibly symbolic.
    pub(crate) fn first_int(&self, i: usize) -> Res<Expr> {
        let name = self.input(i)?.name;
        self.ints(i)?
            .into_iter()
            .next()
            .ok_or_else(|| InferError::EmptyValue {
                input: name.to_owned(),
            })
    }

    /// The integer value of input `i` as constants.
    pub(crate) fn const_ints(&self, i: usize) -> Res<Vec<i64>> {
        let name = self.input(i)?.name;
        self.ints(i)?
            .iter()
            .map(Expr::as_constant)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| InferError::SymbolicValue {
                input: name.to_owned(),
            })
    }

    /// Axes from the `axes` attribute (before `input_from` opset) or from input `index`.
    pub(crate) fn axes(&self, input_from: i64, index: usize) -> Res<Option<Vec<i64>>> {
        if self.opset < input_from {
            return Ok(self.attrs.ints("axes").map(<[i64]>::to_vec));
        }
        match self.opt(index) {
            Some(_) => self.const_ints(index).map(Some),
            // Some exporters keep the attribute form past its opset.
            None => Ok(self.attrs.ints("axes").map(<[i64]>::to_vec)),
        }
    }
}

/// `axis` made non-negative for a rank of `rank`.
pub(crate) fn norm_axis(axis: i64, rank: usize) -> Res<usize> {
    memplan_ir::axis_index(axis, rank).ok_or(InferError::Axis { axis, rank })
}

/// The most terms a dim or value expression may have. Real dims have a handful (`seq+1`,
/// `12*batch`); the cap keeps a hostile file from growing polynomials without bound.
pub(crate) const MAX_TERMS: usize = 64;

/// Checks an arithmetic result against [`MAX_TERMS`].
fn bounded(e: Result<Expr, memplan_ir::ExprError>) -> Res<Expr> {
    let e = e.map_err(InferError::Arithmetic)?;
    if e.term_count() > MAX_TERMS {
        return Err(InferError::TooManyTerms { limit: MAX_TERMS });
    }
    Ok(e)
}

/// Checked `a + b` on dims.
pub(crate) fn add(a: &Expr, b: &Expr) -> Res<Expr> {
    bounded(a.checked_add(b))
}

/// Checked `a - b` on dims.
pub(crate) fn sub(a: &Expr, b: &Expr) -> Res<Expr> {
    bounded(a.checked_sub(b))
}

/// Checked `a * b` on dims.
pub(crate) fn mul(a: &Expr, b: &Expr) -> Res<Expr> {
    if a.term_count().saturating_mul(b.term_count()) > MAX_TERMS * MAX_TERMS {
        return Err(InferError::TooManyTerms { limit: MAX_TERMS });
    }
    bounded(a.checked_mul(b))
}

/// The product of dims.
pub(crate) fn product<'e>(dims: impl IntoIterator<Item = &'e Expr>) -> Res<Expr> {
    dims.into_iter()
        .try_fold(Expr::constant(1), |acc, d| mul(&acc, d))
}

/// `num / den` for products of dims, exactly: equal factors cancel first, then what is left of
/// the denominator must divide the numerator as a monomial.
pub(crate) fn divide(names: &IndexVec<SymbolId, String>, num: &[Expr], den: &[Expr]) -> Res<Expr> {
    let mut num: Vec<&Expr> = num.iter().collect();
    let mut rest = Vec::new();
    for d in den {
        match num.iter().position(|n| *n == d) {
            Some(p) => {
                num.remove(p);
            }
            None => rest.push(d),
        }
    }
    let n = product(num)?;
    let d = product(rest)?;
    n.div_exact(&d).ok_or_else(|| InferError::Divide {
        num: n.display(names).to_string(),
        den: d.display(names).to_string(),
    })
}

/// The broadcast of two shapes (ONNX's multidirectional broadcasting). Two dims broadcast
/// when they are equal or one is 1; a symbolic dim against a constant other than 1 must equal
/// it. Two different dims neither of which is known to be 1 (`seq` and `past+seq`) are
/// decided by the values: their broadcast is a new symbol ([`Ctx::derived`]) that binding
/// sets from them and checks. Two different constants, neither 1, do not broadcast.
pub(crate) fn broadcast(ctx: &Ctx<'_>, a: &Shape, b: &Shape) -> Res<Shape> {
    let rank = a.len().max(b.len());
    let one = Expr::constant(1);
    let mut out = Shape::with_capacity(rank);
    for i in 0..rank {
        let da = (i + a.len())
            .checked_sub(rank)
            .and_then(|j| a.get(j))
            .unwrap_or(&one);
        let db = (i + b.len())
            .checked_sub(rank)
            .and_then(|j| b.get(j))
            .unwrap_or(&one);
        let d = if da == db || *db == one {
            da.clone()
        } else if *da == one {
            db.clone()
        } else if da.is_constant() != db.is_constant() {
            // A symbolic dim broadcast against a constant other than 1 must equal it.
            if da.is_constant() { da } else { db }.clone()
        } else if da.is_constant() {
            return Err(InferError::Broadcast {
                a: ctx.show_dims(a),
                b: ctx.show_dims(b),
            });
        } else {
            ctx.broadcast_symbol(da, db)
        };
        out.push(d);
    }
    Ok(out)
}

impl Ctx<'_> {
    /// The provisional symbol for the broadcast of `a` and `b` (the same one for the same two
    /// dims, in either order).
    fn broadcast_symbol(&self, a: &Expr, b: &Expr) -> Expr {
        let mut made = self.derived.borrow_mut();
        let i = match made.iter().position(
            |d| matches!(d, Derived::Broadcast(x, y) if (x == a && y == b) || (x == b && y == a)),
        ) {
            Some(i) => i,
            None => {
                made.push(Derived::Broadcast(a.clone(), b.clone()));
                made.len() - 1
            }
        };
        Expr::symbol(SymbolId::new(self.symbols.len() + i))
    }

    /// `n / d` rounded down (or up, with `ceil`), for a positive `d`: a constant when `n` is
    /// one, an expression when `d` divides `n`, else an expression in a quotient symbol (the
    /// graph's when it has one of that rule, else a provisional one the importer creates).
    ///
    /// The rule is brought to one form, so that one length computed two ways is one symbol
    /// (a strided convolution's output, and the dynamo exporter's own arithmetic for it,
    /// `(samples // 80 - 3) // 2 + 1`): the parts of `n` that `d` divides come out
    /// (`floor((d*a + r) / d) = a + floor(r / d)`, every coefficient of `r` in `0..d`), and a
    /// quotient symbol in the rest with coefficient 1 and the same rounding is expanded
    /// (`floor((floor(m / a) + r) / d) = floor((m + a*r) / (a*d))`), until neither applies.
    pub(crate) fn quotient(&self, n: &Expr, d: i64, ceil: bool) -> Res<Expr> {
        if d < 1 {
            return Err(InferError::Stride { stride: d });
        }
        let (mut n, mut d) = (n.clone(), d);
        let mut whole = Expr::constant(0);
        // Each expansion replaces a symbol by a rule over older symbols: it ends.
        loop {
            let (w, rest) = n
                .div_rem_euclid(d)
                .ok_or(InferError::Stride { stride: d })?;
            whole = add(&whole, &w)?;
            n = rest;
            if let Some(c) = n.as_constant() {
                // 0 <= c < d.
                let q = i64::from(ceil && c != 0);
                return add(&whole, &Expr::constant(q));
            }
            let inner = n.symbols().into_iter().rev().find_map(|s| {
                let rule = self.quotient_rule(s)?;
                let (1, rest) = n.linear_in(s)? else {
                    return None;
                };
                (rule.ceil == ceil).then_some((rule, rest))
            });
            let Some((rule, rest)) = inner else {
                break;
            };
            let a = i64::try_from(rule.den).map_err(|_| InferError::overflow(Quantity::Dim))?;
            n = add(&rule.num, &mul(&Expr::constant(a), &rest)?)?;
            d = d
                .checked_mul(a)
                .ok_or(InferError::overflow(Quantity::Dim))?;
        }
        let den = u64::try_from(d).map_err(|_| InferError::Stride { stride: d })?;
        let rule = Quotient::new(n, den, ceil);
        let symbol = match self.quotients.iter().find(|(_, r)| *r == rule) {
            Some((s, _)) => *s,
            None => {
                let mut made = self.derived.borrow_mut();
                let i = match made
                    .iter()
                    .position(|x| matches!(x, Derived::Quotient(r) if *r == rule))
                {
                    Some(i) => i,
                    None => {
                        made.push(Derived::Quotient(rule));
                        made.len() - 1
                    }
                };
                SymbolId::new(self.symbols.len() + i)
            }
        };
        add(&whole, &Expr::symbol(symbol))
    }

    /// The rule of quotient symbol `s`: the graph's, or one this node made.
    fn quotient_rule(&self, s: SymbolId) -> Option<Quotient> {
        if let Ok(i) = self.quotients.binary_search_by_key(&s, |(id, _)| *id) {
            return self.quotients.get(i).map(|(_, q)| q.clone());
        }
        let i = s.index().checked_sub(self.symbols.len())?;
        match self.derived.borrow().get(i)? {
            Derived::Quotient(q) => Some(q.clone()),
            Derived::Broadcast(..) => None,
        }
    }
}

/// The element count of a constant shape, if it is one and small enough to hold as a value.
pub(crate) fn count(shape: &Shape) -> Option<u64> {
    let n = shape.iter().try_fold(1u64, |acc, d| {
        acc.checked_mul(u64::try_from(d.as_constant()?).ok()?)
    })?;
    (n <= MAX_VALUE_ELEMENTS).then_some(n)
}

type Family = fn(&str, &Ctx<'_>) -> Res<Option<Vec<Output>>>;

/// The default-domain rule families, tried in order.
const FAMILIES: [Family; 11] = [
    elementwise::infer,
    nn::infer,
    movement::infer,
    indexing::infer,
    generate::infer,
    reduce::infer,
    signal::infer,
    sequence::infer,
    data_dependent::infer,
    contrib::infer_default,
    training::infer_default,
];

/// Infers the outputs of a node of the default domain (`domain` empty) or of
/// `com.microsoft`; `Err` says what is missing.
pub(crate) fn infer(domain: &str, ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let op = ctx.node.op_type.as_str();
    match domain {
        // `ai.onnx.preview` holds default-domain ops on their way in (FlexAttention).
        "" | "ai.onnx.preview" => {}
        "com.microsoft" => {
            if let Some(out) = training::infer(op, ctx)? {
                return Ok(out);
            }
            return contrib::infer(op, ctx)?.ok_or_else(|| InferError::NoRule {
                op: format!("{domain}.{op}"),
            });
        }
        "ai.onnx.ml" | "ai.onnx.preview.training" | "ai.onnx.training" => {
            return Err(InferError::Unsupported {
                op: format!("{domain}.{op}"),
                why: Refusal::Domain(domain.to_owned()),
            });
        }
        _ => {
            return Err(InferError::NoRule {
                op: format!("{domain}.{op}"),
            });
        }
    }
    for family in FAMILIES {
        let outputs = match family(op, ctx) {
            Ok(Some(out)) => out,
            Ok(None) => continue,
            // A value only the data decides: the op's data-dependent form, if it has one.
            Err(e @ InferError::UnknownValue { .. }) => {
                data_dependent::fallback(op, ctx)?.ok_or(e)?
            }
            Err(e) => return Err(e),
        };
        return Ok(with_bounds(op, ctx, outputs));
    }
    Err(InferError::NoRule { op: op.to_owned() })
}

/// `outputs` with the bounds of their values ([`bounds::bound`]) and what is known along
/// their axes ([`along::along`]).
fn with_bounds(op: &str, ctx: &Ctx<'_>, mut outputs: Vec<Output>) -> Vec<Output> {
    let found: Vec<(Option<Expr>, Option<Along>)> = (0..outputs.len())
        .map(|k| {
            (
                bounds::bound(op, ctx, &outputs, k),
                along::along(op, ctx, &outputs, k),
            )
        })
        .collect();
    for (out, (b, a)) in outputs.iter_mut().zip(found) {
        out.bound = b.filter(|b| b.term_count() <= MAX_TERMS);
        out.along = a;
    }
    outputs
}
