//! A transformer's shape: read from a Hugging Face `config.json` or built from numbers.
//!
//! Every `model_type` here is read as the `transformers` config class reads it: a key the
//! file leaves out takes that class's default (files written by `save_pretrained` leave out
//! every key equal to its default), and the structure (biases, norms, tied embeddings, which
//! layers are sparse or sliding) follows the modeling code of that architecture. See
//! [`Architecture`] for what each family contains. A mistyped field is a [`ConfigError`]
//! naming it; an unknown `model_type` is refused with the supported list.

use std::str::FromStr;

use memplan_ir::DType;
use serde_json::{Map, Value};

/// The architecture family: what the layers contain besides their sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Architecture {
    /// Llama: gated MLP, RMSNorm, no biases (unless `attention_bias`/`mlp_bias`).
    Llama,
    /// Mistral: as Llama, no biases, a sliding window on every layer when set.
    Mistral,
    /// Mixtral: Mistral's attention, a sparse MoE of gated experts on every layer.
    Mixtral,
    /// Qwen2: as Llama, with biases on Q, K and V; optional sliding layers.
    Qwen2,
    /// Qwen2-MoE: Qwen2's attention; sparse layers with a shared expert and its gate.
    Qwen2Moe,
    /// Qwen3: as Llama with RMSNorms over each head of Q and K.
    Qwen3,
    /// Qwen3-MoE: Qwen3's attention, sparse layers without a shared expert.
    Qwen3Moe,
    /// Gemma: as Llama with a separate `head_dim` and tied embeddings.
    Gemma,
    /// Gemma 2: four norms per layer, sliding and global layers alternating.
    Gemma2,
    /// Gemma 3 (text): Gemma 2's layers plus Q/K norms, five sliding layers in six.
    Gemma3,
    /// Phi-3: fused QKV and gate/up projections, no biases.
    Phi3,
    /// DeepSeek-V2: multi-head latent attention (MLA), MoE with shared experts.
    DeepseekV2,
    /// DeepSeek-V3: as V2 with a grouped top-k router.
    DeepseekV3,
    /// Falcon: fused QKV (multi-query or grouped), parallel attention, LayerNorm.
    Falcon,
    /// GPT-NeoX (Pythia): fused QKV, plain MLP, LayerNorm, biases.
    GptNeox,
    /// StarCoder2: grouped-query attention, plain MLP, LayerNorm, biases, sliding window.
    Starcoder2,
    /// OLMo 2: norms after attention and MLP, Q/K norms over the whole projection.
    Olmo2,
    /// GPT-2: plain MLP, LayerNorm, learned positions, biases everywhere.
    Gpt2,
    /// BERT: encoder, token types, embedding LayerNorm, pooler.
    Bert,
    /// ViT: encoder over image patches with a class token.
    Vit,
    /// Granite: Llama's layers with four multipliers (the embeddings, each residual branch,
    /// the attention scores, the logits), each one more elementwise op.
    Granite,
    /// SmolLM3: Llama's layers, some without rotary positions (NoPE, `no_rope_layers`),
    /// tied embeddings.
    SmolLm3,
    /// Phi (Phi-1/1.5/2): separate Q, K, V with biases, partial rotary (half of each head
    /// by default), one LayerNorm feeding attention and MLP in parallel, a plain `gelu_new`
    /// MLP, an LM head with a bias.
    Phi,
    /// Cohere (Command R): Llama's attention and MLP in parallel after one `CohereLayerNorm`
    /// (a scale only, computed in f32), the rotation in f32 on interleaved halves, the logits
    /// scaled by `logit_scale`.
    Cohere,
    /// GLM (GLM-4-9B): Llama's layers with biased Q/K/V, a fused gate/up projection and
    /// half of each head rotating on interleaved pairs.
    Glm,
    /// GLM-4 (GLM-4-0414): GLM's layers with norms after attention and MLP too.
    Glm4,
    /// OLMo (OLMo-1): Llama's layers with LayerNorms that have no parameters, computed in
    /// f32, and f32 rotary tables.
    Olmo,
    /// gpt-oss: biased Q/K/V/O with a learned attention sink per head, sliding and full
    /// layers alternating, OLMo 2's RMSNorm, a sparse MoE on every layer with a biased
    /// router (top-k, then a softmax over the k), biased experts on interleaved gate/up
    /// halves and a clamped SwiGLU.
    GptOss,
    /// GLM-4.5 (`glm4_moe`): Llama's layers with half of each head rotating (GPT-NeoX's
    /// slicing), optional per-head Q/K norms, the first `first_k_dense_replace` layers
    /// dense and the rest DeepSeek-V3's sparse layers (an f32 sigmoid router, shared
    /// experts).
    Glm4Moe,
    /// OLMoE: OLMo 2's attention (RMSNorms over all of Q and over all of K, before the
    /// rotation) with Llama's norms, and a sparse MoE on every layer (softmax router,
    /// no shared expert).
    Olmoe,
    /// Granite-MoE: Granite's layers and multipliers with a sparse MoE on every layer (a
    /// router whose f32 logits are cut to the top k before their softmax).
    GraniteMoe,
    /// Cohere 2 (Command R7B, Command A): Cohere's parallel layers, three sliding layers
    /// in four (`layer_types`), rotary positions on the sliding layers only (the full ones
    /// are NoPE).
    Cohere2,
    /// Seed-OSS: Llama's layers with biased Q/K/V (`attention_bias`, on by default), an
    /// optional O bias (`attention_out_bias`), 128-wide heads by default, and dropout on the
    /// probabilities and both residual branches (0.1 by default).
    SeedOss,
    /// EXAONE 4.0: OLMo 2's order (`x + norm(attn(x))`, `h + norm(mlp(h))`) with Llama's
    /// RMSNorm, per-head RMSNorms of Q and K after the three projections, and three sliding
    /// layers in four (`sliding_window_pattern` or `layer_types`) that alone rotate when the
    /// config has a window (the full ones are NoPE).
    Exaone4,
    /// StableLM (StableLM-2, StableLM-3B-4E1T, Zephyr): LayerNorms with biases, a gated
    /// SiLU MLP, a quarter of each head rotated (sliced, rotated, concatenated back in the
    /// attention's forward), optional Q/K/V biases (`use_qkv_bias`), and one-norm parallel
    /// blocks with `use_parallel_residual`; dropout on the MLP's output only.
    StableLm,
    /// Hunyuan dense (`hunyuan_v1_dense`): Llama's layers with biased Q/K/V/O
    /// (`attention_bias`) and per-head RMSNorms of Q and K applied after the rotary
    /// positions.
    HunyuanV1Dense,
    /// ERNIE 4.5 dense (`ernie4_5`): Llama's layers with `use_bias` on every projection but
    /// the head, and rotary positions applied in f32 with interleaved tables.
    Ernie45,
    /// ERNIE 4.5 MoE (`ernie4_5_moe`): ERNIE 4.5's attention; sparse layers (from
    /// `moe_layer_start_index`, every `moe_layer_interval`-th) of routed experts behind an
    /// f32 router with a learned-free correction bias, plus shared experts run first.
    Ernie45Moe,
}

impl Architecture {
    /// Every architecture, in declaration order.
    pub const ALL: [Architecture; 38] = [
        Architecture::Llama,
        Architecture::Mistral,
        Architecture::Mixtral,
        Architecture::Qwen2,
        Architecture::Qwen2Moe,
        Architecture::Qwen3,
        Architecture::Qwen3Moe,
        Architecture::Gemma,
        Architecture::Gemma2,
        Architecture::Gemma3,
        Architecture::Phi3,
        Architecture::DeepseekV2,
        Architecture::DeepseekV3,
        Architecture::Falcon,
        Architecture::GptNeox,
        Architecture::Starcoder2,
        Architecture::Olmo2,
        Architecture::Gpt2,
        Architecture::Bert,
        Architecture::Vit,
        Architecture::Granite,
        Architecture::SmolLm3,
        Architecture::Phi,
        Architecture::Cohere,
        Architecture::Glm,
        Architecture::Glm4,
        Architecture::Olmo,
        Architecture::GptOss,
        Architecture::Glm4Moe,
        Architecture::Olmoe,
        Architecture::GraniteMoe,
        Architecture::Cohere2,
        Architecture::SeedOss,
        Architecture::Exaone4,
        Architecture::StableLm,
        Architecture::HunyuanV1Dense,
        Architecture::Ernie45,
        Architecture::Ernie45Moe,
    ];

    /// The `model_type` string of `config.json` (Gemma 3's text model also reads as
    /// `gemma3_text`).
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Mixtral => "mixtral",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen2Moe => "qwen2_moe",
            Architecture::Qwen3 => "qwen3",
            Architecture::Qwen3Moe => "qwen3_moe",
            Architecture::Gemma => "gemma",
            Architecture::Gemma2 => "gemma2",
            Architecture::Gemma3 => "gemma3",
            Architecture::Phi3 => "phi3",
            Architecture::DeepseekV2 => "deepseek_v2",
            Architecture::DeepseekV3 => "deepseek_v3",
            Architecture::Falcon => "falcon",
            Architecture::GptNeox => "gpt_neox",
            Architecture::Starcoder2 => "starcoder2",
            Architecture::Olmo2 => "olmo2",
            Architecture::Gpt2 => "gpt2",
            Architecture::Bert => "bert",
            Architecture::Vit => "vit",
            Architecture::Granite => "granite",
            Architecture::SmolLm3 => "smollm3",
            Architecture::Phi => "phi",
            Architecture::Cohere => "cohere",
            Architecture::Glm => "glm",
            Architecture::Glm4 => "glm4",
            Architecture::Olmo => "olmo",
            Architecture::GptOss => "gpt_oss",
            Architecture::Glm4Moe => "glm4_moe",
            Architecture::Olmoe => "olmoe",
            Architecture::GraniteMoe => "granitemoe",
            Architecture::Cohere2 => "cohere2",
            Architecture::SeedOss => "seed_oss",
            Architecture::Exaone4 => "exaone4",
            Architecture::StableLm => "stablelm",
            Architecture::HunyuanV1Dense => "hunyuan_v1_dense",
            Architecture::Ernie45 => "ernie4_5",
            Architecture::Ernie45Moe => "ernie4_5_moe",
        }
    }

    /// Whether the model decodes token by token with a KV cache (the decoders).
    pub fn is_decoder(self) -> bool {
        !matches!(self, Architecture::Bert | Architecture::Vit)
    }

    /// Whether the family has sparse (mixture-of-experts) layers.
    pub fn is_moe(self) -> bool {
        matches!(
            self,
            Architecture::Mixtral
                | Architecture::Qwen2Moe
                | Architecture::Qwen3Moe
                | Architecture::DeepseekV2
                | Architecture::DeepseekV3
                | Architecture::GptOss
                | Architecture::Glm4Moe
                | Architecture::Olmoe
                | Architecture::GraniteMoe
                | Architecture::Ernie45Moe
        )
    }

    /// Whether the family uses multi-head latent attention.
    pub fn is_mla(self) -> bool {
        matches!(self, Architecture::DeepseekV2 | Architecture::DeepseekV3)
    }

    /// The supported `model_type`s, comma-separated, for messages.
    pub fn supported_list() -> String {
        Architecture::ALL.map(Architecture::name).join(", ")
    }
}

impl FromStr for Architecture {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Architecture, ConfigError> {
        match s {
            "gemma3_text" => return Ok(Architecture::Gemma3),
            // Mistral's layers with a window on the layers `layer_types` lists.
            "ministral" => return Ok(Architecture::Mistral),
            _ => {}
        }
        Architecture::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| ConfigError::UnsupportedModel(s.to_owned()))
    }
}

/// The feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mlp {
    /// `down(act(gate(x)) * up(x))`: three matrices.
    Gated,
    /// `down(act(up(x)))`: two matrices.
    Plain,
}

/// The normalisation layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Norm {
    /// RMSNorm: a scale only.
    Rms,
    /// LayerNorm: a scale and a bias.
    Layer,
}

/// Norms applied to the queries and keys before attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QkNorm {
    /// None.
    None,
    /// One RMSNorm over `head_dim`, shared by every head, for Q and one for K (Qwen3,
    /// Gemma 3): `2 × head_dim` parameters a layer.
    PerHead,
    /// One RMSNorm over the whole Q projection and one over the whole K projection (OLMo 2):
    /// `(heads + kv_heads) × head_dim` parameters a layer.
    Full,
    /// A LayerNorm (no bias) over `head_dim` for each head of Q and each head of K, each
    /// head's its own module (StableLM 2 12B's `qk_layernorm`): `(heads + kv_heads) ×
    /// head_dim` parameters a layer.
    EachHead,
}

/// Multi-head latent attention (DeepSeek-V2/V3): queries through an optional low-rank
/// bottleneck, keys and values through a shared latent of `kv_lora_rank`, plus a decoupled
/// rotary key of `qk_rope_head_dim` shared by every head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mla {
    /// Rank of the query bottleneck; `None` projects queries directly.
    pub q_lora_rank: Option<u64>,
    /// Rank of the key/value latent (what serving engines cache, with the rotary key).
    pub kv_lora_rank: u64,
    /// Per-head query/key width without rotary positions.
    pub qk_nope_head_dim: u64,
    /// Per-head query/key width with rotary positions (the rotary key is shared).
    pub qk_rope_head_dim: u64,
    /// Per-head value width.
    pub v_head_dim: u64,
}

impl Mla {
    /// Query/key width of one head: `qk_nope_head_dim + qk_rope_head_dim`.
    pub fn qk_head_dim(&self) -> u64 {
        self.qk_nope_head_dim.saturating_add(self.qk_rope_head_dim)
    }
}

/// The sparse (mixture-of-experts) feed-forward blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Moe {
    /// Routed experts per sparse layer.
    pub experts: u64,
    /// Routed experts each token goes through.
    pub experts_per_token: u64,
    /// MLP width of one routed expert.
    pub intermediate: u64,
    /// MLP width of the shared expert(s), summed (DeepSeek: `n_shared_experts ×
    /// moe_intermediate_size`; Qwen2-MoE: `shared_expert_intermediate_size`); 0 for none.
    pub shared_intermediate: u64,
    /// A sigmoid gate on the shared expert's output (Qwen2-MoE: `hidden` parameters).
    pub shared_expert_gate: bool,
    /// Which layers are sparse (the rest have a dense MLP of `intermediate_size`); one entry
    /// per layer once the config is finished.
    pub sparse_layers: Vec<bool>,
}

impl Moe {
    /// `experts` routed experts of MLP width `intermediate`, `experts_per_token` of them per
    /// token, no shared expert, every layer sparse (set the other fields to change that).
    pub fn new(experts: u64, experts_per_token: u64, intermediate: u64) -> Moe {
        Moe {
            experts,
            experts_per_token,
            intermediate,
            shared_intermediate: 0,
            shared_expert_gate: false,
            sparse_layers: Vec::new(),
        }
    }
}

/// The SigLIP vision tower and projector of a multimodal Gemma 3 checkpoint, counted with
/// its language model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VisionTower {
    /// Width of the vision encoder.
    pub hidden: u64,
    /// Its MLP width.
    pub intermediate: u64,
    /// Its layers.
    pub layers: u64,
    /// Image side in pixels.
    pub image_size: u64,
    /// Patch side in pixels.
    pub patch_size: u64,
    /// Input channels.
    pub channels: u64,
    /// SigLIP's attention-pooling head (`vision_use_head`).
    pub head: bool,
}

/// The image side of a vision transformer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Vision {
    /// Image height and width in pixels (`image_size`: one side or `[height, width]`).
    pub image_size: [u64; 2],
    /// Patch height and width in pixels.
    pub patch_size: [u64; 2],
    /// Input channels.
    pub channels: u64,
    /// Classifier outputs; 0 for no classifier.
    pub labels: u64,
}

impl Vision {
    /// Images of `image_size` (height, width) pixels cut into patches of `patch_size`, with
    /// `channels` input channels and `labels` classifier outputs (0 for none).
    pub fn new(image_size: [u64; 2], patch_size: [u64; 2], channels: u64, labels: u64) -> Vision {
        Vision {
            image_size,
            patch_size,
            channels,
            labels,
        }
    }
}

/// The numbers that size a transformer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransformerConfig {
    /// The family.
    pub architecture: Architecture,
    /// Number of layers.
    pub layers: u64,
    /// Model width.
    pub hidden: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads (equal to `heads` without grouped-query attention, 1 for
    /// multi-query).
    pub kv_heads: u64,
    /// Width of one head (usually `hidden / heads`; MLA: the query/key width).
    pub head_dim: u64,
    /// Width of the dense MLP.
    pub intermediate: u64,
    /// Vocabulary size (0 for vision models).
    pub vocab: u64,
    /// Positions of a learned position table (0 for rotary positions).
    pub learned_positions: u64,
    /// The longest sequence the model is made for (`max_position_embeddings`,
    /// `n_positions`); 0 when unknown. Learned position tables cannot go past it.
    pub max_positions: u64,
    /// Token-type embeddings (BERT's segment ids; 0 for none).
    pub token_types: u64,
    /// The MLP kind.
    pub mlp: Mlp,
    /// The norm kind.
    pub norm: Norm,
    /// The output head shares the token embedding matrix.
    pub tied_embeddings: bool,
    /// Biases on the Q, K and V projections.
    pub qkv_bias: bool,
    /// Bias on the attention output projection.
    pub o_bias: bool,
    /// Biases in the MLP.
    pub mlp_bias: bool,
    /// A norm after the embeddings (BERT) instead of one after the last layer.
    pub embedding_norm: bool,
    /// A pooler (`hidden × hidden` dense with bias) on the first token (BERT).
    pub pooler: bool,
    /// The image side, for vision transformers.
    pub vision: Option<Vision>,
    /// The dtype the checkpoint is stored in (`torch_dtype`), when the config says.
    pub dtype: Option<DType>,
    /// Hidden-size norms in each layer (2 for most; 4 for Gemma 2/3; 1 for Falcon's
    /// parallel attention with one input norm).
    pub norms_per_layer: u64,
    /// Norms on Q and K.
    pub qk_norm: QkNorm,
    /// Attention and MLP read the same input and add to the residual together (Falcon's
    /// `parallel_attn`, GPT-NeoX's `use_parallel_residual`).
    pub parallel_residual: bool,
    /// Multi-head latent attention, for DeepSeek.
    pub mla: Option<Mla>,
    /// Sparse MLPs, for the MoE families.
    pub moe: Option<Moe>,
    /// The sliding window of the layers marked in `sliding_layers`, in tokens.
    pub sliding_window: Option<u64>,
    /// Which layers attend within `sliding_window` only (one entry per layer once
    /// finished; all false without a window).
    pub sliding_layers: Vec<bool>,
    /// Which layers skip the rotary positions (SmolLM3's NoPE layers: a 0 in its
    /// `no_rope_layers`); empty when every layer rotates.
    pub nope_layers: Vec<bool>,
    /// Dropout on the attention probabilities in training (a saved mask per score).
    pub attention_dropout: bool,
    /// A multimodal checkpoint's vision tower and projector (Gemma 3).
    pub vision_tower: Option<VisionTower>,
    /// Dropout on the attention and MLP outputs in training (a saved mask each).
    pub hidden_dropout: bool,
    /// A cross-attention block in every layer (GPT-2 and BERT with `add_cross_attention`,
    /// as decoders of an encoder-decoder pair): its Q, K, V and O with biases and its
    /// LayerNorm are counted; its cache of the encoder's keys and values is not (it
    /// depends on the encoder's length).
    pub cross_attention: bool,
    /// What the `hf` runtime needs beyond the sizes: the activation, softcapping, dropout on
    /// the embeddings, Falcon's layout.
    pub eager: EagerDetails,
}

/// An MLP's activation function, as the config names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Activation {
    /// `silu` / `swish`.
    #[default]
    Silu,
    /// `gelu` (erf) or `gelu_pytorch_tanh`: one kernel.
    Gelu,
    /// `gelu_new`, `gelu_fast` and other activations transformers writes as Python
    /// element-wise formulas (GPT-2's).
    GeluPython,
    /// `relu`.
    Relu,
}

impl Activation {
    fn parse(name: &str) -> Activation {
        match name {
            "gelu" | "gelu_pytorch_tanh" | "gelu_accurate" | "gelu_10" => Activation::Gelu,
            "gelu_new" | "gelu_fast" | "gelu_python" | "quick_gelu" => Activation::GeluPython,
            "relu" | "relu2" | "relu6" => Activation::Relu,
            _ => Activation::Silu,
        }
    }
}

/// The details of a family's modelling code the `hf` runtime follows (transformers'
/// defaults where the config leaves them out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct EagerDetails {
    /// The MLP activation.
    pub activation: Activation,
    /// Gemma 2's `attn_logit_softcapping` (tanh on the scores, eager).
    pub attn_softcap: bool,
    /// `final_logit_softcapping` (tanh on the logits, Gemma 2 and 3).
    pub final_softcap: bool,
    /// Dropout after the embeddings in training (GPT-2's `embd_pdrop`, BERT's and ViT's
    /// `hidden_dropout_prob`, StarCoder2's `embedding_dropout`).
    pub embedding_dropout: bool,
    /// Falcon's `new_decoder_architecture` (grouped QKV, K and V broadcast to every head).
    pub falcon_new: bool,
    /// Falcon's `alibi` instead of rotary positions.
    pub alibi: bool,
    /// Share of each head that rotates (percent; GPT-NeoX's `rotary_pct`), 100 for all.
    pub rotary_percent: u64,
}

/// Why a config could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not JSON.
    #[error("config is not valid JSON: {0}")]
    Json(String),
    /// JSON, but not an object.
    #[error("config is not a JSON object")]
    NotAnObject,
    /// No `model_type` field.
    #[error(
        "config has no `model_type` (expected one of {}; or describe the model by its architecture and sizes)",
        Architecture::supported_list()
    )]
    NoModelType,
    /// A `model_type` memplan cannot size.
    #[error(
        "model_type `{0}` is not supported (supported: {list}); describe the model by its architecture and sizes instead",
        list = Architecture::supported_list()
    )]
    UnsupportedModel(String),
    /// A required field is absent.
    #[error("config of a {model} model has no `{field}`")]
    Missing {
        /// The architecture.
        model: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A field of the wrong type or range.
    #[error("config field `{field}` must be {expected}, found {found}")]
    BadField {
        /// The field.
        field: &'static str,
        /// What it should be.
        expected: &'static str,
        /// What it is.
        found: String,
    },
    /// Fields that disagree with each other.
    #[error("inconsistent config: {0}")]
    Inconsistent(String),
}

/// Field access with the errors above.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    model: &'static str,
}

impl Fields<'_> {
    /// A positive integer, or `None` when absent or null.
    fn opt_u64(&self, field: &'static str) -> Result<Option<u64>, ConfigError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 => Ok(Some(n)),
                _ => Err(ConfigError::BadField {
                    field,
                    expected: "a positive integer",
                    found: v.to_string(),
                }),
            },
        }
    }

    /// A non-negative integer (0 allowed), or `None` when absent or null.
    fn opt_count(&self, field: &'static str) -> Result<Option<u64>, ConfigError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| ConfigError::BadField {
                field,
                expected: "a non-negative integer",
                found: v.to_string(),
            }),
        }
    }

    /// `tie_word_embeddings`: `default` when absent; an explicit null unties (the library
    /// ties only when the attribute is truthy).
    fn tied(&self, default: bool) -> Result<bool, ConfigError> {
        match self.map.get("tie_word_embeddings") {
            Some(Value::Null) => Ok(false),
            _ => self.bool_or("tie_word_embeddings", default),
        }
    }

    /// An image or patch size: one side for a square, or `[height, width]`; `default` a
    /// side when absent.
    fn side(&self, field: &'static str, default: u64) -> Result<[u64; 2], ConfigError> {
        let bad = |v: &Value| ConfigError::BadField {
            field,
            expected: "a positive integer or a [height, width] pair",
            found: v.to_string(),
        };
        match self.map.get(field) {
            None | Some(Value::Null) => Ok([default; 2]),
            Some(Value::Array(items)) if items.len() == 2 => {
                let mut out = [0; 2];
                for (o, v) in out.iter_mut().zip(items) {
                    *o = v.as_u64().filter(|&n| n > 0).ok_or_else(|| bad(v))?;
                }
                Ok(out)
            }
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| [n; 2])
                .ok_or_else(|| bad(v)),
        }
    }

    /// `sliding_window`: `default` when absent; null (or the 0 Qwen2-MoE writes when it has
    /// none) for no window.
    fn window(&self, default: Option<u64>) -> Result<Option<u64>, ConfigError> {
        match self.map.get("sliding_window") {
            None => Ok(default),
            Some(_) => self
                .opt_count("sliding_window")
                .map(|w| w.filter(|&w| w > 0)),
        }
    }

    /// The routed experts under the key the family's config class stores them in, then
    /// under its `attribute_map` alias (`keys`, in that order); a name the class does not
    /// map is not read (DeepSeek-V3 ignores `num_experts`).
    fn experts(&self, keys: &[&'static str]) -> Result<Option<u64>, ConfigError> {
        for &field in keys {
            if let Some(n) = self.opt_count(field)? {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }

    /// A sparse MoE on every layer without a shared expert: the routed experts under
    /// `keys` (`experts` by default), `per_token` of them a token, each `intermediate`
    /// wide. `output_router_logits: true` (a load-balancing loss over every layer's router
    /// logits, added to the training loss) is refused by name: memplan does not model it.
    fn routed_moe(
        &self,
        keys: &[&'static str],
        experts: u64,
        per_token: u64,
        intermediate: u64,
    ) -> Result<Moe, ConfigError> {
        if self.bool_or("output_router_logits", false)? {
            return Err(ConfigError::BadField {
                field: "output_router_logits",
                expected: "false (memplan does not model the load-balancing loss over every layer's router logits)",
                found: "true".to_owned(),
            });
        }
        Ok(Moe {
            experts: self.experts(keys)?.unwrap_or(experts),
            experts_per_token: self.u64_or("num_experts_per_tok", per_token)?,
            intermediate,
            shared_intermediate: 0,
            shared_expert_gate: false,
            sparse_layers: Vec::new(),
        })
    }

    /// A positive integer, or `default` when absent (the config class's default).
    fn u64_or(&self, field: &'static str, default: u64) -> Result<u64, ConfigError> {
        Ok(self.opt_u64(field)?.unwrap_or(default))
    }

    fn u64(&self, field: &'static str) -> Result<u64, ConfigError> {
        self.opt_u64(field)?.ok_or(ConfigError::Missing {
            model: self.model,
            field,
        })
    }

    fn bool_or(&self, field: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(ConfigError::BadField {
                field,
                expected: "true or false",
                found: v.to_string(),
            }),
        }
    }

    /// A probability (dropout rate): whether it is above zero; absent is `default`.
    fn positive_rate(&self, field: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => match v.as_f64() {
                Some(p) if (0.0..=1.0).contains(&p) => Ok(p > 0.0),
                _ => Err(ConfigError::BadField {
                    field,
                    expected: "a probability between 0 and 1",
                    found: v.to_string(),
                }),
            },
        }
    }

    /// A list of non-negative integers (layer indices), or empty when absent.
    fn indices(&self, field: &'static str) -> Result<Vec<u64>, ConfigError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_u64().ok_or_else(|| ConfigError::BadField {
                        field,
                        expected: "a list of layer indices",
                        found: v.to_string(),
                    })
                })
                .collect(),
            Some(v) => Err(ConfigError::BadField {
                field,
                expected: "a list of layer indices",
                found: v.to_string(),
            }),
        }
    }

    /// `layer_types` (`"sliding_attention"` / `"full_attention"` per layer) when present.
    fn layer_types(&self) -> Result<Option<Vec<bool>>, ConfigError> {
        let bad = |v: &Value| ConfigError::BadField {
            field: "layer_types",
            expected: "a list of \"sliding_attention\" and \"full_attention\"",
            found: v.to_string(),
        };
        match self.map.get("layer_types") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v.as_str() {
                    Some("sliding_attention") | Some("chunked_attention") => Ok(true),
                    Some("full_attention") => Ok(false),
                    _ => Err(bad(v)),
                })
                .collect::<Result<Vec<bool>, _>>()
                .map(Some),
            Some(v) => Err(bad(v)),
        }
    }

    /// The checkpoint's dtype: `dtype` (what `transformers` 5 writes), else the older
    /// `torch_dtype`. Torch's names are read (`float8_e4m3fn` too); `"auto"` and a dtype
    /// that is no float (an integer checkpoint's) say nothing about the activations: `None`.
    fn dtype(&self) -> Result<Option<DType>, ConfigError> {
        for field in ["dtype", "torch_dtype"] {
            match self.map.get(field) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) if s == "auto" => return Ok(None),
                Some(Value::String(s)) => {
                    let name = s.strip_prefix("torch.").unwrap_or(s);
                    let name = if name.starts_with("float8_") || name.starts_with("float4_") {
                        name.replace('_', "")
                    } else {
                        name.to_owned()
                    };
                    return DType::from_str(&name)
                        .map(|d| d.is_float().then_some(d))
                        .map_err(|_| ConfigError::BadField {
                            field,
                            expected: "a dtype name such as float32, float16 or bfloat16",
                            found: format!("\"{s}\""),
                        });
                }
                Some(v) => {
                    return Err(ConfigError::BadField {
                        field,
                        expected: "a dtype name",
                        found: v.to_string(),
                    });
                }
            }
        }
        Ok(None)
    }
}

/// The `transformers` config class defaults of the Llama-like families, in the order
/// vocab, hidden, intermediate, layers, heads, kv_heads (0: as heads), head_dim (0:
/// hidden / heads), tied embeddings.
struct Defaults {
    vocab: u64,
    hidden: u64,
    intermediate: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    tied: bool,
}

fn defaults(architecture: Architecture) -> Defaults {
    let d = |vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, tied| Defaults {
        vocab,
        hidden,
        intermediate,
        layers,
        heads,
        kv_heads,
        head_dim,
        tied,
    };
    match architecture {
        Architecture::Llama => d(32000, 4096, 11008, 32, 32, 0, 0, false),
        Architecture::Mistral => d(32000, 4096, 14336, 32, 32, 8, 0, false),
        Architecture::Mixtral => d(32000, 4096, 14336, 32, 32, 8, 0, false),
        Architecture::Qwen2 => d(151936, 4096, 22016, 32, 32, 32, 0, false),
        Architecture::Qwen2Moe => d(151936, 2048, 5632, 24, 16, 16, 0, false),
        Architecture::Qwen3 => d(151936, 4096, 22016, 32, 32, 32, 128, false),
        Architecture::Qwen3Moe => d(151936, 2048, 6144, 24, 32, 4, 0, false),
        Architecture::Gemma => d(256000, 3072, 24576, 28, 16, 16, 256, true),
        Architecture::Gemma2 => d(256000, 2304, 9216, 26, 8, 4, 256, true),
        Architecture::Gemma3 => d(262208, 2304, 9216, 26, 8, 4, 256, true),
        Architecture::Phi3 => d(32064, 3072, 8192, 32, 32, 0, 0, false),
        Architecture::DeepseekV2 => d(102400, 4096, 11008, 32, 32, 0, 0, false),
        Architecture::DeepseekV3 => d(129280, 7168, 18432, 61, 128, 128, 0, false),
        Architecture::Falcon => d(65024, 4544, 0, 32, 71, 0, 0, true),
        Architecture::GptNeox => d(50432, 6144, 24576, 44, 64, 0, 0, false),
        Architecture::Starcoder2 => d(49152, 3072, 12288, 30, 24, 2, 0, true),
        Architecture::Olmo2 => d(50304, 4096, 11008, 32, 32, 0, 0, false),
        Architecture::Gpt2 => d(50257, 768, 0, 12, 12, 0, 0, true),
        Architecture::Bert => d(30522, 768, 3072, 12, 12, 0, 0, false),
        Architecture::Vit => d(0, 768, 3072, 12, 12, 0, 0, false),
        Architecture::Granite => d(32000, 4096, 11008, 32, 32, 0, 0, false),
        Architecture::SmolLm3 => d(128256, 2048, 11008, 36, 16, 4, 0, true),
        Architecture::Phi => d(51200, 2048, 8192, 24, 32, 0, 0, false),
        Architecture::Cohere | Architecture::Cohere2 => d(256000, 8192, 22528, 40, 64, 0, 0, true),
        Architecture::Glm | Architecture::Glm4 => d(151552, 4096, 13696, 40, 32, 2, 128, false),
        Architecture::Olmo => d(50304, 4096, 11008, 32, 32, 0, 0, false),
        Architecture::GptOss => d(201088, 2880, 2880, 36, 64, 8, 64, false),
        Architecture::Glm4Moe => d(151552, 4096, 10944, 46, 96, 8, 0, false),
        Architecture::Olmoe => d(50304, 2048, 2048, 16, 16, 0, 0, false),
        Architecture::GraniteMoe => d(32000, 4096, 11008, 32, 32, 0, 0, false),
        Architecture::SeedOss => d(155136, 4096, 27648, 64, 80, 8, 128, false),
        Architecture::Exaone4 => d(102400, 4096, 16384, 32, 32, 32, 0, false),
        Architecture::StableLm => d(50304, 2560, 6912, 32, 32, 32, 0, false),
        Architecture::HunyuanV1Dense => d(290943, 4096, 11008, 32, 32, 0, 0, false),
        Architecture::Ernie45 => d(103424, 1024, 3072, 18, 16, 2, 128, true),
        Architecture::Ernie45Moe => d(103424, 2560, 12288, 28, 20, 4, 0, true),
    }
}

impl TransformerConfig {
    /// Reads a Hugging Face `config.json`.
    ///
    /// ```
    /// use memplan_tracker::estimate::TransformerConfig;
    /// let json = r#"{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    ///   "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000}"#;
    /// let config = TransformerConfig::from_hf_json(json).unwrap();
    /// assert_eq!(config.parameters().unwrap(), 6_738_415_616); // Llama-2-7B
    /// ```
    pub fn from_hf_json(text: &str) -> Result<TransformerConfig, ConfigError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| ConfigError::Json(e.to_string()))?;
        let map = value.as_object().ok_or(ConfigError::NotAnObject)?;
        let model_type = model_type(map)?;
        // A Gemma 3 multimodal config nests its language model in `text_config`; the
        // checkpoint dtype may be on either level (the outer one is what the model loads
        // in), and the outer `tie_word_embeddings` decides whether the LM head is tied
        // (`Gemma3ForConditionalGeneration` reads its own config's, not the text config's).
        if model_type == "gemma3" {
            let outer_fields = Fields {
                map,
                model: "gemma3",
            };
            let outer = outer_fields.dtype()?;
            let tied = outer_fields.tied(true)?;
            let empty = Map::new();
            let text = match map.get("text_config") {
                None | Some(Value::Null) => &empty,
                Some(Value::Object(m)) => m,
                Some(v) => {
                    return Err(ConfigError::BadField {
                        field: "text_config",
                        expected: "an object",
                        found: v.to_string(),
                    });
                }
            };
            let mut config = TransformerConfig::from_map(Architecture::Gemma3, text)?;
            config.dtype = outer.or(config.dtype);
            config.tied_embeddings = tied;
            // The vision tower: SigLIP's config class defaults where keys are absent.
            let vision = match map.get("vision_config") {
                None | Some(Value::Null) => &empty,
                Some(Value::Object(m)) => m,
                Some(v) => {
                    return Err(ConfigError::BadField {
                        field: "vision_config",
                        expected: "an object",
                        found: v.to_string(),
                    });
                }
            };
            let v = Fields {
                map: vision,
                model: "siglip_vision_model",
            };
            config.vision_tower = Some(VisionTower {
                hidden: v.u64_or("hidden_size", 768)?,
                intermediate: v.u64_or("intermediate_size", 3072)?,
                layers: v.u64_or("num_hidden_layers", 12)?,
                image_size: v.u64_or("image_size", 224)?,
                patch_size: v.u64_or("patch_size", 16)?,
                channels: v.u64_or("num_channels", 3)?,
                head: v.bool_or("vision_use_head", true)?,
            });
            return config.finish_lenient();
        }
        let architecture: Architecture = model_type.parse()?;
        TransformerConfig::from_map(architecture, map)?.finish_lenient()
    }

    /// The fields of one architecture from a config object (not yet finished).
    fn from_map(
        architecture: Architecture,
        map: &Map<String, Value>,
    ) -> Result<TransformerConfig, ConfigError> {
        let f = Fields {
            map,
            model: architecture.name(),
        };
        let d = defaults(architecture);
        let mut c = TransformerConfig::new(architecture);
        c.dtype = f.dtype()?;
        c.eager = eager_details(&f, architecture, c.eager)?;
        match architecture {
            Architecture::Gpt2 => {
                c.hidden = f.u64_or("n_embd", d.hidden)?;
                c.layers = f.u64_or("n_layer", d.layers)?;
                c.heads = f.u64_or("n_head", d.heads)?;
                c.intermediate = match f.opt_u64("n_inner")? {
                    Some(n) => n,
                    None => c.hidden.checked_mul(4).ok_or(ConfigError::BadField {
                        field: "n_embd",
                        expected: "a size whose MLP width (4 × n_embd) fits 64 bits",
                        found: c.hidden.to_string(),
                    })?,
                };
                c.vocab = f.u64_or("vocab_size", d.vocab)?;
                c.learned_positions = f.u64_or("n_positions", 1024)?;
                c.max_positions = c.learned_positions;
                c.tied_embeddings = f.bool_or("tie_word_embeddings", true)?;
                c.attention_dropout = f.positive_rate("attn_pdrop", true)?;
                c.hidden_dropout = f.positive_rate("resid_pdrop", true)?;
                c.cross_attention = f.bool_or("add_cross_attention", false)?;
                return Ok(c);
            }
            Architecture::Bert | Architecture::Vit => {
                c.layers = f.u64_or("num_hidden_layers", d.layers)?;
                c.hidden = f.u64_or("hidden_size", d.hidden)?;
                c.heads = f.u64_or("num_attention_heads", d.heads)?;
                c.intermediate = f.u64_or("intermediate_size", d.intermediate)?;
                let default_dropout = architecture == Architecture::Bert;
                c.attention_dropout =
                    f.positive_rate("attention_probs_dropout_prob", default_dropout)?;
                c.hidden_dropout = f.positive_rate("hidden_dropout_prob", default_dropout)?;
                if architecture == Architecture::Bert {
                    c.vocab = f.u64_or("vocab_size", d.vocab)?;
                    c.learned_positions = f.u64_or("max_position_embeddings", 512)?;
                    c.max_positions = c.learned_positions;
                    c.token_types = f.opt_count("type_vocab_size")?.unwrap_or(2);
                    // BertLayer builds its cross-attention only in a decoder (it refuses
                    // `add_cross_attention` without `is_decoder`).
                    c.cross_attention = f.bool_or("add_cross_attention", false)?
                        && f.bool_or("is_decoder", false)?;
                } else {
                    let labels = match (f.opt_count("num_labels")?, map.get("id2label")) {
                        (Some(n), _) => n,
                        (None, Some(Value::Object(m))) => m.len() as u64,
                        // PretrainedConfig's default: two labels.
                        _ => 2,
                    };
                    c.qkv_bias = f.bool_or("qkv_bias", true)?;
                    // ViT's attention takes `head_dim` when the config has one (its class
                    // has no such field), else `hidden_size // num_attention_heads`.
                    c.head_dim = f.opt_u64("head_dim")?.unwrap_or(0);
                    c.vision = Some(Vision {
                        image_size: f.side("image_size", 224)?,
                        patch_size: f.side("patch_size", 16)?,
                        channels: f.opt_u64("num_channels")?.unwrap_or(3),
                        labels,
                    });
                }
                return Ok(c);
            }
            _ => {}
        }

        // The decoder families: the common keys first.
        c.layers = f.u64_or("num_hidden_layers", d.layers)?;
        c.hidden = f.u64_or("hidden_size", d.hidden)?;
        c.heads = f.u64_or("num_attention_heads", d.heads)?;
        // Absent keys take the class default; an explicit null is what the config classes
        // turn into `num_attention_heads` and `hidden_size // num_attention_heads` (0 here,
        // filled in by `finish`).
        c.kv_heads = match map.get("num_key_value_heads") {
            None => d.kv_heads,
            Some(Value::Null) => 0,
            Some(_) => f.u64("num_key_value_heads")?,
        };
        // GPT-NeoX's and StableLM's attention always split `hidden_size` evenly (they never
        // read `head_dim`).
        c.head_dim = match map.get("head_dim") {
            _ if matches!(architecture, Architecture::GptNeox | Architecture::StableLm) => 0,
            None => d.head_dim,
            Some(Value::Null) => 0,
            Some(_) => f.u64("head_dim")?,
        };
        c.intermediate = f.u64_or("intermediate_size", d.intermediate)?;
        c.vocab = f.u64_or("vocab_size", d.vocab)?;
        c.tied_embeddings = f.tied(d.tied)?;
        c.max_positions = f.opt_u64("max_position_embeddings")?.unwrap_or(0);
        c.attention_dropout = f.positive_rate("attention_dropout", false)?;
        let attention_bias = f.bool_or("attention_bias", false)?;
        // Only these families read `layer_types` (the others' masks ignore it); transformers
        // reads a `mistral` config with `layer_types` as Ministral, which slides the layers
        // it lists.
        let layer_types = if matches!(
            architecture,
            Architecture::Qwen2
                | Architecture::Qwen2Moe
                | Architecture::Qwen3
                | Architecture::Gemma2
                | Architecture::Gemma3
                | Architecture::Mistral
                | Architecture::GptOss
                | Architecture::Cohere2
                | Architecture::Exaone4
        ) {
            f.layer_types()?
        } else {
            None
        };

        match architecture {
            Architecture::SmolLm3 => {
                // SmolLM3Attention: `attention_bias` on Q, K, V and O.
                c.qkv_bias = attention_bias;
                c.o_bias = attention_bias;
                c.mlp_bias = f.bool_or("mlp_bias", false)?;
                // `no_rope_layers[i]` is 1 where layer i rotates; without the list, every
                // `no_rope_layer_interval`-th layer (1-based) is NoPE.
                c.nope_layers = match f.map.get("no_rope_layers") {
                    None | Some(Value::Null) => {
                        let every = f.u64_or("no_rope_layer_interval", 4)?.max(1);
                        (0..c.layers).map(|i| (i + 1) % every == 0).collect()
                    }
                    Some(_) => f
                        .indices("no_rope_layers")?
                        .iter()
                        .map(|&r| r == 0)
                        .collect(),
                };
                // With `use_sliding_window`, the NoPE layers slide (or those `layer_types`
                // lists); the window is read only then.
                if f.bool_or("use_sliding_window", false)? {
                    c.sliding_window = f.window(None)?;
                    if c.sliding_window.is_some() {
                        c.sliding_layers = match f.layer_types()? {
                            Some(types) => types,
                            None => c.nope_layers.clone(),
                        };
                    }
                }
            }
            Architecture::GraniteMoe => {
                c.qkv_bias = attention_bias;
                c.o_bias = attention_bias;
                c.max_positions = c
                    .max_positions
                    .max(f.u64_or("max_position_embeddings", 2048)?);
                c.moe = Some(f.routed_moe(&["num_local_experts"], 8, 2, c.intermediate)?);
            }
            Architecture::Llama | Architecture::Granite | Architecture::Olmo2 => {
                c.qkv_bias = attention_bias;
                c.o_bias = attention_bias;
                if architecture != Architecture::Olmo2 {
                    c.mlp_bias = f.bool_or("mlp_bias", false)?;
                    c.max_positions = c
                        .max_positions
                        .max(f.u64_or("max_position_embeddings", 2048)?);
                } else {
                    c.qk_norm = QkNorm::Full;
                }
            }
            Architecture::Mistral | Architecture::Mixtral => {
                let default_window = if architecture == Architecture::Mistral {
                    Some(4096)
                } else {
                    None
                };
                // One window on every layer (the model's mask is built from
                // `sliding_window` alone), or Ministral's on the layers `layer_types` lists.
                c.sliding_window = f.window(default_window)?;
                if let (Some(types), Some(_)) = (layer_types.clone(), c.sliding_window) {
                    c.sliding_layers = types;
                }
                if architecture == Architecture::Mixtral {
                    c.moe = Some(Moe {
                        experts: f
                            .experts(&["num_local_experts", "num_experts"])?
                            .unwrap_or(8),
                        experts_per_token: f.u64_or("num_experts_per_tok", 2)?,
                        intermediate: c.intermediate,
                        shared_intermediate: 0,
                        shared_expert_gate: false,
                        sparse_layers: Vec::new(),
                    });
                }
            }
            Architecture::Qwen2
            | Architecture::Qwen2Moe
            | Architecture::Qwen3
            | Architecture::Qwen3Moe => {
                let qwen2 = matches!(architecture, Architecture::Qwen2 | Architecture::Qwen2Moe);
                if qwen2 {
                    // Qwen2's Q, K and V projections always have biases (Qwen2-MoE's too,
                    // unless its `qkv_bias` turns them off: Qwen2 does not read the key);
                    // O has none.
                    c.qkv_bias =
                        architecture == Architecture::Qwen2 || f.bool_or("qkv_bias", true)?;
                } else {
                    c.qkv_bias = attention_bias;
                    c.o_bias = attention_bias;
                    c.qk_norm = QkNorm::PerHead;
                }
                // The window applies only with `use_sliding_window`. Qwen2 and Qwen3 slide
                // the layers from `max_window_layers` on, Qwen2-MoE the even-numbered ones
                // (0, 2, ...) below it, each unless `layer_types` lists them; Qwen3-MoE
                // slides every layer (its mask reads `sliding_window` alone).
                if f.bool_or("use_sliding_window", false)? {
                    c.sliding_window = f.window(Some(4096))?;
                }
                let below = f.opt_count("max_window_layers")?.unwrap_or(28);
                if architecture != Architecture::Qwen3Moe && c.sliding_window.is_some() {
                    c.sliding_layers = match layer_types.clone() {
                        Some(types) => types,
                        None if architecture == Architecture::Qwen2Moe => {
                            (0..c.layers).map(|i| i % 2 == 0 && i < below).collect()
                        }
                        None => (0..c.layers).map(|i| i >= below).collect(),
                    };
                }
                if architecture.is_moe() {
                    let step = f.u64_or("decoder_sparse_step", 1)?;
                    let dense = f.indices("mlp_only_layers")?;
                    // Qwen2-MoE stores `num_experts`; Qwen3-MoE `num_local_experts`, with
                    // `num_experts` as its alias.
                    let experts = if qwen2 {
                        f.experts(&["num_experts"])?.unwrap_or(60)
                    } else {
                        f.experts(&["num_local_experts", "num_experts"])?
                            .unwrap_or(128)
                    };
                    let sparse_layers = (0..c.layers)
                        .map(|i| !dense.contains(&i) && experts > 0 && (i + 1) % step == 0)
                        .collect();
                    let (moe_default, per_token) = if qwen2 { (1408, 4) } else { (768, 8) };
                    c.moe = Some(Moe {
                        experts,
                        experts_per_token: f.u64_or("num_experts_per_tok", per_token)?,
                        intermediate: f.u64_or("moe_intermediate_size", moe_default)?,
                        shared_intermediate: if qwen2 {
                            f.opt_count("shared_expert_intermediate_size")?
                                .unwrap_or(5632)
                        } else {
                            0
                        },
                        shared_expert_gate: qwen2,
                        sparse_layers,
                    });
                }
            }
            Architecture::Gemma | Architecture::Gemma2 | Architecture::Gemma3 => {
                c.qkv_bias = attention_bias;
                c.o_bias = attention_bias;
                c.max_positions = c.max_positions.max(8192);
                if architecture != Architecture::Gemma {
                    c.norms_per_layer = 4;
                    let mut window = f.window(Some(4096))?;
                    // Gemma 3's bidirectional (embedding) variant attends `window / 2`
                    // either side: its config holds `window / 2 + 1`.
                    if architecture == Architecture::Gemma3
                        && f.bool_or("use_bidirectional_attention", false)?
                    {
                        window = window.map(|w| w / 2 + 1);
                    }
                    c.sliding_window = window;
                    // The layers `layer_types` lists as sliding; without it Gemma 2's even
                    // layers (0, 2, ...) and all but every `sliding_window_pattern`-th of
                    // Gemma 3's. A sliding layer without a window attends globally.
                    if window.is_some() {
                        c.sliding_layers = match layer_types.clone() {
                            Some(types) => types,
                            None if architecture == Architecture::Gemma2 => {
                                (0..c.layers).map(|i| i % 2 == 0).collect()
                            }
                            None => {
                                let pattern = f.u64_or("sliding_window_pattern", 6)?;
                                (0..c.layers).map(|i| (i + 1) % pattern != 0).collect()
                            }
                        };
                    }
                }
                if architecture == Architecture::Gemma3 {
                    c.qk_norm = QkNorm::PerHead;
                }
            }
            Architecture::Phi3 => {
                c.sliding_window = f.window(None)?;
                c.hidden_dropout = f.positive_rate("resid_pdrop", false)?;
            }
            Architecture::Olmo | Architecture::Olmoe => {
                c.qkv_bias = attention_bias;
                c.o_bias = attention_bias;
                if architecture == Architecture::Olmoe {
                    c.qk_norm = QkNorm::Full;
                    c.moe = Some(f.routed_moe(
                        &["num_experts", "num_local_experts"],
                        64,
                        8,
                        c.intermediate,
                    )?);
                }
                if !matches!(map.get("clip_qkv"), None | Some(Value::Null)) {
                    return Err(ConfigError::BadField {
                        field: "clip_qkv",
                        expected: "null (memplan does not model OLMo's and OLMoE's in-place clamping of Q, K and V)",
                        found: map["clip_qkv"].to_string(),
                    });
                }
            }
            Architecture::GptOss => {
                // Q, K, V and O take `attention_bias` (true by default).
                let bias = f.bool_or("attention_bias", true)?;
                c.qkv_bias = bias;
                c.o_bias = bias;
                // Even layers (0, 2, ...) slide unless `layer_types` says otherwise.
                c.sliding_window = f.window(Some(128))?;
                if c.sliding_window.is_some() {
                    c.sliding_layers = match layer_types.clone() {
                        Some(types) => types,
                        None => (0..c.layers).map(|i| i % 2 == 0).collect(),
                    };
                }
                c.moe = Some(f.routed_moe(
                    &["num_local_experts", "num_experts"],
                    128,
                    4,
                    c.intermediate,
                )?);
            }
            Architecture::Glm4Moe => {
                // Q, K and V take `attention_bias` (false by default), O never.
                c.qkv_bias = attention_bias;
                if f.bool_or("use_qk_norm", false)? {
                    c.qk_norm = QkNorm::PerHead;
                }
                let experts = f
                    .experts(&["n_routed_experts", "num_local_experts"])?
                    .unwrap_or(128);
                let first_dense = f.opt_count("first_k_dense_replace")?.unwrap_or(1);
                let moe_intermediate = f.u64_or("moe_intermediate_size", 1408)?;
                let shared = f.opt_count("n_shared_experts")?.unwrap_or(1);
                c.moe = Some(Moe {
                    experts,
                    experts_per_token: f.u64_or("num_experts_per_tok", 8)?,
                    intermediate: moe_intermediate,
                    shared_intermediate: shared_width(moe_intermediate, shared)?,
                    shared_expert_gate: false,
                    sparse_layers: (0..c.layers).map(|i| i >= first_dense).collect(),
                });
            }
            Architecture::Glm | Architecture::Glm4 => {
                // Q, K and V take `attention_bias` (true by default), O never.
                c.qkv_bias = f.bool_or("attention_bias", true)?;
                c.o_bias = false;
            }
            Architecture::SeedOss => {
                c.qkv_bias = f.bool_or("attention_bias", true)?;
                c.o_bias = f.bool_or("attention_out_bias", false)?;
                c.mlp_bias = f.bool_or("mlp_bias", false)?;
                c.attention_dropout = f.positive_rate("attention_dropout", true)?;
                c.hidden_dropout = f.positive_rate("residual_dropout", true)?;
            }
            Architecture::Cohere2 => {
                c.qkv_bias = attention_bias;
                c.o_bias = attention_bias;
                // Three layers in four slide (`sliding_window_pattern`) unless `layer_types`
                // lists them; a sliding layer rotates, a full one does not (nor does any
                // without a window).
                c.sliding_window = f.window(Some(4096))?;
                let sliding = match layer_types.clone() {
                    Some(types) => types,
                    None => {
                        let pattern = f.u64_or("sliding_window_pattern", 4)?.max(1);
                        (0..c.layers).map(|i| (i + 1) % pattern != 0).collect()
                    }
                };
                let windowed = c.sliding_window.is_some();
                c.nope_layers = sliding.iter().map(|&s| !(s && windowed)).collect();
                if windowed {
                    c.sliding_layers = sliding;
                }
            }
            Architecture::Exaone4 => {
                // No biases; Q and K normalised per head after the projections.
                c.qk_norm = QkNorm::PerHead;
                c.sliding_window = f.window(Some(4096))?;
                let windowed = c.sliding_window.is_some();
                // Three layers in four slide (`sliding_window_pattern`, read only without
                // `layer_types`); without a window the config class sets the pattern to 0
                // and divides by it, so such a config must list its layers.
                let sliding = match layer_types.clone() {
                    Some(types) => types,
                    None if !windowed => {
                        return Err(ConfigError::BadField {
                            field: "layer_types",
                            expected: "a list when sliding_window is null (transformers' EXAONE 4 config divides by a zero pattern without one)",
                            found: "null".to_owned(),
                        });
                    }
                    None => {
                        let pattern = f.u64_or("sliding_window_pattern", 4)?.max(1);
                        (0..c.layers).map(|i| (i + 1) % pattern != 0).collect()
                    }
                };
                // With a window only the sliding layers rotate; without one, every layer.
                c.nope_layers = sliding.iter().map(|&s| windowed && !s).collect();
                if windowed {
                    c.sliding_layers = sliding;
                }
            }
            Architecture::Cohere => {
                c.qkv_bias = attention_bias;
                c.o_bias = attention_bias;
                if f.bool_or("use_qk_norm", false)? {
                    return Err(ConfigError::BadField {
                        field: "use_qk_norm",
                        expected: "false (memplan does not model Cohere's per-head LayerNorms of Q and K)",
                        found: "true".to_owned(),
                    });
                }
            }
            Architecture::HunyuanV1Dense => {
                // Its attention takes `head_dim` as the config gives it (`head_dim ** -0.5`
                // fails on the class default, None).
                if matches!(map.get("head_dim"), None | Some(Value::Null)) {
                    return Err(ConfigError::BadField {
                        field: "head_dim",
                        expected: "a head width (transformers' Hunyuan attention cannot be built without one)",
                        found: "null".to_owned(),
                    });
                }
                // Q, K, V and O take `attention_bias`; Q and K are normalised per head
                // after the rotation.
                c.qkv_bias = attention_bias;
                c.o_bias = attention_bias;
                c.qk_norm = QkNorm::PerHead;
                c.max_positions = c
                    .max_positions
                    .max(f.u64_or("max_position_embeddings", 2048)?);
            }
            Architecture::StableLm => {
                // Q, K and V take `use_qkv_bias`, O never; one norm a layer in parallel blocks.
                c.qkv_bias = f.bool_or("use_qkv_bias", false)?;
                c.o_bias = false;
                c.parallel_residual = f.bool_or("use_parallel_residual", false)?;
                c.norms_per_layer = if c.parallel_residual { 1 } else { 2 };
                c.hidden_dropout = f.positive_rate("hidden_dropout", false)?;
                c.max_positions = c
                    .max_positions
                    .max(f.u64_or("max_position_embeddings", 4096)?);
                // StableLM 2 12B's per-head LayerNorm modules of Q and K.
                if f.bool_or("qk_layernorm", false)? {
                    c.qk_norm = QkNorm::EachHead;
                }
            }
            Architecture::Ernie45 | Architecture::Ernie45Moe => {
                // `use_bias` on Q, K, V, O and the MLPs (never the head nor the routed
                // experts); the attention's dropout is 0 whatever the config says.
                let bias = f.bool_or("use_bias", false)?;
                c.qkv_bias = bias;
                c.o_bias = bias;
                c.mlp_bias = bias;
                c.attention_dropout = false;
                c.max_positions = c
                    .max_positions
                    .max(f.u64_or("max_position_embeddings", 131072)?);
                if architecture == Architecture::Ernie45Moe {
                    // `num_experts` and `num_experts_per_tok` are the config class's
                    // aliases of `moe_num_experts` and `moe_k`.
                    let mut moe = f.routed_moe(&["moe_num_experts", "num_experts"], 64, 6, 0)?;
                    moe.experts_per_token = match f.opt_u64("moe_k")? {
                        Some(k) => k,
                        None => moe.experts_per_token,
                    };
                    moe.intermediate = f.u64_or("moe_intermediate_size", 1536)?;
                    let shared = f.opt_count("moe_num_shared_experts")?.unwrap_or(2);
                    moe.shared_intermediate = shared_width(moe.intermediate, shared)?;
                    // Layer i is sparse when `(i + 1) % interval == 0` and it lies in
                    // `[start, end]` (`end` -1: the last layer).
                    let start = f.opt_count("moe_layer_start_index")?.unwrap_or(1);
                    let interval = f.u64_or("moe_layer_interval", 1)?.max(1);
                    let end = match f.map.get("moe_layer_end_index") {
                        None | Some(Value::Null) => None,
                        Some(v) => match v.as_i64() {
                            Some(-1) => None,
                            Some(n) if n >= 0 => Some(n as u64),
                            _ => {
                                return Err(ConfigError::BadField {
                                    field: "moe_layer_end_index",
                                    expected: "a layer index, or -1 for the last layer",
                                    found: v.to_string(),
                                });
                            }
                        },
                    };
                    let last = end.unwrap_or(c.layers.saturating_sub(1));
                    moe.sparse_layers = (0..c.layers)
                        .map(|i| (i + 1) % interval == 0 && i >= start && i <= last)
                        .collect();
                    c.moe = Some(moe);
                }
            }
            Architecture::Phi => {
                c.hidden_dropout = f.positive_rate("resid_pdrop", false)?;
                if f.bool_or("qk_layernorm", false)? {
                    return Err(ConfigError::BadField {
                        field: "qk_layernorm",
                        expected: "false (memplan does not model Phi's per-head LayerNorms of Q and K)",
                        found: "true".to_owned(),
                    });
                }
            }
            Architecture::DeepseekV2 | Architecture::DeepseekV3 => {
                let v3 = architecture == Architecture::DeepseekV3;
                let q_lora_rank = match map.get("q_lora_rank") {
                    None => Some(1536),
                    Some(Value::Null) => None,
                    Some(_) => f.opt_u64("q_lora_rank")?,
                };
                c.mla = Some(Mla {
                    q_lora_rank,
                    kv_lora_rank: f.u64_or("kv_lora_rank", 512)?,
                    qk_nope_head_dim: f.u64_or("qk_nope_head_dim", 128)?,
                    qk_rope_head_dim: f.u64_or("qk_rope_head_dim", 64)?,
                    v_head_dim: f.u64_or("v_head_dim", 128)?,
                });
                c.qkv_bias = attention_bias;
                c.o_bias = attention_bias;
                // DeepSeek-V2's MLPs (dense and shared experts) take `mlp_bias`; V3's have
                // no bias.
                c.mlp_bias = !v3 && f.bool_or("mlp_bias", false)?;
                // transformers leaves V2's `num_experts_per_tok` unset by default; the
                // published V2 models route each token to 6 experts.
                let (experts, shared, moe_i, per_token, first_dense) = if v3 {
                    (256, 1, 2048, 8, 3)
                } else {
                    (64, 2, 1407, 6, 0)
                };
                // V2 maps `num_experts` onto `n_routed_experts`, V3 `num_local_experts`.
                let alias = if v3 {
                    "num_local_experts"
                } else {
                    "num_experts"
                };
                let experts = f.experts(&["n_routed_experts", alias])?.unwrap_or(experts);
                let first_dense = f.opt_count("first_k_dense_replace")?.unwrap_or(first_dense);
                let moe_intermediate = f.u64_or("moe_intermediate_size", moe_i)?;
                let shared = f.opt_count("n_shared_experts")?.unwrap_or(shared);
                // transformers makes every layer from `first_k_dense_replace` on sparse; it
                // does not read `moe_layer_freq` (DeepSeek's own code and vLLM do: every
                // published config has 1, where they agree).
                let sparse_layers = (0..c.layers).map(|i| i >= first_dense).collect();
                c.moe = Some(Moe {
                    experts,
                    experts_per_token: f.u64_or("num_experts_per_tok", per_token)?,
                    intermediate: moe_intermediate,
                    shared_intermediate: shared_width(moe_intermediate, shared)?,
                    shared_expert_gate: false,
                    sparse_layers,
                });
            }
            Architecture::Falcon => {
                let new = f.bool_or("new_decoder_architecture", false)?;
                let multi_query = f.bool_or("multi_query", true)?;
                let parallel = f.bool_or("parallel_attn", true)?;
                let bias = f.bool_or("bias", false)?;
                c.head_dim = 0;
                c.kv_heads = if new {
                    f.opt_u64("num_kv_heads")?.unwrap_or(c.heads)
                } else if multi_query {
                    1
                } else {
                    c.heads
                };
                c.intermediate = match f.opt_u64("ffn_hidden_size")? {
                    Some(n) => n,
                    None => c.hidden.checked_mul(4).ok_or(ConfigError::BadField {
                        field: "hidden_size",
                        expected: "a size whose MLP width (4 × hidden_size) fits 64 bits",
                        found: c.hidden.to_string(),
                    })?,
                };
                let lns = f.opt_u64("num_ln_in_parallel_attn")?.or(new.then_some(2));
                c.norms_per_layer = if !parallel || lns == Some(2) { 2 } else { 1 };
                c.parallel_residual = parallel;
                c.qkv_bias = bias;
                c.o_bias = bias;
                c.mlp_bias = bias;
                c.hidden_dropout = f.positive_rate("hidden_dropout", false)?;
                c.max_positions = c.max_positions.max(2048);
            }
            Architecture::GptNeox => {
                let bias = f.bool_or("attention_bias", true)?;
                c.qkv_bias = bias;
                c.o_bias = bias;
                c.parallel_residual = f.bool_or("use_parallel_residual", true)?;
                c.hidden_dropout = f.positive_rate("hidden_dropout", false)?;
                c.max_positions = c.max_positions.max(2048);
            }
            Architecture::Starcoder2 => {
                let bias = f.bool_or("use_bias", true)?;
                c.qkv_bias = bias;
                c.o_bias = bias;
                c.mlp_bias = bias;
                c.sliding_window = f.window(None)?;
                c.hidden_dropout = f.positive_rate("residual_dropout", false)?;
                c.max_positions = c.max_positions.max(4096);
            }
            Architecture::Gpt2 | Architecture::Bert | Architecture::Vit => {}
        }
        if let Some(types) = &layer_types
            && types.len() as u64 != c.layers
        {
            return Err(ConfigError::Inconsistent(format!(
                "`layer_types` has {} entries for {} layers",
                types.len(),
                c.layers
            )));
        }
        Ok(c)
    }

    /// A config of `architecture` with that family's structure and every size zero: set
    /// the sizes, then call [`TransformerConfig::finish`].
    pub fn new(architecture: Architecture) -> TransformerConfig {
        use Architecture as A;
        let gated = !matches!(
            architecture,
            A::Gpt2 | A::Bert | A::Vit | A::Falcon | A::GptNeox | A::Starcoder2 | A::Phi
        );
        let layer_norm = matches!(
            architecture,
            A::Gpt2
                | A::Bert
                | A::Vit
                | A::Falcon
                | A::GptNeox
                | A::Starcoder2
                | A::Phi
                | A::StableLm
        );
        let biased = matches!(
            architecture,
            A::Gpt2 | A::Bert | A::Vit | A::GptNeox | A::Starcoder2 | A::Phi
        );
        TransformerConfig {
            architecture,
            layers: 0,
            hidden: 0,
            heads: 0,
            kv_heads: 0,
            head_dim: 0,
            intermediate: 0,
            vocab: 0,
            learned_positions: 0,
            max_positions: 0,
            token_types: 0,
            mlp: if gated { Mlp::Gated } else { Mlp::Plain },
            norm: if layer_norm { Norm::Layer } else { Norm::Rms },
            tied_embeddings: matches!(
                architecture,
                A::Gpt2
                    | A::Gemma
                    | A::Gemma2
                    | A::Gemma3
                    | A::Falcon
                    | A::Starcoder2
                    | A::SmolLm3
                    | A::Cohere
                    | A::Cohere2
            ),
            qkv_bias: biased || matches!(architecture, A::Qwen2 | A::Qwen2Moe | A::GptOss),
            o_bias: biased || architecture == A::GptOss,
            mlp_bias: biased,
            embedding_norm: architecture == A::Bert,
            pooler: architecture == A::Bert,
            vision: None,
            dtype: None,
            norms_per_layer: match architecture {
                A::Gemma2 | A::Gemma3 | A::Glm4 => 4,
                A::Phi | A::Cohere | A::Cohere2 => 1,
                _ => 2,
            },
            qk_norm: match architecture {
                A::Qwen3 | A::Qwen3Moe | A::Gemma3 => QkNorm::PerHead,
                A::Olmo2 | A::Olmoe => QkNorm::Full,
                _ => QkNorm::None,
            },
            parallel_residual: matches!(
                architecture,
                A::Falcon | A::GptNeox | A::Phi | A::Cohere | A::Cohere2
            ),
            mla: None,
            moe: None,
            sliding_window: None,
            sliding_layers: Vec::new(),
            nope_layers: Vec::new(),
            attention_dropout: false,
            hidden_dropout: false,
            vision_tower: None,
            cross_attention: false,
            eager: EagerDetails {
                activation: match architecture {
                    A::Gemma
                    | A::Gemma2
                    | A::Gemma3
                    | A::Starcoder2
                    | A::GptNeox
                    | A::Falcon
                    | A::Bert
                    | A::Vit => Activation::Gelu,
                    A::Gpt2 | A::Phi => Activation::GeluPython,
                    _ => Activation::Silu,
                },
                attn_softcap: architecture == A::Gemma2,
                final_softcap: architecture == A::Gemma2,
                embedding_dropout: false,
                falcon_new: false,
                alibi: false,
                rotary_percent: 100,
            },
        }
    }

    /// Fills the defaults (`kv_heads = heads`, `head_dim = hidden / heads`, every layer
    /// dense and global unless marked) and checks the sizes agree: every size positive,
    /// heads a multiple of the key/value heads, the head width dividing the model width
    /// unless given, per-layer lists as long as the layers, a vision model's image made of
    /// whole patches.
    pub fn finish(self) -> Result<TransformerConfig, ConfigError> {
        self.finish_with(true)
    }

    /// [`TransformerConfig::finish`] for a config file: what `transformers` builds from
    /// it, even where its attention could not run it (key/value heads that do not divide
    /// the query heads; a width that is not a whole number of heads, split as
    /// `hidden_size // num_attention_heads`). [`TransformerConfig::notes`] says so.
    fn finish_lenient(self) -> Result<TransformerConfig, ConfigError> {
        self.finish_with(false)
    }

    fn finish_with(mut self, strict: bool) -> Result<TransformerConfig, ConfigError> {
        let positive = [
            ("layers", self.layers),
            ("hidden size", self.hidden),
            ("attention heads", self.heads),
            ("intermediate size", self.intermediate),
        ];
        for (what, v) in positive {
            if v == 0 {
                return Err(ConfigError::Inconsistent(format!(
                    "the {what} must be positive"
                )));
            }
        }
        if self.kv_heads == 0 {
            self.kv_heads = self.heads;
        }
        if self.max_positions == 0 {
            self.max_positions = self.learned_positions;
        }
        if self.learned_positions > 0 && self.max_positions > self.learned_positions {
            return Err(ConfigError::Inconsistent(format!(
                "a context of {} positions does not fit a learned position table of {}",
                self.max_positions, self.learned_positions
            )));
        }
        if let Some(mla) = self.mla {
            for (what, v) in [
                ("kv_lora_rank", mla.kv_lora_rank),
                ("qk_nope_head_dim + qk_rope_head_dim", mla.qk_head_dim()),
                ("v_head_dim", mla.v_head_dim),
            ] {
                if v == 0 {
                    return Err(ConfigError::Inconsistent(format!(
                        "{what} must be positive"
                    )));
                }
            }
            // MLA has no key/value heads of its own: `num_key_value_heads` is not read.
            self.head_dim = mla.qk_head_dim();
            self.kv_heads = self.heads;
        }
        if strict && !self.heads.is_multiple_of(self.kv_heads) {
            return Err(ConfigError::Inconsistent(format!(
                "{} attention heads are not a multiple of {} key/value heads",
                self.heads, self.kv_heads
            )));
        }
        if self.head_dim == 0 {
            // transformers refuses an uneven split for these families (their config
            // classes validate it, or their attention raises); the others build
            // `hidden_size // num_attention_heads`-wide heads.
            let refused = matches!(
                self.architecture,
                Architecture::Llama
                    | Architecture::Gemma2
                    | Architecture::Gemma3
                    | Architecture::DeepseekV2
                    | Architecture::GptNeox
                    | Architecture::Falcon
                    | Architecture::Gpt2
                    | Architecture::Bert
            );
            if (strict || refused) && !self.hidden.is_multiple_of(self.heads) {
                return Err(ConfigError::Inconsistent(format!(
                    "hidden size {} is not a multiple of {} attention heads",
                    self.hidden, self.heads
                )));
            }
            // The config classes' `hidden_size // num_attention_heads`.
            self.head_dim = self.hidden / self.heads;
            if self.head_dim == 0 {
                return Err(ConfigError::Inconsistent(format!(
                    "hidden size {} is smaller than its {} attention heads",
                    self.hidden, self.heads
                )));
            }
        }
        let layers = usize::try_from(self.layers).map_err(|_| {
            ConfigError::Inconsistent(format!(
                "{} layers is more than this machine can list",
                self.layers
            ))
        })?;
        if layers > 1 << 20 {
            return Err(ConfigError::Inconsistent(format!(
                "{} layers: more than the 1,048,576 memplan sizes",
                self.layers
            )));
        }
        match self.sliding_window {
            Some(0) => {
                return Err(ConfigError::Inconsistent(
                    "the sliding window must be positive".to_owned(),
                ));
            }
            Some(_) if self.sliding_layers.is_empty() => self.sliding_layers = vec![true; layers],
            Some(_) => {}
            None => self.sliding_layers = vec![false; layers],
        }
        if !self.nope_layers.is_empty() && self.nope_layers.len() != layers {
            return Err(ConfigError::Inconsistent(format!(
                "{} rotary-layer flags (`no_rope_layers`) for {} layers",
                self.nope_layers.len(),
                self.layers
            )));
        }
        if self.sliding_layers.len() != layers {
            return Err(ConfigError::Inconsistent(format!(
                "{} sliding-layer flags for {} layers",
                self.sliding_layers.len(),
                self.layers
            )));
        }
        if let Some(moe) = &mut self.moe {
            if moe.sparse_layers.is_empty() {
                moe.sparse_layers = vec![moe.experts > 0; layers];
            }
            if moe.sparse_layers.len() != layers {
                return Err(ConfigError::Inconsistent(format!(
                    "{} sparse-layer flags for {} layers",
                    moe.sparse_layers.len(),
                    self.layers
                )));
            }
            if moe.sparse_layers.iter().any(|&s| s) {
                if moe.experts == 0 || moe.intermediate == 0 {
                    return Err(ConfigError::Inconsistent(
                        "sparse layers need a positive number of experts and expert width"
                            .to_owned(),
                    ));
                }
                // transformers builds a router that picks more experts than there are (its
                // top-k fails only when run); counted as built, every expert active.
                if moe.experts_per_token == 0 || (strict && moe.experts_per_token > moe.experts) {
                    return Err(ConfigError::Inconsistent(format!(
                        "{} experts per token of {} experts",
                        moe.experts_per_token, moe.experts
                    )));
                }
            }
        }
        match self.vision {
            // The patch convolution drops a remainder narrower than a patch, as ViT does
            // (`image_size // patch_size` patches a side).
            Some(v) if v.channels == 0 => {
                return Err(ConfigError::Inconsistent(
                    "an image needs at least one channel".to_owned(),
                ));
            }
            Some(_) => {}
            None if self.vocab == 0 => {
                return Err(ConfigError::Inconsistent(
                    "the vocabulary size must be positive".to_owned(),
                ));
            }
            None => {}
        }
        Ok(self)
    }

    /// What is odd about a finished config, for the user: key/value heads that do not
    /// divide the query heads, a head width that leaves part of the model width out.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.mla.is_none() && !self.heads.is_multiple_of(self.kv_heads) {
            notes.push(format!(
                "{} key/value heads do not divide {} attention heads: sized as transformers builds the model, whose grouped attention cannot run it",
                self.kv_heads, self.heads
            ));
        }
        if self.mla.is_none()
            && !self.hidden.is_multiple_of(self.heads)
            && self.head_dim == self.hidden / self.heads
        {
            notes.push(format!(
                "hidden size {} is not a whole number of heads: {} heads of {} make attention {} wide, as transformers' `hidden_size // num_attention_heads` does",
                self.hidden,
                self.heads,
                self.head_dim,
                self.heads.saturating_mul(self.head_dim),
            ));
        }
        if self.cross_attention {
            notes.push(
                "add_cross_attention: the cross-attention weights are counted; their cache of the encoder's keys and values (as long as the encoder's input) and their activations are not"
                    .to_owned(),
            );
        }
        if let Some(moe) = &self.moe
            && moe.sparse_layers.iter().any(|&s| s)
            && moe.experts_per_token > moe.experts
        {
            notes.push(format!(
                "{} experts per token of {} experts: every expert counts as active",
                moe.experts_per_token, moe.experts
            ));
        }
        notes
    }

    /// The sequence length a vision model always runs at (patches + class token); `None`
    /// for text models, whose sequence length is the workload's.
    pub fn fixed_sequence(&self) -> Option<u64> {
        self.vision.map(|v| {
            let rows = v.image_size[0] / v.patch_size[0].max(1);
            let cols = v.image_size[1] / v.patch_size[1].max(1);
            rows.saturating_mul(cols).saturating_add(1)
        })
    }

    /// Whether layer `i` is a sparse (MoE) layer.
    pub fn is_sparse_layer(&self, i: u64) -> bool {
        self.moe
            .as_ref()
            .and_then(|m| m.sparse_layers.get(i as usize).copied())
            .unwrap_or(false)
    }

    /// The attention window of layer `i`: `Some(window)` for a sliding layer.
    pub fn layer_window(&self, i: u64) -> Option<u64> {
        match self.sliding_layers.get(i as usize) {
            Some(true) => self.sliding_window,
            _ => None,
        }
    }

    /// A one-line description: `llama: 32 layers, hidden 4096, 32 heads / 8 kv heads ...`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}: {} layers, hidden {}, ",
            self.architecture.name(),
            self.layers,
            self.hidden
        );
        match self.mla {
            Some(m) => s.push_str(&format!(
                "{} heads of MLA (kv latent {}, rope {}, q rank {})",
                self.heads,
                m.kv_lora_rank,
                m.qk_rope_head_dim,
                m.q_lora_rank.map_or("none".to_owned(), |r| r.to_string())
            )),
            None => s.push_str(&format!(
                "{} heads / {} kv heads of {}",
                self.heads, self.kv_heads, self.head_dim
            )),
        }
        s.push_str(&format!(
            ", intermediate {} ({})",
            self.intermediate,
            match self.mlp {
                Mlp::Gated => "gated",
                Mlp::Plain => "plain",
            }
        ));
        if let Some(moe) = &self.moe {
            let sparse = moe.sparse_layers.iter().filter(|&&s| s).count();
            s.push_str(&format!(
                ", {} of {} experts of {} on {sparse} layers",
                moe.experts_per_token, moe.experts, moe.intermediate
            ));
            if moe.shared_intermediate > 0 {
                s.push_str(&format!(" + shared {}", moe.shared_intermediate));
            }
        }
        if let Some(w) = self.sliding_window {
            let sliding = self.sliding_layers.iter().filter(|&&s| s).count();
            s.push_str(&format!(", window {w} on {sliding} layers"));
        }
        if self.vocab > 0 {
            s.push_str(&format!(
                ", vocab {}{}",
                self.vocab,
                if self.tied_embeddings { " (tied)" } else { "" }
            ));
        }
        if let Some(v) = self.vision {
            let side = |d: [u64; 2]| {
                if d[0] == d[1] {
                    d[0].to_string()
                } else {
                    format!("{}×{}", d[0], d[1])
                }
            };
            s.push_str(&format!(
                ", {}px images in {}px patches",
                side(v.image_size),
                side(v.patch_size)
            ));
        }
        s
    }
}

/// The `hf` runtime's details of `architecture` from its config (defaults in `base`).
fn eager_details(
    f: &Fields<'_>,
    architecture: Architecture,
    base: EagerDetails,
) -> Result<EagerDetails, ConfigError> {
    use Architecture as A;
    let mut e = base;
    let act_key = match architecture {
        A::Gemma2 | A::Gemma3 => "hidden_activation",
        A::Gpt2 => "activation_function",
        A::Falcon => "activation",
        _ => "hidden_act",
    };
    match f.map.get(act_key) {
        Some(Value::String(name)) => e.activation = Activation::parse(name),
        None | Some(Value::Null) => {}
        Some(v) => {
            return Err(ConfigError::BadField {
                field: act_key,
                expected: "an activation name such as silu or gelu",
                found: v.to_string(),
            });
        }
    }
    let present = |key: &str| !matches!(f.map.get(key), None | Some(Value::Null));
    let default_cap = |key: &str, default: bool| match f.map.get(key) {
        None => default,
        Some(Value::Null) => false,
        Some(_) => true,
    };
    match architecture {
        A::Gemma2 => {
            e.attn_softcap = default_cap("attn_logit_softcapping", true);
            e.final_softcap = default_cap("final_logit_softcapping", true);
        }
        A::Gemma3 => {
            e.attn_softcap = present("attn_logit_softcapping");
            e.final_softcap = present("final_logit_softcapping");
        }
        _ => {}
    }
    e.embedding_dropout = match architecture {
        A::Gpt2 => f.positive_rate("embd_pdrop", true)?,
        A::Bert => f.positive_rate("hidden_dropout_prob", true)?,
        A::Vit => f.positive_rate("hidden_dropout_prob", false)?,
        A::GptNeox => f.positive_rate("hidden_dropout", false)?,
        A::Starcoder2 => f.positive_rate("embedding_dropout", false)?,
        A::Phi => f.positive_rate("embd_pdrop", false)?,
        _ => false,
    };
    if architecture == A::Falcon {
        e.falcon_new = f.bool_or("new_decoder_architecture", false)?;
        e.alibi = f.bool_or("alibi", false)?;
    }
    if matches!(
        architecture,
        A::GptNeox | A::Phi | A::Glm | A::Glm4 | A::Glm4Moe | A::StableLm
    ) {
        // transformers 5 keeps it as `rope_parameters.partial_rotary_factor`; older files
        // as `rotary_pct` (GPT-NeoX) or a top-level `partial_rotary_factor` (Phi).
        let nested = ["rope_parameters", "rope_scaling"]
            .iter()
            .find_map(|k| f.map.get(*k)?.get("partial_rotary_factor"));
        let older = if architecture != A::GptNeox {
            "partial_rotary_factor"
        } else {
            "rotary_pct"
        };
        e.rotary_percent = match nested.or_else(|| f.map.get(older)) {
            Some(v) => match v.as_f64() {
                Some(p) if (0.0..=1.0).contains(&p) => (p * 100.0).round() as u64,
                _ => {
                    return Err(ConfigError::BadField {
                        field: older,
                        expected: "a fraction between 0 and 1",
                        found: v.to_string(),
                    });
                }
            },
            None if !matches!(architecture, A::GptNeox | A::StableLm) => 50,
            None => 25,
        };
    }
    Ok(e)
}

/// The shared experts' total width, `n_shared_experts` × the expert width, refused when it
/// overflows.
fn shared_width(moe_intermediate: u64, shared: u64) -> Result<u64, ConfigError> {
    moe_intermediate
        .checked_mul(shared)
        .ok_or(ConfigError::BadField {
            field: "n_shared_experts",
            expected: "a count whose shared width fits 64 bits",
            found: shared.to_string(),
        })
}

/// The `model_type` of a config object.
fn model_type(map: &Map<String, Value>) -> Result<&str, ConfigError> {
    match map.get("model_type") {
        Some(Value::String(s)) => Ok(s.as_str()),
        Some(v) => Err(ConfigError::BadField {
            field: "model_type",
            expected: "a string",
            found: v.to_string(),
        }),
        None => Err(ConfigError::NoModelType),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_bad_fields_are_named() {
        let err = TransformerConfig::from_hf_json(
            r#"{"model_type":"gpt2","n_embd":"768","n_layer":2,"n_head":2,"vocab_size":10,"n_positions":8}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("`n_embd`"), "{err}");
        let err = TransformerConfig::from_hf_json(r#"{"model_type":"t5"}"#).unwrap_err();
        assert_eq!(err, ConfigError::UnsupportedModel("t5".to_owned()));
        // Families close to the modelled ones but not modelled still get the clear error.
        for other in [
            "ernie4_5_vl_moe",
            "minimax",
            "hunyuan_v1_moe",
            "qwen2_5_vl_text",
        ] {
            let json = format!(r#"{{"model_type":"{other}"}}"#);
            let err = TransformerConfig::from_hf_json(&json).unwrap_err();
            assert_eq!(err, ConfigError::UnsupportedModel(other.to_owned()));
        }
        assert!(
            err.to_string().contains("deepseek_v3")
                && err.to_string().contains("architecture and sizes")
        );
        assert_eq!(
            TransformerConfig::from_hf_json("{}"),
            Err(ConfigError::NoModelType)
        );
        assert_eq!(
            TransformerConfig::from_hf_json("[1]"),
            Err(ConfigError::NotAnObject)
        );
        assert!(matches!(
            TransformerConfig::from_hf_json("{\"model_type\": "),
            Err(ConfigError::Json(_))
        ));
        // Key/value heads that do not divide the query heads: transformers builds the model
        // (its attention cannot run it), so a config file is counted as built, with a note;
        // the same sizes as flags are refused.
        let json = r#"{"model_type":"mistral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":6,
                "num_key_value_heads":4,"intermediate_size":128,"vocab_size":100}"#;
        let c = TransformerConfig::from_hf_json(json).unwrap();
        assert_eq!((c.kv_heads, c.head_dim), (4, 10));
        assert!(
            c.notes().iter().any(|n| n.contains("do not divide")),
            "{:?}",
            c.notes()
        );
        let flags = TransformerConfig {
            layers: 2,
            hidden: 64,
            heads: 6,
            kv_heads: 4,
            intermediate: 128,
            vocab: 100,
            ..TransformerConfig::new(Architecture::Mistral)
        };
        let err = flags.finish().unwrap_err();
        assert!(matches!(err, ConfigError::Inconsistent(_)), "{err}");
        let err = TransformerConfig::from_hf_json(
            r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":-2,"num_attention_heads":4,
                "intermediate_size":128,"vocab_size":100}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("num_hidden_layers"), "{err}");
        let err = TransformerConfig::from_hf_json(
            r#"{"model_type":"gemma2","num_hidden_layers":3,"layer_types":["full_attention"]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("layer_types"), "{err}");
        // More experts per token than experts: built by transformers (its top-k fails only
        // when run), so counted with every expert active and a note; refused as flags.
        let c = TransformerConfig::from_hf_json(
            r#"{"model_type":"mixtral","num_local_experts":2,"num_experts_per_tok":3}"#,
        )
        .unwrap();
        assert_eq!(c.active_parameters(), c.parameters());
        assert!(c.notes().iter().any(|n| n.contains("experts per token")));
        let mut flags = c.clone();
        flags.moe.as_mut().unwrap().sparse_layers.clear();
        let err = flags.finish().unwrap_err();
        assert!(err.to_string().contains("experts per token"), "{err}");
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = TransformerConfig::from_hf_json(
            r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
                "intermediate_size":128,"vocab_size":100,"torch_dtype":"bfloat16"}"#,
        )
        .unwrap();
        assert_eq!((c.kv_heads, c.head_dim), (4, 16));
        assert!(!c.tied_embeddings && !c.qkv_bias);
        assert_eq!(c.dtype, Some(DType::BF16));
        assert_eq!(c.mlp, Mlp::Gated);
        // A config with nothing but its type is the config class's default model.
        let g = TransformerConfig::from_hf_json(r#"{"model_type":"gemma2"}"#).unwrap();
        assert_eq!(
            (g.hidden, g.heads, g.kv_heads, g.head_dim),
            (2304, 8, 4, 256)
        );
        assert!(g.tied_embeddings);
        assert_eq!(g.sliding_layers[..4], [true, false, true, false]);
        // dtype names as torch writes them; `dtype` over the older `torch_dtype`; "auto" and
        // integer dtypes name no activation dtype.
        let dtype = |json: &str| TransformerConfig::from_hf_json(json).unwrap().dtype;
        assert_eq!(
            dtype(r#"{"model_type":"llama","torch_dtype":"float8_e4m3fn"}"#),
            Some(DType::F8E4M3)
        );
        assert_eq!(
            dtype(r#"{"model_type":"llama","torch_dtype":"float32","dtype":"bfloat16"}"#),
            Some(DType::BF16)
        );
        assert_eq!(dtype(r#"{"model_type":"llama","dtype":"auto"}"#), None);
        assert_eq!(
            dtype(r#"{"model_type":"llama","torch_dtype":"int8"}"#),
            None
        );
        let err =
            TransformerConfig::from_hf_json(r#"{"model_type":"llama","dtype":"f33"}"#).unwrap_err();
        assert!(err.to_string().contains("`dtype`"), "{err}");
        let f = TransformerConfig::from_hf_json(r#"{"model_type":"falcon"}"#).unwrap();
        assert_eq!((f.kv_heads, f.head_dim, f.norms_per_layer), (1, 64, 1));
    }

    #[test]
    fn gemma3_reads_its_nested_text_config() {
        let c = TransformerConfig::from_hf_json(
            r#"{"model_type":"gemma3","torch_dtype":"bfloat16",
                "text_config":{"model_type":"gemma3_text","num_hidden_layers":12,"sliding_window":512}}"#,
        )
        .unwrap();
        assert_eq!(c.architecture, Architecture::Gemma3);
        assert_eq!(c.dtype, Some(DType::BF16));
        assert_eq!(c.layer_window(5), None);
        assert_eq!(c.layer_window(4), Some(512));
        assert_eq!(c.layer_window(11), None);
    }

    /// SmolLM3's NoPE layers as its config class derives them, Phi's refusals and defaults
    /// (read in transformers 5.24's `configuration_smollm3.py` / `configuration_phi.py`).
    #[test]
    fn smollm3_nope_layers_and_phi_keys() {
        let read = |json: &str| TransformerConfig::from_hf_json(json);
        // Without `no_rope_layers`: every 4th layer (1-based) is NoPE.
        let c = read(r#"{"model_type":"smollm3","num_hidden_layers":8}"#).unwrap();
        let nope: Vec<bool> = (1..=8).map(|i| i % 4 == 0).collect();
        assert_eq!(c.nope_layers, nope);
        assert!(c.tied_embeddings && c.sliding_window.is_none());
        // An explicit list (1 = rotary); with `use_sliding_window` the NoPE layers slide.
        let c = read(
            r#"{"model_type":"smollm3","num_hidden_layers":3,"no_rope_layers":[1,0,1],
                "use_sliding_window":true,"sliding_window":256}"#,
        )
        .unwrap();
        assert_eq!(c.nope_layers, [false, true, false]);
        assert_eq!(c.sliding_layers, [false, true, false]);
        assert_eq!(c.layer_window(1), Some(256));
        // The window is ignored without `use_sliding_window`.
        let c =
            read(r#"{"model_type":"smollm3","num_hidden_layers":2,"sliding_window":64}"#).unwrap();
        assert_eq!(c.sliding_window, None);
        let err = read(r#"{"model_type":"smollm3","num_hidden_layers":3,"no_rope_layers":[1,0]}"#)
            .unwrap_err();
        assert!(matches!(err, ConfigError::Inconsistent(_)), "{err}");
        assert!(err.to_string().contains("no_rope_layers"), "{err}");
        // Phi: half of each head rotates unless the config says otherwise; Q/K LayerNorms
        // are refused by name.
        let c =
            read(r#"{"model_type":"phi","hidden_size":2560,"num_attention_heads":32}"#).unwrap();
        assert_eq!(c.eager.rotary_percent, 50);
        assert!(c.parallel_residual && c.qkv_bias && c.o_bias && c.mlp_bias);
        assert_eq!(
            (c.norm, c.mlp, c.norms_per_layer),
            (Norm::Layer, Mlp::Plain, 1)
        );
        let c = read(
            r#"{"model_type":"phi","rope_parameters":{"rope_type":"default","partial_rotary_factor":0.4}}"#,
        )
        .unwrap();
        assert_eq!(c.eager.rotary_percent, 40);
        let err = read(r#"{"model_type":"phi","qk_layernorm":true}"#).unwrap_err();
        assert!(err.to_string().contains("qk_layernorm"), "{err}");
        // Cohere: one norm, parallel blocks, tied by default; Q/K norms refused by name.
        let c = read(r#"{"model_type":"cohere","attention_bias":true}"#).unwrap();
        assert!(c.parallel_residual && c.tied_embeddings && c.qkv_bias && c.o_bias);
        assert_eq!((c.norm, c.norms_per_layer), (Norm::Rms, 1));
        let err = read(r#"{"model_type":"cohere","use_qk_norm":true}"#).unwrap_err();
        assert!(err.to_string().contains("use_qk_norm"), "{err}");
        // GLM: Q/K/V biased by default, O never; half of each head rotates; GLM-4 has four
        // norms a layer.
        let c = read(r#"{"model_type":"glm"}"#).unwrap();
        assert!(c.qkv_bias && !c.o_bias && !c.mlp_bias);
        assert_eq!((c.eager.rotary_percent, c.norms_per_layer), (50, 2));
        assert_eq!((c.head_dim, c.kv_heads), (128, 2));
        let c = read(r#"{"model_type":"glm4","attention_bias":false}"#).unwrap();
        assert!(!c.qkv_bias);
        assert_eq!(c.norms_per_layer, 4);
        // OLMo: norms without parameters (a layer's count has none), `clip_qkv` refused.
        let c = read(
            r#"{"model_type":"olmo","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
                "num_attention_heads":4,"vocab_size":100}"#,
        )
        .unwrap();
        // Per layer: Q, K, V, O 64·64 each, MLP 3·64·128; embeddings and head 100·64 each.
        assert_eq!(
            c.parameters().unwrap(),
            2 * (4 * 64 * 64 + 3 * 64 * 128) + 2 * 100 * 64
        );
        let err = read(r#"{"model_type":"olmo","clip_qkv":8.0}"#).unwrap_err();
        assert!(err.to_string().contains("clip_qkv"), "{err}");
        // Granite reads Llama's keys (its multipliers change no size).
        let c = read(
            r#"{"model_type":"granite","attention_bias":true,"mlp_bias":true,"logits_scaling":8.0}"#,
        )
        .unwrap();
        assert!(c.qkv_bias && c.o_bias && c.mlp_bias && !c.tied_embeddings);
    }

    #[test]
    fn gpt_oss_keys_and_defaults() {
        let read = |json: &str| TransformerConfig::from_hf_json(json);
        // GptOssConfig's defaults: gpt-oss-120b's shape, even layers sliding over 128 tokens,
        // biased attention, 4 of 128 experts of 2,880.
        let c = read(r#"{"model_type":"gpt_oss"}"#).unwrap();
        assert_eq!(
            (c.layers, c.hidden, c.heads, c.kv_heads, c.head_dim, c.vocab),
            (36, 2880, 64, 8, 64, 201_088)
        );
        assert!(c.qkv_bias && c.o_bias && !c.tied_embeddings);
        let moe = c.moe.as_ref().unwrap();
        assert_eq!(
            (moe.experts, moe.experts_per_token, moe.intermediate),
            (128, 4, 2880)
        );
        assert_eq!(c.layer_window(0), Some(128));
        assert_eq!(c.layer_window(1), None);
        // `layer_types` decides; a null window leaves every layer global.
        let c = read(
            r#"{"model_type":"gpt_oss","num_hidden_layers":3,"sliding_window":64,
                "layer_types":["full_attention","sliding_attention","sliding_attention"],
                "attention_bias":false,"num_local_experts":8}"#,
        )
        .unwrap();
        assert_eq!(
            (0..3).map(|i| c.layer_window(i)).collect::<Vec<_>>(),
            [None, Some(64), Some(64)]
        );
        assert!(!c.qkv_bias && !c.o_bias);
        assert_eq!(c.moe.as_ref().unwrap().experts, 8);
        let c = read(r#"{"model_type":"gpt_oss","sliding_window":null}"#).unwrap();
        assert!((0..36).all(|i| c.layer_window(i).is_none()));
        // Per layer by hand (hidden 64, 4 heads of 16, 2 KV heads, 4 experts of 32):
        // Q 64·64 + 64, K and V 32·64 + 32 each, O 64·64 + 64, sinks 4, router 4·64 + 4,
        // experts 4·(64·64 + 64 + 32·64 + 64), two norms 64; embeddings and head 100·64
        // each, the final norm 64.
        let c = read(
            r#"{"model_type":"gpt_oss","hidden_size":64,"num_attention_heads":4,
                "num_key_value_heads":2,"head_dim":16,"intermediate_size":32,
                "num_hidden_layers":1,"num_local_experts":4,"vocab_size":100}"#,
        )
        .unwrap();
        let layer = (64 * 64 + 64)
            + 2 * (32 * 64 + 32)
            + (64 * 64 + 64)
            + 4
            + (4 * 64 + 4)
            + 4 * (64 * 64 + 64 + 32 * 64 + 64)
            + 2 * 64;
        assert_eq!(c.parameters().unwrap(), layer + 2 * 100 * 64 + 64);
        // The load-balancing loss is not modelled: refused by name.
        let err = read(r#"{"model_type":"gpt_oss","output_router_logits":true}"#).unwrap_err();
        assert!(err.to_string().contains("output_router_logits"), "{err}");
    }

    #[test]
    fn shared_experts_whose_width_overflows_are_refused_by_name() {
        // 2^40 shared experts of 2^30: the product passes 64 bits, for both readers that
        // multiply the shared experts' count into their width.
        for model_type in ["glm4_moe", "deepseek_v2", "deepseek_v3"] {
            let json = format!(
                r#"{{"model_type":"{model_type}","moe_intermediate_size":1073741824,"n_shared_experts":1099511627776}}"#
            );
            let err = TransformerConfig::from_hf_json(&json)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("n_shared_experts") && err.contains("1099511627776"),
                "{model_type}: {err}"
            );
        }
    }

    #[test]
    fn glm4_moe_keys_and_defaults() {
        let read = |json: &str| TransformerConfig::from_hf_json(json).unwrap();
        // Glm4MoeConfig's defaults: 46 layers of 4096, 96 heads of 4096 / 96 = 42 (no
        // head_dim field), 8 key/value heads, half of each head rotating, the first layer
        // dense, 8 of 128 experts of 1408 plus one shared.
        let c = read(r#"{"model_type":"glm4_moe"}"#);
        assert_eq!(
            (c.layers, c.hidden, c.heads, c.kv_heads, c.head_dim),
            (46, 4096, 96, 8, 42)
        );
        assert_eq!(c.eager.rotary_percent, 50);
        assert!(!c.qkv_bias && !c.o_bias && c.qk_norm == QkNorm::None);
        let moe = c.moe.as_ref().unwrap();
        assert_eq!(
            (moe.experts, moe.experts_per_token, moe.intermediate),
            (128, 8, 1408)
        );
        assert_eq!(moe.shared_intermediate, 1408);
        assert!(!c.is_sparse_layer(0) && c.is_sparse_layer(1));
        // Keys: biases on Q/K/V only, per-head Q/K norms, the experts under either key.
        let c = read(
            r#"{"model_type":"glm4_moe","attention_bias":true,"use_qk_norm":true,
                "num_local_experts":16,"n_shared_experts":2,"moe_intermediate_size":64,
                "first_k_dense_replace":0,"partial_rotary_factor":1.0}"#,
        );
        assert!(c.qkv_bias && !c.o_bias && c.qk_norm == QkNorm::PerHead);
        let moe = c.moe.as_ref().unwrap();
        assert_eq!((moe.experts, moe.shared_intermediate), (16, 128));
        assert!(c.is_sparse_layer(0));
        assert_eq!(c.eager.rotary_percent, 100);
    }

    #[test]
    fn olmoe_granitemoe_and_cohere2_keys() {
        let read = |json: &str| TransformerConfig::from_hf_json(json);
        // OLMoE: 8 of 64 experts on every layer, Q/K norms over all heads, clip_qkv and
        // the load-balancing loss refused by name.
        let c = read(r#"{"model_type":"olmoe"}"#).unwrap();
        let moe = c.moe.as_ref().unwrap();
        assert_eq!(
            (moe.experts, moe.experts_per_token, moe.intermediate),
            (64, 8, 2048)
        );
        assert!(c.is_sparse_layer(15) && c.qk_norm == QkNorm::Full && !c.qkv_bias);
        for bad in [r#""clip_qkv":8.0"#, r#""output_router_logits":true"#] {
            let err = read(&format!(r#"{{"model_type":"olmoe",{bad}}}"#)).unwrap_err();
            let key = bad.split('"').nth(1).unwrap();
            assert!(err.to_string().contains(key), "{err}");
        }
        // Its Q/K norms take the model width whatever `head_dim` says (transformers 5.24:
        // 1,968): per layer Q, K, V, O 12·16 each, norms 16 and 16, router 2·16, two experts
        // of 2·8·16 + 16·8, two norms 16; embeddings and head 10·16, final norm 16.
        let c = read(
            r#"{"model_type":"olmoe","hidden_size":16,"num_attention_heads":1,
                "num_key_value_heads":1,"head_dim":12,"intermediate_size":8,"num_experts":2,
                "num_experts_per_tok":1,"num_hidden_layers":1,"vocab_size":10}"#,
        )
        .unwrap();
        let layer = 4 * 12 * 16 + 2 * 16 + 2 * 16 + 2 * (2 * 8 * 16 + 16 * 8) + 2 * 16;
        assert_eq!(c.parameters().unwrap(), layer + 2 * 10 * 16 + 16);
        // Granite-MoE: 2 of 8 experts of `intermediate_size`.
        let c = read(r#"{"model_type":"granitemoe","num_local_experts":4}"#).unwrap();
        let moe = c.moe.as_ref().unwrap();
        assert_eq!(
            (moe.experts, moe.experts_per_token, moe.intermediate),
            (4, 2, 11008)
        );
        assert!(!c.tied_embeddings && c.qk_norm == QkNorm::None);
        // Of 8 layers, three in four slide over 4096 tokens and rotate; the fourth is
        // global and NoPE.
        fn three_in_four_slide_and_rotate(c: &TransformerConfig) {
            let windows: Vec<Option<u64>> = (0..8).map(|i| c.layer_window(i)).collect();
            let w = Some(4096);
            assert_eq!(windows, [w, w, w, None, w, w, w, None]);
            assert_eq!(
                c.nope_layers,
                windows.iter().map(Option::is_none).collect::<Vec<_>>()
            );
        }
        // Cohere 2: so by default; `layer_types` decides when given.
        let c = read(r#"{"model_type":"cohere2","num_hidden_layers":8}"#).unwrap();
        three_in_four_slide_and_rotate(&c);
        assert!(c.parallel_residual && c.tied_embeddings && c.norms_per_layer == 1);
        let c = read(
            r#"{"model_type":"cohere2","num_hidden_layers":2,"sliding_window":64,
                "layer_types":["full_attention","sliding_attention"]}"#,
        )
        .unwrap();
        assert_eq!((c.layer_window(0), c.layer_window(1)), (None, Some(64)));
        assert_eq!(c.nope_layers, [true, false]);
        // Without a window no layer slides or rotates.
        let c = read(r#"{"model_type":"cohere2","num_hidden_layers":2,"sliding_window":null}"#)
            .unwrap();
        assert_eq!(c.nope_layers, [true, true]);
        assert!((0..2).all(|i| c.layer_window(i).is_none()));
        // Seed-OSS: biased Q/K/V, unbiased O, 128-wide heads and dropout by default.
        let c = read(r#"{"model_type":"seed_oss"}"#).unwrap();
        assert!(c.qkv_bias && !c.o_bias && !c.mlp_bias);
        assert!(c.attention_dropout && c.hidden_dropout);
        assert_eq!(
            (c.layers, c.heads, c.kv_heads, c.head_dim),
            (64, 80, 8, 128)
        );
        let c = read(
            r#"{"model_type":"seed_oss","attention_bias":false,"attention_out_bias":true,
                "attention_dropout":0.0,"residual_dropout":0.0}"#,
        )
        .unwrap();
        assert!(!c.qkv_bias && c.o_bias && !c.attention_dropout && !c.hidden_dropout);
        // EXAONE 4: three 4096-token sliding layers in four, which alone rotate; per-head
        // Q/K norms; post-norms (two a layer); no biases.
        let c = read(r#"{"model_type":"exaone4","num_hidden_layers":8}"#).unwrap();
        three_in_four_slide_and_rotate(&c);
        assert!(c.qk_norm == QkNorm::PerHead && c.norms_per_layer == 2);
        assert!(!c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.tied_embeddings);
        assert_eq!((c.heads, c.kv_heads, c.vocab), (32, 32, 102400));
        // `layer_types` decides (the published 32B's `"LLLG"` pattern is then never read);
        // without a window every layer rotates, and the list is required.
        let c = read(
            r#"{"model_type":"exaone4","num_hidden_layers":2,"sliding_window":64,
                "sliding_window_pattern":"LLLG",
                "layer_types":["full_attention","sliding_attention"]}"#,
        )
        .unwrap();
        assert_eq!((c.layer_window(0), c.layer_window(1)), (None, Some(64)));
        assert_eq!(c.nope_layers, [true, false]);
        let c = read(
            r#"{"model_type":"exaone4","num_hidden_layers":2,"sliding_window":null,
                "layer_types":["full_attention","full_attention"]}"#,
        )
        .unwrap();
        assert_eq!(c.nope_layers, [false, false]);
        // StableLM: LayerNorms with biases, a quarter of each head rotated, `hidden_size`
        // split evenly whatever `head_dim` says; one norm a layer in parallel blocks; the
        // per-head Q/K LayerNorms refused by name.
        let c = read(r#"{"model_type":"stablelm","head_dim":7}"#).unwrap();
        assert_eq!((c.head_dim, c.eager.rotary_percent), (80, 25));
        assert!(c.norm == Norm::Layer && c.norms_per_layer == 2 && !c.parallel_residual);
        assert!(!c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.tied_embeddings);
        let c = read(
            r#"{"model_type":"stablelm","use_parallel_residual":true,"use_qkv_bias":true,
                "partial_rotary_factor":0.5,"hidden_dropout":0.1}"#,
        )
        .unwrap();
        assert!(c.parallel_residual && c.norms_per_layer == 1 && c.qkv_bias && !c.o_bias);
        assert!(c.hidden_dropout && c.eager.rotary_percent == 50);
        // Hunyuan dense: Llama's layers, per-head Q/K norms, biases on Q/K/V/O together;
        // `head_dim` required (transformers' attention cannot be built without it).
        let c = read(r#"{"model_type":"hunyuan_v1_dense","attention_bias":true,"head_dim":64}"#)
            .unwrap();
        assert!(c.qk_norm == QkNorm::PerHead && c.qkv_bias && c.o_bias && !c.mlp_bias);
        assert_eq!(
            (c.vocab, c.heads, c.kv_heads, c.head_dim),
            (290943, 32, 32, 64)
        );
        // StableLM 2 12B's per-head LayerNorm modules (ninth session).
        let c = read(r#"{"model_type":"stablelm","qk_layernorm":true}"#).unwrap();
        assert!(c.qk_norm == QkNorm::EachHead && c.head_dim == 80);
        // ERNIE 4.5: the 0.3B's class defaults (8:1 grouped heads of 128, tied); `use_bias`
        // on every projection; no attention dropout whatever the config says.
        let c = read(r#"{"model_type":"ernie4_5","attention_dropout":0.1}"#).unwrap();
        assert_eq!(
            (c.vocab, c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim),
            (103424, 1024, 18, 16, 2, 128)
        );
        assert!(c.tied_embeddings && !c.qkv_bias && !c.mlp_bias && !c.attention_dropout);
        let c = read(r#"{"model_type":"ernie4_5","use_bias":true,"head_dim":null}"#).unwrap();
        assert!(c.qkv_bias && c.o_bias && c.mlp_bias && c.head_dim == 64);
        // ERNIE 4.5 MoE: the 21B-A3B's class defaults (64 experts, 6 a token, two shared
        // of 1536, every layer sparse from the second), the config class's aliases, and a
        // window of sparse layers every second layer.
        let c = read(r#"{"model_type":"ernie4_5_moe"}"#).unwrap();
        let m = c.moe.as_ref().unwrap();
        assert_eq!(
            (
                m.experts,
                m.experts_per_token,
                m.intermediate,
                m.shared_intermediate
            ),
            (64, 6, 1536, 3072)
        );
        assert!(!c.is_sparse_layer(0) && (1..28).all(|i| c.is_sparse_layer(i)));
        let c = read(
            r#"{"model_type":"ernie4_5_moe","num_hidden_layers":6,"num_experts":8,
                "num_experts_per_tok":2,"moe_layer_start_index":0,"moe_layer_end_index":4,
                "moe_layer_interval":2}"#,
        )
        .unwrap();
        let m = c.moe.as_ref().unwrap();
        assert_eq!((m.experts, m.experts_per_token), (8, 2));
        let sparse: Vec<bool> = (0..6).map(|i| c.is_sparse_layer(i)).collect();
        assert_eq!(sparse, [false, true, false, true, false, false]);
        let err = read(r#"{"model_type":"ernie4_5_moe","moe_layer_end_index":-2}"#).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::BadField {
                    field: "moe_layer_end_index",
                    ..
                }
            ),
            "{err:?}"
        );
        for (json, refused) in [
            (r#"{"model_type":"hunyuan_v1_dense"}"#, "head_dim"),
            (
                r#"{"model_type":"exaone4","sliding_window":null}"#,
                "layer_types",
            ),
        ] {
            let err = read(json).unwrap_err();
            assert!(
                matches!(err, ConfigError::BadField { field, .. } if field == refused),
                "{json}: {err:?}"
            );
        }
    }
}
