//! The importer's error type.
//!
//! Every variant names what it is about: the tensor, the node (with its op type), the symbol or
//! the file. Messages are for people; the fields are for programs.

use std::path::PathBuf;

use memplan_ir::{DType, ExprError, Shape, SizeError, ValidationErrors};

/// Why an ONNX model could not be imported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OnnxError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The input is larger than [`crate::ImportOptions::max_bytes`].
    #[error("the model is {size} bytes, over the {max}-byte limit")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The bytes are not a well-formed ONNX protobuf (truncated, random or of the wrong type).
    #[error("not a valid ONNX model: {0}")]
    Decode(#[from] prost::DecodeError),
    /// The model has no graph.
    #[error("the model has no graph")]
    NoGraph,
    /// A tensor's element type is unknown or unsupported.
    #[error("tensor `{tensor}`: unsupported ONNX element type {code}")]
    DType {
        /// The tensor.
        tensor: String,
        /// The ONNX `TensorProto.DataType` code.
        code: i32,
    },
    /// A graph input or output declares no tensor type.
    #[error("tensor `{tensor}`: {what}")]
    Type {
        /// The tensor.
        tensor: String,
        /// What is missing or wrong.
        what: String,
    },
    /// A dimension is negative, unnamed where a value is needed, or not a valid expression.
    #[error("tensor `{tensor}` dim {dim}: {reason}")]
    Dim {
        /// The tensor.
        tensor: String,
        /// The position of the dimension.
        dim: usize,
        /// What is wrong.
        reason: String,
    },
    /// Two tensors (inputs, initializers, constants or node outputs) share a name.
    #[error("tensor `{0}` is defined twice")]
    Duplicate(String),
    /// A node reads a tensor that nothing defines before it.
    #[error(
        "node `{node}` ({op}) reads `{tensor}`, which no input, initializer or earlier node defines"
    )]
    MissingTensor {
        /// The node.
        node: String,
        /// Its op type.
        op: String,
        /// The tensor it reads.
        tensor: String,
    },
    /// A graph output is not defined anywhere.
    #[error("graph output `{0}` is not produced by any node, input or initializer")]
    MissingOutput(String),
    /// A node's output shape cannot be known: the file gives none and inference failed.
    #[error("node `{node}` ({op}): cannot infer the shape of `{tensor}`: {reason}")]
    Shape {
        /// The node.
        node: String,
        /// Its op type.
        op: String,
        /// The output whose shape is unknown.
        tensor: String,
        /// Why inference failed (boxed: the error stays small on the happy path).
        reason: Box<InferError>,
    },
    /// A node attribute is malformed (a tensor attribute without a type, say).
    #[error("node `{node}` ({op}) attribute `{attr}`: {reason}")]
    Attr {
        /// The node.
        node: String,
        /// Its op type.
        op: String,
        /// The attribute.
        attr: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor's size overflows or is otherwise not computable.
    #[error("tensor `{tensor}`: {source}")]
    Size {
        /// The tensor.
        tensor: String,
        /// Why.
        source: SizeError,
    },
    /// A `--dim` binding names a symbol the graph does not have.
    #[error(transparent)]
    Bind(#[from] memplan_ir::BindError),
    /// A dimension cannot be evaluated under the `--dim` bindings (overflow, negative).
    #[error("binding the symbols: {0}")]
    Bound(ExprError),
    /// A graph attribute (an If branch, a Loop or Scan body) could not be imported.
    #[error("node `{node}` ({op}), body `{attr}`: {error}")]
    Body {
        /// The node.
        node: String,
        /// Its op type.
        op: String,
        /// The graph attribute.
        attr: String,
        /// What went wrong inside the body.
        error: Box<OnnxError>,
    },
    /// The imported graph is not structurally valid.
    #[error("the imported graph is invalid: {0}")]
    Invalid(ValidationErrors),
}

/// Why shape inference could not give a node's outputs. The node, its op and the output are
/// named by the [`OnnxError::Shape`] that carries this; each variant names the input,
/// attribute or axis at fault, with the ranks, dims and counts involved as fields. Dims are
/// kept as text with the graph's symbol names (`12*batch`), as inference shows them.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InferError {
    /// A required input is absent.
    #[error("input {index} is missing")]
    MissingInput {
        /// Its position in the node's inputs.
        index: usize,
    },
    /// The op needs at least one input and the node has none.
    #[error("the node has no inputs")]
    NoInputs,
    /// A required attribute is absent.
    #[error("attribute `{name}` is missing")]
    MissingAttr {
        /// The attribute.
        name: String,
    },
    /// An int attribute, or an element of an int list attribute, is below the least value
    /// the op accepts.
    #[error("attribute `{name}` has {value}; it must be at least {min}")]
    AttrTooSmall {
        /// The attribute.
        name: String,
        /// The value found.
        value: i64,
        /// The least value accepted.
        min: i64,
    },
    /// A list attribute has the wrong number of values.
    #[error("attribute `{name}` has {count} values, expected {expected}")]
    AttrLength {
        /// The attribute.
        name: String,
        /// Values found.
        count: usize,
        /// Values expected.
        expected: usize,
    },
    /// A string attribute holds a value the op does not know.
    #[error("attribute `{name}` is `{value}`, which the op does not know")]
    AttrValue {
        /// The attribute.
        name: String,
        /// The value found.
        value: String,
    },
    /// A packing attribute (`bits`) whose width does not divide a byte.
    #[error("attribute `{name}`: {bits} does not divide a byte")]
    AttrBits {
        /// The attribute.
        name: String,
        /// The width in bits.
        bits: i64,
    },
    /// A bit cast (`BitCast`'s `to`) to a type of another width.
    #[error("attribute `to`: {to} is not as wide as the input's {from}")]
    CastWidth {
        /// The type cast to.
        to: DType,
        /// The input's type.
        from: DType,
    },
    /// The rule needs the value of an input (a shape target, axes, a count) that only the
    /// data decides, and the op has no data-dependent form.
    #[error(
        "the value of input `{input}` is not known (it must be a constant or computed from shapes)"
    )]
    UnknownValue {
        /// The input.
        input: String,
    },
    /// The rule needs a constant where the value is a symbolic expression.
    #[error("the value of input `{input}` is symbolic; a constant is needed")]
    SymbolicValue {
        /// The input.
        input: String,
    },
    /// An input whose value gives a count (`K`, a depth, a size) holds no element.
    #[error("the value of input `{input}` is empty; one element is needed")]
    EmptyValue {
        /// The input.
        input: String,
    },
    /// The rule needs a constant dim where the dim is symbolic.
    #[error("{what} is symbolic ({dim}); a constant is needed")]
    SymbolicDim {
        /// Which dim (`a kernel dim`, `the Range delta`).
        what: String,
        /// The expression.
        dim: String,
    },
    /// An axis outside the tensor's rank.
    #[error("axis {axis} is out of range for rank {rank}")]
    Axis {
        /// The axis as given.
        axis: i64,
        /// The rank.
        rank: usize,
    },
    /// The same axis is given twice.
    #[error("axes {axes:?} name an axis twice")]
    RepeatedAxis {
        /// The axes as given.
        axes: Vec<i64>,
    },
    /// Axes to remove or reduce, more than the input has dims.
    #[error("{axes} axes for an input of rank {rank}")]
    TooManyAxes {
        /// Axes given.
        axes: usize,
        /// The input's rank.
        rank: usize,
    },
    /// No axes are given where the op needs them (input or attribute `axes`).
    #[error("no axes are given (input or attribute `axes`)")]
    NoAxes,
    /// An input has a rank the op does not accept.
    #[error("`{input}` has rank {rank}, not {expected}")]
    Rank {
        /// The input.
        input: String,
        /// Its rank.
        rank: usize,
        /// The ranks the op accepts.
        expected: Ranks,
    },
    /// AffineGrid's `theta` is not `[N, 2, 3]` or `[N, 3, 4]`.
    #[error("`{input}` has {dim} at axis 1, not [N, 2, 3] or [N, 3, 4]")]
    Theta {
        /// The input.
        input: String,
        /// Its dim 1.
        dim: i64,
    },
    /// A list input has more entries than a rank may have.
    #[error("`{input}` has {entries} entries, over the rank limit {limit}")]
    RankLimit {
        /// The input.
        input: String,
        /// Its entries.
        entries: usize,
        /// The rank limit.
        limit: usize,
    },
    /// Two lists that go together have different lengths (repeats and rank, sizes and axes).
    #[error("{}", counted.describe(*count, *expected))]
    Count {
        /// What is counted.
        counted: Counted,
        /// How many are given.
        count: usize,
        /// How many the other list has.
        expected: usize,
    },
    /// Slice's starts, ends, axes and steps differ in length.
    #[error("starts, ends, axes and steps have lengths {starts}, {ends}, {axes}, {steps}")]
    SliceLengths {
        /// Starts.
        starts: usize,
        /// Ends.
        ends: usize,
        /// Axes.
        axes: usize,
        /// Steps.
        steps: usize,
    },
    /// A step, stride or delta that must not be 0.
    #[error("{what} is 0")]
    Zero {
        /// What is 0.
        what: Quantity,
    },
    /// A stride that must be positive.
    #[error("stride {stride} is not positive")]
    Stride {
        /// The stride.
        stride: i64,
    },
    /// A Range over symbolic bounds whose length does not divide by the delta.
    #[error("symbolic Range from {start} to {limit} by {delta}")]
    SymbolicRange {
        /// The start.
        start: String,
        /// The limit.
        limit: String,
        /// The delta.
        delta: i64,
    },
    /// A slice of a symbolic dim with a step other than 1.
    #[error("a slice with step {step} of a symbolic dim")]
    SymbolicSlice {
        /// The step.
        step: i64,
    },
    /// Dim arithmetic overflowed or grew past the term limit.
    #[error("dim arithmetic: {0}")]
    Arithmetic(ExprError),
    /// A dim expression grew past the term limit (64 terms: shape inference's `MAX_TERMS`).
    #[error("dim arithmetic: a dim expression has more than {limit} terms")]
    TooManyTerms {
        /// The limit.
        limit: usize,
    },
    /// Integer arithmetic on attribute values or counts overflowed.
    #[error("{what} overflows")]
    Overflow {
        /// What overflowed.
        what: Quantity,
    },
    /// A dim that must divide by a factor does not.
    #[error("{what} {dim} is not divisible by {divisor}")]
    NotDivisible {
        /// Which dim.
        what: Quantity,
        /// The dim.
        dim: String,
        /// The factor.
        divisor: String,
    },
    /// A hidden size that must split into heads does not.
    #[error("hidden size {width} is not divisible by {heads} heads")]
    Heads {
        /// The hidden size.
        width: String,
        /// The number of heads.
        heads: String,
    },
    /// A negative dim in a shape built from values.
    #[error("negative dim {dim} in shape {shape}")]
    NegativeDim {
        /// The dim.
        dim: String,
        /// The shape.
        shape: String,
    },
    /// A Reshape target dim below -1.
    #[error("invalid target dim {dim} in {target}")]
    ReshapeTarget {
        /// The dim.
        dim: i64,
        /// The whole target.
        target: String,
    },
    /// Reshape's target has a 0 (copy) at an axis the input lacks.
    #[error("target dim {axis} is 0 but the input has rank {rank}")]
    ReshapeCopy {
        /// The axis.
        axis: usize,
        /// The input's rank.
        rank: usize,
    },
    /// Reshape's -1 cannot be resolved: the input's dims do not divide by the target's.
    #[error("cannot resolve -1 in {target} for input {input}: {source}")]
    ReshapeInfer {
        /// The whole target.
        target: String,
        /// The input's shape.
        input: String,
        /// Why the division failed.
        source: Box<InferError>,
    },
    /// The product of dims that must cancel does not divide exactly (Reshape's -1).
    #[error("cannot divide {num} by {den} exactly")]
    Divide {
        /// The numerator.
        num: String,
        /// The denominator.
        den: String,
    },
    /// Two shapes that must broadcast do not.
    #[error("shapes {a} and {b} do not broadcast")]
    Broadcast {
        /// The first shape.
        a: String,
        /// The second shape.
        b: String,
    },
    /// A Transpose `perm` that is not a permutation of the input's axes.
    #[error("perm {perm:?} is not a permutation of rank {rank}")]
    Permutation {
        /// The permutation.
        perm: Vec<usize>,
        /// The input's rank.
        rank: usize,
    },
    /// Squeeze of an axis whose size is not 1.
    #[error("axis {axis} has size {dim}, not 1")]
    Squeeze {
        /// The axis.
        axis: usize,
        /// Its size.
        dim: i64,
    },
    /// Split's `num_outputs` differs from the node's output count.
    #[error("num_outputs is {attr} but the node has {outputs} outputs")]
    SplitOutputs {
        /// The attribute.
        attr: i64,
        /// The node's outputs.
        outputs: usize,
    },
    /// A window (pooling, convolution) wider than its padded input.
    #[error("window {window} is larger than the padded input {dim}+{pads}")]
    Window {
        /// The effective window.
        window: i64,
        /// The input dim.
        dim: String,
        /// The padding on both sides.
        pads: i64,
    },
    /// A Resize scale that is negative, infinite or not a number.
    #[error("scale {scale} is not a finite non-negative number")]
    Scale {
        /// The scale.
        scale: f64,
    },
    /// A symbolic dim scaled by a non-integer.
    #[error("symbolic dim {dim} scaled by the non-integer {scale}")]
    SymbolicScale {
        /// The dim.
        dim: String,
        /// The scale.
        scale: f64,
    },
    /// Resize with neither `scales` nor `sizes`.
    #[error("neither scales nor sizes is given")]
    NoScales,
    /// An Einsum equation with more or fewer operands than the node has inputs.
    #[error("equation `{equation}` has {operands} operands for {inputs} inputs")]
    EinsumOperands {
        /// The equation.
        equation: String,
        /// Its operands.
        operands: usize,
        /// The node's inputs.
        inputs: usize,
    },
    /// An Einsum term that does not fit its operand.
    #[error("`{term}` has {labels} labels for `{input}` of rank {rank}")]
    EinsumTerm {
        /// The term.
        term: String,
        /// Its operand.
        input: String,
        /// Labels in the term (without the ellipsis).
        labels: usize,
        /// The operand's rank.
        rank: usize,
    },
    /// An Einsum output label given twice.
    #[error("output label `{label}` appears more than once in `{equation}`")]
    EinsumRepeated {
        /// The label.
        label: char,
        /// The equation.
        equation: String,
    },
    /// An Einsum output label no input has.
    #[error("output label `{label}` is not in any input")]
    EinsumLabel {
        /// The label.
        label: char,
    },
    /// GatherND indices deeper than the data.
    #[error(
        "indices of depth {depth} with {batch_dims} batch dims are deeper than the data of rank {rank}"
    )]
    IndexDepth {
        /// The last dim of the indices.
        depth: usize,
        /// `batch_dims`.
        batch_dims: usize,
        /// The data's rank.
        rank: usize,
    },
    /// A constant index outside the dim it indexes (ONNX allows `-dim..dim`).
    #[error("index {index} is out of range for a dim of {dim}")]
    IndexRange {
        /// The index as given.
        index: i64,
        /// The dim it indexes.
        dim: i64,
    },
    /// Sequence items of different ranks.
    #[error("items of rank {first} and {other} in one sequence")]
    SequenceRanks {
        /// The first item's rank.
        first: usize,
        /// Another item's rank.
        other: usize,
    },
    /// An If whose branches give outputs of different types or ranks.
    #[error("the branches give different types: {then:?} and {other:?}")]
    Branches {
        /// The then branch's results.
        then: Vec<(DType, Shape)>,
        /// The else branch's results.
        other: Vec<(DType, Shape)>,
    },
    /// A Scan (opset 8) state whose type changes between iterations.
    #[error("state {index} changes type between iterations, so its memory cannot be planned")]
    ScanState {
        /// The state's position.
        index: usize,
    },
    /// A Loop or Scan carried value whose type changes between iterations.
    #[error(
        "carried value {index} changes type from {from:?} to {to:?} between iterations, so its memory cannot be planned"
    )]
    Carried {
        /// The value's position.
        index: usize,
        /// Its type going in (boxed, as the error stays small).
        from: Box<(DType, Shape)>,
        /// Its type coming out of the body.
        to: Box<(DType, Shape)>,
    },
    /// A Loop's trip count whose value is not known.
    #[error("the trip count `M` is not a known value, so the per-iteration results have no size")]
    TripCount,
    /// A Scan without a scanned input (of rank at least `rank`).
    #[error("the Scan has no scanned input of rank {rank} or more")]
    NoScanInput {
        /// The least rank.
        rank: usize,
    },
    /// A negative dim inferred for an output.
    #[error("inferred a negative dim {dim} in {shape}")]
    InferredNegative {
        /// The dim.
        dim: String,
        /// The shape.
        shape: String,
    },
    /// The element type is one memplan cannot size (an unknown code).
    #[error("{what}: ONNX element type {code} is not supported")]
    DType {
        /// What has the type (`attribute \`to\``, an input).
        what: String,
        /// The ONNX `TensorProto.DataType` code.
        code: i64,
    },
    /// The op is refused by name: a domain memplan does not plan (`ai.onnx.ml`, training),
    /// or an op on sequence, optional or map values, whose sizes are not tensor shapes.
    #[error("`{op}` is not supported: {why}")]
    Unsupported {
        /// The op.
        op: String,
        /// Why.
        why: Refusal,
    },
    /// No rule knows the op.
    #[error("no shape rule for op `{op}`; the file must give its output shapes in value_info")]
    NoRule {
        /// The op type (with its domain when not the default one).
        op: String,
    },
    /// No rule knows the op with graph attributes (control flow other than If, Loop, Scan).
    #[error("no shape rule for `{op}` with bodies")]
    NoBodyRule {
        /// The op type.
        op: String,
    },
    /// The rule gave fewer outputs than the node has.
    #[error("the rule gives {count} outputs, and this is output {index}")]
    OutputCount {
        /// Outputs the rule gives.
        count: usize,
        /// The output asked for.
        index: usize,
    },
}

impl InferError {
    /// [`InferError::MissingAttr`] for `name`.
    pub(crate) fn missing_attr(name: &str) -> InferError {
        InferError::MissingAttr {
            name: name.to_owned(),
        }
    }

    /// [`InferError::Rank`] for `input` of rank `rank`.
    pub(crate) fn rank(input: &str, rank: usize, expected: Ranks) -> InferError {
        InferError::Rank {
            input: input.to_owned(),
            rank,
            expected,
        }
    }

    /// [`InferError::NoRule`] for `op`.
    pub(crate) fn no_rule(op: &str) -> InferError {
        InferError::NoRule { op: op.to_owned() }
    }

    /// [`InferError::Overflow`] of `what`.
    pub(crate) fn overflow(what: Quantity) -> InferError {
        InferError::Overflow { what }
    }
}

/// Why an op is refused by name ([`InferError::Unsupported`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The op's domain (`ai.onnx.ml`, the training domains) is not planned.
    Domain(String),
    /// An op that maps a body over sequence items (`SequenceMap`).
    MapsSequence,
    /// An empty `Optional` whose `type` is not a tensor (or a sequence of tensors) with
    /// constant dims.
    OptionalType,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Domain(d) => write!(f, "memplan does not plan the `{d}` domain"),
            Refusal::MapsSequence => {
                f.write_str("it maps a body over sequence items; memplan does not plan it")
            }
            Refusal::OptionalType => f.write_str(
                "an empty optional needs a `type` of a tensor or a sequence of tensors with \
                 constant dims",
            ),
        }
    }
}

/// The ranks an op accepts for an input ([`InferError::Rank`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ranks {
    /// Exactly this rank.
    Exactly(usize),
    /// One of these ranks.
    OneOf(&'static [usize]),
    /// This rank or more.
    AtLeast(usize),
}

impl std::fmt::Display for Ranks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ranks::Exactly(r) => write!(f, "{r}"),
            Ranks::AtLeast(r) => write!(f, "at least {r}"),
            Ranks::OneOf(rs) => match rs.split_last() {
                None => f.write_str("any"),
                Some((last, [])) => write!(f, "{last}"),
                Some((last, rest)) => {
                    let head: Vec<String> = rest.iter().map(ToString::to_string).collect();
                    write!(f, "{} or {last}", head.join(", "))
                }
            },
        }
    }
}

/// What an [`InferError::Count`] counts, against what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Counted {
    /// Tile's repeats, against the input's rank.
    Repeats,
    /// Expand-like or Resize sizes, against the axes.
    Sizes,
    /// Resize scales, against the axes.
    Scales,
    /// Pad's pads, against twice the axes.
    Pads,
    /// Kernel dims, against the input's spatial dims.
    Kernel,
}

impl Counted {
    /// The message for `count` of these against `expected`.
    fn describe(self, count: usize, expected: usize) -> String {
        match self {
            Counted::Repeats => format!("{count} repeats for rank {expected}"),
            Counted::Sizes => format!("{count} sizes for {expected} axes"),
            Counted::Scales => format!("{count} scales for {expected} axes"),
            Counted::Pads => format!("{count} pads for {} axes", expected / 2),
            Counted::Kernel => format!("kernel has {count} dims for {expected} spatial dims"),
        }
    }
}

/// A quantity named in an error ([`InferError::Overflow`], [`InferError::Zero`],
/// [`InferError::NotDivisible`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Quantity {
    /// The input's rank.
    Rank,
    /// The node's inputs, outputs or a sequence's items.
    Count,
    /// A window: `dilation * (kernel - 1) + 1`.
    Window,
    /// The padding on both sides of an axis.
    Padding,
    /// An output dim computed from attributes (a transposed convolution's, an unpooling's).
    OutputDim,
    /// Range's length.
    RangeLength,
    /// Range's delta.
    RangeDelta,
    /// A slice's length.
    SliceLength,
    /// A slice's step.
    SliceStep,
    /// A Resize'd dim.
    ScaledDim,
    /// The largest n-gram index.
    NgramIndex,
    /// Col2Im's image bound.
    ImageBound,
    /// The channels (`C`, or `C * block`).
    Channels,
    /// The height.
    Height,
    /// The width.
    Width,
    /// A dim split into equal chunks.
    Dim,
}

impl std::fmt::Display for Quantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Quantity::Rank => "the rank",
            Quantity::Count => "the count",
            Quantity::Window => "the window (dilation * (kernel - 1) + 1)",
            Quantity::Padding => "the padding",
            Quantity::OutputDim => "the output dim",
            Quantity::RangeLength => "the Range length",
            Quantity::RangeDelta => "the Range delta",
            Quantity::SliceLength => "the slice length",
            Quantity::SliceStep => "the slice step",
            Quantity::ScaledDim => "the scaled dim",
            Quantity::NgramIndex => "the n-gram index",
            Quantity::ImageBound => "the image bound",
            Quantity::Channels => "the channel count",
            Quantity::Height => "the height",
            Quantity::Width => "the width",
            Quantity::Dim => "dim",
        })
    }
}
