//! The `hf` execution model: a Hugging Face model as transformers runs it on PyTorch,
//! allocation by allocation.
//!
//! `train_step` runs one steady-state training step (the optimizer states exist, as in
//! every step but the first) on the `tape`: the forward pass layer by layer (each op's
//! outputs allocated, its saved tensors kept, the rest released as Python releases them),
//! the loss, the backward in PyTorch's engine order (saved tensors released as their node
//! runs, gradients stolen or accumulated), the optimizer step with its kernel's temporaries,
//! then `zero_grad(set_to_none=True)`. The peak of the live bytes, and the phase it falls in,
//! is what PyTorch's `max_memory_allocated` reports for that step. `infer_forward` runs one
//! forward under `torch.no_grad()`.
//!
//! Precision follows the user's recipe ([`Precision`]): f32; f32 weights under autocast;
//! 16-bit weights with f32 master weights (each 16-bit gradient cast to f32 for its master
//! and released, the masters stepped and copied back); pure 16-bit. The optimizer kernel
//! ([`OptimizerKernel`]) decides the step's temporaries: `foreach` makes `sqrt(v)` for every
//! tensor at once, `per-tensor` one tensor at a time, `fused` none.

mod blocks;
mod models;
mod ops;
mod optim;
mod tape;

pub use tape::StepPhase;

pub(crate) use tape::Event;

use memplan_ir::DType;

use self::models::{Net, Run};
use self::ops::Eager;
use self::tape::{BackwardStep, Tape};
use super::{
    AttentionImpl, Checkpointing, EstimateError, Optimizer, OptimizerKernel, Precision,
    TransformerConfig,
};

pub(crate) type AttentionKind = AttentionImpl;
pub(crate) type Checkpoint = Checkpointing;

/// The largest live bytes of each phase of a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PhasePeaks {
    /// The forward pass (embeddings, layers, final norm).
    pub forward: u64,
    /// The output head and the loss.
    pub loss: u64,
    /// The backward pass.
    pub backward: u64,
    /// The optimizer step.
    pub optimizer: u64,
}

/// What a step allocated.
#[derive(Clone, Debug)]
pub(crate) struct StepReport {
    /// The peak (rounded to the allocator's blocks) and its phase.
    pub peak: tape::Peak,
    /// The peak of each phase.
    pub phases: PhasePeaks,
    /// The largest bytes that are not weights, gradients or optimizer state, outside the
    /// optimizer step.
    pub activation_bytes: u64,
    /// Weights (parameters and buffers).
    pub weights_bytes: u64,
    /// Gradients as the backward leaves them.
    pub gradients_bytes: u64,
    /// Optimizer states and master weights.
    pub optimizer_bytes: u64,
    /// KV cache (inference with a cache).
    pub kv_cache_bytes: u64,
    /// Every allocation and free of the step (and of a first step before it), for the
    /// caching allocator model.
    pub events: Vec<Event>,
    /// The index in `events` of the measured step's first event.
    pub step_start: usize,
    /// Each storage's bytes as asked for (not rounded), by the ids `events` use.
    pub raw_sizes: Vec<u64>,
}

/// The settings of an `hf` step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Setup {
    pub batch: u64,
    pub seq: u64,
    /// The 16-bit (or f32) dtype of activations and of 16-bit weights.
    pub dtype: DType,
    pub attention: AttentionImpl,
    pub precision: Precision,
    pub optimizer: Optimizer,
    pub kernel: OptimizerKernel,
    pub checkpoint: Checkpointing,
    pub last_logits: bool,
    /// Record the events (for the allocator model): also runs the first step.
    pub events: bool,
}

fn param_dtype(setup: &Setup) -> DType {
    match setup.precision {
        Precision::Fp32 | Precision::Amp => DType::F32,
        Precision::Mixed | Precision::Pure => setup.dtype,
    }
}

fn check(tape: &Tape, what: &str) -> Result<(), EstimateError> {
    if tape.overflowed() {
        Err(EstimateError::Overflow {
            what: what.to_owned(),
        })
    } else {
        Ok(())
    }
}

/// One training step of `config` (see the module docs).
pub(crate) fn train_step(
    config: &TransformerConfig,
    setup: &Setup,
) -> Result<StepReport, EstimateError> {
    let mut tape = Tape::new(setup.events);
    let mut e = Eager::new(&mut tape);
    let pdtype = param_dtype(setup);
    let net = Net::new(&mut e, config, pdtype);
    let state = optim::State::new(&mut e, &net, setup);
    let run = Run {
        batch: setup.batch,
        seq: setup.seq,
        attention: setup.attention,
        checkpoint: setup.checkpoint,
        training: true,
        last_logits: false,
        cache: false,
    };
    if setup.events {
        // The first step allocates the optimizer states at its update.
        one_step(&mut e, &net, &state, &run, setup, true);
    }
    e.tape.reset_peak();
    one_step(&mut e, &net, &state, &run, setup, false);
    check(e.tape, "the training step")?;
    let weights = net
        .params
        .iter()
        // Each parameter in its own dtype (GLM-4.5's f32 router in a 16-bit model).
        .map(|&p| e.tape.bytes(e.tape.elems(p), e.tape.dtype(p)))
        .fold(0u64, u64::saturating_add);
    let grad_bytes = weights;
    let peak = e.tape.peak();
    let phases = e.tape.phase_peaks();
    let activation = e.tape.activation_peak();
    let events = e.tape.events().to_vec();
    let step_start = e.tape.step_start();
    let raw_sizes = e.tape.raw_sizes().to_vec();
    Ok(StepReport {
        peak,
        phases,
        activation_bytes: activation,
        weights_bytes: weights,
        gradients_bytes: grad_bytes,
        optimizer_bytes: state.bytes,
        kv_cache_bytes: 0,
        events,
        step_start,
        raw_sizes,
    })
}

fn one_step(
    e: &mut Eager<'_>,
    net: &Net,
    state: &optim::State,
    run: &Run,
    setup: &Setup,
    first: bool,
) {
    if setup.precision == Precision::Amp {
        e.autocast_enter(setup.dtype);
    }
    let input = net.input(e, run);
    let loss = net.forward(e, run, input);
    if setup.precision == Precision::Amp {
        e.autocast_exit();
    }
    e.tape.set_phase(StepPhase::Backward { layer: None });
    e.tape.backward_start(loss);
    e.free(loss);
    loop {
        match e.tape.backward() {
            BackwardStep::Done => break,
            BackwardStep::Recompute(region) => recompute(e, net, run, setup, region),
        }
    }
    e.tape.set_phase(StepPhase::Optimizer);
    state.step(e, net, setup, first);
    e.tape.zero_grad();
    e.free(input);
    e.tape.set_phase(StepPhase::Start);
}

/// Recomputes checkpointed region `region` (a layer, or a layer's attention core) with the
/// autocast state of the forward.
fn recompute(e: &mut Eager<'_>, net: &Net, run: &Run, setup: &Setup, region: usize) {
    let tag = e.tape.region(region).tag;
    let fresh = e.tape.region_inputs(region);
    let start = e.tape.recompute_begin(region);
    let outer = e.take_cache();
    if setup.precision == Precision::Amp {
        e.autocast_enter(setup.dtype);
    }
    let out = net.recompute(e, run, tag, &fresh);
    if setup.precision == Precision::Amp {
        e.autocast_exit();
    }
    e.restore_cache(outer);
    e.tape.recompute_into(region, start, &fresh, &[out]);
}

/// One inference forward (the peak, the KV cache it fills).
pub(crate) fn infer_forward(
    config: &TransformerConfig,
    setup: &Setup,
) -> Result<StepReport, EstimateError> {
    // The weights' allocations are events too: the allocator replays them before the
    // forward's, as a loaded model's blocks sit in its segments.
    let mut tape = Tape::new(setup.events);
    let mut e = Eager::new(&mut tape);
    let net = Net::new(&mut e, config, setup.dtype);
    e.tape.set_grad_enabled(false);
    e.tape.reset_peak();
    let run = Run {
        batch: setup.batch,
        seq: setup.seq,
        attention: setup.attention,
        checkpoint: Checkpointing::None,
        training: false,
        last_logits: setup.last_logits,
        cache: true,
    };
    let input = net.input(&mut e, &run);
    let logits = net.forward(&mut e, &run, input);
    e.free(logits);
    e.free(input);
    let kv_cache_bytes = net.kv_cache_bytes(&mut e);
    for t in std::mem::take(&mut e.kv) {
        e.free(t);
    }
    check(e.tape, "the forward")?;
    let weights = net
        .params
        .iter()
        .map(|&p| e.tape.bytes(e.tape.elems(p), e.tape.dtype(p)))
        .fold(0u64, u64::saturating_add);
    let peak = e.tape.peak();
    Ok(StepReport {
        peak,
        phases: e.tape.phase_peaks(),
        activation_bytes: e.tape.activation_peak(),
        weights_bytes: weights,
        gradients_bytes: 0,
        optimizer_bytes: 0,
        kv_cache_bytes,
        events: e.tape.events().to_vec(),
        step_start: e.tape.step_start(),
        raw_sizes: e.tape.raw_sizes().to_vec(),
    })
}

/// A debugging aid (the `trace_step` example): every allocation and free of a training step
/// (or, with `INFER` set in the environment, an inference forward), with phases.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)] // the settings of a harness row, one by one
pub fn debug_trace(
    config: &TransformerConfig,
    batch: u64,
    seq: u64,
    dtype: DType,
    attention: AttentionImpl,
    precision: Precision,
    kernel: OptimizerKernel,
    checkpoint: Checkpointing,
) -> Vec<String> {
    let setup = Setup {
        batch,
        seq,
        dtype,
        attention,
        precision,
        optimizer: Optimizer::AdamW,
        kernel,
        checkpoint,
        last_logits: false,
        events: true,
    };
    let mut tape = Tape::new(true);
    if std::env::var("INFER").is_ok() {
        let mut e = Eager::new(&mut tape);
        let net = Net::new(&mut e, config, dtype);
        e.tape.set_grad_enabled(false);
        e.tape.trace = Some(vec!["==== STEP 2".to_owned()]);
        e.tape.reset_peak();
        let run = Run {
            batch,
            seq,
            attention,
            checkpoint: Checkpointing::None,
            training: false,
            last_logits: std::env::var("LAST").is_ok(),
            cache: true,
        };
        let input = net.input(&mut e, &run);
        let logits = net.forward(&mut e, &run, input);
        e.free(logits);
        let mut out = e.tape.trace.take().unwrap_or_default();
        out.push(format!("peak {:?}", e.tape.peak()));
        return out;
    }
    tape.trace = Some(Vec::new());
    let mut e = Eager::new(&mut tape);
    let pdtype = param_dtype(&setup);
    let net = Net::new(&mut e, config, pdtype);
    let state = optim::State::new(&mut e, &net, &setup);
    let run = Run {
        batch,
        seq,
        attention,
        checkpoint,
        training: true,
        last_logits: false,
        cache: false,
    };
    one_step(&mut e, &net, &state, &run, &setup, true);
    e.tape.trace = Some(vec!["==== STEP 2".to_owned()]);
    e.tape.reset_peak();
    one_step(&mut e, &net, &state, &run, &setup, false);
    let mut out = e.tape.trace.take().unwrap();
    out.push(format!(
        "peak {:?} phases {:?} act {}",
        e.tape.peak(),
        e.tape.phase_peaks(),
        e.tape.activation_peak()
    ));
    out
}
