//! The `hf` runtime's [`Estimate`]: the workload turned into an [`eager`](super::eager)
//! step, its timeline's peak as `total_bytes`, and the caching allocator's margin from
//! replaying the step's allocations ([`super::allocator`]); for training, the step as
//! memplan's own planner places it ([`super::step_arena`]).

use super::eager::{self, Setup};
use super::{
    AttentionImpl, Checkpointing, Estimate, EstimateError, Logits, Optimizer, OptimizerKernel,
    Precision, Runtime, TransformerConfig, Workload,
};

/// The `hf` estimate of `workload`; `fused` is the fused runtime's, whose exact counts
/// (parameters, KV bytes a token) and inference arena figure are kept; with `arena`, a
/// training step is also planned by memplan's planner.
pub(crate) fn estimate(
    config: &TransformerConfig,
    workload: &Workload,
    fused: &Estimate,
    arena: bool,
) -> Result<Estimate, EstimateError> {
    let report = step_report(config, workload, fused)?;
    let arena_step = if arena && workload.training.is_some() {
        Some(super::step_arena::plan_step(&report)?.arena)
    } else {
        None
    };
    let margin = super::allocator::margin(&report.events, report.peak.bytes);
    let mut e = *fused;
    e.runtime = Runtime::Hf;
    e.weights_bytes = report.weights_bytes;
    e.kv_cache_bytes = report.kv_cache_bytes;
    e.activation_bytes = report.activation_bytes;
    e.gradients_bytes = report.gradients_bytes;
    e.optimizer_bytes = report.optimizer_bytes;
    e.total_bytes = report.peak.bytes;
    e.peak_phase = Some(report.peak.phase);
    e.phases = Some(report.phases);
    e.allocator_margin_bytes = margin;
    e.arena_step = arena_step;
    e.per_device = e.whole();
    Ok(e)
}

/// The training step of `workload` under the `hf` runtime as memplan's planner places it:
/// the step graph, its plan and the figures ([`super::step_arena`]).
pub(crate) fn step_plan(
    config: &TransformerConfig,
    workload: &Workload,
    fused: &Estimate,
) -> Result<super::StepPlan, EstimateError> {
    if workload.training.is_none() {
        return super::bad_setting(
            "training",
            "the step plan is of a training step: give an optimizer",
        );
    }
    super::step_arena::plan_step(&step_report(config, workload, fused)?)
}

/// The tape's run of `workload` (a training step or an inference forward).
fn step_report(
    config: &TransformerConfig,
    workload: &Workload,
    fused: &Estimate,
) -> Result<eager::StepReport, EstimateError> {
    if let Some(why) = workload.hf_unsupported() {
        return super::bad_setting(
            "runtime",
            format!(
                "hf models one device of transformers on PyTorch; {why} are sized by the fused runtime"
            ),
        );
    }
    if !workload.dtype.is_float() {
        return super::bad_setting(
            "runtime",
            format!(
                "hf runs activations in a float dtype, not {}",
                workload.dtype
            ),
        );
    }
    let attention = check_attention(config, workload)?;
    let training = workload.training;
    let setup = Setup {
        batch: workload.batch,
        seq: fused.seq,
        dtype: workload.dtype,
        attention,
        precision: training.map_or(Precision::Pure, |t| t.precision),
        optimizer: training.map_or(Optimizer::AdamW, |t| t.optimizer),
        kernel: training.map_or(OptimizerKernel::Foreach, |t| t.kernel),
        checkpoint: training.map_or(Checkpointing::None, |t| t.checkpointing),
        last_logits: workload.logits == Logits::Last,
        events: true,
    };
    if training.is_some_and(|t| t.precision == Precision::Fp32) && attention == AttentionImpl::Flash
    {
        return super::bad_setting(
            "attention",
            "flash runs 16-bit inputs: use the amp, mixed or pure precision, or sdpa attention",
        );
    }
    if training.is_some() {
        eager::train_step(config, &setup)
    } else {
        eager::infer_forward(config, &setup)
    }
}

/// The attention implementation transformers runs: the one asked for, refused where the
/// family's modelling code refuses it (Gemma 2's softcapping has no SDPA path).
fn check_attention(
    config: &TransformerConfig,
    workload: &Workload,
) -> Result<AttentionImpl, EstimateError> {
    use super::Architecture as A;
    let a = workload.attention;
    if a == AttentionImpl::Sdpa && matches!(config.architecture, A::Gemma2 | A::GptOss) {
        // transformers' default where a family has no SDPA path (Gemma 2's softcapping,
        // gpt-oss's attention sinks).
        return Ok(AttentionImpl::Eager);
    }
    if a == AttentionImpl::Flash && matches!(config.architecture, A::Bert | A::Vit) {
        return super::bad_setting(
            "attention",
            format!(
                "flash: transformers' {} has no flash attention path: use eager or sdpa",
                config.architecture.name()
            ),
        );
    }
    Ok(a)
}
