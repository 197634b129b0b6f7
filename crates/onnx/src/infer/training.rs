//! ONNX Runtime's training ops: what `onnxruntime.training.artifacts.generate_artifacts`
//! puts in a training graph (the gradient ops, the loss and its gradient, gradient
//! accumulation) and in an optimizer graph.
//!
//! Shapes follow the op schemas of ONNX Runtime's training ops
//! (`orttraining/core/graph/training_op_defs.cc`) and what its gradient builder feeds them:
//!
//! - element-wise gradients (`ReluGrad`, `GeluGrad`, `TanhGrad`, `SoftmaxGrad_13`, `Scale`,
//!   `DropoutGrad`, ...) are shaped like their first input, the incoming gradient;
//! - `SoftmaxCrossEntropyLossGrad` (and the internal and older loss gradients) like the
//!   log-probabilities (input 1);
//! - `BatchNormInternal`: Y like X, running and saved statistics `[C]`;
//!   `BatchNormalizationGrad`: dX like X, dScale and dBias like the scale;
//! - `ConvGrad`: dX, dW, dB like X, W and `[M]`; `LayerNormalizationGrad`: dX like X, dScale
//!   and dBias like the scale;
//! - `GatherGrad`, `GatherNDGrad`, `GatherElementsGrad`, `SliceGrad`: shaped by the value of
//!   their shape input (a data-dependent shape when it is not known);
//! - `ConcatTraining`: like Concat, plus `int64[n]`, the inputs' lengths along the axis (a
//!   known value when their dims are); `SplitTraining`: like Split, sizes from input 1;
//!   `ReduceSumTraining`: like ReduceSum;
//! - `InPlaceAccumulatorV2`, `AdamWOptimizer`, `SGDOptimizerV2`: `bool[1]` (their optional
//!   updated-value outputs like the inputs they update);
//! - `LSTMTraining` and `GRUTraining`: the forward's outputs, then the cell states and
//!   gates their gradients read; `LSTMGrad` and `GRUGrad`: gradients like X, W, R, the bias
//!   and the initial states; `ResizeGrad`: like X;
//! - `MaxPoolGrad` and `AveragePoolGrad` (default domain): the forward input's shape, which
//!   they are not given: each spatial dim is the smallest input that pools to dY when the
//!   stride is 1 (exact), else a data-dependent dim bounded by the largest (ONNX Runtime
//!   declares these outputs in `value_info`, which the importer reads first).

use memplan_ir::{DType, Expr, Shape};

use super::{Ctx, Dim, InferError, Output, Quantity, Ranks, Res, add, mul, sub};
use crate::value::Value;

/// Default-domain ops that ONNX Runtime registers for training.
pub(super) fn infer_default(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    match op {
        "MaxPoolGrad" | "AveragePoolGrad" => pool_grad(ctx).map(Some),
        _ => Ok(None),
    }
}

/// The `com.microsoft` training ops.
pub(super) fn infer(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let like = |i: usize| -> Res<Output> {
        let x = ctx.input(i)?;
        Ok(Output::new(x.dtype, x.shape.clone()))
    };
    let flag = || Output::new(DType::Bool, [Expr::constant(1)].into_iter().collect());
    let out = match op {
        "ReluGrad"
        | "GeluGrad"
        | "FastGeluGrad"
        | "QuickGeluGrad"
        | "TanhGrad"
        | "SigmoidGrad"
        | "SoftmaxGrad"
        | "SoftmaxGrad_13"
        | "LogSoftmaxGrad"
        | "LogSoftmaxGrad_13"
        | "BiasGeluGrad_dX"
        | "BiasFastGeluGrad_dX"
        | "Scale"
        | "DropoutGrad"
        | "BitmaskDropoutGrad"
        | "SoftplusGrad"
        | "LeakyReluGrad"
        | "ZeroGradient"
        | "InPlaceAccumulator" => vec![like(0)?],
        "SoftmaxCrossEntropyLossGrad"
        | "SoftmaxCrossEntropyLossInternalGrad"
        | "SoftmaxCrossEntropyGrad"
        | "SparseSoftmaxCrossEntropyGrad" => vec![like(1)?],
        // Like SoftmaxCrossEntropyLoss: the loss (per element with reduction `none`) and
        // the log-probabilities.
        "SoftmaxCrossEntropyLossInternal" => super::nn::infer("SoftmaxCrossEntropyLoss", ctx)?
            .ok_or_else(|| InferError::no_rule("SoftmaxCrossEntropyLoss"))?,
        "SoftmaxCrossEntropy" | "SparseSoftmaxCrossEntropy" => {
            let x = ctx.input(0)?;
            vec![Output::new(x.dtype, Shape::new()), like(0)?]
        }
        "InPlaceAccumulatorV2" => vec![flag(), like(0)?],
        "AdamWOptimizer" => vec![flag(), like(2)?, like(4)?, like(5)?],
        "SGDOptimizerV2" => vec![flag(), like(1)?],
        "BatchNormInternal" => {
            let x = ctx.input(0)?;
            let c = x.dim(1)?.clone();
            let stats_dtype = ctx.opt(3).map_or(x.dtype, |m| m.dtype);
            let stats = Output::new(stats_dtype, [c].into_iter().collect());
            vec![
                Output::new(x.dtype, x.shape.clone()),
                stats.clone(),
                stats.clone(),
                stats.clone(),
                stats,
            ]
        }
        "BatchNormalizationGrad" => vec![like(1)?, like(2)?, like(2)?],
        "ConvGrad" => {
            let (x, w) = (ctx.input(1)?, ctx.input(2)?);
            let m = w.dim(0)?.clone();
            vec![
                Output::new(x.dtype, x.shape.clone()),
                Output::new(w.dtype, w.shape.clone()),
                Output::new(x.dtype, [m].into_iter().collect()),
            ]
        }
        "LayerNormalizationGrad" | "SimplifiedLayerNormalizationGrad" => {
            vec![like(1)?, like(2)?, like(2)?]
        }
        "GatherGrad" | "GatherNDGrad" => vec![shaped_by(ctx, 0, 2)?],
        "GatherElementsGrad" | "SliceGrad" => vec![shaped_by(ctx, 1, 0)?],
        "ConcatTraining" => {
            let mut out = super::movement::infer("Concat", ctx)?
                .ok_or_else(|| InferError::no_rule("Concat"))?;
            out.push(lengths(ctx)?);
            out
        }
        "SplitTraining" => {
            super::movement::infer("Split", ctx)?.ok_or_else(|| InferError::no_rule("Split"))?
        }
        "ReduceSumTraining" => super::reduce::infer("ReduceSum", ctx)?
            .ok_or_else(|| InferError::no_rule("ReduceSum"))?,
        "ResizeGrad" => vec![like(1)?],
        "LSTMTraining" | "GRUTraining" => recurrent_training(op, ctx)?,
        "LSTMGrad" | "GRUGrad" => recurrent_grad(op, ctx)?,
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// Directions and hidden size of a recurrent op.
fn recurrent_dims(ctx: &Ctx<'_>) -> Res<(Expr, Expr)> {
    let hidden = Expr::constant(super::nn::at_least(
        "hidden_size",
        ctx.required_int("hidden_size")?,
        1,
    )?);
    let dirs = Expr::constant(if ctx.attrs.string("direction") == Some("bidirectional") {
        2
    } else {
        1
    });
    Ok((dirs, hidden))
}

/// `LSTMTraining` and `GRUTraining`: the forward op's outputs, then what the gradient reads:
/// every step's cell state and the gates (LSTM: `[seq, dirs, batch, 4 * hidden]`), or the
/// gates (GRU: `[seq, dirs, batch, 3 * hidden]`).
fn recurrent_training(op: &str, ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let forward = if op == "LSTMTraining" { "LSTM" } else { "GRU" };
    let mut out = super::nn::infer(forward, ctx)?.ok_or_else(|| InferError::no_rule(forward))?;
    let y = out
        .first()
        .cloned()
        .ok_or(InferError::OutputCount { count: 0, index: 0 })?;
    let (_, hidden) = recurrent_dims(ctx)?;
    let gates = |k: i64| -> Res<Output> {
        let mut shape = y.shape.clone();
        if let Some(last) = shape.last_mut() {
            *last = mul(&hidden, &Expr::constant(k))?;
        }
        Ok(Output::new(y.dtype, shape))
    };
    if op == "LSTMTraining" {
        out.truncate(3);
        out.push(Output::new(y.dtype, y.shape.clone()));
        out.push(gates(4)?);
    } else {
        out.truncate(2);
        out.push(gates(3)?);
    }
    Ok(out)
}

/// `LSTMGrad` and `GRUGrad`: dX, dW, dR like X, W, R; dB `[dirs, 8 or 6 * hidden]`; the
/// initial states' gradients `[dirs, batch, hidden]`; LSTM's peepholes `[dirs, 3 * hidden]`.
fn recurrent_grad(op: &str, ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let (x, w, r) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let (dirs, hidden) = recurrent_dims(ctx)?;
    let batch = x.dim(1)?.clone();
    let lstm = op == "LSTMGrad";
    let state = Output::new(
        x.dtype,
        [dirs.clone(), batch, hidden.clone()].into_iter().collect(),
    );
    let bias = |k: i64| -> Res<Output> {
        Ok(Output::new(
            x.dtype,
            [dirs.clone(), mul(&hidden, &Expr::constant(k))?]
                .into_iter()
                .collect(),
        ))
    };
    let mut out = vec![
        Output::new(x.dtype, x.shape.clone()),
        Output::new(w.dtype, w.shape.clone()),
        Output::new(r.dtype, r.shape.clone()),
        bias(if lstm { 8 } else { 6 })?,
        state.clone(),
    ];
    if lstm {
        out.push(state);
        out.push(bias(3)?);
    }
    Ok(out)
}

/// `ConcatTraining`'s second output: each input's length along the axis.
fn lengths(ctx: &Ctx<'_>) -> Res<Output> {
    let inputs: Vec<_> = ctx.inputs.iter().flatten().collect();
    let rank = inputs.first().ok_or(InferError::NoInputs)?.shape.len();
    let axis = super::norm_axis(ctx.required_int("axis")?, rank)?;
    let dims: Option<Vec<Expr>> = inputs.iter().map(|x| x.shape.get(axis).cloned()).collect();
    let n = i64::try_from(inputs.len()).map_err(|_| InferError::overflow(Quantity::Count))?;
    Ok(Output::with_value(
        DType::I64,
        [Expr::constant(n)].into_iter().collect(),
        dims.map(Value::Ints),
    ))
}

/// An output of the data input's dtype whose shape is the value of input `shape_at`, or,
/// when that value is not known, of its length in data-dependent dims.
fn shaped_by(ctx: &Ctx<'_>, shape_at: usize, data_at: usize) -> Res<Output> {
    let (s, data) = (ctx.input(shape_at)?, ctx.input(data_at)?);
    // `SliceGrad(dY, shape, ...)` and `GatherElementsGrad(dY, shape, indices)` take the
    // gradient first; `GatherGrad(shape, indices, dY)` last.
    let dtype = data.dtype;
    if let Some(dims) = s.value.and_then(Value::ints) {
        ctx.check_dims(&dims.iter().cloned().collect())?;
        return Ok(Output::new(dtype, dims.iter().cloned().collect()));
    }
    let rank = match s.shape.as_slice() {
        [r] => {
            let n = ctx.konst(r, "the rank of a shape input")?;
            usize::try_from(n).map_err(|_| InferError::NegativeDim {
                dim: n.to_string(),
                shape: ctx.show_dims(s.shape),
            })?
        }
        _ => return Err(s.rank_error(Ranks::Exactly(1))),
    };
    Ok(Output::with_dims(dtype, vec![Dim::Data(None); rank]))
}

/// `MaxPoolGrad(dY, indices)` and `AveragePoolGrad(dY)`: the forward input's shape from the
/// pooling attributes (see the module docs).
fn pool_grad(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let dy = ctx.input(0)?;
    let spatial = dy.spatial()?;
    let kernel = ctx.required_ints("kernel_shape")?;
    super::nn::kernel_fits(kernel, spatial)?;
    let strides = super::nn::ints_or(ctx, "strides", 1, spatial);
    let dilations = super::nn::ints_or(ctx, "dilations", 1, spatial);
    let pads = super::nn::ints_or(ctx, "pads", 0, spatial * 2);
    let mut dims: Vec<Dim> = dy.shape.iter().take(2).cloned().map(Dim::Known).collect();
    for (i, y) in dy.shape.iter().skip(2).enumerate() {
        let (k, s, d) = (kernel[i], strides[i], dilations[i]);
        let effective = super::nn::window(k, d)?;
        let pad = pads[i]
            .checked_add(pads[i + spatial])
            .ok_or(InferError::overflow(Quantity::Padding))?;
        // The smallest input that pools to y: (y - 1) * s + effective - pads.
        let least = sub(
            &add(
                &mul(&sub(y, &Expr::constant(1))?, &Expr::constant(s))?,
                &Expr::constant(effective),
            )?,
            &Expr::constant(pad),
        )?;
        dims.push(if s == 1 {
            Dim::Known(least)
        } else {
            Dim::Data(Some(add(&least, &Expr::constant(s - 1))?))
        });
    }
    Ok(vec![Output::with_dims(dy.dtype, dims)])
}
