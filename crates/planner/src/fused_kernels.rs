//! The fused kernels' contract: what each node [`crate::fuse_graph`] makes reads, writes and
//! needs, for an engine that runs the fused graph ([`crate::plan_fused`] returns it with its
//! plan). This module holds no items: it is the reference rustdoc renders.
//!
//! # What a fused node is exact about, and what it is not
//!
//! A fused node is exact about **memory**: the tensors it reads (its inputs), the one it writes
//! (its output, plus the outputs of `Shape` or `Size` nodes that read a swallowed tensor),
//! over which input the planner may write its output ([`memplan_ir::OpTable::default`]'s rule
//! for the op, which the plan verifier states again on its own), and its scratch while it runs
//! (a node workspace in [`crate::Plan::workspaces`]). It is **not** a full statement of what the
//! kernel computes: constants the pattern applied (attention's scale and soft-cap value, a
//! normalisation's epsilon, `QuickGelu`'s factor, casts inside the pattern) stay in the nodes it
//! replaced. Those are listed on the fused node (attribute [`crate::ATTR_FUSED_NODES`]: the ids
//! of the original nodes, in the graph before fusion) and in [`crate::FusedNode::replaces`], so
//! an engine that fuses reads its kernel's constants from them. Every fused node also carries
//! [`crate::ATTR_FUSION`] (its kind: `attention`, `conv-add`, `gelu`, `silu`, `norm`,
//! `bias-act`), and the fused graph's metadata [`crate::FUSED_MARK`] (the fusions made), so
//! that it is never fused twice.
//!
//! A tensor a kernel swallows is an activation whose byte readers are all in the pattern; a
//! scalar (a scale, an epsilon) is a parameter, not an input; everything else the pattern reads
//! is an input. Absent optional inputs are `None` in [`memplan_ir::Node::inputs`], so positions
//! below are fixed.
//!
//! # `memplan.Attention` (`attention`)
//!
//! `softmax(mask(scale · Q·Kᵀ)) · V` in one kernel.
//! - Inputs: 0 `Q`, 1 `K`, 2 `V`, each read **at its source**: before the transposes,
//!   reshapes and grouped-query repeats the exporter put around it (the kernel reads with
//!   strides and repeats key-value heads itself); 3 the additive mask (optional); 4 the boolean
//!   mask (optional); 5 (inference only) a second mask that input 3 or 4, whichever is
//!   present, is joined with before use. A mask is read at its source too: a smaller tensor
//!   that the kernel broadcasts to the scores, applying per element the ops the graph applied
//!   (a `Where` between two scalars, a widening `Cast`, a comparison with a scalar).
//! - Attributes: `kv_axis` (the axis of `K` holding the key positions), `dv_axis` (the axis
//!   of the output holding the value size), `score_dtype` (ONNX type code of the softmax's
//!   input, when it differs from `Q`'s), `softcap` (1: `tanh(S / c) · c` is applied),
//!   `mask_keep` (1: the boolean mask keeps where true), `mask_join` (`And` or `Or`: how input
//!   5 joins the other mask). Opset 23's one-node `Attention` keeps its own attributes
//!   (`scale`, `is_causal`, ...).
//! - Output: the attention output as the graph had it after the exporter's transposes.
//! - Scratch: [`crate::PlanOptions::attention`]'s kernel, for `elements(output) /
//!   output[dv_axis]` query rows by `K[kv_axis]` keys: the scores in `score_dtype` for
//!   [`crate::AttentionKernel::Eager`], per-row `f32` statistics for `Flash`
//!   ([`crate::FUSED_ATTENTION_OPS`] lists the attention ops sized so).
//!
//! # `memplan.ConvAdd`, `ConvTransposeAdd`, `GemmAdd`, `MatMulAdd` (`conv-add`)
//!
//! `residual + epilogue(product)`, accumulated into the residual.
//! - Inputs: 0 the residual; then the product's own inputs in its order (`Conv`: `X`, `W`,
//!   `B`; `Gemm`: `A`, `B`, `C`; `MatMul`: `A`, `B`); a bias added after the product, or an
//!   inference `BatchNormalization`'s four parameters, from slot 4 (slot 3 for `MatMul`),
//!   named by the attribute `bias_input` or `norm_input` (the first slot); a per-channel scale
//!   multiplied after that at the slot named by `scale_input`.
//! - Attributes: the product's own (`strides`, `transA`, ...), the slot attributes above, and
//!   `out_perm` (a `Transpose` of the product's result before the add, written with strides).
//! - Output: the sum, which the planner may place over input 0 where the residual dies
//!   there (never over an input another operand reads).
//!
//! # `Gelu`, `QuickGelu`, `Swish` (`gelu`, `silu`)
//!
//! ONNX-named element-wise activations of one input: GELU (`approximate = "tanh"` for the
//! tanh form), `x · σ(c · x)` (the factor `c` is in the replaced nodes) and `x · σ(x)`.
//!
//! # `LayerNormalization`, `RMSNormalization`, `GroupNormalization` (`norm`)
//!
//! ONNX-named normalisations: inputs `X`, `scale`, `bias` (layer and group; `scale` and
//! `bias` optional where the graph applied none), `X`, `scale` (RMS). Attributes: `axis`
//! (negative: the last `-axis` axes are normalised) or `num_groups`. The epsilon and any
//! `float32` casts around the statistics are in the replaced nodes.
//!
//! # `memplan.SkipNorm` (`norm`, inference)
//!
//! ONNX Runtime's one-output `com.microsoft.SkipLayerNormalization` (or
//! `SkipSimplifiedLayerNormalization`): the same inputs (`x`, `skip`, `gamma`, ...) and
//! attributes, plus `normalization` (the ONNX Runtime op it stands for). A row-wise kernel
//! that reads a row of `x` and of `skip` before writing it: its output may be placed over `x`.
//!
//! # `memplan.BiasAct` (`bias-act`)
//!
//! `activation(x + bias)`. Inputs: 0 `x`, 1 `bias` (smaller, broadcast along `x`'s last
//! axes). Attributes: `activation` (the activation's op: `Relu`, `Gelu`, `Sigmoid`, `Tanh`,
//! `QuickGelu`, `Swish`, ...; ONNX Runtime's `BiasGelu` is `com.microsoft.Gelu` and its
//! `FastGelu` stays `com.microsoft.FastGelu`) and that activation's own attributes. Its output may be placed over `x`.
//!
//! # Copies made by `constants`
//!
//! Not kernels: ordinary nodes copied to each reader of a tensor built from shapes and
//! constants alone, marked [`crate::ATTR_AT_USE`] (run where used, on every run, never folded
//! at load).
