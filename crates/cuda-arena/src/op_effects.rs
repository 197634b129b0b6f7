//! What ONNX ops do to memory, stated for the pattern check from the ONNX operator
//! definitions, independently of `memplan_ir::OpTable` and of the planner.
//!
//! Two questions, answered only where the definition makes the answer certain:
//! - [`view_selection`]: is output `j` exactly a contiguous byte range of one input, and
//!   where? Reshape, Flatten, Squeeze, Unsqueeze and Identity select the whole input, as does
//!   a Cast to the same dtype; a Slice with step 1 and known starts/ends/axes (attributes, or
//!   constant int inputs with known values) selects its range after ONNX's clamping when that
//!   range is contiguous and starts on a byte; a Split along an axis whose outer dims are all
//!   1 selects consecutive chunks (sizes from `split`, else `num_outputs`/output count equal
//!   parts, the last one smaller).
//! - [`in_place_allowed`]: may output 0 overwrite input `i` while the op runs? Only when the
//!   op computes `out[k]` from `in[k]` alone (unary and n-ary elementwise ops, and Clip,
//!   Dropout, BatchNormalization in inference mode over their first input) and the input has
//!   the output's dtype and element count (no broadcasting of that input); or when the op
//!   normalises independent rows of input 0 (Softmax, LogSoftmax, the layer, RMS, instance
//!   and group normalisations), whose kernels read each row fully before writing it.
//!
//! memplan's fused kernels answer from their own statement, [`crate::fused_effects`].
//!
//! Anything else (an unknown op, an unknown bound, a shape that disagrees with the
//! definition) answers "no": the check then refuses the alias.
//!
//! Two more facts the check needs, stated here from the ops' definitions:
//! - [`updates`]: which inputs the op overwrites with new values while they stay live
//!   (ONNX Runtime's gradient accumulator and optimizers, memplan's optimizer steps), and
//!   [`updated_values`]: the same with what a control-flow node's bodies overwrite of the
//!   values they capture or are handed, at any depth;
//! - [`reads_bytes`]: `Shape` and `Size` look only at their input's shape, not its bytes.

use memplan_ir::{Bindings, DType, Graph, Node, TensorId, TensorKind};

/// Ops whose output 0 is input 0's bytes, reinterpreted.
const WHOLE_INPUT_VIEWS: &[&str] = &["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"];

/// Ops computing `out[k]` from `in_0[k], in_1[k], ...` (after broadcasting the others).
const ELEMENTWISE: &[&str] = &[
    "Abs",
    "BitwiseNot",
    "Swish",
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Ceil",
    "Celu",
    "Cos",
    "Cosh",
    "Elu",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "memplan.Pointwise",
    "HardSigmoid",
    "HardSwish",
    "IsInf",
    "IsNaN",
    "LeakyRelu",
    "Log",
    "Mish",
    "Neg",
    "Not",
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
    "Tan",
    "Tanh",
    "ThresholdedRelu", // unary
    "Add",
    "And",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "BitShift",
    "Div",
    "Equal",
    "Greater",
    "GreaterOrEqual",
    "Less",
    "LessOrEqual",
    "Max",
    "Mean",
    "Min",
    "Mod",
    "Mul",
    "Or",
    "Pow",
    "PRelu",
    "Sub",
    "Sum",
    "Where",
    "Xor", // n-ary
];

/// ONNX Runtime's activation gradients: `dX[k]` from `dY[k]` and the saved `X[k]` (or
/// `Y[k]`) alone, and a bias broadcast over the last axis for the fused-bias GELUs.
const ELEMENTWISE_GRAD: &[&str] = &[
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
    "memplan.PointwiseGrad",
];

/// Ops elementwise over input 0, their other inputs being parameters. QuickGelu, ONNX
/// Runtime's `com.microsoft.QuickGelu`, is `x * sigmoid(alpha * x)` over its one input.
const ELEMENTWISE_FIRST: &[&str] = &[
    "Clip",
    "Dropout",
    "BatchNormalization",
    "QuickGelu",
    "com.microsoft.QuickGelu",
];

/// Ops whose output 0 is input 0 normalised row by row: each output row depends on its own
/// input row only, and the kernel reads a row fully before writing it.
const ROWS_OF_FIRST: &[&str] = &[
    "Softmax",
    "LogSoftmax",
    "LayerNormalization",
    "RMSNormalization",
    "SimplifiedLayerNormalization",
    "InstanceNormalization",
    "GroupNormalization",
];

/// The bytes of input `input` that an output is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Selection {
    /// Position of the source in the node's inputs.
    pub input: usize,
    /// First selected byte, relative to the source's first byte.
    pub offset: u64,
    /// Bytes selected.
    pub bytes: u64,
}

fn input(node: &Node, i: usize) -> Option<TensorId> {
    node.inputs.get(i).copied().flatten()
}

fn dims(graph: &Graph, t: TensorId, b: &Bindings) -> Option<Vec<u64>> {
    let tensor = graph.tensors().get(t)?;
    tensor.shape.iter().map(|d| d.eval(b).ok()).collect()
}

/// The element count under `b` (a tensor whose dims depend on data may state it directly).
fn elements(graph: &Graph, t: TensorId, b: &Bindings) -> Option<u64> {
    graph.tensors().get(t)?.elements(b).ok()
}

fn dtype(graph: &Graph, t: TensorId) -> Option<DType> {
    graph.tensors().get(t).map(|x| x.dtype)
}

/// `elems` elements of `dt` as bytes, when they fill whole bytes.
/// The byte offset and byte length of the run of `count` elements from element `start` of a
/// tensor of `total` elements: it must start on a byte boundary and end on one or at the
/// tensor's end (a sub-byte run ending inside a byte would share it with its neighbour).
fn run_bytes(dt: DType, start: u64, count: u64, total: u64) -> Option<(u64, u64)> {
    let bits = u64::from(dt.bits()?);
    let (from, to) = (
        start.checked_mul(bits)?,
        start.checked_add(count)?.checked_mul(bits)?,
    );
    let ends_input = start + count == total;
    (from.is_multiple_of(8) && (to.is_multiple_of(8) || ends_input))
        .then(|| (from / 8, (to - from).div_ceil(8)))
}

/// Ints of attribute `attr`, else of the constant input at `pos`; `Some(None)` when neither
/// is given, `None` when the input is there but its values are unknown.
fn ints(graph: &Graph, node: &Node, attr: &str, pos: usize) -> Option<Option<Vec<i64>>> {
    if let Some(a) = node.attr(attr) {
        return a.as_ints().map(|v| Some(v.to_vec()));
    }
    match input(node, pos) {
        None => Some(None),
        Some(t) => graph.tensors().get(t)?.int_value.clone().map(Some),
    }
}

fn axis_index(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis.checked_add(r)? } else { axis };
    usize::try_from(a).ok().filter(|&a| a < rank)
}

/// The byte range output `j` of `node` is inside one of its inputs, if the op's definition
/// makes it one (see the module docs).
pub fn view_selection(graph: &Graph, node: &Node, j: usize, b: &Bindings) -> Option<Selection> {
    let out = *node.outputs.get(j)?;
    let x = input(node, 0)?;
    let (dx, dy) = (dtype(graph, x)?, dtype(graph, out)?);
    if dx != dy {
        return None;
    }
    let op = node.op.as_str();
    let whole = || {
        let n = elements(graph, x, b)?;
        if j != 0 || n != elements(graph, out, b)? {
            return None;
        }
        let (offset, bytes) = run_bytes(dx, 0, n, n)?;
        Some(Selection {
            input: 0,
            offset,
            bytes,
        })
    };
    if WHOLE_INPUT_VIEWS.contains(&op) || op == "Cast" {
        return whole();
    }
    match op {
        "Slice" if j == 0 => slice(graph, node, x, out, b),
        "Split" => split(graph, node, x, j, b),
        _ => None,
    }
}

/// Where input `i` of a Concat lands in its output: in each of `rows` rows of the output
/// (the output's elements before the axis index them), one run of `bytes` whole bytes, the
/// first `offset` bytes into the output, each next one `stride` bytes on. One row (every dim
/// before the axis 1) is one contiguous range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConcatSlot {
    /// First byte of the first run, relative to the output's first byte.
    pub offset: u64,
    /// Bytes per run.
    pub bytes: u64,
    /// Runs (the output's rows).
    pub rows: u64,
    /// Bytes from one run's start to the next (the output's row).
    pub stride: u64,
}

/// Where input `i` of a Concat lands in its output (see [`ConcatSlot`]), when every run is
/// of whole bytes. The inputs must have the output's dtype and rank, agree with it off the
/// axis, and fill the axis exactly.
pub fn concat_slot(graph: &Graph, node: &Node, i: usize, b: &Bindings) -> Option<ConcatSlot> {
    if node.op != "Concat" {
        return None;
    }
    let out = *node.outputs.first()?;
    let shape = dims(graph, out, b)?;
    let dt = dtype(graph, out)?;
    let axis = axis_index(node.attr("axis")?.as_int()?, shape.len())?;
    let mut run: Option<(u64, u64)> = None;
    let mut along = 0u64;
    for (k, t) in node.inputs.iter().enumerate() {
        let t = (*t)?;
        let d = dims(graph, t, b)?;
        if dtype(graph, t)? != dt || d.len() != shape.len() {
            return None;
        }
        if d.iter()
            .zip(&shape)
            .enumerate()
            .any(|(a, (x, y))| a != axis && x != y)
        {
            return None;
        }
        if k == i {
            run = Some((along, d[axis]));
        }
        along = along.checked_add(d[axis])?;
    }
    if along != shape[axis] {
        return None;
    }
    // One row of the output: the axis and the dims after it; the dims before count rows.
    let rows = shape[..axis]
        .iter()
        .try_fold(1u64, |acc, &n| acc.checked_mul(n))?;
    let inner = shape[axis + 1..]
        .iter()
        .try_fold(1u64, |acc, &n| acc.checked_mul(n))?;
    let bits = u64::from(dt.bits()?);
    let (start, len) = run?;
    let row_bits = along.checked_mul(inner)?.checked_mul(bits)?;
    let from = start.checked_mul(inner)?.checked_mul(bits)?;
    let to = start
        .checked_add(len)?
        .checked_mul(inner)?
        .checked_mul(bits)?;
    // Whole bytes at both ends of every run: the Concat writes the other inputs' runs beside.
    let whole = |v: u64| v.is_multiple_of(8);
    if len == 0 || !whole(from) || !whole(to) || (rows > 1 && !whole(row_bits)) {
        return None;
    }
    Some(ConcatSlot {
        offset: from / 8,
        bytes: (to - from) / 8,
        rows,
        stride: row_bits / 8,
    })
}

/// Row-major element offset and count of the box `ranges` (start, len per axis) inside
/// `shape`, when the box is one contiguous run.
fn contiguous_run(shape: &[u64], ranges: &[(u64, u64)]) -> Option<(u64, u64)> {
    // Innermost axis not taken whole: the axes inside it are whole, those outside it have
    // length 1, so the box is one run.
    let partial = ranges
        .iter()
        .zip(shape)
        .rposition(|(&(s, n), &d)| (s, n) != (0, d));
    let count = ranges
        .iter()
        .try_fold(1u64, |acc, r| acc.checked_mul(r.1))?;
    let Some(p) = partial else {
        return Some((0, count));
    };
    if ranges[..p].iter().any(|r| r.1 != 1) {
        return None;
    }
    let mut offset = 0u64;
    let mut stride = 1u64;
    for (axis, &d) in shape.iter().enumerate().rev() {
        offset = offset.checked_add(ranges.get(axis)?.0.checked_mul(stride)?)?;
        stride = stride.checked_mul(d)?;
    }
    Some((offset, count))
}

fn slice(graph: &Graph, node: &Node, x: TensorId, y: TensorId, b: &Bindings) -> Option<Selection> {
    let shape = dims(graph, x, b)?;
    let starts = ints(graph, node, "starts", 1)??;
    let ends = ints(graph, node, "ends", 2)??;
    let axes = ints(graph, node, "axes", 3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    if let Some(steps) = ints(graph, node, "steps", 4)?
        && (steps.len() != starts.len() || steps.iter().any(|&s| s != 1))
    {
        return None;
    }
    if ends.len() != starts.len() || axes.len() != starts.len() {
        return None;
    }
    let mut ranges: Vec<(u64, u64)> = shape.iter().map(|&d| (0, d)).collect();
    let mut seen = vec![false; shape.len()];
    for ((&s, &e), &a) in starts.iter().zip(&ends).zip(&axes) {
        let a = axis_index(a, shape.len())?;
        if std::mem::replace(seen.get_mut(a)?, true) {
            return None; // ONNX forbids repeated axes.
        }
        let d = i64::try_from(*shape.get(a)?).ok()?;
        // ONNX, step 1: a negative bound counts from the end; then clamp to [0, d].
        let clamp = |v: i64| if v < 0 { v.saturating_add(d) } else { v }.clamp(0, d);
        let (s, e) = (clamp(s), clamp(e));
        let len = e.saturating_sub(s).max(0);
        *ranges.get_mut(a)? = (u64::try_from(s).ok()?, u64::try_from(len).ok()?);
    }
    if dims(graph, y, b)? != ranges.iter().map(|r| r.1).collect::<Vec<_>>() {
        return None;
    }
    let (start, count) = contiguous_run(&shape, &ranges)?;
    let total = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    let (offset, bytes) = run_bytes(dtype(graph, x)?, start, count, total)?;
    Some(Selection {
        input: 0,
        offset,
        bytes,
    })
}

fn split(graph: &Graph, node: &Node, x: TensorId, j: usize, b: &Bindings) -> Option<Selection> {
    let shape = dims(graph, x, b)?;
    let axis = axis_index(
        node.attr("axis").and_then(|a| a.as_int()).unwrap_or(0),
        shape.len(),
    )?;
    if shape[..axis].iter().any(|&d| d != 1) {
        return None;
    }
    let n = u64::try_from(node.outputs.len()).ok()?;
    let d = shape[axis];
    let sizes: Vec<u64> = match ints(graph, node, "split", 1)? {
        Some(v) => v
            .iter()
            .map(|&s| u64::try_from(s).ok())
            .collect::<Option<_>>()?,
        None => {
            // Equal parts; since opset 18 the last may be smaller.
            let chunk = d.div_ceil(n.max(1));
            (0..n)
                .map(|i| chunk.min(d.saturating_sub(i.saturating_mul(chunk))))
                .collect()
        }
    };
    let sum = |s: &[u64]| s.iter().try_fold(0u64, |acc, &x| acc.checked_add(x));
    if sizes.len() != node.outputs.len() || sum(&sizes)? != d {
        return None;
    }
    let inner = shape[axis + 1..]
        .iter()
        .try_fold(1u64, |acc, &x| acc.checked_mul(x))?;
    let before: u64 = sum(sizes.get(..j)?)?;
    let size = *sizes.get(j)?;
    let out = *node.outputs.get(j)?;
    let mut want = shape.clone();
    want[axis] = size;
    if dims(graph, out, b)? != want {
        return None;
    }
    let total = d.checked_mul(inner)?;
    let (offset, bytes) = run_bytes(
        dtype(graph, x)?,
        before.checked_mul(inner)?,
        size.checked_mul(inner)?,
        total,
    )?;
    Some(Selection {
        input: 0,
        offset,
        bytes,
    })
}

/// Whether a BatchNormalization normalises with its batch's own statistics (training mode):
/// `training_mode` set (opset 14 on), or any output besides `Y` (the running or saved
/// statistics, which every opset makes only in training mode).
fn batch_norm_trains(node: &Node) -> bool {
    node.attr("training_mode")
        .and_then(|a| a.as_int())
        .is_some_and(|m| m != 0)
        || node.outputs.len() > 1
}

/// The input positions `node` overwrites in place with new values while they stay live:
/// the accumulation buffer of `com.microsoft.InPlaceAccumulatorV2` (its first input), the
/// weight and moment sequences of `com.microsoft.AdamWOptimizer` (inputs 2, 4 and 5), the
/// weights of `com.microsoft.SGDOptimizerV2` (input 1), and for memplan's own optimizer
/// steps (`memplan.SGD`, `memplan.Momentum`, `memplan.Adam`: weight, gradient, then state)
/// everything but the gradient, and for `memplan.AdamUpdate` (weight, gradient, the
/// denominator its kernel made, then state) everything but the gradient and the denominator. Only inputs the node has.
pub fn updates(node: &Node) -> Vec<usize> {
    let n = node.inputs.len();
    let positions: Vec<usize> = match node.op.as_str() {
        "com.microsoft.InPlaceAccumulatorV2" => vec![0],
        "com.microsoft.AdamWOptimizer" => vec![2, 4, 5],
        "com.microsoft.SGDOptimizerV2" => vec![1],
        "memplan.SGD" | "memplan.Momentum" | "memplan.Adam" => (0..n).filter(|&i| i != 1).collect(),
        "memplan.AdamUpdate" => (0..n).filter(|&i| i != 1 && i != 2).collect(),
        _ => vec![],
    };
    positions
        .into_iter()
        .filter(|&i| input(node, i).is_some())
        .collect()
}

/// The tensors of `graph` that `node` overwrites with new values while they stay live: the
/// inputs at [`updates`], and for a node running bodies (If, Loop, Scan) each value of
/// `graph` a body overwrites at any depth, found as ONNX resolves a body's names: a body
/// input named like a tensor of `graph` is that tensor (the body captures it); the body's
/// other inputs are the values the op hands it from its own last inputs, in order (a Loop's
/// count, condition and carried values, a Scan's states and scanned inputs), which a
/// runtime may hand over without a copy. The node runs its bodies within its step, so the
/// new values are there when its step ends. Sorted, without repeats.
pub fn updated_values(graph: &Graph, node: &Node) -> Vec<TensorId> {
    let mut out: Vec<TensorId> = updates(node)
        .into_iter()
        .filter_map(|i| input(node, i))
        .collect();
    for body in &node.bodies {
        let names = body_inputs_overwritten(&body.graph);
        if names.is_empty() {
            continue;
        }
        let handed = body
            .graph
            .tensors()
            .iter()
            .filter(|t| t.kind == TensorKind::Input && graph.find_tensor(&t.name).is_none())
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>();
        let first = node.inputs.len().checked_sub(handed.len());
        for name in &names {
            match graph.find_tensor(name) {
                Some(t) => out.push(t),
                None => {
                    let k = handed.iter().position(|h| h == name);
                    if let (Some(k), Some(first)) = (k, first)
                        && let Some(t) = input(node, first + k)
                    {
                        out.push(t);
                    }
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The names of `body`'s inputs that its nodes overwrite, at any depth.
fn body_inputs_overwritten(body: &Graph) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for node in body.nodes().iter() {
        for t in updated_values(body, node) {
            let tensor = body.tensor(t);
            if tensor.kind == TensorKind::Input {
                names.push(tensor.name.clone());
            }
        }
    }
    names.sort_unstable();
    names.dedup();
    names
}

/// Whether `node` reads the bytes of its input at position `i` (`Shape` and `Size` read
/// only the shape of their data input).
pub fn reads_bytes(node: &Node, i: usize) -> bool {
    let metadata = matches!(node.op.as_str(), "Shape" | "Size") && i == 0;
    !metadata
}

/// Whether output 0 of `node` may be written over input `i` (a position in `node.inputs`)
/// while the op runs: the op computes `out[k]` from `in_i[k]` alone, and input `i` has the
/// output's dtype and element count.
pub fn in_place_allowed(graph: &Graph, node: &Node, i: usize, b: &Bindings) -> bool {
    let op = node.op.as_str();
    let elementwise = ELEMENTWISE.contains(&op)
        || ELEMENTWISE_GRAD.contains(&op)
        || crate::fused_effects::writes_over_input(op, i)
        || (ROWS_OF_FIRST.contains(&op) && i == 0)
        || (ELEMENTWISE_FIRST.contains(&op)
            && i == 0
            && (op != "BatchNormalization" || !batch_norm_trains(node)));
    let same = || -> Option<bool> {
        let (x, y) = (input(node, i)?, *node.outputs.first()?);
        Some(
            dtype(graph, x)? == dtype(graph, y)?
                && elements(graph, x, b)? == elements(graph, y, b)?,
        )
    };
    elementwise && same().unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::{Attr, GraphBuilder, TensorKind};

    #[test]
    fn contiguous_runs() {
        let shape = [2, 3, 4];
        assert_eq!(
            contiguous_run(&shape, &[(0, 2), (0, 3), (0, 4)]),
            Some((0, 24))
        );
        assert_eq!(
            contiguous_run(&shape, &[(1, 1), (1, 2), (0, 4)]),
            Some((16, 8))
        );
        assert_eq!(
            contiguous_run(&shape, &[(1, 1), (2, 1), (1, 2)]),
            Some((21, 2))
        );
        assert_eq!(contiguous_run(&shape, &[(0, 2), (1, 2), (0, 4)]), None);
        assert_eq!(contiguous_run(&shape, &[(0, 1), (0, 3), (0, 2)]), None);
    }

    #[test]
    fn slices_split_and_reshapes() {
        let mut g = GraphBuilder::new("views");
        let x = g.input("x", DType::F32, [1, 6, 4]);
        let starts = g.int_constant("starts", &[-4]);
        let ends = g.int_constant("ends", &[100]);
        let axes = g.int_constant("axes", &[1]);
        let s = g.op("Slice", &[x, starts, ends, axes], DType::F32, [1, 4, 4]);
        let r = g.op("Reshape", &[s, axes], DType::F32, [16]);
        let t = g.op("Transpose", &[x], DType::F32, [4, 6, 1]);
        g.mark_output(r);
        g.mark_output(t);
        let graph = g.build().unwrap();
        let b = Bindings::new();
        let node = |n: usize| &graph.nodes()[memplan_ir::NodeId(n as u32)];
        assert_eq!(
            view_selection(&graph, node(0), 0, &b),
            Some(Selection {
                input: 0,
                offset: 32,
                bytes: 64
            })
        );
        assert_eq!(
            view_selection(&graph, node(1), 0, &b).map(|s| s.bytes),
            Some(64)
        );
        assert_eq!(
            view_selection(&graph, node(2), 0, &b),
            None,
            "a transpose is no view"
        );
        assert!(!in_place_allowed(&graph, node(2), 0, &b));

        let mut g = GraphBuilder::new("split");
        let x = g.input("x", DType::F16, [1, 5, 2]);
        let y0 = g.tensor("y0", DType::F16, [1, 3, 2], TensorKind::Output);
        let y1 = g.tensor("y1", DType::F16, [1, 2, 2], TensorKind::Output);
        g.node("split", "Split", &[Some(x)], &[y0, y1]);
        g.attr("axis", Attr::Int(1))
            .attr("num_outputs", Attr::Int(2));
        let graph = g.build().unwrap();
        let node = &graph.nodes()[memplan_ir::NodeId(0)];
        assert_eq!(
            view_selection(&graph, node, 1, &b),
            Some(Selection {
                input: 0,
                offset: 12,
                bytes: 8
            })
        );
    }

    #[test]
    fn in_place_needs_an_elementwise_op_and_equal_operands() {
        let mut g = GraphBuilder::new("ew");
        let x = g.input("x", DType::F32, [8]);
        let bias = g.input("bias", DType::F32, [1]);
        let a = g.op("Add", &[x, bias], DType::F32, [8]);
        let m = g.op("MatMul", &[a, a], DType::F32, [8]);
        g.op(
            "BatchNormalization",
            &[m, bias, bias, bias, bias],
            DType::F32,
            [8],
        );
        g.attr("training_mode", Attr::Int(1));
        let graph = g.build_unchecked();
        let b = Bindings::new();
        let node = |n: usize| &graph.nodes()[memplan_ir::NodeId(n as u32)];
        assert!(in_place_allowed(&graph, node(0), 0, &b));
        assert!(
            !in_place_allowed(&graph, node(0), 1, &b),
            "bias is broadcast"
        );
        assert!(
            !in_place_allowed(&graph, node(1), 0, &b),
            "MatMul is not elementwise"
        );
        assert!(
            !in_place_allowed(&graph, node(2), 0, &b),
            "training BatchNormalization"
        );
    }
}
