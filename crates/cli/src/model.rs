//! The model and workload options of `memplan estimate` and `memplan fit --config`: a
//! Hugging Face `config.json` or the sizes as flags, and the batch, sequence length, dtype
//! and training setup. Also the budget (`--budget 24GiB` or a device's free memory).

use std::path::PathBuf;

use anyhow::{Context, bail};
use memplan_ir::DType;
use memplan_tracker::estimate::{
    Architecture, AttentionImpl, Estimate, Optimizer, Training, TransformerConfig, Workload,
};
use memplan_tracker::{HumanBytes, group_digits, parse_size};

/// Where the model comes from: a config file or flags.
#[derive(Debug, Default, clap::Args)]
pub struct ModelArgs {
    /// Hugging Face `config.json` (model_type llama, mistral, qwen2, gpt2, bert or vit).
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
    /// Weight dtype when it differs (e.g. i4 for 4-bit weights).
    #[arg(long, value_parser = parse_dtype)]
    weight_dtype: Option<DType>,
    /// A training step with this optimizer: sgd, momentum, adam, adamw.
    #[arg(long, value_parser = parse_optimizer, value_name = "OPTIMIZER")]
    training: Option<Optimizer>,
    /// Activation checkpointing (training).
    #[arg(long)]
    checkpointing: bool,
    /// No f32 master weights (pure 16-bit training; by default 16-bit training keeps them).
    #[arg(long)]
    no_master_weights: bool,
    /// Fused (flash) attention: no score matrices in memory.
    #[arg(long)]
    flash: bool,
}

fn parse_arch(s: &str) -> Result<Architecture, String> {
    s.parse()
        .map_err(|e: memplan_tracker::estimate::ConfigError| e.to_string())
}

fn parse_dtype(s: &str) -> Result<DType, String> {
    s.parse()
        .map_err(|e: memplan_ir::UnknownDType| e.to_string())
}

fn parse_optimizer(s: &str) -> Result<Optimizer, String> {
    s.parse()
        .map_err(|e: memplan_tracker::estimate::UnknownOptimizer| e.to_string())
}

/// Parses `--budget`.
pub fn parse_budget(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

impl ModelArgs {
    /// Whether any model option was given.
    pub fn given(&self) -> bool {
        self.config.is_some() || self.arch.is_some() || self.layers.is_some()
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
            ];
            if let Some((flag, _)) = flags.iter().find(|(_, v)| v.is_some()) {
                bail!("{flag} cannot be combined with --config (the config gives the sizes)");
            }
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            return TransformerConfig::from_hf_json(&text)
                .with_context(|| format!("reading {}", path.display()));
        }
        let arch = self.arch.unwrap_or(Architecture::Llama);
        let need = |flag: &str, v: Option<u64>| {
            v.with_context(|| format!("{flag} is required without --config"))
        };
        let mut c = TransformerConfig {
            layers: need("--layers", self.layers)?,
            hidden: need("--hidden", self.hidden)?,
            heads: need("--heads", self.heads)?,
            kv_heads: self.kv_heads.unwrap_or(0),
            head_dim: self.head_dim.unwrap_or(0),
            intermediate: need("--intermediate", self.intermediate)?,
            ..TransformerConfig::new(arch)
        };
        if arch == Architecture::Vit {
            c.vision = Some(memplan_tracker::estimate::Vision {
                image_size: 224,
                patch_size: 16,
                channels: 3,
                labels: 1000,
            });
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
        c.finish().context("the model flags")
    }
}

impl WorkloadArgs {
    /// The optimizer `--training` names, if given (by its name: sgd, momentum, adam, adamw).
    pub fn training_name(&self) -> Option<&'static str> {
        self.training.map(Optimizer::name)
    }

    /// Whether 16-bit training keeps f32 master weights (no `--no-master-weights`).
    pub fn master_weights(&self) -> bool {
        !self.no_master_weights
    }

    /// Whether any workload option was given.
    pub fn given(&self) -> bool {
        self.batch.is_some()
            || self.seq.is_some()
            || self.dtype.is_some()
            || self.weight_dtype.is_some()
            || self.training.is_some()
            || self.checkpointing
            || self.no_master_weights
            || self.flash
    }

    /// The workload for `config`.
    pub fn workload(&self, config: &TransformerConfig) -> anyhow::Result<Workload> {
        let dtype = self.dtype.or(config.dtype).unwrap_or(DType::F32);
        let sixteen_bit_float = dtype.is_float() && dtype.bits().is_some_and(|b| b <= 16);
        let training = match self.training {
            Some(optimizer) => Some(Training {
                optimizer,
                master_weights: sixteen_bit_float && !self.no_master_weights,
                checkpointing: self.checkpointing,
            }),
            None => {
                if self.checkpointing || self.no_master_weights {
                    bail!("--checkpointing and --no-master-weights need --training OPTIMIZER");
                }
                None
            }
        };
        Ok(Workload {
            batch: self.batch.unwrap_or(1),
            seq: self.seq.unwrap_or(1024),
            dtype,
            weight_dtype: self.weight_dtype,
            attention: if self.flash {
                AttentionImpl::Flash
            } else {
                AttentionImpl::Eager
            },
            training,
        })
    }
}

/// The breakdown table of `memplan estimate` (and of `memplan fit --config`).
pub fn estimate_table(config: &TransformerConfig, w: &Workload, e: &Estimate) -> String {
    let mut s = format!("model:        {}\n", config.describe());
    let mode = match w.training {
        None => "inference".to_owned(),
        Some(t) => format!(
            "training with {}{}{}",
            t.optimizer,
            if t.master_weights {
                ", f32 master weights"
            } else {
                ""
            },
            if t.checkpointing {
                ", checkpointing"
            } else {
                ""
            }
        ),
    };
    s.push_str(&format!(
        "workload:     {mode}, batch {}, seq {}, {}{}, {} attention\n",
        w.batch,
        e.seq,
        w.dtype,
        w.weight_dtype
            .map(|d| format!(" (weights {d})"))
            .unwrap_or_default(),
        match w.attention {
            AttentionImpl::Eager => "eager",
            AttentionImpl::Flash => "fused",
        }
    ));
    s.push_str(&format!("parameters:   {}\n", group_digits(e.parameters)));
    let rows = [
        ("weights", e.weights_bytes),
        ("kv cache", e.kv_cache_bytes),
        ("activations", e.activation_bytes),
        ("gradients", e.gradients_bytes),
        ("optimizer", e.optimizer_bytes),
        ("total", e.total_bytes),
    ];
    for (name, bytes) in rows {
        s.push_str(&format!(
            "{:<13} {:>12}  {:>26} bytes\n",
            format!("{name}:"),
            HumanBytes(bytes).to_string(),
            group_digits(bytes)
        ));
    }
    s
}

/// The estimate JSON: the workload, then the figures.
pub fn estimate_json(config: &TransformerConfig, w: &Workload, e: &Estimate) -> serde_json::Value {
    serde_json::json!({
        "model_type": config.architecture.name(),
        "batch": w.batch,
        "seq": e.seq,
        "dtype": w.dtype.name(),
        "weight_dtype": w.weight_dtype.unwrap_or(w.dtype).name(),
        "training": w.training.map(|t| t.optimizer.name()),
        "master_weights": w.training.is_some_and(|t| t.master_weights),
        "checkpointing": w.training.is_some_and(|t| t.checkpointing),
        "attention": match w.attention { AttentionImpl::Eager => "eager", AttentionImpl::Flash => "flash" },
        "parameters": e.parameters,
        "weights_bytes": e.weights_bytes,
        "kv_cache_bytes": e.kv_cache_bytes,
        "activation_bytes": e.activation_bytes,
        "gradients_bytes": e.gradients_bytes,
        "optimizer_bytes": e.optimizer_bytes,
        "total_bytes": e.total_bytes,
    })
}

/// The budget: `--budget`, or the free memory of CUDA device `--device`.
pub fn budget(budget: Option<u64>, device: Option<usize>) -> anyhow::Result<u64> {
    match (budget, device) {
        (Some(_), Some(_)) => bail!("give --budget or --device, not both"),
        (Some(b), None) => Ok(b),
        (None, Some(ordinal)) => device_free(ordinal),
        (None, None) => bail!("no budget: pass --budget SIZE (e.g. 24GiB) or --device N"),
    }
}

#[cfg(feature = "cuda")]
fn device_free(ordinal: usize) -> anyhow::Result<u64> {
    use memplan_cuda_arena::device::Device;
    let device = Device::open(ordinal).with_context(|| format!("opening CUDA device {ordinal}"))?;
    let info = device
        .mem_info()
        .with_context(|| format!("asking CUDA device {ordinal} for its free memory"))?;
    eprintln!(
        "device {ordinal}: {} free of {}",
        HumanBytes(info.free),
        HumanBytes(info.total)
    );
    Ok(info.free)
}

#[cfg(not(feature = "cuda"))]
fn device_free(ordinal: usize) -> anyhow::Result<u64> {
    bail!(
        "--device {ordinal}: this memplan was built without CUDA (rebuild with `--features cuda`), pass --budget instead"
    )
}
