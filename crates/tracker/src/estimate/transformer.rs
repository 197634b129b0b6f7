//! A transformer's memory for one workload: parameters, weights, KV cache, activations,
//! gradients and optimizer states, for the whole model and for the busiest device when it
//! is spread over several.
//!
//! Parameters are counted exactly from the config (see [`super::params`]). Activations are a
//! model of the live set, in elements of the workload's dtype, with `T = batch × seq`
//! tokens, `q = heads × head_dim` and `kv = kv_heads × head_dim`:
//!
//! - **Inference** (one forward pass, nothing kept for a backward pass), as an arena runtime
//!   such as memplan's plans runs it: a tensor's bytes are reused once its last reader has
//!   run, and elementwise activations write in place. The peak is the largest of the phases:
//!   attention holds the residual stream plus [`super::AttentionMemory::eager_peak`] (or the
//!   fused variant's), and for BERT the padding mask that current Hugging Face exports
//!   expand to `batch × seq × seq` once and every layer reads; the MLP holds the residual,
//!   its input and its hidden tensors (`gate` and `up` for a gated MLP, one for a plain one;
//!   a sparse layer holds the router's `T × experts` logits and `T × experts_per_token`
//!   routed copies of the hidden tensors and of the output); the head holds the final hidden
//!   state and the logits. Generation computes logits for the last position of each sequence
//!   only ([`Logits::Last`], `batch × vocab`); scoring a whole sequence computes them
//!   for every position ([`Logits::All`], `T × vocab`). A framework that runs activations out
//!   of place (PyTorch eager) holds one more `T × intermediate` tensor in the MLP.
//! - **Training**: what each layer saves for its backward pass, term for term the tensors of
//!   Korthikanti et al. (2022), table 2: the two norm inputs and outputs, Q, K, V, the
//!   attention context, the MLP's hidden tensors, the softmax output (eager) or the fused
//!   kernel's log-sum-exp, and where the config has dropout, a one-byte mask per dropped
//!   element plus the dropped probabilities. Times the layers, plus the head's saved tensors
//!   (`2·T·hidden + T·vocab`), plus the backward pass's working set (one layer's worth, or
//!   the logits' gradient if larger). Selective recomputation drops the attention core's
//!   `seq²` tensors; full recomputation keeps each layer's input only.
//!
//! The KV cache (decoders at inference) holds, per layer and token, `2 × kv_heads ×
//! head_dim` elements (MLA: the `kv_lora_rank + qk_rope_head_dim` latent), in the KV dtype,
//! for `min(seq, window)` tokens on a sliding layer. Every figure is checked arithmetic.

use memplan_ir::DType;

use super::eager::{PhasePeaks, StepPhase};
use super::params::{Parallelism, ParamTensor, Placement, QuantKind, WeightFormat, device_share};
use super::runtime::Runtime;
use super::step_arena::{StepArena, StepPlan};
use super::{
    Architecture, AttentionShape, Checkpointing, EstimateError, Mlp, Precision, Training,
    TransformerConfig, WorkloadFault, elements_bytes, mul, product, sum,
};

/// How attention is computed (transformers' `attn_implementation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum AttentionImpl {
    /// Scores and their softmax materialised (`O(seq²)` per head).
    Eager,
    /// `torch.nn.functional.scaled_dot_product_attention`, with the kernel PyTorch picks on a
    /// GPU for the dtype (cuDNN, flash or memory-efficient: no score matrix; the math
    /// fallback: eager's); the fused runtime counts it as a fused kernel.
    #[default]
    Sdpa,
    /// A fused kernel (FlashAttention): no score matrix in memory.
    Flash,
}

impl AttentionImpl {
    /// Every implementation, in declaration order.
    pub const ALL: [AttentionImpl; 3] = [
        AttentionImpl::Eager,
        AttentionImpl::Sdpa,
        AttentionImpl::Flash,
    ];

    /// The command-line name (`eager`, `sdpa`, `flash`).
    pub fn name(self) -> &'static str {
        match self {
            AttentionImpl::Eager => "eager",
            AttentionImpl::Sdpa => "sdpa",
            AttentionImpl::Flash => "flash",
        }
    }

    /// Whether no score matrix is materialised (the fused runtime's reading).
    pub fn fused(self) -> bool {
        self != AttentionImpl::Eager
    }
}

impl std::str::FromStr for AttentionImpl {
    type Err = String;
    fn from_str(s: &str) -> Result<AttentionImpl, String> {
        AttentionImpl::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown attention `{s}` (expected eager, sdpa or flash)"))
    }
}

/// Which positions the LM head computes logits for at inference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Logits {
    /// The last position of each sequence, as generation does.
    #[default]
    Last,
    /// Every position (scoring or perplexity over a whole sequence).
    All,
}

impl Logits {
    /// The keyword's value: `last` or `all`.
    pub fn name(self) -> &'static str {
        match self {
            Logits::Last => "last",
            Logits::All => "all",
        }
    }
}

/// What the model is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Workload {
    /// Sequences per step (per data-parallel replica).
    pub batch: u64,
    /// Tokens per sequence (the context for the KV cache). Vision models ignore it and use
    /// their patch count.
    pub seq: u64,
    /// Activation dtype (and KV cache dtype unless `kv_dtype` says otherwise).
    pub dtype: DType,
    /// Weight dtype, when it differs (unquantized tensors too).
    pub weight_dtype: Option<DType>,
    /// A quantized format for linear weights and its group size (0: per output row).
    pub quant: Option<(QuantKind, u64)>,
    /// Quantize the token embedding and the LM head too.
    pub quantize_embeddings: bool,
    /// KV cache dtype, when it differs (`f8e4m3` for an fp8 cache).
    pub kv_dtype: Option<DType>,
    /// Eager or fused attention.
    pub attention: AttentionImpl,
    /// Logits for the last position or for all (inference; training scores all).
    pub logits: Logits,
    /// A training step instead of inference.
    pub training: Option<Training>,
    /// How the model is spread over devices.
    pub parallel: Parallelism,
    /// The runtime modelled; `None` picks [`Workload::resolved_runtime`]'s default.
    pub runtime: Option<Runtime>,
}

impl Workload {
    /// This workload with [`batch`](Workload::batch) set to `batch`.
    pub fn with_batch(mut self, batch: u64) -> Workload {
        self.batch = batch;
        self
    }

    /// This workload with [`seq`](Workload::seq) set to `seq`.
    pub fn with_seq(mut self, seq: u64) -> Workload {
        self.seq = seq;
        self
    }

    /// This workload with [`dtype`](Workload::dtype) set to `dtype`.
    pub fn with_dtype(mut self, dtype: DType) -> Workload {
        self.dtype = dtype;
        self
    }

    /// This workload with [`weight_dtype`](Workload::weight_dtype) set to `weight_dtype`.
    pub fn with_weight_dtype(mut self, weight_dtype: Option<DType>) -> Workload {
        self.weight_dtype = weight_dtype;
        self
    }

    /// This workload with [`quant`](Workload::quant) set to `quant`.
    pub fn with_quant(mut self, quant: Option<(QuantKind, u64)>) -> Workload {
        self.quant = quant;
        self
    }

    /// This workload with [`quantize_embeddings`](Workload::quantize_embeddings) set
    /// to `quantize_embeddings`.
    pub fn with_quantize_embeddings(mut self, quantize_embeddings: bool) -> Workload {
        self.quantize_embeddings = quantize_embeddings;
        self
    }

    /// This workload with [`kv_dtype`](Workload::kv_dtype) set to `kv_dtype`.
    pub fn with_kv_dtype(mut self, kv_dtype: Option<DType>) -> Workload {
        self.kv_dtype = kv_dtype;
        self
    }

    /// This workload with [`attention`](Workload::attention) set to `attention`.
    pub fn with_attention(mut self, attention: AttentionImpl) -> Workload {
        self.attention = attention;
        self
    }

    /// This workload with [`logits`](Workload::logits) set to `logits`.
    pub fn with_logits(mut self, logits: Logits) -> Workload {
        self.logits = logits;
        self
    }

    /// This workload with [`training`](Workload::training) set to `training`.
    pub fn with_training(mut self, training: Option<Training>) -> Workload {
        self.training = training;
        self
    }

    /// This workload with [`parallel`](Workload::parallel) set to `parallel`.
    pub fn with_parallel(mut self, parallel: Parallelism) -> Workload {
        self.parallel = parallel;
        self
    }

    /// This workload with [`runtime`](Workload::runtime) set to `runtime`.
    pub fn with_runtime(mut self, runtime: Option<Runtime>) -> Workload {
        self.runtime = runtime;
        self
    }
}

impl Workload {
    /// Inference at `batch × seq` in `dtype`, SDPA attention, last-position logits, one
    /// device, the default runtime.
    pub fn inference(batch: u64, seq: u64, dtype: DType) -> Workload {
        Workload {
            batch,
            seq,
            dtype,
            weight_dtype: None,
            quant: None,
            quantize_embeddings: false,
            kv_dtype: None,
            attention: AttentionImpl::Sdpa,
            logits: Logits::Last,
            training: None,
            parallel: Parallelism::default(),
            runtime: None,
        }
    }

    /// Why the `hf` model does not describe this workload, if it does not: tensor,
    /// pipeline or expert parallelism, ZeRO, quantized weights, a weight or KV dtype apart
    /// from the activations'.
    pub fn hf_unsupported(&self) -> Option<&'static str> {
        let p = &self.parallel;
        if p.tp > 1 || p.pp > 1 || p.ep > 1 {
            return Some("tensor, pipeline and expert parallelism");
        }
        if p.zero > 0 && p.dp > 1 {
            return Some("ZeRO sharding");
        }
        if self.quant.is_some() {
            return Some("quantized weights");
        }
        if self.weight_dtype.is_some_and(|d| d != self.dtype) && self.training.is_none() {
            return Some("a weight dtype apart from the activations'");
        }
        if self.kv_dtype.is_some_and(|d| d != self.dtype) {
            return Some("a KV-cache dtype apart from the activations'");
        }
        None
    }

    /// The runtime an estimate follows: the one asked for, else `hf` where it describes
    /// the workload ([`Workload::hf_unsupported`]) and `fused` where it does not.
    pub fn resolved_runtime(&self) -> Runtime {
        self.runtime.unwrap_or(if self.hf_unsupported().is_some() {
            Runtime::Fused
        } else {
            Runtime::Hf
        })
    }

    /// How the weights are stored.
    pub fn weight_format(&self) -> WeightFormat {
        WeightFormat {
            dtype: self.weight_dtype.unwrap_or(self.dtype),
            quant: self.quant,
            quantize_embeddings: self.quantize_embeddings,
        }
    }

    /// The KV cache dtype.
    pub fn kv_dtype(&self) -> DType {
        self.kv_dtype.unwrap_or(self.dtype)
    }
}

/// One device's memory (or the whole model's), in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Breakdown {
    /// Weights (with ZeRO-3, this device's shard plus the gathered largest layer).
    pub weights_bytes: u64,
    /// KV cache.
    pub kv_cache_bytes: u64,
    /// Activation peak.
    pub activation_bytes: u64,
    /// Gradients.
    pub gradients_bytes: u64,
    /// Optimizer states and master weights.
    pub optimizer_bytes: u64,
    /// The sum of the above.
    pub total_bytes: u64,
}

impl Breakdown {
    fn total(mut self) -> Result<Breakdown, EstimateError> {
        self.total_bytes = sum(
            &[
                self.weights_bytes,
                self.kv_cache_bytes,
                self.activation_bytes,
                self.gradients_bytes,
                self.optimizer_bytes,
            ],
            "the total",
        )?;
        Ok(self)
    }
}

/// The memory of one workload, in bytes (parameters in elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Estimate {
    /// The sequence length used (a vision model's patch count plus one).
    pub seq: u64,
    /// Parameters, counted exactly.
    pub parameters: u64,
    /// Parameters a token goes through (MoE: routed experts it is not sent to left out).
    pub active_parameters: u64,
    /// The weights in their format, one copy of the whole model.
    pub weights_bytes: u64,
    /// The KV cache (decoders at inference; 0 otherwise), the whole batch.
    pub kv_cache_bytes: u64,
    /// KV cache bytes one token adds across every layer (decoders; 0 otherwise).
    pub kv_bytes_per_token: u64,
    /// The activation peak on one device without parallelism.
    pub activation_bytes: u64,
    /// Gradients (training only).
    pub gradients_bytes: u64,
    /// Optimizer states and the `f32` master weights (training only).
    pub optimizer_bytes: u64,
    /// The sum of the above: the memory of the workload on one device.
    pub total_bytes: u64,
    /// Devices the workload is spread over (`tp × pp × dp`).
    pub devices: u64,
    /// The busiest device (the largest pipeline stage); equal to the figures above on one
    /// device.
    pub per_device: Breakdown,
    /// The runtime the figures follow.
    pub runtime: Runtime,
    /// Where the peak falls (`hf`: the phase of the step's largest live bytes; `None` for
    /// the fused runtime, whose total is a sum).
    pub peak_phase: Option<StepPhase>,
    /// The largest live bytes of each phase (`hf`).
    pub phases: Option<PhasePeaks>,
    /// What PyTorch's caching allocator holds beyond `total_bytes` at its peak: blocks
    /// rounded up, segments rounded up to 2 MiB or 20 MiB, free space between live blocks
    /// that no request fits (`max_memory_reserved - max_memory_allocated`).
    pub allocator_margin_bytes: u64,
    /// Inference: the activation peak of an arena runtime (memplan's own plan: buffers
    /// reused as soon as their last reader ran, element-wise ops in place), for comparison.
    pub arena_activation_bytes: Option<u64>,
    /// `hf` training, from [`estimate_with_arena`] (`None` from [`estimate`]): the step as
    /// memplan's own planner places it (the tape's allocations, with their lifetimes, at
    /// fixed offsets in one arena beside the resident weights and states), a figure apart
    /// from PyTorch's `total_bytes` ([`step_plan`]).
    pub arena_step: Option<StepArena>,
}

impl Estimate {
    /// The whole job's figures (this estimate's own fields) as a [`Breakdown`]; on one
    /// device without parallelism, `per_device` is the same.
    pub fn whole(&self) -> Breakdown {
        Breakdown {
            weights_bytes: self.weights_bytes,
            kv_cache_bytes: self.kv_cache_bytes,
            activation_bytes: self.activation_bytes,
            gradients_bytes: self.gradients_bytes,
            optimizer_bytes: self.optimizer_bytes,
            total_bytes: self.total_bytes,
        }
    }

    /// `total_bytes` plus the allocator's margin: what the device must hold.
    pub fn reserved_bytes(&self) -> u64 {
        self.per_device
            .total_bytes
            .saturating_add(self.allocator_margin_bytes)
    }
}

/// The dimensions one device computes with: heads, MLP columns and vocabulary divided by
/// tensor parallelism (key/value heads at least one), experts by expert parallelism.
#[derive(Clone, Copy, Debug)]
struct DeviceDims {
    heads: u64,
    kv_heads: u64,
    intermediate: u64,
    vocab: u64,
    moe_intermediate: u64,
    shared_intermediate: u64,
    /// Residual-sized tensors are split along the sequence (training with sequence
    /// parallelism) by this factor.
    residual_split: u64,
}

fn device_dims(config: &TransformerConfig, p: &Parallelism, training: bool) -> DeviceDims {
    let tp = p.tp.max(1);
    let (moe_i, shared_i) = config
        .moe
        .as_ref()
        .map_or((0, 0), |m| (m.intermediate, m.shared_intermediate));
    DeviceDims {
        heads: config.heads / tp,
        kv_heads: if config.mla.is_some() {
            config.heads / tp
        } else {
            p.kv_heads_per_device(config.kv_heads)
        },
        intermediate: config.intermediate.div_ceil(tp),
        vocab: config.vocab.div_ceil(tp),
        moe_intermediate: if p.ep > 1 { moe_i } else { moe_i.div_ceil(tp) },
        shared_intermediate: shared_i.div_ceil(tp),
        residual_split: if training && p.sequence_parallel {
            tp
        } else {
            1
        },
    }
}

impl TransformerConfig {
    /// KV cache elements one token adds to layer `i` on a device holding `kv_heads` of the
    /// key/value heads (MLA: the whole latent, which every tensor-parallel device keeps).
    pub(crate) fn kv_layer_elements(&self, kv_heads: u64) -> Result<u64, EstimateError> {
        let w = "the KV cache";
        match self.mla {
            Some(m) => sum(&[m.kv_lora_rank, m.qk_rope_head_dim], w),
            None => product(&[2, kv_heads, self.head_dim], w),
        }
    }

    /// KV cache bytes per token, every layer, in `dtype` on a device holding `kv_heads`
    /// key/value heads of `layers`.
    pub fn kv_bytes_per_token(&self, dtype: DType) -> Result<u64, EstimateError> {
        if !self.architecture.is_decoder() {
            return Ok(0);
        }
        let per_layer = self.kv_layer_elements(self.kv_heads)?;
        elements_bytes(
            mul(per_layer, self.layers, "the KV cache")?,
            dtype,
            "the KV cache",
        )
    }

    /// KV cache bytes of `batch` sequences of `seq` tokens over `layers` on a device
    /// holding `kv_heads` key/value heads: a sliding layer holds `min(seq, window)` tokens.
    fn kv_cache_bytes(
        &self,
        layers: std::ops::Range<u64>,
        kv_heads: u64,
        batch: u64,
        seq: u64,
        dtype: DType,
    ) -> Result<u64, EstimateError> {
        if !self.architecture.is_decoder() {
            return Ok(0);
        }
        let w = "the KV cache";
        let per_layer = self.kv_layer_elements(kv_heads)?;
        let mut tokens = 0u64;
        for i in layers {
            let held = self.layer_window(i).map_or(seq, |window| seq.min(window));
            tokens = sum(&[tokens, held], w)?;
        }
        elements_bytes(product(&[batch, tokens, per_layer], w)?, dtype, w)
    }
}

/// The tensors one pipeline stage holds: the embeddings on the first, the layers of its
/// range, the head on the last (plus a copy of a tied embedding as its LM head when the
/// first and last stages differ).
pub(crate) fn stage_tensors(
    config: &TransformerConfig,
    p: &Parallelism,
    stage: usize,
) -> Result<Vec<ParamTensor>, EstimateError> {
    let stages = p.stages(config.layers);
    let last = stages.len().saturating_sub(1);
    let mut out = Vec::new();
    if stage == 0 {
        out.extend(config.embedding_tensors()?);
    }
    if let Some(range) = stages.get(stage) {
        for i in range.clone() {
            out.extend(config.layer_tensors(i)?);
        }
    }
    if stage == last {
        out.extend(config.head_tensors()?);
        if last > 0 && config.tied_embeddings && config.architecture.is_decoder() {
            let embedding = config
                .embedding_tensors()?
                .into_iter()
                .find(|t| t.name == "embed_tokens");
            out.extend(embedding.map(|t| ParamTensor {
                name: "lm_head (tied copy)",
                place: Placement::Head,
                ..t
            }));
        }
    }
    Ok(out)
}

/// Elements and bytes of `tensors` on one device, dense and routed apart.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    dense_elements: u64,
    routed_elements: u64,
    bytes: u64,
}

fn held(
    config: &TransformerConfig,
    tensors: &[ParamTensor],
    p: &Parallelism,
    format: &WeightFormat,
) -> Result<Held, EstimateError> {
    let w = "the weights of a device";
    let mut h = Held::default();
    for t in tensors {
        let (rows, cols, copies) = device_share(t, p, config.kv_heads);
        let elements = product(&[rows, cols, copies], w)?;
        if t.routed {
            h.routed_elements = sum(&[h.routed_elements, elements], w)?;
        } else {
            h.dense_elements = sum(&[h.dense_elements, elements], w)?;
        }
        h.bytes = sum(&[h.bytes, format.bytes(t.role, rows, cols, copies)?], w)?;
    }
    Ok(h)
}

/// The memory of `config` running `workload`.
///
/// ```
/// use memplan_ir::DType;
/// use memplan_tracker::estimate::{
///     Checkpointing, Optimizer, OptimizerKernel, Precision, Training, TransformerConfig,
///     Workload, estimate,
/// };
/// let json = r#"{"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
///   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
///   "vocab_size": 32000, "sliding_window": null}"#;
/// let config = TransformerConfig::from_hf_json(json).unwrap();
/// let serve = estimate(&config, &Workload::inference(1, 4096, DType::BF16)).unwrap();
/// assert_eq!(serve.kv_cache_bytes, 4096 * 32 * 8 * 128 * 2 * 2); // 512 MiB
/// let mut train = Workload::inference(1, 4096, DType::BF16);
/// train.training = Some(
///     Training::new(Optimizer::AdamW)
///         .with_precision(Precision::Mixed)
///         .with_kernel(OptimizerKernel::Fused)
///         .with_checkpointing(Checkpointing::Full),
/// );
/// let e = estimate(&config, &train).unwrap();
/// assert_eq!(e.weights_bytes + e.gradients_bytes + e.optimizer_bytes, 16 * e.parameters);
/// ```
pub fn estimate(
    config: &TransformerConfig,
    workload: &Workload,
) -> Result<Estimate, EstimateError> {
    estimate_planned(config, workload, false)
}

/// [`estimate`], and for an `hf` training step also [`Estimate::arena_step`]: the step
/// planned by memplan's own planner ([`step_plan`]). Planning the step costs more than the
/// estimate (thousands of buffers), so [`estimate`], which searches call many times,
/// leaves it out; `memplan estimate` reports it.
pub fn estimate_with_arena(
    config: &TransformerConfig,
    workload: &Workload,
) -> Result<Estimate, EstimateError> {
    estimate_planned(config, workload, true)
}

fn estimate_planned(
    config: &TransformerConfig,
    workload: &Workload,
    arena: bool,
) -> Result<Estimate, EstimateError> {
    let fused = fused_estimate(config, workload)?;
    match workload.resolved_runtime() {
        Runtime::Fused => Ok(fused),
        Runtime::Hf => super::hf::estimate(config, workload, &fused, arena),
        Runtime::Vllm => super::bad_setting(
            "runtime",
            "vllm sizes a serving engine's KV cache: use the serving capacity (`serving_capacity`)",
        ),
    }
}

/// The training step of `workload` (run by the `hf` runtime, whatever `workload.runtime`
/// says) as memplan's own planner places it: the step graph (one node per allocation, in
/// PyTorch's order), its plan, and the figures [`Estimate::arena_step`] reports. The plan
/// passes `memplan_planner::verify_plan` against the graph.
///
/// ```
/// use memplan_ir::DType;
/// use memplan_tracker::estimate::{Optimizer, Training, TransformerConfig, Workload, step_plan};
/// let json = r#"{"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
///   "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000}"#;
/// let config = TransformerConfig::from_hf_json(json).unwrap();
/// let mut w = Workload::inference(2, 128, DType::BF16);
/// w.training = Some(Training::new(Optimizer::AdamW));
/// let step = step_plan(&config, &w).unwrap();
/// memplan_planner::verify_plan(&step.graph, &step.plan).unwrap();
/// assert!(step.arena.arena_bytes >= step.arena.lower_bound_bytes);
/// ```
pub fn step_plan(
    config: &TransformerConfig,
    workload: &Workload,
) -> Result<StepPlan, EstimateError> {
    let fused = fused_estimate(config, workload)?;
    super::hf::step_plan(config, workload, &fused)
}

/// The fused runtime's estimate (and, for inference, the arena figure).
fn fused_estimate(
    config: &TransformerConfig,
    workload: &Workload,
) -> Result<Estimate, EstimateError> {
    let b = workload.batch;
    let s = config.fixed_sequence().unwrap_or(workload.seq);
    if b == 0 || s == 0 {
        return Err(EstimateError::Invalid(WorkloadFault::Empty {
            batch: b,
            seq: s,
        }));
    }
    if config.learned_positions > 0 && s > config.learned_positions {
        return Err(EstimateError::Invalid(WorkloadFault::PastPositions {
            seq: s,
            positions: config.learned_positions,
        }));
    }
    let p = workload.parallel;
    p.check(config)?;
    let format = workload.weight_format();
    let parameters = config.parameters()?;
    let active_parameters = config.active_parameters()?;
    let single = Parallelism::default();
    let all = config.inventory()?;
    let whole = held(config, &all, &single, &format)?;
    let kv_dtype = workload.kv_dtype();
    let kv_bytes_per_token = config.kv_bytes_per_token(kv_dtype)?;

    let one = device_memory(config, workload, &single, 0, whole, s)?;
    let devices = p.devices()?;
    let per_device = if p.is_single() {
        one
    } else {
        let mut busiest = Breakdown::default();
        for stage in 0..p.pp as usize {
            let tensors = stage_tensors(config, &p, stage)?;
            let h = held(config, &tensors, &p, &format)?;
            let d = device_memory(config, workload, &p, stage, h, s)?;
            if d.total_bytes > busiest.total_bytes {
                busiest = d;
            }
        }
        busiest
    };
    Ok(Estimate {
        seq: s,
        parameters,
        active_parameters,
        weights_bytes: one.weights_bytes,
        kv_cache_bytes: one.kv_cache_bytes,
        kv_bytes_per_token,
        activation_bytes: one.activation_bytes,
        gradients_bytes: one.gradients_bytes,
        optimizer_bytes: one.optimizer_bytes,
        total_bytes: one.total_bytes,
        devices,
        per_device,
        runtime: Runtime::Fused,
        peak_phase: None,
        phases: None,
        allocator_margin_bytes: 0,
        arena_activation_bytes: workload.training.is_none().then_some(one.activation_bytes),
        arena_step: None,
    })
}

/// The memory of one device of pipeline stage `stage` holding `h` of the weights.
fn device_memory(
    config: &TransformerConfig,
    workload: &Workload,
    p: &Parallelism,
    stage: usize,
    h: Held,
    s: u64,
) -> Result<Breakdown, EstimateError> {
    let b = workload.batch;
    let stages = p.stages(config.layers);
    let range = stages.get(stage).cloned().unwrap_or(0..config.layers);
    let first = stage == 0;
    let last = stage + 1 == stages.len();
    let dims = device_dims(config, p, workload.training.is_some());
    let Some(training) = workload.training else {
        let kv_cache_bytes =
            config.kv_cache_bytes(range, dims.kv_heads, b, s, workload.kv_dtype())?;
        let logits_rows = match workload.logits {
            Logits::Last => b,
            Logits::All => mul(b, s, "the logits")?,
        };
        let activation_bytes = inference_activations(
            config,
            &dims,
            Step {
                batch: b,
                seq: s,
                logits_rows: if last { logits_rows } else { 0 },
                logits_dtype: workload.dtype,
                dtype: workload.dtype,
                attention: workload.attention,
            },
        )?;
        return Breakdown {
            weights_bytes: h.bytes,
            kv_cache_bytes,
            activation_bytes,
            ..Breakdown::default()
        }
        .total();
    };

    // Training: ZeRO shards what the data-parallel replicas of a tensor hold alike; the
    // replicas of a routed expert are the `tp × dp / ep` devices holding it under expert
    // parallelism.
    let w = "the training state";
    let dense_replicas = p.dp;
    let routed_replicas = if p.ep > 1 {
        mul(p.tp, p.dp, w)? / p.ep
    } else {
        p.dp
    };
    let shard = |elements: u64, replicas: u64| elements.div_ceil(replicas.max(1));
    let elements = sum(&[h.dense_elements, h.routed_elements], w)?;
    let sharded = sum(
        &[
            shard(h.dense_elements, dense_replicas),
            shard(h.routed_elements, routed_replicas),
        ],
        w,
    )?;
    let zero = p.zero;
    // ZeRO-3 gathers one layer at a time: its weights, and its gradients before they are
    // reduced to their owners (DeepSpeed's estimator counts the same `4 × largest layer`
    // bytes in 16-bit).
    let largest = if zero >= 3 {
        largest_layer_elements(config, p, &range)?
    } else {
        0
    };
    // f32 recipes keep f32 weights and gradients whatever the activation dtype.
    let f32_weights = matches!(training.precision, Precision::Fp32 | Precision::Amp);
    let weight_dtype = if f32_weights {
        DType::F32
    } else {
        workload.weight_format().dtype
    };
    let weights_bytes = if zero >= 3 {
        elements_bytes(sum(&[sharded, largest], w)?, weight_dtype, w)?
    } else if f32_weights {
        elements_bytes(elements, DType::F32, w)?
    } else {
        h.bytes
    };
    let gradients_bytes = elements_bytes(
        match zero {
            0 | 1 => elements,
            2 => sharded,
            _ => sum(&[sharded, largest], w)?,
        },
        if f32_weights {
            DType::F32
        } else {
            workload.dtype
        },
        w,
    )?;
    let weight_element = elements_bytes(1, weight_dtype, w)?;
    let optimizer_bytes = mul(
        if zero >= 1 { sharded } else { elements },
        training.optimizer_bytes_per_parameter(weight_element),
        w,
    )?;
    let activation_bytes =
        training_activations(config, workload, &dims, p, training, s, &range, first, last)?;
    Breakdown {
        weights_bytes,
        kv_cache_bytes: 0,
        activation_bytes,
        gradients_bytes,
        optimizer_bytes,
        ..Breakdown::default()
    }
    .total()
}

/// The elements one device holds of the largest layer of `range`.
fn largest_layer_elements(
    config: &TransformerConfig,
    p: &Parallelism,
    range: &std::ops::Range<u64>,
) -> Result<u64, EstimateError> {
    let w = "the largest layer";
    let mut largest = 0;
    for i in range.clone() {
        let mut n = 0u64;
        for t in config.layer_tensors(i)? {
            let (rows, cols, copies) = device_share(&t, p, config.kv_heads);
            n = sum(&[n, product(&[rows, cols, copies], w)?], w)?;
        }
        largest = largest.max(n);
    }
    Ok(largest)
}

/// One forward step: `batch` sequences of `seq` tokens attending to each other, logits for
/// `logits_rows` positions in `logits_dtype`.
#[derive(Clone, Copy, Debug)]
struct Step {
    batch: u64,
    seq: u64,
    logits_rows: u64,
    logits_dtype: DType,
    dtype: DType,
    attention: AttentionImpl,
}

/// The bytes of each layer-level tensor kind on one device, for `tokens` tokens.
struct LayerTensors {
    residual: u64,
    q: u64,
    kv: u64,
    /// The dense MLP's hidden tensors (gated: gate, up and their product; plain: two).
    mlp_saved: u64,
    /// The dense MLP's hidden tensors live at once in a forward pass.
    mlp_live: u64,
    /// A sparse layer's: router logits plus the routed and shared hidden tensors and the
    /// routed outputs, saved and live.
    moe_saved: u64,
    moe_live: u64,
}

fn layer_tensors(
    config: &TransformerConfig,
    dims: &DeviceDims,
    tokens: u64,
    dtype: DType,
) -> Result<LayerTensors, EstimateError> {
    let w = "activations";
    let bytes = |elements: u64| elements_bytes(elements, dtype, w);
    let (saved_per, live_per) = match config.mlp {
        Mlp::Gated => (3, 2),
        Mlp::Plain => (2, 1),
    };
    let q_width = match config.mla {
        Some(m) => mul(dims.heads, m.qk_head_dim(), w)?,
        None => mul(dims.heads, config.head_dim, w)?,
    };
    let kv_width = match config.mla {
        // Keys (nope + rope) and values per head after the latent's up-projection, halved
        // to stand for one of the two like a grouped K or V.
        Some(m) => mul(dims.heads, sum(&[m.qk_head_dim(), m.v_head_dim], w)?, w)? / 2,
        None => mul(dims.kv_heads, config.head_dim, w)?,
    };
    let (moe_saved, moe_live) = match &config.moe {
        Some(moe) if moe.sparse_layers.iter().any(|&s| s) => {
            let routed = mul(tokens, moe.experts_per_token, w)?;
            let router = mul(tokens, moe.experts, w)?;
            let routed_out = mul(routed, config.hidden, w)?;
            let routed_hidden = mul(routed, dims.moe_intermediate, w)?;
            let shared_hidden = mul(tokens, dims.shared_intermediate, w)?;
            (
                bytes(sum(
                    &[
                        router,
                        mul(saved_per, routed_hidden, w)?,
                        mul(saved_per, shared_hidden, w)?,
                    ],
                    w,
                )?)?,
                bytes(sum(
                    &[
                        router,
                        routed_out,
                        mul(live_per, routed_hidden.max(shared_hidden), w)?,
                    ],
                    w,
                )?)?,
            )
        }
        _ => (0, 0),
    };
    Ok(LayerTensors {
        residual: bytes(mul(tokens, config.hidden, w)?)?,
        q: bytes(mul(tokens, q_width, w)?)?,
        kv: bytes(mul(tokens, kv_width, w)?)?,
        mlp_saved: bytes(product(&[saved_per, tokens, dims.intermediate], w)?)?,
        mlp_live: bytes(product(&[live_per, tokens, dims.intermediate], w)?)?,
        moe_saved,
        moe_live,
    })
}

fn attention_shape(config: &TransformerConfig, dims: &DeviceDims, step: &Step) -> AttentionShape {
    AttentionShape {
        batch: step.batch,
        heads: dims.heads.max(1),
        kv_heads: if config.mla.is_some() {
            dims.heads.max(1)
        } else {
            dims.kv_heads.min(dims.heads).max(1)
        },
        seq_q: step.seq,
        seq_kv: step.seq,
        head_dim: config.head_dim,
        dtype: step.dtype,
    }
}

/// The activation peak of one forward step with nothing kept for a backward pass.
fn inference_activations(
    config: &TransformerConfig,
    dims: &DeviceDims,
    step: Step,
) -> Result<u64, EstimateError> {
    let w = "activations";
    let tokens = mul(step.batch, step.seq, w)?;
    let t = layer_tensors(config, dims, tokens, step.dtype)?;
    let mut shape = attention_shape(config, dims, &step);
    if !shape.heads.is_multiple_of(shape.kv_heads) {
        shape.kv_heads = shape.heads;
    }
    let attention = shape.memory()?;
    let attention_peak = match step.attention {
        AttentionImpl::Eager => attention.eager_peak,
        AttentionImpl::Sdpa | AttentionImpl::Flash => attention.flash_peak,
    };
    let mask = if config.architecture == Architecture::Bert {
        elements_bytes(
            product(&[step.batch, step.seq, step.seq], w)?,
            step.dtype,
            w,
        )?
    } else {
        0
    };
    // With a parallel residual the attention output waits for the MLP's.
    let waiting = if config.parallel_residual {
        t.residual
    } else {
        0
    };
    let logits = if config.architecture.is_decoder() {
        elements_bytes(
            mul(step.logits_rows, dims.vocab, w)?,
            step.logits_dtype,
            "the logits",
        )?
    } else {
        0
    };
    Ok([
        sum(&[t.residual, mask, attention_peak], w)?,
        sum(
            &[t.residual, t.residual, waiting, t.mlp_live.max(t.moe_live)],
            w,
        )?,
        sum(&[t.residual, logits], w)?,
    ]
    .into_iter()
    .fold(0, u64::max))
}

/// The activation bytes of a training step on one device of stage `range`.
#[allow(clippy::too_many_arguments)]
fn training_activations(
    config: &TransformerConfig,
    workload: &Workload,
    dims: &DeviceDims,
    p: &Parallelism,
    training: Training,
    s: u64,
    range: &std::ops::Range<u64>,
    first: bool,
    last: bool,
) -> Result<u64, EstimateError> {
    let w = "activations";
    let b = workload.batch;
    let dtype = if training.precision == Precision::Fp32 {
        DType::F32
    } else {
        workload.dtype
    };
    let tokens = mul(b, s, w)?;
    let t = layer_tensors(config, dims, tokens, dtype)?;
    let step = Step {
        batch: b,
        seq: s,
        logits_rows: tokens,
        logits_dtype: dtype,
        dtype,
        attention: workload.attention,
    };
    let attention = attention_shape(config, dims, &step).memory()?;
    let split = dims.residual_split.max(1);
    let residual = t.residual.div_ceil(split);
    // One-byte dropout masks: on the attention and MLP outputs, and on the probabilities.
    let hidden_masks = if config.hidden_dropout {
        mul(2, mul(tokens, config.hidden, w)?, w)?.div_ceil(split)
    } else {
        0
    };
    let (core, core_recomputable) = match workload.attention {
        AttentionImpl::Eager if config.attention_dropout => {
            let elements = product(&[b, dims.heads, s, s], w)?;
            // Softmax output, mask, dropped probabilities.
            let core = sum(&[attention.scores, elements, attention.scores], w)?;
            (core, core)
        }
        AttentionImpl::Eager => (attention.scores, attention.scores),
        AttentionImpl::Sdpa | AttentionImpl::Flash => (attention.logsumexp, 0),
    };
    let mlp = if config.moe.is_some() {
        t.mlp_saved.max(t.moe_saved)
    } else {
        t.mlp_saved
    };
    let layer = sum(
        &[
            mul(4, residual, w)?,
            mul(2, t.q, w)?,
            mul(2, t.kv, w)?,
            mlp,
            core,
            hidden_masks,
        ],
        w,
    )?;
    let stage_layers = range.end - range.start;
    // The first stage of a 1F1B pipeline holds `pp` micro-batches in flight.
    let in_flight = if first { p.pp } else { 1 };
    let kept_layers = mul(stage_layers, in_flight, w)?;
    let saved = match training.checkpointing {
        Checkpointing::None => mul(kept_layers, layer, w)?,
        Checkpointing::Selective => mul(kept_layers, layer - core_recomputable, w)?,
        Checkpointing::Full => sum(&[mul(kept_layers, residual, w)?, layer], w)?,
    };
    let logits = if last && config.architecture.is_decoder() {
        elements_bytes(mul(tokens, dims.vocab, w)?, dtype, "the logits")?
    } else {
        0
    };
    let head = if last {
        sum(&[mul(2, residual, w)?, logits], w)?
    } else {
        0
    };
    sum(&[saved, head, layer.max(logits)], w)
}

/// The activation peak of one serving step (vLLM's profile run): one chunk of `tokens`
/// tokens through fused attention, logits for `logits_rows` sequences in `f32`.
pub(crate) fn serving_step_activations(
    config: &TransformerConfig,
    workload: &Workload,
    tokens: u64,
    logits_rows: u64,
) -> Result<u64, EstimateError> {
    let dims = device_dims(config, &workload.parallel, false);
    inference_activations(
        config,
        &dims,
        Step {
            batch: 1,
            seq: tokens,
            logits_rows,
            logits_dtype: DType::F32,
            dtype: workload.dtype,
            attention: AttentionImpl::Flash,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{Architecture, Optimizer, OptimizerKernel};

    /// The fused runtime with eager attention: the accounting these tests check.
    fn fused(w: Workload) -> Workload {
        Workload {
            runtime: Some(Runtime::Fused),
            attention: AttentionImpl::Eager,
            ..w
        }
    }

    fn tiny(architecture: Architecture) -> TransformerConfig {
        TransformerConfig {
            layers: 2,
            hidden: 8,
            heads: 2,
            kv_heads: 1,
            intermediate: 16,
            vocab: 10,
            learned_positions: if architecture == Architecture::Gpt2 {
                4
            } else {
                0
            },
            ..TransformerConfig::new(architecture)
        }
        .finish()
        .unwrap()
    }

    #[test]
    fn parameters_by_hand() {
        // Llama: q 8·8, k and v 8·4 each, o 8·8, MLP 3·8·16, two RMSNorms of 8.
        let c = tiny(Architecture::Llama);
        assert_eq!(c.layer_parameters(0).unwrap(), 64 + 64 + 64 + 384 + 16);
        // embeddings 10·8, final norm 8, untied head 10·8.
        assert_eq!(c.parameters().unwrap(), 80 + 2 * 592 + 8 + 80);
        // Qwen2 adds biases on q (8), k and v (4 each).
        let q = tiny(Architecture::Qwen2);
        assert_eq!(q.layer_parameters(0).unwrap(), 592 + 16);
        // GPT-2: biases everywhere, LayerNorm, plain MLP, tied head, learned positions.
        let g = tiny(Architecture::Gpt2);
        let layer = 64 + 64 + 64 + 8 + 8 + 8 + 2 * 128 + 16 + 8 + 2 * 16;
        assert_eq!(g.layer_parameters(0).unwrap(), layer);
        assert_eq!(g.parameters().unwrap(), 80 + 32 + 2 * layer + 16);
    }

    fn train(c: &TransformerConfig, checkpointing: Checkpointing) -> Estimate {
        let mut w = fused(Workload::inference(3, 5, DType::BF16));
        w.runtime = Some(Runtime::Fused);
        w.training = Some(Training {
            optimizer: Optimizer::AdamW,
            precision: Precision::Mixed,
            kernel: OptimizerKernel::Fused,
            checkpointing,
        });
        estimate(c, &w).unwrap()
    }

    #[test]
    fn kv_cache_and_training_accounting() {
        let c = tiny(Architecture::Llama);
        let e = estimate(&c, &fused(Workload::inference(3, 5, DType::F16))).unwrap();
        assert_eq!(e.kv_cache_bytes, 3 * 5 * 2 * 4 * 2 * 2);
        assert_eq!(e.kv_bytes_per_token, 2 * 4 * 2 * 2);
        assert_eq!(e.weights_bytes, 2 * e.parameters);
        assert_eq!(e.gradients_bytes + e.optimizer_bytes, 0);
        assert_eq!(
            e.total_bytes,
            e.weights_bytes + e.kv_cache_bytes + e.activation_bytes
        );
        assert_eq!(e.per_device.total_bytes, e.total_bytes);
        let mixed = train(&c, Checkpointing::None);
        assert_eq!(mixed.kv_cache_bytes, 0);
        assert_eq!(
            mixed.weights_bytes + mixed.gradients_bytes + mixed.optimizer_bytes,
            16 * mixed.parameters
        );
        let selective = train(&c, Checkpointing::Selective);
        let full = train(&c, Checkpointing::Full);
        assert!(full.activation_bytes < selective.activation_bytes);
        assert!(selective.activation_bytes < mixed.activation_bytes);
        assert!(mixed.activation_bytes > e.activation_bytes);
    }

    #[test]
    fn flash_attention_removes_the_quadratic_term() {
        let c = tiny(Architecture::Llama);
        let at = |seq, attention| {
            let mut w = fused(Workload::inference(1, seq, DType::F32));
            w.attention = attention;
            estimate(&c, &w).unwrap().activation_bytes
        };
        // Eager at seq 4096: the scores dominate and grow 4× when seq doubles.
        let (e1, e2) = (
            at(4096, AttentionImpl::Eager),
            at(8192, AttentionImpl::Eager),
        );
        assert!(e2 > 3 * e1 && e2 <= 4 * e1, "{e1} {e2}");
        let (f1, f2) = (
            at(4096, AttentionImpl::Flash),
            at(8192, AttentionImpl::Flash),
        );
        assert_eq!(f2, 2 * f1);
    }

    #[test]
    fn bad_workloads_are_errors_not_panics() {
        let c = tiny(Architecture::Llama);
        let w = fused(Workload::inference(0, 5, DType::F16));
        assert!(matches!(estimate(&c, &w), Err(EstimateError::Invalid(_))));
        let w = fused(Workload::inference(u64::MAX, 5, DType::F16));
        assert!(matches!(
            estimate(&c, &w),
            Err(EstimateError::Overflow { .. })
        ));
        // GPT-2's learned table has 4 positions here: a fifth has no embedding.
        let g = tiny(Architecture::Gpt2);
        let w = fused(Workload::inference(1, 5, DType::F16));
        assert!(matches!(
            estimate(&g, &w),
            Err(EstimateError::Invalid(WorkloadFault::PastPositions {
                seq: 5,
                positions: 4
            }))
        ));
        let w = fused(Workload::inference(1, 5, DType::String));
        assert!(matches!(estimate(&c, &w), Err(EstimateError::Unsized(_))));
        let w = Workload {
            weight_dtype: Some(DType::I4),
            ..fused(Workload::inference(1, 5, DType::F16))
        };
        let e = estimate(&c, &w).unwrap();
        assert_eq!(e.weights_bytes, e.parameters.div_ceil(2));
        // Three-way tensor parallelism does not split two heads.
        let mut w = fused(Workload::inference(1, 5, DType::F16));
        w.parallel.tp = 3;
        assert!(matches!(
            estimate(&c, &w),
            Err(EstimateError::Setting { setting: "tp", .. })
        ));
    }
}
