//! Every parameter tensor of a transformer, as the modeling code defines it, and what each
//! one costs on one device: exact parameter counts, active parameters of MoE models, the
//! bytes of quantized weights, and the share of each device under tensor, pipeline and
//! expert parallelism.
//!
//! [`TransformerConfig::inventory`] lists the tensors logically (Q, K and V apart even where
//! a model fuses them; their sizes add up the same). Each entry says how tensor parallelism
//! splits it (Megatron/vLLM: Q/K/V and the MLP's first matrices by output columns, O and the
//! MLP's last matrix by input rows, embedding and LM head by vocabulary rows, norms and
//! row-parallel biases replicated, key/value heads replicated when there are fewer than
//! devices), where it sits in a pipeline (embedding, layer `i`, head), and whether a
//! quantized format applies (linear weights; embeddings and the LM head only when asked;
//! norms, biases, routers never).

use memplan_ir::DType;

use super::{
    Architecture, EstimateError, Mla, Mlp, Norm, QkNorm, TransformerConfig, mul, product, sum,
};

/// How tensor parallelism splits a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shard {
    /// Split by output rows (column-parallel linear, its bias).
    Column,
    /// Split by key/value heads: `kv_heads / tp` heads, or one head replicated when there
    /// are fewer key/value heads than devices.
    KvHeads,
    /// Split by input columns (row-parallel linear).
    Row,
    /// Split by vocabulary rows (vocabulary-parallel embedding and LM head).
    Vocab,
    /// Whole on every device (norms, row-parallel biases, routers, MLA's down-projections).
    Replicated,
}

/// Where a tensor sits in a pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placement {
    /// The first stage (embeddings).
    Embedding,
    /// The stage holding layer `i`.
    Layer(u64),
    /// The last stage (final norm, LM head, pooler, classifier).
    Head,
}

/// What kind of tensor, for quantization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// A linear layer's weight matrix: quantized when a format is asked for.
    Linear,
    /// The token embedding or the LM head: quantized only when asked.
    Embedding,
    /// Everything else (norms, biases, position tables, routers): never quantized.
    Other,
}

/// One parameter tensor (or `copies` identical ones: the routed experts of a layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParamTensor {
    /// What it is (`q_proj`, `experts.down`, ...).
    pub name: &'static str,
    /// Output features (rows of the weight matrix; the length of a vector).
    pub rows: u64,
    /// Input features (1 for a vector).
    pub cols: u64,
    /// Identical copies (routed experts); 1 otherwise.
    pub copies: u64,
    /// Routed experts: only `experts_per_token` of the copies are active per token.
    pub routed: bool,
    /// Quantization class.
    pub role: Role,
    /// Tensor-parallel split.
    pub shard: Shard,
    /// Pipeline placement.
    pub place: Placement,
}

impl ParamTensor {
    /// Parameters in it.
    pub fn elements(&self) -> Result<u64, EstimateError> {
        product(&[self.copies, self.rows, self.cols], "the parameter count")
    }
}

/// A quantized weight format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum QuantKind {
    /// 8-bit integers, symmetric, one `f32` scale per group.
    Int8,
    /// 4-bit integers, asymmetric (GPTQ/AWQ): one `f16` scale and one 4-bit zero point per
    /// group.
    Int4,
    /// 4-bit NormalFloat (bitsandbytes, no double quantization): one `f32` absmax per group.
    Nf4,
    /// 8-bit floats (e4m3), one `f32` scale per group.
    Fp8,
}

impl QuantKind {
    /// Every format, in declaration order.
    pub const ALL: [QuantKind; 4] = [
        QuantKind::Int8,
        QuantKind::Int4,
        QuantKind::Nf4,
        QuantKind::Fp8,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            QuantKind::Int8 => "int8",
            QuantKind::Int4 => "int4",
            QuantKind::Nf4 => "nf4",
            QuantKind::Fp8 => "fp8",
        }
    }

    /// Bits per weight.
    pub fn bits(self) -> u64 {
        match self {
            QuantKind::Int8 | QuantKind::Fp8 => 8,
            QuantKind::Int4 | QuantKind::Nf4 => 4,
        }
    }

    /// Bytes of one group's scale.
    pub fn scale_bytes(self) -> u64 {
        match self {
            QuantKind::Int4 => 2,
            QuantKind::Int8 | QuantKind::Nf4 | QuantKind::Fp8 => 4,
        }
    }

    /// Bits of one group's zero point (0: symmetric).
    pub fn zero_bits(self) -> u64 {
        match self {
            QuantKind::Int4 => 4,
            _ => 0,
        }
    }

    /// The group size used when none is given: 128 for int4 (GPTQ/AWQ), 64 for nf4
    /// (bitsandbytes' block), and one group per output channel (0) for int8 and fp8.
    pub fn default_group_size(self) -> u64 {
        match self {
            QuantKind::Int4 => 128,
            QuantKind::Nf4 => 64,
            QuantKind::Int8 | QuantKind::Fp8 => 0,
        }
    }
}

impl std::str::FromStr for QuantKind {
    type Err = String;
    fn from_str(s: &str) -> Result<QuantKind, String> {
        QuantKind::ALL
            .into_iter()
            .find(|q| q.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown weight format `{s}` (expected int8, int4, nf4 or fp8)"))
    }
}

/// How the weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WeightFormat {
    /// The dtype of unquantized tensors (and of every tensor without a quantized format).
    pub dtype: DType,
    /// A quantized format for linear weights, and its group size along the input features
    /// (0: one group per output row).
    pub quant: Option<(QuantKind, u64)>,
    /// Quantize the token embedding and the LM head too.
    pub quantize_embeddings: bool,
}

impl WeightFormat {
    /// This format with [`dtype`](WeightFormat::dtype) set to `dtype`.
    pub fn with_dtype(mut self, dtype: DType) -> WeightFormat {
        self.dtype = dtype;
        self
    }

    /// This format with [`quant`](WeightFormat::quant) set to `quant`.
    pub fn with_quant(mut self, quant: Option<(QuantKind, u64)>) -> WeightFormat {
        self.quant = quant;
        self
    }

    /// This format with [`quantize_embeddings`](WeightFormat::quantize_embeddings) set
    /// to `quantize_embeddings`.
    pub fn with_quantize_embeddings(mut self, quantize_embeddings: bool) -> WeightFormat {
        self.quantize_embeddings = quantize_embeddings;
        self
    }
}

impl WeightFormat {
    /// Every tensor in `dtype`.
    pub fn plain(dtype: DType) -> WeightFormat {
        WeightFormat {
            dtype,
            quant: None,
            quantize_embeddings: false,
        }
    }

    /// Bytes of `copies` matrices of `rows × cols` of role `role`.
    pub fn bytes(
        &self,
        role: Role,
        rows: u64,
        cols: u64,
        copies: u64,
    ) -> Result<u64, EstimateError> {
        let w = "the weight bytes";
        let quantized = match role {
            Role::Linear => self.quant,
            Role::Embedding if self.quantize_embeddings => self.quant,
            _ => None,
        };
        let one = match quantized {
            None => super::elements_bytes(mul(rows, cols, w)?, self.dtype, w)?,
            Some((kind, group)) => {
                let groups_per_row = if group == 0 { 1 } else { cols.div_ceil(group) };
                let groups = mul(rows, groups_per_row, w)?;
                sum(
                    &[
                        product(&[rows, cols, kind.bits()], w)?.div_ceil(8),
                        mul(groups, kind.scale_bytes(), w)?,
                        mul(groups, kind.zero_bits(), w)?.div_ceil(8),
                    ],
                    w,
                )?
            }
        };
        mul(one, copies, w)
    }
}

/// How the model is spread over devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Parallelism {
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Pipeline stages.
    pub pp: u64,
    /// Expert-parallel degree: routed experts spread whole over this many devices (which
    /// then do not split each expert by tensor parallelism).
    pub ep: u64,
    /// Data-parallel replicas.
    pub dp: u64,
    /// ZeRO stage (0 to 3) over the data-parallel replicas, for training.
    pub zero: u8,
    /// Sequence parallelism with tensor parallelism in training (norm and dropout
    /// activations split along the sequence too, as Korthikanti et al. do).
    pub sequence_parallel: bool,
}

impl Parallelism {
    /// This layout with [`tp`](Parallelism::tp) set to `tp`.
    pub fn with_tp(mut self, tp: u64) -> Parallelism {
        self.tp = tp;
        self
    }

    /// This layout with [`pp`](Parallelism::pp) set to `pp`.
    pub fn with_pp(mut self, pp: u64) -> Parallelism {
        self.pp = pp;
        self
    }

    /// This layout with [`ep`](Parallelism::ep) set to `ep`.
    pub fn with_ep(mut self, ep: u64) -> Parallelism {
        self.ep = ep;
        self
    }

    /// This layout with [`dp`](Parallelism::dp) set to `dp`.
    pub fn with_dp(mut self, dp: u64) -> Parallelism {
        self.dp = dp;
        self
    }

    /// This layout with [`zero`](Parallelism::zero) set to `zero`.
    pub fn with_zero(mut self, zero: u8) -> Parallelism {
        self.zero = zero;
        self
    }

    /// This layout with [`sequence_parallel`](Parallelism::sequence_parallel) set
    /// to `sequence_parallel`.
    pub fn with_sequence_parallel(mut self, sequence_parallel: bool) -> Parallelism {
        self.sequence_parallel = sequence_parallel;
        self
    }
}

impl Default for Parallelism {
    fn default() -> Parallelism {
        Parallelism {
            tp: 1,
            pp: 1,
            ep: 1,
            dp: 1,
            zero: 0,
            sequence_parallel: true,
        }
    }
}

impl Parallelism {
    /// Devices in all: `tp × pp × dp`.
    pub fn devices(&self) -> Result<u64, EstimateError> {
        product(&[self.tp, self.pp, self.dp], "the device count")
    }

    /// Whether anything is spread.
    pub fn is_single(&self) -> bool {
        self.tp == 1 && self.pp == 1 && self.ep == 1 && self.dp == 1
    }

    /// Checks the degrees against the model: every degree positive, the query heads a
    /// multiple of `tp`, the key/value heads a multiple or a divisor of it, no more stages
    /// than layers, `ep` at most the experts and dividing `tp × dp`, ZeRO 0 to 3.
    pub fn check(&self, config: &TransformerConfig) -> Result<(), EstimateError> {
        use super::bad_setting as bad;
        for (setting, v) in [
            ("tp", self.tp),
            ("pp", self.pp),
            ("ep", self.ep),
            ("dp", self.dp),
        ] {
            if v == 0 {
                return bad(setting, "must be at least 1");
            }
        }
        if self.zero > 3 {
            return bad(
                "zero",
                format!("{} is not a ZeRO stage (0, 1, 2 or 3)", self.zero),
            );
        }
        if !config.heads.is_multiple_of(self.tp) {
            return bad(
                "tp",
                format!(
                    "{}: the {} attention heads do not split evenly over {} devices",
                    self.tp, config.heads, self.tp
                ),
            );
        }
        if config.mla.is_none()
            && !config.kv_heads.is_multiple_of(self.tp)
            && !self.tp.is_multiple_of(config.kv_heads)
        {
            return bad(
                "tp",
                format!(
                    "{}: {} key/value heads neither split over {} devices nor replicate evenly",
                    self.tp, config.kv_heads, self.tp
                ),
            );
        }
        if self.pp > config.layers {
            return bad(
                "pp",
                format!(
                    "{}: more pipeline stages than the model's {} layers",
                    self.pp, config.layers
                ),
            );
        }
        if self.ep > 1 {
            let experts = config.moe.as_ref().map_or(0, |m| m.experts);
            if experts == 0 {
                return bad("ep", "needs a mixture-of-experts model");
            }
            if self.ep > experts {
                return bad(
                    "ep",
                    format!("{}: the model has {experts} experts", self.ep),
                );
            }
            let group = mul(self.tp, self.dp, "the device count")?;
            if !group.is_multiple_of(self.ep) {
                return bad(
                    "ep",
                    format!(
                        "{} spreads experts over the tp × dp = {group} devices of a stage: it must divide {group}",
                        self.ep
                    ),
                );
            }
        }
        Ok(())
    }

    /// The layers of each pipeline stage, as vLLM assigns them: `layers / pp` each, the
    /// remainder one more to each stage before the last, counting back from it.
    pub fn stages(&self, layers: u64) -> Vec<std::ops::Range<u64>> {
        let pp = self.pp.max(1);
        let mut sizes = vec![layers / pp; pp as usize];
        let remainder = (layers % pp) as usize;
        for i in 2..remainder + 2 {
            let at = sizes.len() - i.min(sizes.len());
            sizes[at] += 1;
        }
        let mut start = 0;
        sizes
            .into_iter()
            .map(|n| {
                let r = start..start + n;
                start += n;
                r
            })
            .collect()
    }

    /// Key/value heads on one device out of `kv_heads`.
    pub fn kv_heads_per_device(&self, kv_heads: u64) -> u64 {
        (kv_heads / self.tp.max(1)).max(1)
    }
}

impl TransformerConfig {
    fn norm_size(&self) -> u64 {
        // OLMo's LayerNorms have no parameters.
        if self.architecture == Architecture::Olmo {
            return 0;
        }
        match self.norm {
            Norm::Rms => 1,
            Norm::Layer => 2,
        }
    }

    /// The attention tensors of layer `i`.
    fn attention_tensors(&self, i: u64, out: &mut Vec<ParamTensor>) -> Result<(), EstimateError> {
        let w = "layer parameters";
        let h = self.hidden;
        let place = Placement::Layer(i);
        let t = |name, rows, cols, role, shard| ParamTensor {
            name,
            rows,
            cols,
            copies: 1,
            routed: false,
            role,
            shard,
            place,
        };
        if let Some(Mla {
            q_lora_rank,
            kv_lora_rank,
            qk_rope_head_dim,
            v_head_dim,
            qk_nope_head_dim,
        }) = self.mla
        {
            let qk = mul(self.heads, self.head_dim, w)?;
            match q_lora_rank {
                Some(r) => {
                    out.push(t("q_a_proj", r, h, Role::Linear, Shard::Replicated));
                    if self.qkv_bias {
                        out.push(t("q_a_proj.bias", r, 1, Role::Other, Shard::Replicated));
                    }
                    out.push(t("q_a_layernorm", r, 1, Role::Other, Shard::Replicated));
                    out.push(t("q_b_proj", qk, r, Role::Linear, Shard::Column));
                }
                None => out.push(t("q_proj", qk, h, Role::Linear, Shard::Column)),
            }
            let latent = sum(&[kv_lora_rank, qk_rope_head_dim], w)?;
            out.push(t(
                "kv_a_proj_with_mqa",
                latent,
                h,
                Role::Linear,
                Shard::Replicated,
            ));
            if self.qkv_bias {
                out.push(t(
                    "kv_a_proj_with_mqa.bias",
                    latent,
                    1,
                    Role::Other,
                    Shard::Replicated,
                ));
            }
            out.push(t(
                "kv_a_layernorm",
                kv_lora_rank,
                1,
                Role::Other,
                Shard::Replicated,
            ));
            let kv_b = mul(self.heads, sum(&[qk_nope_head_dim, v_head_dim], w)?, w)?;
            out.push(t(
                "kv_b_proj",
                kv_b,
                kv_lora_rank,
                Role::Linear,
                Shard::Column,
            ));
            let v = mul(self.heads, v_head_dim, w)?;
            out.push(t("o_proj", h, v, Role::Linear, Shard::Row));
            if self.o_bias {
                out.push(t("o_proj.bias", h, 1, Role::Other, Shard::Replicated));
            }
            return Ok(());
        }
        let q = mul(self.heads, self.head_dim, w)?;
        let kv = mul(self.kv_heads, self.head_dim, w)?;
        out.push(t("q_proj", q, h, Role::Linear, Shard::Column));
        out.push(t("k_proj", kv, h, Role::Linear, Shard::KvHeads));
        out.push(t("v_proj", kv, h, Role::Linear, Shard::KvHeads));
        if self.qkv_bias {
            out.push(t("q_proj.bias", q, 1, Role::Other, Shard::Column));
            out.push(t("k_proj.bias", kv, 1, Role::Other, Shard::KvHeads));
            out.push(t("v_proj.bias", kv, 1, Role::Other, Shard::KvHeads));
        }
        out.push(t("o_proj", h, q, Role::Linear, Shard::Row));
        if self.o_bias {
            out.push(t("o_proj.bias", h, 1, Role::Other, Shard::Replicated));
        }
        // gpt-oss: one learned attention sink per query head.
        if self.architecture == Architecture::GptOss {
            out.push(t("sinks", self.heads, 1, Role::Other, Shard::Column));
        }
        match self.qk_norm {
            QkNorm::None => {}
            QkNorm::PerHead => {
                out.push(t(
                    "q_norm",
                    self.head_dim,
                    1,
                    Role::Other,
                    Shard::Replicated,
                ));
                out.push(t(
                    "k_norm",
                    self.head_dim,
                    1,
                    Role::Other,
                    Shard::Replicated,
                ));
            }
            // OLMoE sizes its norms from the model width: `hidden` and
            // `hidden / heads × kv_heads`, whatever `head_dim` says.
            QkNorm::Full if self.architecture == Architecture::Olmoe => {
                let kv = mul(self.hidden / self.heads.max(1), self.kv_heads, w)?;
                out.push(t("q_norm", h, 1, Role::Other, Shard::Column));
                out.push(t("k_norm", kv, 1, Role::Other, Shard::KvHeads));
            }
            QkNorm::Full => {
                out.push(t("q_norm", q, 1, Role::Other, Shard::Column));
                out.push(t("k_norm", kv, 1, Role::Other, Shard::KvHeads));
            }
            // One `head_dim` weight per head (StableLM's `StableLmLayerNormPerHead`), each
            // rank holding its heads'.
            QkNorm::EachHead => {
                out.push(t("q_layernorm", q, 1, Role::Other, Shard::Column));
                out.push(t("k_layernorm", kv, 1, Role::Other, Shard::KvHeads));
            }
        }
        Ok(())
    }

    /// An MLP of width `width` (dense or shared: `experts` None; or that many routed
    /// experts).
    fn mlp_tensors(
        &self,
        place: Placement,
        width: u64,
        experts: Option<u64>,
        bias: bool,
        names: [&'static str; 3],
        out: &mut Vec<ParamTensor>,
    ) {
        let h = self.hidden;
        let t = |name, rows, cols, role, shard| ParamTensor {
            name,
            rows,
            cols,
            copies: experts.unwrap_or(1),
            routed: experts.is_some(),
            role,
            shard,
            place,
        };
        let [gate, up, down] = names;
        if self.mlp == Mlp::Gated {
            out.push(t(gate, width, h, Role::Linear, Shard::Column));
        }
        out.push(t(up, width, h, Role::Linear, Shard::Column));
        out.push(t(down, h, width, Role::Linear, Shard::Row));
        if bias {
            if self.mlp == Mlp::Gated {
                out.push(t("mlp.gate.bias", width, 1, Role::Other, Shard::Column));
            }
            out.push(t("mlp.up.bias", width, 1, Role::Other, Shard::Column));
            out.push(t("mlp.down.bias", h, 1, Role::Other, Shard::Replicated));
        }
    }

    /// Every parameter tensor of layer `i`: attention, MLP or MoE block, norms.
    pub fn layer_tensors(&self, i: u64) -> Result<Vec<ParamTensor>, EstimateError> {
        let mut out = Vec::new();
        let place = Placement::Layer(i);
        self.attention_tensors(i, &mut out)?;
        if self.cross_attention {
            // The same projections again, over the encoder's states, and their LayerNorm.
            let mut cross = Vec::new();
            self.attention_tensors(i, &mut cross)?;
            out.extend(cross.into_iter().map(|t| ParamTensor {
                name: "cross_attention",
                ..t
            }));
            out.push(ParamTensor {
                name: "cross_attention.norm",
                rows: mul(self.norm_size(), self.hidden, "layer parameters")?,
                cols: 1,
                copies: 1,
                routed: false,
                role: Role::Other,
                shard: Shard::Replicated,
                place,
            });
        }
        let other = |name, rows| ParamTensor {
            name,
            rows,
            cols: 1,
            copies: 1,
            routed: false,
            role: Role::Other,
            shard: Shard::Replicated,
            place,
        };
        match &self.moe {
            Some(moe) if self.is_sparse_layer(i) => {
                out.push(ParamTensor {
                    cols: self.hidden,
                    ..other("router", moe.experts)
                });
                // gpt-oss: a biased router and biased experts.
                let gpt_oss = self.architecture == Architecture::GptOss;
                if gpt_oss {
                    out.push(other("router.bias", moe.experts));
                }
                // ERNIE 4.5 MoE: the router's correction bias is a parameter (never
                // trained: `requires_grad=False`).
                if self.architecture == Architecture::Ernie45Moe {
                    out.push(other("moe_statics", moe.experts));
                }
                self.mlp_tensors(
                    place,
                    moe.intermediate,
                    Some(moe.experts),
                    gpt_oss,
                    ["experts.gate", "experts.up", "experts.down"],
                    &mut out,
                );
                // DeepSeek-V2 builds its shared MLP even of width 0 (`n_shared_experts:
                // 0`), whose down projection keeps its `mlp_bias`.
                let v2_bias = self.architecture == Architecture::DeepseekV2 && self.mlp_bias;
                if moe.shared_intermediate > 0 || v2_bias {
                    self.mlp_tensors(
                        place,
                        moe.shared_intermediate,
                        None,
                        self.mlp_bias,
                        ["shared.gate", "shared.up", "shared.down"],
                        &mut out,
                    );
                }
                if moe.shared_expert_gate {
                    out.push(ParamTensor {
                        cols: self.hidden,
                        ..other("shared_expert_gate", 1)
                    });
                }
            }
            _ => self.mlp_tensors(
                place,
                self.intermediate,
                None,
                self.mlp_bias,
                ["mlp.gate", "mlp.up", "mlp.down"],
                &mut out,
            ),
        }
        let norm = mul(self.norm_size(), self.hidden, "layer parameters")?;
        for _ in 0..self.norms_per_layer {
            out.push(other("norm", norm));
        }
        Ok(out)
    }

    /// The tensors before the first layer: token embedding, learned positions, token types,
    /// BERT's embedding norm; a vision model's patch projection, class token and positions.
    pub fn embedding_tensors(&self) -> Result<Vec<ParamTensor>, EstimateError> {
        let w = "embedding parameters";
        let h = self.hidden;
        let t = |name, rows, cols, role, shard| ParamTensor {
            name,
            rows,
            cols,
            copies: 1,
            routed: false,
            role,
            shard,
            place: Placement::Embedding,
        };
        let mut out = Vec::new();
        if let Some(v) = self.vision {
            let patch = product(&[v.channels, v.patch_size[0], v.patch_size[1]], w)?;
            out.push(t(
                "patch_embeddings",
                h,
                patch,
                Role::Linear,
                Shard::Replicated,
            ));
            out.push(t(
                "patch_embeddings.bias",
                h,
                1,
                Role::Other,
                Shard::Replicated,
            ));
            out.push(t("cls_token", h, 1, Role::Other, Shard::Replicated));
            let positions = self.fixed_sequence().unwrap_or(1);
            out.push(t(
                "position_embeddings",
                positions,
                h,
                Role::Other,
                Shard::Replicated,
            ));
            return Ok(out);
        }
        if let Some(v) = self.vision_tower {
            let vh = v.hidden;
            let side = v.image_size / v.patch_size.max(1);
            let patch = product(&[v.channels, v.patch_size, v.patch_size], w)?;
            out.push(t(
                "vision.patch_embedding",
                vh,
                patch,
                Role::Linear,
                Shard::Replicated,
            ));
            out.push(t(
                "vision.patch_embedding.bias",
                vh,
                1,
                Role::Other,
                Shard::Replicated,
            ));
            out.push(t(
                "vision.position_embedding",
                mul(side, side, w)?,
                vh,
                Role::Other,
                Shard::Replicated,
            ));
            let layers = v.layers;
            let rep = |name, rows, cols, role| ParamTensor {
                copies: layers,
                ..t(name, rows, cols, role, Shard::Replicated)
            };
            // Per layer: two LayerNorms, Q, K, V, O with biases, fc1 and fc2 with biases.
            out.push(rep("vision.layer_norms", 4 * vh, 1, Role::Other));
            out.push(rep("vision.attention", 4 * vh, vh, Role::Linear));
            out.push(rep("vision.attention.bias", 4 * vh, 1, Role::Other));
            out.push(rep("vision.fc1", v.intermediate, vh, Role::Linear));
            out.push(rep("vision.fc1.bias", v.intermediate, 1, Role::Other));
            out.push(rep("vision.fc2", vh, v.intermediate, Role::Linear));
            out.push(rep("vision.fc2.bias", vh, 1, Role::Other));
            out.push(t(
                "vision.post_layernorm",
                2 * vh,
                1,
                Role::Other,
                Shard::Replicated,
            ));
            if v.head {
                // Attention pooling: probe, in/out projections with biases, LayerNorm, MLP.
                out.push(t(
                    "vision.head.probe",
                    vh,
                    1,
                    Role::Other,
                    Shard::Replicated,
                ));
                out.push(t(
                    "vision.head.attention",
                    4 * vh,
                    vh,
                    Role::Linear,
                    Shard::Replicated,
                ));
                out.push(t(
                    "vision.head.attention.bias",
                    4 * vh,
                    1,
                    Role::Other,
                    Shard::Replicated,
                ));
                out.push(t(
                    "vision.head.layernorm",
                    2 * vh,
                    1,
                    Role::Other,
                    Shard::Replicated,
                ));
                out.push(t(
                    "vision.head.fc1",
                    v.intermediate,
                    vh,
                    Role::Linear,
                    Shard::Replicated,
                ));
                out.push(t(
                    "vision.head.fc1.bias",
                    v.intermediate,
                    1,
                    Role::Other,
                    Shard::Replicated,
                ));
                out.push(t(
                    "vision.head.fc2",
                    vh,
                    v.intermediate,
                    Role::Linear,
                    Shard::Replicated,
                ));
                out.push(t(
                    "vision.head.fc2.bias",
                    vh,
                    1,
                    Role::Other,
                    Shard::Replicated,
                ));
            }
            // The projector: an RMSNorm over the vision width and a matrix into the text's.
            out.push(t(
                "multi_modal_projector.norm",
                vh,
                1,
                Role::Other,
                Shard::Replicated,
            ));
            out.push(t(
                "multi_modal_projector",
                vh,
                h,
                Role::Linear,
                Shard::Replicated,
            ));
        }
        out.push(t(
            "embed_tokens",
            self.vocab,
            h,
            Role::Embedding,
            Shard::Vocab,
        ));
        if self.learned_positions > 0 {
            out.push(t(
                "position_embeddings",
                self.learned_positions,
                h,
                Role::Other,
                Shard::Replicated,
            ));
        }
        if self.token_types > 0 {
            out.push(t(
                "token_type_embeddings",
                self.token_types,
                h,
                Role::Other,
                Shard::Replicated,
            ));
        }
        if self.embedding_norm {
            out.push(t(
                "embeddings.norm",
                mul(self.norm_size(), h, w)?,
                1,
                Role::Other,
                Shard::Replicated,
            ));
        }
        Ok(out)
    }

    /// The tensors after the last layer: the final norm, an untied LM head, BERT's pooler,
    /// a vision classifier.
    pub fn head_tensors(&self) -> Result<Vec<ParamTensor>, EstimateError> {
        let h = self.hidden;
        let t = |name, rows, cols, role, shard| ParamTensor {
            name,
            rows,
            cols,
            copies: 1,
            routed: false,
            role,
            shard,
            place: Placement::Head,
        };
        let mut out = Vec::new();
        if !self.embedding_norm {
            out.push(t(
                "norm",
                mul(self.norm_size(), h, "head parameters")?,
                1,
                Role::Other,
                Shard::Replicated,
            ));
        }
        if self.architecture.is_decoder() && !self.tied_embeddings {
            out.push(t("lm_head", self.vocab, h, Role::Embedding, Shard::Vocab));
        }
        // Phi's head has a bias, tied weights or not; ERNIE 4.5 MoE's with `use_bias`.
        if self.architecture == Architecture::Phi
            || (self.architecture == Architecture::Ernie45Moe && self.mlp_bias)
        {
            out.push(t("lm_head.bias", self.vocab, 1, Role::Other, Shard::Vocab));
        }
        if self.pooler {
            out.push(t("pooler", h, h, Role::Linear, Shard::Replicated));
            out.push(t("pooler.bias", h, 1, Role::Other, Shard::Replicated));
        }
        if let Some(v) = self.vision.filter(|v| v.labels > 0) {
            out.push(t(
                "classifier",
                v.labels,
                h,
                Role::Linear,
                Shard::Replicated,
            ));
            out.push(t(
                "classifier.bias",
                v.labels,
                1,
                Role::Other,
                Shard::Replicated,
            ));
        }
        Ok(out)
    }

    /// Every parameter tensor: embeddings, each layer, head.
    pub fn inventory(&self) -> Result<Vec<ParamTensor>, EstimateError> {
        let mut out = self.embedding_tensors()?;
        for i in 0..self.layers {
            out.extend(self.layer_tensors(i)?);
        }
        out.extend(self.head_tensors()?);
        Ok(out)
    }

    /// Parameters of layer `i`.
    pub fn layer_parameters(&self, i: u64) -> Result<u64, EstimateError> {
        count(&self.layer_tensors(i)?)
    }

    /// Parameters of the embeddings.
    pub fn embedding_parameters(&self) -> Result<u64, EstimateError> {
        count(&self.embedding_tensors()?)
    }

    /// Parameters after the last layer.
    pub fn head_parameters(&self) -> Result<u64, EstimateError> {
        count(&self.head_tensors()?)
    }

    /// Every parameter, counted exactly (a tied LM head once).
    pub fn parameters(&self) -> Result<u64, EstimateError> {
        count(&self.inventory()?)
    }

    /// Parameters a token goes through: all but the routed experts it is not sent to
    /// (`experts_per_token` of each sparse layer's experts count). Equal to
    /// [`TransformerConfig::parameters`] for dense models.
    pub fn active_parameters(&self) -> Result<u64, EstimateError> {
        let per_token = self.moe.as_ref().map_or(1, |m| m.experts_per_token);
        let active: Vec<ParamTensor> = self
            .inventory()?
            .into_iter()
            .map(|t| {
                if t.routed {
                    ParamTensor {
                        copies: per_token.min(t.copies),
                        ..t
                    }
                } else {
                    t
                }
            })
            .collect();
        count(&active)
    }

    /// The parameters of the largest layer (ZeRO-3 gathers one layer at a time).
    pub fn largest_layer_parameters(&self) -> Result<u64, EstimateError> {
        let mut largest = 0;
        for i in 0..self.layers {
            largest = largest.max(self.layer_parameters(i)?);
        }
        Ok(largest)
    }
}

/// The parameters of `tensors`.
pub fn count(tensors: &[ParamTensor]) -> Result<u64, EstimateError> {
    let mut total = 0u64;
    for t in tensors {
        total = sum(&[total, t.elements()?], "the parameter count")?;
    }
    Ok(total)
}

/// One device's part of `t` under `p` (key/value heads given for [`Shard::KvHeads`]):
/// `(rows, cols, copies)`.
pub fn device_share(t: &ParamTensor, p: &Parallelism, kv_heads: u64) -> (u64, u64, u64) {
    let tp = p.tp.max(1);
    if t.routed && p.ep > 1 {
        // Expert parallelism: whole experts, spread over `ep` devices.
        return (t.rows, t.cols, t.copies.div_ceil(p.ep));
    }
    match t.shard {
        Shard::Column | Shard::Vocab => (t.rows.div_ceil(tp), t.cols, t.copies),
        Shard::Row => (t.rows, t.cols.div_ceil(tp), t.copies),
        Shard::KvHeads => {
            let per_head = t.rows / kv_heads.max(1);
            (per_head * p.kv_heads_per_device(kv_heads), t.cols, t.copies)
        }
        Shard::Replicated => (t.rows, t.cols, t.copies),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_bytes_count_scales_and_zero_points() {
        let f = |kind: QuantKind, group| WeightFormat {
            dtype: DType::BF16,
            quant: Some((kind, group)),
            quantize_embeddings: false,
        };
        // 4096 × 4096 in int4, groups of 128: 8 MiB of weights, 4096·32 f16 scales and as
        // many 4-bit zeros.
        let int4 = f(QuantKind::Int4, 128)
            .bytes(Role::Linear, 4096, 4096, 1)
            .unwrap();
        assert_eq!(int4, 8 * 1024 * 1024 + 4096 * 32 * 2 + 4096 * 32 / 2);
        // int8 per output row: one f32 scale a row.
        let int8 = f(QuantKind::Int8, 0).bytes(Role::Linear, 10, 7, 3).unwrap();
        assert_eq!(int8, 3 * (70 + 40));
        // A last partial group still has a scale; an odd element count rounds up.
        let nf4 = f(QuantKind::Nf4, 64).bytes(Role::Linear, 3, 65, 1).unwrap();
        assert_eq!(nf4, (3 * 65usize).div_ceil(2) as u64 + 3 * 2 * 4);
        // Norms and (by default) embeddings keep the plain dtype.
        assert_eq!(
            f(QuantKind::Int4, 128)
                .bytes(Role::Other, 4096, 1, 1)
                .unwrap(),
            8192
        );
        assert_eq!(
            f(QuantKind::Int4, 128)
                .bytes(Role::Embedding, 10, 10, 1)
                .unwrap(),
            200
        );
        let both = WeightFormat {
            quantize_embeddings: true,
            ..f(QuantKind::Fp8, 0)
        };
        assert_eq!(both.bytes(Role::Embedding, 10, 10, 1).unwrap(), 100 + 40);
    }

    #[test]
    fn stages_follow_vllm() {
        let p = |pp| Parallelism {
            pp,
            ..Parallelism::default()
        };
        assert_eq!(p(1).stages(5), vec![0..5]);
        assert_eq!(p(2).stages(5), vec![0..3, 3..5]);
        // vLLM gives the remainder to the stages before the last, counting back.
        assert_eq!(p(4).stages(10), vec![0..2, 2..5, 5..8, 8..10]);
        assert_eq!(p(3).stages(3), vec![0..1, 1..2, 2..3]);
        assert_eq!(p(4).stages(80), vec![0..20, 20..40, 40..60, 60..80]);
    }
}
