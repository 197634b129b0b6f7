//! A transformer's shape: read from a Hugging Face `config.json` or built from numbers.
//!
//! Supported `model_type`s: `llama`, `mistral`, `qwen2` (gated SiLU MLP, RMSNorm, rotary
//! positions, grouped-query attention; Qwen2 has biases on Q, K and V), `gpt2` (plain GELU
//! MLP, LayerNorm, learned positions, biases everywhere, tied embeddings), `bert` (an encoder
//! with token-type embeddings, an embedding LayerNorm, post-norm layers and a pooler) and
//! `vit` (a patch-embedding encoder with a class token and, when the config has labels, a
//! classifier). Each field's default is the one the `transformers` config class uses when
//! the file leaves it out. A missing or mistyped field is a [`ConfigError`] naming it.

use std::str::FromStr;

use memplan_ir::DType;
use serde_json::{Map, Value};

/// The architecture family: what the layers contain besides their sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Architecture {
    /// Llama: gated MLP, RMSNorm, no biases.
    Llama,
    /// Mistral: as Llama (grouped-query attention in the published configs).
    Mistral,
    /// Qwen2: as Llama, with biases on Q, K and V.
    Qwen2,
    /// GPT-2: plain MLP, LayerNorm, learned positions, biases everywhere.
    Gpt2,
    /// BERT: encoder, token types, embedding LayerNorm, pooler.
    Bert,
    /// ViT: encoder over image patches with a class token.
    Vit,
}

impl Architecture {
    /// Every architecture, in declaration order.
    pub const ALL: [Architecture; 6] = [
        Architecture::Llama,
        Architecture::Mistral,
        Architecture::Qwen2,
        Architecture::Gpt2,
        Architecture::Bert,
        Architecture::Vit,
    ];

    /// The `model_type` string of `config.json`.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Qwen2 => "qwen2",
            Architecture::Gpt2 => "gpt2",
            Architecture::Bert => "bert",
            Architecture::Vit => "vit",
        }
    }

    /// Whether the model decodes token by token with a KV cache (the decoders).
    pub fn is_decoder(self) -> bool {
        !matches!(self, Architecture::Bert | Architecture::Vit)
    }
}

impl FromStr for Architecture {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Architecture, ConfigError> {
        Architecture::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| ConfigError::UnsupportedModel(s.to_owned()))
    }
}

/// The feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mlp {
    /// `down(act(gate(x)) * up(x))`: three matrices.
    Gated,
    /// `down(act(up(x)))`: two matrices.
    Plain,
}

/// The normalisation layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// RMSNorm: a scale only.
    Rms,
    /// LayerNorm: a scale and a bias.
    Layer,
}

/// The image side of a vision transformer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vision {
    /// Image side in pixels (square images).
    pub image_size: u64,
    /// Patch side in pixels.
    pub patch_size: u64,
    /// Input channels.
    pub channels: u64,
    /// Classifier outputs; 0 for no classifier.
    pub labels: u64,
}

/// The numbers that size a transformer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformerConfig {
    /// The family.
    pub architecture: Architecture,
    /// Number of layers.
    pub layers: u64,
    /// Model width.
    pub hidden: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads (equal to `heads` without grouped-query attention).
    pub kv_heads: u64,
    /// Width of one head (usually `hidden / heads`).
    pub head_dim: u64,
    /// Width of the MLP.
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
}

/// Why a config could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not JSON.
    #[error("config is not valid JSON: {0}")]
    Json(String),
    /// JSON, but not an object.
    #[error("config is not a JSON object")]
    NotAnObject,
    /// No `model_type` field.
    #[error("config has no `model_type` (expected one of llama, mistral, qwen2, gpt2, bert, vit)")]
    NoModelType,
    /// A `model_type` memplan cannot size.
    #[error(
        "model_type `{0}` is not supported (expected one of llama, mistral, qwen2, gpt2, bert, vit)"
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

    fn dtype(&self) -> Result<Option<DType>, ConfigError> {
        for field in ["torch_dtype", "dtype"] {
            match self.map.get(field) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => {
                    return DType::from_str(s)
                        .map(Some)
                        .map_err(|_| ConfigError::BadField {
                            field: "torch_dtype",
                            expected: "a dtype name such as float32, float16 or bfloat16",
                            found: format!("\"{s}\""),
                        });
                }
                Some(v) => {
                    return Err(ConfigError::BadField {
                        field: "torch_dtype",
                        expected: "a dtype name",
                        found: v.to_string(),
                    });
                }
            }
        }
        Ok(None)
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
        let model_type = match map.get("model_type") {
            Some(Value::String(s)) => s.as_str(),
            Some(v) => {
                return Err(ConfigError::BadField {
                    field: "model_type",
                    expected: "a string",
                    found: v.to_string(),
                });
            }
            None => return Err(ConfigError::NoModelType),
        };
        let architecture: Architecture = model_type.parse()?;
        let f = Fields {
            map,
            model: architecture.name(),
        };
        let config = match architecture {
            Architecture::Gpt2 => {
                let hidden = f.u64("n_embd")?;
                TransformerConfig {
                    layers: f.u64("n_layer")?,
                    hidden,
                    heads: f.u64("n_head")?,
                    intermediate: match f.opt_u64("n_inner")? {
                        Some(n) => n,
                        None => hidden.checked_mul(4).ok_or(ConfigError::BadField {
                            field: "n_embd",
                            expected: "a size whose MLP width (4 × n_embd) fits 64 bits",
                            found: hidden.to_string(),
                        })?,
                    },
                    vocab: f.u64("vocab_size")?,
                    learned_positions: f.u64("n_positions")?,
                    max_positions: f.u64("n_positions")?,
                    tied_embeddings: f.bool_or("tie_word_embeddings", true)?,
                    ..TransformerConfig::new(architecture)
                }
            }
            Architecture::Bert | Architecture::Vit => {
                let mut c = TransformerConfig {
                    layers: f.u64("num_hidden_layers")?,
                    hidden: f.u64("hidden_size")?,
                    heads: f.u64("num_attention_heads")?,
                    intermediate: f.u64("intermediate_size")?,
                    ..TransformerConfig::new(architecture)
                };
                if architecture == Architecture::Bert {
                    c.vocab = f.u64("vocab_size")?;
                    c.learned_positions = f.u64("max_position_embeddings")?;
                    c.max_positions = c.learned_positions;
                    c.token_types = f.opt_u64("type_vocab_size")?.unwrap_or(2);
                } else {
                    let labels = match (f.opt_u64("num_labels")?, map.get("id2label")) {
                        (Some(n), _) => n,
                        (None, Some(Value::Object(m))) => m.len() as u64,
                        _ => 0,
                    };
                    c.qkv_bias = f.bool_or("qkv_bias", true)?;
                    c.vision = Some(Vision {
                        image_size: f.opt_u64("image_size")?.unwrap_or(224),
                        patch_size: f.opt_u64("patch_size")?.unwrap_or(16),
                        channels: f.opt_u64("num_channels")?.unwrap_or(3),
                        labels,
                    });
                }
                c
            }
            Architecture::Llama | Architecture::Mistral | Architecture::Qwen2 => {
                let heads = f.u64("num_attention_heads")?;
                let bias = f.bool_or("attention_bias", false)?;
                TransformerConfig {
                    layers: f.u64("num_hidden_layers")?,
                    hidden: f.u64("hidden_size")?,
                    heads,
                    kv_heads: f.opt_u64("num_key_value_heads")?.unwrap_or(heads),
                    head_dim: f.opt_u64("head_dim")?.unwrap_or(0),
                    intermediate: f.u64("intermediate_size")?,
                    vocab: f.u64("vocab_size")?,
                    tied_embeddings: f.bool_or("tie_word_embeddings", false)?,
                    qkv_bias: architecture == Architecture::Qwen2 || bias,
                    o_bias: bias,
                    mlp_bias: f.bool_or("mlp_bias", false)?,
                    max_positions: f.opt_u64("max_position_embeddings")?.unwrap_or(0),
                    ..TransformerConfig::new(architecture)
                }
            }
        };
        let config = TransformerConfig {
            dtype: f.dtype()?,
            ..config
        };
        config.finish()
    }

    /// A config of `architecture` with that family's structure and every size zero: set
    /// the sizes, then call [`TransformerConfig::finish`].
    pub fn new(architecture: Architecture) -> TransformerConfig {
        let llama_like = matches!(
            architecture,
            Architecture::Llama | Architecture::Mistral | Architecture::Qwen2
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
            mlp: if llama_like { Mlp::Gated } else { Mlp::Plain },
            norm: if llama_like { Norm::Rms } else { Norm::Layer },
            tied_embeddings: architecture == Architecture::Gpt2,
            qkv_bias: architecture == Architecture::Qwen2 || !llama_like,
            o_bias: !llama_like,
            mlp_bias: !llama_like,
            embedding_norm: architecture == Architecture::Bert,
            pooler: architecture == Architecture::Bert,
            vision: None,
            dtype: None,
        }
    }

    /// Fills the defaults (`kv_heads = heads`, `head_dim = hidden / heads`) and checks the
    /// sizes agree: every size positive, heads a multiple of the key/value heads, the head
    /// width dividing the model width unless given, a vision model's image made of whole
    /// patches.
    pub fn finish(mut self) -> Result<TransformerConfig, ConfigError> {
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
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(ConfigError::Inconsistent(format!(
                "{} attention heads are not a multiple of {} key/value heads",
                self.heads, self.kv_heads
            )));
        }
        if self.head_dim == 0 {
            if !self.hidden.is_multiple_of(self.heads) {
                return Err(ConfigError::Inconsistent(format!(
                    "hidden size {} is not a multiple of {} attention heads",
                    self.hidden, self.heads
                )));
            }
            self.head_dim = self.hidden / self.heads;
        }
        match self.vision {
            Some(v)
                if v.patch_size == 0
                    || !v.image_size.is_multiple_of(v.patch_size)
                    || v.channels == 0 =>
            {
                return Err(ConfigError::Inconsistent(format!(
                    "image size {} is not a whole number of {}-pixel patches",
                    v.image_size, v.patch_size
                )));
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

    /// The sequence length a vision model always runs at (patches + class token); `None`
    /// for text models, whose sequence length is the workload's.
    pub fn fixed_sequence(&self) -> Option<u64> {
        self.vision.map(|v| {
            let side = v.image_size / v.patch_size.max(1);
            side.saturating_mul(side).saturating_add(1)
        })
    }

    /// A one-line description: `llama: 32 layers, hidden 4096, 32 heads / 8 kv heads ...`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}: {} layers, hidden {}, {} heads / {} kv heads of {}, intermediate {} ({}",
            self.architecture.name(),
            self.layers,
            self.hidden,
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.intermediate,
            match self.mlp {
                Mlp::Gated => "gated",
                Mlp::Plain => "plain",
            }
        );
        s.push(')');
        if self.vocab > 0 {
            s.push_str(&format!(
                ", vocab {}{}",
                self.vocab,
                if self.tied_embeddings { " (tied)" } else { "" }
            ));
        }
        if let Some(v) = self.vision {
            s.push_str(&format!(
                ", {}px images in {}px patches",
                v.image_size, v.patch_size
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_bad_fields_are_named() {
        let err = TransformerConfig::from_hf_json(r#"{"model_type":"llama","hidden_size":64}"#)
            .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Missing {
                    field: "num_attention_heads",
                    ..
                }
            ),
            "{err}"
        );
        let err = TransformerConfig::from_hf_json(
            r#"{"model_type":"gpt2","n_embd":"768","n_layer":2,"n_head":2,"vocab_size":10,"n_positions":8}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("`n_embd`"), "{err}");
        let err = TransformerConfig::from_hf_json(r#"{"model_type":"t5"}"#).unwrap_err();
        assert_eq!(err, ConfigError::UnsupportedModel("t5".to_owned()));
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
        let err = TransformerConfig::from_hf_json(
            r#"{"model_type":"mistral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":6,
                "num_key_value_heads":4,"intermediate_size":128,"vocab_size":100}"#,
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::Inconsistent(_)), "{err}");
        let err = TransformerConfig::from_hf_json(
            r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":-2,"num_attention_heads":4,
                "intermediate_size":128,"vocab_size":100}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("num_hidden_layers"), "{err}");
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
    }
}
