//! Serving capacity: how many KV-cache tokens (and sequences of a length) fit on a device
//! beside the weights, as vLLM sizes its cache.
//!
//! vLLM takes `gpu_memory_utilization × device memory`, subtracts the weights, the
//! activation peak of a profiling step and the memory outside PyTorch (CUDA context,
//! library workspaces), and cuts the rest into KV blocks of `block_size` tokens. This does
//! the same from the config: the step is `max_batched_tokens` tokens through fused
//! attention (chunked prefill), with `f32` logits for `min(max_seqs, max_batched_tokens)`
//! sequences, and the memory outside PyTorch is a stated reserve. Under tensor parallelism
//! each device holds its share of the weights and its key/value heads (MLA's latent is
//! held whole by every device); under pipeline parallelism each stage holds its layers'
//! cache, and the stage with the fewest blocks decides.
//!
//! A block holds `block_size` tokens of every layer the device has. With `seq`, a sequence
//! needs `ceil(seq / block_size)` blocks on a global layer and `ceil(min(seq, window) /
//! block_size)` on a sliding one (as vLLM's hybrid cache manager frees blocks that left the
//! window); `max_concurrent_seqs` is how many such sequences fit, at most `max_seqs`.

use super::transformer::{serving_step_activations, stage_tensors};
use super::{EstimateError, TransformerConfig, Workload, device_share, elements_bytes, mul, sum};

/// The serving engine's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Serving {
    /// Memory of one device.
    pub budget: u64,
    /// The fraction of it the engine may use, in millionths (900,000 for 0.9).
    pub gpu_util_ppm: u64,
    /// Tokens one step processes at most (the chunked-prefill budget).
    pub max_batched_tokens: u64,
    /// Sequences one step runs at most.
    pub max_seqs: u64,
    /// Tokens per KV block.
    pub block_size: u64,
    /// Bytes outside the engine's tensors: CUDA context, cuBLAS and attention workspaces,
    /// communication buffers.
    pub reserve: u64,
    /// A sequence length to count concurrent sequences of.
    pub seq: Option<u64>,
}

impl Serving {
    /// vLLM's defaults on a device of `budget` bytes: 0.9 of it, 8192 batched tokens, 256
    /// sequences, blocks of 16, and a 1 GiB reserve.
    pub fn new(budget: u64) -> Serving {
        Serving {
            budget,
            gpu_util_ppm: 900_000,
            max_batched_tokens: 8192,
            max_seqs: 256,
            block_size: 16,
            reserve: 1 << 30,
            seq: None,
        }
    }
}

/// What fits, for one device of the stage that decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServingCapacity {
    /// `budget × gpu_util`.
    pub usable_bytes: u64,
    /// This device's weights.
    pub weights_bytes: u64,
    /// The activation peak of one step.
    pub activation_bytes: u64,
    /// The reserve.
    pub reserve_bytes: u64,
    /// The KV blocks' bytes.
    pub kv_cache_bytes: u64,
    /// KV bytes one token takes on this device, every layer it holds.
    pub kv_bytes_per_token: u64,
    /// KV blocks.
    pub kv_blocks: u64,
    /// Tokens the blocks hold (`kv_blocks × block_size`).
    pub kv_tokens: u64,
    /// Sequences of `seq` tokens that run at once (at most `max_seqs`); `None` without
    /// `seq`.
    pub max_concurrent_seqs: Option<u64>,
    /// Whether `max_seqs` (not memory) limits `max_concurrent_seqs`.
    pub limited_by_max_seqs: bool,
    /// Weights + activations + reserve + KV blocks: what the engine holds.
    pub total_bytes: u64,
    /// The pipeline stage this is for (0 without pipeline parallelism).
    pub stage: usize,
    /// Whether anything is left for the KV cache (false: the weights, the step's
    /// activations and the reserve alone pass `budget × gpu_util`; every count is 0).
    pub fits: bool,
    /// Devices (`tp × pp × dp`).
    pub devices: u64,
}

/// How many KV tokens and sequences `config` serves under `workload` (its dtype, weight
/// format, KV dtype and parallelism) with `serving`'s settings. When the weights, the step's
/// activations and the reserve alone pass `budget × gpu_util`, the answer has
/// [`ServingCapacity::fits`] false and no blocks.
///
/// ```
/// use memplan_ir::DType;
/// use memplan_tracker::estimate::{Serving, TransformerConfig, Workload, serving_capacity};
/// let json = r#"{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
///   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
///   "vocab_size": 128256}"#; // Llama-3-8B
/// let config = TransformerConfig::from_hf_json(json).unwrap();
/// let c = serving_capacity(&config, &Workload::inference(1, 1, DType::BF16),
///     &Serving::new(80 << 30)).unwrap();
/// assert_eq!(c.kv_bytes_per_token, 128 << 10); // 128 KiB a token
/// assert!(c.kv_tokens > 440_000 && c.kv_tokens < 470_000);
/// ```
pub fn serving_capacity(
    config: &TransformerConfig,
    workload: &Workload,
    serving: &Serving,
) -> Result<ServingCapacity, EstimateError> {
    let w = "serving capacity";
    if !config.architecture.is_decoder() {
        return Err(EstimateError::Invalid(format!(
            "a {} model is an encoder: it has no KV cache to serve from",
            config.architecture.name()
        )));
    }
    let invalid = |m: &str| Err(EstimateError::Invalid(m.to_owned()));
    if serving.gpu_util_ppm == 0 || serving.gpu_util_ppm > 1_000_000 {
        return invalid("--gpu-util must be above 0 and at most 1");
    }
    if serving.block_size == 0 || serving.max_batched_tokens == 0 || serving.max_seqs == 0 {
        return invalid("--block-size, --max-batched-tokens and --max-seqs must be positive");
    }
    if serving.seq == Some(0) {
        return invalid("--seq must be positive");
    }
    let p = workload.parallel;
    p.check(config)?;
    let usable = (u128::from(serving.budget) * u128::from(serving.gpu_util_ppm) / 1_000_000) as u64;
    let format = workload.weight_format();
    let kv_dtype = workload.kv_dtype();
    let stages = p.stages(config.layers);
    let kv_heads = p.kv_heads_per_device(config.kv_heads);
    let logits_rows = serving.max_seqs.min(serving.max_batched_tokens);
    let mut best: Option<ServingCapacity> = None;
    for (stage, range) in stages.iter().enumerate() {
        let last = stage + 1 == stages.len();
        let mut weights = 0u64;
        for t in stage_tensors(config, &p, stage)? {
            let (rows, cols, copies) = device_share(&t, &p, config.kv_heads);
            weights = sum(&[weights, format.bytes(t.role, rows, cols, copies)?], w)?;
        }
        let activation = serving_step_activations(
            config,
            workload,
            serving.max_batched_tokens,
            if last { logits_rows } else { 0 },
        )?;
        let fixed = sum(&[weights, activation, serving.reserve], w)?;
        let fits = fixed <= usable;
        let pool = usable.saturating_sub(fixed);
        // Per layer per token elements on this device, and a sequence's tokens held.
        let layer_elements = config.kv_layer_elements(kv_heads)?;
        let layers = range.end - range.start;
        let per_token = elements_bytes(mul(layer_elements, layers, w)?, kv_dtype, w)?;
        let block_bytes = mul(per_token, serving.block_size, w)?;
        let blocks = match block_bytes {
            _ if !fits => 0,
            0 => u64::MAX / serving.block_size,
            b => pool / b,
        };
        let (seqs, limited) = match serving.seq {
            None => (None, false),
            Some(_) if !fits => (Some(0), false),
            Some(s) => {
                let mut tokens = 0u64;
                for i in range.clone() {
                    let held = config.layer_window(i).map_or(s, |window| s.min(window));
                    let rounded = mul(held.div_ceil(serving.block_size), serving.block_size, w)?;
                    tokens = sum(&[tokens, rounded], w)?;
                }
                let seq_bytes = elements_bytes(mul(tokens, layer_elements, w)?, kv_dtype, w)?;
                let fit = pool.checked_div(seq_bytes).unwrap_or(u64::MAX);
                (Some(fit.min(serving.max_seqs)), fit >= serving.max_seqs)
            }
        };
        let kv_cache_bytes = mul(blocks, block_bytes, w)?;
        let capacity = ServingCapacity {
            usable_bytes: usable,
            weights_bytes: weights,
            activation_bytes: activation,
            reserve_bytes: serving.reserve,
            kv_cache_bytes,
            kv_bytes_per_token: per_token,
            kv_blocks: blocks,
            kv_tokens: mul(blocks, serving.block_size, w)?,
            max_concurrent_seqs: seqs,
            limited_by_max_seqs: limited,
            total_bytes: sum(&[fixed, kv_cache_bytes], w)?,
            stage,
            fits,
            devices: p.devices()?,
        };
        let binding = match best {
            None => true,
            Some(b) => {
                (
                    capacity.fits,
                    capacity.max_concurrent_seqs,
                    capacity.kv_tokens,
                ) < (b.fits, b.max_concurrent_seqs, b.kv_tokens)
            }
        };
        if binding {
            best = Some(capacity);
        }
    }
    best.ok_or_else(|| EstimateError::Invalid("the model has no layers".to_owned()))
}
