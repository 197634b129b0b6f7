//! The backward rule of each forward op: which nodes compute its input gradients and what
//! they read.
//!
//! Written from the ONNX operator definitions and the public gradient definitions (ONNX
//! Runtime's gradient builder, `orttraining/core/graph/gradient_builder.cc`, and PyTorch's
//! `tools/autograd/derivatives.yaml`). What each gradient reads of the forward pass (its
//! saved tensors; weights are persistent anyway):
//!
//! | forward op | reads |
//! |---|---|
//! | Gemm, MatMul, FusedMatMul | the other operand, for each gradient needed |
//! | Conv, ConvTranspose | X and W (one `ConvGrad` node) |
//! | Relu, Tanh, Sigmoid, Exp, Sqrt, Reciprocal, Tan | Y |
//! | LeakyRelu | Y when `alpha >= 0`, else X (a negative slope makes `y > 0` on both sides) |
//! | Gelu, Erf, Log, Sin, Cos, Abs, Softplus, the other activations, a fused element-wise region (`memplan.Pointwise`) | X |
//! | ReduceLogSum | Y (`dX = dY * exp(-Y)`) |
//! | Softmax, LogSoftmax | Y |
//! | LayerNormalization | X, scale, and the mean and inverse std-dev the forward outputs |
//! | GroupNormalization, InstanceNormalization | X, scale, and the mean and inverse std-dev per (sample, group) the forward outputs in training |
//! | BatchNormalization (training) | X, scale, the saved mean and inverse std-dev |
//! | Add, Sub, Neg, Sum, Mean, Cast, views, Transpose, Concat, Split, Slice, Pad, Expand, Tile, reductions but max/min, average pools | nothing |
//! | Mul | the other operand; Div: B, and A for dB; Pow: both |
//! | Max, Min | the input and the output (one input: nothing) |
//! | Gather family, TopK, ScatterND, ScatterElements | the indices; Where: the condition |
//! | Clip | X, and `min` and `max` when they are inputs (opset 11 on) |
//! | MaxPool | its indices; Dropout: its mask |
//! | RotaryEmbedding | the cos and sin caches and the positions |
//! | Attention (opset 23), memplan.Attention | Q, K, V, the masks, Y, and the probabilities (eager) or the per-row log-sum-exp (flash) |
//! | memplan.ConvAdd, ConvTransposeAdd, GemmAdd, MatMulAdd | the product's: the other operand (X and W for a convolution); the residual nothing |
//! | memplan.BiasAct | X and the bias |
//! | SoftmaxCrossEntropyLoss | the log-probabilities and the labels |
//!
//! A gradient the output's shape broadcast from a smaller input is summed down to the
//! input's shape. Zero-gradient ops (Floor, Ceil, Round, Sign) give no gradient.
//!
//! A "reads Y" rule holds only where the output tells the backward what it needs of the
//! input for every attribute value and dtype: each such shortcut is stated with its
//! condition (LeakyRelu's slope), and `crates/planner/tests/backward_rules.rs` checks the
//! table against PyTorch's gradient formulas (a vendored excerpt of `derivatives.yaml`),
//! attribute case by attribute case.

use memplan_ir::{Attr, Attrs, DType, Expr, TensorId};

use super::derive::Emitter;
use crate::error::PlanError;

/// Unary ops whose gradient is one node `(grad op, reads the output (true) or the input)`.
const UNARY: &[(&str, &str, bool)] = &[
    ("Relu", "com.microsoft.ReluGrad", true),
    ("Tanh", "com.microsoft.TanhGrad", true),
    ("Sigmoid", "com.microsoft.SigmoidGrad", true),
    ("LeakyRelu", "com.microsoft.LeakyReluGrad", true),
    ("Gelu", "com.microsoft.GeluGrad", false),
    ("com.microsoft.Gelu", "com.microsoft.GeluGrad", false),
    (
        "com.microsoft.FastGelu",
        "com.microsoft.FastGeluGrad",
        false,
    ),
    (
        "com.microsoft.QuickGelu",
        "com.microsoft.QuickGeluGrad",
        false,
    ),
    ("QuickGelu", "com.microsoft.QuickGeluGrad", false),
    ("memplan.Pointwise", "memplan.PointwiseGrad", false),
    ("Softplus", "com.microsoft.SoftplusGrad", false),
    ("Softmax", "com.microsoft.SoftmaxGrad_13", true),
    ("LogSoftmax", "com.microsoft.LogSoftmaxGrad_13", true),
    ("Exp", "Mul", true),
    ("Sqrt", "Div", true),
    ("Log", "Div", false),
    ("Reciprocal", "memplan.ReciprocalGrad", true),
    ("Erf", "memplan.ErfGrad", false),
    ("Sin", "memplan.SinGrad", false),
    ("Cos", "memplan.CosGrad", false),
    ("Tan", "memplan.TanGrad", true),
    ("Abs", "memplan.AbsGrad", false),
    ("Asin", "memplan.AsinGrad", false),
    ("Acos", "memplan.AcosGrad", false),
    ("Atan", "memplan.AtanGrad", false),
    ("Sinh", "memplan.SinhGrad", false),
    ("Cosh", "memplan.CoshGrad", false),
    ("Asinh", "memplan.AsinhGrad", false),
    ("Acosh", "memplan.AcoshGrad", false),
    ("Atanh", "memplan.AtanhGrad", false),
    ("Elu", "memplan.EluGrad", false),
    ("Selu", "memplan.SeluGrad", false),
    ("Celu", "memplan.CeluGrad", false),
    ("HardSigmoid", "memplan.HardSigmoidGrad", false),
    ("HardSwish", "memplan.HardSwishGrad", false),
    ("Mish", "memplan.MishGrad", false),
    ("Softsign", "memplan.SoftsignGrad", false),
    ("Swish", "memplan.SwishGrad", false),
    ("ThresholdedRelu", "memplan.ThresholdedReluGrad", false),
    ("Shrink", "memplan.ShrinkGrad", false),
];

/// Whether the output of the current node, an op of [`UNARY`] whose rule reads the output,
/// tells the backward all it needs of the input. LeakyRelu's `dX = dY * (X > 0 ? 1 :
/// alpha)` reads the sign of X off Y only when `alpha >= 0`: with a negative slope `Y > 0`
/// on both sides (PyTorch refuses an in-place `leaky_relu_` backward for that reason), so
/// the rule reads X. Every other output-reading rule is an identity of the output alone.
fn output_tells_input(e: &Emitter<'_>, op: &str) -> bool {
    match op {
        "LeakyRelu" => {
            let alpha = match e.attr("alpha") {
                Some(Attr::Float(a)) => *a,
                Some(Attr::Int(a)) => *a as f64,
                _ => 0.01,
            };
            alpha >= 0.0
        }
        _ => true,
    }
}

/// Ops whose gradient passes through to input 0 reshaped to its shape: a view.
const VIEWS: &[&str] = &["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"];

/// Ops with a zero gradient.
const ZERO: &[&str] = &["Floor", "Ceil", "Round", "Sign"];

/// Ops whose gradient reads nothing of the forward pass: one node of the given name writing
/// input 0's gradient from dY alone.
const SHAPE_ONLY: &[(&str, &str)] = &[
    ("ReduceSum", "memplan.ReduceSumGrad"),
    ("ReduceMean", "memplan.ReduceMeanGrad"),
    ("GlobalAveragePool", "memplan.GlobalAveragePoolGrad"),
    ("AveragePool", "AveragePoolGrad"),
    ("Slice", "memplan.SliceGrad"),
    ("Pad", "memplan.PadGrad"),
    ("Tile", "memplan.TileGrad"),
    ("CumSum", "memplan.CumSumGrad"),
    ("Resize", "memplan.ResizeGrad"),
    ("Upsample", "memplan.ResizeGrad"),
    ("DepthToSpace", "SpaceToDepth"),
    ("SpaceToDepth", "DepthToSpace"),
    ("Trilu", "memplan.TriluGrad"),
];

/// Reductions whose gradient reads the input and the output.
const REDUCE_XY: &[&str] = &[
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL2",
    "ReduceLogSumExp",
    "GlobalMaxPool",
];

/// Reductions whose gradient reads the input.
const REDUCE_X: &[&str] = &[
    "ReduceL1",
    "ReduceSumSquare",
    "LpNormalization",
    "GlobalLpPool",
];

/// Reductions whose gradient reads the output only: `ReduceLogSum` (`Y = log(sum(X))`,
/// `dX = dY / sum(X) = dY * exp(-Y)`).
const REDUCE_Y: &[&str] = &["ReduceLogSum"];

/// Ops whose gradient reads the input and the output: LRN (a local response
/// normalisation's gradient needs the normaliser, recomputed from X, and Y).
const READS_XY: &[&str] = &["LRN"];

/// Emits the backward of the emitter's current node; `false` when the op has no rule.
pub(super) fn backward(e: &mut Emitter<'_>) -> Result<bool, PlanError> {
    let op = e.g.node(e.cur).op.clone();
    let dy0 = e.dy.first().copied().flatten();
    let x0 = e.x(0);
    let y0 = e.y(0);
    if ZERO.contains(&op.as_str()) {
        return Ok(true);
    }
    if op == "com.microsoft.FastGelu" && e.x(1).is_some() {
        // FastGelu(X, bias): both gradients read X and the bias, as BiasGelu's.
        return bias_activation(e, "com.microsoft.BiasFastGeluGrad_dX").map(|()| true);
    }
    if let Some(&(_, grad_op, reads_y)) = UNARY.iter().find(|(f, _, _)| *f == op) {
        let Some(dy) = dy0 else { return Ok(true) };
        let saved = if reads_y && output_tells_input(e, &op) {
            y0
        } else {
            x0
        };
        e.unary(grad_op, vec![Some(dy), saved])?;
        return Ok(true);
    }
    if let Some(&(_, grad_op)) = SHAPE_ONLY.iter().find(|(f, _)| *f == op) {
        let Some(dy) = dy0 else { return Ok(true) };
        e.unary(grad_op, vec![Some(dy)])?;
        return Ok(true);
    }
    if REDUCE_Y.contains(&op.as_str()) {
        let Some(dy) = dy0 else { return Ok(true) };
        e.unary(&format!("memplan.{op}Grad"), vec![Some(dy), y0])?;
        return Ok(true);
    }
    if REDUCE_XY.contains(&op.as_str())
        || REDUCE_X.contains(&op.as_str())
        || READS_XY.contains(&op.as_str())
    {
        let Some(dy) = dy0 else { return Ok(true) };
        let mut inputs = vec![Some(dy), x0];
        if REDUCE_XY.contains(&op.as_str()) || READS_XY.contains(&op.as_str()) {
            inputs.push(y0);
        }
        e.unary(&format!("memplan.{op}Grad"), inputs)?;
        return Ok(true);
    }
    if VIEWS.contains(&op.as_str()) {
        let (Some(dy), Some(x)) = (dy0, x0) else {
            return Ok(true);
        };
        if !e.needs(0) {
            return Ok(true);
        }
        let dims: Option<Vec<i64>> = e.shape(x).iter().map(Expr::as_constant).collect();
        match dims {
            // The gradient is dY's bytes seen with X's shape: a view.
            Some(dims) => {
                let shape = e.ints("grad_shape", &dims);
                let out = e.grad_out(0)?;
                e.emit(
                    "Reshape",
                    vec![Some(dy), Some(shape)],
                    vec![out],
                    Attrs::new(),
                    &[0],
                );
                e.contribute(0, out, true)?;
            }
            None if e.shape(dy) == e.shape(x) => e.contribute(0, dy, false)?,
            None => {
                let out = e.grad_out(0)?;
                e.emit(
                    "memplan.ReshapeGrad",
                    vec![Some(dy)],
                    vec![out],
                    Attrs::new(),
                    &[0],
                );
                e.contribute(0, out, true)?;
            }
        }
        return Ok(true);
    }
    match op.as_str() {
        "Neg" => {
            if let Some(dy) = dy0 {
                e.unary("Neg", vec![Some(dy)])?;
            }
        }
        "Clip" => {
            // Y = min(max(X, min), max): dX is dY where X is inside the bounds, so it reads X
            // and the bounds when they are inputs (opset 11 on: PyTorch's `clamp.Tensor`,
            // `self: clamp_backward(grad, self, min, max)`); a bound's gradient is dY where
            // X passed it, summed to the bound's shape.
            let Some(dy) = dy0 else { return Ok(true) };
            let mut inputs = vec![Some(dy), x0];
            inputs.extend([e.x(1), e.x(2)].into_iter().flatten().map(Some));
            e.unary("memplan.ClipGrad", inputs.clone())?;
            for i in [1usize, 2] {
                if e.needs(i) {
                    let full = e.like("clip_bound_grad.full", dy);
                    e.emit(
                        "memplan.ClipGrad",
                        inputs.clone(),
                        vec![full],
                        Attrs::new(),
                        &[i],
                    );
                    e.contribute_reduced(i, full, true)?;
                }
            }
        }
        "Cast" | "CastLike" => {
            if let Some(dy) = dy0 {
                let to = x0.map_or(DType::F32, |x| e.g.tensor(x).dtype);
                let code = i64::from(onnx_code(to));
                if e.needs(0) {
                    let out = e.grad_out(0)?;
                    e.emit(
                        "Cast",
                        vec![Some(dy)],
                        vec![out],
                        vec![("to".to_owned(), Attr::Int(code))],
                        &[0],
                    );
                    e.contribute(0, out, true)?;
                }
            }
        }
        "Transpose" => {
            if let (Some(dy), true) = (dy0, e.needs(0)) {
                let rank = x0.map_or(0, |x| e.shape(x).len());
                let perm: Vec<i64> = match e.attr("perm").and_then(Attr::as_ints) {
                    Some(p) => p.to_vec(),
                    None => (0..rank as i64).rev().collect(),
                };
                let mut inverse = vec![0i64; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    if let Some(slot) = usize::try_from(p).ok().and_then(|p| inverse.get_mut(p)) {
                        *slot = i as i64;
                    }
                }
                let out = e.grad_out(0)?;
                e.emit(
                    "Transpose",
                    vec![Some(dy)],
                    vec![out],
                    vec![("perm".to_owned(), Attr::Ints(inverse))],
                    &[0],
                );
                e.contribute(0, out, true)?;
            }
        }
        "Add" | "Sub" | "Sum" | "Mean" => {
            let Some(dy) = dy0 else { return Ok(true) };
            let n = e.g.node(e.cur).inputs.len();
            for i in (0..n).rev() {
                if !e.needs(i) {
                    continue;
                }
                if op == "Sub" && i == 1 {
                    let neg = e.like("neg_grad", dy);
                    e.emit("Neg", vec![Some(dy)], vec![neg], Attrs::new(), &[1]);
                    e.contribute_reduced(1, neg, true)?;
                } else if op == "Mean" {
                    let scaled = e.like("mean_grad", dy);
                    e.emit(
                        "memplan.MeanGrad",
                        vec![Some(dy)],
                        vec![scaled],
                        Attrs::new(),
                        &[i],
                    );
                    e.contribute_reduced(i, scaled, true)?;
                } else {
                    e.contribute_reduced(i, dy, false)?;
                }
            }
        }
        "Max" | "Min" => {
            // Each input's gradient is dY where it is the extreme: it reads that input and
            // the output (ONNX Runtime's `GetMinMaxGradient`); one input passes dY through.
            let Some(dy) = dy0 else { return Ok(true) };
            let n = e.g.node(e.cur).inputs.len();
            if n == 1 {
                if e.needs(0) {
                    e.contribute(0, dy, false)?;
                }
                return Ok(true);
            }
            for i in (0..n).rev() {
                let Some(x) = e.x(i) else { continue };
                if !e.needs(i) {
                    continue;
                }
                let full = e.like(&format!("{}_grad.full", e.g.tensor(x).name), dy);
                e.emit(
                    "memplan.MaxMinGrad",
                    vec![Some(dy), Some(x), y0],
                    vec![full],
                    Attrs::new(),
                    &[i],
                );
                e.contribute_reduced(i, full, true)?;
            }
        }
        "TopK" => {
            // The values' gradient scattered back at the indices (output 1).
            if let Some(dy) = dy0 {
                e.unary("memplan.TopKGrad", vec![Some(dy), e.y(1)])?;
            }
        }
        "ScatterND" | "ScatterElements" => {
            // Data's gradient is dY with the scattered positions cleared (or kept, when the
            // updates are added), the updates' gradient dY gathered at the indices: both
            // read the indices only (a multiplying reduction reads data and updates too).
            let Some(dy) = dy0 else { return Ok(true) };
            let (index, broadcast) = if op == "ScatterElements" {
                broadcast_index(e)
            } else {
                (e.x(1), false)
            };
            let multiplies = matches!(e.attr("reduction"), Some(Attr::Str(r)) if r == "mul");
            let extra: Vec<Option<TensorId>> = if multiplies {
                vec![x0, e.x(2)]
            } else {
                Vec::new()
            };
            if e.needs(2) {
                let out = e.grad_out(2)?;
                let gather = if op == "ScatterND" {
                    "GatherND"
                } else if broadcast {
                    "memplan.BroadcastGatherElements"
                } else {
                    "GatherElements"
                };
                let mut inputs = vec![Some(dy), index];
                inputs.extend(extra.iter().copied());
                let attrs: Attrs = e
                    .attr("axis")
                    .map(|a| vec![("axis".to_owned(), a.clone())])
                    .unwrap_or_default();
                let grad_op = if multiplies {
                    "memplan.ScatterMulGrad"
                } else {
                    gather
                };
                e.emit(grad_op, inputs, vec![out], attrs, &[2]);
                e.contribute(2, out, true)?;
            }
            if e.needs(0) {
                let mut inputs = vec![Some(dy), index];
                inputs.extend(extra.iter().copied());
                e.unary("memplan.ScatterGrad", inputs)?;
            }
        }
        "RotaryEmbedding" | "com.microsoft.RotaryEmbedding" => {
            // A rotation of X by the cached angles: X's gradient rotates dY back, reading
            // the caches and the positions (everything but X); a cache that needs a
            // gradient reads X too.
            let Some(dy) = dy0 else { return Ok(true) };
            let n = e.g.node(e.cur).inputs.len();
            let wrt: Vec<usize> = (0..n).filter(|&i| e.needs(i)).collect();
            if wrt.is_empty() {
                return Ok(true);
            }
            let mut inputs = vec![Some(dy)];
            let reads_x = wrt.iter().any(|&i| i != 0);
            inputs.extend((0..n).filter(|&i| i != 0 || reads_x).map(|i| e.x(i)));
            let mut outputs = Vec::new();
            for &i in &wrt {
                outputs.push(e.grad_out(i)?);
            }
            e.emit(
                "memplan.RotaryEmbeddingGrad",
                inputs,
                outputs.clone(),
                Attrs::new(),
                &wrt,
            );
            for (&i, &o) in wrt.iter().zip(&outputs) {
                e.contribute(i, o, true)?;
            }
        }
        "Attention" | "memplan.Attention" => attention(e)?,
        "memplan.ConvAdd"
        | "memplan.ConvTransposeAdd"
        | "memplan.GemmAdd"
        | "memplan.MatMulAdd" => {
            product_into(e, &op)?;
        }
        "Mul" | "Div" | "Pow" => {
            let Some(dy) = dy0 else { return Ok(true) };
            let (Some(a), Some(b)) = (x0, e.x(1)) else {
                return Ok(false);
            };
            for i in [1usize, 0] {
                if !e.needs(i) {
                    continue;
                }
                let (grad_op, reads): (&str, Vec<Option<TensorId>>) = match (op.as_str(), i) {
                    ("Mul", 0) => ("Mul", vec![Some(dy), Some(b)]),
                    ("Mul", _) => ("Mul", vec![Some(dy), Some(a)]),
                    ("Div", 0) => ("Div", vec![Some(dy), Some(b)]),
                    ("Div", _) => ("memplan.DivGrad", vec![Some(dy), Some(a), Some(b)]),
                    (_, _) => ("memplan.PowGrad", vec![Some(dy), Some(a), Some(b)]),
                };
                let full = e.like(
                    &format!("{}_grad.full", e.g.tensor(if i == 0 { a } else { b }).name),
                    dy,
                );
                e.emit(grad_op, reads, vec![full], Attrs::new(), &[i]);
                e.contribute_reduced(i, full, true)?;
            }
        }
        "PRelu" | "com.microsoft.BiasGelu" | "memplan.BiasAct" => {
            // PRelu(X, slope): dX reads X and the slope, dSlope reads X; BiasGelu(X, bias)
            // and memplan's fused bias and activation: both gradients read X and the bias
            // (dBias is dX summed to its shape).
            if e.x(1).is_none() {
                return Ok(false);
            }
            let grad_op = match op.as_str() {
                "PRelu" => "memplan.PReluGrad",
                "memplan.BiasAct" => "memplan.BiasActGrad",
                _ => "com.microsoft.BiasGeluGrad_dX",
            };
            bias_activation(e, grad_op)?;
        }
        "LSTM" | "GRU" | "RNN" => {
            // The recurrent gradient (ONNX Runtime's LSTMGrad, GRUGrad) reads the inputs, the
            // outputs and what the training forward adds: every step's cell state and gates.
            let node = e.g.node(e.cur).clone();
            let mut inputs: Vec<Option<TensorId>> = node.inputs.clone();
            inputs.extend(node.outputs.iter().map(|&o| Some(o)));
            inputs.extend(e.dy.iter().copied());
            let wrt: Vec<usize> = (0..node.inputs.len()).filter(|&i| e.needs(i)).collect();
            let mut outputs = Vec::new();
            for &i in &wrt {
                outputs.push(e.grad_out(i)?);
            }
            let grad_op = match op.as_str() {
                "LSTM" => "com.microsoft.LSTMGrad",
                "GRU" => "com.microsoft.GRUGrad",
                _ => "memplan.RNNGrad",
            };
            e.emit(grad_op, inputs, outputs.clone(), Attrs::new(), &wrt);
            for (&i, &o) in wrt.iter().zip(&outputs) {
                e.contribute(i, o, true)?;
            }
        }
        "com.microsoft.SkipLayerNormalization" => {
            // LayerNormalization of input + skip (+ bias): the gradient of the sum, read from
            // the saved sum (output 3), gamma and the statistics, flows to input, skip and
            // bias.
            let Some(dy) = dy0 else { return Ok(true) };
            let Some(sum) = e.y(3) else {
                return Ok(false);
            };
            let dsum = e.like("skip_sum_grad", sum);
            let mut outs = vec![dsum];
            let mut wrt = vec![0, 1];
            for i in [2usize, 3] {
                if e.needs(i) {
                    outs.push(e.grad_out(i)?);
                    wrt.push(i);
                }
            }
            e.emit(
                "com.microsoft.LayerNormalizationGrad",
                vec![Some(dy), Some(sum), e.x(2), e.y(1), e.y(2)],
                outs.clone(),
                Attrs::new(),
                &wrt,
            );
            for (k, &i) in wrt.iter().enumerate().skip(2) {
                e.contribute(i, outs[k], true)?;
            }
            for i in [1usize, 0, 4] {
                if e.needs(i) {
                    e.contribute_reduced(i, dsum, false)?;
                }
            }
        }
        "Where" => {
            let Some(dy) = dy0 else { return Ok(true) };
            let cond = x0;
            for i in [2usize, 1] {
                if e.needs(i) {
                    let full = e.like("where_grad.full", dy);
                    e.emit(
                        "memplan.WhereGrad",
                        vec![Some(dy), cond],
                        vec![full],
                        Attrs::new(),
                        &[i],
                    );
                    e.contribute_reduced(i, full, true)?;
                }
            }
        }
        "MatMul" | "Gemm" | "com.microsoft.FusedMatMul" => matmul(e, &op)?,
        "Conv" | "ConvTranspose" => {
            let Some(dy) = dy0 else { return Ok(true) };
            let n = e.g.node(e.cur).inputs.len().min(3);
            let wrt: Vec<usize> = (0..n).filter(|&i| e.needs(i)).collect();
            if wrt.is_empty() {
                return Ok(true);
            }
            let mut outputs = Vec::new();
            for &i in &wrt {
                outputs.push(e.grad_out(i)?);
            }
            // dX needs W, dW needs X (and ONNX Runtime's ConvGrad takes both).
            let x = if wrt.contains(&1) { x0 } else { None };
            let w = if wrt.contains(&0) { e.x(1) } else { None };
            let grad_op = if op == "Conv" {
                "com.microsoft.ConvGrad"
            } else {
                "com.microsoft.ConvTransposeGrad"
            };
            e.emit(
                grad_op,
                vec![Some(dy), x, w],
                outputs.clone(),
                Attrs::new(),
                &wrt,
            );
            for (&i, &o) in wrt.iter().zip(&outputs) {
                e.contribute(i, o, true)?;
            }
        }
        "com.microsoft.BatchNormInternal" => {
            // dX, dScale, dBias from dY, X, scale and the saved statistics (outputs 3, 4).
            norm(
                e,
                "com.microsoft.BatchNormalizationGrad",
                vec![x0, e.x(1), e.y(3), e.y(4)],
            )?;
        }
        "LayerNormalization" => {
            norm(
                e,
                "com.microsoft.LayerNormalizationGrad",
                vec![x0, e.x(1), e.y(1), e.y(2)],
            )?;
        }
        "SimplifiedLayerNormalization"
        | "RMSNormalization"
        | "com.microsoft.SimplifiedLayerNormalization" => {
            norm(
                e,
                "com.microsoft.SimplifiedLayerNormalizationGrad",
                vec![x0, e.x(1), e.y(1)],
            )?;
        }
        "InstanceNormalization" | "GroupNormalization" => {
            // X, scale, and the statistics the forward saved (training mode adds them).
            norm(
                e,
                &format!("memplan.{op}Grad"),
                vec![x0, e.x(1), e.y(1), e.y(2)],
            )?;
        }
        "Dropout" => {
            if let Some(dy) = dy0 {
                e.unary("com.microsoft.DropoutGrad", vec![Some(dy), e.y(1)])?;
            }
        }
        "MaxPool" => {
            if let Some(dy) = dy0 {
                e.unary("MaxPoolGrad", vec![Some(dy), e.y(1)])?;
            }
        }
        "Gather" | "GatherElements" | "GatherND" => {
            let (Some(dy), Some(data)) = (dy0, x0) else {
                return Ok(true);
            };
            if e.needs(0) {
                let dims: Vec<i64> = e
                    .shape(data)
                    .iter()
                    .map(|d| d.as_constant().unwrap_or(-1))
                    .collect();
                let shape = e.ints("data_shape", &dims);
                let out = e.grad_out(0)?;
                let (grad_op, inputs) = match op.as_str() {
                    "Gather" => (
                        "com.microsoft.GatherGrad",
                        vec![Some(shape), e.x(1), Some(dy)],
                    ),
                    "GatherND" => (
                        "com.microsoft.GatherNDGrad",
                        vec![Some(shape), e.x(1), Some(dy)],
                    ),
                    _ => match broadcast_index(e) {
                        (index, true) => (
                            "memplan.BroadcastGatherElementsGrad",
                            vec![Some(dy), Some(shape), index],
                        ),
                        (index, false) => (
                            "com.microsoft.GatherElementsGrad",
                            vec![Some(dy), Some(shape), index],
                        ),
                    },
                };
                let attrs: Attrs = e
                    .attr("axis")
                    .map(|a| vec![("axis".to_owned(), a.clone())])
                    .unwrap_or_default();
                e.emit(grad_op, inputs, vec![out], attrs, &[0]);
                e.contribute(0, out, true)?;
            }
        }
        "Concat" => concat(e)?,
        "Split" => {
            let n = e.dy.len();
            let Some(x) = x0 else { return Ok(true) };
            if !e.needs(0) {
                return Ok(true);
            }
            let out = e.grad_out(0)?;
            let all = e.dy.iter().all(Option::is_some);
            let inputs: Vec<Option<TensorId>> = e.dy.clone();
            let grad_op = if all { "Concat" } else { "memplan.SplitGrad" };
            let axis = e.attr("axis").and_then(Attr::as_int).unwrap_or(0);
            let _ = (n, x);
            e.emit(
                grad_op,
                inputs,
                vec![out],
                vec![("axis".to_owned(), Attr::Int(axis))],
                &[0],
            );
            e.contribute(0, out, true)?;
        }
        "Expand" => {
            if let Some(dy) = dy0 {
                e.contribute_reduced(0, dy, false)?;
            }
        }
        "SoftmaxCrossEntropyLoss" => {
            if let Some(dy) = dy0 {
                let mut inputs = vec![Some(dy), e.y(1), e.x(1)];
                if let Some(w) = e.x(2) {
                    inputs.push(Some(w));
                }
                e.unary("com.microsoft.SoftmaxCrossEntropyLossGrad", inputs)?;
            }
        }
        "NegativeLogLikelihoodLoss" => {
            if let Some(dy) = dy0 {
                let mut inputs = vec![Some(dy), e.x(1)];
                if let Some(w) = e.x(2) {
                    inputs.push(Some(w));
                }
                e.unary("memplan.NegativeLogLikelihoodLossGrad", inputs)?;
            }
        }
        "Einsum" => {
            let Some(dy) = dy0 else { return Ok(true) };
            let n = e.g.node(e.cur).inputs.len();
            for i in (0..n).rev() {
                if !e.needs(i) {
                    continue;
                }
                let mut inputs = vec![Some(dy)];
                inputs.extend((0..n).filter(|&k| k != i).map(|k| e.x(k)));
                let out = e.grad_out(i)?;
                let attrs: Attrs = e
                    .attr("equation")
                    .map(|a| vec![("equation".to_owned(), a.clone())])
                    .unwrap_or_default();
                e.emit("memplan.EinsumGrad", inputs, vec![out], attrs, &[i]);
                e.contribute(i, out, true)?;
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// An activation of X and a second operand (PRelu's slope, a fused bias), each gradient
/// read from dY, X and the operand. PRelu's two gradients differ: one `grad_op` node each,
/// the slope's summed to its shape. A fused bias is added to X, so its gradient is X's
/// summed over the broadcast axes: one node computes X's, and the bias's is its sum (as
/// ONNX Runtime's `BiasGeluGrad_dX` and a ReduceSum).
/// The index a GatherElements' or ScatterElements' gradient reads: input 1, or, when a
/// forward `Expand` made it from a smaller index of its dtype (PyTorch's
/// `index.expand_as(src)`, which PyTorch keeps as a stride-0 view of the small index), that
/// small index, read broadcast (`true`): the expanded copy is then neither kept for the
/// backward nor made again in it.
fn broadcast_index(e: &Emitter<'_>) -> (Option<TensorId>, bool) {
    let Some(index) = e.x(1) else {
        return (None, false);
    };
    let g = &e.g;
    let source = g
        .nodes()
        .iter()
        .find(|n| n.op == "Expand" && n.outputs.first() == Some(&index))
        .and_then(|n| n.inputs.first().copied().flatten());
    match source {
        Some(small)
            if g.tensor(small).dtype == g.tensor(index).dtype
                && matches!(
                    (g.tensor(small).static_bytes(), g.tensor(index).static_bytes()),
                    (Ok(a), Ok(b)) if a < b
                ) =>
        {
            (Some(small), true)
        }
        _ => (Some(index), false),
    }
}

fn bias_activation(e: &mut Emitter<'_>, grad_op: &str) -> Result<(), PlanError> {
    let Some(dy) = e.dy.first().copied().flatten() else {
        return Ok(());
    };
    let (Some(a), Some(b)) = (e.x(0), e.x(1)) else {
        return Ok(());
    };
    let wrt: Vec<usize> = [1usize, 0].into_iter().filter(|&i| e.needs(i)).collect();
    if grad_op == "memplan.PReluGrad" {
        for &i in &wrt {
            let full = e.like("act_grad.full", dy);
            e.emit(
                grad_op,
                vec![Some(dy), Some(a), Some(b)],
                vec![full],
                Attrs::new(),
                &[i],
            );
            e.contribute_reduced(i, full, true)?;
        }
        return Ok(());
    }
    if wrt.is_empty() {
        return Ok(());
    }
    let full = e.like("act_grad.full", dy);
    e.emit(
        grad_op,
        vec![Some(dy), Some(a), Some(b)],
        vec![full],
        Attrs::new(),
        &wrt,
    );
    if e.needs(1) {
        e.contribute_reduced(1, full, true)?;
    }
    if e.needs(0) {
        // Shared with the bias's sum unless that is not needed.
        e.contribute_reduced(0, full, !e.needs(1))?;
    }
    Ok(())
}

/// ONNX's fused `Attention` (opset 23): the training forward also outputs what the
/// backward reads besides Q, K, V and the mask (`derive::training_mode`): the attention
/// probabilities `[batch, heads, q, kv]` for the eager kernel, the per-row log-sum-exp
/// `[batch, heads, q]` for flash. The eager backward materialises `dS = P ∘ (dP − rowsum(dP ∘
/// P))` with `dP = dY·Vᵀ` (as large as the probabilities) from dY, V and P, then the input
/// gradients from dS, Q, K, P and dY; flash recomputes P block by block from Q, K, the mask
/// and the log-sum-exp, and reads Y for the row sums of `dY ∘ Y`.
fn attention(e: &mut Emitter<'_>) -> Result<(), PlanError> {
    let Some(dy) = e.dy.first().copied().flatten() else {
        return Ok(());
    };
    let node = e.g.node(e.cur).clone();
    let n = node.inputs.len().min(4);
    let wrt: Vec<usize> = (0..n).filter(|&i| e.needs(i)).collect();
    if wrt.is_empty() {
        return Ok(());
    }
    let stat = node
        .outputs
        .iter()
        .copied()
        .find(|&o| e.g.tensor(o).name.ends_with(super::derive::ATTENTION_STAT));
    let (q, k, v, mask, y) = (e.x(0), e.x(1), e.x(2), e.x(3), e.y(0));
    let mut outputs = Vec::new();
    for &i in &wrt {
        outputs.push(e.grad_out(i)?);
    }
    // memplan's fused attention saves its scores with the output's rank (the value axis
    // holding the keys), its log-sum-exp with one axis less; ONNX's, `[batch, heads, q, kv]`
    // or `[batch, heads, q]`.
    let fused = node.op == "memplan.Attention";
    let eager = stat.is_some_and(|s| {
        let rank = e.shape(s).len();
        if fused {
            y.is_some_and(|y| rank == e.shape(y).len())
        } else {
            rank == 4
        }
    });
    if let (true, Some(p)) = (eager, stat) {
        let ds = e.like("attention_scores_grad", p);
        e.emit(
            "memplan.AttentionScoresGrad",
            vec![Some(dy), v, Some(p)],
            vec![ds],
            Attrs::new(),
            &wrt,
        );
        e.emit(
            "memplan.AttentionGrad",
            vec![Some(dy), Some(ds), q, k, Some(p)],
            outputs.clone(),
            Attrs::new(),
            &wrt,
        );
    } else {
        // The fused kernel's boolean mask (input 4) masks the scores it recomputes too.
        let keep = if fused { e.x(4) } else { None };
        e.emit(
            "memplan.AttentionGrad",
            vec![Some(dy), q, k, v, mask, y, stat, keep],
            outputs.clone(),
            Attrs::new(),
            &wrt,
        );
    }
    for (&i, &o) in wrt.iter().zip(&outputs) {
        e.contribute(i, o, true)?;
    }
    Ok(())
}

/// memplan's fused product added into a residual (`conv-add`): `y = r + P(inputs 1..)`
/// (`bias_input`: a bias added too). The residual's gradient is dY, as an `Add` gives it;
/// the bias's dY summed to its shape; the product's operands theirs from dY, as the
/// product's own rule gives them: one `ConvGrad` (`ConvTransposeGrad`) reading dY, X and W,
/// or one product of dY with the other operand per operand (`FusedMatMul`, `Gemm`; Gemm's C
/// gets dY summed to its shape).
fn product_into(e: &mut Emitter<'_>, op: &str) -> Result<(), PlanError> {
    let Some(dy) = e.dy.first().copied().flatten() else {
        return Ok(());
    };
    if e.needs(0) {
        e.contribute_reduced(0, dy, false)?;
    }
    if let Some(b) = e
        .attr("bias_input")
        .and_then(Attr::as_int)
        .and_then(|b| usize::try_from(b).ok())
        && e.needs(b)
    {
        e.contribute_reduced(b, dy, false)?;
    }
    let (x, w) = (e.x(1), e.x(2));
    match op {
        "memplan.ConvAdd" | "memplan.ConvTransposeAdd" => {
            let wrt: Vec<usize> = (1..4).filter(|&i| e.needs(i)).collect();
            if wrt.is_empty() {
                return Ok(());
            }
            let mut outputs = Vec::new();
            for &i in &wrt {
                outputs.push(e.grad_out(i)?);
            }
            let grad_op = if op == "memplan.ConvAdd" {
                "com.microsoft.ConvGrad"
            } else {
                "com.microsoft.ConvTransposeGrad"
            };
            let x = if wrt.contains(&2) { x } else { None };
            let w = if wrt.contains(&1) { w } else { None };
            e.emit(
                grad_op,
                vec![Some(dy), x, w],
                outputs.clone(),
                Attrs::new(),
                &wrt,
            );
            for (&i, &o) in wrt.iter().zip(&outputs) {
                e.contribute(i, o, true)?;
            }
        }
        _ => {
            let (Some(a), Some(b)) = (x, w) else {
                return Ok(());
            };
            let gemm = op == "memplan.GemmAdd";
            if gemm && e.needs(3) {
                e.contribute_reduced(3, dy, false)?;
            }
            let flag =
                |e: &Emitter<'_>, k: &str| e.attr(k).and_then(Attr::as_int).unwrap_or(0) != 0;
            let (ta, tb) = (flag(e, "transA"), flag(e, "transB"));
            let grad_op = if gemm {
                "Gemm"
            } else {
                "com.microsoft.FusedMatMul"
            };
            if e.needs(2) {
                let out = e.grad_out(2)?;
                let (inputs, t1, t2) = if tb {
                    (vec![Some(dy), Some(a)], true, ta)
                } else {
                    (vec![Some(a), Some(dy)], !ta, false)
                };
                e.emit(grad_op, inputs, vec![out], trans(t1, t2), &[2]);
                e.contribute(2, out, true)?;
            }
            if e.needs(1) {
                let out = e.grad_out(1)?;
                let (inputs, t1, t2) = if ta {
                    (vec![Some(b), Some(dy)], tb, true)
                } else {
                    (vec![Some(dy), Some(b)], false, !tb)
                };
                e.emit(grad_op, inputs, vec![out], trans(t1, t2), &[1]);
                e.contribute(1, out, true)?;
            }
        }
    }
    Ok(())
}

/// A normalisation's gradient: one node reading dY and `saved`, writing the gradients of
/// the data, scale and bias inputs that need one.
fn norm(e: &mut Emitter<'_>, grad_op: &str, saved: Vec<Option<TensorId>>) -> Result<(), PlanError> {
    let Some(dy) = e.dy.first().copied().flatten() else {
        return Ok(());
    };
    let wrt: Vec<usize> = (0..3).filter(|&i| e.needs(i)).collect();
    if wrt.is_empty() {
        return Ok(());
    }
    let mut outputs = Vec::new();
    for &i in &wrt {
        outputs.push(e.grad_out(i)?);
    }
    let mut inputs = vec![Some(dy)];
    inputs.extend(saved);
    let attrs: Attrs = ["axis", "epsilon", "stash_type"]
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), e.attr(k)?.clone())))
        .collect();
    e.emit(grad_op, inputs, outputs.clone(), attrs, &wrt);
    for (&i, &o) in wrt.iter().zip(&outputs) {
        e.contribute(i, o, true)?;
    }
    Ok(())
}

/// MatMul, Gemm and FusedMatMul: each operand's gradient is a product of dY with the other
/// operand (as ONNX Runtime's `FusedMatMul` and `Gemm` with transposes), written at the
/// operand's shape (a batch it was broadcast over summed in the kernel); Gemm's C gets dY
/// summed to its shape.
fn matmul(e: &mut Emitter<'_>, op: &str) -> Result<(), PlanError> {
    let Some(dy) = e.dy.first().copied().flatten() else {
        return Ok(());
    };
    let (Some(a), Some(b)) = (e.x(0), e.x(1)) else {
        return Ok(());
    };
    if op == "Gemm" && e.needs(2) {
        e.contribute_reduced(2, dy, false)?;
    }
    let flag = |e: &Emitter<'_>, k: &str| e.attr(k).and_then(Attr::as_int).unwrap_or(0) != 0;
    let (ta, tb) = (flag(e, "transA"), flag(e, "transB"));
    let grad_op = if op == "Gemm" {
        "Gemm"
    } else {
        "com.microsoft.FusedMatMul"
    };
    // dB = op(A)^T . dY, dA = dY . op(B)^T, each transposed back when the operand was.
    if e.needs(1) {
        let out = e.grad_out(1)?;
        let (inputs, t1, t2) = if tb {
            (vec![Some(dy), Some(a)], true, ta)
        } else {
            (vec![Some(a), Some(dy)], !ta, false)
        };
        e.emit(grad_op, inputs, vec![out], trans(t1, t2), &[1]);
        e.contribute(1, out, true)?;
    }
    if e.needs(0) {
        let out = e.grad_out(0)?;
        let (inputs, t1, t2) = if ta {
            (vec![Some(b), Some(dy)], tb, true)
        } else {
            (vec![Some(dy), Some(b)], false, !tb)
        };
        e.emit(grad_op, inputs, vec![out], trans(t1, t2), &[0]);
        e.contribute(0, out, true)?;
    }
    Ok(())
}

fn trans(a: bool, b: bool) -> Attrs {
    vec![
        ("transA".to_owned(), Attr::Int(i64::from(a))),
        ("transB".to_owned(), Attr::Int(i64::from(b))),
    ]
}

/// Concat: each input's gradient is its slice of dY (a view when the slice is contiguous).
fn concat(e: &mut Emitter<'_>) -> Result<(), PlanError> {
    let Some(dy) = e.dy.first().copied().flatten() else {
        return Ok(());
    };
    let rank = e.shape(dy).len();
    let axis = e.attr("axis").and_then(Attr::as_int).unwrap_or(0);
    let axis = if axis < 0 { axis + rank as i64 } else { axis };
    let n = e.g.node(e.cur).inputs.len();
    let mut start = Expr::constant(0);
    let mut starts: Vec<Expr> = Vec::with_capacity(n);
    for i in 0..n {
        starts.push(start.clone());
        if let Some(x) = e.x(i) {
            let d = usize::try_from(axis)
                .ok()
                .and_then(|a| e.shape(x).get(a).cloned())
                .unwrap_or_else(|| Expr::constant(0));
            start = start.checked_add(&d).unwrap_or(start);
        }
    }
    for i in (0..n).rev() {
        if !e.needs(i) {
            continue;
        }
        let (Some(x), Some(s)) = (e.x(i), starts.get(i).and_then(Expr::as_constant)) else {
            let out = e.grad_out(i)?;
            e.emit(
                "memplan.ConcatGrad",
                vec![Some(dy)],
                vec![out],
                Attrs::new(),
                &[i],
            );
            e.contribute(i, out, true)?;
            continue;
        };
        let len = usize::try_from(axis)
            .ok()
            .and_then(|a| e.shape(x).get(a).and_then(Expr::as_constant))
            .unwrap_or(0);
        let starts_t = e.ints("slice_starts", &[s]);
        let ends_t = e.ints("slice_ends", &[s + len]);
        let axes_t = e.ints("slice_axes", &[axis]);
        let out = e.grad_out(i)?;
        e.emit(
            "Slice",
            vec![Some(dy), Some(starts_t), Some(ends_t), Some(axes_t)],
            vec![out],
            Attrs::new(),
            &[i],
        );
        e.contribute(i, out, true)?;
    }
    Ok(())
}

/// The ONNX element type code of `dt` (for a Cast's `to`).
fn onnx_code(dt: DType) -> i32 {
    match dt {
        DType::F32 => 1,
        DType::U8 => 2,
        DType::I8 => 3,
        DType::U16 => 4,
        DType::I16 => 5,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::Bool => 9,
        DType::F16 => 10,
        DType::F64 => 11,
        DType::U32 => 12,
        DType::U64 => 13,
        DType::BF16 => 16,
        _ => 1,
    }
}
