//! Each family's model as transformers 5 builds and runs it: its parameters in registration
//! order, the forward of a layer, of the whole model, of its head and loss.
//!
//! [`Net::new`] makes the parameters in the layout the modelling code stores them (fused
//! QKV and gate/up matrices where it fuses them, 3-d expert tensors); [`Net::forward`] runs
//! the model on `batch × seq` tokens (a ViT on its patches) and returns the loss (training)
//! or the logits (inference).
//!
//! The families differ in a few places, each an enum here: how Q, K and V are projected
//! ([`Qkv`]), where the norms and residual adds sit ([`Order`]), what embeds the input and
//! what the head computes ([`Family`]).

use memplan_ir::DType;

use super::blocks::{Activation, AttnCall, Kernel, NormKind, Rotary};
use super::ops::Eager;
use super::tape::{Class, Grad, StepPhase, T};
use super::{AttentionKind, Checkpoint};
use crate::estimate::{
    Activation as ConfigActivation, Architecture, Mlp, QkNorm, TransformerConfig,
};

/// A norm's parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NormP {
    pub w: T,
    pub b: Option<T>,
}

/// A linear layer's parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lin {
    pub w: T,
    pub b: Option<T>,
    pub out: u64,
}

/// An MLP's parameters (dense, shared expert).
#[derive(Clone, Debug)]
pub(crate) struct MlpP {
    /// Separate gate and up (Llama); `None` with `fused_gate_up` (Phi-3) or a plain MLP.
    pub gate: Option<Lin>,
    pub up: Lin,
    pub down: Lin,
    pub fused_gate_up: bool,
}

/// A sparse layer's parameters.
#[derive(Clone, Debug)]
pub(crate) struct MoeP {
    pub router: T,
    pub experts: u64,
    pub top_k: u64,
    pub gate_up: T,
    pub down: T,
    pub width: u64,
    pub shared: Option<MlpP>,
    pub shared_gate: Option<T>,
    /// gpt-oss: the router's bias and the experts' biases (`[experts, 2 × width]`,
    /// `[experts, hidden]`).
    pub biases: Option<(T, T, T)>,
    /// ERNIE 4.5 MoE: the router's correction bias (an f32 parameter never trained).
    pub statics: Option<T>,
}

/// Multi-head latent attention's parameters.
#[derive(Clone, Debug)]
pub(crate) struct MlaP {
    /// `q_a_proj` and its norm (with a query rank), then `q_b_proj` (or `q_proj`).
    pub q_a: Option<(Lin, NormP)>,
    pub q: Lin,
    pub kv_a: Lin,
    pub kv_norm: NormP,
    pub kv_b: Lin,
    pub lora: u64,
    pub nope: u64,
    pub rope: u64,
    pub v_dim: u64,
}

/// One layer's parameters.
#[derive(Clone, Debug)]
pub(crate) struct LayerP {
    /// Q, K and V (separate), or the one fused projection.
    pub proj: Vec<Lin>,
    pub mla: Option<MlaP>,
    pub o: Lin,
    pub q_norm: Option<NormP>,
    pub k_norm: Option<NormP>,
    /// StableLM's `qk_layernorm`: one LayerNorm module per head of Q, then per head of K,
    /// each with the number of heads it stands for (one, up to [`HEAD_NORM_GROUPS`]
    /// heads; past that, heads are grouped so that a layer makes a bounded number of ops).
    pub head_norms: (Vec<HeadNorm>, Vec<HeadNorm>),
    pub norms: Vec<NormP>,
    pub mlp: Option<MlpP>,
    pub moe: Option<MoeP>,
    pub window: Option<u64>,
    /// Whether the layer applies the rotary positions (SmolLM3's NoPE layers do not).
    pub rope: bool,
    /// gpt-oss: the learned attention sink of each head.
    pub sinks: Option<T>,
}

/// How Q, K and V are projected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Qkv {
    /// Three projections.
    Separate,
    /// One projection, `[q | k | v]` sliced (Phi-3, GPT-2): views laid out `[b, s, h, d]`.
    Concat,
    /// One projection, interleaved per head (GPT-NeoX): views.
    Neox,
    /// Falcon's layouts: copies to `[b, h, s, d]` (new architecture: K and V broadcast to
    /// every head first).
    Falcon,
    /// DeepSeek's latent attention.
    Mla,
}

/// Where the norms and residual adds sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// `x + attn(norm(x))`, `h + mlp(norm(h))`.
    Pre,
    /// Gemma 2/3: norms before and after each block.
    Sandwich,
    /// OLMo 2: `x + norm(attn(x))`.
    Post,
    /// GPT-NeoX's and Falcon's parallel residual: `x + attn(norm(x)) + mlp(norm'(x))`.
    Parallel,
    /// BERT: `norm(x + attn(x))`.
    PostLn,
}

/// What embeds the input and what the head computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// Token embeddings, a causal LM head and its loss.
    Decoder,
    /// BERT: word, position and token-type embeddings, a pooler, a classifier.
    Bert,
    /// ViT: patches, a class token, a classifier.
    Vit,
}

/// The whole model's parameters and shape.
#[derive(Debug)]
pub(crate) struct Net {
    pub arch: Architecture,
    pub family: Family,
    pub qkv: Qkv,
    pub order: Order,
    pub embed: T,
    /// Learned positions (GPT-2, BERT, ViT), token types (BERT), the embedding norm (BERT).
    pub positions: Option<T>,
    pub token_types: Option<T>,
    pub embed_norm: Option<NormP>,
    /// ViT's patch projection bias and class token.
    pub patch_bias: Option<T>,
    pub cls: Option<T>,
    pub layers: Vec<LayerP>,
    pub final_norm: Option<NormP>,
    pub head: Option<Lin>,
    /// Phi's LM-head bias (its own parameter, also with tied weights).
    pub head_bias: Option<T>,
    /// BERT's pooler and the classifier of BERT and ViT.
    pub pooler: Option<Lin>,
    pub classifier: Option<Lin>,
    /// Every trained parameter, in registration order (for the optimizer).
    pub params: Vec<T>,
    /// Trained parameters the step never reaches (a multimodal Gemma 3's vision tower on
    /// text): weights, and f32 masters under mixed precision, but never a gradient, so
    /// `torch.optim` never makes their states.
    pub idle: Vec<T>,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub vocab: u64,
    pub norm: NormKind,
    pub act: Activation,
    pub dtype: DType,
    pub rotary_dim: Option<u64>,
    pub attn_dropout: bool,
    pub resid_dropout: bool,
    pub embed_dropout: bool,
    pub attn_softcap: bool,
    pub final_softcap: bool,
    pub falcon_new: bool,
    /// ViT: `patches + 1` positions, channels, image pixels.
    pub image: Option<(u64, u64, u64)>,
    /// The config's window (`None` without one), for the masks built whatever the layers
    /// use.
    pub config_window: Option<u64>,
    /// A multimodal checkpoint (Gemma 3's vision tower): its model builds masks through
    /// `create_masks_for_generate`, one per layer type present.
    pub multimodal: bool,
}

/// How a step runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub batch: u64,
    pub seq: u64,
    pub attention: AttentionKind,
    pub checkpoint: Checkpoint,
    pub training: bool,
    /// Logits for the last position only (inference).
    pub last_logits: bool,
    /// Fill a KV cache (inference prefill).
    pub cache: bool,
}

struct Builder<'a, 'b> {
    e: &'a mut Eager<'b>,
    dtype: DType,
    params: Vec<T>,
    /// OLMo: norms without parameters.
    olmo: bool,
}

impl Builder<'_, '_> {
    fn p(&mut self, elems: u64) -> T {
        self.p_in(elems, self.dtype)
    }

    /// A trained parameter in `dtype` (GLM-4.5's f32 router in a 16-bit model).
    fn p_in(&mut self, elems: u64, dtype: DType) -> T {
        let t = self.e.tape.persistent(elems, dtype, Class::Weight, true);
        self.params.push(t);
        t
    }

    fn lin(&mut self, rows: u64, cols: u64, bias: bool) -> Lin {
        let n = self.e.tape.mul(rows, cols);
        let w = self.p(n);
        let b = bias.then(|| self.p(rows));
        Lin { w, b, out: rows }
    }

    fn norm(&mut self, width: u64, bias: bool) -> NormP {
        if self.olmo {
            // OLMo's norms have no parameters: a handle the norm never reads.
            let w = self.e.tape.persistent(0, self.dtype, Class::Weight, false);
            return NormP { w, b: None };
        }
        let w = self.p(width);
        let b = bias.then(|| self.p(width));
        NormP { w, b }
    }

    fn mlp(&mut self, c: &TransformerConfig, width: u64, bias: bool) -> MlpP {
        let h = c.hidden;
        match c.mlp {
            Mlp::Gated
                if matches!(
                    c.architecture,
                    Architecture::Phi3 | Architecture::Glm | Architecture::Glm4
                ) =>
            {
                MlpP {
                    gate: None,
                    up: self.lin(2 * width, h, bias),
                    down: self.lin(h, width, bias),
                    fused_gate_up: true,
                }
            }
            Mlp::Gated => MlpP {
                gate: Some(self.lin(width, h, bias)),
                up: self.lin(width, h, bias),
                down: self.lin(h, width, bias),
                fused_gate_up: false,
            },
            Mlp::Plain => MlpP {
                gate: None,
                up: self.lin(width, h, bias),
                down: self.lin(h, width, bias),
                fused_gate_up: false,
            },
        }
    }
}

impl Net {
    /// The parameters of `config` in `dtype` on the tape.
    pub(crate) fn new(e: &mut Eager<'_>, config: &TransformerConfig, dtype: DType) -> Net {
        use Architecture as A;
        let c = config;
        let arch = c.architecture;
        let mut b = Builder {
            e,
            dtype,
            params: Vec::new(),
            olmo: arch == A::Olmo,
        };
        let h = c.hidden;
        let q_width = c.heads * c.head_dim;
        let kv_width = c.kv_heads * c.head_dim;
        let layer_norm = c.norm == crate::estimate::Norm::Layer;
        let family = match arch {
            A::Bert => Family::Bert,
            A::Vit => Family::Vit,
            _ => Family::Decoder,
        };
        let qkv = match arch {
            A::Phi3 | A::Gpt2 => Qkv::Concat,
            A::GptNeox => Qkv::Neox,
            A::Falcon => Qkv::Falcon,
            A::DeepseekV2 | A::DeepseekV3 => Qkv::Mla,
            _ => Qkv::Separate,
        };
        let order = match arch {
            A::Gemma2 | A::Gemma3 | A::Glm4 => Order::Sandwich,
            A::Olmo2 | A::Exaone4 => Order::Post,
            A::Bert => Order::PostLn,
            A::GptNeox | A::Falcon if c.parallel_residual => Order::Parallel,
            A::Phi | A::Cohere | A::Cohere2 => Order::Parallel,
            A::StableLm if c.parallel_residual => Order::Parallel,
            _ => Order::Pre,
        };
        // Embeddings.
        let mut positions = None;
        let mut token_types = None;
        let mut embed_norm = None;
        let mut patch_bias = None;
        let mut cls = None;
        let mut image = None;
        let embed = match c.vision {
            Some(v) => {
                let patch = v.channels * v.patch_size[0] * v.patch_size[1];
                let w = {
                    let n = b.e.tape.mul(h, patch);
                    b.p(n)
                };
                patch_bias = Some(b.p(h));
                cls = Some(b.p(h));
                let n = c.fixed_sequence().unwrap_or(1);
                positions = Some({
                    let n = b.e.tape.mul(n, h);
                    b.p(n)
                });
                image = Some((n, v.channels, v.image_size[0] * v.image_size[1]));
                w
            }
            None => {
                let w = {
                    let n = b.e.tape.mul(c.vocab, h);
                    b.p(n)
                };
                if c.learned_positions > 0 {
                    positions = Some({
                        let n = b.e.tape.mul(c.learned_positions, h);
                        b.p(n)
                    });
                }
                if c.token_types > 0 {
                    token_types = Some({
                        let n = b.e.tape.mul(c.token_types, h);
                        b.p(n)
                    });
                }
                if c.embedding_norm {
                    embed_norm = Some(b.norm(h, true));
                }
                w
            }
        };
        // A multimodal Gemma 3's vision tower: weights the text step never reaches.
        let mut idle = Vec::new();
        if c.vision_tower.is_some() {
            let tower: u64 = c
                .embedding_tensors()
                .unwrap_or_default()
                .iter()
                .filter(|t| t.name.starts_with("vision") || t.name.starts_with("multi_modal"))
                .map(|t| t.elements().unwrap_or(0))
                .sum();
            idle.push(b.e.tape.persistent(tower, dtype, Class::Weight, false));
        }
        let mut layers = Vec::new();
        for i in 0..c.layers {
            let (proj, mla) = match (qkv, c.mla) {
                (Qkv::Mla, Some(m)) => {
                    let q_a = m
                        .q_lora_rank
                        .map(|r| (b.lin(r, h, c.qkv_bias), b.norm(r, false)));
                    let qk = m.qk_head_dim();
                    let q = b.lin(c.heads * qk, m.q_lora_rank.unwrap_or(h), false);
                    let kv_a = b.lin(m.kv_lora_rank + m.qk_rope_head_dim, h, c.qkv_bias);
                    let kv_norm = b.norm(m.kv_lora_rank, false);
                    let kv_b = b.lin(
                        c.heads * (m.qk_nope_head_dim + m.v_head_dim),
                        m.kv_lora_rank,
                        false,
                    );
                    (
                        Vec::new(),
                        Some(MlaP {
                            q_a,
                            q,
                            kv_a,
                            kv_norm,
                            kv_b,
                            lora: m.kv_lora_rank,
                            nope: m.qk_nope_head_dim,
                            rope: m.qk_rope_head_dim,
                            v_dim: m.v_head_dim,
                        }),
                    )
                }
                (Qkv::Separate, _) => (
                    vec![
                        b.lin(q_width, h, c.qkv_bias),
                        b.lin(kv_width, h, c.qkv_bias),
                        b.lin(kv_width, h, c.qkv_bias),
                    ],
                    None,
                ),
                _ => (vec![b.lin(q_width + 2 * kv_width, h, c.qkv_bias)], None),
            };
            let o_in = match c.mla {
                Some(m) => c.heads * m.v_head_dim,
                None => q_width,
            };
            let o = b.lin(h, o_in, c.o_bias);
            let sinks = (arch == A::GptOss).then(|| b.p(c.heads));
            let (q_norm, k_norm) = match c.qk_norm {
                QkNorm::None => (None, None),
                QkNorm::PerHead => (
                    Some(b.norm(c.head_dim, false)),
                    Some(b.norm(c.head_dim, false)),
                ),
                // OLMoE sizes them from the model width (`hidden`, `hidden / heads ×
                // kv_heads`), whatever `head_dim` says.
                QkNorm::Full if arch == A::Olmoe => (
                    Some(b.norm(h, false)),
                    Some(b.norm(h / c.heads.max(1) * c.kv_heads, false)),
                ),
                QkNorm::Full => (Some(b.norm(q_width, false)), Some(b.norm(kv_width, false))),
                _ => (None, None),
            };
            let head_norms = if c.qk_norm == QkNorm::EachHead {
                let mut groups = |heads: u64| -> Vec<HeadNorm> {
                    let n = heads.min(HEAD_NORM_GROUPS);
                    (0..n)
                        .map(|g| {
                            // `heads` split as evenly as `n` groups allow.
                            let k = heads / n + u64::from(g < heads % n);
                            (b.norm(k * c.head_dim, false), k)
                        })
                        .collect()
                };
                (groups(c.heads), groups(c.kv_heads))
            } else {
                (Vec::new(), Vec::new())
            };
            let (mlp, moe) = match &c.moe {
                Some(m) if c.is_sparse_layer(i) => {
                    let gpt_oss = arch == A::GptOss;
                    // GLM-4.5's and DeepSeek's router weights are f32 parameters in any
                    // model dtype (DeepSeek's `_keep_in_fp32_modules_strict`).
                    let router = |b: &mut Builder<'_, '_>| {
                        if matches!(
                            arch,
                            A::Glm4Moe | A::DeepseekV2 | A::DeepseekV3 | A::Ernie45Moe
                        ) {
                            b.p_in(m.experts * h, DType::F32)
                        } else {
                            b.p(m.experts * h)
                        }
                    };
                    // The parameters in the module's order (what a per-tensor optimizer
                    // steps through, one tensor's temporaries after another's): Qwen3-MoE,
                    // GLM-4.5 and DeepSeek register their experts before the router.
                    let experts_first = matches!(
                        arch,
                        A::Qwen3Moe | A::Glm4Moe | A::DeepseekV2 | A::DeepseekV3
                    );
                    let early = (!experts_first).then(|| router(&mut b));
                    let statics = (arch == A::Ernie45Moe).then(|| {
                        b.e.tape
                            .persistent(m.experts, DType::F32, Class::Weight, false)
                    });
                    let router_bias = gpt_oss.then(|| b.p(m.experts));
                    let gate_up = b.p(m.experts * 2 * m.intermediate * h);
                    let gate_up_bias = gpt_oss.then(|| b.p(m.experts * 2 * m.intermediate));
                    let down = b.p(m.experts * h * m.intermediate);
                    let down_bias = gpt_oss.then(|| b.p(m.experts * h));
                    let router = match early {
                        Some(r) => r,
                        None => router(&mut b),
                    };
                    let biases = match (router_bias, gate_up_bias, down_bias) {
                        (Some(r), Some(g), Some(d)) => Some((r, g, d)),
                        _ => None,
                    };
                    let v2_bias = arch == A::DeepseekV2 && c.mlp_bias;
                    // Qwen2-MoE builds its shared expert (and gate) whatever its width: a
                    // zero-width one still returns a hidden-size output (and its
                    // projections save their input). GLM-4.5 and DeepSeek build theirs
                    // whatever `n_shared_experts` is.
                    let shared = (m.shared_intermediate > 0
                        || v2_bias
                        || m.shared_expert_gate
                        || matches!(arch, A::Glm4Moe | A::DeepseekV2 | A::DeepseekV3))
                    .then(|| b.mlp(c, m.shared_intermediate, c.mlp_bias));
                    let shared_gate = m.shared_expert_gate.then(|| b.p(h));
                    (
                        None,
                        Some(MoeP {
                            router,
                            experts: m.experts,
                            top_k: m.experts_per_token.min(m.experts),
                            gate_up,
                            down,
                            width: m.intermediate,
                            shared,
                            shared_gate,
                            biases,
                            statics,
                        }),
                    )
                }
                _ => (Some(b.mlp(c, c.intermediate, c.mlp_bias)), None),
            };
            let norms = (0..c.norms_per_layer)
                .map(|_| b.norm(h, layer_norm))
                .collect();
            layers.push(LayerP {
                proj,
                mla,
                o,
                q_norm,
                k_norm,
                head_norms,
                norms,
                mlp,
                moe,
                window: c.layer_window(i),
                rope: !c.nope_layers.get(i as usize).copied().unwrap_or(false),
                sinks,
            });
        }
        let final_norm = (!c.embedding_norm).then(|| b.norm(h, layer_norm));
        let head =
            (family == Family::Decoder && !c.tied_embeddings).then(|| b.lin(c.vocab, h, false));
        // Phi's head has a bias; ERNIE 4.5 MoE's with `use_bias` (ERNIE 4.5's never).
        let head_bias =
            (arch == A::Phi || (arch == A::Ernie45Moe && c.mlp_bias)).then(|| b.p(c.vocab));
        let pooler = c.pooler.then(|| b.lin(h, h, true));
        let labels = match (family, c.vision) {
            (Family::Vit, Some(v)) => v.labels,
            (Family::Bert, _) => 2,
            _ => 0,
        };
        let classifier = (labels > 0).then(|| b.lin(labels, h, true));
        let norm = match (c.norm, arch) {
            (crate::estimate::Norm::Layer, _) => NormKind::Layer,
            // gpt-oss's RMSNorm multiplies by the weight in f32 and casts back, as OLMo 2's.
            (_, A::Olmo2 | A::GptOss) => NormKind::Olmo,
            (_, A::Olmo) => NormKind::OlmoNoParams,
            (_, A::Cohere | A::Cohere2) => NormKind::Cohere,
            (_, A::Gemma | A::Gemma2 | A::Gemma3) => NormKind::Gemma,
            _ => NormKind::Llama,
        };
        let act = match c.eager.activation {
            ConfigActivation::Silu => Activation::Silu,
            ConfigActivation::Gelu => Activation::Gelu,
            ConfigActivation::GeluPython => Activation::GeluNew,
            ConfigActivation::Relu => Activation::Relu,
        };
        let rotary_dim = match arch {
            A::Gpt2 | A::Bert | A::Vit => None,
            A::Falcon if c.eager.alibi => None,
            A::GptNeox | A::Phi | A::Glm | A::Glm4 | A::Glm4Moe | A::StableLm => {
                Some((c.head_dim * c.eager.rotary_percent / 100).max(2) / 2 * 2)
            }
            _ => Some(c.mla.map_or(c.head_dim, |m| m.qk_rope_head_dim)),
        };
        Net {
            arch,
            family,
            qkv,
            order,
            embed,
            positions,
            token_types,
            embed_norm,
            patch_bias,
            cls,
            layers,
            final_norm,
            head,
            head_bias,
            pooler,
            classifier,
            params: b.params,
            idle,
            hidden: h,
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: c.head_dim,
            vocab: c.vocab,
            norm,
            act,
            dtype,
            rotary_dim,
            attn_dropout: c.attention_dropout,
            resid_dropout: c.hidden_dropout,
            embed_dropout: c.eager.embedding_dropout,
            attn_softcap: c.eager.attn_softcap,
            final_softcap: c.eager.final_softcap,
            falcon_new: c.eager.falcon_new,
            image,
            config_window: c.sliding_window,
            multimodal: c.vision_tower.is_some(),
        }
    }
}

/// One of StableLM's per-head LayerNorms and how many heads it stands for.
pub(crate) type HeadNorm = (NormP, u64);

/// The most LayerNorm modules a layer's per-head Q (or K) norms are modelled with: past it
/// (configs with thousands of heads), heads are grouped, the same bytes in fewer, larger
/// blocks, so that the estimate's time stays bounded.
const HEAD_NORM_GROUPS: u64 = 64;

/// The tag bit of a selective (attention-core) region.
const SELECTIVE: u32 = 1 << 31;

/// What the forward shares between layers: rotary tables, masks.
#[derive(Clone, Debug)]
pub(crate) struct Shared {
    pub rotary: Option<Rotary>,
    /// Gemma 3's second pair, for its sliding layers (each layer is called with its own
    /// kind's tables, `position_embeddings[layer_type]`, which its products save).
    pub rotary_sliding: Option<Rotary>,
    /// The eager or SDPA mask of full-attention layers and of sliding ones.
    pub full_mask: Option<T>,
    pub sliding_mask: Option<T>,
    /// Tensors held for the forward and not passed to the layers' checkpoints (the
    /// position ids).
    pub extra: Vec<T>,
}

impl Shared {
    fn handles(&self) -> Vec<T> {
        let mut v = Vec::new();
        for r in [self.rotary, self.rotary_sliding].into_iter().flatten() {
            v.push(r.cos);
            v.push(r.sin);
        }
        v.extend(self.full_mask);
        v.extend(self.sliding_mask);
        v
    }
}

impl Shared {
    /// The rotary tables layer `l` is called with.
    fn rotary_for(&self, l: &LayerP) -> Option<Rotary> {
        match self.rotary_sliding {
            Some(r) if l.window.is_some() => Some(r),
            _ => self.rotary,
        }
    }
}

impl Net {
    /// The sequence length of a step (a ViT's patches and class token).
    fn seq(&self, run: &Run) -> u64 {
        self.image.map_or(run.seq, |(n, _, _)| n)
    }

    fn causal(&self) -> bool {
        self.family == Family::Decoder
    }

    fn dropout_if(&self, e: &mut Eager<'_>, run: &Run, on: bool, x: T) -> T {
        if on && run.training {
            let y = e.dropout(x);
            e.free(x);
            y
        } else {
            x
        }
    }

    fn norm_of(&self, e: &mut Eager<'_>, p: NormP, x: T) -> T {
        e.norm(self.norm, x, p.w, p.b, self.hidden)
    }

    /// One layer on `x` (released by the caller).
    pub(crate) fn layer(&self, e: &mut Eager<'_>, run: &Run, i: usize, x: T, shared: &Shared) -> T {
        let (out, probs) = self.layer_probs(e, run, i, x, shared);
        if let Some(p) = probs {
            e.free(p);
        }
        out
    }

    /// A layer's output and the eager probabilities it returns with it.
    fn layer_probs(
        &self,
        e: &mut Eager<'_>,
        run: &Run,
        i: usize,
        x: T,
        shared: &Shared,
    ) -> (T, Option<T>) {
        let l = &self.layers[i];
        let n = &l.norms;
        let resid = self.resid_dropout;
        match self.order {
            Order::Pre | Order::Sandwich | Order::Post => {
                let (pre_a, post_a, pre_m, post_m) = match self.order {
                    Order::Sandwich => (Some(n[0]), Some(n[1]), Some(n[2]), Some(n[3])),
                    Order::Post => (None, Some(n[0]), None, Some(n[1])),
                    _ => (Some(n[0]), None, n.get(1).copied(), None),
                };
                let a_in = match pre_a {
                    Some(p) => self.norm_of(e, p, x),
                    None => e.keep(x),
                };
                let (attn, probs) = self.attention(e, run, i, a_in, shared);
                // GPT-2 names the attention's output apart (`attn_output + residual`): its
                // input, the norm's output, lives until that sum. StableLM's
                // `hidden_states` (the norm's output) and `self_attn_output` both stay bound
                // until the layer returns, and its dropout is on the MLP's output only.
                let named_apart = self.arch == Architecture::Gpt2;
                let stablelm = self.arch == Architecture::StableLm;
                if !named_apart && !stablelm {
                    e.free(a_in);
                }
                let attn = match post_a {
                    Some(p) => {
                        let y = self.norm_of(e, p, attn);
                        e.free(attn);
                        y
                    }
                    None => attn,
                };
                let attn = self.dropout_if(e, run, resid && !stablelm, attn);
                let h1 = self.residual_add(e, x, attn);
                if named_apart {
                    // `attn_output` stays bound until the block returns.
                    e.free(a_in);
                } else if !stablelm {
                    e.free(attn);
                }
                let m_in = match pre_m {
                    Some(p) => self.norm_of(e, p, h1),
                    None => e.keep(h1),
                };
                let m = self.mlp_or_moe(e, run, l, m_in);
                if !named_apart {
                    e.free(m_in);
                }
                let m = match post_m {
                    Some(p) => {
                        let y = self.norm_of(e, p, m);
                        e.free(m);
                        y
                    }
                    None => m,
                };
                let m = self.dropout_if(e, run, resid, m);
                let out = self.residual_add(e, h1, m);
                e.free(h1);
                e.free(m);
                if named_apart {
                    e.free(m_in);
                    e.free(attn);
                } else if stablelm {
                    e.free(attn);
                    e.free(a_in);
                }
                (out, probs)
            }
            Order::Parallel => {
                // GPT-NeoX: `mlp(post_attention_layernorm(x)) + attn + x`; Falcon: one or
                // two norms of x, `mlp_output += attention_output`, `x + mlp_output`.
                let falcon = self.arch == Architecture::Falcon;
                let a_in = self.norm_of(e, n[0], x);
                // Falcon's two norms (`ln_attn`, `ln_mlp`) both run before the attention,
                // and both outputs stay bound until the layer returns.
                let early = match n.get(1) {
                    Some(&p) if falcon => Some(self.norm_of(e, p, x)),
                    _ => None,
                };
                let (attn, probs) = self.attention(e, run, i, a_in, shared);
                let attn = self.dropout_if(e, run, resid && !falcon, attn);
                let m_in = match (early, n.get(1)) {
                    (Some(m_in), _) => e.keep(m_in),
                    (None, Some(&p)) => self.norm_of(e, p, x),
                    (None, None) => e.keep(a_in),
                };
                if !falcon {
                    e.free(a_in);
                }
                let m = self.mlp_or_moe(e, run, l, m_in);
                // Phi's layer keeps the norm's output, the attention's and the MLP's bound
                // until `attn_outputs + feed_forward_hidden_states + residual` is made.
                let phi = self.arch == Architecture::Phi;
                // Cohere's and StableLM's too, until `residual + attention + mlp`.
                let cohere = matches!(
                    self.arch,
                    Architecture::Cohere | Architecture::Cohere2 | Architecture::StableLm
                );
                if !phi && !cohere {
                    e.free(m_in);
                }
                let out = if falcon {
                    // In place: `mlp_output += attention_output`.
                    let m2 = e.add(m, attn);
                    e.free(m);
                    e.free(attn);
                    let m2 = self.dropout_if(e, run, resid, m2);
                    let out = e.add(x, m2);
                    e.free(m2);
                    e.free(a_in);
                    if let Some(m_in) = early {
                        e.free(m_in);
                    }
                    out
                } else if cohere {
                    // `residual + hidden_states_attention + hidden_states_mlp`, every name
                    // bound until the layer returns (StableLM's MLP output through its
                    // dropout first).
                    let m = if self.arch == Architecture::StableLm {
                        self.dropout_if(e, run, resid, m)
                    } else {
                        m
                    };
                    let s1 = e.add(x, attn);
                    let out = e.add(s1, m);
                    for t in [s1, m, attn, m_in] {
                        e.free(t);
                    }
                    out
                } else if phi {
                    let m = self.dropout_if(e, run, resid, m);
                    let s1 = e.add(attn, m);
                    let out = e.add(s1, x);
                    for t in [s1, m, attn, m_in] {
                        e.free(t);
                    }
                    out
                } else {
                    let m = self.dropout_if(e, run, resid, m);
                    let s1 = e.add(m, attn);
                    e.free(m);
                    e.free(attn);
                    let out = e.add(s1, x);
                    e.free(s1);
                    out
                };
                (out, probs)
            }
            Order::PostLn => {
                // BERT: LayerNorm(dropout(dense(attn)) + x), LayerNorm(dropout(out(gelu(..))) + h).
                // Each module's locals go at its return: the dense output and the sum at the
                // LayerNorm's, the context with them (`BertAttention`), the intermediate
                // activation after the output's LayerNorm, the probabilities and the
                // attention output with the layer.
                let (attn, probs) = self.attention(e, run, i, x, shared);
                let attn = self.dropout_if(e, run, resid, attn);
                let s1 = e.add(attn, x);
                let h1 = self.norm_of(e, n[0], s1);
                e.free(s1);
                e.free(attn);
                for t in std::mem::take(&mut e.held) {
                    e.free(t);
                }
                let (m, inner) = match &l.mlp {
                    Some(mp) if mp.gate.is_none() && !mp.fused_gate_up => {
                        let up = e.linear(h1, mp.up.w, mp.up.b, mp.up.out);
                        let a = e.activation(up, self.act);
                        e.free(up);
                        let y = e.linear(a, mp.down.w, mp.down.b, mp.down.out);
                        (y, Some(a))
                    }
                    _ => (self.mlp_or_moe(e, run, l, h1), None),
                };
                let m = self.dropout_if(e, run, resid, m);
                let s2 = e.add(m, h1);
                let out = self.norm_of(e, n[1], s2);
                e.free(s2);
                e.free(m);
                if let Some(a) = inner {
                    e.free(a);
                }
                if let Some(p) = probs {
                    e.free(p);
                }
                e.free(h1);
                (out, None)
            }
        }
    }

    /// `residual + branch` (the caller releases both); Granite's
    /// `residual + branch * residual_multiplier` makes the product first and drops it after
    /// the sum (multiplying by a Python float saves nothing; its backward makes
    /// `grad * multiplier`).
    fn residual_add(&self, e: &mut Eager<'_>, residual: T, branch: T) -> T {
        if !matches!(self.arch, Architecture::Granite | Architecture::GraniteMoe) {
            return e.add(residual, branch);
        }
        let scaled = e.scalar(branch, true);
        let out = e.add(residual, scaled);
        e.free(scaled);
        out
    }

    /// Projections, positions and the attention call of layer `layer`; returns the output
    /// projection's result and the eager probabilities the layer holds until it returns.
    fn attention(
        &self,
        e: &mut Eager<'_>,
        run: &Run,
        layer: usize,
        x: T,
        shared: &Shared,
    ) -> (T, Option<T>) {
        let l = &self.layers[layer];
        if let Some(m) = &l.mla {
            return self.mla(e, run, layer, m, x, shared);
        }
        let b = run.batch;
        let s = self.seq(run);
        let (h, kvh, d) = (self.heads, self.kv_heads, self.head_dim);
        let t = e.tape.mul(b, s);
        let qe = e.tape.prod(&[t, h, d]);
        let ke = e.tape.prod(&[t, kvh, d]);
        // Falcon's forward holds its fused projection until it returns.
        let mut held = None;
        // Phi's rotation's parts, bound until the forward returns.
        let mut held_until_return = Vec::new();
        // (q, k, v, whether q and k are laid out [b, s, h, d]).
        // Qwen 3 and OLMo 2 normalise q before projecting k (`q_norm(q_proj(x))`, then k);
        // Gemma 3 projects all three first.
        let norm_early = matches!(
            self.arch,
            Architecture::Qwen3
                | Architecture::Qwen3Moe
                | Architecture::Olmo2
                | Architecture::Olmoe
        ) && l.q_norm.is_some()
            && l.k_norm.is_some();
        let (q, k, v, bshd) = match self.qkv {
            Qkv::Separate if norm_early => {
                let q = e.linear(x, l.proj[0].w, l.proj[0].b, l.proj[0].out);
                let q = self.qk_norm(e, l.q_norm, q, h * d, d);
                let k = e.linear(x, l.proj[1].w, l.proj[1].b, l.proj[1].out);
                let k = self.qk_norm(e, l.k_norm, k, kvh * d, d);
                let v = e.linear(x, l.proj[2].w, l.proj[2].b, l.proj[2].out);
                (q, k, v, true)
            }
            Qkv::Separate => {
                let q = e.linear(x, l.proj[0].w, l.proj[0].b, l.proj[0].out);
                let k = e.linear(x, l.proj[1].w, l.proj[1].b, l.proj[1].out);
                let v = e.linear(x, l.proj[2].w, l.proj[2].b, l.proj[2].out);
                (q, k, v, true)
            }
            Qkv::Concat | Qkv::Neox => {
                let p = l.proj[0];
                let qkv = e.linear(x, p.w, p.b, p.out);
                let q = e.view_sized(qkv, qe);
                let k = e.view_sized(qkv, ke);
                let v = e.view_sized(qkv, ke);
                // The forward's name for the projection (or a view of it) lives to its end.
                held = Some(qkv);
                (q, k, v, true)
            }
            Qkv::Falcon => {
                let p = l.proj[0];
                let qkv = e.linear(x, p.w, p.b, p.out);
                let (q, k, v) = self.falcon_split(e, qkv, qe, ke);
                held = Some(qkv);
                (q, k, v, true)
            }
            Qkv::Mla => unreachable!("MLA layers take the latent path"),
        };
        // Hunyuan normalises q and k after rotating them.
        let norm_late = self.arch == Architecture::HunyuanV1Dense;
        let (q, k) = if norm_early || norm_late {
            (q, k)
        } else {
            let q = self.qk_norm(e, l.q_norm, q, h * d, d);
            let k = self.qk_norm(e, l.k_norm, k, kvh * d, d);
            let q = self.norm_each_head(e, &l.head_norms.0, q);
            let k = self.norm_each_head(e, &l.head_norms.1, k);
            (q, k)
        };
        let (qr, kr) = match &shared.rotary_for(l) {
            Some(r) if l.rope => {
                let glm = matches!(self.arch, Architecture::Glm | Architecture::Glm4);
                let split = glm
                    || matches!(
                        self.arch,
                        Architecture::Phi3
                            | Architecture::GptNeox
                            | Architecture::Phi
                            | Architecture::Glm4Moe
                    );
                if matches!(self.arch, Architecture::Phi | Architecture::StableLm) {
                    // Phi and StableLM slice, rotate and concatenate in the attention's own
                    // forward:
                    // `query_rot`, `key_rot` and the `*_pass` views of the projections stay
                    // bound until it returns.
                    let (qr, q_rot) = e.rotary_parts(q, r, d, true, true);
                    let (kr, k_rot) = e.rotary_parts(k, r, d, true, true);
                    held_until_return.extend([q_rot, k_rot].into_iter().flatten());
                    held_until_return.extend([q, k]);
                    (qr, kr)
                } else if glm {
                    // GLM's `apply_rotary_pos_emb` first makes its own tables,
                    // `cos[..., :rot // 2].repeat_interleave(2)` and the same of sin, which
                    // the products save; they go at its return where nothing saved them.
                    let n = e.elems(r.cos);
                    let dt = e.dtype(r.cos);
                    let cos = e.tape.input(n, dt);
                    let sin = e.tape.input(n, dt);
                    let local = Rotary {
                        cos,
                        sin,
                        dim: r.dim,
                    };
                    let qr = e.rotary(q, &local, d, true);
                    let kr = e.rotary(k, &local, d, true);
                    for t in [cos, sin, q, k] {
                        e.free(t);
                    }
                    (qr, kr)
                } else if matches!(self.arch, Architecture::Ernie45 | Architecture::Ernie45Moe) {
                    // ERNIE 4.5's `apply_rotary_pos_emb` makes interleaved f32 tables
                    // (`cos[..., :d // 2].repeat_interleave(2)`, saved by the products),
                    // rotates in f32 and casts both results back before it returns.
                    let n = e.elems(r.cos);
                    let cos = e.tape.input(n, DType::F32);
                    let sin = e.tape.input(n, DType::F32);
                    let qe = e.rotary_f32(q, cos, sin);
                    let ke = e.rotary_f32(k, cos, sin);
                    let qc = e.to(qe, e.dtype(q));
                    let kc = e.to(ke, e.dtype(k));
                    for t in [qe, ke, cos, sin, q, k] {
                        e.free(t);
                    }
                    (qc, kc)
                } else if self.arch == Architecture::GptOss {
                    // Its `apply_rotary_pos_emb` rotates both, then the names are rebound.
                    let qr = e.rotary_halves(q, r);
                    let kr = e.rotary_halves(k, r);
                    e.free(q);
                    e.free(k);
                    (qr, kr)
                } else if matches!(self.arch, Architecture::Cohere | Architecture::Cohere2) {
                    // Cohere's `apply_rotary_pos_emb` rotates f32 copies (`q.float()`) and
                    // casts both results back before it returns.
                    let qf = e.to(q, DType::F32);
                    let kf = e.to(k, DType::F32);
                    let qe = e.rotary(qf, r, d, split);
                    let ke = e.rotary(kf, r, d, split);
                    let qc = e.to(qe, e.dtype(q));
                    let kc = e.to(ke, e.dtype(k));
                    for t in [qf, kf, qe, ke, q, k] {
                        e.free(t);
                    }
                    (qc, kc)
                } else {
                    let qr = e.rotary(q, r, d, split);
                    let kr = e.rotary(k, r, d, split);
                    // OLMo 2's tables stay f32, so the rotation runs in f32 and its
                    // `apply_rotary_pos_emb` casts both results back (`q_embed.to(q_type)`)
                    // before it returns; q and k live until then.
                    let (qr, kr) = if matches!(self.arch, Architecture::Olmo2 | Architecture::Olmo)
                    {
                        let qc = e.to(qr, e.dtype(q));
                        let kc = e.to(kr, e.dtype(k));
                        e.free(qr);
                        e.free(kr);
                        (qc, kc)
                    } else {
                        (qr, kr)
                    };
                    e.free(q);
                    e.free(k);
                    (qr, kr)
                }
            }
            _ => (q, k),
        };
        let (qr, kr) = if norm_late {
            let q = self.qk_norm(e, l.q_norm, qr, h * d, d);
            let k = self.qk_norm(e, l.k_norm, kr, kvh * d, d);
            (q, k)
        } else {
            (qr, kr)
        };
        let mask = self.mask_for(run, l, shared);
        let kv_heads = if self.qkv == Qkv::Falcon && self.falcon_new {
            h
        } else {
            kvh
        };
        let (mut call, kernel) = self.call_for(e, run, mask, e.dtype(qr), d, d, kv_heads, bshd);
        // GPT-NeoX's and Phi-3's rotation ends in `torch.cat`, which returns q contiguous
        // as `[b, h, s, d]`: flash and cuDNN write their output in q's layout (PyTorch's
        // `alloc_with_matching_layout`, on the device as in its meta functions), so
        // transformers' `transpose(1, 2).contiguous()` copies it.
        let q_cat = shared.rotary.is_some()
            && matches!(
                self.arch,
                Architecture::Phi3
                    | Architecture::GptNeox
                    | Architecture::Phi
                    | Architecture::Glm
                    | Architecture::Glm4
                    | Architecture::GptOss
                    | Architecture::Glm4Moe
                    | Architecture::StableLm
            );
        if q_cat && matches!(kernel, Kernel::Cudnn | Kernel::Flash) {
            call.bshd = false;
        }
        if kernel == Kernel::Eager {
            call.sinks = l.sinks;
        }
        let out = self.attend(e, run, layer, l, qr, kr, v, call, kernel, true);
        if let Some(h) = held {
            e.free(h);
        }
        for t in held_until_return {
            e.free(t);
        }
        out
    }

    /// The q or k norm (per head; OLMo 2's over all heads, `full` wide) when the layer has
    /// one: the normalised tensor replaces `t`.
    fn qk_norm(&self, e: &mut Eager<'_>, norm: Option<NormP>, t: T, full: u64, head: u64) -> T {
        let Some(n) = norm else {
            return t;
        };
        // OLMo 2's and OLMoE's norms span every head (OLMoE's are Llama's RMSNorm).
        let width = if matches!(self.arch, Architecture::Olmo2 | Architecture::Olmoe) {
            full
        } else {
            head
        };
        let kind = match self.arch {
            Architecture::Gemma3 => NormKind::Gemma,
            Architecture::Olmo2 => NormKind::Olmo,
            _ => NormKind::Llama,
        };
        let y = e.norm(kind, t, n.w, n.b, width);
        e.free(t);
        y
    }

    /// StableLM's `StableLmLayerNormPerHead` on `t` (`[b, h, s, d]`, released): `split` into
    /// one view per head, each head's own LayerNorm (which saves its view, or autocast's f32
    /// copy of it), and `cat` of the outputs (contiguous, in the norms' dtype: f32 under
    /// autocast); the per-head outputs go after the `cat`. No norms: `t` itself.
    fn norm_each_head(&self, e: &mut Eager<'_>, norms: &[HeadNorm], t: T) -> T {
        let heads: u64 = norms.iter().map(|&(_, k)| k).sum();
        if heads == 0 {
            return t;
        }
        let per = e.elems(t) / heads;
        let views: Vec<T> = norms
            .iter()
            .map(|&(_, k)| {
                let n = e.tape.mul(per, k);
                e.view_sized(t, n)
            })
            .collect();
        let outs: Vec<T> = norms
            .iter()
            .zip(&views)
            .map(|(&(p, _), &v)| e.norm(NormKind::Layer, v, p.w, p.b, self.head_dim))
            .collect();
        let out = e.cat(&outs);
        for x in outs.into_iter().chain(views) {
            e.free(x);
        }
        e.free(t);
        out
    }

    /// Falcon's `_split_heads` (then `transpose(1, 2).reshape`, a view): the new
    /// architecture's query is a strided slice flattened (a copy), its K and V indexed out
    /// (a copy of the group's head) then broadcast to every head and flattened (a copy of
    /// the query's size); the old multi-query one indexes K and V out (copies of one head);
    /// otherwise all three are views of the projection.
    fn falcon_split(&self, e: &mut Eager<'_>, qkv: T, qe: u64, ke: u64) -> (T, T, T) {
        if self.falcon_new {
            let qv = e.view_sized(qkv, qe);
            let q = e.copy(qv);
            e.free(qv);
            let mut kv = [q, q];
            for slot in &mut kv {
                let idx = {
                    let view = e.view_sized(qkv, ke);
                    let c = e.copy(view);
                    e.free(view);
                    c
                };
                let wide = e.view_sized(idx, qe);
                e.free(idx);
                *slot = e.copy(wide);
                e.free(wide);
            }
            (q, kv[0], kv[1])
        } else if self.kv_heads == 1 && self.heads > 1 {
            let q = e.view_sized(qkv, qe);
            let mut kv = [q, q];
            for slot in &mut kv {
                let view = e.view_sized(qkv, ke);
                *slot = e.copy(view);
                e.free(view);
            }
            (q, kv[0], kv[1])
        } else {
            let q = e.view_sized(qkv, qe);
            let k = e.view_sized(qkv, ke);
            let v = e.view_sized(qkv, ke);
            (q, k, v)
        }
    }

    fn mask_for(&self, run: &Run, l: &LayerP, shared: &Shared) -> Option<T> {
        match l.window {
            // A window the sequence fits in needs no mask under SDPA.
            Some(w) if run.attention != AttentionKind::Sdpa || self.seq(run) >= w => {
                shared.sliding_mask
            }
            Some(_) => None,
            None => shared.full_mask,
        }
    }

    /// The attention call (with K/V caching, selective checkpointing) and the output
    /// projection.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        e: &mut Eager<'_>,
        run: &Run,
        layer: usize,
        l: &LayerP,
        qr: T,
        kr: T,
        v: T,
        call: AttnCall,
        kernel: Kernel,
        cache_kv: bool,
    ) -> (T, Option<T>) {
        // Falcon calls its attention inline (no attention function to wrap: transformers
        // has no selective path for it), so its step is counted without recomputation, the
        // larger figure.
        let checkpointed = run.checkpoint == Checkpoint::Selective
            && run.training
            && self.arch != Architecture::Falcon;
        if checkpointed {
            let mut inputs = vec![qr, kr, v];
            inputs.extend(call.mask);
            e.tape.begin_region(SELECTIVE | layer as u32, &inputs);
        }
        let mut call = call;
        let (kc, vc) = if cache_kv && run.cache && self.family == Family::Decoder {
            call.kv_bshd = false;
            // DynamicCache: `torch.cat` onto an empty tensor, kept for generation (a sliding
            // layer keeps a view of the whole concatenation).
            let kc = e.copy(kr);
            let vc = e.copy(v);
            let (k2, v2) = (e.keep(kc), e.keep(vc));
            e.kv.push(k2);
            e.kv.push(v2);
            (kc, vc)
        } else {
            (e.keep(kr), e.keep(v))
        };
        e.free(kr);
        e.free(v);
        let (out, mut probs) = e.attention(qr, kc, vc, &call, kernel);
        if checkpointed {
            // The checkpointed function returns the output alone.
            if let Some(p) = probs.take() {
                e.free(p);
            }
            e.tape.end_region(&[out]);
        }
        if self.family == Family::Bert {
            // BERT's self-attention module returns before the output dense: its q, k, v go
            // first, and its attention keeps the context until its output's LayerNorm.
            e.free(qr);
            e.free(kc);
            e.free(vc);
            let y = e.linear(out, l.o.w, l.o.b, l.o.out);
            e.held.push(out);
            return (y, probs);
        }
        // ViT's attention (transformers 5) projects its output in the same module, as the
        // decoders do, and its layer holds the probabilities (`hidden_states, _ = ...`)
        // until it returns.
        let y = e.linear(out, l.o.w, l.o.b, l.o.out);
        e.free(out);
        // The attention module's locals go at its return; the layer holds the
        // probabilities (`hidden_states, _ = self.self_attn(...)`) until it returns.
        e.free(qr);
        e.free(kc);
        e.free(vc);
        (y, probs)
    }

    /// DeepSeek's multi-head latent attention.
    fn mla(
        &self,
        e: &mut Eager<'_>,
        run: &Run,
        layer: usize,
        m: &MlaP,
        x: T,
        shared: &Shared,
    ) -> (T, Option<T>) {
        let l = &self.layers[layer];
        let (b, s, h) = (run.batch, self.seq(run), self.heads);
        let t = e.tape.mul(b, s);
        let qk = m.nope + m.rope;
        let q_states = match &m.q_a {
            Some((a, an)) => {
                let qa = e.linear(x, a.w, a.b, a.out);
                let qn = e.norm(NormKind::Llama, qa, an.w, an.b, a.out);
                e.free(qa);
                let q = e.linear(qn, m.q.w, m.q.b, m.q.out);
                e.free(qn);
                q
            }
            None => e.linear(x, m.q.w, m.q.b, m.q.out),
        };
        let q_rot_in = {
            let n = e.tape.prod(&[t, h, m.rope]);
            e.view_sized(q_states, n)
        };
        let kv_a = e.linear(x, m.kv_a.w, m.kv_a.b, m.kv_a.out);
        let kv_nope_in = {
            let n = e.tape.mul(t, m.lora);
            e.view_sized(kv_a, n)
        };
        let kv_nope = e.norm(
            NormKind::Llama,
            kv_nope_in,
            m.kv_norm.w,
            m.kv_norm.b,
            m.lora,
        );
        e.free(kv_nope_in);
        let k_rot_in = {
            let n = e.tape.mul(t, m.rope);
            e.view_sized(kv_a, n)
        };
        let r = shared.rotary.expect("MLA has rotary positions");
        let (q_rot, k_rot) = if self.arch == Architecture::DeepseekV2 {
            // DeepSeek-V2's `apply_rotary_emb`: `view_as_complex(x.float())` of q and k
            // (both made first, bound until it returns), each times the complex table
            // (a product of f32's bytes, which saves the table), `view_as_real(..)
            // .type_as(x)`: the results in q's and k's own dtype.
            let qf = e.to(q_rot_in, DType::F32);
            let kf = e.to(k_rot_in, DType::F32);
            let mut out = [qf, kf];
            for (slot, (f, x)) in out.iter_mut().zip([(qf, q_rot_in), (kf, k_rot_in)]) {
                let p = e.mul(f, r.cos);
                *slot = e.to(p, e.dtype(x));
                e.free(p);
            }
            e.free(qf);
            e.free(kf);
            (out[0], out[1])
        } else {
            (
                e.rotary(q_rot_in, &r, m.rope, false),
                e.rotary(k_rot_in, &r, m.rope, false),
            )
        };
        e.free(q_rot_in);
        e.free(k_rot_in);
        // The cache holds the latent and the rotary key (`cache.update(kv_nope, k_rot)`).
        let (kv_nope, k_rot) = if run.cache {
            let (a, b) = (e.copy(kv_nope), e.copy(k_rot));
            let (a2, b2) = (e.keep(a), e.keep(b));
            e.kv.push(a2);
            e.kv.push(b2);
            e.free(kv_nope);
            e.free(k_rot);
            (a, b)
        } else {
            (kv_nope, k_rot)
        };
        let q_pass = {
            let n = e.tape.prod(&[t, h, m.nope]);
            e.view_sized(q_states, n)
        };
        let query = e.cat(&[q_pass, q_rot]);
        e.free(q_pass);
        // expand_kv: kv_b projection, K assembled in a new tensor, V a view.
        let kv = e.linear(kv_nope, m.kv_b.w, m.kv_b.b, m.kv_b.out);
        let k_nope = {
            let n = e.tape.prod(&[t, h, m.nope]);
            e.view_sized(kv, n)
        };
        let k_rot_x = {
            let n = e.tape.prod(&[t, h, m.rope]);
            e.view_sized(k_rot, n)
        };
        let key = e.cat(&[k_nope, k_rot_x]);
        e.free(k_nope);
        e.free(k_rot_x);
        let value = {
            let n = e.tape.prod(&[t, h, m.v_dim]);
            e.view_sized(kv, n)
        };
        e.free(kv);
        let mask = self.mask_for(run, l, shared);
        let (call, kernel) = self.call_for(e, run, mask, e.dtype(query), qk, m.v_dim, h, false);
        let out = self.attend(e, run, layer, l, query, key, value, call, kernel, false);
        // The rotated query part stays bound (`q_pe`, `q_rot`) until the module returns.
        e.free(q_rot);
        e.free(q_states);
        e.free(kv_a);
        e.free(kv_nope);
        e.free(k_rot);
        out
    }

    /// The attention call and the kernel it runs on.
    #[allow(clippy::too_many_arguments)]
    fn call_for(
        &self,
        e: &Eager<'_>,
        run: &Run,
        mask: Option<T>,
        q_dtype: DType,
        head_dim: u64,
        v_head_dim: u64,
        kv_heads: u64,
        bshd: bool,
    ) -> (AttnCall, Kernel) {
        // SDPA's fused kernels take grouped heads only through `enable_gqa` (transformers
        // passes it without a mask, and repeats K and V with one); Falcon calls SDPA itself,
        // without either.
        let gqa = kv_heads != self.heads;
        let sdpa_repeats = run.attention == AttentionKind::Sdpa
            && gqa
            && mask.is_some()
            && self.qkv != Qkv::Falcon;
        let probe = AttnCall {
            batch: run.batch,
            heads: self.heads,
            kv_heads,
            seq: self.seq(run),
            head_dim,
            v_head_dim,
            mask,
            dropout: false,
            softcap: false,
            f32_softmax: true,
            repeat_kv: sdpa_repeats,
            bshd,
            kv_bshd: bshd,
            scores_held: false,
            expanded: false,
            grad: run.training,
            sinks: None,
        };
        let kernel = match run.attention {
            AttentionKind::Eager => Kernel::Eager,
            AttentionKind::Flash => Kernel::Flash,
            AttentionKind::Sdpa if gqa && self.qkv == Qkv::Falcon => Kernel::Math,
            AttentionKind::Sdpa => e.sdpa_kernel(&probe, e.amp.unwrap_or(q_dtype)),
        };
        let eager = kernel == Kernel::Eager;
        let call = AttnCall {
            mask: if kernel == Kernel::Flash { None } else { mask },
            scores_held: eager && self.qkv == Qkv::Falcon,
            dropout: run.training && self.attn_dropout,
            softcap: eager && self.attn_softcap,
            f32_softmax: !matches!(
                self.arch,
                Architecture::Gpt2 | Architecture::Bert | Architecture::Falcon
            ),
            repeat_kv: gqa
                && if self.qkv == Qkv::Falcon {
                    // Falcon's `matmul` broadcasts the key/value head: a copy per head.
                    eager || kernel == Kernel::Math
                } else {
                    eager || sdpa_repeats
                },
            ..probe
        };
        (call, kernel)
    }

    /// Runs checkpointed region `tag` again on `fresh` (its inputs): a whole layer, or a
    /// layer's attention core.
    pub(crate) fn recompute(&self, e: &mut Eager<'_>, run: &Run, tag: u32, fresh: &[T]) -> T {
        if tag & SELECTIVE != 0 {
            let layer = (tag & !SELECTIVE) as usize;
            let l = &self.layers[layer];
            let mask = fresh.get(3).copied();
            let (hd, vd, kvh, bshd) = match &l.mla {
                Some(m) => (m.nope + m.rope, m.v_dim, self.heads, false),
                None if self.qkv == Qkv::Falcon && self.falcon_new => {
                    (self.head_dim, self.head_dim, self.heads, false)
                }
                None => (
                    self.head_dim,
                    self.head_dim,
                    self.kv_heads,
                    self.qkv != Qkv::Falcon,
                ),
            };
            let (mut call, kernel) =
                self.call_for(e, run, mask, e.dtype(fresh[0]), hd, vd, kvh, bshd);
            if kernel == Kernel::Eager {
                call.sinks = l.sinks;
            }
            let (out, probs) = e.attention(fresh[0], fresh[1], fresh[2], &call, kernel);
            if let Some(p) = probs {
                e.free(p);
            }
            return out;
        }
        // The layer's inputs: x, then cos and sin, then its own mask (if it has one).
        let mut it = fresh[1..].iter().copied();
        let rotary = self.rotary_dim.and_then(|dim| {
            Some(Rotary {
                cos: it.next()?,
                sin: it.next()?,
                dim,
            })
        });
        let own = it.next();
        let sliding = self.layers[tag as usize].window.is_some();
        let shared = Shared {
            rotary,
            rotary_sliding: None,
            full_mask: if sliding { None } else { own },
            sliding_mask: if sliding { own } else { None },
            extra: Vec::new(),
        };
        self.layer(e, run, tag as usize, fresh[0], &shared)
    }

    /// The KV cache the forward filled (inference with a cache): every layer's K and V,
    /// whole (transformers' prefill keeps a sliding layer's whole concatenation).
    pub(crate) fn kv_cache_bytes(&self, e: &mut Eager<'_>) -> u64 {
        let mut total = 0u64;
        for &t in &e.kv.clone() {
            let b = e.tape.bytes(e.elems(t), e.dtype(t));
            total = total.saturating_add(b);
        }
        total
    }

    fn mlp_or_moe(&self, e: &mut Eager<'_>, run: &Run, l: &LayerP, x: T) -> T {
        if let Some(moe) = &l.moe {
            return self.moe(e, run, moe, x);
        }
        let mlp = l.mlp.as_ref().expect("a dense MLP");
        self.mlp(e, mlp, x)
    }

    fn mlp(&self, e: &mut Eager<'_>, m: &MlpP, x: T) -> T {
        let rows = e.elems(x) / self.hidden.max(1);
        if m.fused_gate_up {
            // Phi-3: gate_up → chunk → up * act(gate).
            let gu = e.linear(x, m.up.w, m.up.b, m.up.out);
            let half = e.elems(gu) / 2;
            let gate = e.view_sized(gu, half);
            let up = e.view_sized(gu, half);
            e.free(gu);
            let a = e.activation(gate, self.act);
            e.free(gate);
            let p = e.mul(up, a);
            e.free(up);
            e.free(a);
            let y = e.linear_rows(p, m.down.w, m.down.b, m.down.out, rows);
            e.free(p);
            return y;
        }
        match m.gate {
            Some(g) => {
                let gate = e.linear(x, g.w, g.b, g.out);
                let a = e.activation(gate, self.act);
                e.free(gate);
                let up = e.linear(x, m.up.w, m.up.b, m.up.out);
                let p = e.mul(a, up);
                e.free(a);
                e.free(up);
                let y = e.linear_rows(p, m.down.w, m.down.b, m.down.out, rows);
                e.free(p);
                y
            }
            None => {
                let up = e.linear(x, m.up.w, m.up.b, m.up.out);
                let a = e.activation(up, self.act);
                e.free(up);
                let y = e.linear_rows(a, m.down.w, m.down.b, m.down.out, rows);
                e.free(a);
                y
            }
        }
    }

    /// A sparse layer: the router, then transformers' `grouped_mm` experts (tokens sorted
    /// by expert, gathered, projected, weighted, put back and summed over their experts).
    fn moe(&self, e: &mut Eager<'_>, run: &Run, m: &MoeP, x: T) -> T {
        // Qwen2-MoE and ERNIE 4.5 run their shared experts before the routed ones; DeepSeek
        // after.
        let early = if matches!(self.arch, Architecture::Qwen2Moe | Architecture::Ernie45Moe) {
            m.shared.as_ref().map(|sh| self.mlp(e, sh, x))
        } else {
            None
        };
        let t = e.elems(x) / self.hidden.max(1);
        let dt = e.dtype(x);
        let tk = e.tape.mul(t, m.top_k);
        // Every router returns its logits too, which the block's forward keeps bound
        // (`_, weights, indices = self.gate(...)`) until it returns.
        let (weights, indices, logits) = match m.biases {
            Some((router_bias, _, _)) => self.route_top_first(e, m, x, Some(router_bias), tk),
            None if self.arch == Architecture::GraniteMoe => {
                self.route_top_first(e, m, x, None, tk)
            }
            None if self.arch == Architecture::Glm4Moe => self.route_grouped(e, m, x, t, tk),
            None if self.arch == Architecture::Ernie45Moe => self.route_corrected(e, m, x, tk),
            None => {
                let (w, i, l) = self.route(e, m, x, t, tk);
                (w, i, Some(l))
            }
        };
        let _ = run;
        // grouped_mm_experts_forward; its locals live until it returns.
        let sorted = e.tape.input(tk, DType::I64);
        let perm = e.tape.input(tk, DType::I64);
        let hs = e.tape.mul(tk, self.hidden);
        let gathered = e
            .tape
            .op(&[x, perm], &[(hs, dt)], &[1], &[Grad::New(dt)], &[])[0];
        let wd = e.dtype(weights);
        let w_g = e
            .tape
            .op(&[weights, perm], &[(tk, wd)], &[1], &[Grad::New(wd)], &[])[0];
        e.free(weights);
        // `histc_input` (the sorted ids as int32 on a GPU), `tokens_per_expert` and
        // `offsets`: locals until it returns.
        let counts = [
            e.tape.input(tk, DType::F32),
            e.tape.input(m.experts, DType::F32),
            e.tape.input(m.experts, DType::F32),
        ];
        let gu_elems = e.tape.mul(tk, 2 * m.width);
        // grouped_mm casts its input to the weight's dtype (f32 under autocast).
        let wdt = e.dtype(m.gate_up);
        // gpt-oss: `gate_up_proj_bias[expert_ids_g]`, a gather saving the sorted ids.
        let gu_bias = m.biases.map(|(_, b, _)| {
            e.tape.op(
                &[b, sorted],
                &[(gu_elems, wdt)],
                &[1],
                &[Grad::New(wdt)],
                &[],
            )[0]
        });
        let g_in = e.to(gathered, wdt);
        let gu = e.tape.op(
            &[m.gate_up, g_in],
            &[(gu_elems, wdt)],
            &[0, 1],
            &[Grad::New(wdt), Grad::New(wdt)],
            &[],
        )[0];
        e.free(g_in);
        let gu = match gu_bias {
            // `out.add_(bias)`.
            Some(bias) => {
                let y = e.tape.add_in_place(gu, bias);
                e.free(gu);
                y
            }
            None => gu,
        };
        let p = if gu_bias.is_some() {
            self.clamped_swiglu(e, gu)
        } else {
            let half = gu_elems / 2;
            let gate = e.view_sized(gu, half);
            let up = e.view_sized(gu, half);
            let a = e.activation(gate, self.act);
            e.free(gate);
            let p = e.mul(a, up);
            e.free(a);
            e.free(up);
            p
        };
        e.free(gu);
        // `selected_biases = down_proj_bias[expert_ids_g]` replaces the gate/up one.
        let down_bias = m.biases.map(|(_, _, b)| {
            e.tape
                .op(&[b, sorted], &[(hs, wdt)], &[1], &[Grad::New(wdt)], &[])[0]
        });
        if let Some(b) = gu_bias {
            e.free(b);
        }
        let p_in = e.to(p, wdt);
        let down = e.tape.op(
            &[m.down, p_in],
            &[(hs, wdt)],
            &[0, 1],
            &[Grad::New(wdt), Grad::New(wdt)],
            &[],
        )[0];
        e.free(p_in);
        e.free(p);
        // `out.add_(bias)`; `selected_biases` stays bound until the function returns.
        let down = match down_bias {
            Some(bias) => {
                let y = e.tape.add_in_place(down, bias);
                e.free(down);
                y
            }
            None => down,
        };
        let weighted = e.mul(down, w_g);
        let inv = e.tape.input(tk, DType::I64);
        let wdt2 = e.dtype(weighted);
        let restored = e.tape.op(
            &[weighted, inv],
            &[(hs, wdt2)],
            &[1],
            &[Grad::New(wdt2)],
            &[],
        )[0];
        e.free(weighted);
        let summed = {
            let n = e.elems(x);
            e.sum_to(restored, n, wdt2)
        };
        let out = e.to(summed, dt);
        e.free(summed);
        for t in [restored, down, w_g, gathered, inv, perm, sorted, indices] {
            e.free(t);
        }
        for t in counts {
            e.free(t);
        }
        if let Some(b) = down_bias {
            e.free(b);
        }
        let out = match &m.shared {
            Some(sh) => {
                let so = match early {
                    Some(so) => so,
                    None => self.mlp(e, sh, x),
                };
                let so = match m.shared_gate {
                    Some(g) => {
                        let gl = e.linear(x, g, None, 1);
                        let sg = e.unary(gl, e.dtype(gl), false, true);
                        e.free(gl);
                        let y = e.mul(sg, so);
                        e.free(sg);
                        e.free(so);
                        y
                    }
                    None => so,
                };
                let y = e.add(out, so);
                e.free(out);
                e.free(so);
                y
            }
            None => out,
        };
        if let Some(l) = logits {
            e.free(l);
        }
        out
    }

    /// gpt-oss's `_apply_gate` on the biased gate/up product `gu` (`[S, 2 × width]`,
    /// interleaved): the strided halves clamped (each `clamp` saves its input, a view of
    /// `gu`), `glu = gate * sigmoid(gate * alpha)`, `(up + 1) * glu`; the clamped halves
    /// and `glu` stay bound until it returns.
    fn clamped_swiglu(&self, e: &mut Eager<'_>, gu: T) -> T {
        let half = e.elems(gu) / 2;
        let dt = e.dtype(gu);
        let gate_view = e.view_sized(gu, half);
        let up_view = e.view_sized(gu, half);
        let gate = e.unary(gate_view, dt, true, false);
        let up = e.unary(up_view, dt, true, false);
        e.free(gate_view);
        e.free(up_view);
        let scaled = e.scalar(gate, true);
        let sig = e.unary(scaled, dt, false, true);
        e.free(scaled);
        let glu = e.mul(gate, sig);
        e.free(sig);
        let up1 = e.scalar(up, false);
        let out = e.mul(up1, glu);
        for t in [up1, glu, gate, up] {
            e.free(t);
        }
        out
    }

    /// The routers that cut the logits to the top k before their softmax: gpt-oss's
    /// (`F.linear` with a bias) and Granite-MoE's (`F.linear(...).float()`: the f32 copy is
    /// the logits, the product goes at once; the weights cast back with `type_as`). The
    /// logits are returned and kept by the caller; `topk` saves its int64 indices; the
    /// softmax over the k values runs in their dtype. Returns (weights, indices, logits).
    fn route_top_first(
        &self,
        e: &mut Eager<'_>,
        m: &MoeP,
        x: T,
        bias: Option<T>,
        tk: u64,
    ) -> (T, T, Option<T>) {
        let granite = self.arch == Architecture::GraniteMoe;
        let mut logits = e.linear(x, m.router, bias, m.experts);
        if granite {
            let f = e.to(logits, DType::F32);
            e.free(logits);
            logits = f;
        }
        let dt = e.dtype(logits);
        let top = e.tape.op(
            &[logits],
            &[(tk, dt), (tk, DType::I64)],
            &[2],
            &[Grad::New(dt)],
            &[],
        );
        let mut weights = e.softmax(top[0], dt);
        e.free(top[0]);
        if granite {
            let w = e.to(weights, e.dtype(x));
            e.free(weights);
            weights = w;
        }
        (weights, top[1], Some(logits))
    }

    /// GLM-4.5's `Glm4MoeTopkRouter`: `F.linear` on f32 copies (the weight is an f32
    /// parameter; autocast still runs it in 16 bits), the sigmoid scores (saved), the
    /// choice scores `scores + e_score_correction_bias` (f32), the group mask built and
    /// expanded to every expert (an f32 copy), its boolean negation, the masked choice,
    /// `topk` of it (only the indices are used), `scores.gather` (saving the indices), the
    /// weights normalised in place and scaled. Returns (weights, indices, logits: the
    /// `MoE` forward keeps them bound).
    fn route_grouped(
        &self,
        e: &mut Eager<'_>,
        m: &MoeP,
        x: T,
        t: u64,
        tk: u64,
    ) -> (T, T, Option<T>) {
        let xf = e.to(x, DType::F32);
        let wf = e.to(m.router, DType::F32);
        let logits = e.linear(xf, wf, None, m.experts);
        e.free(xf);
        e.free(wf);
        let dt = e.dtype(logits);
        let scores = e.unary(logits, dt, false, true);
        let te = e.tape.mul(t, m.experts);
        // Index work outside autograd's reach: the choice scores, the expanded group mask
        // (bound until the router returns), `~mask.bool()`, the masked choice.
        let choice = e.tape.input(te, DType::F32);
        let mask = e.tape.input(te, DType::F32);
        let flags = e.tape.input(te, DType::Bool);
        let negated = e.tape.input(te, DType::Bool);
        e.free(flags);
        let masked = e.tape.input(te, DType::F32);
        e.free(negated);
        e.free(choice);
        let indices = e.tape.input(tk, DType::I64);
        let values = e.tape.input(tk, DType::F32);
        e.free(values);
        e.free(masked);
        let gathered = e
            .tape
            .op(&[scores, indices], &[(tk, dt)], &[1], &[Grad::New(dt)], &[])[0];
        // `topk_weights /= denominator` (in place), then `* routed_scaling_factor`.
        let rows = e.elems(gathered) / m.top_k.max(1);
        let denominator = e.sum_to(gathered, rows, dt);
        let shifted = e.scalar(denominator, false);
        e.free(denominator);
        let divided = e.tape.view_with(gathered, tk, Grad::New(dt));
        e.free(gathered);
        let weights = e.scalar(divided, true);
        for t in [divided, shifted, mask, scores] {
            e.free(t);
        }
        (weights, indices, Some(logits))
    }

    /// ERNIE 4.5 MoE's router, autocast off: `F.linear(x.float(), weight.float())` (the
    /// f32 copy saved), the f32 softmax (saved), the choice on the softmax plus the
    /// correction bias (a temporary), the chosen probabilities gathered, divided by their
    /// sum clamped from below, cast to `x`'s dtype; the logits are returned too.
    fn route_corrected(&self, e: &mut Eager<'_>, m: &MoeP, x: T, tk: u64) -> (T, T, Option<T>) {
        let amp = e.amp.take();
        let dt = e.dtype(x);
        let xf = e.to(x, DType::F32);
        let wf = e.to(m.router, DType::F32);
        let logits = e.linear(xf, wf, None, m.experts);
        e.free(xf);
        e.free(wf);
        let probs = e.softmax(logits, DType::F32);
        let biased = match m.statics {
            Some(b) => e.add(probs, b),
            None => e.keep(probs),
        };
        let top = e.tape.op(
            &[biased],
            &[(tk, DType::F32), (tk, DType::I64)],
            &[2],
            &[Grad::New(DType::F32)],
            &[],
        );
        e.free(top[0]);
        e.free(biased);
        let indices = top[1];
        let gathered = e.tape.op(
            &[probs, indices],
            &[(tk, DType::F32)],
            &[1],
            &[Grad::New(DType::F32)],
            &[],
        )[0];
        e.free(probs);
        let rows = tk / m.top_k.max(1);
        let sum = e.sum_to(gathered, rows, DType::F32);
        let clamped = e.unary(sum, DType::F32, true, false);
        e.free(sum);
        // The quotient saves both operands, as a product does.
        let divided = e.mul(gathered, clamped);
        e.free(gathered);
        e.free(clamped);
        e.amp = amp;
        let weights = e.to(divided, dt);
        e.free(divided);
        (weights, indices, Some(logits))
    }

    /// The router: logits, scores (softmax in f32; DeepSeek-V3's sigmoid), the top-k
    /// weights (Mixtral keeps them in f32), their indices, and the logits (returned too).
    fn route(&self, e: &mut Eager<'_>, m: &MoeP, x: T, t: u64, tk: u64) -> (T, T, T) {
        let dt = e.dtype(x);
        let v3 = self.arch == Architecture::DeepseekV3;
        let logits = if self.arch.is_mla() {
            // `F.linear(hidden.type(float32), weight.type(float32))` (DeepSeek-V2's too): the
            // f32 copy of the hidden states is what the product saves.
            let xf = e.to(x, DType::F32);
            let wf = e.to(m.router, DType::F32);
            let l = e.linear(xf, wf, None, m.experts);
            e.free(xf);
            e.free(wf);
            l
        } else {
            e.linear(x, m.router, None, m.experts)
        };
        let scores = if v3 {
            e.unary(logits, DType::F32, false, true)
        } else {
            e.softmax(logits, DType::F32)
        };
        let _ = t;
        let top = e.tape.op(
            &[scores],
            &[(tk, DType::F32), (tk, DType::I64)],
            &[2],
            &[Grad::New(DType::F32)],
            &[],
        );
        e.free(scores);
        let f32_weights = matches!(
            self.arch,
            Architecture::Mixtral | Architecture::DeepseekV2 | Architecture::DeepseekV3
        );
        let weights = if f32_weights {
            top[0]
        } else {
            let w = e.to(top[0], dt);
            e.free(top[0]);
            w
        };
        (weights, top[1], logits)
    }

    /// The rotary tables and masks of one forward (`[1, s, d]` cos and sin in the model's
    /// activation dtype, OLMo 2's in f32; masks as the attention implementation wants them).
    fn shared(&self, e: &mut Eager<'_>, run: &Run, act_dtype: DType) -> Shared {
        let s = self.seq(run);
        // Gemma 3 computes the tables once per kind of layer (each its own frequencies).
        let kinds = if self.arch == Architecture::Gemma3
            && self.layers.iter().any(|l| l.window.is_some())
            && self.layers.iter().any(|l| l.window.is_none())
        {
            2
        } else {
            1
        };
        let mut extra = Vec::new();
        let mut rotary: Option<Rotary> = None;
        let mut rotary_sliding: Option<Rotary> = None;
        for _ in 0..kinds {
            let r = self.rotary_tables(e, s, act_dtype).map(|(r, pos)| {
                // The model's `position_ids` (`arange + past_seen_tokens`) stay bound until
                // its forward returns (made once).
                if extra.is_empty() {
                    extra.push(pos);
                } else {
                    e.free(pos);
                }
                r
            });
            if rotary.is_none() {
                rotary = r;
            } else {
                rotary_sliding = r;
            }
        }
        // Eager's additive masks are `[b, 1, s, s]` in the activation dtype; SDPA's boolean
        // one is `[1, 1, s, s]`, expanded over the batch.
        let (sq, mask_dtype) = if run.attention == AttentionKind::Eager {
            (e.tape.prod(&[run.batch, s, s]), act_dtype)
        } else {
            (e.tape.mul(s, s), DType::Bool)
        };
        let (full, sliding) = self.masks(run);
        let full_mask = full.then(|| e.tape.input(sq, mask_dtype));
        let sliding_mask = sliding.then(|| e.tape.input(sq, mask_dtype));
        Shared {
            rotary,
            rotary_sliding,
            full_mask,
            sliding_mask,
            extra,
        }
    }

    /// One pair of rotary tables: positions, the f32 frequencies, `cat`, `cos` and `sin`
    /// (scaled in place), cast to the activation dtype; and the positions (the caller's).
    fn rotary_tables(&self, e: &mut Eager<'_>, s: u64, act_dtype: DType) -> Option<(Rotary, T)> {
        let d = self.rotary_dim?;
        let half = e.tape.mul(s, d / 2);
        let full = e.tape.mul(s, d);
        let pos = e.tape.input(s, DType::I64);
        let freqs = e.tape.input(half, DType::F32);
        if self.arch == Architecture::GptOss {
            // gpt-oss's tables are the half-width frequencies' `cos` and `sin` (no `cat`),
            // each scaled by the attention factor, cast to the activation dtype.
            let c32 = e.tape.input(half, DType::F32);
            let s32 = e.tape.input(half, DType::F32);
            let cos = e.to(c32, act_dtype);
            let sin = e.to(s32, act_dtype);
            for t in [c32, s32, freqs] {
                e.free(t);
            }
            return Some((Rotary { cos, sin, dim: d }, pos));
        }
        let emb = e.tape.input(full, DType::F32);
        e.free(freqs);
        let c32 = e.tape.input(full, DType::F32);
        let s32 = e.tape.input(full, DType::F32);
        // OLMo 2's and ERNIE 4.5's rotary modules return them in f32 (no `.to(x.dtype)`).
        let table_dtype = if matches!(
            self.arch,
            Architecture::Olmo2
                | Architecture::Olmo
                | Architecture::Ernie45
                | Architecture::Ernie45Moe
        ) {
            DType::F32
        } else {
            act_dtype
        };
        let cos = e.to(c32, table_dtype);
        let sin = e.to(s32, table_dtype);
        e.free(c32);
        e.free(s32);
        e.free(emb);
        Some((Rotary { cos, sin, dim: d }, pos))
    }

    /// Which masks a forward builds (full-attention layers', sliding ones'): eager builds
    /// both kinds its layers use; SDPA one only where a window cuts into the sequence
    /// (transformers skips plain causal masks and lets the kernel apply `is_causal`; Falcon
    /// does not); encoders without padding and flash attention none.
    fn masks(&self, run: &Run) -> (bool, bool) {
        let s = self.seq(run);
        let has_global = self.layers.iter().any(|l| l.window.is_none());
        let has_window = self.layers.iter().any(|l| l.window.is_some());
        let window_cuts = self.layers.iter().any(|l| l.window.is_some_and(|w| s >= w));
        // Gemma 2, Gemma 3 and Qwen2-MoE build both masks whatever their layers are; Qwen 2
        // and Qwen 3 always build the full one.
        // A multimodal Gemma 3 builds one mask per layer type present.
        let both = matches!(
            self.arch,
            Architecture::Gemma2
                | Architecture::Gemma3
                | Architecture::Qwen2Moe
                | Architecture::GptOss
                | Architecture::Cohere2
        ) && !self.multimodal;
        // SmolLM3 and EXAONE 4 too (`create_causal_mask` whatever its layers; EXAONE 4's
        // sliding mask only where a layer slides).
        let full_always = matches!(
            self.arch,
            Architecture::Qwen2
                | Architecture::Qwen3
                | Architecture::SmolLm3
                | Architecture::Exaone4
        );
        // Qwen2-MoE's sliding mask reads the config's `sliding_window`, which its config
        // class sets to 0 without `use_sliding_window`: SDPA cannot skip a mask whose window
        // is at most the sequence, so it is materialised at every length unless a window
        // longer than the sequence is set (`masking_utils._ignore_causal_mask_sdpa`).
        let qwen2_moe_sliding =
            self.arch == Architecture::Qwen2Moe && self.config_window.is_none_or(|w| s >= w);
        match (run.attention, self.causal()) {
            (_, false) | (AttentionKind::Flash, _) => (false, false),
            (AttentionKind::Eager, true) => (has_global || both || full_always, has_window || both),
            // Falcon always materialises its causal mask (`allow_is_causal_skip=False`, so
            // that ALiBi can be added to it) and passes it to SDPA.
            (AttentionKind::Sdpa, true) if self.arch == Architecture::Falcon => (true, false),
            (AttentionKind::Sdpa, true) => (false, window_cuts || qwen2_moe_sliding),
        }
    }

    /// The embeddings: returns (the first layer's input, what the model's forward holds to
    /// its end).
    fn embeddings(&self, e: &mut Eager<'_>, run: &Run, ids: T) -> (T, Vec<T>) {
        let b = run.batch;
        let s = self.seq(run);
        let t = e.tape.mul(b, s);
        let h = self.hidden;
        let th = e.tape.mul(t, h);
        let dt = self.dtype;
        let embedding = |e: &mut Eager<'_>, w: T, idx: T, rows: u64| {
            let n = e.tape.mul(rows, h);
            e.tape
                .op(&[w, idx], &[(n, dt)], &[1], &[Grad::New(dt)], &[])[0]
        };
        match self.family {
            Family::Vit => {
                // Conv2d patches (pixels need no gradient), a class token, positions.
                let pc = e.patch_conv(ids, self.embed, self.patch_bias, h);
                let n = self.seq(run);
                let cls = e.view_sized(self.cls.expect("cls token"), b * h);
                let cat = e.cat(&[cls, pc]);
                e.free(cls);
                e.free(pc);
                let pos = self.positions.expect("positions");
                let x = e.add(cat, pos);
                e.free(cat);
                let _ = n;
                let x = self.dropout_if(e, run, self.embed_dropout, x);
                let held = e.keep(x);
                (x, vec![held])
            }
            Family::Bert => {
                // The token types gathered from the buffer (a copy), the position ids a view
                // of it; every embedding lives until the module returns.
                let types = e.tape.input(t, DType::I64);
                let w = embedding(e, self.embed, ids, t);
                let tt = embedding(e, self.token_types.expect("token types"), types, t);
                let s1 = e.add(w, tt);
                let pe = embedding(e, self.positions.expect("positions"), ids, s);
                let s2 = e.add(s1, pe);
                e.free(s1);
                let n = self.embed_norm.expect("embedding norm");
                let x = self.norm_of(e, n, s2);
                let x = self.dropout_if(e, run, self.embed_dropout, x);
                for t in [s2, w, types, tt, pe] {
                    e.free(t);
                }
                // `embedding_output` stays bound while the encoder runs.
                let held = e.keep(x);
                (x, vec![held])
            }
            Family::Decoder => {
                let mut held = Vec::new();
                let emb = embedding(e, self.embed, ids, t);
                // Gemma's `inputs_embeds * normalizer`, Granite's
                // `inputs_embeds * embedding_multiplier`: the scaled copy is what the model
                // holds.
                let emb = if matches!(
                    self.arch,
                    Architecture::Gemma
                        | Architecture::Gemma2
                        | Architecture::Gemma3
                        | Architecture::Granite
                        | Architecture::GraniteMoe
                ) {
                    let scaled = e.scalar(emb, true);
                    e.free(emb);
                    scaled
                } else {
                    emb
                };
                let x = match self.positions {
                    Some(p) => {
                        // GPT-2: `inputs_embeds + wpe(position_ids)`.
                        let pid = e.tape.input(s, DType::I64);
                        let pe = embedding(e, p, pid, s);
                        let x = e.add(emb, pe);
                        // The model's `position_ids` and `position_embeds` live to its end.
                        held.push(pid);
                        held.push(pe);
                        x
                    }
                    None => e.keep(emb),
                };
                let drop = self.embed_dropout;
                let x = self.dropout_if(e, run, drop, x);
                let _ = th;
                if self.arch == Architecture::Phi {
                    // `inputs_embeds = self.embed_dropout(inputs_embeds)`: the dropout's
                    // output is what the model holds; the embedding goes at the rebinding.
                    held.push(e.keep(x));
                    e.free(emb);
                } else {
                    held.push(emb);
                }
                (x, held)
            }
        }
    }

    /// The batch the training loop holds through the step: token ids (which are also the
    /// labels), or f32 pixels.
    pub(crate) fn input(&self, e: &mut Eager<'_>, run: &Run) -> T {
        let b = run.batch;
        match self.image {
            Some((_, channels, pixels)) => {
                let n = e.tape.prod(&[b, channels, pixels]);
                e.tape.input(n, DType::F32)
            }
            None => {
                let t = e.tape.mul(b, run.seq);
                e.tape.input(t, DType::I64)
            }
        }
    }

    /// The forward of the whole model on `input` (kept by the caller): returns the loss
    /// (training) or the logits.
    pub(crate) fn forward(&self, e: &mut Eager<'_>, run: &Run, input: T) -> T {
        let b = run.batch;
        let s = self.seq(run);
        let t = e.tape.mul(b, s);
        e.tape.set_phase(StepPhase::Forward { layer: None });
        let act_dtype = if e.amp.is_some() {
            DType::F32
        } else {
            self.dtype
        };
        // ViT casts the pixels to its weights' dtype.
        let ids = if self.image.is_some() {
            e.to(input, self.dtype)
        } else {
            e.keep(input)
        };
        let (mut x, held) = self.embeddings(e, run, ids);
        let shared = self.shared(e, run, act_dtype);
        let mut prev_probs = None;
        for i in 0..self.layers.len() {
            e.tape.set_phase(StepPhase::Forward {
                layer: Some(i as u32),
            });
            let full = run.checkpoint == Checkpoint::Full && run.training;
            if full {
                // The checkpoint saves what the layer is called with: its own mask
                // (`causal_mask_mapping[layer_type]`), not the other kind's, which goes
                // once no layer's checkpoint holds it.
                let mut inputs = vec![x];
                if let Some(r) = shared.rotary_for(&self.layers[i]) {
                    inputs.extend([r.cos, r.sin]);
                }
                inputs.extend(self.mask_for(run, &self.layers[i], &shared));
                e.tape.begin_region(i as u32, &inputs);
            }
            let (y, probs) = self.layer_probs(e, run, i, x, &shared);
            if full {
                e.tape.end_region(&[y]);
            }
            e.free(x);
            x = y;
            // Falcon's model binds each block's whole output tuple until the next block
            // returns: the eager probabilities of one layer outlive the next one.
            if let Some(p) = std::mem::replace(&mut prev_probs, probs) {
                e.free(p);
            }
            if self.arch != Architecture::Falcon
                && let Some(p) = prev_probs.take()
            {
                e.free(p);
            }
        }
        if let Some(p) = prev_probs.take() {
            e.free(p);
        }
        e.tape.set_phase(StepPhase::Forward { layer: None });
        let fin = match self.final_norm {
            Some(n) => {
                let y = self.norm_of(e, n, x);
                e.free(x);
                y
            }
            None => x,
        };
        for h in held {
            e.free(h);
        }
        for h in shared
            .handles()
            .into_iter()
            .chain(shared.extra.iter().copied())
        {
            e.free(h);
        }
        e.tape.set_phase(StepPhase::Loss);
        match self.family {
            Family::Decoder => self.lm_head(e, run, fin, ids, t),
            _ => self.classify(e, run, fin, ids),
        }
    }

    fn lm_head(&self, e: &mut Eager<'_>, run: &Run, fin: T, ids: T, t: u64) -> T {
        let head = self.head.map_or(self.embed, |l| l.w);
        let rows = if run.last_logits { run.batch } else { t };
        let hin = if run.last_logits {
            let v = e.view_sized(fin, rows * self.hidden);
            e.free(fin);
            v
        } else {
            fin
        };
        let mut logits = e.linear(hin, head, self.head_bias, self.vocab);
        if matches!(
            self.arch,
            Architecture::Granite
                | Architecture::GraniteMoe
                | Architecture::Cohere
                | Architecture::Cohere2
        ) {
            // Granite's `logits = logits / self.config.logits_scaling`, Cohere's
            // `logits = logits * self.logit_scale`: the head's output is dropped at the
            // rebinding (nothing saves it).
            let scaled = e.scalar(logits, true);
            e.free(logits);
            logits = scaled;
        }
        if self.final_softcap {
            // `logits = logits / cap`, `logits = tanh(logits)`, `logits = logits * cap`: each
            // assignment drops the previous tensor (none is saved but tanh's output).
            let a = e.scalar(logits, true);
            e.free(logits);
            let th = e.unary(a, e.dtype(a), false, true);
            e.free(a);
            let c = e.scalar(th, true);
            e.free(th);
            logits = c;
        }
        if !run.training {
            e.free(hin);
            e.free(ids);
            return logits;
        }
        let loss = e.cross_entropy(logits, rows, ids);
        // The causal LM's forward holds the final hidden states and the logits until it
        // returns (the output object holds the logits; the training loop drops it).
        e.free(hin);
        e.free(logits);
        e.free(ids);
        loss
    }

    /// BERT's pooler and classifier, ViT's classifier on the class token, and the
    /// cross-entropy over the labels.
    fn classify(&self, e: &mut Eager<'_>, run: &Run, fin: T, ids: T) -> T {
        let b = run.batch;
        let first = e.view_sized(fin, b * self.hidden);
        let pooled = match self.pooler {
            Some(p) => {
                let d = e.linear(first, p.w, p.b, p.out);
                let th = e.unary(d, e.dtype(d), false, true);
                e.free(d);
                e.free(first);
                self.dropout_if(e, run, self.resid_dropout, th)
            }
            None => first,
        };
        let c = self.classifier.expect("a classifier");
        let logits = e.linear(pooled, c.w, c.b, c.out);
        e.free(pooled);
        let out = if run.training {
            let labels = e.tape.input(b, DType::I64);
            let ls = e.softmax(logits, e.amp.map_or(e.dtype(logits), |_| DType::F32));
            let loss = e.tape.op(
                &[ls, labels],
                &[(1, DType::F32)],
                &[0, 1],
                &[Grad::New(DType::F32)],
                &[],
            )[0];
            e.free(ls);
            e.free(labels);
            e.free(logits);
            loss
        } else {
            logits
        };
        e.free(fin);
        e.free(ids);
        out
    }
}
