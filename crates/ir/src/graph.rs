//! Tensors, nodes and the graph that owns them.
//!
//! A [`Graph`] is a list of tensors and a list of nodes, each in an [`IndexVec`]. Node order
//! is the execution order the file gives; [`crate::validate`] checks it is topological.
//! A tensor's size is derived from its dtype and shape, never stored, so the two cannot
//! disagree; the one exception is a tensor whose dims depend on data but whose element count
//! does not (a Reshape to a runtime shape), which carries that count in
//! [`Tensor::element_count`].
//!
//! Data-dependent sizes: a dim that only the data decides (NonZero's count, a Slice with
//! runtime bounds) is a symbol of its own, named after its node, output and axis. When the op
//! bounds it (a count of non-zeros is at most the input's elements), the graph records an
//! upper bound for the symbol ([`Graph::symbol_bounds`]); [`Graph::bind_to_bounds`] binds
//! every bounded symbol to its bound, so that a plan made for those values holds every smaller
//! value too. Bounds are expressions over symbols made before the bounded one, so binding in
//! symbol order resolves them.
//!
//! Broadcast symbols: ONNX broadcasting joins two dims when one is 1 or both are equal, which
//! for two unknown dims (`seq` and `past+seq`, say) only the values decide. Such a dim is a
//! symbol of its own whose value is that broadcast ([`Graph::symbol_broadcast`]): binding
//! ([`Graph::bind`], [`Graph::resolve`], [`Graph::bind_to_bounds`]) sets it from its two dims
//! once they are bound, and refuses values that do not broadcast.
//!
//! Quotient symbols: a strided convolution or pooling over an unknown dim (`height`) makes
//! `floor((height - 1) / 2) + 1` positions, which no polynomial in `height` is. Such a dim is
//! a symbol of its own whose value is a whole division of a dim by a positive constant,
//! rounded down or up ([`Graph::symbol_quotient`], [`Quotient`]); binding sets it from its
//! dim, as it does broadcast symbols, and the caller never binds it.

use std::collections::HashMap;
use std::fmt;

use smallvec::SmallVec;

use crate::dim::{Bindings, Expr, ExprError};
use crate::dtype::DType;
use crate::ids::{IndexVec, NodeId, SymbolId, TensorId};

/// A tensor's shape: one [`Expr`] per dimension; a scalar has none.
pub type Shape = SmallVec<[Expr; 4]>;

/// The role of a tensor in the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TensorKind {
    /// Fed by the caller before the first node runs.
    Input,
    /// Produced by a node and read by the caller after the last node.
    Output,
    /// An initializer or constant: lives for the whole run, outside the activation arena.
    Weight,
    /// Produced and consumed inside the graph.
    Activation,
    /// Persistent training state (a parameter, a gradient buffer, an optimizer moment, a
    /// master weight): lives in the persistent region for the whole run, beside the weights,
    /// and never lends its bytes. Either fed by the caller (no producer: it keeps its value
    /// from the step before) or written by one node (a weight gradient written straight
    /// into its buffer); ops may also update it in place (see
    /// [`crate::OpTable::mutated_inputs`]).
    State,
}

impl TensorKind {
    /// The name used in the JSON format.
    pub fn name(self) -> &'static str {
        match self {
            TensorKind::Input => "input",
            TensorKind::Output => "output",
            TensorKind::Weight => "weight",
            TensorKind::Activation => "activation",
            TensorKind::State => "state",
        }
    }

    /// Parses a JSON kind name.
    pub fn from_name(name: &str) -> Option<TensorKind> {
        Some(match name {
            "input" => TensorKind::Input,
            "output" => TensorKind::Output,
            "weight" | "constant" => TensorKind::Weight,
            "activation" => TensorKind::Activation,
            "state" => TensorKind::State,
            _ => return None,
        })
    }
}

impl TensorKind {
    /// Whether tensors of this kind live for the whole run outside the activation arena
    /// (weights and training state).
    pub fn is_persistent(self) -> bool {
        matches!(self, TensorKind::Weight | TensorKind::State)
    }
}

impl fmt::Display for TensorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor: a name, an element type, a (possibly symbolic) shape and a role.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Tensor {
    /// Unique name within the graph.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: Shape,
    /// Role in the graph.
    pub kind: TensorKind,
    /// The values of a small integer constant (shape targets, axes, slice bounds), when known.
    /// Importers fill it so that memory semantics can use them (a Slice's start, say).
    pub int_value: Option<Vec<i64>>,
    /// The element count, when the dims depend on data but their product is known (a Reshape
    /// or Unsqueeze with a runtime target has its input's elements). When set, sizes use it
    /// instead of the product of the dims; `None` for every ordinary tensor.
    pub element_count: Option<Expr>,
}

/// Why a tensor's size cannot be computed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// A dimension needs a symbol value that is not bound.
    #[error("symbol {0} has no value")]
    Unbound(SymbolId),
    /// The element count or byte count overflows.
    #[error("size overflows")]
    Overflow,
    /// A dimension evaluates to a negative number.
    #[error("dimension {dim} is negative ({value})")]
    NegativeDim {
        /// Position of the dimension in the shape.
        dim: usize,
        /// Its value.
        value: i64,
    },
    /// The dtype has no fixed size (strings).
    #[error("dtype {0} has no fixed size")]
    Unsized(DType),
}

impl SizeError {
    /// What an expression's error means for the size of a tensor whose dimension `dim` it is.
    pub fn of_dim(error: ExprError, dim: usize) -> SizeError {
        match error {
            ExprError::Overflow => SizeError::Overflow,
            ExprError::Unbound(s) => SizeError::Unbound(s),
            ExprError::Negative(value) => SizeError::NegativeDim { dim, value },
        }
    }
}

impl Tensor {
    /// A tensor with a constant shape.
    pub fn new(name: impl Into<String>, dtype: DType, dims: &[u64], kind: TensorKind) -> Tensor {
        Tensor {
            name: name.into(),
            dtype,
            shape: dims
                .iter()
                .map(|&d| Expr::constant(d.min(i64::MAX as u64) as i64))
                .collect(),
            kind,
            int_value: None,
            element_count: None,
        }
    }

    /// A tensor of any shape (symbolic dims included), with no known values.
    pub fn of_shape(
        name: impl Into<String>,
        dtype: DType,
        shape: Shape,
        kind: TensorKind,
    ) -> Tensor {
        Tensor {
            name: name.into(),
            dtype,
            shape,
            kind,
            int_value: None,
            element_count: None,
        }
    }

    /// This tensor with [`int_value`](Tensor::int_value) set to `int_value`.
    pub fn with_int_value(mut self, int_value: Option<Vec<i64>>) -> Tensor {
        self.int_value = int_value;
        self
    }

    /// This tensor with [`element_count`](Tensor::element_count) set to `element_count`.
    pub fn with_element_count(mut self, element_count: Option<Expr>) -> Tensor {
        self.element_count = element_count;
        self
    }

    /// The element count for these bindings, with checked arithmetic: the product of the
    /// dims, or [`Tensor::element_count`] when set.
    pub fn elements(&self, bindings: &Bindings) -> Result<u64, SizeError> {
        if let Some(count) = &self.element_count {
            return count.eval(bindings).map_err(|e| SizeError::of_dim(e, 0));
        }
        let mut n: u64 = 1;
        for (i, d) in self.shape.iter().enumerate() {
            let v = d.eval(bindings).map_err(|e| SizeError::of_dim(e, i))?;
            n = n.checked_mul(v).ok_or(SizeError::Overflow)?;
        }
        Ok(n)
    }

    /// Bytes for these bindings: `ceil(elements * bits / 8)`, checked.
    pub fn bytes(&self, bindings: &Bindings) -> Result<u64, SizeError> {
        let n = self.elements(bindings)?;
        if self.dtype.bits().is_none() {
            return Err(SizeError::Unsized(self.dtype));
        }
        self.dtype.bytes_for(n).ok_or(SizeError::Overflow)
    }

    /// Elements of a tensor whose shape has no symbols.
    pub fn static_elements(&self) -> Result<u64, SizeError> {
        self.elements(&Bindings::new())
    }

    /// Bytes of a tensor whose shape has no symbols.
    pub fn static_bytes(&self) -> Result<u64, SizeError> {
        self.bytes(&Bindings::new())
    }

    /// The element count as a polynomial in the shape symbols ([`Tensor::element_count`]
    /// when set).
    pub fn elements_expr(&self) -> Result<Expr, ExprError> {
        if let Some(count) = &self.element_count {
            return Ok(count.clone());
        }
        self.shape
            .iter()
            .try_fold(Expr::constant(1), |acc, d| acc.checked_mul(d))
    }

    /// Whether the size needs no symbol: every dimension is a constant, or the element count
    /// is given as one.
    pub fn has_static_size(&self) -> bool {
        match &self.element_count {
            Some(count) => count.is_constant(),
            None => self.is_static(),
        }
    }

    /// Whether every dimension is a constant.
    pub fn is_static(&self) -> bool {
        self.shape.iter().all(Expr::is_constant)
    }

    /// The constant dimensions, or `None` if any is symbolic or negative.
    pub fn static_dims(&self) -> Option<Vec<u64>> {
        self.shape
            .iter()
            .map(|d| d.as_constant().and_then(|c| u64::try_from(c).ok()))
            .collect()
    }
}

/// Why [`Graph::bind`] cannot bind a symbol.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// The two dims a broadcast symbol joins have values that do not broadcast.
    #[error(
        "`{symbol}` broadcasts {a} = {a_value} with {b} = {b_value}, which do not broadcast (one must be 1, or both equal)"
    )]
    NoBroadcast {
        /// The broadcast symbol.
        symbol: String,
        /// Its first dim, as written.
        a: String,
        /// That dim's value.
        a_value: u64,
        /// Its second dim.
        b: String,
        /// That dim's value.
        b_value: u64,
    },
    /// A value given for a broadcast or quotient symbol that its dims contradict.
    #[error("`{symbol}` is given as {given}, but its dims make it {computed}")]
    BroadcastDisagrees {
        /// The broadcast or quotient symbol.
        symbol: String,
        /// The value given.
        given: u64,
        /// The value its dims give.
        computed: u64,
    },
    /// A dim of a broadcast or quotient symbol or a bound that cannot be evaluated (an
    /// overflow, a negative value).
    #[error("evaluating `{symbol}`: {reason}")]
    Value {
        /// The symbol whose dims or bound were evaluated.
        symbol: String,
        /// What went wrong.
        reason: ExprError,
    },
    /// The graph has no symbol of that name.
    #[error("graph `{graph}` has no symbol `{symbol}` (it has: {})", .known.join(", "))]
    UnknownSymbol {
        /// The graph.
        graph: String,
        /// The name asked for.
        symbol: String,
        /// The symbols it has, in order.
        known: Vec<String>,
    },
}

/// The rule of a quotient symbol: its value is `num / den` rounded down, or up with `ceil`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Quotient {
    /// The dim divided (over symbols made before the quotient's).
    pub num: Expr,
    /// The divisor, at least 1.
    pub den: u64,
    /// Rounded up, not down.
    pub ceil: bool,
}

impl Quotient {
    /// `num / den`, rounded up when `ceil`.
    pub fn new(num: Expr, den: u64, ceil: bool) -> Quotient {
        Quotient { num, den, ceil }
    }

    /// The quotient's value for the value `n` of its dim.
    pub fn value(&self, n: u64) -> u64 {
        let den = self.den.max(1);
        let q = n / den;
        if self.ceil && !n.is_multiple_of(den) {
            q + 1
        } else {
            q
        }
    }

    /// The rule as text, with the graph's symbol names: `floor((height+1)/2)`,
    /// `floor(samples/80)`.
    pub fn display(&self, names: &IndexVec<SymbolId, String>) -> String {
        let round = if self.ceil { "ceil" } else { "floor" };
        let num = self.num.display(names);
        if self.num.term_count() > 1 {
            format!("{round}(({num})/{})", self.den)
        } else {
            format!("{round}({num}/{})", self.den)
        }
    }
}

/// The ONNX broadcast of two dim values: the other when one is 1, the value when both are
/// equal, none otherwise.
fn broadcast_value(a: u64, b: u64) -> Option<u64> {
    match (a, b) {
        _ if a == b => Some(a),
        (1, _) => Some(b),
        (_, 1) => Some(a),
        _ => None,
    }
}

/// A small node attribute.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Attr {
    /// An integer.
    Int(i64),
    /// A float. Non-finite values are kept as the strings `"inf"`, `"-inf"`, `"nan"`.
    Float(f64),
    /// A string.
    Str(String),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of floats.
    Floats(Vec<f64>),
}

impl Attr {
    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Attr::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The integers, if this is a list of them (an empty float list counts as empty ints).
    pub fn as_ints(&self) -> Option<&[i64]> {
        match self {
            Attr::Ints(v) => Some(v),
            Attr::Floats(v) if v.is_empty() => Some(&[]),
            _ => None,
        }
    }
}

/// Named attributes in the order the source gives them.
pub type Attrs = Vec<(String, Attr)>;

/// A graph that a node runs (an ONNX graph-valued attribute: If's `then_branch` and
/// `else_branch`, Loop's and Scan's `body`).
///
/// The body is an ordinary graph sharing its enclosing graph's symbols (same names, same ids,
/// so one [`Bindings`] sizes both). Its graph inputs are the values the node hands it: the
/// formal inputs (a Loop's iteration number, condition and carried values, a Scan's states and
/// slices) and every outer value it captures, which is a body input with the same name as the
/// outer tensor. Its graph outputs are its results. Everything else in it (activations, and
/// the weights of its own constants) is the node's workspace.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Body {
    /// The attribute that holds the body (`then_branch`, `body`, ...).
    pub attr: String,
    /// The body graph.
    pub graph: Graph,
}

impl Body {
    /// The body `graph`, held by the node's attribute `attr`.
    pub fn new(attr: impl Into<String>, graph: Graph) -> Body {
        Body {
            attr: attr.into(),
            graph,
        }
    }
}

/// An operation: reads its inputs, writes its outputs.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Node {
    /// Unique name within the graph.
    pub name: String,
    /// The op type: ONNX's (`Conv`, `MatMul`), or `domain.Op` for other domains.
    pub op: String,
    /// Inputs in operator order; `None` marks an absent optional input.
    pub inputs: Vec<Option<TensorId>>,
    /// Outputs in operator order.
    pub outputs: Vec<TensorId>,
    /// Small attributes.
    pub attrs: Attrs,
    /// The graphs the node runs, in attribute order (empty for ordinary ops).
    pub bodies: Vec<Body>,
    /// Tensors of this graph that a body reads without the node listing them (captured
    /// values, at any depth of nested bodies), sorted by id and without repeats. The node
    /// reads them when it runs, like its listed inputs.
    pub implicit_inputs: Vec<TensorId>,
}

impl Node {
    /// A node with no attributes, bodies or implicit inputs.
    pub fn new(
        name: impl Into<String>,
        op: impl Into<String>,
        inputs: Vec<Option<TensorId>>,
        outputs: Vec<TensorId>,
    ) -> Node {
        Node {
            name: name.into(),
            op: op.into(),
            inputs,
            outputs,
            attrs: Attrs::new(),
            bodies: Vec::new(),
            implicit_inputs: Vec::new(),
        }
    }

    /// This node with [`attrs`](Node::attrs) set to `attrs`.
    pub fn with_attrs(mut self, attrs: Attrs) -> Node {
        self.attrs = attrs;
        self
    }

    /// This node with [`bodies`](Node::bodies) set to `bodies`.
    pub fn with_bodies(mut self, bodies: Vec<Body>) -> Node {
        self.bodies = bodies;
        self
    }

    /// This node with [`implicit_inputs`](Node::implicit_inputs) set to `implicit_inputs`
    /// (sorted by id, without repeats).
    pub fn with_implicit_inputs(mut self, implicit_inputs: Vec<TensorId>) -> Node {
        self.implicit_inputs = implicit_inputs;
        self
    }

    /// The attribute called `name`.
    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// Every tensor the node reads: the present listed inputs in operator order, then the
    /// implicit inputs its bodies capture. Liveness, scheduling and verification use this, so
    /// a value only a body reads stays live until the node runs. Positions in
    /// [`Node::inputs`] (which op memory semantics use) are the operator's own inputs only.
    pub fn present_inputs(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.inputs
            .iter()
            .flatten()
            .copied()
            .chain(self.implicit_inputs.iter().copied())
    }
}

/// Metadata key listing, one name a line, the weights an importer made from constant nodes
/// (see [`Graph::constant_node_outputs`]).
pub const CONSTANT_NODES: &str = "constant_nodes";

/// Metadata key listing, one `name<TAB>value` a line, the weights an importer found with
/// every element equal (a `torch.zeros` the exporter made a constant), and that value
/// (`0`, `1`, `-inf`, an integer): see [`Graph::uniform_constants`].
pub const UNIFORM_CONSTANTS: &str = "uniform_constants";

/// A computation graph.
///
/// Tensors, nodes and symbols are reached through methods: the graph keeps name indexes
/// over them, and every mutation goes through a method that keeps those indexes right.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// The graph's name.
    pub name: String,
    /// The batch size the graph was made at, when static.
    pub batch: Option<u64>,
    /// Free-form `key = value` facts about the model (the JSON format's `source` and
    /// `license`, an ONNX producer), in the order they were set. Nothing reads them but
    /// reports and the JSON writer.
    metadata: Vec<(String, String)>,
    symbols: IndexVec<SymbolId, String>,
    /// Upper bounds of data-dependent symbols, sorted by symbol, each over earlier symbols.
    symbol_bounds: Vec<(SymbolId, Expr)>,
    /// Broadcast symbols and the two dims each joins, sorted by symbol, over earlier symbols.
    symbol_broadcasts: Vec<(SymbolId, Expr, Expr)>,
    /// Quotient symbols and their rules, sorted by symbol, over earlier symbols.
    symbol_quotients: Vec<(SymbolId, Quotient)>,
    tensors: IndexVec<TensorId, Tensor>,
    nodes: IndexVec<NodeId, Node>,
    /// The graph outputs in the order the model declares them, when it differs from tensor
    /// id order (an ONNX graph's `output` list); see [`Graph::outputs`].
    output_order: Vec<TensorId>,
    /// Name lookup; never iterated, so its order reaches no output.
    tensor_index: HashMap<String, TensorId>,
    symbol_index: HashMap<String, SymbolId>,
}

/// Equal graphs have equal contents and declare their outputs in the same order (however
/// that order was recorded).
impl PartialEq for Graph {
    fn eq(&self, other: &Graph) -> bool {
        self.name == other.name
            && self.batch == other.batch
            && self.metadata == other.metadata
            && self.symbols == other.symbols
            && self.symbol_bounds == other.symbol_bounds
            && self.symbol_broadcasts == other.symbol_broadcasts
            && self.tensors == other.tensors
            && self.nodes == other.nodes
            && self.tensor_index == other.tensor_index
            && self.symbol_index == other.symbol_index
            && self.outputs() == other.outputs()
    }
}

impl Graph {
    /// An empty graph called `name`.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }

    /// An empty graph called `name` that shares `outer`'s symbols: a body graph, which one
    /// binding of the root sizes together with it.
    pub fn with_symbols_of(name: impl Into<String>, outer: &Graph) -> Graph {
        Graph {
            name: name.into(),
            symbols: outer.symbols.clone(),
            symbol_index: outer.symbol_index.clone(),
            ..Graph::default()
        }
    }

    /// Gives this graph `outer`'s symbol table when its own symbols are a prefix of it (a
    /// body built beside its root, creating the same symbols in the same order). Returns
    /// whether it did.
    pub fn adopt_symbols_of(&mut self, outer: &Graph) -> bool {
        if !outer
            .symbols
            .as_slice()
            .starts_with(self.symbols.as_slice())
        {
            return false;
        }
        self.symbols = outer.symbols.clone();
        self.symbol_index = outer.symbol_index.clone();
        true
    }

    /// The shape symbols, in creation order.
    pub fn symbols(&self) -> &IndexVec<SymbolId, String> {
        &self.symbols
    }

    /// Records `bound` as an upper bound of the data-dependent symbol `s` (replacing an
    /// earlier one). The bound must mention only symbols created before `s`, so that
    /// [`Graph::bind_to_bounds`] can evaluate bounds in symbol order; a bound that does not is
    /// refused and `false` returned.
    pub fn set_symbol_bound(&mut self, s: SymbolId, bound: Expr) -> bool {
        if s.index() >= self.symbols.len() || bound.symbols().iter().any(|&b| b >= s) {
            return false;
        }
        match self.symbol_bounds.binary_search_by_key(&s, |(id, _)| *id) {
            Ok(i) => self.symbol_bounds[i].1 = bound,
            Err(i) => self.symbol_bounds.insert(i, (s, bound)),
        }
        true
    }

    /// The upper bound of symbol `s`, if it is a bounded data-dependent size.
    pub fn symbol_bound(&self, s: SymbolId) -> Option<&Expr> {
        let i = self
            .symbol_bounds
            .binary_search_by_key(&s, |(id, _)| *id)
            .ok()?;
        self.symbol_bounds.get(i).map(|(_, b)| b)
    }

    /// Every symbol with an upper bound, and the bound, in symbol order.
    pub fn symbol_bounds(&self) -> &[(SymbolId, Expr)] {
        &self.symbol_bounds
    }

    /// Records symbol `s` as the ONNX broadcast of dims `a` and `b` (replacing an earlier
    /// rule): its value is `a` when `b` is 1 or equals `a`, `b` when `a` is 1, and no value
    /// otherwise. Both dims must mention only symbols created before `s`, and `s` must have no
    /// bound; a rule that breaks either is refused and `false` returned.
    pub fn set_symbol_broadcast(&mut self, s: SymbolId, a: Expr, b: Expr) -> bool {
        if s.index() >= self.symbols.len()
            || a.symbols().iter().chain(&b.symbols()).any(|&x| x >= s)
            || self.symbol_bound(s).is_some()
            || self.symbol_quotient(s).is_some()
        {
            return false;
        }
        match self
            .symbol_broadcasts
            .binary_search_by_key(&s, |(id, ..)| *id)
        {
            Ok(i) => self.symbol_broadcasts[i] = (s, a, b),
            Err(i) => self.symbol_broadcasts.insert(i, (s, a, b)),
        }
        true
    }

    /// The two dims broadcast symbol `s` joins, if it is one.
    pub fn symbol_broadcast(&self, s: SymbolId) -> Option<(&Expr, &Expr)> {
        let i = self
            .symbol_broadcasts
            .binary_search_by_key(&s, |(id, ..)| *id)
            .ok()?;
        self.symbol_broadcasts.get(i).map(|(_, a, b)| (a, b))
    }

    /// Every broadcast symbol and its two dims, in symbol order.
    pub fn symbol_broadcasts(&self) -> &[(SymbolId, Expr, Expr)] {
        &self.symbol_broadcasts
    }

    /// Records symbol `s` as the quotient `q` (replacing an earlier rule). Its dim must mention
    /// only symbols created before `s`, its divisor must be at least 1, and `s` must have no
    /// bound and be no broadcast; a rule that breaks any is refused and `false` returned.
    pub fn set_symbol_quotient(&mut self, s: SymbolId, q: Quotient) -> bool {
        if s.index() >= self.symbols.len()
            || q.den == 0
            || q.num.symbols().iter().any(|&x| x >= s)
            || self.symbol_bound(s).is_some()
            || self.symbol_broadcast(s).is_some()
        {
            return false;
        }
        match self
            .symbol_quotients
            .binary_search_by_key(&s, |(id, _)| *id)
        {
            Ok(i) => self.symbol_quotients[i].1 = q,
            Err(i) => self.symbol_quotients.insert(i, (s, q)),
        }
        true
    }

    /// The rule of quotient symbol `s`, if it is one.
    pub fn symbol_quotient(&self, s: SymbolId) -> Option<&Quotient> {
        let i = self
            .symbol_quotients
            .binary_search_by_key(&s, |(id, _)| *id)
            .ok()?;
        self.symbol_quotients.get(i).map(|(_, q)| q)
    }

    /// Every quotient symbol and its rule, in symbol order.
    pub fn symbol_quotients(&self) -> &[(SymbolId, Quotient)] {
        &self.symbol_quotients
    }

    /// The quotient symbol whose rule is `q`, if the graph has one (so that the same division
    /// of the same dim is one symbol wherever it is made).
    pub fn find_quotient(&self, q: &Quotient) -> Option<SymbolId> {
        self.symbol_quotients
            .iter()
            .find(|(_, r)| r == q)
            .map(|(s, _)| *s)
    }

    /// Whether symbol `s` follows from other dims (a broadcast or a quotient symbol): binding
    /// sets it, and the caller does not bind it.
    pub fn is_derived(&self, s: SymbolId) -> bool {
        self.symbol_broadcast(s).is_some() || self.symbol_quotient(s).is_some()
    }

    /// `bindings` with every broadcast and quotient symbol whose dims are bound set to its
    /// value (in symbol order, so a broadcast of broadcasts resolves too). Such a symbol
    /// already bound must agree with its dims; dims that do not broadcast are an error.
    pub fn resolve(&self, bindings: &Bindings) -> Result<Bindings, BindError> {
        Ok(self.complete(bindings, false)?.0)
    }

    /// `bindings` extended with every bounded symbol it leaves unbound, set to its bound (in
    /// symbol order, so a bound over an earlier bounded symbol sees that symbol's bound), and
    /// with broadcast symbols resolved as [`Graph::resolve`] does, in the same pass.
    /// A bound that needs a symbol nobody bound is skipped: its symbol stays unbound. Returns
    /// the extended bindings and the bounded symbols it bound, with their values, in symbol
    /// order.
    ///
    /// Every size in a graph is a polynomial that does not shrink when a data-dependent dim
    /// grows (dims are sums of products with the data-dependent symbol appearing with a
    /// positive coefficient), so a plan made at the bounds has room for any smaller values.
    pub fn bind_to_bounds(
        &self,
        bindings: &Bindings,
    ) -> Result<(Bindings, Vec<(SymbolId, u64)>), BindError> {
        self.complete(bindings, true)
    }

    /// One pass over the symbols in order: broadcast and quotient symbols resolved, bounds
    /// applied when `at_bounds`.
    fn complete(
        &self,
        bindings: &Bindings,
        at_bounds: bool,
    ) -> Result<(Bindings, Vec<(SymbolId, u64)>), BindError> {
        let mut out = bindings.clone();
        let mut bound = Vec::new();
        let name = |s: SymbolId| {
            self.symbols
                .get(s)
                .cloned()
                .unwrap_or_else(|| s.to_string())
        };
        let value = |s: SymbolId, e: &Expr, out: &Bindings| match e.eval(out) {
            Ok(v) => Ok(Some(v)),
            Err(ExprError::Unbound(_)) => Ok(None),
            Err(reason) => Err(BindError::Value {
                symbol: name(s),
                reason,
            }),
        };
        for s in self.symbols.ids() {
            if let Some(e) = self.symbol_bound(s) {
                if at_bounds
                    && out.get(s).is_none()
                    && let Some(v) = value(s, e, &out)?
                {
                    out.set(s, v);
                    bound.push((s, v));
                }
                continue;
            }
            // A broadcast of a data-dependent size may be given above what smaller values of
            // it compute (a plan at the bounds re-sized below them keeps its value).
            let mut at_most = false;
            let v = if let Some((a, b)) = self.symbol_broadcast(s) {
                let (Some(x), Some(y)) = (value(s, a, &out)?, value(s, b, &out)?) else {
                    continue;
                };
                // A data-dependent size the data keeps at 1 or at the other dim (the model
                // runs only so) may be planned above both: its value is a bound (a plan at
                // it holds every smaller value), and the larger of the two holds the
                // broadcast's runtime size (issue 36: an MoE block's experts' token counts,
                // each bounded by all the tokens, sum past the tokens they are weighted with).
                let data = |e: &Expr| e.symbols().iter().any(|&t| self.symbol_bound(t).is_some());
                at_most = data(a) || data(b);
                broadcast_value(x, y)
                    .or_else(|| (data(a) || data(b)).then(|| x.max(y)))
                    .ok_or_else(|| BindError::NoBroadcast {
                        symbol: name(s),
                        a: a.display(&self.symbols).to_string(),
                        a_value: x,
                        b: b.display(&self.symbols).to_string(),
                        b_value: y,
                    })?
            } else if let Some(q) = self.symbol_quotient(s) {
                let Some(n) = value(s, &q.num, &out)? else {
                    continue;
                };
                q.value(n)
            } else {
                continue;
            };
            match out.get(s) {
                Some(given) if at_most && given >= v => {}
                Some(given) if given != v => {
                    return Err(BindError::BroadcastDisagrees {
                        symbol: name(s),
                        given,
                        computed: v,
                    });
                }
                _ => out.set(s, v),
            }
        }
        Ok((out, bound))
    }

    /// The tensors.
    pub fn tensors(&self) -> &IndexVec<TensorId, Tensor> {
        &self.tensors
    }

    /// The nodes, in execution order.
    pub fn nodes(&self) -> &IndexVec<NodeId, Node> {
        &self.nodes
    }

    /// The nodes, to edit. Nodes carry no index, so any edit keeps the graph consistent
    /// as far as lookups go (validation still checks what the edit means).
    pub fn nodes_mut(&mut self) -> &mut IndexVec<NodeId, Node> {
        &mut self.nodes
    }

    /// Tensor `t`. Panics if `t` is not a tensor of this graph.
    pub fn tensor(&self, t: TensorId) -> &Tensor {
        &self.tensors[t]
    }

    /// Node `n`. Panics if `n` is not a node of this graph.
    pub fn node(&self, n: NodeId) -> &Node {
        &self.nodes[n]
    }

    /// Node `n`, to edit. Panics if `n` is not a node of this graph.
    pub fn node_mut(&mut self, n: NodeId) -> &mut Node {
        &mut self.nodes[n]
    }

    /// Sets tensor `t`'s kind. Panics if `t` is not a tensor of this graph.
    pub fn set_kind(&mut self, t: TensorId, kind: TensorKind) {
        self.tensors[t].kind = kind;
    }

    /// Sets tensor `t`'s shape. Panics if `t` is not a tensor of this graph.
    pub fn set_shape(&mut self, t: TensorId, shape: Shape) {
        self.tensors[t].shape = shape;
    }

    /// Sets tensor `t`'s known integer value (shape arithmetic reads it; validation
    /// allows it on weights only). Panics if `t` is not a tensor of this graph.
    pub fn set_int_value(&mut self, t: TensorId, value: Option<Vec<i64>>) {
        self.tensors[t].int_value = value;
    }

    /// Sets tensor `t`'s element count (see [`Tensor::element_count`]). Panics if `t` is not
    /// a tensor of this graph.
    pub fn set_element_count(&mut self, t: TensorId, count: Option<Expr>) {
        self.tensors[t].element_count = count;
    }

    /// Renames tensor `t`, keeping lookups by name right. Panics if `t` is not a tensor of
    /// this graph.
    pub fn rename_tensor(&mut self, t: TensorId, name: impl Into<String>) {
        self.tensors[t].name = name.into();
        self.reindex();
    }

    /// The weights an importer made from constant nodes (ONNX's `Constant`), by name: they
    /// are constants of the model, never trained parameters (a training step derived from
    /// the graph does not train them). Read from the metadata entry [`CONSTANT_NODES`].
    pub fn constant_node_outputs(&self) -> impl Iterator<Item = &str> + '_ {
        self.metadata_value(CONSTANT_NODES)
            .into_iter()
            .flat_map(|v| v.split('\n'))
            .filter(|n| !n.is_empty())
    }

    /// The weights an importer found with every element equal, by name, with that value as
    /// text (a float as Rust prints an `f64`: `0`, `-inf`, `NaN`; an integer): an engine
    /// may make them where they are used (ONNX's `ConstantOfShape`) instead of loading
    /// them. Read from the metadata entry [`UNIFORM_CONSTANTS`].
    pub fn uniform_constants(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.metadata_value(UNIFORM_CONSTANTS)
            .into_iter()
            .flat_map(|v| v.split('\n'))
            .filter_map(|line| line.rsplit_once('\t'))
    }

    /// The metadata entries, in the order they were set.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The metadata value under `key`, if set.
    pub fn metadata_value(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets the metadata value under `key`, replacing an earlier one.
    pub fn set_metadata(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.metadata.push((key, value)),
        }
    }

    /// The graph's outputs (tensors of kind [`TensorKind::Output`]) in their declared order:
    /// those [`Graph::set_output_order`] lists first, in its order, then any other output in
    /// id order. A training step puts its loss on the first.
    pub fn outputs(&self) -> Vec<TensorId> {
        let is_output = |t: TensorId| {
            self.tensors
                .get(t)
                .is_some_and(|x| x.kind == TensorKind::Output)
        };
        let mut seen: IndexVec<TensorId, bool> = IndexVec::from_elem(false, self.tensors.len());
        let mut out = Vec::new();
        for &t in &self.output_order {
            if is_output(t) && !seen[t] {
                seen[t] = true;
                out.push(t);
            }
        }
        for t in self.tensors.ids() {
            if is_output(t) && !seen[t] {
                out.push(t);
            }
        }
        out
    }

    /// Declares the order of the graph's outputs (the ONNX `output` list); ids of tensors
    /// that are not outputs are ignored by [`Graph::outputs`].
    pub fn set_output_order(&mut self, order: Vec<TensorId>) {
        self.output_order = order;
    }

    /// Appends `t` to the declared output order (the builder's `mark_output`).
    pub(crate) fn push_output(&mut self, t: TensorId) {
        if !self.output_order.contains(&t) {
            self.output_order.push(t);
        }
    }

    /// Whether [`Graph::outputs`] differs from the outputs in id order.
    pub fn has_output_order(&self) -> bool {
        let by_id: Vec<TensorId> = self
            .tensors
            .iter_enumerated()
            .filter(|(_, t)| t.kind == TensorKind::Output)
            .map(|(id, _)| id)
            .collect();
        self.outputs() != by_id
    }

    /// Adds a tensor and returns its id. A second tensor with the same name is added too
    /// (validation reports it); lookups by name find the first.
    pub fn add_tensor(&mut self, tensor: Tensor) -> TensorId {
        let name = tensor.name.clone();
        let id = self.tensors.push(tensor);
        self.tensor_index.entry(name).or_insert(id);
        id
    }

    /// Adds a node and returns its id.
    pub fn add_node(&mut self, node: Node) -> NodeId {
        self.nodes.push(node)
    }

    /// The symbol called `name`, created if new.
    pub fn symbol(&mut self, name: &str) -> SymbolId {
        if let Some(&id) = self.symbol_index.get(name) {
            return id;
        }
        let id = self.symbols.push(name.to_owned());
        self.symbol_index.insert(name.to_owned(), id);
        id
    }

    /// The symbol called `name`, if it exists.
    pub fn find_symbol(&self, name: &str) -> Option<SymbolId> {
        self.symbol_index.get(name).copied()
    }

    /// The tensor called `name`.
    pub fn find_tensor(&self, name: &str) -> Option<TensorId> {
        self.tensor_index.get(name).copied()
    }

    /// The node called `name` (a linear scan: node names are not indexed).
    pub fn find_node(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter_enumerated()
            .find(|(_, n)| n.name == name)
            .map(|(id, _)| id)
    }

    /// Bindings from symbol names to values, with the broadcast symbols they decide resolved
    /// ([`Graph::resolve`]); names the graph does not have are an error.
    pub fn bind(&self, values: &[(&str, u64)]) -> Result<Bindings, BindError> {
        let mut b = Bindings::new();
        for &(name, value) in values {
            let id = self
                .find_symbol(name)
                .ok_or_else(|| BindError::UnknownSymbol {
                    graph: self.name.clone(),
                    symbol: name.to_owned(),
                    known: self.symbols.iter().cloned().collect(),
                })?;
            b.set(id, value);
        }
        self.resolve(&b)
    }

    /// A copy with every symbol replaced by its value in `bindings`: the concrete graph for
    /// one binding, bodies included. Broadcast symbols whose dims `bindings` decides are
    /// replaced too (dims that do not broadcast leave theirs symbolic: [`Graph::bind`] reports
    /// them). Symbols that are unbound stay symbolic.
    pub fn bound(&self, bindings: &Bindings) -> Result<Graph, ExprError> {
        let mut g = self.clone();
        let resolved = self.resolve(bindings);
        g.bind_in_place(resolved.as_ref().unwrap_or(bindings))?;
        Ok(g)
    }

    fn bind_in_place(&mut self, bindings: &Bindings) -> Result<(), ExprError> {
        for t in self.tensors.raw_mut() {
            for d in t.shape.iter_mut().chain(t.element_count.as_mut()) {
                if d.symbols().iter().all(|&s| bindings.get(s).is_some()) && !d.is_constant() {
                    *d = Expr::constant(d.eval_signed(bindings)?);
                }
            }
        }
        for node in self.nodes.raw_mut() {
            for body in &mut node.bodies {
                body.graph.bind_in_place(bindings)?;
            }
        }
        Ok(())
    }

    /// Gives every body, at any depth, this graph's symbol table (bodies share their root's
    /// symbols, so that one binding sizes them all). Importers call it after adding symbols.
    pub fn share_symbols(&mut self) {
        let symbols = self.symbols.clone();
        let index = self.symbol_index.clone();
        for node in self.nodes.raw_mut() {
            for body in &mut node.bodies {
                body.graph.symbols = symbols.clone();
                body.graph.symbol_index = index.clone();
                body.graph.share_symbols();
            }
        }
    }

    /// For each tensor, the node that produces it (the first, if several do).
    pub fn producers(&self) -> IndexVec<TensorId, Option<NodeId>> {
        let mut out = IndexVec::from_elem(None, self.tensors.len());
        for (n, node) in self.nodes.iter_enumerated() {
            for &t in &node.outputs {
                if let Some(slot) = out.get_mut(t) {
                    slot.get_or_insert(n);
                }
            }
        }
        out
    }

    /// For each tensor, the nodes that read it, in node order (a node reading a tensor twice
    /// appears once).
    pub fn consumers(&self) -> IndexVec<TensorId, Vec<NodeId>> {
        let mut out: IndexVec<TensorId, Vec<NodeId>> =
            IndexVec::from_elem(Vec::new(), self.tensors.len());
        for (n, node) in self.nodes.iter_enumerated() {
            for t in node.present_inputs() {
                if let Some(list) = out.get_mut(t)
                    && list.last() != Some(&n)
                {
                    list.push(n);
                }
            }
        }
        out
    }

    /// Rebuilds the name indexes.
    fn reindex(&mut self) {
        self.tensor_index.clear();
        for (id, t) in self.tensors.iter_enumerated() {
            self.tensor_index.entry(t.name.clone()).or_insert(id);
        }
        self.symbol_index.clear();
        for (id, s) in self.symbols.iter_enumerated() {
            self.symbol_index.entry(s.clone()).or_insert(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x[n]` → NonZero → `idx[1, nz]` with `nz <= n`, then Reshape to a runtime shape.
    fn data_dependent() -> Graph {
        let mut g = Graph::new("dd");
        let n = g.symbol("n");
        let nz = g.symbol("NonZero_o0_d1");
        assert!(g.set_symbol_bound(nz, Expr::symbol(n)));
        let x = g.add_tensor(Tensor {
            shape: [Expr::symbol(n)].into_iter().collect(),
            ..Tensor::new("x", DType::F32, &[], TensorKind::Input)
        });
        let idx = g.add_tensor(Tensor {
            shape: [Expr::constant(1), Expr::symbol(nz)].into_iter().collect(),
            ..Tensor::new("idx", DType::I64, &[], TensorKind::Output)
        });
        g.add_node(Node::new("NonZero", "NonZero", vec![Some(x)], vec![idx]));
        g
    }

    #[test]
    fn bounds_bind_in_symbol_order_and_keep_given_values() {
        let g = data_dependent();
        let n = g.find_symbol("n").unwrap();
        let nz = g.find_symbol("NonZero_o0_d1").unwrap();
        assert_eq!(g.symbol_bound(nz), Some(&Expr::symbol(n)));
        assert_eq!(g.symbol_bound(n), None);
        let (b, bound) = g.bind_to_bounds(&Bindings::new().with(n, 10)).unwrap();
        assert_eq!(bound, vec![(nz, 10)]);
        let idx = g.find_tensor("idx").unwrap();
        assert_eq!(g.tensor(idx).bytes(&b), Ok(80));
        // A value the caller gave is kept; a bound over an unbound symbol is skipped.
        let given = Bindings::new().with(n, 10).with(nz, 3);
        assert_eq!(g.bind_to_bounds(&given).unwrap().1, vec![]);
        let (b, bound) = g.bind_to_bounds(&Bindings::new()).unwrap();
        assert!(bound.is_empty() && b.get(nz).is_none());
    }

    #[test]
    fn a_bound_may_only_use_earlier_symbols() {
        let mut g = data_dependent();
        let n = g.find_symbol("n").unwrap();
        let nz = g.find_symbol("NonZero_o0_d1").unwrap();
        assert!(!g.set_symbol_bound(n, Expr::symbol(nz)));
        assert!(!g.set_symbol_bound(nz, Expr::symbol(nz)));
        assert!(!g.set_symbol_bound(SymbolId(7), Expr::constant(1)));
    }

    #[test]
    fn element_count_sizes_a_tensor_whose_dims_depend_on_data() {
        let mut g = Graph::new("r");
        let (a, b) = (g.symbol("a"), g.symbol("b"));
        let t = Tensor {
            shape: [Expr::symbol(a), Expr::symbol(b)].into_iter().collect(),
            element_count: Some(Expr::constant(12)),
            ..Tensor::new("y", DType::F16, &[], TensorKind::Input)
        };
        assert!(!t.is_static() && t.has_static_size());
        assert_eq!(t.static_bytes(), Ok(24));
        assert_eq!(t.elements_expr(), Ok(Expr::constant(12)));
        let id = g.add_tensor(t);
        let json = g.to_json();
        assert!(json.contains("\"shape\":[\"a\",\"b\"],\"elements\":12,\"bytes\":24"));
        let back = Graph::from_json(&json).unwrap();
        assert_eq!(back.tensor(id), g.tensor(id));
    }

    #[test]
    fn symbol_bounds_round_trip_through_json() {
        let g = data_dependent();
        let json = g.to_json();
        assert!(
            json.contains("\"symbol_bounds\": {\"NonZero_o0_d1\": \"n\"}"),
            "{json}"
        );
        let back = Graph::from_json(&json).unwrap();
        assert_eq!(back.symbol_bounds(), g.symbol_bounds());
        let bad = json.replace("{\"NonZero_o0_d1\": \"n\"}", "{\"n\": \"NonZero_o0_d1\"}");
        assert!(Graph::from_json(&bad).is_err());
    }

    /// `y[b] = x[a] + x2[c]` with `b` the broadcast of `a` and `c`.
    fn broadcasting() -> (Graph, SymbolId, SymbolId, SymbolId) {
        let mut g = Graph::new("bc");
        let (a, c) = (g.symbol("a"), g.symbol("c"));
        let b = g.symbol("Add_o0_d0");
        assert!(g.set_symbol_broadcast(b, Expr::symbol(a), Expr::symbol(c)));
        let ids: Vec<TensorId> = [
            ("x", a, TensorKind::Input),
            ("x2", c, TensorKind::Input),
            ("y", b, TensorKind::Output),
        ]
        .into_iter()
        .map(|(name, s, kind)| {
            g.add_tensor(Tensor {
                shape: [Expr::symbol(s)].into_iter().collect(),
                ..Tensor::new(name, DType::F32, &[], kind)
            })
        })
        .collect();
        g.add_node(Node::new(
            "Add",
            "Add",
            vec![Some(ids[0]), Some(ids[1])],
            vec![ids[2]],
        ));
        (g, a, c, b)
    }

    #[test]
    fn broadcast_symbols_resolve_once_their_dims_are_bound() {
        let (g, a, c, b) = broadcasting();
        assert_eq!(
            g.symbol_broadcast(b),
            Some((&Expr::symbol(a), &Expr::symbol(c)))
        );
        for (va, vc, want) in [(8, 8, 8), (1, 8, 8), (8, 1, 8), (0, 1, 0), (1, 0, 0)] {
            let bound = g.bind(&[("a", va), ("c", vc)]).unwrap();
            assert_eq!(bound.get(b), Some(want), "{va} and {vc}");
        }
        let err = g.bind(&[("a", 8), ("c", 3)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`Add_o0_d0` broadcasts a = 8 with c = 3, which do not broadcast (one must be 1, or both equal)"
        );
        // Half bound: nothing to resolve yet; a given value must agree with the dims.
        assert_eq!(g.bind(&[("a", 8)]).unwrap().get(b), None);
        assert!(g.bind(&[("a", 8), ("c", 8), ("Add_o0_d0", 8)]).is_ok());
        assert!(matches!(
            g.bind(&[("a", 8), ("c", 8), ("Add_o0_d0", 1)]),
            Err(BindError::BroadcastDisagrees {
                given: 1,
                computed: 8,
                ..
            })
        ));
        // Binding the graph replaces the broadcast symbol too, and sizes follow.
        let concrete = g.bound(&g.bind(&[("a", 1), ("c", 5)]).unwrap()).unwrap();
        let y = concrete.find_tensor("y").unwrap();
        assert_eq!(concrete.tensor(y).static_bytes(), Ok(20));
    }

    #[test]
    fn a_broadcast_may_only_use_earlier_symbols_and_never_a_bounded_one() {
        let (mut g, a, _, b) = broadcasting();
        assert!(!g.set_symbol_broadcast(a, Expr::symbol(b), Expr::constant(1)));
        assert!(g.set_symbol_bound(b, Expr::symbol(a)));
        let d = g.symbol("d");
        assert!(g.set_symbol_bound(d, Expr::symbol(a)));
        assert!(!g.set_symbol_broadcast(d, Expr::symbol(a), Expr::symbol(a)));
    }

    #[test]
    fn bounds_and_broadcasts_resolve_in_one_pass() {
        // nz <= a; b = broadcast(nz, c); m <= b.
        let mut g = Graph::new("mixed");
        let (a, c) = (g.symbol("a"), g.symbol("c"));
        let nz = g.symbol("nz");
        assert!(g.set_symbol_bound(nz, Expr::symbol(a)));
        let b = g.symbol("b");
        assert!(g.set_symbol_broadcast(b, Expr::symbol(nz), Expr::symbol(c)));
        let m = g.symbol("m");
        assert!(g.set_symbol_bound(m, Expr::symbol(b)));
        let given = g.bind(&[("a", 6), ("c", 1)]).unwrap();
        let (all, bound) = g.bind_to_bounds(&given).unwrap();
        assert_eq!(bound, vec![(nz, 6), (m, 6)]);
        assert_eq!(all.get(b), Some(6));
        // nz's bound 6 is above c = 4: the data keeps nz at 1 or 4 (the model runs only so),
        // and 6 holds either: the broadcast is planned at the larger (issue 36), and a plan
        // re-sized below the bound keeps it.
        let loose = g.bind(&[("a", 6), ("c", 4)]).unwrap();
        let (all, _) = g.bind_to_bounds(&loose).unwrap();
        assert_eq!(all.get(b), Some(6));
        let mut below = all.clone();
        below.set(nz, 2);
        below.set(m, 2);
        assert_eq!(g.resolve(&below).unwrap().get(b), Some(6));
        // A broadcast of two sizes that are values, not bounds, that do not broadcast is an
        // error still.
        let mut h = Graph::new("plain");
        let (p, q) = (h.symbol("p"), h.symbol("q"));
        let r = h.symbol("r");
        assert!(h.set_symbol_broadcast(r, Expr::symbol(p), Expr::symbol(q)));
        let bad = h.bind(&[("p", 6), ("q", 4)]);
        assert!(
            matches!(
                &bad,
                Err(BindError::NoBroadcast {
                    a_value: 6,
                    b_value: 4,
                    ..
                })
            ),
            "{bad:?}"
        );
    }

    #[test]
    fn broadcast_symbols_round_trip_through_json() {
        let (g, ..) = broadcasting();
        let json = g.to_json();
        assert!(
            json.contains("\"symbol_broadcasts\": {\"Add_o0_d0\": [\"a\", \"c\"]}"),
            "{json}"
        );
        let back = Graph::from_json(&json).unwrap();
        assert_eq!(back.symbol_broadcasts(), g.symbol_broadcasts());
        let bad = json.replace("[\"a\", \"c\"]", "[\"a\"]");
        assert!(Graph::from_json(&bad).is_err());
    }
    /// `y[q] = MaxPool(x[h])` with `q = floor((h+1)/2)`: a stride-2 window over an unknown dim.
    fn halving() -> (Graph, SymbolId, SymbolId) {
        let mut g = Graph::new("pool");
        let h = g.symbol("h");
        let q = g.symbol("MaxPool_o0_d0");
        let rule = Quotient {
            num: Expr::symbol(h).checked_add(&Expr::constant(1)).unwrap(),
            den: 2,
            ceil: false,
        };
        assert!(g.set_symbol_quotient(q, rule));
        let x = g.add_tensor(Tensor {
            shape: [Expr::symbol(h)].into_iter().collect(),
            ..Tensor::new("x", DType::F32, &[], TensorKind::Input)
        });
        let y = g.add_tensor(Tensor {
            shape: [Expr::symbol(q)].into_iter().collect(),
            ..Tensor::new("y", DType::F32, &[], TensorKind::Output)
        });
        g.add_node(Node::new("MaxPool", "MaxPool", vec![Some(x)], vec![y]));
        (g, h, q)
    }

    #[test]
    fn quotient_symbols_resolve_from_their_dim_rounded_as_their_rule_says() {
        let (g, h, q) = halving();
        assert!(g.is_derived(q) && !g.is_derived(h));
        assert_eq!(
            g.symbol_quotient(q).unwrap().display(g.symbols()),
            "floor((h+1)/2)"
        );
        for (vh, want) in [(224, 112), (225, 113), (1, 1), (0, 0)] {
            assert_eq!(g.bind(&[("h", vh)]).unwrap().get(q), Some(want), "h = {vh}");
        }
        let ceil = Quotient {
            num: Expr::symbol(h),
            den: 3,
            ceil: true,
        };
        assert_eq!((ceil.value(7), ceil.value(6), ceil.value(0)), (3, 2, 0));
        assert!(matches!(
            g.bind(&[("h", 224), ("MaxPool_o0_d0", 100)]),
            Err(BindError::BroadcastDisagrees {
                given: 100,
                computed: 112,
                ..
            })
        ));
        assert!(g.bind(&[("h", 224), ("MaxPool_o0_d0", 112)]).is_ok());
        let concrete = g.bound(&g.bind(&[("h", 9)]).unwrap()).unwrap();
        let y = concrete.find_tensor("y").unwrap();
        assert_eq!(concrete.tensor(y).static_bytes(), Ok(20));
        // The same rule is the same symbol.
        assert_eq!(g.find_quotient(g.symbol_quotient(q).unwrap()), Some(q));
    }

    #[test]
    fn a_quotient_uses_earlier_symbols_divides_by_one_or_more_and_has_no_other_rule() {
        let (mut g, h, q) = halving();
        let by = |num: Expr, den: u64| Quotient {
            num,
            den,
            ceil: false,
        };
        assert!(!g.set_symbol_quotient(h, by(Expr::symbol(q), 2)));
        let r = g.symbol("r");
        assert!(!g.set_symbol_quotient(r, by(Expr::symbol(h), 0)));
        assert!(g.set_symbol_bound(r, Expr::symbol(h)));
        assert!(!g.set_symbol_quotient(r, by(Expr::symbol(h), 2)));
        assert!(!g.set_symbol_broadcast(q, Expr::symbol(h), Expr::symbol(h)));
    }

    #[test]
    fn quotient_symbols_round_trip_through_json() {
        let (g, ..) = halving();
        let json = g.to_json();
        assert!(
            json.contains("\"symbol_quotients\": {\"MaxPool_o0_d0\": [\"h+1\", 2, \"floor\"]}"),
            "{json}"
        );
        let back = Graph::from_json(&json).unwrap();
        assert_eq!(back.symbol_quotients(), g.symbol_quotients());
        for bad in [
            "[\"h+1\", 0, \"floor\"]",
            "[\"h+1\", 2, \"round\"]",
            "[\"h+1\", 2]",
        ] {
            let json = json.replace("[\"h+1\", 2, \"floor\"]", bad);
            assert!(Graph::from_json(&json).is_err(), "{bad}");
        }
    }
}
