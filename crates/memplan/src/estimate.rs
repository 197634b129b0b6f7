//! The workload options of `memplan estimate` and `memplan fit --config` (the batch,
//! sequence length, dtypes, training setup and parallelism) turned into the tracker's
//! [`Workload`], a Hugging Face `config.json` read with its notes, and the estimate as the
//! command prints it: the breakdown table ([`estimate_table`]) and its JSON
//! ([`estimate_json`]). Also the budget (`--budget 24GiB` or a device's free memory).
//!
//! [`WorkloadSettings::set`] takes the options by keyword, as the Python package passes them;
//! [`WORKLOAD_KEYWORDS`] lists them beside the flags they mirror.

use std::path::Path;

use memplan_ir::DType;
use memplan_tracker::estimate::{
    Architecture, AttentionImpl, Breakdown, Checkpointing, Estimate, Logits, Optimizer,
    OptimizerKernel, Parallelism, Precision, QuantKind, Runtime, Training, TransformerConfig,
    Workload,
};
use memplan_tracker::{HumanBytes, group_digits, parse_size};

use crate::options::{Value, as_bool, as_count, as_str, unknown_option};
use crate::{Context, Error, Notes, Result, bail};

/// What the model is asked to do.
#[derive(Clone, Debug, Default)]
pub struct WorkloadSettings {
    /// Sequences per step (default 1).
    pub batch: Option<u64>,
    /// Tokens per sequence, the context of the KV cache (default 1024; vision models use
    /// their patch count).
    pub seq: Option<u64>,
    /// Activation and KV cache dtype (default: the config's torch_dtype, else f32).
    pub dtype: Option<DType>,
    /// Weights: a dtype (bf16, f16, f32, ...) or a quantized format, int8, int4, nf4 or fp8,
    /// counted with its per-group scales (and int4's zero points).
    pub weight_dtype: Option<Weights>,
    /// Input features per quantization group (default: 128 for int4, 64 for nf4, one
    /// group per output row for int8 and fp8; 0 for one group per row).
    pub group_size: Option<u64>,
    /// Quantize the token embedding and LM head too (by default they keep --dtype).
    pub quantize_embeddings: bool,
    /// KV cache dtype (default: --dtype); fp8 for an 8-bit cache.
    pub kv_dtype: Option<DType>,
    /// Logits at inference: last (each sequence's last position, as generation computes
    /// them; the default) or all (every position, for scoring).
    pub logits: Option<Logits>,
    /// A training step with this optimizer: sgd, momentum, adam, adamw.
    pub training: Option<Optimizer>,
    /// Activation recomputation (training): selective (the attention core) or full (keep
    /// each layer's input only; `--checkpointing` alone means full).
    pub checkpointing: Option<Checkpointing>,
    /// Tensor-parallel devices: heads, MLP columns and vocabulary split over N.
    pub tp: Option<u64>,
    /// Pipeline stages: layers split over N devices (the busiest stage is the answer).
    pub pp: Option<u64>,
    /// Expert-parallel devices: MoE experts spread whole over N (N divides tp × dp).
    pub ep: Option<u64>,
    /// Data-parallel replicas (training: ZeRO shards over them).
    pub dp: Option<u64>,
    /// ZeRO stage with --dp (0: none, 1: optimizer states, 2: and gradients, 3: and
    /// parameters).
    pub zero: Option<u8>,
    /// With --tp in training: norm and dropout activations replicated on every device
    /// instead of split along the sequence.
    pub no_sequence_parallel: bool,
    /// No f32 master weights: `--precision pure` (16-bit weights, gradients and optimizer
    /// states, as `plan --training --no-master-weights` counts them).
    pub no_master_weights: bool,
    /// Fused (flash) attention: `--attention flash`.
    pub flash: bool,
    /// The runtime modelled: hf (transformers on PyTorch, eager; the default on one device),
    /// fused (Megatron-style fused kernels; the default with --tp/--pp/--ep/--zero or a
    /// quantized or separate weight/KV format) or vllm (serving; what `fit --serving` uses).
    pub runtime: Option<Runtime>,
    /// The attention implementation: eager (scores materialised), sdpa (PyTorch's
    /// scaled_dot_product_attention, the kernel it picks on a GPU for the dtype; the default)
    /// or flash (FlashAttention 2; `--flash` says the same).
    pub attention: Option<AttentionImpl>,
    /// Training precision with --dtype the 16-bit type: fp32; amp (f32 weights, gradients and
    /// states, activations autocast to --dtype); mixed (16-bit weights and gradients, f32
    /// master weights and states; the default for a 16-bit --dtype); pure (all 16-bit,
    /// optimizer states included).
    pub precision: Option<Precision>,
    /// How the optimizer's update runs: foreach (PyTorch's default on a GPU: sqrt(v) for every
    /// tensor at once), fused (in place) or per-tensor (one tensor at a time).
    pub optimizer_kernel: Option<OptimizerKernel>,
    /// `estimate` of an `hf` training step: also plan the step with memplan's own planner and
    /// report that arena figure (`arena_step`) beside PyTorch's. Off by default: planning
    /// the step's thousands of buffers takes longer than the estimate.
    pub plan_step: bool,
}

/// Parses `--runtime`: `hf`, `fused` or `vllm`.
pub fn parse_runtime(s: &str) -> Result<Runtime, String> {
    s.parse()
}

/// Parses `--attention`: `eager`, `sdpa` or `flash`.
pub fn parse_attention(s: &str) -> Result<AttentionImpl, String> {
    s.parse()
}

/// Parses `--precision`: `fp32`, `amp`, `mixed` or `pure`.
pub fn parse_precision(s: &str) -> Result<Precision, String> {
    s.parse()
}

/// Parses `--optimizer-kernel`: `foreach`, `fused` or `per-tensor`.
pub fn parse_kernel(s: &str) -> Result<OptimizerKernel, String> {
    s.parse()
}

/// Parses an architecture name (`llama`, `gpt2`, ...).
pub fn parse_arch(s: &str) -> Result<Architecture, String> {
    s.parse()
        .map_err(|e: memplan_tracker::estimate::ConfigError| e.to_string())
}

/// Parses a dtype name (`bf16`, `f32`, ...).
pub fn parse_dtype(s: &str) -> Result<DType, String> {
    s.parse()
        .map_err(|e: memplan_ir::UnknownDType| e.to_string())
}

/// `--weight-dtype`: a plain dtype or a quantized format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// Every tensor in this dtype.
    Plain(DType),
    /// Linear weights in this format.
    Quantized(QuantKind),
}

/// Parses `--weight-dtype`: a dtype or a quantized format (`int8`, `int4`, `nf4`, `fp8`).
pub fn parse_weights(s: &str) -> Result<Weights, String> {
    if let Ok(kind) = s.parse::<QuantKind>() {
        return Ok(Weights::Quantized(kind));
    }
    s.parse()
        .map(Weights::Plain)
        .map_err(|e: memplan_ir::UnknownDType| {
            format!("{e}; or a quantized format: int8, int4, nf4, fp8")
        })
}

/// Parses `--kv-dtype`: a dtype, or `fp8` (`fp8_e4m3`, `fp8_e5m2`).
pub fn parse_kv_dtype(s: &str) -> Result<DType, String> {
    match s.to_ascii_lowercase().as_str() {
        "fp8" | "fp8_e4m3" => Ok(DType::F8E4M3),
        "fp8_e5m2" => Ok(DType::F8E5M2),
        _ => parse_dtype(s),
    }
}

/// Parses `--logits`: `last` or `all`.
pub fn parse_logits(s: &str) -> Result<Logits, String> {
    match s {
        "last" => Ok(Logits::Last),
        "all" => Ok(Logits::All),
        _ => Err(format!("`{s}`: expected last or all")),
    }
}

/// Parses `--checkpointing`: `selective` or `full`.
pub fn parse_checkpointing(s: &str) -> Result<Checkpointing, String> {
    s.parse()
}

/// Parses an optimizer name: `sgd`, `momentum`, `adam`, `adamw`.
pub fn parse_optimizer(s: &str) -> Result<Optimizer, String> {
    s.parse()
        .map_err(|e: memplan_tracker::estimate::UnknownOptimizer| e.to_string())
}

/// Parses `--budget`.
pub fn parse_budget(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// Parses a memory budget that must be positive (`fit`, `preflight`): `0` and negative
/// sizes are refused with what to write instead.
pub fn parse_positive_budget(s: &str) -> Result<u64, String> {
    if s.trim_start().starts_with('-') {
        return Err(format!(
            "the budget must be a positive size such as 24GiB, got `{s}`"
        ));
    }
    match parse_budget(s)? {
        0 => Err("the budget must be positive: 0 bytes fits nothing (e.g. 24GiB)".to_owned()),
        n => Ok(n),
    }
}

/// A model config read from the text of a Hugging Face `config.json` (`label` names it in
/// errors), its notes (what it assumed) to `notes`.
pub fn config_from_json(
    text: &str,
    label: &str,
    notes: &mut dyn Notes,
) -> Result<TransformerConfig> {
    let config =
        TransformerConfig::from_hf_json(text).with_context(|| format!("reading {label}"))?;
    for note in config.notes() {
        notes.note(format!("note: {note}"));
    }
    Ok(config)
}

/// A model config read from a Hugging Face `config.json` file.
pub fn config_from_file(path: &Path, notes: &mut dyn Notes) -> Result<TransformerConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    config_from_json(&text, &path.display().to_string(), notes)
}

/// Every workload option by keyword, beside the flag it mirrors (`--no-X`: the keyword `X`
/// set to false).
pub const WORKLOAD_KEYWORDS: &[(&str, &str)] = &[
    ("batch", "--batch"),
    ("seq", "--seq"),
    ("dtype", "--dtype"),
    ("weight_dtype", "--weight-dtype"),
    ("group_size", "--group-size"),
    ("quantize_embeddings", "--quantize-embeddings"),
    ("kv_dtype", "--kv-dtype"),
    ("logits", "--logits"),
    ("training", "--training"),
    ("checkpointing", "--checkpointing"),
    ("tp", "--tp"),
    ("pp", "--pp"),
    ("ep", "--ep"),
    ("dp", "--dp"),
    ("zero", "--zero"),
    ("sequence_parallel", "--no-sequence-parallel"),
    ("master_weights", "--no-master-weights"),
    ("flash", "--flash"),
    ("runtime", "--runtime"),
    ("attention", "--attention"),
    ("precision", "--precision"),
    ("optimizer_kernel", "--optimizer-kernel"),
    ("plan_step", "--plan-step"),
];

/// A parse result with its message prefixed by the option's keyword.
fn parsed<T>(option: &str, r: Result<T, String>) -> Result<T> {
    r.map_err(|e| Error::input(format!("option `{option}`: {e}")))
}

impl WorkloadSettings {
    /// The optimizer `--training` names, if given (by its name: sgd, momentum, adam, adamw).
    pub fn training_name(&self) -> Option<&'static str> {
        self.training.map(Optimizer::name)
    }

    /// Whether 16-bit training keeps f32 master weights (no `--no-master-weights`).
    pub fn master_weights(&self) -> bool {
        !self.no_master_weights && self.precision != Some(Precision::Pure)
    }

    /// Whether any workload option was given.
    pub fn given(&self) -> bool {
        self.batch.is_some()
            || self.seq.is_some()
            || self.dtype.is_some()
            || self.weight_dtype.is_some()
            || self.training.is_some()
            || self.checkpointing.is_some()
            || self.no_master_weights
            || self.flash
            || self.runtime.is_some()
            || self.attention.is_some()
            || self.precision.is_some()
            || self.optimizer_kernel.is_some()
            || self.plan_step
            || self.kv_dtype.is_some()
            || self.logits.is_some()
            || self.group_size.is_some()
            || self.quantize_embeddings
            || self.parallel_given()
    }

    /// Whether any parallelism option was given.
    pub fn parallel_given(&self) -> bool {
        self.tp.is_some()
            || self.pp.is_some()
            || self.ep.is_some()
            || self.dp.is_some()
            || self.zero.is_some()
            || self.no_sequence_parallel
    }

    /// Whether `--dtype` was given.
    pub fn dtype_given(&self) -> bool {
        self.dtype.is_some()
    }

    /// The workload for `config`.
    /// Sets the option `keyword` (see [`WORKLOAD_KEYWORDS`]); [`Value::None`] sets its default.
    pub fn set(&mut self, keyword: &str, value: &Value) -> Result<()> {
        let v = value;
        let none = *value == Value::None;
        let count = |v: &Value| -> Result<Option<u64>> {
            if none {
                Ok(None)
            } else {
                as_count(keyword, v).map(Some)
            }
        };
        let text = |v: &Value| -> Result<Option<String>> {
            if none {
                Ok(None)
            } else {
                as_str(keyword, v).map(Some)
            }
        };
        match keyword {
            "batch" => self.batch = count(v)?,
            "seq" => self.seq = count(v)?,
            "dtype" => {
                self.dtype = text(v)?
                    .map(|t| parsed(keyword, parse_dtype(&t)))
                    .transpose()?;
            }
            "weight_dtype" => {
                self.weight_dtype = text(v)?
                    .map(|t| parsed(keyword, parse_weights(&t)))
                    .transpose()?;
            }
            "group_size" => self.group_size = count(v)?,
            "quantize_embeddings" => self.quantize_embeddings = !none && as_bool(keyword, v)?,
            "kv_dtype" => {
                self.kv_dtype = text(v)?
                    .map(|t| parsed(keyword, parse_kv_dtype(&t)))
                    .transpose()?;
            }
            "logits" => {
                self.logits = text(v)?
                    .map(|t| parsed(keyword, parse_logits(&t)))
                    .transpose()?;
            }
            "training" => {
                self.training = text(v)?
                    .map(|t| parsed(keyword, parse_optimizer(&t)))
                    .transpose()?;
            }
            "checkpointing" => {
                self.checkpointing = match v {
                    Value::None | Value::Bool(false) => None,
                    Value::Bool(true) => Some(Checkpointing::Full),
                    _ => Some(parsed(keyword, parse_checkpointing(&as_str(keyword, v)?))?),
                };
            }
            "tp" => self.tp = count(v)?,
            "pp" => self.pp = count(v)?,
            "ep" => self.ep = count(v)?,
            "dp" => self.dp = count(v)?,
            "zero" => {
                self.zero = count(v)?
                    .map(|z| {
                        u8::try_from(z).ok().filter(|z| *z <= 3).ok_or_else(|| {
                            Error::input(format!("option `zero`: {z} is not a ZeRO stage 0-3"))
                        })
                    })
                    .transpose()?;
            }
            "sequence_parallel" => self.no_sequence_parallel = !none && !as_bool(keyword, v)?,
            "master_weights" => self.no_master_weights = !none && !as_bool(keyword, v)?,
            "flash" => self.flash = !none && as_bool(keyword, v)?,
            "runtime" => {
                self.runtime = text(v)?
                    .map(|t| parsed(keyword, parse_runtime(&t)))
                    .transpose()?;
            }
            "attention" => {
                self.attention = text(v)?
                    .map(|t| parsed(keyword, parse_attention(&t)))
                    .transpose()?;
            }
            "precision" => {
                self.precision = text(v)?
                    .map(|t| parsed(keyword, parse_precision(&t)))
                    .transpose()?;
            }
            "optimizer_kernel" => {
                self.optimizer_kernel = text(v)?
                    .map(|t| parsed(keyword, parse_kernel(&t)))
                    .transpose()?;
            }
            "plan_step" => self.plan_step = !none && as_bool(keyword, v)?,
            _ => {
                let known: Vec<&str> = WORKLOAD_KEYWORDS.iter().map(|(k, _)| *k).collect();
                return Err(unknown_option("the workload", keyword, &known));
            }
        }
        Ok(())
    }

    /// The workload for `config`; what it assumed goes to `notes`.
    pub fn workload(&self, config: &TransformerConfig, notes: &mut dyn Notes) -> Result<Workload> {
        let dtype = self.dtype.or(config.dtype).unwrap_or(DType::F32);
        if dtype == DType::Bool {
            bail!("--dtype {dtype}: activations are numbers; use f32, f16 or bf16");
        }
        if !dtype.is_float() {
            notes.note(format!(
                "note: --dtype {dtype} is not a float type; activations and KV cache are sized as {dtype}"
            ));
        }
        let sixteen_bit_float = dtype.is_float() && dtype.bits().is_some_and(|b| b <= 16);
        let checkpointing = self.checkpointing.unwrap_or_default();
        let precision = match (self.precision, self.no_master_weights) {
            (Some(p), true) if p != Precision::Pure => {
                bail!(
                    "--no-master-weights is --precision pure; it contradicts --precision {}",
                    p.name()
                )
            }
            (Some(p), _) => p,
            (None, true) => Precision::Pure,
            (None, false) if sixteen_bit_float => Precision::Mixed,
            (None, false) => Precision::Fp32,
        };
        if matches!(
            precision,
            Precision::Mixed | Precision::Pure | Precision::Amp
        ) && !sixteen_bit_float
            && self.training.is_some()
        {
            bail!(
                "--precision {} keeps 16-bit numbers: give --dtype bf16 or f16 (the dtype is {dtype})",
                precision.name()
            );
        }
        let training = match self.training {
            Some(optimizer) => Some(
                Training::new(optimizer)
                    .with_precision(precision)
                    .with_kernel(self.optimizer_kernel.unwrap_or_default())
                    .with_checkpointing(checkpointing),
            ),
            None => {
                if self.checkpointing.is_some()
                    || self.no_master_weights
                    || self.precision.is_some()
                    || self.optimizer_kernel.is_some()
                {
                    bail!(
                        "--checkpointing, --precision, --optimizer-kernel and --no-master-weights need --training OPTIMIZER"
                    );
                }
                if self.dp.is_some_and(|d| d > 1) && self.zero.is_some_and(|z| z > 0) {
                    bail!("--zero shards training state: it needs --training OPTIMIZER");
                }
                None
            }
        };
        if let (Some(_), Some(fixed)) = (self.seq, config.fixed_sequence()) {
            notes.note(format!(
                "note: --seq is ignored: a {} model always runs at its {fixed} positions (patches + class token)",
                config.architecture.name()
            ));
        }
        let (weight_dtype, quant) = match self.weight_dtype {
            None => (None, None),
            Some(Weights::Plain(d)) => (Some(d), None),
            Some(Weights::Quantized(kind)) => (
                None,
                Some((kind, self.group_size.unwrap_or(kind.default_group_size()))),
            ),
        };
        if self.group_size.is_some() && quant.is_none() {
            bail!("--group-size goes with a quantized --weight-dtype (int8, int4, nf4, fp8)");
        }
        if self.quantize_embeddings && quant.is_none() {
            bail!(
                "--quantize-embeddings goes with a quantized --weight-dtype (int8, int4, nf4, fp8)"
            );
        }
        if self.logits.is_some() && training.is_some() {
            bail!("--logits is for inference; training computes logits for every position");
        }
        let parallel = Parallelism::default()
            .with_tp(self.tp.unwrap_or(1))
            .with_pp(self.pp.unwrap_or(1))
            .with_ep(self.ep.unwrap_or(1))
            .with_dp(self.dp.unwrap_or(1))
            .with_zero(self.zero.unwrap_or(0))
            .with_sequence_parallel(!self.no_sequence_parallel);
        if parallel.zero > 0 && parallel.dp == 1 {
            notes.note(format!(
                "note: --zero {} shards over data-parallel replicas; with --dp 1 there is nothing to shard",
                parallel.zero
            ));
        }
        if self.flash && self.attention.is_some_and(|a| a != AttentionImpl::Flash) {
            bail!(
                "--flash is --attention flash; it contradicts --attention {}",
                self.attention.map_or("", |a| a.name())
            );
        }
        Ok(Workload::inference(
            self.batch.unwrap_or(1),
            self.seq.unwrap_or_else(|| default_seq(config)),
            dtype,
        )
        .with_weight_dtype(weight_dtype)
        .with_quant(quant)
        .with_quantize_embeddings(self.quantize_embeddings)
        .with_kv_dtype(self.kv_dtype)
        .with_attention(if self.flash {
            AttentionImpl::Flash
        } else {
            self.attention.unwrap_or_default()
        })
        .with_logits(self.logits.unwrap_or_default())
        .with_training(training)
        .with_parallel(parallel)
        .with_runtime(self.runtime))
    }
}

/// The sequence length without `--seq`: 1024 tokens, or fewer where a learned position
/// table (GPT-2, BERT) has fewer rows, so a small model's estimate runs without flags.
pub fn default_seq(config: &TransformerConfig) -> u64 {
    match config.learned_positions {
        0 => 1024,
        n => n.min(1024),
    }
}

/// The workload line's weight format: `bf16`, `int4 (groups of 128)`.
fn weight_format(w: &Workload) -> String {
    let f = w.weight_format();
    match f.quant {
        None => f.dtype.to_string(),
        Some((kind, group)) => format!(
            "{} ({}{})",
            kind.name(),
            if group == 0 {
                "one scale per row".to_owned()
            } else {
                format!("groups of {group}")
            },
            if f.quantize_embeddings {
                ", embeddings too"
            } else {
                ""
            }
        ),
    }
}

/// The parallelism, for people: `tp 4 × pp 2`, or empty on one device.
fn parallel_line(p: &Parallelism) -> String {
    let mut parts = Vec::new();
    for (name, v) in [("tp", p.tp), ("pp", p.pp), ("ep", p.ep), ("dp", p.dp)] {
        if v > 1 {
            parts.push(format!("{name} {v}"));
        }
    }
    if p.zero > 0 {
        parts.push(format!("ZeRO-{}", p.zero));
    }
    parts.join(", ")
}

/// One row of a byte table: name, human size, exact bytes with separators.
pub fn byte_row(name: &str, bytes: u64) -> String {
    format!(
        "{:<13} {:>12}  {:>26} bytes\n",
        format!("{name}:"),
        HumanBytes(bytes).to_string(),
        group_digits(bytes)
    )
}

/// The breakdown table of `memplan estimate` (and of `memplan fit --config`).
pub fn estimate_table(config: &TransformerConfig, w: &Workload, e: &Estimate) -> String {
    let mut s = format!("model:        {}\n", config.describe());
    let mode = match w.training {
        None => "inference".to_owned(),
        Some(t) => format!(
            "training with {} ({} kernel), {} precision{}{}",
            t.optimizer,
            t.kernel.name(),
            t.precision.name(),
            if t.master_weights() {
                ", f32 master weights"
            } else {
                ""
            },
            match t.checkpointing {
                Checkpointing::None => "",
                Checkpointing::Selective => ", selective recomputation",
                Checkpointing::Full => ", full recomputation",
                _ => ", recomputation",
            }
        ),
    };
    s.push_str(&format!(
        "workload:     {mode}, batch {}, seq {}, {}, weights {}{}, {} attention{}\n",
        w.batch,
        e.seq,
        w.dtype,
        weight_format(w),
        w.kv_dtype
            .filter(|_| w.training.is_none())
            .map(|d| format!(", KV cache {d}"))
            .unwrap_or_default(),
        w.attention.name(),
        match (w.training, w.logits, config.architecture.is_decoder()) {
            (None, Logits::Last, true) => ", logits for the last position",
            (None, Logits::All, true) => ", logits for every position",
            _ => "",
        }
    ));
    s.push_str(&format!(
        "runtime:      {} ({})\n",
        e.runtime.name(),
        e.runtime.describe()
    ));
    s.push_str(&format!("parameters:   {}\n", group_digits(e.parameters)));
    if e.active_parameters != e.parameters {
        s.push_str(&format!(
            "active:       {} a token\n",
            group_digits(e.active_parameters)
        ));
    }
    if w.training.is_none() && e.kv_bytes_per_token > 0 {
        s.push_str(&format!(
            "kv per token: {}\n",
            memplan_ir::ExactBytes(e.kv_bytes_per_token)
        ));
    }
    let rows = |b: &Breakdown| {
        [
            ("weights", b.weights_bytes),
            ("kv cache", b.kv_cache_bytes),
            ("activations", b.activation_bytes),
            ("gradients", b.gradients_bytes),
            ("optimizer", b.optimizer_bytes),
            ("total", b.total_bytes),
        ]
    };
    let whole = e.whole();
    for (name, bytes) in rows(&whole) {
        s.push_str(&byte_row(name, bytes));
    }
    s.push_str(&timeline_rows(e));
    if config.tied_embeddings && config.architecture.is_decoder() {
        s.push_str(&format!(
            "note: the LM head shares the {} token embedding and is counted once; a graph export that stores it again (GPT-2's ONNX does) holds that much more\n",
            HumanBytes(
                memplan_tracker::estimate::elements_bytes(
                    config.vocab.saturating_mul(config.hidden),
                    w.weight_format().dtype,
                    "",
                )
                .unwrap_or(0)
            )
        ));
    }
    if !w.parallel.is_single() {
        s.push_str(&format!(
            "per device ({} devices: {}; the busiest):\n",
            e.devices,
            parallel_line(&w.parallel)
        ));
        for (name, bytes) in rows(&e.per_device) {
            s.push_str(&format!("  {}", byte_row(name, bytes)));
        }
    }
    s
}

/// The rows after the breakdown: where the peak falls and each phase's peak (`hf`), the
/// caching allocator's margin and what the device must hold, the arena runtime's
/// activation peak (inference), the training step as memplan's planner places it (`hf`).
fn timeline_rows(e: &Estimate) -> String {
    let mut s = String::new();
    if let Some(phase) = e.peak_phase {
        let at = match phase.layer() {
            Some(l) => format!("{} of layer {l}", phase.name()),
            None => phase.name().to_owned(),
        };
        s.push_str(&format!(
            "peak:         {at} (the total is the largest live bytes of the step, not a sum)\n"
        ));
    }
    if let Some(p) = e.phases {
        for (name, bytes) in [
            ("forward", p.forward),
            ("loss", p.loss),
            ("backward", p.backward),
            ("optimizer", p.optimizer),
        ] {
            if bytes > 0 {
                s.push_str(&format!("  {}", byte_row(name, bytes)));
            }
        }
    }
    if e.allocator_margin_bytes > 0 {
        s.push_str(&byte_row("+ allocator", e.allocator_margin_bytes));
        s.push_str(&byte_row("= reserved", e.reserved_bytes()));
        s.push_str(
            "note: PyTorch's caching allocator reserves more than it allocates (blocks rounded to 512 bytes, segments of 2 MiB, 20 MiB or rounded to 2 MiB, free gaps a request does not fit): `fit --config` compares the budget with the reserved bytes (the CUDA context and library workspaces come on top)\n",
        );
    }
    if let Some(a) = e
        .arena_activation_bytes
        .filter(|_| e.runtime != Runtime::Fused)
    {
        s.push_str(&format!(
            "arena runtime: activations {} ({} bytes) where memplan's own plan reuses buffers and runs element-wise ops in place\n",
            HumanBytes(a),
            group_digits(a)
        ));
    }
    if let Some(a) = e.arena_step {
        s.push_str(&format!(
            "arena plan:   {} ({} bytes) for the same step planned by memplan: its allocations and their lifetimes at fixed offsets, {} resident (weights, states) + a {} arena ({} buffers; PyTorch's figure is the total above)\n",
            HumanBytes(a.total_bytes()),
            group_digits(a.total_bytes()),
            HumanBytes(a.resident_bytes),
            HumanBytes(a.arena_bytes),
            group_digits(a.buffers)
        ));
    }
    s
}

/// A breakdown as JSON, with the same keys everywhere.
pub fn breakdown_json(b: &Breakdown) -> serde_json::Value {
    serde_json::json!({
        "weights_bytes": b.weights_bytes,
        "kv_cache_bytes": b.kv_cache_bytes,
        "activation_bytes": b.activation_bytes,
        "gradients_bytes": b.gradients_bytes,
        "optimizer_bytes": b.optimizer_bytes,
        "total_bytes": b.total_bytes,
    })
}

fn parallel_json(p: &Parallelism) -> serde_json::Value {
    serde_json::json!({
        "tp": p.tp, "pp": p.pp, "ep": p.ep, "dp": p.dp, "zero": p.zero,
        "sequence_parallel": p.sequence_parallel,
    })
}

/// The estimate JSON: the workload, then the figures for one device without parallelism,
/// then `per_device` (the busiest device) with the same keys.
pub fn estimate_json(config: &TransformerConfig, w: &Workload, e: &Estimate) -> serde_json::Value {
    let format = w.weight_format();
    serde_json::json!({
        "model_type": config.architecture.name(),
        "batch": w.batch,
        "seq": e.seq,
        "dtype": w.dtype.name(),
        "weight_dtype": format.dtype.name(),
        "weight_format": format.quant.map(|(k, _)| k.name()),
        "group_size": format.quant.map(|(_, g)| g),
        "kv_dtype": w.kv_dtype().name(),
        "logits": w.logits.name(),
        "training": w.training.map(|t| t.optimizer.name()),
        "master_weights": w.training.is_some_and(|t| t.master_weights()),
        "precision": w.training.map(|t| t.precision.name()),
        "optimizer_kernel": w.training.map(|t| t.kernel.name()),
        "checkpointing": w.training.map_or("none", |t| t.checkpointing.name()),
        "attention": w.attention.name(),
        "runtime": e.runtime.name(),
        "peak_phase": e.peak_phase.map(|p| p.name()),
        "peak_layer": e.peak_phase.and_then(|p| p.layer()),
        "phases": e.phases.map(|p| serde_json::json!({
            "forward": p.forward, "loss": p.loss, "backward": p.backward, "optimizer": p.optimizer,
        })),
        "allocator_margin_bytes": e.allocator_margin_bytes,
        "reserved_bytes": e.reserved_bytes(),
        "arena_activation_bytes": e.arena_activation_bytes,
        "arena_step": e.arena_step.map(|a| serde_json::json!({
            "total_bytes": a.total_bytes(),
            "resident_bytes": a.resident_bytes,
            "arena_bytes": a.arena_bytes,
            "lower_bound_bytes": a.lower_bound_bytes,
            "buffers": a.buffers,
        })),
        "parallel": parallel_json(&w.parallel),
        "devices": e.devices,
        "parameters": e.parameters,
        "active_parameters": e.active_parameters,
        "kv_bytes_per_token": e.kv_bytes_per_token,
        "sliding_window": config.sliding_window.filter(|_| config.sliding_layers.contains(&true)),
        "sliding_layers": sliding_layers(config),
        "weights_bytes": e.weights_bytes,
        "kv_cache_bytes": e.kv_cache_bytes,
        "activation_bytes": e.activation_bytes,
        "gradients_bytes": e.gradients_bytes,
        "optimizer_bytes": e.optimizer_bytes,
        "total_bytes": e.total_bytes,
        "weights_bytes_per_device": e.per_device.weights_bytes,
        "per_device": breakdown_json(&e.per_device),
    })
}

/// The layers whose attention (and KV cache) holds at most `sliding_window` tokens.
pub fn sliding_layers(config: &TransformerConfig) -> Vec<u64> {
    (0..config.layers)
        .filter(|&i| config.layer_window(i).is_some())
        .collect()
}

/// The budget: `--budget`, or the free memory of CUDA device `--device`.
pub fn budget(budget: Option<u64>, device: Option<usize>, notes: &mut dyn Notes) -> Result<u64> {
    match (budget, device) {
        (Some(_), Some(_)) => bail!("give --budget or --device, not both"),
        (Some(b), None) => Ok(b),
        (None, Some(ordinal)) => device_free(ordinal, notes),
        (None, None) => bail!("no budget: pass --budget SIZE (e.g. 24GiB) or --device N"),
    }
}

#[cfg(feature = "cuda")]
fn device_free(ordinal: usize, notes: &mut dyn Notes) -> Result<u64> {
    use memplan_cuda_arena::device::Device;
    let device = Device::open(ordinal).with_context(|| format!("opening CUDA device {ordinal}"))?;
    let info = device
        .mem_info()
        .with_context(|| format!("asking CUDA device {ordinal} for its free memory"))?;
    notes.note(format!(
        "device {ordinal}: {} free of {}",
        HumanBytes(info.free),
        HumanBytes(info.total)
    ));
    Ok(info.free)
}

#[cfg(not(feature = "cuda"))]
fn device_free(ordinal: usize, _notes: &mut dyn Notes) -> Result<u64> {
    bail!(
        "--device {ordinal}: this memplan was built without CUDA (rebuild with `--features cuda`), pass --budget instead"
    )
}

/// What `memplan estimate` answers: the model, the workload and the estimate.
#[derive(Clone, Debug)]
pub struct EstimateAnswer {
    /// The model.
    pub config: TransformerConfig,
    /// The workload.
    pub workload: Workload,
    /// The figures.
    pub estimate: Estimate,
}

/// `memplan estimate`: the memory of `config` running the workload `settings` describe; what
/// it assumed (a sequence past the model's context) goes to `notes`.
pub fn estimate(
    config: TransformerConfig,
    settings: &WorkloadSettings,
    notes: &mut dyn Notes,
) -> Result<EstimateAnswer> {
    let workload = settings.workload(&config, notes)?;
    let e = if settings.plan_step {
        if workload.training.is_none() || workload.resolved_runtime() != Runtime::Hf {
            bail!(
                "--plan-step plans an hf training step: give --training (with the hf runtime, the default on one device)"
            );
        }
        memplan_tracker::estimate::estimate_with_arena(&config, &workload)
    } else {
        memplan_tracker::estimate::estimate(&config, &workload)
    }
    .context("estimating")?;
    if config.max_positions > 0 && e.seq > config.max_positions {
        notes.note(format!(
            "note: seq {} is past the model's context limit of {} positions",
            e.seq, config.max_positions
        ));
    }
    Ok(EstimateAnswer {
        config,
        workload,
        estimate: e,
    })
}

impl EstimateAnswer {
    /// The breakdown table of `memplan estimate`.
    pub fn text(&self) -> String {
        estimate_table(&self.config, &self.workload, &self.estimate)
    }

    /// The JSON of `memplan estimate --format json`.
    pub fn json(&self) -> serde_json::Value {
        estimate_json(&self.config, &self.workload, &self.estimate)
    }

    /// [`EstimateAnswer::json`] as the command prints it: indented, with a final newline.
    pub fn json_text(&self) -> Result<String> {
        Ok(format!("{}\n", serde_json::to_string_pretty(&self.json())?))
    }
}
