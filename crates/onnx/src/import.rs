//! From a decoded `ModelProto` to a [`Graph`].
//!
//! Tensors are added in the corpus's order: graph inputs (less those that are also
//! initializers, as IR < 4 files list them), initializers, `Constant` node outputs (which
//! become weights and leave no node behind), then each node's outputs in node order. A node
//! output's type comes from `value_info` (or the graph outputs) when the file gives a complete
//! one and [`ImportOptions::infer_all`] is off; otherwise from [`crate::infer`]. Small integer
//! values are tracked alongside, so shape arithmetic (`Shape` → `Gather` → `Concat` →
//! `Reshape`) resolves even where the file gives no types. A declared dim named after a symbol
//! that nothing defined yet (`unk__3`, as ONNX's own shape inference invents them) cannot be
//! bound by the caller, so the inferred dim replaces it; only where inference fails does the
//! name become a symbol.
//!
//! Graph-valued attributes (If's branches, Loop's and Scan's `body`, and any other op's) are
//! imported recursively by module `control` into [`memplan_ir::Body`] graphs; names in a body
//! resolve against the body's own values first, then the enclosing scopes, innermost first
//! (ONNX's lexical scoping). An outer value a body reads becomes an input of the body and an
//! implicit input of the node, and of every enclosing node up to the main graph.
//!
//! Invariants: every tensor name is unique (a repeat is an error, not a silent merge); a node
//! only reads tensors defined before it; no shape has a negative constant dim, and every static
//! tensor's byte size fits in `u64`. Nothing is allocated from a declared size.

use std::collections::{HashMap, HashSet};

use memplan_ir::{DType, Expr, Graph, Node, Shape, SymbolId, Tensor, TensorId, TensorKind};

use crate::ImportOptions;
use crate::attrs::{NodeAttrs, small_attrs};
use crate::error::{OnnxError, Refusal};
use crate::infer::{self, Along, Ctx, Dim, InferError, Input, Output};
use crate::proto::{self, ModelProto, NodeProto, TensorProto, TypeProto, ValueInfoProto};
use crate::tensor::{self, MAX_VALUE_ELEMENTS};
use crate::value::Value;

mod control;

/// The highest tensor rank accepted. Real models stay under 10; the cap keeps per-node work
/// (axis lists, permutations) small on hostile files.
pub(crate) const MAX_RANK: usize = 1024;

/// The default-domain opset assumed when a model imports none.
const DEFAULT_OPSET: i64 = 21;

/// Default-domain ops refused by name: SequenceMap runs a body per item of sequences whose
/// items may differ in shape.
const NON_TENSOR_OPS: &[&str] = &["SequenceMap"];

/// Whether `domain` is ONNX's default operator domain.
fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// A dim of a declared type.
#[derive(Debug)]
enum DeclDim {
    /// A constant, or an expression over symbols the graph already has.
    Known(Expr),
    /// A name over symbols nothing defined yet (`unk__3`, invented by ONNX's own shape
    /// inference): the caller could not bind it, so inference replaces it where it can.
    Foreign(String),
}

/// Checks a dim expression read from the file: not negative, not too large.
fn check_dim(tensor: &str, i: usize, text: &str, e: Expr) -> Result<Expr, OnnxError> {
    let bad = |reason: String| OnnxError::Dim {
        tensor: tensor.to_owned(),
        dim: i,
        reason,
    };
    match e.as_constant() {
        Some(c) if c < 0 => Err(bad(format!("`{text}` is negative"))),
        _ if e.term_count() > infer::MAX_TERMS => Err(bad(format!(
            "`{text}` has more than {} terms",
            infer::MAX_TERMS
        ))),
        _ => Ok(e),
    }
}

struct Importer<'m, 'o> {
    graph: Graph,
    /// The value of each tensor, by id, when small and known.
    values: Vec<Option<Value>>,
    /// An upper bound of each integer tensor's elements, by id, when the data decides them
    /// (`infer::bounds`).
    bounds: Vec<Option<Expr>>,
    /// What is known along one axis of each integer or boolean tensor, by id, when the data
    /// decides its values (`infer::along`).
    alongs: Vec<Option<Along>>,
    /// The input of each inclusive `CumSum` output, by output id: `Sub(CumSum(c), c)`, the
    /// exclusive sum of a non-negative `c`, is never negative and at most the inclusive one
    /// (the start offsets a mixture-of-experts block slices each expert's tokens from).
    cumsums: HashMap<TensorId, TensorId>,
    /// Types the file declares for node outputs (value_info and graph outputs).
    declared: HashMap<&'m str, &'m TypeProto>,
    outputs: HashSet<&'m str>,
    opset: i64,
    infer_all: bool,
    /// The enclosing graphs of a body, outermost first (empty for the main graph).
    outer: Vec<Scope<'o>>,
    /// Names a body read from its enclosing scopes, in the order it first read them.
    captured: Vec<String>,
}

/// An enclosing graph as a body sees it: its tensors and their known values.
#[derive(Clone, Copy)]
struct Scope<'o> {
    graph: &'o Graph,
    values: &'o [Option<Value>],
}

/// Types the file declares for values of `g` (value_info and graph outputs), unless
/// inference is to decide every shape.
fn declared_types(g: &proto::GraphProto, infer_all: bool) -> HashMap<&str, &TypeProto> {
    let mut declared = HashMap::new();
    if !infer_all {
        for vi in g.value_info.iter().chain(&g.output) {
            if let Some(t) = &vi.r#type {
                declared.entry(vi.name.as_str()).or_insert(t);
            }
        }
    }
    declared
}

/// Imports a decoded model.
pub(crate) fn import_model(
    model: &ModelProto,
    options: &ImportOptions,
) -> Result<Graph, OnnxError> {
    let g = model.graph.as_ref().ok_or(OnnxError::NoGraph)?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| is_default_domain(&o.domain))
        .map_or(DEFAULT_OPSET, |o| o.version);
    let mut graph = Graph::new(if g.name.is_empty() {
        "graph"
    } else {
        g.name.as_str()
    });
    let producer = format!("{} {}", model.producer_name, model.producer_version);
    if !producer.trim().is_empty() {
        graph.set_metadata("source", format!("ONNX model by {}", producer.trim()));
    }
    let mut im = Importer {
        graph,
        values: Vec::new(),
        bounds: Vec::new(),
        alongs: Vec::new(),
        cumsums: HashMap::new(),
        declared: declared_types(g, options.infer_all),
        outputs: g.output.iter().map(|o| o.name.as_str()).collect(),
        opset,
        infer_all: options.infer_all,
        outer: Vec::new(),
        captured: Vec::new(),
    };
    let initializers: HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    for input in &g.input {
        if !initializers.contains(input.name.as_str()) {
            im.graph_input(input)?;
        }
    }
    im.contents(g)?;
    // `Constant` nodes make constants, never parameters to train.
    let constants: Vec<&str> = g
        .node
        .iter()
        .filter(|n| is_constant(n))
        .filter_map(|n| n.output.first())
        .map(String::as_str)
        .filter(|n| !n.is_empty())
        .collect();
    if !constants.is_empty() {
        im.graph
            .set_metadata(memplan_ir::CONSTANT_NODES, constants.join("\n"));
    }
    let uniform = uniform_constants(g, &im.graph);
    if !uniform.is_empty() {
        im.graph
            .set_metadata(memplan_ir::UNIFORM_CONSTANTS, uniform.join("\n"));
    }
    let mut order = Vec::with_capacity(g.output.len());
    for o in &g.output {
        match im.graph.find_tensor(&o.name) {
            Some(t) => order.push(t),
            None => return Err(OnnxError::MissingOutput(o.name.clone())),
        }
    }
    let mut graph = im.graph;
    graph.set_output_order(order);
    graph.share_symbols();
    graph.validate().map_err(OnnxError::Invalid)?;
    if options.dims.is_empty() {
        return Ok(graph);
    }
    let pairs: Vec<(&str, u64)> = options.dims.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let bindings = graph.bind(&pairs).map_err(OnnxError::Bind)?;
    graph.bound(&bindings).map_err(OnnxError::Bound)
}

/// `name<TAB>value` for every initializer and `Constant` tensor of the main graph `g` whose
/// elements are all equal ([`tensor::uniform`]), as `graph` (imported from `g`) has them.
fn uniform_constants(g: &proto::GraphProto, graph: &Graph) -> Vec<String> {
    let constants = g
        .node
        .iter()
        .filter(|n| is_constant(n))
        .filter_map(|n| Some((n.output.first()?, NodeAttrs(n).tensor("value")?)));
    g.initializer
        .iter()
        .map(|t| (&t.name, t))
        .chain(constants)
        .filter_map(|(name, t)| {
            let x = graph.tensor(graph.find_tensor(name)?);
            let elements = x.static_elements().ok()?;
            let value = tensor::uniform(t, x.dtype, elements)?;
            Some(format!("{name}\t{value}"))
        })
        .collect()
}

fn is_constant(node: &NodeProto) -> bool {
    node.op_type == "Constant" && is_default_domain(&node.domain)
}

impl<'m> Importer<'m, '_> {
    /// Initializers, `Constant` outputs and nodes of `g`, after its inputs.
    fn contents(&mut self, g: &'m proto::GraphProto) -> Result<(), OnnxError> {
        for t in &g.initializer {
            self.weight(&t.name, t)?;
        }
        for node in g.node.iter().filter(|n| is_constant(n)) {
            self.constant(node)?;
        }
        for (i, node) in g.node.iter().enumerate() {
            if !is_constant(node) {
                self.node(i, node)?;
            }
        }
        Ok(())
    }

    /// The tensor called `name`: this graph's own, or else (in a body) the innermost enclosing
    /// graph's, which the body then captures as an input of its own.
    fn resolve(&mut self, name: &str) -> Option<TensorId> {
        if let Some(id) = self.graph.find_tensor(name) {
            return Some(id);
        }
        let (t, value) = self.outer.iter().rev().find_map(|scope| {
            let id = scope.graph.find_tensor(name)?;
            let t = scope.graph.tensors().get(id)?;
            Some((t, scope.values.get(id.0 as usize).cloned().flatten()))
        })?;
        let (dtype, shape) = (t.dtype, t.shape.clone());
        let id = self
            .add(name, dtype, shape, TensorKind::Input, value)
            .ok()?;
        self.captured.push(name.to_owned());
        Some(id)
    }

    fn add(
        &mut self,
        name: &str,
        dtype: DType,
        shape: Shape,
        kind: TensorKind,
        value: Option<Value>,
    ) -> Result<TensorId, OnnxError> {
        if self.graph.find_tensor(name).is_some() {
            return Err(OnnxError::Duplicate(name.to_owned()));
        }
        if shape.len() > MAX_RANK {
            return Err(OnnxError::Dim {
                tensor: name.to_owned(),
                dim: MAX_RANK,
                reason: format!("rank {} is over the limit of {MAX_RANK}", shape.len()),
            });
        }
        check_size(name, dtype, &shape)?;
        let int_value = match (&value, kind) {
            (Some(v), TensorKind::Weight) if !dtype.is_float() => v.const_ints(),
            _ => None,
        };
        let id = self.graph.add_tensor(
            Tensor::of_shape(name.to_owned(), dtype, shape, kind).with_int_value(int_value),
        );
        self.values.push(value);
        self.bounds.push(None);
        self.alongs.push(None);
        Ok(id)
    }

    /// One dim of a declared type: `Some` constant or expression, `None` when unknown. With
    /// `create`, names become symbols; without it, a name that mentions a symbol the graph does
    /// not have yet is [`DeclDim::Foreign`], to be replaced by inference or created later.
    fn dim(
        &mut self,
        tensor: &str,
        i: usize,
        dim: &proto::tensor_shape_proto::Dimension,
        create: bool,
    ) -> Result<Option<DeclDim>, OnnxError> {
        use proto::tensor_shape_proto::dimension::Value as D;
        match &dim.value {
            Some(D::DimValue(v)) if *v < 0 => Err(OnnxError::Dim {
                tensor: tensor.to_owned(),
                dim: i,
                reason: format!("negative size {v}"),
            }),
            Some(D::DimValue(v)) => Ok(Some(DeclDim::Known(Expr::constant(*v)))),
            Some(D::DimParam(p)) if !p.trim().is_empty() => {
                let text: String = p.split_whitespace().collect();
                if create {
                    return self
                        .symbolic_dim(tensor, i, &text)
                        .map(|e| Some(DeclDim::Known(e)));
                }
                let graph = &self.graph;
                let known = Expr::parse(&text, |s| graph.find_symbol(s).ok_or_else(String::new))
                    .ok()
                    .or_else(|| graph.find_symbol(&text).map(Expr::symbol));
                match known {
                    Some(e) => check_dim(tensor, i, &text, e).map(|e| Some(DeclDim::Known(e))),
                    None => Ok(Some(DeclDim::Foreign(text))),
                }
            }
            _ => Ok(None),
        }
    }

    /// The expression for a `dim_param`, creating its symbols. A string memplan cannot read as
    /// an expression (`N/2`, say) becomes one opaque symbol of that name.
    fn symbolic_dim(&mut self, tensor: &str, i: usize, text: &str) -> Result<Expr, OnnxError> {
        let graph = &mut self.graph;
        // A dry run first, so that a string that does not parse creates no symbols.
        let parses = Expr::parse(text, |_| Ok(SymbolId(0))).is_ok();
        let e = match parses.then(|| Expr::parse(text, |s| Ok(graph.symbol(s)))) {
            Some(Ok(e)) => e,
            _ => Expr::symbol(graph.symbol(text)),
        };
        check_dim(tensor, i, text, e)
    }

    /// A declared tensor type: `Ok(None)` when the file gives no complete one.
    fn declared_type(
        &mut self,
        tensor: &str,
        t: &TypeProto,
    ) -> Result<Option<(DType, Vec<DeclDim>)>, OnnxError> {
        let Some(proto::type_proto::Value::TensorType(tt)) = &t.value else {
            return Ok(None);
        };
        let Some(shape) = &tt.shape else {
            return Ok(None);
        };
        if tt.elem_type == 0 {
            return Ok(None);
        }
        let dtype = tensor::dtype(tt.elem_type, tensor)?;
        let mut dims = Vec::with_capacity(shape.dim.len());
        for (i, d) in shape.dim.iter().enumerate() {
            match self.dim(tensor, i, d, false)? {
                Some(e) => dims.push(e),
                None => return Ok(None),
            }
        }
        Ok(Some((dtype, dims)))
    }

    fn graph_input(&mut self, vi: &ValueInfoProto) -> Result<(), OnnxError> {
        let missing = |what: &str| OnnxError::Type {
            tensor: vi.name.clone(),
            what: what.to_owned(),
        };
        use proto::type_proto::Value as V;
        fn inner(t: &Option<Box<TypeProto>>) -> Option<&proto::type_proto::Value> {
            t.as_ref().and_then(|t| t.value.as_ref())
        }
        let mut value = vi.r#type.as_ref().and_then(|t| t.value.as_ref());
        // An optional value is planned as its value: the bytes it has when present.
        if let Some(V::OptionalType(o)) = value {
            value = inner(&o.elem_type);
        }
        // A sequence of tensors is planned as its items back to back: `[length, item dims]`.
        let sequence = match value {
            Some(V::SequenceType(s)) => {
                value = inner(&s.elem_type);
                true
            }
            _ => false,
        };
        let tt = match value {
            Some(V::TensorType(tt)) => tt,
            Some(other) => {
                let kind = match other {
                    V::SequenceType(_) => "a sequence of sequences",
                    V::OptionalType(_) => "an optional of an optional",
                    V::MapType(_) => "a map",
                    _ => "a non-tensor value",
                };
                return Err(missing(&format!(
                    "graph input is {kind}; memplan plans tensors and sequences of tensors only"
                )));
            }
            None => return Err(missing("graph input has no tensor type")),
        };
        let dtype = tensor::dtype(tt.elem_type, &vi.name)?;
        let base = symbol_base(&vi.name);
        let mut shape = Shape::new();
        if sequence {
            shape.push(Expr::symbol(self.graph.symbol(&format!("{base}_len"))));
        }
        let dims = match (&tt.shape, sequence) {
            (Some(dims), _) => dims,
            // Items of a shape the file does not give: each a flat run of elements.
            (None, true) => {
                shape.push(Expr::symbol(self.graph.symbol(&format!("{base}_item"))));
                self.add(&vi.name, dtype, shape, TensorKind::Input, None)?;
                return Ok(());
            }
            (None, false) => return Err(missing("graph input has no shape")),
        };
        let first = shape.len();
        for (i, d) in dims.dim.iter().enumerate() {
            let i = i + first;
            let e = match self.dim(&vi.name, i, d, true)? {
                Some(DeclDim::Known(e)) => e,
                Some(DeclDim::Foreign(text)) => self.symbolic_dim(&vi.name, i, &text)?,
                // An unnamed dynamic dim: give it a name the caller can bind, in the scheme of
                // every symbol memplan names (`{where}_d{axis}`).
                None => {
                    let base = symbol_base(&vi.name);
                    Expr::symbol(self.graph.symbol(&format!("{base}_d{i}")))
                }
            };
            shape.push(e);
        }
        self.add(&vi.name, dtype, shape, TensorKind::Input, None)?;
        Ok(())
    }

    fn weight(&mut self, name: &str, t: &TensorProto) -> Result<(), OnnxError> {
        let dtype = tensor::dtype(t.data_type, name)?;
        let (shape, elements) = tensor::static_shape(name, dtype, &t.dims)?;
        let value = tensor::values(t, dtype, elements);
        self.add(name, dtype, shape, TensorKind::Weight, value)?;
        Ok(())
    }

    /// A `Constant` node's output, as a weight.
    fn constant(&mut self, node: &NodeProto) -> Result<(), OnnxError> {
        let out = node.output.first().map(String::as_str).unwrap_or_default();
        let attrs = NodeAttrs(node);
        let err = |reason: &str| OnnxError::Attr {
            node: node.name.clone(),
            op: node.op_type.clone(),
            attr: "value".into(),
            reason: reason.to_owned(),
        };
        if out.is_empty() {
            return Err(err("the Constant has no output"));
        }
        if let Some(t) = attrs.tensor("value") {
            return self.weight(out, t);
        }
        let Some(a) = node.attribute.first() else {
            return Err(err("the Constant has no value attribute"));
        };
        let ints = |v: &[i64]| Some(Value::Ints(v.iter().map(|&c| Expr::constant(c)).collect()));
        let len = |n: usize| {
            i64::try_from(n)
                .map(Expr::constant)
                .map_err(|_| err("too many values"))
        };
        let (dtype, shape, value): (DType, Shape, Option<Value>) = match a.name.as_str() {
            "value_int" => (DType::I64, Shape::new(), ints(&[a.i])),
            "value_float" => (
                DType::F32,
                Shape::new(),
                Some(Value::Floats(vec![f64::from(a.f)])),
            ),
            "value_ints" => {
                let v = (a.ints.len() as u64 <= MAX_VALUE_ELEMENTS)
                    .then(|| ints(&a.ints))
                    .flatten();
                (DType::I64, [len(a.ints.len())?].into_iter().collect(), v)
            }
            "value_floats" => (
                DType::F32,
                [len(a.floats.len())?].into_iter().collect(),
                None,
            ),
            "value_string" => (DType::String, Shape::new(), None),
            "value_strings" => (
                DType::String,
                [len(a.strings.len())?].into_iter().collect(),
                None,
            ),
            "sparse_value" => {
                let t = a
                    .sparse_tensor
                    .as_ref()
                    .and_then(|s| s.values.as_ref())
                    .ok_or_else(|| err("sparse_value has no values"))?;
                let dtype = tensor::dtype(t.data_type, out)?;
                let dims = a
                    .sparse_tensor
                    .as_ref()
                    .map(|s| s.dims.as_slice())
                    .unwrap_or_default();
                let (shape, _) = tensor::static_shape(out, dtype, dims)?;
                (dtype, shape, None)
            }
            other => return Err(err(&format!("unknown Constant attribute `{other}`"))),
        };
        self.add(out, dtype, shape, TensorKind::Weight, value)?;
        Ok(())
    }

    fn node(&mut self, index: usize, node: &'m NodeProto) -> Result<(), OnnxError> {
        let name = if node.name.is_empty() {
            format!("n{index}_{}", node.op_type)
        } else {
            node.name.clone()
        };
        let op = if is_default_domain(&node.domain) {
            node.op_type.clone()
        } else {
            format!("{}.{}", node.domain, node.op_type)
        };
        let mut inputs = Vec::with_capacity(node.input.len());
        for input in &node.input {
            if input.is_empty() {
                inputs.push(None);
                continue;
            }
            let id = self
                .resolve(input)
                .ok_or_else(|| OnnxError::MissingTensor {
                    node: name.clone(),
                    op: op.clone(),
                    tensor: input.clone(),
                })?;
            inputs.push(Some(id));
        }
        let bodies = self.bodies(&name, &op, node, &inputs)?;
        let inferred = if let Some(from_bodies) = bodies.outputs {
            from_bodies
        } else {
            let ctx = Ctx::new(
                node,
                self.opset,
                inputs
                    .iter()
                    .map(|id| {
                        let id = (*id)?;
                        let t = self.graph.tensors().get(id)?;
                        Some(Input {
                            name: &t.name,
                            dtype: t.dtype,
                            shape: &t.shape,
                            value: self.values.get(id.0 as usize).and_then(Option::as_ref),
                            bound: self.bounds.get(id.0 as usize).and_then(Option::as_ref),
                            along: self.alongs.get(id.0 as usize).copied().flatten(),
                        })
                    })
                    .collect(),
                self.graph.symbols(),
                self.graph.symbol_quotients(),
            );
            let domain = if is_default_domain(&node.domain) {
                ""
            } else {
                node.domain.as_str()
            };
            let inferred = if domain.is_empty() && NON_TENSOR_OPS.contains(&node.op_type.as_str()) {
                Err(InferError::Unsupported {
                    op: op.clone(),
                    why: Refusal::MapsSequence,
                })
            } else {
                infer::infer(domain, &ctx)
            };
            let derived = ctx.derived.into_inner();
            if let Ok(outputs) = &inferred {
                self.derived_symbols(&name, &derived, outputs);
            }
            inferred
        };
        let mut outputs = Vec::with_capacity(node.output.len());
        let mut made = Vec::new();
        for (k, out) in node.output.iter().enumerate() {
            if out.is_empty() {
                continue;
            }
            let guess: Option<&Output> = inferred.as_ref().ok().and_then(|v| v.get(k));
            let declared = match self.declared.get(out.as_str()) {
                Some(t) => self.declared_type(out, t)?,
                None => None,
            };
            let mut element_count = None;
            let (dtype, shape, value) = match (declared, guess) {
                // Dims named after symbols no graph input defines (`unk__3`, invented by ONNX's
                // own shape inference) cannot be bound by the caller: inference knows better.
                (Some((dtype, declared)), Some(g)) if declared.len() == g.shape.len() => {
                    let inferred = if declared.iter().any(|d| matches!(d, DeclDim::Foreign(_))) {
                        self.data_shape(&name, k, g, &mut made)
                    } else {
                        g.shape.clone()
                    };
                    let shape: Shape = declared
                        .into_iter()
                        .zip(&inferred)
                        .map(|(d, inferred)| match d {
                            DeclDim::Known(e) => e,
                            DeclDim::Foreign(_) => inferred.clone(),
                        })
                        .collect();
                    let value = (shape == g.shape).then(|| g.value.clone()).flatten();
                    (dtype, shape, value)
                }
                (Some((dtype, declared)), g) => {
                    let mut shape = Shape::with_capacity(declared.len());
                    for (i, d) in declared.into_iter().enumerate() {
                        shape.push(match d {
                            DeclDim::Known(e) => e,
                            DeclDim::Foreign(text) => self.symbolic_dim(out, i, &text)?,
                        });
                    }
                    let value = g.filter(|g| g.shape == shape).and_then(|g| g.value.clone());
                    (dtype, shape, value)
                }
                (None, Some(g)) => {
                    let shape = self.data_shape(&name, k, g, &mut made);
                    element_count.clone_from(&g.element_count);
                    // Dims that depend on data but have a known product keep it through ops
                    // that keep the dims (Relu, Cast, Add of same shapes).
                    if element_count.is_none() {
                        element_count = inputs.iter().flatten().find_map(|&i| {
                            let t = self.graph.tensors().get(i)?;
                            (t.shape == shape)
                                .then(|| t.element_count.clone())
                                .flatten()
                        });
                    }
                    let value = g.data_dims.is_empty().then(|| g.value.clone()).flatten();
                    (g.dtype, shape, value)
                }
                (None, None) => {
                    let reason = match &inferred {
                        Err(e) => e.clone(),
                        Ok(v) => InferError::OutputCount {
                            count: v.len(),
                            index: k,
                        },
                    };
                    return Err(OnnxError::Shape {
                        node: name,
                        op,
                        tensor: out.clone(),
                        reason: Box::new(reason),
                    });
                }
            };
            if let Some(d) = shape
                .iter()
                .find(|d| d.as_constant().is_some_and(|c| c < 0))
            {
                return Err(OnnxError::Shape {
                    node: name,
                    op,
                    tensor: out.clone(),
                    reason: Box::new(InferError::InferredNegative {
                        dim: d.display(self.graph.symbols()).to_string(),
                        shape: format!(
                            "[{}]",
                            shape
                                .iter()
                                .map(|d| d.display(self.graph.symbols()).to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    }),
                });
            }
            let value = value.filter(|v| static_len(&shape).is_none_or(|n| n == v.len()));
            let kind = if self.outputs.contains(out.as_str()) {
                TensorKind::Output
            } else {
                TensorKind::Activation
            };
            let id = self.add(out, dtype, shape, kind, value)?;
            if let (Some(slot), Some(g)) = (self.bounds.get_mut(id.0 as usize), guess) {
                slot.clone_from(&g.bound);
            }
            self.exclusive_sum_bound(node, &op, &inputs, id);
            if let (Some(slot), Some(g)) = (self.alongs.get_mut(id.0 as usize), guess) {
                *slot = g.along;
            }
            if element_count.is_some() {
                self.graph.set_element_count(id, element_count);
            }
            outputs.push(id);
        }
        if op == "Split" {
            self.split_facts(node, &inputs, &outputs);
        }
        self.graph.add_node(
            Node::new(name, op, inputs, outputs)
                .with_attrs(small_attrs(node))
                .with_bodies(bodies.bodies)
                .with_implicit_inputs(bodies.implicit_inputs),
        );
        Ok(())
    }
}

impl Importer<'_, '_> {
    /// Bounds from a node's structure that no rule of one node can see: an inclusive `CumSum`
    /// of a non-negative `c` is remembered, and `Sub(CumSum(c), c)` (the exclusive sum: each
    /// element the sum of the elements before it, so never negative) gets the inclusive
    /// sum's bound. The TorchScript and dynamo exporters both write a mixture-of-experts
    /// block's per-expert start offsets (`counts.cumsum(0) - counts`) this way, and a `Range`
    /// from such a start to the inclusive sum is then bounded (issue 36).
    fn exclusive_sum_bound(
        &mut self,
        node: &NodeProto,
        op: &str,
        inputs: &[Option<TensorId>],
        out: TensorId,
    ) {
        let bound_of = |im: &Self, t: TensorId| im.bounds.get(t.0 as usize).cloned().flatten();
        match (op, inputs) {
            ("CumSum", [Some(c), ..]) => {
                let attrs = NodeAttrs(node);
                if attrs.int_or("exclusive", 0) == 0 && bound_of(self, *c).is_some() {
                    self.cumsums.insert(out, *c);
                }
            }
            ("Sub", [Some(a), Some(c)]) if self.cumsums.get(a) == Some(c) => {
                let same_shape = {
                    let t = self.graph.tensors();
                    t.get(*a).map(|x| &x.shape) == t.get(*c).map(|x| &x.shape)
                        && t.get(out).map(|x| &x.shape) == t.get(*a).map(|x| &x.shape)
                };
                let b = bound_of(self, *a);
                if let (true, Some(b), Some(slot)) =
                    (same_shape, b, self.bounds.get_mut(out.0 as usize))
                    && slot.is_none()
                {
                    *slot = Some(b);
                }
            }
            _ => {}
        }
    }

    /// A `Split`'s facts: with constant sizes summing to `S` along an axis whose length is a bounded data-dependent
    /// symbol, that symbol is `S` whenever the model runs, so `S` is its bound where the one
    /// inference found is larger or not a constant (the tighter of the two: a bound the split
    /// contradicts is no bound).
    fn split_facts(&mut self, node: &NodeProto, inputs: &[Option<TensorId>], outputs: &[TensorId]) {
        let Some(Some(x)) = inputs.first().copied() else {
            return;
        };
        let Some(xt) = self.graph.tensors().get(x) else {
            return;
        };
        let rank = xt.shape.len();
        let Ok(axis) = infer::norm_axis(NodeAttrs(node).int_or("axis", 0), rank) else {
            return;
        };
        let Some(dim) = xt.shape.get(axis).cloned() else {
            return;
        };
        let sizes: Option<Vec<i64>> = match inputs.get(1).copied().flatten() {
            Some(s) => self
                .values
                .get(s.0 as usize)
                .and_then(Option::as_ref)
                .and_then(Value::const_ints),
            None => NodeAttrs(node).ints("split").map(<[i64]>::to_vec),
        };
        match sizes {
            Some(sizes) if sizes.len() == outputs.len() => {
                let Some(sum) = sizes.iter().try_fold(0i64, |a, &v| a.checked_add(v)) else {
                    return;
                };
                if let [sym] = dim.symbols()[..]
                    && dim == Expr::symbol(sym)
                    && let Some(b) = self.graph.symbol_bound(sym)
                    && b.as_constant().is_none_or(|b| b > sum)
                    && sum >= 0
                {
                    self.graph.set_symbol_bound(sym, Expr::constant(sum));
                }
            }
            _ => {}
        }
    }

    /// Creates the symbols that inference made provisionally ([`infer::Derived`]: broadcasts
    /// only the values decide, divisions that are not exact), under the ids it gave them (the
    /// next ones), each named after the first output dim it is (`Add_3_o0_d1`, the scheme of
    /// every symbol memplan makes), or `{node}_b{i}` (a broadcast) or `{node}_q{i}` (a
    /// quotient) when it is no whole dim, with its rule on the graph.
    fn derived_symbols(&mut self, node: &str, derived: &[infer::Derived], outputs: &[Output]) {
        let first = self.graph.symbols().len();
        let base = symbol_base(node);
        for (i, d) in derived.iter().enumerate() {
            let provisional = Expr::symbol(SymbolId::new(first + i));
            let at = outputs.iter().enumerate().find_map(|(k, o)| {
                let axis = o.shape.iter().position(|d| *d == provisional)?;
                Some(format!("{base}_o{k}_d{axis}"))
            });
            let tag = match d {
                infer::Derived::Broadcast(..) => 'b',
                infer::Derived::Quotient(_) => 'q',
            };
            let mut name = at.unwrap_or_else(|| format!("{base}_{tag}{i}"));
            let stem = name.clone();
            let mut n = 2;
            while self.graph.find_symbol(&name).is_some() {
                name = format!("{stem}_{n}");
                n += 1;
            }
            let s = self.graph.symbol(&name);
            debug_assert_eq!(s.index(), first + i, "a provisional id was taken");
            match d {
                infer::Derived::Broadcast(a, b) => {
                    self.graph.set_symbol_broadcast(s, a.clone(), b.clone());
                }
                infer::Derived::Quotient(q) => {
                    self.graph.set_symbol_quotient(s, q.clone());
                }
            }
        }
    }

    /// The shape of inferred output `k` of node `node`, each data-dependent dim a fresh symbol
    /// named after the node, output and axis (`NonZero_7_o0_d1`), with the op's bound
    /// recorded on the graph.
    ///
    /// `made` lists the symbols made for the node's earlier outputs (output, axis, symbol), so
    /// that a [`Dim::Same`] dim reuses one.
    fn data_shape(
        &mut self,
        node: &str,
        k: usize,
        out: &Output,
        made: &mut Vec<(usize, usize, SymbolId)>,
    ) -> Shape {
        let mut shape = out.shape.clone();
        for (axis, dim) in &out.data_dims {
            let earlier = match dim {
                Dim::Same { output, axis } => made
                    .iter()
                    .find(|(o, a, _)| o == output && a == axis)
                    .map(|(_, _, s)| *s),
                _ => None,
            };
            let s = match earlier {
                Some(s) => s,
                None => {
                    let base = symbol_base(node);
                    let mut name = format!("{base}_o{k}_d{axis}");
                    let mut n = 2;
                    while self.graph.find_symbol(&name).is_some() {
                        name = format!("{base}_o{k}_d{axis}_{n}");
                        n += 1;
                    }
                    let s = self.graph.symbol(&name);
                    if let Dim::Data(Some(b)) = dim {
                        self.graph.set_symbol_bound(s, b.clone());
                    }
                    s
                }
            };
            made.push((k, *axis, s));
            if let Some(d) = shape.get_mut(*axis) {
                *d = Expr::symbol(s);
            }
        }
        shape
    }
}

/// A node name as the start of a symbol name: letters, digits and `_`, not starting with a
/// digit (so that `--dim` and the dim grammar accept it).
fn symbol_base(node: &str) -> String {
    let mut base: String = node
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if !base.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        base.insert(0, 'n');
    }
    base
}

/// The element count of a constant shape, when it fits in `usize`.
fn static_len(shape: &Shape) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, d| {
        acc.checked_mul(usize::try_from(d.as_constant()?).ok()?)
    })
}

/// Checks that a tensor's element and byte counts are computable: for a static shape, in `u64`;
/// for a symbolic one, as a polynomial with no overflowing coefficient.
fn check_size(name: &str, dtype: DType, shape: &Shape) -> Result<(), OnnxError> {
    let t = Tensor::of_shape(String::new(), dtype, shape.clone(), TensorKind::Activation);
    if t.is_static() {
        match t.static_bytes() {
            Ok(_) | Err(memplan_ir::SizeError::Unsized(_)) => Ok(()),
            Err(source) => Err(OnnxError::Size {
                tensor: name.to_owned(),
                source,
            }),
        }
    } else {
        infer::product(shape)
            .map(|_| ())
            .map_err(|reason| OnnxError::Dim {
                tensor: name.to_owned(),
                dim: shape.len().saturating_sub(1),
                reason: format!("the element count is not computable: {reason}"),
            })
    }
}
