//! The importer's error type.
//!
//! Every variant names what it is about: the tensor, the node (with its op type), the symbol or
//! the file. Messages are for people; the fields are for programs.

use std::path::PathBuf;

use memplan_ir::{SizeError, ValidationErrors};

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
    Bound(memplan_ir::ExprError),
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
/// attribute or axis at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InferError {
    /// A required input is absent.
    #[error("input {index} is missing")]
    MissingInput {
        /// Its position in the node's inputs.
        index: usize,
    },
    /// A required attribute is absent.
    #[error("attribute `{name}` is missing")]
    MissingAttr {
        /// The attribute.
        name: String,
    },
    /// An attribute has a value the op does not accept.
    #[error("attribute `{name}`: {reason}")]
    BadAttr {
        /// The attribute.
        name: String,
        /// What is wrong with it.
        reason: String,
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
    /// Dim arithmetic overflowed or grew past the term limit.
    #[error("dim arithmetic: {0}")]
    Arithmetic(String),
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
        /// Why (the domain, or the kind of value).
        why: String,
    },
    /// No rule knows the op.
    #[error("no shape rule for op `{op}`; the file must give its output shapes in value_info")]
    NoRule {
        /// The op type (with its domain when not the default one).
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
    /// The inputs contradict the op (shapes that do not broadcast, a bad permutation, ...).
    #[error("{0}")]
    Invalid(String),
}

impl InferError {
    /// [`InferError::MissingAttr`] for `name`.
    pub(crate) fn missing_attr(name: &str) -> InferError {
        InferError::MissingAttr {
            name: name.to_owned(),
        }
    }
}

impl From<String> for InferError {
    fn from(reason: String) -> InferError {
        InferError::Invalid(reason)
    }
}

impl From<&str> for InferError {
    fn from(reason: &str) -> InferError {
        InferError::Invalid(reason.to_owned())
    }
}
