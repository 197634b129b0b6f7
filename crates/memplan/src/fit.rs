//! `memplan fit`: the largest value of a symbol (batch, sequence length) that fits a budget.
//!
//! With a graph (`memplan fit MODEL --symbol batch --budget 24GiB --dim seq=512`), "fits"
//! means the arena plus the weight region of `memplan plan MODEL --dim batch=N` is within the
//! budget; the answer is checked by planning at N (fits, and passes the plan verifier) and
//! N + 1 (does not). With `--config` (or model flags), it means the `total_bytes` of
//! `memplan estimate` at that value (on the busiest device, with `--tp/--pp/--ep/--dp`) is
//! within the budget. The first line is `SYMBOL = N`, then the plan summary (or the
//! estimate) at N; `--format json` writes `{"symbol", "value", "budget_bytes",
//! "total_bytes", "breakdown", "next"}` (`next`: the value N + 1 and its total, or null).
//!
//! `--serving` answers the serving question instead: how many KV-cache tokens (blocks, and
//! with `--seq` sequences) fit on each device beside the weights, one step's activations
//! and a reserve, as vLLM sizes its cache (see `memplan_tracker::estimate::serving_capacity`).
//! [`ServingSettings::set`] and the workload's keywords take the options by name.

use memplan_ir::{DType, Graph};
use memplan_planner::PlanOptions;
use memplan_tracker::estimate::{
    EstimateError, Runtime, Serving, ServingCapacity, TransformerConfig, Workload, estimate,
    serving_capacity,
};
use memplan_tracker::{FitRequest, GraphFit, HumanBytes, group_digits, largest_fitting_beyond};

use crate::estimate::{WorkloadSettings, byte_row, estimate_json, estimate_table};
use crate::options::{Value, as_count, as_size, unknown_option, wrong_type};
use crate::{Context, Error, Notes, Result, bail};

/// A serving engine's settings (vLLM's, by default): what `memplan fit --serving` is told
/// besides the model, the workload and the budget.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServingSettings {
    /// The fraction of each device's budget the engine may use, in millionths (vLLM's
    /// gpu_memory_utilization; default 0.9).
    pub gpu_util_ppm: Option<u64>,
    /// Tokens one step processes (the chunked-prefill budget; sizes the activation peak).
    pub max_batched_tokens: Option<u64>,
    /// Sequences one step runs at most.
    pub max_seqs: Option<u64>,
    /// Tokens per KV block.
    pub block_size: Option<u64>,
    /// Memory outside the engine's tensors per device (default 1GiB).
    pub reserve: Option<u64>,
}

/// The serving settings by keyword, beside their flags.
pub const SERVING_KEYWORDS: &[(&str, &str)] = &[
    ("gpu_util", "--gpu-util"),
    ("max_batched_tokens", "--max-batched-tokens"),
    ("max_seqs", "--max-seqs"),
    ("block_size", "--block-size"),
    ("reserve", "--reserve"),
];

/// `0.9` as millionths: a fraction above 0 and at most 1.
pub fn parse_fraction(s: &str) -> Result<u64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) => fraction_ppm(f).ok_or_else(|| fraction_error(s)),
        _ => Err(fraction_error(s)),
    }
}

fn fraction_ppm(f: f64) -> Option<u64> {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a fraction in (0, 1] times a million"
    )]
    (f > 0.0 && f <= 1.0).then(|| (f * 1e6).round() as u64)
}

fn fraction_error(s: &str) -> String {
    format!("`{s}`: expected a fraction above 0 and at most 1, such as 0.9")
}

impl ServingSettings {
    /// Whether any setting was given.
    pub fn given(&self) -> bool {
        self.gpu_util_ppm.is_some()
            || self.max_batched_tokens.is_some()
            || self.max_seqs.is_some()
            || self.block_size.is_some()
            || self.reserve.is_some()
    }

    /// Sets the setting `keyword` (see [`SERVING_KEYWORDS`]); [`Value::None`] its default.
    pub fn set(&mut self, keyword: &str, value: &Value) -> Result<()> {
        let none = *value == Value::None;
        let count = |v: &Value| -> Result<Option<u64>> {
            if none {
                Ok(None)
            } else {
                as_count(keyword, v).map(Some)
            }
        };
        match keyword {
            "gpu_util" => {
                self.gpu_util_ppm = match value {
                    Value::None => None,
                    Value::Float(f) => Some(fraction_ppm(*f).ok_or_else(|| {
                        Error::input(format!(
                            "option `gpu_util`: {}",
                            fraction_error(&f.to_string())
                        ))
                    })?),
                    Value::Int(1) => Some(1_000_000),
                    Value::Str(s) => Some(
                        parse_fraction(s)
                            .map_err(|e| Error::input(format!("option `gpu_util`: {e}")))?,
                    ),
                    other => Err(wrong_type(keyword, other, "a fraction such as 0.9"))?,
                };
            }
            "max_batched_tokens" => self.max_batched_tokens = count(value)?,
            "max_seqs" => self.max_seqs = count(value)?,
            "block_size" => self.block_size = count(value)?,
            "reserve" => {
                self.reserve = if none {
                    None
                } else {
                    Some(as_size(keyword, value)?)
                };
            }
            _ => {
                let known: Vec<&str> = SERVING_KEYWORDS.iter().map(|(k, _)| *k).collect();
                return Err(unknown_option("serving", keyword, &known));
            }
        }
        Ok(())
    }
}

/// The JSON of a fit: the answer, its total and breakdown, and the value after it.
pub fn fit_json(
    symbol: &str,
    value: Option<u64>,
    budget: u64,
    total: u64,
    breakdown: serde_json::Value,
    next: Option<(u64, Option<u64>)>,
) -> String {
    let v = serde_json::json!({
        "symbol": symbol,
        "value": value,
        "budget_bytes": budget,
        "total_bytes": total,
        "breakdown": breakdown,
        "next": next.map(|(value, total)| serde_json::json!({
            "value": value,
            "total_bytes": total,
            "fits": false,
        })),
    });
    format!("{v}\n")
}

/// The answer of [`fit_graph`]: the tracker's fit and what the command says about it.
#[derive(Debug)]
pub struct GraphFitAnswer {
    /// The symbol fitted.
    pub symbol: String,
    /// The device memory asked to fit.
    pub budget: u64,
    /// The smallest value considered.
    pub min: u64,
    /// The tracker's answer: the value, its plan (verified), the next value's bytes.
    pub fit: GraphFit,
    /// The graph bound at the answer (for its report).
    graph: Graph,
}

/// `memplan fit MODEL --symbol S --budget B`: the largest value of `S` whose plan fits,
/// checked by planning at `N` (fits, verified) and `N + 1` (does not). `graph` and
/// `options` come from [`crate::load::prepare_symbolic`]; `dims` are the values given (the
/// symbol fitted must not be one of them).
pub fn fit_graph(
    graph: &Graph,
    options: &PlanOptions,
    dims: &[(String, u64)],
    request: &FitRequest,
) -> Result<GraphFitAnswer> {
    let symbol = request.symbol.as_str();
    if dims.iter().any(|(n, _)| n == symbol) {
        bail!("--dim {symbol}=... fixes the symbol being fitted; leave it out");
    }
    let fit = memplan_tracker::fit_graph(graph, options, request)
        .with_context(|| format!("fitting `{symbol}` of graph `{}`", graph.name))?;
    Ok(GraphFitAnswer {
        symbol: symbol.to_owned(),
        budget: request.budget,
        min: request.min,
        graph: graph.clone(),
        fit,
    })
}

impl GraphFitAnswer {
    /// The one-line JSON of `memplan fit --format json`.
    pub fn json(&self) -> String {
        let fit = &self.fit;
        let breakdown = fit.plan.as_ref().map_or(serde_json::Value::Null, |plan| {
            serde_json::json!({
                "arena_bytes": plan.arena_bytes,
                "weights_bytes": plan.weight_bytes,
                "caller_io_bytes": fit.peak_bytes
                    .saturating_sub(plan.arena_bytes.saturating_add(plan.weight_bytes)),
                "total_bytes": fit.peak_bytes,
            })
        });
        let next = fit
            .value
            .zip(fit.next_peak_bytes)
            .map(|(n, next)| (n + 1, (next != u64::MAX).then_some(next)));
        fit_json(
            &self.symbol,
            fit.value,
            self.budget,
            fit.peak_bytes,
            breakdown,
            next,
        )
    }

    /// The text of `memplan fit`: the answer, then the plan's report listing `top` buffers.
    pub fn text(&self, top: usize) -> Result<String> {
        use std::fmt::Write as _;
        let (fit, symbol, budget) = (&self.fit, &self.symbol, self.budget);
        let mut out = String::new();
        match (fit.value, &fit.plan) {
            (Some(n), Some(plan)) => {
                let _ = writeln!(out, "{symbol} = {n}");
                let _ = writeln!(
                    out,
                    "needs {} ({} bytes: arena {} + weights {}{}) within the budget of {}",
                    HumanBytes(fit.peak_bytes),
                    group_digits(fit.peak_bytes),
                    HumanBytes(plan.arena_bytes),
                    HumanBytes(plan.weight_bytes),
                    if fit.peak_bytes > plan.arena_bytes.saturating_add(plan.weight_bytes) {
                        " + caller-owned inputs and outputs"
                    } else {
                        ""
                    },
                    memplan_ir::ExactBytes(budget)
                );
                let _ = match fit.next_peak_bytes {
                    Some(u64::MAX) => writeln!(
                        out,
                        "{symbol} = {} needs more than 2^64 bytes: over the budget",
                        n + 1
                    ),
                    Some(next) => writeln!(
                        out,
                        "{symbol} = {} needs {}: over the budget",
                        n + 1,
                        memplan_ir::ExactBytes(next)
                    ),
                    None => writeln!(
                        out,
                        "{symbol} = {n} is the top of the range searched (--max)"
                    ),
                };
                let bound = fit
                    .graph
                    .as_ref()
                    .unwrap_or(&self.graph)
                    .bound(&fit.bindings)
                    .context("binding the answer")?;
                out.push('\n');
                out.push_str(&crate::report::plan_report(&bound, plan, top)?);
                out.push_str(crate::plan::VERIFIED);
            }
            _ => {
                out.push_str(&nothing_fits(symbol, self.min, fit.peak_bytes, "", budget));
            }
        }
        Ok(out)
    }
}

/// The total a fit with `--config` compares with the budget: the busiest device's.
fn fitted_total(config: &TransformerConfig, w: &Workload) -> Result<Option<u64>, EstimateError> {
    match estimate(config, w) {
        Ok(e) => Ok(Some(e.reserved_bytes())),
        Err(EstimateError::Overflow { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The answer of [`fit_config`]: the largest batch or sequence length whose estimate fits.
#[derive(Clone, Debug)]
pub struct ConfigFit {
    /// `batch` or `seq`.
    pub symbol: String,
    /// The largest value that fits; `None` when not even `min` does.
    pub value: Option<u64>,
    /// The budget (of each device).
    pub budget: u64,
    /// The smallest value considered.
    pub min: u64,
    /// The busiest device's total at `value` (at `min` when nothing fits).
    pub total: u64,
    /// The model.
    pub config: TransformerConfig,
    /// The workload at `value` (at `min` when nothing fits).
    pub workload: Workload,
    /// The estimate at `value` (at `min` when nothing fits).
    pub estimate: memplan_tracker::estimate::Estimate,
    /// The value after the answer and its total (`None` past 2^64), unless the answer is
    /// the top of the range.
    pub next: Option<(u64, Option<u64>)>,
    /// Whether the top of the range was the model's context limit.
    pub context_limit: bool,
    /// A smaller value that does not fit, and its total, when the answer lies past it (the
    /// allocator's margin shrank between them).
    pub first_failure: Option<(u64, Option<u64>)>,
}

/// `memplan fit --config C --symbol batch|seq --budget B`: the largest value whose estimate's
/// `total_bytes` (on the busiest device) fits. `max` is the top of the range (default
/// 2^32 - 1; for `seq`, the model's context limit).
pub fn fit_config(
    config: &TransformerConfig,
    settings: &WorkloadSettings,
    symbol: &str,
    budget: u64,
    min: u64,
    max: Option<u64>,
    notes: &mut dyn Notes,
) -> Result<ConfigFit> {
    let base = settings.workload(config, notes)?;
    let given_max = max;
    let mut max = max.unwrap_or(u64::from(u32::MAX));
    let mut context_limit = false;
    match symbol {
        "batch" => {
            if settings.batch.is_some() {
                bail!("--batch fixes the symbol being fitted; leave it out");
            }
        }
        "seq" => {
            if settings.seq.is_some() {
                bail!("--seq fixes the symbol being fitted; leave it out");
            }
            if config.fixed_sequence().is_some() {
                bail!(
                    "a {} model has a fixed sequence length: fit batch instead",
                    config.architecture.name()
                );
            }
            // Without --max, no longer than the model is made for.
            if given_max.is_none() && config.max_positions > 0 {
                max = config.max_positions;
                context_limit = true;
            }
            // A learned position table has no row past its end.
            if config.learned_positions > 0 && max >= config.learned_positions {
                max = config.learned_positions;
                context_limit = true;
            }
        }
        other => bail!("--symbol {other}: with --config the symbol is batch or seq"),
    }
    let at = |value: u64| {
        let mut w = base;
        if symbol == "batch" {
            w.batch = value;
        } else {
            w.seq = value;
        }
        w
    };
    // The reserved bytes (allocated plus the caching allocator's margin) need not grow with
    // the batch: the margin is fragmentation, which a larger batch can have less of. The
    // allocated peak does grow, and bounds the search: past the first value that does not
    // fit, up to `BEYOND_SCAN` values under that bound are asked about too.
    let outcome = largest_fitting_beyond(
        min,
        max,
        BEYOND_SCAN,
        |v| Ok::<_, EstimateError>(fitted_total(config, &at(v))?.is_some_and(|t| t <= budget)),
        |v| match estimate(config, &at(v)) {
            Ok(e) => Ok(e.total_bytes <= budget),
            Err(EstimateError::Overflow { .. }) => Ok(false),
            Err(e) => Err(e),
        },
    )
    .context("estimating")?;
    let first_failure = match outcome.first_failure {
        Some(f) => Some((f, fitted_total(config, &at(f)).context("estimating")?)),
        None => None,
    };
    let shown = outcome.largest.unwrap_or(min);
    let workload = at(shown);
    let e = estimate(config, &workload).context("estimating")?;
    // What the device must hold: the runtime's peak plus its allocator's margin.
    let total = e.reserved_bytes();
    let next = match outcome.largest {
        Some(n) if n < max => Some((
            n + 1,
            fitted_total(config, &at(n + 1)).context("estimating")?,
        )),
        _ => None,
    };
    Ok(ConfigFit {
        symbol: symbol.to_owned(),
        value: outcome.largest,
        budget,
        min,
        total,
        config: config.clone(),
        workload,
        estimate: e,
        next,
        context_limit,
        first_failure,
    })
}

/// How many values [`fit_config`] asks about past the first that does not fit.
const BEYOND_SCAN: u64 = 32;

impl ConfigFit {
    /// The one-line JSON of `memplan fit --config --format json`.
    pub fn json(&self) -> String {
        let line = fit_json(
            &self.symbol,
            self.value,
            self.budget,
            self.total,
            estimate_json(&self.config, &self.workload, &self.estimate),
            self.next,
        );
        let Some((value, total)) = self.first_failure else {
            return line;
        };
        let mut v: serde_json::Value = serde_json::from_str(&line).expect("fit_json writes JSON");
        v["first_failure"] = serde_json::json!({
            "value": value,
            "total_bytes": total,
            "fits": false,
        });
        format!("{v}\n")
    }

    /// The text of `memplan fit --config`: the answer, then the estimate's table.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let (symbol, total, budget) = (&self.symbol, self.total, self.budget);
        let mut out = String::new();
        let per_device = if self.workload.parallel.is_single() {
            ""
        } else {
            " per device"
        };
        match self.value {
            Some(n) => {
                let _ = writeln!(out, "{symbol} = {n}");
                let _ = writeln!(
                    out,
                    "total{per_device}: {} within the budget of {}",
                    memplan_ir::ExactBytes(total),
                    memplan_ir::ExactBytes(budget)
                );
                let _ = match self.next {
                    Some((v, t)) => writeln!(
                        out,
                        "{symbol} = {v} needs {}: over the budget",
                        t.map_or("more than 2^64 bytes".to_owned(), |t| {
                            memplan_ir::ExactBytes(t).to_string()
                        })
                    ),
                    None if self.context_limit => writeln!(
                        out,
                        "{symbol} = {n} is the model's context limit (max_position_embeddings; --max to go past it)"
                    ),
                    None => writeln!(out, "{symbol} = {n} is the top of the range searched"),
                };
                if let Some((v, t)) = self.first_failure {
                    let _ = writeln!(
                        out,
                        "{symbol} = {v} needs {}: over the budget (the allocator's margin is not monotone)",
                        t.map_or("more than 2^64 bytes".to_owned(), |t| {
                            memplan_ir::ExactBytes(t).to_string()
                        })
                    );
                }
            }
            None => {
                out.push_str(&nothing_fits(symbol, self.min, total, per_device, budget));
            }
        }
        out.push_str(&estimate_table(
            &self.config,
            &self.workload,
            &self.estimate,
        ));
        out
    }
}

/// The answer of [`serving`]: the KV cache a serving engine gets on each device.
#[derive(Clone, Debug)]
pub struct ServingAnswer {
    /// The model (served in bf16 where its config says f32 or nothing, as vLLM does).
    pub config: TransformerConfig,
    /// The workload.
    pub workload: Workload,
    /// The engine's settings.
    pub serving: Serving,
    /// The capacity.
    pub capacity: ServingCapacity,
}

/// `fit --config C --serving --budget B`: the KV cache a serving engine gets on each device
/// beside the weights, one step's activations and a reserve.
pub fn serving(
    mut config: TransformerConfig,
    workload: &WorkloadSettings,
    settings: &ServingSettings,
    budget: u64,
    notes: &mut dyn Notes,
) -> Result<ServingAnswer> {
    if workload.batch.is_some() {
        bail!("--serving sizes the cache for --seq; --batch does not apply (see --max-seqs)");
    }
    // vLLM's `--dtype auto` serves a float32 checkpoint (or one whose config names no
    // dtype) in 16 bits: bf16 where the device has it, the first dtype it supports.
    if !workload.dtype_given() && matches!(config.dtype, None | Some(DType::F32)) {
        notes.note(format!(
            "note: serving in bf16, as vLLM's --dtype auto does for a {} config; --dtype f32 keeps 32 bits",
            if config.dtype.is_some() {
                "float32"
            } else {
                "dtype-less"
            }
        ));
        config.dtype = Some(DType::BF16);
    }
    let w = workload.workload(&config, notes)?;
    if w.training.is_some() {
        bail!("--serving is inference: leave --training out");
    }
    if let Some(r) = workload.runtime.filter(|&r| r != Runtime::Vllm) {
        bail!(
            "--serving sizes vLLM's KV cache (--runtime vllm); --runtime {r} estimates with `estimate` or `fit --symbol`"
        );
    }
    let defaults = Serving::new(budget);
    let serving = Serving::new(budget)
        .with_gpu_util_ppm(settings.gpu_util_ppm.unwrap_or(defaults.gpu_util_ppm))
        .with_max_batched_tokens(
            settings
                .max_batched_tokens
                .unwrap_or(defaults.max_batched_tokens),
        )
        .with_max_seqs(settings.max_seqs.unwrap_or(defaults.max_seqs))
        .with_block_size(settings.block_size.unwrap_or(defaults.block_size))
        .with_reserve(settings.reserve.unwrap_or(defaults.reserve))
        .with_seq(workload.seq);
    if let Some(s) = serving
        .seq
        .filter(|&s| config.max_positions > 0 && s > config.max_positions)
    {
        notes.note(format!(
            "note: --seq {s} is past the model's context limit of {} positions",
            config.max_positions
        ));
    }
    let capacity = serving_capacity(&config, &w, &serving).context("sizing the KV cache")?;
    Ok(ServingAnswer {
        config,
        workload: w,
        serving,
        capacity,
    })
}

impl ServingAnswer {
    /// The JSON of `memplan fit --serving --format json`.
    pub fn json(&self) -> serde_json::Value {
        serving_json(&self.config, &self.workload, &self.serving, &self.capacity)
    }

    /// The text of `memplan fit --serving`.
    pub fn text(&self) -> String {
        serving_text(&self.config, &self.workload, &self.serving, &self.capacity)
    }
}

fn serving_text(
    config: &TransformerConfig,
    w: &Workload,
    serving: &Serving,
    c: &ServingCapacity,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let devices = if c.devices > 1 {
        format!(", each token's cache split over {} devices", c.devices)
    } else {
        String::new()
    };
    if c.fits {
        let _ = writeln!(
            s,
            "kv tokens = {} ({} blocks of {}){devices}",
            group_digits(c.kv_tokens),
            group_digits(c.kv_blocks),
            serving.block_size
        );
    } else {
        let _ = writeln!(
            s,
            "nothing fits: weights, activations and reserve need {} of the {} usable{}",
            memplan_ir::ExactBytes(c.total_bytes),
            memplan_ir::ExactBytes(c.usable_bytes),
            if c.devices > 1 {
                format!(" on each of {} devices", c.devices)
            } else {
                String::new()
            }
        );
    }
    if let (Some(seq), Some(n), Some(per)) = (serving.seq, c.max_concurrent_seqs, c.blocks_per_seq)
    {
        let _ = writeln!(
            s,
            "sequences of {seq} tokens at once = {n} ({} blocks a sequence, as vLLM admits them{})",
            group_digits(per),
            if c.limited_by_max_seqs {
                "; the --max-seqs limit, memory holds more"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(s, "model:        {}", config.describe());
    let _ = writeln!(
        s,
        "runtime:      vllm (vLLM's sizing: weights, rotary cache, profiling run of forward and sampler, reserve, then KV blocks)"
    );
    let _ = writeln!(
        s,
        "engine:       {} of {} usable, {} batched tokens a step, {} sequences at most, KV cache {}{}",
        format_fraction(serving.gpu_util_ppm),
        HumanBytes(serving.budget),
        group_digits(serving.max_batched_tokens),
        serving.max_seqs,
        w.kv_dtype(),
        if c.devices > 1 {
            format!("; figures for one device of pipeline stage {}", c.stage)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        "kv per token: {}",
        memplan_ir::ExactBytes(c.kv_bytes_per_token)
    );
    for (name, bytes) in [
        ("usable", c.usable_bytes),
        ("weights", c.weights_bytes),
        ("rotary cache", c.rotary_cache_bytes),
        ("profile run", c.activation_bytes),
        ("  sampler", c.sampler_bytes),
        ("reserve", c.reserve_bytes),
        ("kv cache", c.kv_cache_bytes),
        ("total", c.total_bytes),
    ] {
        s.push_str(&byte_row(name, bytes));
    }
    s
}

/// `nothing fits: batch = 1 needs ..., the budget is ...`, a line; `per_device` follows
/// what is needed.
pub fn nothing_fits(symbol: &str, min: u64, needs: u64, per_device: &str, budget: u64) -> String {
    format!(
        "nothing fits: {symbol} = {min} needs {}{per_device}, the budget is {}\n",
        memplan_ir::ExactBytes(needs),
        memplan_ir::ExactBytes(budget)
    )
}

fn format_fraction(ppm: u64) -> String {
    let text = format!("{:.6}", ppm as f64 / 1e6);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn serving_json(
    config: &TransformerConfig,
    w: &Workload,
    serving: &Serving,
    c: &ServingCapacity,
) -> serde_json::Value {
    let per_device = serde_json::json!({
        "weights_bytes": c.weights_bytes,
        "activation_bytes": c.activation_bytes,
        "sampler_bytes": c.sampler_bytes,
        "rotary_cache_bytes": c.rotary_cache_bytes,
        "reserve_bytes": c.reserve_bytes,
        "kv_cache_bytes": c.kv_cache_bytes,
        "kv_bytes_per_token": c.kv_bytes_per_token,
        "total_bytes": c.total_bytes,
    });
    serde_json::json!({
        "model_type": config.architecture.name(),
        "fits": c.fits,
        "kv_tokens": c.kv_tokens,
        "kv_blocks": c.kv_blocks,
        "max_concurrent_seqs": c.max_concurrent_seqs,
        "blocks_per_seq": c.blocks_per_seq,
        "runtime": "vllm",
        "limited_by_max_seqs": c.limited_by_max_seqs,
        "kv_bytes_per_token": c.kv_bytes_per_token,
        "sliding_window": config.sliding_window.filter(|_| config.sliding_layers.contains(&true)),
        "sliding_layers": crate::estimate::sliding_layers(config),
        "weights_bytes": c.weights_bytes,
        "activation_bytes": c.activation_bytes,
        "sampler_bytes": c.sampler_bytes,
        "rotary_cache_bytes": c.rotary_cache_bytes,
        "reserve_bytes": c.reserve_bytes,
        "kv_cache_bytes": c.kv_cache_bytes,
        "total_bytes": c.total_bytes,
        "usable_bytes": c.usable_bytes,
        "budget_bytes": serving.budget,
        "gpu_util": serving.gpu_util_ppm as f64 / 1e6,
        "block_size": serving.block_size,
        "max_batched_tokens": serving.max_batched_tokens,
        "max_seqs": serving.max_seqs,
        "seq": serving.seq,
        "dtype": w.dtype.name(),
        "kv_dtype": w.kv_dtype().name(),
        "weight_dtype": w.weight_format().dtype.name(),
        "weight_format": w.quant.map(|(k, _)| k.name()),
        "devices": c.devices,
        "stage": c.stage,
        "weights_bytes_per_device": c.weights_bytes,
        "per_device": per_device,
    })
}
