//! The model and workload flags of `memplan estimate` and `memplan fit --config`: a Hugging
//! Face `config.json` or the sizes as flags, and the batch, sequence length, dtype and
//! training setup, turned into the facade's [`WorkloadSettings`].

use std::path::PathBuf;

use anyhow::{Context, bail};
use memplan::estimate::{
    Weights, WorkloadSettings, parse_arch, parse_attention, parse_checkpointing, parse_dtype,
    parse_kernel, parse_kv_dtype, parse_logits, parse_optimizer, parse_precision, parse_runtime,
    parse_weights,
};
use memplan_ir::DType;
use memplan_tracker::estimate::{
    Architecture, AttentionImpl, Checkpointing, Logits, Moe, Optimizer, OptimizerKernel, Precision,
    Runtime, TransformerConfig,
};

use crate::ui;

#[derive(Debug, Default, clap::Args)]
pub struct ModelArgs {
    /// Hugging Face `config.json` (model_type llama, mistral, mixtral, qwen2, qwen2_moe,
    /// qwen3, qwen3_moe, gemma, gemma2, gemma3, phi3, deepseek_v2, deepseek_v3, falcon,
    /// gpt_neox, starcoder2, olmo2, gpt2, bert, vit, granite, smollm3, phi, cohere, glm,
    /// glm4 or olmo).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Architecture of a model given by flags.
    #[arg(long, value_parser = parse_arch, value_name = "ARCH")]
    arch: Option<Architecture>,
    /// Layers (with flags instead of --config).
    #[arg(long)]
    layers: Option<u64>,
    /// Model width.
    #[arg(long)]
    hidden: Option<u64>,
    /// Attention heads.
    #[arg(long)]
    heads: Option<u64>,
    /// Key/value heads (grouped-query attention; default: --heads).
    #[arg(long)]
    kv_heads: Option<u64>,
    /// Width of a head (default: hidden / heads).
    #[arg(long)]
    head_dim: Option<u64>,
    /// MLP width.
    #[arg(long)]
    intermediate: Option<u64>,
    /// Vocabulary size.
    #[arg(long)]
    vocab: Option<u64>,
    /// Positions: the learned position table (gpt2, bert), the context limit otherwise.
    #[arg(long)]
    positions: Option<u64>,
    /// Tie the output head to the token embedding.
    #[arg(long, conflicts_with = "untied")]
    tied: bool,
    /// Untie the output head from the token embedding.
    #[arg(long)]
    untied: bool,
    /// Routed experts of each MoE layer (with flags; every layer sparse).
    #[arg(long)]
    experts: Option<u64>,
    /// Experts each token is routed to.
    #[arg(long)]
    experts_per_token: Option<u64>,
    /// Shared experts each token also goes through (each of --moe-intermediate).
    #[arg(long)]
    shared_experts: Option<u64>,
    /// MLP width of one expert (default: --intermediate).
    #[arg(long)]
    moe_intermediate: Option<u64>,
}

/// What the model is asked to do.
#[derive(Debug, Default, clap::Args)]
pub struct WorkloadArgs {
    /// Sequences per step (default 1).
    #[arg(long)]
    pub batch: Option<u64>,
    /// Tokens per sequence, the context of the KV cache (default 1024; vision models use
    /// their patch count).
    #[arg(long)]
    pub seq: Option<u64>,
    /// Activation and KV cache dtype (default: the config's torch_dtype, else f32).
    #[arg(long, value_parser = parse_dtype)]
    dtype: Option<DType>,
    /// Weights: a dtype (bf16, f16, f32, ...) or a quantized format, int8, int4, nf4 or fp8,
    /// counted with its per-group scales (and int4's zero points).
    #[arg(long, value_parser = parse_weights, value_name = "DTYPE|FORMAT")]
    weight_dtype: Option<Weights>,
    /// Input features per quantization group (default: 128 for int4, 64 for nf4, one
    /// group per output row for int8 and fp8; 0 for one group per row).
    #[arg(long, value_name = "N")]
    group_size: Option<u64>,
    /// Quantize the token embedding and LM head too (by default they keep --dtype).
    #[arg(long)]
    quantize_embeddings: bool,
    /// KV cache dtype (default: --dtype); fp8 for an 8-bit cache.
    #[arg(long, value_parser = parse_kv_dtype)]
    kv_dtype: Option<DType>,
    /// Logits at inference: last (each sequence's last position, as generation computes
    /// them; the default) or all (every position, for scoring).
    #[arg(long, value_parser = parse_logits, value_name = "last|all")]
    logits: Option<Logits>,
    /// A training step with this optimizer: sgd, momentum, adam, adamw.
    #[arg(long, value_parser = parse_optimizer, value_name = "OPTIMIZER")]
    training: Option<Optimizer>,
    /// Activation recomputation (training): selective (the attention core) or full (keep
    /// each layer's input only; `--checkpointing` alone means full).
    #[arg(long, value_parser = parse_checkpointing, num_args = 0..=1,
          default_missing_value = "full", value_name = "selective|full")]
    checkpointing: Option<Checkpointing>,
    /// Tensor-parallel devices: heads, MLP columns and vocabulary split over N.
    #[arg(long, value_name = "N")]
    tp: Option<u64>,
    /// Pipeline stages: layers split over N devices (the busiest stage is the answer).
    #[arg(long, value_name = "N")]
    pp: Option<u64>,
    /// Expert-parallel devices: MoE experts spread whole over N (N divides tp × dp).
    #[arg(long, value_name = "N")]
    ep: Option<u64>,
    /// Data-parallel replicas (training: ZeRO shards over them).
    #[arg(long, value_name = "N")]
    dp: Option<u64>,
    /// ZeRO stage with --dp (0: none, 1: optimizer states, 2: and gradients, 3: and
    /// parameters).
    #[arg(long, value_name = "0-3")]
    zero: Option<u8>,
    /// With --tp in training: norm and dropout activations replicated on every device
    /// instead of split along the sequence.
    #[arg(long)]
    no_sequence_parallel: bool,
    /// No f32 master weights: `--precision pure` (16-bit weights, gradients and optimizer
    /// states, as `plan --training --no-master-weights` counts them).
    #[arg(long)]
    no_master_weights: bool,
    /// Fused (flash) attention: `--attention flash`.
    #[arg(long)]
    flash: bool,
    /// The runtime modelled: hf (transformers on PyTorch, eager; the default on one device),
    /// fused (Megatron-style fused kernels; the default with --tp/--pp/--ep/--zero or a
    /// quantized or separate weight/KV format) or vllm (serving; what `fit --serving` uses).
    #[arg(long, value_parser = parse_runtime, value_name = "hf|fused|vllm")]
    runtime: Option<Runtime>,
    /// The attention implementation, from the command's `--attention` (estimate's
    /// [`AttentionArg`], fit's planning options).
    #[arg(skip)]
    pub attention: Option<AttentionImpl>,
    /// Training precision with --dtype the 16-bit type: fp32; amp (f32 weights, gradients and
    /// states, activations autocast to --dtype); mixed (16-bit weights and gradients, f32
    /// master weights and states; the default for a 16-bit --dtype); pure (all 16-bit,
    /// optimizer states included).
    #[arg(long, value_parser = parse_precision, value_name = "fp32|amp|mixed|pure")]
    precision: Option<Precision>,
    /// How the optimizer's update runs, from estimate's [`OptimizerKernelArg`] or fit's
    /// step options (one `--optimizer-kernel` flag on each command).
    #[arg(skip)]
    pub optimizer_kernel: Option<OptimizerKernel>,
    /// Plan the training step with memplan's planner (estimate's `--plan-step`).
    #[arg(skip)]
    pub plan_step: bool,
}

/// `--optimizer-kernel` for `estimate` (`fit` has it among its training-step options).
#[derive(Debug, Default, clap::Args)]
pub struct OptimizerKernelArg {
    /// How the optimizer's update runs: foreach (the default, as PyTorch's AdamW on a GPU:
    /// sqrt(v) for every tensor at once), fused (in place, `fused=True`; what `plan
    /// --training` assumes for memplan's own engine) or per-tensor (one tensor at a time).
    #[arg(long, value_parser = parse_kernel, value_name = "foreach|fused|per-tensor")]
    pub optimizer_kernel: Option<OptimizerKernel>,
}

/// `--attention` for commands without planning options (`estimate`).
#[derive(Debug, Default, clap::Args)]
pub struct AttentionArg {
    /// Attention implementation: eager (scores materialised), sdpa (PyTorch's
    /// scaled_dot_product_attention, the kernel it picks on a GPU for the dtype; the default)
    /// or flash (FlashAttention 2; `--flash` says the same).
    #[arg(long, value_parser = parse_attention, value_name = "eager|sdpa|flash")]
    pub attention: Option<AttentionImpl>,
}

impl ModelArgs {
    /// Whether any model option was given.
    pub fn given(&self) -> bool {
        self.config.is_some()
            || self.arch.is_some()
            || self.layers.is_some()
            || self.hidden.is_some()
            || self.heads.is_some()
    }

    /// The model: read from `--config`, or built from the flags.
    pub fn load(&self) -> anyhow::Result<TransformerConfig> {
        if let Some(path) = &self.config {
            let flags = [
                ("--layers", self.layers),
                ("--hidden", self.hidden),
                ("--heads", self.heads),
                ("--intermediate", self.intermediate),
                ("--vocab", self.vocab),
                ("--experts", self.experts),
                ("--experts-per-token", self.experts_per_token),
                ("--shared-experts", self.shared_experts),
                ("--moe-intermediate", self.moe_intermediate),
            ];
            if let Some((flag, _)) = flags.iter().find(|(_, v)| v.is_some()) {
                bail!("{flag} cannot be combined with --config (the config gives the sizes)");
            }
            return Ok(memplan::estimate::config_from_file(path, &mut ui::Stderr)?);
        }
        if !self.given() {
            bail!(
                "no model: give --config config.json (a Hugging Face config), or --arch with --layers, --hidden, --heads, --intermediate and --vocab"
            );
        }
        let arch = self.arch.unwrap_or(Architecture::Llama);
        if arch.is_mla() {
            bail!(
                "--arch {}: multi-head latent attention has more sizes than the flags give; use --config",
                arch.name()
            );
        }
        let need = |flag: &str, v: Option<u64>| {
            v.with_context(|| format!("{flag} is required without --config"))
        };
        let mut c = TransformerConfig::new(arch);
        c.layers = need("--layers", self.layers)?;
        c.hidden = need("--hidden", self.hidden)?;
        c.heads = need("--heads", self.heads)?;
        c.kv_heads = self.kv_heads.unwrap_or(0);
        c.head_dim = self.head_dim.unwrap_or(0);
        c.intermediate = need("--intermediate", self.intermediate)?;
        if arch == Architecture::Vit {
            c.vision = Some(memplan_tracker::estimate::Vision::new(
                [224; 2], [16; 2], 3, 1000,
            ));
        } else {
            c.vocab = need("--vocab", self.vocab)?;
        }
        match arch {
            Architecture::Gpt2 => c.learned_positions = need("--positions", self.positions)?,
            Architecture::Bert => {
                c.learned_positions = need("--positions", self.positions)?;
                c.token_types = 2;
            }
            _ => c.max_positions = self.positions.unwrap_or(0),
        }
        if self.tied {
            c.tied_embeddings = true;
        }
        if self.untied {
            c.tied_embeddings = false;
        }
        let moe_flags = self.experts.is_some()
            || self.experts_per_token.is_some()
            || self.shared_experts.is_some()
            || self.moe_intermediate.is_some();
        if moe_flags || arch.is_moe() {
            let experts = need("--experts", self.experts)?;
            let width = self.moe_intermediate.unwrap_or(c.intermediate);
            let mut moe = Moe::new(
                experts,
                need("--experts-per-token", self.experts_per_token)?,
                width,
            );
            moe.shared_intermediate = width
                .checked_mul(self.shared_experts.unwrap_or(0))
                .context("--shared-experts × --moe-intermediate overflows")?;
            moe.shared_expert_gate = arch == Architecture::Qwen2Moe;
            c.moe = Some(moe);
        }
        c.finish().context("the model flags")
    }
}

impl WorkloadArgs {
    /// The settings these flags give.
    pub fn settings(&self) -> WorkloadSettings {
        WorkloadSettings {
            batch: self.batch,
            seq: self.seq,
            dtype: self.dtype,
            weight_dtype: self.weight_dtype,
            group_size: self.group_size,
            quantize_embeddings: self.quantize_embeddings,
            kv_dtype: self.kv_dtype,
            logits: self.logits,
            training: self.training,
            checkpointing: self.checkpointing,
            tp: self.tp,
            pp: self.pp,
            ep: self.ep,
            dp: self.dp,
            zero: self.zero,
            no_sequence_parallel: self.no_sequence_parallel,
            no_master_weights: self.no_master_weights,
            flash: self.flash,
            runtime: self.runtime,
            attention: self.attention,
            precision: self.precision,
            optimizer_kernel: self.optimizer_kernel,
            plan_step: self.plan_step,
        }
    }

    /// The optimizer `--training` names, if given (by its name: sgd, momentum, adam, adamw).
    pub fn training_name(&self) -> Option<&'static str> {
        self.training.map(Optimizer::name)
    }

    /// Whether 16-bit training keeps f32 master weights (no `--no-master-weights`).
    pub fn master_weights(&self) -> bool {
        self.settings().master_weights()
    }

    /// Whether any workload option was given.
    pub fn given(&self) -> bool {
        self.settings().given()
    }
}
