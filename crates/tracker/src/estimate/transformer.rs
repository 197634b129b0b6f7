//! A transformer's memory for one workload: parameters, weights, KV cache, activations,
//! gradients and optimizer states.
//!
//! Parameters are counted exactly from the config (every matrix, bias and norm; a tied
//! output head counted once). Activations are a model of the live set, in elements of the
//! workload's dtype, with `T = batch × seq` tokens, `q = heads × head_dim` and
//! `kv = kv_heads × head_dim`:
//!
//! - **Inference** (one forward pass, nothing kept for a backward pass), as an arena runtime
//!   such as memplan's plans runs it: a tensor's bytes are reused once its last reader has
//!   run, and elementwise activations write in place. The peak is the largest of the phases:
//!   attention holds the residual stream plus [`super::AttentionMemory::eager_peak`] (or the
//!   fused variant's), and for BERT the padding mask that current Hugging Face exports
//!   expand to `batch × seq × seq` once and every layer reads; the MLP holds the residual, its input and its hidden tensors (`gate`
//!   and `up` for a gated MLP, one for a plain one); the head holds the final hidden state
//!   and the logits (`T × vocab`). A framework that runs activations out of place (PyTorch
//!   eager) holds one more `T × intermediate` tensor in the MLP.
//! - **Training**: what each layer saves for its backward pass (the two norm inputs and
//!   outputs, Q, K, V, the softmax output or the fused kernel's log-sum-exp, the attention
//!   context, the MLP's hidden tensors) times the layers, plus the head's saved tensors
//!   (`2·T·hidden + T·vocab`), plus the backward pass's working set (one layer's worth of
//!   activation gradients, or the logits' gradient if larger). With checkpointing a layer
//!   saves only its input, and the backward pass recomputes one layer at a time on top.
//!
//! The KV cache (decoders at inference) is `batch × seq × layers × kv_heads × head_dim ×
//! dtype × 2`. Every figure is checked arithmetic.

use memplan_ir::DType;

use super::{
    Architecture, AttentionShape, EstimateError, Mlp, Norm, Training, TransformerConfig,
    elements_bytes, mul, product, sum,
};

/// How attention is computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionImpl {
    /// Scores and their softmax materialised (`O(seq²)` per head).
    #[default]
    Eager,
    /// A fused kernel (FlashAttention): no score matrix in memory.
    Flash,
}

/// What the model is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Sequences per step.
    pub batch: u64,
    /// Tokens per sequence (the context for the KV cache). Vision models ignore it and use
    /// their patch count.
    pub seq: u64,
    /// Activation (and KV cache) dtype.
    pub dtype: DType,
    /// Weight dtype, when it differs (`i4` for 4-bit quantised weights, say).
    pub weight_dtype: Option<DType>,
    /// Eager or fused attention.
    pub attention: AttentionImpl,
    /// A training step instead of inference.
    pub training: Option<Training>,
}

impl Workload {
    /// Inference at `batch × seq` in `dtype`, eager attention.
    pub fn inference(batch: u64, seq: u64, dtype: DType) -> Workload {
        Workload {
            batch,
            seq,
            dtype,
            weight_dtype: None,
            attention: AttentionImpl::Eager,
            training: None,
        }
    }
}

/// The memory of one workload, in bytes (parameters in elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// The sequence length used (a vision model's patch count plus one).
    pub seq: u64,
    /// Parameters, counted exactly.
    pub parameters: u64,
    /// The weights in their dtype.
    pub weights_bytes: u64,
    /// The KV cache (decoders at inference; 0 otherwise).
    pub kv_cache_bytes: u64,
    /// The activation peak (see the module docs).
    pub activation_bytes: u64,
    /// Gradients (training only).
    pub gradients_bytes: u64,
    /// Optimizer states and the `f32` master weights (training only).
    pub optimizer_bytes: u64,
    /// The sum of the above.
    pub total_bytes: u64,
}

impl TransformerConfig {
    fn norm_parameters(&self) -> Result<u64, EstimateError> {
        match self.norm {
            Norm::Rms => Ok(self.hidden),
            Norm::Layer => mul(2, self.hidden, "norm parameters"),
        }
    }

    /// Parameters of one layer: attention projections, MLP, two norms, with the biases the
    /// architecture has.
    pub fn layer_parameters(&self) -> Result<u64, EstimateError> {
        let w = "layer parameters";
        let (h, i) = (self.hidden, self.intermediate);
        let q = mul(self.heads, self.head_dim, w)?;
        let kv = mul(self.kv_heads, self.head_dim, w)?;
        let bias = |on: bool, n: u64| if on { n } else { 0 };
        let attention = sum(
            &[
                mul(h, q, w)?,
                mul(mul(h, kv, w)?, 2, w)?,
                mul(q, h, w)?,
                bias(self.qkv_bias, q),
                bias(self.qkv_bias, mul(kv, 2, w)?),
                bias(self.o_bias, h),
            ],
            w,
        )?;
        let mlp = match self.mlp {
            Mlp::Gated => sum(
                &[
                    product(&[3, h, i], w)?,
                    bias(self.mlp_bias, sum(&[i, i, h], w)?),
                ],
                w,
            )?,
            Mlp::Plain => sum(
                &[
                    product(&[2, h, i], w)?,
                    bias(self.mlp_bias, sum(&[i, h], w)?),
                ],
                w,
            )?,
        };
        sum(&[attention, mlp, mul(2, self.norm_parameters()?, w)?], w)
    }

    /// Parameters of the embeddings (tokens, learned positions, token types and BERT's
    /// embedding norm; a vision model's patch projection, class token and positions).
    pub fn embedding_parameters(&self) -> Result<u64, EstimateError> {
        let w = "embedding parameters";
        let h = self.hidden;
        if let Some(v) = self.vision {
            let patch = product(&[v.channels, v.patch_size, v.patch_size, h], w)?;
            let positions = mul(self.fixed_sequence().unwrap_or(1), h, w)?;
            return sum(&[patch, h, h, positions], w);
        }
        let norm = if self.embedding_norm {
            self.norm_parameters()?
        } else {
            0
        };
        sum(
            &[
                mul(self.vocab, h, w)?,
                mul(self.learned_positions, h, w)?,
                mul(self.token_types, h, w)?,
                norm,
            ],
            w,
        )
    }

    /// Parameters after the last layer: the final norm, an untied output head, BERT's
    /// pooler, a vision classifier.
    pub fn head_parameters(&self) -> Result<u64, EstimateError> {
        let w = "head parameters";
        let h = self.hidden;
        let final_norm = if self.embedding_norm {
            0
        } else {
            self.norm_parameters()?
        };
        let lm_head = if self.architecture.is_decoder() && !self.tied_embeddings {
            mul(self.vocab, h, w)?
        } else {
            0
        };
        let pooler = if self.pooler {
            sum(&[mul(h, h, w)?, h], w)?
        } else {
            0
        };
        let classifier = match self.vision {
            Some(v) if v.labels > 0 => sum(&[mul(v.labels, h, w)?, v.labels], w)?,
            _ => 0,
        };
        sum(&[final_norm, lm_head, pooler, classifier], w)
    }

    /// Every parameter, counted exactly.
    pub fn parameters(&self) -> Result<u64, EstimateError> {
        let w = "the parameter count";
        sum(
            &[
                self.embedding_parameters()?,
                mul(self.layers, self.layer_parameters()?, w)?,
                self.head_parameters()?,
            ],
            w,
        )
    }
}

/// The memory of `config` running `workload`.
///
/// ```
/// use memplan_ir::DType;
/// use memplan_tracker::estimate::{Optimizer, Training, TransformerConfig, Workload, estimate};
/// let json = r#"{"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
///   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
///   "vocab_size": 32000}"#;
/// let config = TransformerConfig::from_hf_json(json).unwrap();
/// let serve = estimate(&config, &Workload::inference(1, 4096, DType::BF16)).unwrap();
/// assert_eq!(serve.kv_cache_bytes, 4096 * 32 * 8 * 128 * 2 * 2); // 512 MiB
/// let mut train = Workload::inference(1, 4096, DType::BF16);
/// train.training = Some(Training {
///     optimizer: Optimizer::AdamW, master_weights: true, checkpointing: true,
/// });
/// let e = estimate(&config, &train).unwrap();
/// assert_eq!(e.weights_bytes + e.gradients_bytes + e.optimizer_bytes, 16 * e.parameters);
/// ```
pub fn estimate(
    config: &TransformerConfig,
    workload: &Workload,
) -> Result<Estimate, EstimateError> {
    let (b, dtype) = (workload.batch, workload.dtype);
    let s = config.fixed_sequence().unwrap_or(workload.seq);
    if b == 0 || s == 0 {
        return Err(EstimateError::Invalid(format!(
            "batch ({b}) and sequence length ({s}) must be positive"
        )));
    }
    if config.learned_positions > 0 && s > config.learned_positions {
        return Err(EstimateError::Invalid(format!(
            "sequence length {s} is past the {} positions of the model's learned position table",
            config.learned_positions
        )));
    }
    let parameters = config.parameters()?;
    let weight_dtype = workload.weight_dtype.unwrap_or(dtype);
    let weights_bytes = elements_bytes(parameters, weight_dtype, "the weight bytes")?;
    let bytes = |elements: u64, what: &str| elements_bytes(elements, dtype, what);

    let w = "activations";
    let (h, i, l) = (config.hidden, config.intermediate, config.layers);
    let tokens = mul(b, s, w)?;
    let q_width = mul(config.heads, config.head_dim, w)?;
    let kv_width = mul(config.kv_heads, config.head_dim, w)?;
    let attention = AttentionShape {
        batch: b,
        heads: config.heads,
        kv_heads: config.kv_heads,
        seq_q: s,
        seq_kv: s,
        head_dim: config.head_dim,
        dtype,
    }
    .memory()?;
    // Hidden MLP tensors kept for a backward pass, and live at once in a forward pass.
    let (mlp_saved, mlp_live) = match config.mlp {
        Mlp::Gated => (3, 2),
        Mlp::Plain => (2, 1),
    };
    let residual = bytes(mul(tokens, h, w)?, w)?;
    let mlp_hidden = bytes(product(&[mlp_saved, tokens, i], w)?, w)?;
    let mlp_live = bytes(product(&[mlp_live, tokens, i], w)?, w)?;
    let logits = if config.architecture.is_decoder() {
        bytes(mul(tokens, config.vocab, w)?, "the logits")?
    } else {
        0
    };

    let kv_cache_bytes;
    let activation_bytes;
    let mut gradients_bytes = 0;
    let mut optimizer_bytes = 0;
    match workload.training {
        None => {
            kv_cache_bytes = if config.architecture.is_decoder() {
                bytes(
                    product(&[b, s, l, kv_width, 2], "the KV cache")?,
                    "the KV cache",
                )?
            } else {
                0
            };
            let attention_peak = match workload.attention {
                AttentionImpl::Eager => attention.eager_peak,
                AttentionImpl::Flash => attention.flash_peak,
            };
            let mask = if config.architecture == Architecture::Bert {
                bytes(product(&[b, s, s], w)?, w)?
            } else {
                0
            };
            activation_bytes = [
                sum(&[residual, mask, attention_peak], w)?,
                sum(&[residual, residual, mlp_live], w)?,
                sum(&[residual, logits], w)?,
            ]
            .into_iter()
            .fold(0, u64::max);
        }
        Some(training) => {
            kv_cache_bytes = 0;
            // Saved per layer: norm inputs and outputs (4 × residual), Q and the attention
            // context (2 × T·q), K and V (2 × T·kv), the MLP's hidden tensors, and the
            // softmax output (eager) or the log-sum-exp (fused).
            let scores_saved = match workload.attention {
                AttentionImpl::Eager => attention.scores,
                AttentionImpl::Flash => attention.logsumexp,
            };
            let layer = sum(
                &[
                    mul(4, residual, w)?,
                    bytes(
                        mul(2, mul(tokens, sum(&[q_width, kv_width], w)?, w)?, w)?,
                        w,
                    )?,
                    mlp_hidden,
                    scores_saved,
                ],
                w,
            )?;
            let saved_layers = if training.checkpointing {
                sum(&[mul(l, residual, w)?, layer], w)?
            } else {
                mul(l, layer, w)?
            };
            let head = sum(&[mul(2, residual, w)?, logits], w)?;
            activation_bytes = sum(&[saved_layers, head, layer.max(logits)], w)?;
            gradients_bytes = weights_bytes;
            optimizer_bytes = mul(
                parameters,
                training.optimizer_bytes_per_parameter(),
                "the optimizer states",
            )?;
        }
    }
    let total_bytes = sum(
        &[
            weights_bytes,
            kv_cache_bytes,
            activation_bytes,
            gradients_bytes,
            optimizer_bytes,
        ],
        "the total",
    )?;
    Ok(Estimate {
        seq: s,
        parameters,
        weights_bytes,
        kv_cache_bytes,
        activation_bytes,
        gradients_bytes,
        optimizer_bytes,
        total_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{Architecture, Optimizer};

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
        assert_eq!(c.layer_parameters().unwrap(), 64 + 64 + 64 + 384 + 16);
        // embeddings 10·8, final norm 8, untied head 10·8.
        assert_eq!(c.parameters().unwrap(), 80 + 2 * 592 + 8 + 80);
        // Qwen2 adds biases on q (8), k and v (4 each).
        let q = tiny(Architecture::Qwen2);
        assert_eq!(q.layer_parameters().unwrap(), 592 + 16);
        // GPT-2: biases everywhere, LayerNorm, plain MLP, tied head, learned positions.
        let g = tiny(Architecture::Gpt2);
        let layer = 64 + 64 + 64 + 8 + 8 + 8 + 2 * 128 + 16 + 8 + 2 * 16;
        assert_eq!(g.layer_parameters().unwrap(), layer);
        assert_eq!(g.parameters().unwrap(), 80 + 32 + 2 * layer + 16);
    }

    #[test]
    fn kv_cache_and_training_accounting() {
        let c = tiny(Architecture::Llama);
        let e = estimate(&c, &Workload::inference(3, 5, DType::F16)).unwrap();
        assert_eq!(e.kv_cache_bytes, 3 * 5 * 2 * 4 * 2 * 2);
        assert_eq!(e.weights_bytes, 2 * e.parameters);
        assert_eq!(e.gradients_bytes + e.optimizer_bytes, 0);
        assert_eq!(
            e.total_bytes,
            e.weights_bytes + e.kv_cache_bytes + e.activation_bytes
        );
        let train = |optimizer, master_weights, checkpointing| {
            let mut w = Workload::inference(3, 5, DType::BF16);
            w.training = Some(Training {
                optimizer,
                master_weights,
                checkpointing,
            });
            estimate(&c, &w).unwrap()
        };
        let mixed = train(Optimizer::AdamW, true, false);
        assert_eq!(mixed.kv_cache_bytes, 0);
        assert_eq!(
            mixed.weights_bytes + mixed.gradients_bytes + mixed.optimizer_bytes,
            16 * mixed.parameters
        );
        let sgd = train(Optimizer::Sgd, false, false);
        assert_eq!(sgd.optimizer_bytes, 0);
        assert_eq!(
            train(Optimizer::Momentum, false, false).optimizer_bytes,
            4 * sgd.parameters
        );
        let ckpt = train(Optimizer::AdamW, true, true);
        assert!(ckpt.activation_bytes < mixed.activation_bytes);
        assert!(mixed.activation_bytes > e.activation_bytes);
    }

    #[test]
    fn flash_attention_removes_the_quadratic_term() {
        let c = tiny(Architecture::Llama);
        let at = |seq, attention| {
            let mut w = Workload::inference(1, seq, DType::F32);
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
        let w = Workload::inference(0, 5, DType::F16);
        assert!(matches!(estimate(&c, &w), Err(EstimateError::Invalid(_))));
        let w = Workload::inference(u64::MAX, 5, DType::F16);
        assert!(matches!(
            estimate(&c, &w),
            Err(EstimateError::Overflow { .. })
        ));
        // GPT-2's learned table has 4 positions here: a fifth has no embedding.
        let g = tiny(Architecture::Gpt2);
        let w = Workload::inference(1, 5, DType::F16);
        assert!(
            matches!(estimate(&g, &w), Err(EstimateError::Invalid(m)) if m.contains("positions"))
        );
        let w = Workload::inference(1, 5, DType::String);
        assert!(matches!(estimate(&c, &w), Err(EstimateError::Unsized(_))));
        let w = Workload {
            weight_dtype: Some(DType::I4),
            ..Workload::inference(1, 5, DType::F16)
        };
        let e = estimate(&c, &w).unwrap();
        assert_eq!(e.weights_bytes, e.parameters.div_ceil(2));
    }
}
