//! The verifier's own statement of which aliases an op makes legal, written from the ONNX
//! operator definitions and sharing no code or table with the planner's
//! [`memplan_ir::OpTable`].
//!
//! Three questions, each answered from the graph alone:
//!
//! - [`view_range`]: is output `j` of a node *exactly* a contiguous range of one input's
//!   elements, and where does it start? Reshape, Flatten, Squeeze, Unsqueeze, Identity and a
//!   Cast to the input's own dtype keep every element in place; a Slice with unit steps and a
//!   Split select a box of the input, which is a range when the first and last selected
//!   elements are exactly as far apart as the box is large. A range must start and end on a
//!   byte boundary (or end at the input's end), so a sub-byte view never shares a byte with
//!   its neighbour.
//! - [`concat_slot`]: where does input `pos` of a Concat lie in the output (one run of whole
//!   bytes in each row of the output: the dims before the axis index the rows), so that its
//!   producer may write it there (Concat elision)?
//! - [`may_write_over`]: does the op compute `out[i]` from `in[i]` (and from operands
//!   read the same way) alone, so that it may write its output over that input? True for
//!   the elementwise ops of the ONNX spec, for the operand positions that are elementwise,
//!   when dtype and element count match (a broadcast operand is read at many `i`). Row
//!   normalisations (Softmax, LogSoftmax, layer, RMS, instance and group normalisation)
//!   qualify over their data operand too: each output row depends on its own input row
//!   only, and their kernels read a row fully before writing it. So do memplan's fused
//!   kernels that add into their first operand (`conv-add`) or apply a bias and an
//!   activation to it (`bias-act`).

use std::collections::BTreeSet;

use memplan_ir::{Attr, Bindings, DType, Graph, Node, TensorId, TensorKind};

/// Element-wise ops (every present operand is read at the output's index, after
/// broadcasting). From the ONNX operator list: math, logical, comparison and activation ops.
const ELEMENTWISE: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "BitShift",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "Ceil",
    "Celu",
    "Cos",
    "Cosh",
    "Div",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    // memplan's fused element-wise region: Y[i] from X[i].
    "memplan.Pointwise",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "IsInf",
    "IsNaN",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "Max",
    "Mean",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pow",
    "PRelu",
    "Reciprocal",
    "Relu",
    "Round",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Sum",
    "Swish",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Where",
    "Xor",
];

/// ONNX Runtime's gradients of element-wise activations: `dX[i] = dY[i] * f'(X[i] or
/// Y[i])`, every operand read at the output's index (`training_op_defs.cc`); the fused-bias
/// GELU gradients `dX[i] = dY[i] * gelu'(X[i] + bias[i mod C])` read the bias broadcast.
const ELEMENTWISE_GRADIENTS: &[&str] = &[
    "com.microsoft.BiasFastGeluGrad_dX",
    "com.microsoft.BiasGeluGrad_dX",
    "com.microsoft.ReluGrad",
    "com.microsoft.GeluGrad",
    "com.microsoft.FastGeluGrad",
    "com.microsoft.QuickGeluGrad",
    "com.microsoft.TanhGrad",
    "com.microsoft.SigmoidGrad",
    "com.microsoft.SoftplusGrad",
    "com.microsoft.LeakyReluGrad",
    "memplan.PointwiseGrad",
];

/// Ops element-wise in their first operand only; the other inputs are parameters (bounds,
/// a ratio, per-channel statistics) read at other indices. QuickGelu is ONNX Runtime's
/// `com.microsoft.QuickGelu` (`x * sigmoid(alpha * x)`), also written without its domain.
const ELEMENTWISE_IN_DATA: &[&str] = &[
    "Clip",
    "Dropout",
    "QuickGelu",
    "com.microsoft.QuickGelu",
    "BatchNormalization",
];

/// memplan's fused kernels (the `conv-add` and `bias-act` fusions) whose output is their
/// first operand plus what the rest computes, index by index: `y[i] = r[i] + conv(x)[i]` (a
/// product accumulated into the residual `r`), `y[i] = act(x[i] + b[i mod c])` (a bias, then
/// an activation). The other operands are read at many indices.
const INTO_FIRST: &[&str] = &[
    "memplan.ConvAdd",
    "memplan.ConvTransposeAdd",
    "memplan.GemmAdd",
    "memplan.MatMulAdd",
    "memplan.BiasAct",
];

/// Ops normalising their first operand row by row: a softmax vector, a layer-norm row, one
/// instance, one group. Output row `r` depends on input row `r` alone.
const ROW_NORMALIZING: &[&str] = &[
    "GroupNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "LogSoftmax",
    "RMSNormalization",
    "SimplifiedLayerNormalization",
    "Softmax",
];

/// memplan's fused normalisation of a residual sum (`memplan.SkipNorm`, ONNX Runtime's
/// `SkipLayerNormalization` run by the engine): output row `r` is the normalised row `r` of
/// its first operand plus its second (the skip) and a bias; the kernel reads both rows
/// before writing it, the scale and bias at every row.
const ROW_SUM_NORMALIZING: &[&str] = &["memplan.SkipNorm"];

/// Ops whose first output holds every element of their first input, in order.
const SAME_ELEMENTS: &[&str] = &["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"];

/// Static dims of `t` under `b`.
fn shape(graph: &Graph, t: TensorId, b: &Bindings) -> Option<Vec<u64>> {
    let tensor = graph.tensors().get(t)?;
    let mut dims = Vec::with_capacity(tensor.shape.len());
    for d in &tensor.shape {
        dims.push(d.eval(b).ok()?);
    }
    Some(dims)
}

fn count(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d))
}

fn dtype(graph: &Graph, t: TensorId) -> Option<DType> {
    Some(graph.tensors().get(t)?.dtype)
}

/// The integers of attribute `name`, or else of constant input `pos`; `Some(None)` when
/// neither is given, `None` when the input exists but its value is unknown.
fn ints(graph: &Graph, node: &Node, name: &str, pos: usize) -> Option<Option<Vec<i64>>> {
    if let Some(Attr::Ints(v)) = node.attr(name) {
        return Some(Some(v.clone()));
    }
    match node.inputs.get(pos).copied().flatten() {
        None => Some(None),
        Some(t) => graph.tensors().get(t)?.int_value.clone().map(Some),
    }
}

fn axis_index(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { r + axis } else { axis };
    if a < 0 || a >= r {
        None
    } else {
        usize::try_from(a).ok()
    }
}

/// The byte range `[start, end)` of the input that a box selects: `lo[i]..lo[i] + len[i]`
/// along each axis of an input of shape `dims`, if the box is one contiguous, byte-aligned
/// run of elements.
fn box_bytes(dims: &[u64], lo: &[u64], len: &[u64], dt: DType) -> Option<(u64, u64)> {
    let selected = count(len)?;
    if selected == 0 {
        return None;
    }
    // Row-major strides; the first and last selected elements' linear indices.
    let mut stride = 1u64;
    let (mut first, mut last) = (0u64, 0u64);
    for i in (0..dims.len()).rev() {
        if lo[i].checked_add(len[i])? > dims[i] {
            return None;
        }
        first = first.checked_add(lo[i].checked_mul(stride)?)?;
        last = last.checked_add((lo[i] + len[i] - 1).checked_mul(stride)?)?;
        stride = stride.checked_mul(dims[i])?;
    }
    // The box has `selected` elements inside `[first, last]`: all of them iff equal sizes.
    if last - first + 1 != selected {
        return None;
    }
    let bits = u64::from(dt.bits()?);
    let (start_bit, end_bit) = (first.checked_mul(bits)?, (last + 1).checked_mul(bits)?);
    let ends_input = last + 1 == stride;
    if start_bit % 8 != 0 || (end_bit % 8 != 0 && !ends_input) {
        return None;
    }
    Some((start_bit / 8, end_bit.div_ceil(8)))
}

/// Where a Concat input lies in the output: one run of `run` bytes in each of `rows` rows
/// of the output, the first from byte `start`, the next `stride` bytes on. The output's
/// elements before the Concat axis index its rows; with one row (all those dims 1) the
/// input is one contiguous range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ConcatSlot {
    pub start: u64,
    pub run: u64,
    pub rows: u64,
    pub stride: u64,
}

/// If `node` is a Concat and its input at position `pos` fills, in each row of the output,
/// one run of whole bytes (ONNX Concat: the output is the inputs side by side along the
/// axis, in every index of the dims before it): where. The inputs must match the output
/// outside the axis, share its dtype, and fill the axis exactly.
pub(super) fn concat_slot(
    graph: &Graph,
    node: &Node,
    pos: usize,
    b: &Bindings,
) -> Option<ConcatSlot> {
    if node.op != "Concat" {
        return None;
    }
    let y = *node.outputs.first()?;
    let yd = shape(graph, y, b)?;
    let dt = dtype(graph, y)?;
    let axis = match node.attr("axis") {
        Some(Attr::Int(a)) => axis_index(*a, yd.len())?,
        _ => return None,
    };
    let rows = count(&yd[..axis])?;
    let inner = count(&yd[axis + 1..])?;
    let bits = u64::from(dt.bits()?);
    let mut filled = 0u64;
    let mut slot = None;
    for (k, x) in node.inputs.iter().enumerate() {
        let x = (*x)?;
        let xd = shape(graph, x, b)?;
        let matches = xd.len() == yd.len()
            && dtype(graph, x)? == dt
            && (0..yd.len()).all(|i| i == axis || xd[i] == yd[i]);
        if !matches {
            return None;
        }
        if k == pos {
            let start_bit = filled.checked_mul(inner)?.checked_mul(bits)?;
            let end_bit = filled
                .checked_add(xd[axis])?
                .checked_mul(inner)?
                .checked_mul(bits)?;
            if xd[axis] == 0 || start_bit % 8 != 0 || end_bit % 8 != 0 {
                return None;
            }
            slot = Some((start_bit / 8, (end_bit - start_bit) / 8));
        }
        filled = filled.checked_add(xd[axis])?;
    }
    if filled != yd[axis] {
        return None;
    }
    let row_bits = filled.checked_mul(inner)?.checked_mul(bits)?;
    if rows > 1 && row_bits % 8 != 0 {
        return None;
    }
    let (start, run) = slot?;
    Some(ConcatSlot {
        start,
        run,
        rows,
        stride: row_bits / 8,
    })
}

/// If output `j` of `node` is exactly a contiguous range of the elements of input 0 (see
/// the module docs): that input and the byte offset of the range in it.
pub(super) fn view_range(
    graph: &Graph,
    node: &Node,
    j: usize,
    b: &Bindings,
) -> Option<(TensorId, u64)> {
    let x = node.inputs.first().copied().flatten()?;
    let y = *node.outputs.get(j)?;
    let dt = dtype(graph, x)?;
    if dtype(graph, y)? != dt {
        return None;
    }
    let op = node.op.as_str();
    if SAME_ELEMENTS.contains(&op) || op == "Cast" {
        // All of the input from its first byte. Element counts as the tensors state them: a
        // tensor whose dims depend on data may carry its count (a Reshape to a runtime shape).
        let elements = |t: TensorId| graph.tensors().get(t)?.elements(b).ok();
        return (j == 0 && elements(x)? == elements(y)?).then_some((x, 0));
    }
    let (xd, yd) = (shape(graph, x, b)?, shape(graph, y, b)?);
    let (lo, len) = if op == "Slice" {
        slice_box(graph, node, &xd, &yd)?
    } else if op == "Split" {
        split_box(graph, node, j, &xd, &yd)?
    } else {
        return None;
    };
    let (start, _) = box_bytes(&xd, &lo, &len, dt)?;
    Some((x, start))
}

/// The box a unit-step Slice selects, if its parameters are known and the output has its
/// shape.
fn slice_box(graph: &Graph, node: &Node, xd: &[u64], yd: &[u64]) -> Option<(Vec<u64>, Vec<u64>)> {
    let starts = ints(graph, node, "starts", 1)??;
    let ends = ints(graph, node, "ends", 2)??;
    let axes = ints(graph, node, "axes", 3)?;
    let steps = ints(graph, node, "steps", 4)?;
    if starts.len() != ends.len() {
        return None;
    }
    let mut lo = vec![0u64; xd.len()];
    let mut len = xd.to_vec();
    let mut sliced = vec![false; xd.len()];
    for (k, (&s, &e)) in starts.iter().zip(&ends).enumerate() {
        let axis = match &axes {
            Some(a) => axis_index(*a.get(k)?, xd.len())?,
            None => axis_index(i64::try_from(k).ok()?, xd.len())?,
        };
        // ONNX: each axis at most once.
        if std::mem::replace(&mut sliced[axis], true) {
            return None;
        }
        if let Some(st) = &steps
            && *st.get(k)? != 1
        {
            return None;
        }
        // ONNX: negative bounds count from the end; both are clamped to [0, dim].
        let dim = i64::try_from(xd[axis]).ok()?;
        let fix = |v: i64| {
            let v = if v < 0 { v.saturating_add(dim) } else { v };
            v.clamp(0, dim)
        };
        let (s, e) = (fix(s), fix(e));
        lo[axis] = u64::try_from(s).ok()?;
        len[axis] = u64::try_from((e - s).max(0)).ok()?;
    }
    (len == yd).then_some((lo, len))
}

/// The box chunk `j` of a Split is, if its parameters are known and the output has its
/// shape.
fn split_box(
    graph: &Graph,
    node: &Node,
    j: usize,
    xd: &[u64],
    yd: &[u64],
) -> Option<(Vec<u64>, Vec<u64>)> {
    let axis = axis_index(
        match node.attr("axis") {
            Some(Attr::Int(a)) => *a,
            _ => 0,
        },
        xd.len(),
    )?;
    let dim = xd[axis];
    let sizes: Vec<u64> = match ints(graph, node, "split", 1)? {
        Some(v) => v
            .into_iter()
            .map(|s| u64::try_from(s).ok())
            .collect::<Option<_>>()?,
        None => {
            // Equal chunks of ceil(dim / n), the last one smaller (ONNX Split-18).
            let n = match node.attr("num_outputs") {
                Some(Attr::Int(n)) => u64::try_from(*n).ok()?,
                _ => node.outputs.len() as u64,
            };
            // One chunk per output: anything else is no Split of this node.
            if n != node.outputs.len() as u64 {
                return None;
            }
            let chunk = dim.div_ceil(n.max(1));
            let mut v = Vec::new();
            let mut left = dim;
            for _ in 0..n {
                let c = chunk.min(left);
                v.push(c);
                left -= c;
            }
            v
        }
    };
    if sizes.len() != node.outputs.len()
        || sizes.iter().try_fold(0u64, |a, &s| a.checked_add(s))? != dim
    {
        return None;
    }
    let start: u64 = sizes[..j].iter().sum();
    let mut lo = vec![0u64; xd.len()];
    let mut len = xd.to_vec();
    lo[axis] = start;
    len[axis] = *sizes.get(j)?;
    (len == yd).then_some((lo, len))
}

/// Whether `node` computes its output `j` element by element (or row by row) from its input
/// at position `pos`, so that it may write that output over the input (see the module docs).
pub(super) fn may_write_over(
    graph: &Graph,
    node: &Node,
    j: usize,
    pos: usize,
    b: &Bindings,
) -> bool {
    let op = node.op.as_str();
    let operand_ok = if ELEMENTWISE.contains(&op) || ELEMENTWISE_GRADIENTS.contains(&op) {
        true
    } else if ROW_NORMALIZING.contains(&op)
        || ROW_SUM_NORMALIZING.contains(&op)
        || INTO_FIRST.contains(&op)
    {
        pos == 0
    } else if ELEMENTWISE_IN_DATA.contains(&op) {
        // Training-mode BatchNormalization normalises with statistics over all of X. It is
        // training mode with `training_mode` set (opset 14 on) or with the statistics among
        // its outputs (every opset makes those only when training; opsets 9 to 13 have no
        // attribute).
        let training = matches!(node.attr("training_mode"), Some(Attr::Int(v)) if *v != 0)
            || node.outputs.len() > 1;
        pos == 0 && !(op == "BatchNormalization" && training)
    } else {
        false
    };
    if !operand_ok || j != 0 {
        return false;
    }
    let (Some(x), Some(&y)) = (node.inputs.get(pos).copied().flatten(), node.outputs.get(j)) else {
        return false;
    };
    let same = || -> Option<bool> {
        Some(
            dtype(graph, x)? == dtype(graph, y)?
                && graph.tensors().get(x)?.elements(b).ok()?
                    == graph.tensors().get(y)?.elements(b).ok()?,
        )
    };
    same().unwrap_or(false)
}

/// The positions of the inputs `node` updates in place while they stay live, from the ops'
/// own definitions: ONNX Runtime's `InPlaceAccumulatorV2` adds its value into its buffer
/// (input 0); its `AdamWOptimizer` updates the weights (input 2) and both moments (inputs 4
/// and 5), its `SGDOptimizerV2` the weights (input 1); memplan's optimizer steps
/// (`memplan.SGD`, `memplan.Momentum`, `memplan.Adam`) the weight (input 0) and every input
/// after the gradient (input 1): velocity, moments, the f32 master weight; `memplan.AdamUpdate`
/// the weight and every input after the gradient and the denominator (inputs 1 and 2).
/// Absent inputs are left out.
pub(super) fn written_in_place(node: &Node) -> Vec<usize> {
    let candidates: Vec<usize> = match node.op.as_str() {
        "com.microsoft.InPlaceAccumulatorV2" => vec![0],
        "com.microsoft.AdamWOptimizer" => vec![2, 4, 5],
        "com.microsoft.SGDOptimizerV2" => vec![1],
        "memplan.SGD" | "memplan.Momentum" | "memplan.Adam" => {
            std::iter::once(0).chain(2..node.inputs.len()).collect()
        }
        // Adam with a denominator made beforehand: weight, gradient, denominator, then the
        // moments and master weight; the gradient and the denominator are only read.
        "memplan.AdamUpdate" => std::iter::once(0).chain(3..node.inputs.len()).collect(),
        _ => Vec::new(),
    };
    candidates
        .into_iter()
        .filter(|&p| matches!(node.inputs.get(p), Some(Some(_))))
        .collect()
}

/// The tensors of `graph` that `node` updates while they stay live, ascending: the inputs
/// at [`written_in_place`], and for an If, Loop or Scan whatever its bodies update at any
/// depth, as ONNX binds a body's names. A body input with the name of a tensor of `graph`
/// is that tensor, captured (a body may not redefine an outer name); the other body inputs
/// are the ones the op hands over, in order, from its last inputs (Loop: count, condition,
/// carried values; Scan: states, scanned inputs), and a runtime may hand over the outer
/// bytes, so the update reaches that input.
pub(super) fn updates(graph: &Graph, node: &Node) -> Vec<TensorId> {
    let mut found: BTreeSet<TensorId> = written_in_place(node)
        .into_iter()
        .filter_map(|p| node.inputs.get(p).copied().flatten())
        .collect();
    for body in &node.bodies {
        let inner = &body.graph;
        let hit: BTreeSet<TensorId> = inner
            .nodes()
            .iter()
            .flat_map(|n| updates(inner, n))
            .collect();
        if hit.is_empty() {
            continue;
        }
        let handed: Vec<TensorId> = inner
            .tensors()
            .iter_enumerated()
            .filter(|(_, t)| t.kind == TensorKind::Input && graph.find_tensor(&t.name).is_none())
            .map(|(id, _)| id)
            .collect();
        let skipped = node.inputs.len().checked_sub(handed.len());
        for &id in &hit {
            let t = inner.tensor(id);
            if t.kind != TensorKind::Input {
                continue;
            }
            if let Some(outer) = graph.find_tensor(&t.name) {
                found.insert(outer);
            } else if let (Some(k), Some(skipped)) = (handed.iter().position(|&h| h == id), skipped)
                && let Some(Some(x)) = node.inputs.get(skipped + k)
            {
                found.insert(*x);
            }
        }
    }
    found.into_iter().collect()
}

/// Whether `node` reads the bytes of its input at `pos`: `Shape` and `Size` read only the
/// shape of their input (ONNX: "Takes a tensor as input and outputs an 1D int64 tensor
/// containing the shape" / "the total number of elements"), so it need not be live then.
pub(super) fn reads_contents(node: &Node, pos: usize) -> bool {
    !(pos == 0 && matches!(node.op.as_str(), "Shape" | "Size"))
}
