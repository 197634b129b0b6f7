//! What memplan's fused kernels (`memplan_planner::fuse_graph`) do to memory, stated for the
//! pattern check from their definitions (docs/PLANNING.md, "Fused kernels"), independently
//! of the planner's matchers, of `memplan_ir::OpTable` and of the plan verifier:
//!
//! - `memplan.Attention` reads Q, K, V and its masks whole (every query row reads every key
//!   and value row), writes its output (and, as further outputs, the shapes of tensors the
//!   fusion removed), and needs scratch while it runs (the scores, or per-row statistics):
//!   it runs in a workspace at its step, and a plan that gives it none is reported;
//! - `memplan.ConvAdd`, `ConvTransposeAdd`, `GemmAdd`, `MatMulAdd` accumulate a product into
//!   input 0, the residual (`y[i] = r[i] + conv(x)[i]`): output 0 may be input 0's bytes;
//!   the product's own inputs are read at many indices and may not be written over;
//! - `memplan.BiasAct` applies a bias and an activation to input 0 (`y[i] = act(x[i] +
//!   b[i mod c])`): output 0 may be input 0's bytes; the bias is broadcast;
//! - `memplan.SkipNorm` normalises each row of input 0 plus the same row of input 1 (the
//!   residual; ONNX Runtime's `SkipLayerNormalization`), reading both rows before writing
//!   that row: output 0 may be input 0's bytes; the scale, shift and bias are read at every
//!   row.
//!
//! The other fused kernels are ONNX ops (`Gelu`, `QuickGelu`, `Swish`, the normalisations)
//! and follow [`crate::op_effects`]' rules for them.

/// Fused kernels whose output 0 is input 0 plus what they compute, index by index.
const INTO_FIRST: &[&str] = &[
    "memplan.ConvAdd",
    "memplan.ConvTransposeAdd",
    "memplan.GemmAdd",
    "memplan.MatMulAdd",
    "memplan.BiasAct",
];

/// Fused kernels whose output row is input 0's row (plus input 1's) normalised, each row read
/// before it is written.
const ROWS_OF_FIRST: &[&str] = &["memplan.SkipNorm"];

/// Fused kernels that need scratch while they run.
const WITH_SCRATCH: &[&str] = &["memplan.Attention"];

/// Whether fused kernel `op` computes output 0 from input `i` at the same index alone, or
/// from the same row read before it is written (so output 0 may be written over input `i`
/// when their dtypes and element counts match).
pub fn writes_over_input(op: &str, i: usize) -> bool {
    i == 0 && (INTO_FIRST.contains(&op) || ROWS_OF_FIRST.contains(&op))
}

/// Whether fused kernel `op` needs a workspace at its step.
pub fn needs_scratch(op: &str) -> bool {
    WITH_SCRATCH.contains(&op)
}
