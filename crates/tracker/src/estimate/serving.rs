//! Serving capacity: how many KV-cache tokens (and sequences of a length) fit on a device
//! beside the weights, as vLLM (`vllm serve`, the v1 engine) sizes its cache.
//!
//! vLLM takes `gpu_memory_utilization × device memory`, subtracts the weights, the peak of
//! its profiling run and the memory outside PyTorch (CUDA context, library workspaces), and
//! cuts the rest into KV blocks of `block_size` tokens of every layer. From the config:
//!
//! - **weights**: the device's share, the vocabulary padded as `VocabParallelEmbedding`
//!   pads it (to a multiple of 64 × the tensor-parallel degree's share: `lcm(64, tp)`);
//! - **rotary cache**: every rotary embedding's `cos_sin_cache`, `max_position_embeddings ×
//!   rotary width` in the model's dtype (one per distinct rotary setting, on every device);
//! - **profiling run**: a forward of `max_batched_tokens` tokens through fused attention
//!   (chunked prefill), then the sampler's dummy run over `min(max_seqs,
//!   max_batched_tokens)` rows of the padded vocabulary: the logits in the model's dtype,
//!   their f32 copy, and PyTorch's top-k/top-p path (the sorted f32 logits, their int64
//!   indices, a mask, the f32 probabilities of the sort and of the sampling, the noise) —
//!   [`SAMPLER_BYTES_PER_LOGIT`] bytes a logit with the f32 copy, the most the sampler's
//!   paths use (FlashInfer's needs about half), so the KV tokens stay at or under vLLM's;
//! - **reserve**: the memory outside PyTorch, stated (`--reserve`).
//!
//! Defaults follow vLLM's `get_batch_defaults` for `vllm serve`: a device of 70 GiB or more
//! runs 8,192 batched tokens and 1,024 sequences, a smaller one 2,048 and 256 (vLLM gives an
//! 80 GiB A100 the small ones; its name is not known here, so pass them).
//!
//! Concurrency is counted as vLLM reports it ("Maximum concurrency for S tokens per
//! request"): a full-attention layer needs `ceil(S / block)` blocks a sequence and a sliding
//! one `ceil(min(window - 1 + max_batched_tokens, S) / block) + 1` (the window may start
//! mid-block; chunked prefill holds a chunk beyond it); the blocks divided by a sequence's
//! blocks, every layer counted, is the number of sequences of `S` tokens the cache admits at
//! once, at most `max_seqs`. Under tensor parallelism each device holds its share of the
//! weights and its key/value heads (MLA's latent is held whole by every device); under
//! pipeline parallelism each stage holds its layers' cache, and the stage with the fewest
//! blocks decides.

use super::transformer::{serving_step_activations, stage_tensors};
use super::{
    EstimateError, Role, TransformerConfig, Workload, WorkloadFault, device_share, elements_bytes,
    mul, sum,
};

/// Bytes a logit of the sampler's dummy run holds at its peak beside the model-dtype logits:
/// the f32 copy (4), the sort's values (4) and int64 indices (8), the top-k mask (1), the
/// top-p probabilities (4), then the sampling probabilities (4) and noise (4) once the sort
/// is released: `4 + max(4 + 8 + 1 + 4, 4 + 4)`, 21 (with 2-byte logits, 23 in all).
pub const SAMPLER_BYTES_PER_LOGIT: u64 = 21;

/// The serving engine's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// These settings with [`budget`](Serving::budget) set to `budget`.
    pub fn with_budget(mut self, budget: u64) -> Serving {
        self.budget = budget;
        self
    }

    /// These settings with [`gpu_util_ppm`](Serving::gpu_util_ppm) set to `gpu_util_ppm`.
    pub fn with_gpu_util_ppm(mut self, gpu_util_ppm: u64) -> Serving {
        self.gpu_util_ppm = gpu_util_ppm;
        self
    }

    /// These settings with [`max_batched_tokens`](Serving::max_batched_tokens) set
    /// to `max_batched_tokens`.
    pub fn with_max_batched_tokens(mut self, max_batched_tokens: u64) -> Serving {
        self.max_batched_tokens = max_batched_tokens;
        self
    }

    /// These settings with [`max_seqs`](Serving::max_seqs) set to `max_seqs`.
    pub fn with_max_seqs(mut self, max_seqs: u64) -> Serving {
        self.max_seqs = max_seqs;
        self
    }

    /// These settings with [`block_size`](Serving::block_size) set to `block_size`.
    pub fn with_block_size(mut self, block_size: u64) -> Serving {
        self.block_size = block_size;
        self
    }

    /// These settings with [`reserve`](Serving::reserve) set to `reserve`.
    pub fn with_reserve(mut self, reserve: u64) -> Serving {
        self.reserve = reserve;
        self
    }

    /// These settings with [`seq`](Serving::seq) set to `seq`.
    pub fn with_seq(mut self, seq: Option<u64>) -> Serving {
        self.seq = seq;
        self
    }
}

impl Serving {
    /// `vllm serve`'s defaults on a device of `budget` bytes: 0.9 of it, blocks of 16, a
    /// 1 GiB reserve, and by the device's size 8,192 batched tokens and 1,024 sequences (70
    /// GiB or more) or 2,048 and 256 (vLLM's `get_batch_defaults`).
    pub fn new(budget: u64) -> Serving {
        let large = budget >= 70 << 30;
        Serving {
            budget,
            gpu_util_ppm: 900_000,
            max_batched_tokens: if large { 8192 } else { 2048 },
            max_seqs: if large { 1024 } else { 256 },
            block_size: 16,
            reserve: 1 << 30,
            seq: None,
        }
    }
}

/// What fits, for one device of the stage that decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServingCapacity {
    /// `budget × gpu_util`.
    pub usable_bytes: u64,
    /// This device's weights.
    pub weights_bytes: u64,
    /// The profiling run's peak: the forward of one step, or the sampler's dummy run if
    /// larger.
    pub activation_bytes: u64,
    /// The sampler's dummy run alone (logits and its temporaries).
    pub sampler_bytes: u64,
    /// The rotary embeddings' `cos_sin_cache`.
    pub rotary_cache_bytes: u64,
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
    /// Sequences of `seq` tokens the cache admits at once as vLLM counts them (at most
    /// `max_seqs`); `None` without `seq`.
    pub max_concurrent_seqs: Option<u64>,
    /// KV blocks one sequence of `seq` tokens takes on this device, every layer counted in
    /// blocks of every layer (vLLM's `num_block_per_request`); `None` without `seq`.
    pub blocks_per_seq: Option<u64>,
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
/// assert!(c.kv_tokens > 420_000 && c.kv_tokens < 450_000);
/// ```
pub fn serving_capacity(
    config: &TransformerConfig,
    workload: &Workload,
    serving: &Serving,
) -> Result<ServingCapacity, EstimateError> {
    let w = "serving capacity";
    if !config.architecture.is_decoder() {
        return Err(EstimateError::Invalid(WorkloadFault::Encoder {
            architecture: config.architecture.name(),
        }));
    }
    if serving.gpu_util_ppm == 0 || serving.gpu_util_ppm > 1_000_000 {
        return super::bad_setting("gpu_util", "must be above 0 and at most 1");
    }
    for (setting, value) in [
        ("block_size", serving.block_size),
        ("max_batched_tokens", serving.max_batched_tokens),
        ("max_seqs", serving.max_seqs),
    ] {
        if value == 0 {
            return super::bad_setting(setting, "must be positive");
        }
    }
    if serving.seq == Some(0) {
        return super::bad_setting("seq", "must be positive");
    }
    let p = workload.parallel;
    p.check(config)?;
    let usable = (u128::from(serving.budget) * u128::from(serving.gpu_util_ppm) / 1_000_000) as u64;
    let format = workload.weight_format();
    let kv_dtype = workload.kv_dtype();
    let stages = p.stages(config.layers);
    let kv_heads = p.kv_heads_per_device(config.kv_heads);
    let logits_rows = serving.max_seqs.min(serving.max_batched_tokens);
    // VocabParallelEmbedding pads the vocabulary to a multiple of lcm(64, tp).
    let pad = lcm(64, p.tp.max(1));
    let padded_vocab = config.vocab.div_ceil(pad).saturating_mul(pad);
    let vocab_shard = padded_vocab / p.tp.max(1);
    let rotary = rotary_cache_bytes(config, workload.dtype)?;
    let mut best: Option<ServingCapacity> = None;
    for (stage, range) in stages.iter().enumerate() {
        let last = stage + 1 == stages.len();
        let mut weights = 0u64;
        for t in stage_tensors(config, &p, stage)? {
            let (rows, cols, copies) = device_share(&t, &p, config.kv_heads);
            let rows = if t.role == Role::Embedding && rows > 0 && t.rows == config.vocab {
                vocab_shard
            } else {
                rows
            };
            weights = sum(&[weights, format.bytes(t.role, rows, cols, copies)?], w)?;
        }
        let forward = serving_step_activations(config, workload, serving.max_batched_tokens, 0)?;
        // The sampler's dummy run: logits in the model's dtype, then its f32 temporaries.
        let sampler = if last {
            let logits = mul(logits_rows, vocab_shard, w)?;
            sum(
                &[
                    elements_bytes(logits, workload.dtype, w)?,
                    mul(logits, SAMPLER_BYTES_PER_LOGIT, w)?,
                ],
                w,
            )?
        } else {
            0
        };
        let activation = forward.max(sampler);
        let fixed = sum(&[weights, rotary, activation, serving.reserve], w)?;
        let fits = fixed <= usable;
        let pool = usable.saturating_sub(fixed);
        // Per layer per token elements on this device, and a sequence's tokens held.
        let layer_elements = config.kv_layer_elements(kv_heads)?;
        let layers = range.end - range.start;
        let per_token = elements_bytes(mul(layer_elements, layers, w)?, kv_dtype, w)?;
        let block_bytes = mul(per_token, serving.block_size, w)?;
        // A model mixing sliding and full layers is cut into vLLM's KV cache groups
        // ([`hybrid_groups`]): `pool / (page × group_size)` blocks, of which each group
        // holds `1 / groups` (the tokens vLLM reports).
        let page = mul(
            elements_bytes(layer_elements, kv_dtype, w)?,
            serving.block_size,
            w,
        )?;
        let hybrid = hybrid_groups(config, range.clone());
        let (blocks, kv_cache_bytes) = match (hybrid, block_bytes) {
            _ if !fits => (0, 0),
            (_, 0) => (u64::MAX / serving.block_size, 0),
            (Some((group_size, groups)), _) => {
                let tensor_block = mul(page, group_size, w)?;
                let pool_blocks = pool / tensor_block.max(1);
                (pool_blocks / groups, mul(pool_blocks, tensor_block, w)?)
            }
            (None, b) => (pool / b, mul(pool / b, b, w)?),
        };
        // vLLM's blocks a sequence of `seq` tokens needs: every layer's, in blocks of
        // every layer (a block holds `block_size` tokens of each layer).
        let per_seq = match serving.seq {
            None => None,
            Some(s) => {
                let bs = serving.block_size;
                let mut layer_blocks = 0u64;
                for i in range.clone() {
                    let blocks = match config.layer_window(i) {
                        Some(window) => {
                            let tokens = window
                                .saturating_sub(1)
                                .saturating_add(serving.max_batched_tokens)
                                .min(s);
                            tokens.div_ceil(bs).saturating_add(1)
                        }
                        None => s.div_ceil(bs),
                    };
                    layer_blocks = sum(&[layer_blocks, blocks], w)?;
                }
                Some(layer_blocks.div_ceil(layers.max(1)))
            }
        };
        let (seqs, limited) = match per_seq {
            None => (None, false),
            Some(_) if !fits => (Some(0), false),
            Some(need) => {
                let fit = blocks.checked_div(need).unwrap_or(u64::MAX);
                (Some(fit.min(serving.max_seqs)), fit >= serving.max_seqs)
            }
        };
        let capacity = ServingCapacity {
            usable_bytes: usable,
            weights_bytes: weights,
            activation_bytes: activation,
            sampler_bytes: sampler,
            rotary_cache_bytes: rotary,
            reserve_bytes: serving.reserve,
            kv_cache_bytes,
            kv_bytes_per_token: per_token,
            kv_blocks: blocks,
            kv_tokens: mul(blocks, serving.block_size, w)?,
            max_concurrent_seqs: seqs,
            blocks_per_seq: per_seq,
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
    best.ok_or(EstimateError::Invalid(WorkloadFault::NoLayers))
}

/// vLLM's KV cache groups for a model whose layers mix full and sliding attention (its
/// hybrid KV cache manager, `_get_kv_cache_groups_uniform_page_size` in
/// `vllm/v1/core/kv_cache_utils.py`): the layers of each kind are split into groups of
/// `group_size` layers (the fewer kind's count, or the larger's when it is under 1.5 times
/// the fewer's), padded to whole groups, the `j`-th group of a kind holding its layers
/// `j, j + n, ...`. vLLM then makes `group_size` tensors of `page × num_blocks`, each shared
/// by one layer of every group (`num_blocks = available / (page × group_size)`), and reports
/// `num_blocks / groups × block_size` tokens. Returns (the largest group's layers on the
/// stage holding `range`, the number of groups), or `None` when every layer is of one kind
/// (one group: every layer gets the whole pool's blocks). With padding the figure is below
/// the layers' own share; vLLM run without its hybrid manager treats every layer as full,
/// which holds at least as many tokens.
fn hybrid_groups(config: &TransformerConfig, range: std::ops::Range<u64>) -> Option<(u64, u64)> {
    let sliding: Vec<bool> = (0..config.layers)
        .map(|i| config.layer_window(i).is_some())
        .collect();
    let counts = [false, true].map(|kind| sliding.iter().filter(|&&s| s == kind).count() as u64);
    let (lo, hi) = (counts[0].min(counts[1]), counts[0].max(counts[1]));
    if lo == 0 {
        return None;
    }
    let group_size = if hi * 2 < lo * 3 { hi } else { lo };
    let mut groups = 0u64;
    let mut largest = 0u64;
    for (kind, &count) in [false, true].iter().zip(&counts) {
        let n = count.div_ceil(group_size);
        groups += n;
        // The stage's layers of this kind are a run of the kind's list; group `j` takes
        // every `n`-th from `j`, so the largest holds `ceil(run / n)`.
        let run = range
            .clone()
            .filter(|&i| sliding.get(i as usize) == Some(kind))
            .count() as u64;
        largest = largest.max(run.div_ceil(n.max(1)));
    }
    Some((largest.max(1), groups))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b).max(1) * b
}

/// vLLM's rotary `cos_sin_cache`: `max_position_embeddings × rotary width` in `dtype`, one
/// per distinct rotary setting (Gemma 3's local and global layers have two); none for models
/// without rotary positions.
fn rotary_cache_bytes(
    config: &TransformerConfig,
    dtype: memplan_ir::DType,
) -> Result<u64, EstimateError> {
    use super::Architecture as A;
    let width = match config.architecture {
        A::Gpt2 | A::Bert | A::Vit => return Ok(0),
        A::Falcon if config.eager.alibi => return Ok(0),
        A::GptNeox => (config.head_dim * config.eager.rotary_percent / 100).max(2) / 2 * 2,
        _ => config.mla.map_or(config.head_dim, |m| m.qk_rope_head_dim),
    };
    let caches = if config.architecture == A::Gemma3 {
        2
    } else {
        1
    };
    let positions = config.max_positions.max(1);
    let w = "the rotary cache";
    mul(
        elements_bytes(mul(positions, width, w)?, dtype, w)?,
        caches,
        w,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::DType;

    fn read(json: &str) -> TransformerConfig {
        TransformerConfig::from_hf_json(json).unwrap()
    }

    #[test]
    fn hybrid_groups_follow_vllm() {
        // 12 sliding + 12 full (gpt-oss-20b): two groups of 12, no padding.
        let oss = read(r#"{"model_type":"gpt_oss","num_hidden_layers":24}"#);
        assert_eq!(hybrid_groups(&oss, 0..24), Some((12, 2)));
        // Gemma 3 (5 sliding to 1 full) on 26 layers: 4 full, 22 sliding; groups of 4, one
        // full group and six sliding ones (the last padded): 28 layer slots.
        let g3 = read(
            r#"{"model_type":"gemma3_text","num_hidden_layers":26,"sliding_window_pattern":6}"#,
        );
        assert_eq!(hybrid_groups(&g3, 0..26), Some((4, 7)));
        // Two pipeline stages: the first holds full layers 5 and 11 and 11 sliding ones
        // (spread over six groups: at most 2 of a group).
        assert_eq!(hybrid_groups(&g3, 0..13), Some((2, 7)));
        // 13 full + 12 sliding: under 1.5 times, so groups of 13, one each (one padded).
        let types: Vec<&str> = (0..25)
            .map(|i| {
                if i % 2 == 0 {
                    "full_attention"
                } else {
                    "sliding_attention"
                }
            })
            .collect();
        let mixed = read(&format!(
            r#"{{"model_type":"gpt_oss","num_hidden_layers":25,"layer_types":{types:?}}}"#
        ));
        assert_eq!(hybrid_groups(&mixed, 0..25), Some((13, 2)));
        // One kind of layer: one group, as before.
        let llama = read(r#"{"model_type":"llama","num_hidden_layers":4}"#);
        assert_eq!(hybrid_groups(&llama, 0..4), None);
    }

    #[test]
    fn padded_hybrid_groups_hold_fewer_tokens_than_the_layers_share() {
        // Gemma 3 on 26 layers: vLLM makes 4 tensors of `page × num_blocks` (num_blocks =
        // pool / (4 pages)) and reports `num_blocks / 7` blocks of tokens.
        let g3 = read(
            r#"{"model_type":"gemma3_text","num_hidden_layers":26,"sliding_window_pattern":6}"#,
        );
        let c = serving_capacity(
            &g3,
            &Workload::inference(1, 1, DType::BF16),
            &Serving::new(80 << 30),
        )
        .unwrap();
        let pool = c.usable_bytes
            - c.weights_bytes
            - c.rotary_cache_bytes
            - c.activation_bytes
            - c.reserve_bytes;
        let page = c.kv_bytes_per_token / 26 * 16;
        let num_blocks = pool / (page * 4);
        assert_eq!(c.kv_blocks, num_blocks / 7);
        assert_eq!(c.kv_tokens, num_blocks / 7 * 16);
        assert_eq!(c.kv_cache_bytes, num_blocks * page * 4);
        // Below every layer's own share of the pool (26 of the 28 slots hold layers).
        assert!(c.kv_tokens < pool / c.kv_bytes_per_token);
    }
}
