//! Memory semantics of ops: which outputs may share storage with an input.
//!
//! For each output of a node, [`OpTable::semantics`] says one of:
//! - [`MemorySemantics::Opaque`]: the output needs its own storage;
//! - [`MemorySemantics::View`]: the output *is* the bytes of input `input` starting at
//!   `offset` (Reshape, Flatten, Squeeze, Unsqueeze, Identity, a Cast to the same dtype, a
//!   contiguous Slice, a Split along the outermost non-unit axis);
//! - [`MemorySemantics::InPlace`]: the op may write the output over one of the listed
//!   inputs (elementwise ops whose output has that input's bytes and dtype). Whether it does
//!   is the planner's choice: it must know that nothing reads the input afterwards.
//!
//! The rules are keyed by op type. [`OpTable::default`] knows the ONNX ops above; users add
//! their own ops with [`OpTable::insert`]. Each rule checks the tensors it is given (dtype,
//! bytes, contiguity) and falls back to `Opaque` when a condition fails, so a rule never
//! claims sharing that the shapes do not allow.
//!
//! Two more memory facts about ops, beside their outputs:
//! - *mutation* ([`OpTable::mutated_inputs`]): the op writes some of its inputs in place
//!   while they stay live (ONNX Runtime's `InPlaceAccumulatorV2` adds into its gradient
//!   buffer, `AdamWOptimizer` updates the weights and moments it is given; memplan's own
//!   optimizer steps do the same). Such an input keeps its bytes for itself (nothing aliases
//!   it), and no other reader of it may move across the write;
//! - *metadata reads* ([`reads_bytes`]): `Shape` and `Size` read only their input's shape,
//!   so they do not keep its bytes alive.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::dim::Bindings;
use crate::graph::{Attr, Graph, Node, TensorKind};
use crate::ids::{IndexVec, TensorId};

/// How one output of a node relates to the node's inputs in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemorySemantics {
    /// The output needs storage of its own.
    Opaque,
    /// The output is a view: the bytes of input `input` (a position in `Node::inputs`)
    /// from `offset`.
    View {
        /// Position of the viewed input in the node's inputs.
        input: usize,
        /// Byte offset of the view inside that input.
        offset: u64,
    },
    /// The op may write this output over any of these inputs (positions in `Node::inputs`),
    /// in order of preference.
    InPlace {
        /// Candidate input positions.
        inputs: SmallVec<[usize; 2]>,
    },
}

/// A custom rule: the semantics of each output of `node`.
pub type CustomRule = Arc<dyn Fn(&Graph, &Node, &Bindings) -> Vec<MemorySemantics> + Send + Sync>;

/// The rule for one op type.
#[derive(Clone)]
#[non_exhaustive]
pub enum OpRule {
    /// Every output is opaque.
    Opaque,
    /// Output 0 is a view of input 0 at offset 0 when their byte sizes match.
    Reshape,
    /// Output 0 is a view of input 0 when the dtypes match (a no-op cast); else opaque.
    Cast,
    /// A contiguous slice of input 0 is a view; starts/ends/axes/steps come from attributes
    /// (opset < 10) or from constant inputs 1..=4 with known values.
    Slice,
    /// Outputs are consecutive chunks of input 0 along `axis`; views when every dimension
    /// before the axis is 1.
    Split,
    /// Elementwise: output 0 may overwrite any input with the same dtype and byte size.
    Elementwise,
    /// Elementwise over input 0 only (for ops whose other inputs are parameters).
    ElementwiseFirst,
    /// BatchNormalization: elementwise over input 0 in inference mode; opaque in training
    /// mode, where the statistics are taken over all of input 0: the `training_mode`
    /// attribute set (opset 14 on), or more than one output (the running and saved
    /// statistics, which every opset makes only in training mode; opsets 9 to 13 have no
    /// attribute and tell the mode by the outputs alone).
    Normalization,
    /// Row-wise: the op splits input 0 into independent rows (a softmax vector, a layer-norm
    /// row, one instance or group) and its kernel reads each row fully before writing the
    /// same row of output 0, so output 0 may overwrite input 0 when they have the same dtype
    /// and element count. cuDNN's and most GPU softmax and normalisation kernels work this
    /// way; a table for kernels that do not sets these ops to [`OpRule::Opaque`].
    RowWise,
    /// A user-supplied rule.
    Custom(CustomRule),
}

impl PartialEq for OpRule {
    /// Built-in rules are equal by kind; custom rules only when they are the same closure.
    fn eq(&self, other: &OpRule) -> bool {
        match (self, other) {
            (OpRule::Custom(a), OpRule::Custom(b)) => Arc::ptr_eq(a, b),
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        }
    }
}

impl Eq for OpRule {}

impl fmt::Debug for OpRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpRule::Opaque => "Opaque",
            OpRule::Reshape => "Reshape",
            OpRule::Cast => "Cast",
            OpRule::Slice => "Slice",
            OpRule::Split => "Split",
            OpRule::Elementwise => "Elementwise",
            OpRule::ElementwiseFirst => "ElementwiseFirst",
            OpRule::Normalization => "Normalization",
            OpRule::RowWise => "RowWise",
            OpRule::Custom(_) => "Custom",
        })
    }
}

/// Memory-semantics rules keyed by op type. Unknown ops are opaque.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpTable {
    rules: HashMap<String, OpRule>,
    /// Input positions each mutating op writes in place (see [`OpTable::mutated_inputs`]).
    mutations: HashMap<String, SmallVec<[usize; 4]>>,
}

/// Ops that write some inputs in place while they stay live, and which (positions in
/// `Node::inputs`; an absent position is skipped). ONNX Runtime's training ops: the
/// gradient accumulator adds into its buffer (input 0); the optimizers update the weights
/// (and AdamW its two moments) given as sequences. memplan's own optimizer steps (made by
/// `memplan_planner::plan_training`) are listed in `OPTIMIZER_STEPS`.
const MUTATING_OPS: &[(&str, &[usize])] = &[
    ("com.microsoft.InPlaceAccumulatorV2", &[0]),
    ("com.microsoft.AdamWOptimizer", &[2, 4, 5]),
    ("com.microsoft.SGDOptimizerV2", &[1]),
];

/// memplan's optimizer steps: the weight (input 0), its gradient (input 1, only read), then
/// the state they update (velocity, moments, the f32 master weight): every input but the
/// gradient is updated.
const OPTIMIZER_STEPS: &[&str] = &["memplan.SGD", "memplan.Momentum", "memplan.Adam"];

/// memplan's Adam step that reads a denominator made beforehand (by its `foreach` and
/// `per-tensor` kernels): the weight (input 0), its gradient (1) and the denominator (2) are
/// read, every input after them (the moments, the f32 master weight) is updated with the
/// weight.
const DENOMINATOR_STEPS: &[&str] = &["memplan.AdamUpdate"];

/// Ops that read only the shape and dtype of an input (its position), not its bytes.
const METADATA_READS: &[(&str, usize)] = &[("Shape", 0), ("Size", 0)];

/// Whether `node` reads the bytes of its input at position `pos`; false for inputs it
/// reads only the metadata of (`Shape` and `Size`), which need not be live when it runs.
pub fn reads_bytes(node: &Node, pos: usize) -> bool {
    !METADATA_READS
        .iter()
        .any(|&(op, p)| p == pos && node.op == op)
}

/// The tensors whose bytes `node` reads: [`Node::present_inputs`] less the inputs it reads
/// only the metadata of (see [`reads_bytes`]). Liveness uses this.
pub fn data_inputs(node: &Node) -> impl Iterator<Item = TensorId> + '_ {
    node.inputs
        .iter()
        .enumerate()
        .filter(|&(pos, t)| t.is_some() && reads_bytes(node, pos))
        .filter_map(|(_, t)| *t)
        .chain(node.implicit_inputs.iter().copied())
}

const RESHAPE_OPS: &[&str] = &["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"];

pub(crate) const ELEMENTWISE_OPS: &[&str] = &[
    // Unary.
    "Relu",
    "Sigmoid",
    "Tanh",
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Erf",
    "Gelu",
    // memplan's fused element-wise region (one input): Y[i] from X[i].
    "memplan.Pointwise",
    "HardSwish",
    "HardSigmoid",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "Softplus",
    "Softsign",
    "Mish",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Sin",
    "Cos",
    "Tan",
    "Not",
    "ThresholdedRelu",
    "Shrink",
    "IsNaN",
    "IsInf",
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Cosh",
    "Sinh",
    "BitwiseNot",
    "Swish",
    // Binary and variadic.
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Mod",
    "And",
    "Or",
    "Xor",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "PRelu",
    "Where",
    "BitShift",
];

/// Ops whose outputs always need storage of their own: every op the ONNX importer has a
/// shape rule for and no other rule here is listed, so the table states a memory rule for
/// each (a test in `memplan-onnx` keeps the two lists from drifting apart).
const OPAQUE_OPS: &[&str] = &[
    "AffineGrid",
    "ArgMax",
    "ArgMin",
    "Attention",
    "AveragePool",
    "Bernoulli",
    "BitCast",
    "BlackmanWindow",
    "CastLike",
    "CausalConvWithState",
    "CenterCropPad",
    "Col2Im",
    "Compress",
    "Concat",
    "ConcatFromSequence",
    "ConstantOfShape",
    "Conv",
    "ConvInteger",
    "ConvTranspose",
    "CumProd",
    "CumSum",
    "DFT",
    "DeformConv",
    "DepthToSpace",
    "DequantizeLinear",
    "Det",
    "DynamicQuantizeLinear",
    "Einsum",
    "Expand",
    "EyeLike",
    "FlexAttention",
    "GRU",
    "Gather",
    "GatherElements",
    "GatherND",
    "Gemm",
    "GlobalAveragePool",
    "GlobalLpPool",
    "GlobalMaxPool",
    "GridSample",
    "HammingWindow",
    "HannWindow",
    "Hardmax",
    "ImageDecoder",
    "LRN",
    "LSTM",
    "LinearAttention",
    "LpNormalization",
    "LpPool",
    "MatMul",
    "MatMulInteger",
    "MaxPool",
    "MaxUnpool",
    "MeanVarianceNormalization",
    "MelWeightMatrix",
    "Multinomial",
    "NegativeLogLikelihoodLoss",
    "NonMaxSuppression",
    "NonZero",
    "OneHot",
    "Optional",
    "OptionalGetElement",
    "OptionalHasElement",
    "Pad",
    "QLinearConv",
    "QLinearMatMul",
    "QuantizeLinear",
    "RNN",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "Range",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "Resize",
    "ReverseSequence",
    "RoiAlign",
    "RotaryEmbedding",
    "STFT",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceErase",
    "SequenceInsert",
    "SequenceLength",
    "Shape",
    "Size",
    "SoftmaxCrossEntropyLoss",
    "SpaceToDepth",
    "SplitToSequence",
    "StringSplit",
    "SwiGLU",
    "TensorScatter",
    "TfIdfVectorizer",
    "Tile",
    "TopK",
    "Transpose",
    "Trilu",
    "Unique",
    "Upsample",
];

/// Ops that normalise independent rows of input 0 (see [`OpRule::RowWise`]).
pub(crate) const ROW_WISE_OPS: &[&str] = &[
    "GroupNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "LogSoftmax",
    "RMSNormalization",
    "SimplifiedLayerNormalization",
    "Softmax",
];

/// ONNX Runtime's `com.microsoft` ops that the ONNX importer has shape rules for: opaque
/// (the plan verifiers know no alias rule for them).
const CONTRIB_OPAQUE_OPS: &[&str] = &[
    "com.microsoft.Attention",
    "com.microsoft.BiasGelu",
    "com.microsoft.EmbedLayerNormalization",
    "com.microsoft.FastGelu",
    "com.microsoft.FusedMatMul",
    "com.microsoft.GatherBlockQuantized",
    "com.microsoft.Gelu",
    "com.microsoft.GroupQueryAttention",
    "com.microsoft.MatMulNBits",
    "com.microsoft.MultiHeadAttention",
    "com.microsoft.RotaryEmbedding",
    "com.microsoft.SimplifiedLayerNormalization",
    "com.microsoft.SkipLayerNormalization",
    "com.microsoft.SkipSimplifiedLayerNormalization",
];

/// memplan's fused kernels (made by `memplan_planner::fuse_graph`) whose output 0 is input 0
/// plus what the rest computes, element by element: a product accumulated into a residual
/// (`y[i] = r[i] + conv(x)[i]`), a bias and an activation (`y[i] = act(x[i] + b[i mod c])`):
/// they may write over input 0.
const FUSED_INTO_FIRST_OPS: &[&str] = &[
    "memplan.ConvAdd",
    "memplan.ConvTransposeAdd",
    "memplan.GemmAdd",
    "memplan.MatMulAdd",
    "memplan.BiasAct",
];

/// memplan's fused kernels that normalise rows: `memplan.SkipNorm` normalises each row of
/// input 0 plus the same row of input 1 (the skip; plus a bias), reading both rows fully
/// before it writes that row of output 0, so output 0 may overwrite input 0 (see
/// [`OpRule::RowWise`]).
const FUSED_ROW_WISE_OPS: &[&str] = &["memplan.SkipNorm"];

/// memplan's fused kernels whose outputs need storage of their own (the attention kernel
/// reads every row of K and V for each query row).
const FUSED_OPAQUE_OPS: &[&str] = &["memplan.Attention"];

/// ONNX Runtime's training ops whose output 0 is computed element by element from the
/// incoming gradient and the saved forward value at the same index (`dX[i]` from `dY[i]`
/// and `X[i]` or `Y[i]`; the fused-bias GELU gradients also read the bias, broadcast over
/// the last axis, as Add does), so it may overwrite either when dead.
const TRAINING_ELEMENTWISE_OPS: &[&str] = &[
    "com.microsoft.BiasFastGeluGrad_dX",
    "com.microsoft.BiasGeluGrad_dX",
    "com.microsoft.FastGeluGrad",
    "com.microsoft.GeluGrad",
    "com.microsoft.LeakyReluGrad",
    "com.microsoft.QuickGeluGrad",
    "com.microsoft.ReluGrad",
    "com.microsoft.SigmoidGrad",
    "com.microsoft.SoftplusGrad",
    "com.microsoft.TanhGrad",
    // memplan's gradient of a fused element-wise region (`memplan.Pointwise`): dX[i] from
    // dY[i] and X[i].
    "memplan.PointwiseGrad",
];

/// ONNX Runtime's other training ops (gradients, losses, accumulation, optimizers) that the
/// ONNX importer has shape rules for: opaque.
const TRAINING_OPAQUE_OPS: &[&str] = &[
    "AveragePoolGrad",
    "MaxPoolGrad",
    "com.microsoft.AdamWOptimizer",
    "com.microsoft.BatchNormInternal",
    "com.microsoft.BatchNormalizationGrad",
    "com.microsoft.BitmaskDropoutGrad",
    "com.microsoft.ConcatTraining",
    "com.microsoft.ConvGrad",
    "com.microsoft.DropoutGrad",
    "com.microsoft.GRUGrad",
    "com.microsoft.GRUTraining",
    "com.microsoft.LSTMGrad",
    "com.microsoft.LSTMTraining",
    "com.microsoft.ResizeGrad",
    "com.microsoft.GatherElementsGrad",
    "com.microsoft.GatherGrad",
    "com.microsoft.GatherNDGrad",
    "com.microsoft.InPlaceAccumulator",
    "com.microsoft.InPlaceAccumulatorV2",
    "com.microsoft.LayerNormalizationGrad",
    "com.microsoft.LogSoftmaxGrad",
    "com.microsoft.LogSoftmaxGrad_13",
    "com.microsoft.ReduceSumTraining",
    "com.microsoft.SGDOptimizerV2",
    "com.microsoft.Scale",
    "com.microsoft.SimplifiedLayerNormalizationGrad",
    "com.microsoft.SliceGrad",
    "com.microsoft.SoftmaxCrossEntropy",
    "com.microsoft.SoftmaxCrossEntropyGrad",
    "com.microsoft.SoftmaxCrossEntropyLossGrad",
    "com.microsoft.SoftmaxCrossEntropyLossInternal",
    "com.microsoft.SoftmaxCrossEntropyLossInternalGrad",
    "com.microsoft.SoftmaxGrad",
    "com.microsoft.SoftmaxGrad_13",
    "com.microsoft.SparseSoftmaxCrossEntropy",
    "com.microsoft.SparseSoftmaxCrossEntropyGrad",
    "com.microsoft.SplitTraining",
    "com.microsoft.ZeroGradient",
    "memplan.Adam",
    "memplan.AdamUpdate",
    "memplan.Momentum",
    "memplan.SGD",
];

/// Ops that run elementwise over input 0, the other inputs being parameters. QuickGelu
/// (ONNX Runtime's `com.microsoft.QuickGelu`, `x * sigmoid(alpha * x)`, one input) is also
/// known by its bare name, as graph files written by other tools call it.
pub(crate) const ELEMENTWISE_FIRST_OPS: &[&str] =
    &["Clip", "Dropout", "QuickGelu", "com.microsoft.QuickGelu"];

impl Default for OpTable {
    fn default() -> OpTable {
        let mut t = OpTable::empty();
        for op in RESHAPE_OPS {
            t.insert(op, OpRule::Reshape);
        }
        for op in ELEMENTWISE_OPS.iter().chain(TRAINING_ELEMENTWISE_OPS) {
            t.insert(op, OpRule::Elementwise);
        }
        for op in ELEMENTWISE_FIRST_OPS.iter().chain(FUSED_INTO_FIRST_OPS) {
            t.insert(op, OpRule::ElementwiseFirst);
        }
        t.insert("Cast", OpRule::Cast);
        t.insert("Slice", OpRule::Slice);
        t.insert("Split", OpRule::Split);
        t.insert("BatchNormalization", OpRule::Normalization);
        for op in ROW_WISE_OPS.iter().chain(FUSED_ROW_WISE_OPS) {
            t.insert(op, OpRule::RowWise);
        }
        for op in OPAQUE_OPS
            .iter()
            .chain(CONTRIB_OPAQUE_OPS)
            .chain(TRAINING_OPAQUE_OPS)
            .chain(FUSED_OPAQUE_OPS)
        {
            t.insert(op, OpRule::Opaque);
        }
        for (op, inputs) in MUTATING_OPS {
            t.insert_mutation(op, inputs);
        }
        let all_but_gradient: Vec<usize> = (0..16).filter(|&i| i != 1).collect();
        for op in OPTIMIZER_STEPS {
            t.insert_mutation(op, &all_but_gradient);
        }
        let all_but_read: Vec<usize> = (0..16).filter(|&i| i != 1 && i != 2).collect();
        for op in DENOMINATOR_STEPS {
            t.insert_mutation(op, &all_but_read);
        }
        t
    }
}

impl OpTable {
    /// A table with no rules: every op is opaque.
    pub fn empty() -> OpTable {
        OpTable {
            rules: HashMap::new(),
            mutations: HashMap::new(),
        }
    }

    /// Declares that `op` writes its inputs at `positions` in place (replacing an earlier
    /// declaration; an empty list removes it). Its outputs keep the rule [`OpTable::insert`]
    /// gives them.
    pub fn insert_mutation(&mut self, op: &str, positions: &[usize]) {
        if positions.is_empty() {
            self.mutations.remove(op);
        } else {
            self.mutations
                .insert(op.to_owned(), positions.iter().copied().collect());
        }
    }

    /// The positions of the inputs `node` writes in place while they stay live (present
    /// inputs only, ascending): the gradient buffer of ONNX Runtime's `InPlaceAccumulatorV2`,
    /// the weights and moments of an optimizer step. Such an input never shares its bytes,
    /// and every other reader of it runs on the side of the write the graph's node order
    /// puts it.
    pub fn mutated_inputs(&self, node: &Node) -> SmallVec<[usize; 4]> {
        let Some(list) = self.mutations.get(&node.op) else {
            return SmallVec::new();
        };
        let mut out: SmallVec<[usize; 4]> = list
            .iter()
            .copied()
            .filter(|&p| node.inputs.get(p).copied().flatten().is_some())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The tensors of `graph` that `node` writes in place while they stay live, sorted and
    /// without repeats: its [`OpTable::mutated_inputs`], and, for a node that runs bodies
    /// (If, Loop, Scan), every value a body updates at any depth of nesting. A body's
    /// input named like a tensor of `graph` is that tensor (a captured value: ONNX forbids a
    /// body to redefine an outer name), so an update of it updates the outer tensor when
    /// the node runs. Any other body input is a formal one, handed by the node from its own
    /// inputs in order (Loop: iteration count, condition, carried values; Scan: states and
    /// scanned inputs; the last `k` inputs for `k` formals): a runtime may hand the body the
    /// outer bytes themselves, so an update of a formal input counts as one of the node
    /// input it comes from. Every analysis treats the node as the update: the tensor keeps
    /// its bytes to itself, a graph input so updated lives to the last step, readers keep
    /// their side of the node, and nothing computed from it is folded.
    pub fn updated_tensors(&self, graph: &Graph, node: &Node) -> SmallVec<[TensorId; 4]> {
        let mut out: SmallVec<[TensorId; 4]> = SmallVec::new();
        if !self.has_mutations() {
            return out;
        }
        out.extend(
            self.mutated_inputs(node)
                .into_iter()
                .filter_map(|p| node.inputs.get(p).copied().flatten()),
        );
        for body in &node.bodies {
            let inner = &body.graph;
            let mut changed: IndexVec<TensorId, bool> =
                IndexVec::from_elem(false, inner.tensors().len());
            for inner_node in inner.nodes().iter() {
                for t in self.updated_tensors(inner, inner_node) {
                    if let Some(c) = changed.get_mut(t) {
                        *c = true;
                    }
                }
            }
            if !changed.iter().any(|&c| c) {
                continue;
            }
            let formal: Vec<TensorId> = inner
                .tensors()
                .iter_enumerated()
                .filter(|(_, x)| {
                    x.kind == TensorKind::Input && graph.find_tensor(&x.name).is_none()
                })
                .map(|(t, _)| t)
                .collect();
            let first = node.inputs.len().saturating_sub(formal.len());
            for (t, x) in inner.tensors().iter_enumerated() {
                if x.kind != TensorKind::Input || !changed.get(t).copied().unwrap_or(false) {
                    continue;
                }
                let outer = match graph.find_tensor(&x.name) {
                    Some(o) => Some(o),
                    None => formal
                        .iter()
                        .position(|&f| f == t)
                        .and_then(|k| node.inputs.get(first + k).copied().flatten()),
                };
                out.extend(outer);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether some op of this table writes an input in place.
    pub fn has_mutations(&self) -> bool {
        !self.mutations.is_empty()
    }

    /// Sets the rule for `op`, replacing any earlier one.
    pub fn insert(&mut self, op: &str, rule: OpRule) {
        self.rules.insert(op.to_owned(), rule);
    }

    /// Whether some op has a user-supplied rule.
    pub fn has_custom_rules(&self) -> bool {
        self.rules.values().any(|r| matches!(r, OpRule::Custom(_)))
    }

    /// Whether the table states a rule for `op` (an explicit [`OpRule::Opaque`] counts;
    /// an op it does not know is treated as opaque all the same).
    pub fn states(&self, op: &str) -> bool {
        self.rules.contains_key(op)
    }

    /// Every op the table states a rule for, sorted by name.
    pub fn ops(&self) -> Vec<&str> {
        let mut ops: Vec<&str> = self.rules.keys().map(String::as_str).collect();
        ops.sort_unstable();
        ops
    }

    /// The ops this table makes opaque although the default table gives them a rule (kernels
    /// that cannot alias, say a softmax that needs a separate output), sorted by name. Plan
    /// files record them, so that a plan read back is checked against the same table.
    pub fn made_opaque(&self) -> Vec<&str> {
        let default = OpTable::default();
        let mut ops: Vec<&str> = self
            .rules
            .iter()
            .filter(|(op, rule)| **rule == OpRule::Opaque && *default.rule(op) != OpRule::Opaque)
            .map(|(op, _)| op.as_str())
            .collect();
        ops.sort_unstable();
        ops
    }

    /// This table with every op whose rule is `rule` made opaque: for a runtime whose kernels
    /// cannot do what that rule allows (say, normalise rows in place:
    /// `OpTable::default().without(&OpRule::RowWise)`).
    pub fn without(mut self, rule: &OpRule) -> OpTable {
        for r in self.rules.values_mut() {
            if r == rule {
                *r = OpRule::Opaque;
            }
        }
        self
    }

    /// The rule for `op`.
    pub fn rule(&self, op: &str) -> &OpRule {
        self.rules.get(op).unwrap_or(&OpRule::Opaque)
    }

    /// The semantics of each output of `node` (one entry per output), for sizes under
    /// `bindings`. Any condition that cannot be checked (an unbound symbol, an unknown slice
    /// bound) makes that output opaque.
    pub fn semantics(
        &self,
        graph: &Graph,
        node: &Node,
        bindings: &Bindings,
    ) -> Vec<MemorySemantics> {
        let opaque = || vec![MemorySemantics::Opaque; node.outputs.len()];
        let mut out = match self.rule(&node.op) {
            OpRule::Opaque => opaque(),
            OpRule::Reshape => reshape(graph, node, bindings).unwrap_or_else(opaque),
            OpRule::Cast => cast(graph, node, bindings).unwrap_or_else(opaque),
            OpRule::Slice => slice(graph, node, bindings).unwrap_or_else(opaque),
            OpRule::Split => split(graph, node, bindings).unwrap_or_else(opaque),
            OpRule::Elementwise => elementwise(graph, node, bindings, usize::MAX),
            OpRule::ElementwiseFirst | OpRule::RowWise => elementwise(graph, node, bindings, 1),
            OpRule::Normalization => {
                let training_mode = node
                    .attr("training_mode")
                    .and_then(Attr::as_int)
                    .unwrap_or(0)
                    != 0;
                if training_mode || node.outputs.len() > 1 {
                    // Training mode normalises with statistics over all of X: each output
                    // element depends on every input element.
                    opaque()
                } else {
                    elementwise(graph, node, bindings, 1)
                }
            }
            OpRule::Custom(f) => f(graph, node, bindings),
        };
        out.resize(node.outputs.len(), MemorySemantics::Opaque);
        out
    }
}

fn input(node: &Node, i: usize) -> Option<TensorId> {
    node.inputs.get(i).copied().flatten()
}

fn bytes(graph: &Graph, t: TensorId, b: &Bindings) -> Option<u64> {
    graph.tensors().get(t)?.bytes(b).ok()
}

fn elements(graph: &Graph, t: TensorId, b: &Bindings) -> Option<u64> {
    graph.tensors().get(t)?.elements(b).ok()
}

fn view_of_first(node: &Node, offset: u64) -> Vec<MemorySemantics> {
    let mut v = vec![MemorySemantics::Opaque; node.outputs.len()];
    if let Some(first) = v.first_mut() {
        *first = MemorySemantics::View { input: 0, offset };
    }
    v
}

fn reshape(graph: &Graph, node: &Node, b: &Bindings) -> Option<Vec<MemorySemantics>> {
    let x = input(node, 0)?;
    let y = *node.outputs.first()?;
    (bytes(graph, x, b)? == bytes(graph, y, b)?).then(|| view_of_first(node, 0))
}

fn cast(graph: &Graph, node: &Node, b: &Bindings) -> Option<Vec<MemorySemantics>> {
    let x = input(node, 0)?;
    let y = *node.outputs.first()?;
    (graph.tensors().get(x)?.dtype == graph.tensors().get(y)?.dtype).then_some(())?;
    reshape(graph, node, b)
}

fn elementwise(
    graph: &Graph,
    node: &Node,
    b: &Bindings,
    max_inputs: usize,
) -> Vec<MemorySemantics> {
    let mut v = vec![MemorySemantics::Opaque; node.outputs.len()];
    let Some(&y) = node.outputs.first() else {
        return v;
    };
    let (Some(yt), Some(yn)) = (graph.tensors().get(y), elements(graph, y, b)) else {
        return v;
    };
    // Same dtype and same element count: `out[i]` is computed from `in[i]` alone. Equal
    // bytes are not enough: `i4[1]` and `i4[2]` are both one byte, and a broadcast input
    // read at every `i` must not be overwritten.
    let inputs: SmallVec<[usize; 2]> = node
        .inputs
        .iter()
        .enumerate()
        .take(max_inputs)
        .filter_map(|(i, x)| {
            let x = (*x)?;
            let xt = graph.tensors().get(x)?;
            (xt.dtype == yt.dtype && elements(graph, x, b)? == yn).then_some(i)
        })
        .collect();
    if !inputs.is_empty() {
        v[0] = MemorySemantics::InPlace { inputs };
    }
    v
}

/// Concrete dims of tensor `t` under `b`.
fn dims(graph: &Graph, t: TensorId, b: &Bindings) -> Option<Vec<u64>> {
    graph
        .tensors()
        .get(t)?
        .shape
        .iter()
        .map(|d| d.eval(b).ok())
        .collect()
}

/// The chunk lengths along the axis that a Split's own parameters give, when they can be
/// known: the `split` attribute (opset < 13) or constant input 1, else equal chunks of
/// `ceil(dim / n)` for `n` outputs (or the `num_outputs` attribute), the last one smaller.
/// `None` when a parameter is a runtime value or an axis is out of range.
pub(crate) fn split_lengths(graph: &Graph, node: &Node, in_dims: &[u64]) -> Option<Vec<u64>> {
    let axis = crate::axis_index(
        node.attr("axis").and_then(Attr::as_int).unwrap_or(0),
        in_dims.len(),
    )?;
    let d = in_dims[axis];
    match int_list(graph, node, "split", 1)? {
        Some(list) => list.iter().map(|&v| u64::try_from(v).ok()).collect(),
        None => {
            // `num_outputs` (opset 18) must be the node's output count; a value that is not
            // (negative, or 2^62) gives no lengths rather than a list that large.
            let outputs = node.outputs.len() as u64;
            let n = match node.attr("num_outputs") {
                Some(a) => u64::try_from(a.as_int()?).ok()?,
                None => outputs,
            };
            if n == 0 || n != outputs {
                return None;
            }
            let chunk = d.div_ceil(n);
            Some(
                (0..n)
                    .map(|i| d.saturating_sub(i.saturating_mul(chunk)).min(chunk))
                    .collect(),
            )
        }
    }
}

fn split(graph: &Graph, node: &Node, b: &Bindings) -> Option<Vec<MemorySemantics>> {
    let x = input(node, 0)?;
    let xt = graph.tensors().get(x)?;
    let in_dims = dims(graph, x, b)?;
    let axis = crate::axis_index(
        node.attr("axis").and_then(Attr::as_int).unwrap_or(0),
        in_dims.len(),
    )?;
    if in_dims[..axis].iter().any(|&d| d != 1) {
        return None;
    }
    // The op's own chunk lengths, not the declared outputs: a file whose outputs contradict
    // its `split` gets no views (validation reports it).
    let lengths = split_lengths(graph, node, &in_dims)?;
    if lengths.len() != node.outputs.len() {
        return None;
    }
    let inner: u64 = in_dims[axis + 1..]
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    let bits = u64::from(xt.dtype.bits()?);
    let mut start: u64 = 0;
    let mut out = Vec::with_capacity(node.outputs.len());
    for (&y, &len) in node.outputs.iter().zip(&lengths) {
        let y_dims = dims(graph, y, b)?;
        // Each chunk must match the input outside the split axis, and have the op's length.
        if y_dims.len() != in_dims.len()
            || y_dims
                .iter()
                .zip(&in_dims)
                .enumerate()
                .any(|(i, (a, b))| if i == axis { *a != len } else { a != b })
            || graph.tensors().get(y)?.dtype != xt.dtype
        {
            return None;
        }
        // A view starts on a byte boundary (an `i4` chunk at an odd element does not) and
        // ends on one or at the input's end, so it shares no byte with its neighbour.
        let bit_offset = start.checked_mul(inner)?.checked_mul(bits)?;
        let end = start.checked_add(len)?;
        let bit_end = end.checked_mul(inner)?.checked_mul(bits)?;
        if bit_offset % 8 != 0 || (bit_end % 8 != 0 && end != in_dims[axis]) {
            return None;
        }
        out.push(MemorySemantics::View {
            input: 0,
            offset: bit_offset / 8,
        });
        start = end;
    }
    (start <= in_dims[axis]).then_some(out)
}

/// The values of a constant int input or an int-list attribute.
fn int_list(graph: &Graph, node: &Node, attr: &str, input_pos: usize) -> Option<Option<Vec<i64>>> {
    if let Some(a) = node.attr(attr) {
        return Some(Some(a.as_ints()?.to_vec()));
    }
    match input(node, input_pos) {
        Some(t) => Some(Some(graph.tensors().get(t)?.int_value.clone()?)),
        None => Some(None),
    }
}

fn slice(graph: &Graph, node: &Node, b: &Bindings) -> Option<Vec<MemorySemantics>> {
    let x = input(node, 0)?;
    let y = *node.outputs.first()?;
    let xt = graph.tensors().get(x)?;
    if xt.dtype != graph.tensors().get(y)?.dtype {
        return None;
    }
    let in_dims = dims(graph, x, b)?;
    let rank = in_dims.len();
    let starts = int_list(graph, node, "starts", 1)??;
    let ends = int_list(graph, node, "ends", 2)??;
    let axes =
        int_list(graph, node, "axes", 3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = int_list(graph, node, "steps", 4)?.unwrap_or_else(|| vec![1; starts.len()]);
    if starts.len() != ends.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return None;
    }
    // Per axis: (start, len) of the slice, clamped as ONNX does. An axis named twice is
    // invalid ONNX: no view.
    let mut ranges: Vec<(u64, u64)> = in_dims.iter().map(|&d| (0, d)).collect();
    let mut seen = vec![false; rank];
    for i in 0..starts.len() {
        if steps[i] != 1 {
            return None;
        }
        let a = crate::axis_index(axes[i], rank)?;
        if std::mem::replace(&mut seen[a], true) {
            return None;
        }
        let d = i64::try_from(in_dims[a]).ok()?;
        let clamp = |v: i64| {
            if v < 0 {
                (v.saturating_add(d)).max(0)
            } else {
                v.min(d)
            }
        };
        let (s, e) = (clamp(starts[i]), clamp(ends[i]));
        ranges[a] = (s as u64, e.saturating_sub(s).max(0) as u64);
    }
    let y_dims = dims(graph, y, b)?;
    if y_dims != ranges.iter().map(|r| r.1).collect::<Vec<_>>() {
        return None;
    }
    // Contiguous: the last partial axis j; every axis after j is whole, every axis before
    // it has length 1.
    let j = (0..rank)
        .rev()
        .find(|&i| ranges[i] != (0, in_dims[i]))
        .unwrap_or(0);
    if ranges[..j].iter().any(|r| r.1 != 1) {
        return None;
    }
    let mut stride: u64 = 1;
    let mut elem_offset: u64 = 0;
    for i in (0..rank).rev() {
        if i <= j {
            elem_offset = elem_offset.checked_add(ranges[i].0.checked_mul(stride)?)?;
        }
        stride = stride.checked_mul(in_dims[i])?;
    }
    let bits = u64::from(xt.dtype.bits()?);
    let bit_offset = elem_offset.checked_mul(bits)?;
    let elem_end =
        elem_offset.checked_add(y_dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?)?;
    let bit_end = elem_end.checked_mul(bits)?;
    let whole_end = elem_end == stride;
    // Starts on a byte boundary, and ends on one or at the input's end.
    (bit_offset % 8 == 0 && (bit_end % 8 == 0 || whole_end))
        .then(|| view_of_first(node, bit_offset / 8))
}
