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
//! Exit status 3 when nothing fits, 2 on bad input.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use memplan_ir::DType;
use memplan_tracker::estimate::{
    EstimateError, Runtime, Serving, ServingCapacity, TransformerConfig, Workload, estimate,
    serving_capacity,
};
use memplan_tracker::{FitRequest, HumanBytes, fit_graph, group_digits, largest_fitting};

use crate::model::{
    ModelArgs, WorkloadArgs, budget, byte_row, estimate_json, estimate_table, parse_budget,
    parse_positive_budget,
};
use crate::plan::{Format, PlanningArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    planning: PlanningArgs,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    serving: ServingArgs,
    /// The symbol to maximise: a shape symbol of the graph, or batch or seq with --config.
    #[arg(long)]
    symbol: Option<String>,
    /// The budget (of each device): 24GiB, 24GB, 512MiB or a number of bytes.
    #[arg(long, value_parser = parse_positive_budget, allow_hyphen_values = true)]
    budget: Option<u64>,
    /// Use the free memory of this CUDA device as the budget (needs `--features cuda`).
    #[arg(long, value_name = "ORDINAL")]
    device: Option<usize>,
    /// Count graph inputs and outputs the caller provides (--caller-inputs/--caller-outputs).
    #[arg(long)]
    count_caller_io: bool,
    /// Smallest value to consider.
    #[arg(long, default_value_t = 1)]
    min: u64,
    /// Largest value to consider (default 4294967295).
    #[arg(long)]
    max: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// How many of the largest buffers the plan summary lists.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// With a graph and --training: the step's options (loss, checkpoints, ...).
    #[command(flatten)]
    step: crate::training::StepArgs,
}

/// `--serving` and the serving engine's settings.
#[derive(Debug, clap::Args)]
struct ServingArgs {
    /// Size a serving engine's KV cache instead of fitting a symbol: KV tokens, blocks and
    /// (with --seq) concurrent sequences per device.
    #[arg(long)]
    serving: bool,
    /// The fraction of each device's budget the engine may use (vLLM's
    /// gpu_memory_utilization).
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction)]
    gpu_util: Option<u64>,
    /// Tokens one step processes (the chunked-prefill budget; sizes the activation peak).
    #[arg(long, value_name = "N")]
    max_batched_tokens: Option<u64>,
    /// Sequences one step runs at most.
    #[arg(long, value_name = "N")]
    max_seqs: Option<u64>,
    /// Tokens per KV block.
    #[arg(long, value_name = "N")]
    block_size: Option<u64>,
    /// Memory outside the engine's tensors per device: CUDA context, library workspaces,
    /// communication buffers (default 1GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_budget)]
    reserve: Option<u64>,
}

impl ServingArgs {
    fn settings_given(&self) -> bool {
        self.gpu_util.is_some()
            || self.max_batched_tokens.is_some()
            || self.max_seqs.is_some()
            || self.block_size.is_some()
            || self.reserve.is_some()
    }
}

/// `0.9` as millionths.
fn parse_fraction(s: &str) -> Result<u64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok((f * 1e6).round() as u64),
        _ => Err(format!(
            "`{s}`: expected a fraction above 0 and at most 1, such as 0.9"
        )),
    }
}

pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    let budget = budget(args.budget, args.device)?;
    // With --config, --attention names transformers' attention implementation.
    if args.planning.graph.is_none() {
        args.workload.attention = args.planning.attention.map(|a| a.implementation());
    }
    if args.serving.settings_given() && !args.serving.serving {
        bail!(
            "--gpu-util, --max-batched-tokens, --max-seqs, --block-size and --reserve go with --serving"
        );
    }
    match (&args.planning.graph, args.model.given()) {
        (Some(_), true) => bail!("give a graph or --config (or model flags), not both"),
        (None, false) => bail!("give a graph (MODEL) or --config FILE (or model flags)"),
        (Some(_), false) => {
            if args.serving.serving {
                bail!("--serving sizes a KV cache from a model's --config, not from a graph");
            }
            if let Some(optimizer) = args.workload.training_name() {
                let request = crate::training::FitRequest {
                    symbol: symbol(&args)?,
                    budget,
                    min: args.min,
                    max: args.max.unwrap_or(u64::from(u32::MAX)),
                    json: args.format == Format::Json,
                    top: args.top,
                };
                return crate::training::fit(
                    &args.planning,
                    &args.step,
                    optimizer,
                    args.workload.master_weights(),
                    &request,
                );
            }
            if args.workload.given() {
                bail!(
                    "--batch, --seq, --dtype and the training options go with --config; for a graph pass --dim NAME=VALUE"
                );
            }
            fit_model(&args, symbol(&args)?, budget)
        }
        (None, true) if args.serving.serving => fit_serving(&args, budget),
        (None, true) => fit_config(&args, symbol(&args)?, budget),
    }
}

fn symbol(args: &Args) -> anyhow::Result<&str> {
    args.symbol.as_deref().context(
        "--symbol is required: the symbol to maximise (batch or seq with --config), or --serving for a KV-cache answer",
    )
}

/// The JSON of a fit: the answer, its total and breakdown, and the value after it.
pub(crate) fn fit_json(
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

fn fit_model(args: &Args, symbol: &str, budget: u64) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    if args.planning.binds(symbol) {
        bail!("--dim {symbol}=... fixes the symbol being fitted; leave it out");
    }
    let (graph, options) = args.planning.load_symbolic()?;
    let request = FitRequest {
        min: args.min,
        max: args.max.unwrap_or(FitRequest::new("", 0).max),
        count_caller_io: args.count_caller_io,
        ..FitRequest::new(symbol, budget)
    };
    let spinner = crate::progress::Spinner::new(&format!("fitting {symbol}"));
    let fit = fit_graph(&graph, &options, &request)
        .with_context(|| format!("fitting `{symbol}` of graph `{}`", graph.name));
    spinner.finish();
    let fit = fit?;
    let elapsed = start.elapsed();
    let mut out = String::new();
    if args.format == Format::Json {
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
        out.push_str(&fit_json(
            symbol,
            fit.value,
            budget,
            fit.peak_bytes,
            breakdown,
            next,
        ));
    } else {
        use std::fmt::Write as _;
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
                let bound = graph.bound(&fit.bindings).context("binding the answer")?;
                out.push('\n');
                out.push_str(&crate::report::plan_report(&bound, plan, args.top)?);
                out.push_str("\nverified: the plan passes the independent plan verifier\n");
            }
            _ => {
                out.push_str(&nothing_fits(symbol, args.min, fit.peak_bytes, "", budget));
            }
        }
    }
    crate::ui::print(&out)?;
    crate::ui::note(format!(
        "{} for {} of {symbol} in {:.2} s",
        crate::report::plural(u64::from(fit.plans), "plan", "plans"),
        crate::report::plural(u64::from(fit.probes), "value", "values"),
        elapsed.as_secs_f64()
    ));
    Ok(match fit.value {
        Some(_) => ExitCode::SUCCESS,
        None => crate::ui::exit(crate::ui::NOTHING_FITS),
    })
}

/// The total a fit with `--config` compares with the budget: the busiest device's.
fn fitted_total(config: &TransformerConfig, w: &Workload) -> Result<Option<u64>, EstimateError> {
    match estimate(config, w) {
        Ok(e) => Ok(Some(e.reserved_bytes())),
        Err(EstimateError::Overflow { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn fit_config(args: &Args, symbol: &str, budget: u64) -> anyhow::Result<ExitCode> {
    use std::fmt::Write as _;
    let config = args.model.load()?;
    let base = args.workload.workload(&config)?;
    let mut max = args.max.unwrap_or(u64::from(u32::MAX));
    let mut context_limit = false;
    match symbol {
        "batch" => {
            if args.workload.batch.is_some() {
                bail!("--batch fixes the symbol being fitted; leave it out");
            }
        }
        "seq" => {
            if args.workload.seq.is_some() {
                bail!("--seq fixes the symbol being fitted; leave it out");
            }
            if config.fixed_sequence().is_some() {
                bail!(
                    "a {} model has a fixed sequence length: fit batch instead",
                    config.architecture.name()
                );
            }
            // Without --max, no longer than the model is made for.
            if args.max.is_none() && config.max_positions > 0 {
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
    let outcome = largest_fitting(args.min, max, |v| {
        Ok::<_, EstimateError>(fitted_total(&config, &at(v))?.is_some_and(|t| t <= budget))
    })
    .context("estimating")?;
    let shown = outcome.largest.unwrap_or(args.min);
    let workload = at(shown);
    let e = estimate(&config, &workload).context("estimating")?;
    // What the device must hold: the runtime's peak plus its allocator's margin.
    let total = e.reserved_bytes();
    let next = match outcome.largest {
        Some(n) if n < max => Some((
            n + 1,
            fitted_total(&config, &at(n + 1)).context("estimating")?,
        )),
        _ => None,
    };
    let mut out = String::new();
    if args.format == Format::Json {
        out.push_str(&fit_json(
            symbol,
            outcome.largest,
            budget,
            total,
            estimate_json(&config, &workload, &e),
            next,
        ));
    } else {
        let per_device = if workload.parallel.is_single() {
            ""
        } else {
            " per device"
        };
        match outcome.largest {
            Some(n) => {
                let _ = writeln!(out, "{symbol} = {n}");
                let _ = writeln!(
                    out,
                    "total{per_device}: {} within the budget of {}",
                    memplan_ir::ExactBytes(total),
                    memplan_ir::ExactBytes(budget)
                );
                let _ = match next {
                    Some((v, t)) => writeln!(
                        out,
                        "{symbol} = {v} needs {}: over the budget",
                        t.map_or("more than 2^64 bytes".to_owned(), |t| {
                            memplan_ir::ExactBytes(t).to_string()
                        })
                    ),
                    None if context_limit => writeln!(
                        out,
                        "{symbol} = {n} is the model's context limit (max_position_embeddings; --max to go past it)"
                    ),
                    None => writeln!(out, "{symbol} = {n} is the top of the range searched"),
                };
            }
            None => {
                out.push_str(&nothing_fits(symbol, args.min, total, per_device, budget));
            }
        }
        out.push_str(&estimate_table(&config, &workload, &e));
    }
    crate::ui::print(&out)?;
    Ok(match outcome.largest {
        Some(_) => ExitCode::SUCCESS,
        None => crate::ui::exit(crate::ui::NOTHING_FITS),
    })
}

/// `fit --config C --serving`: the KV cache a serving engine gets on each device.
fn fit_serving(args: &Args, budget: u64) -> anyhow::Result<ExitCode> {
    if args.symbol.is_some() {
        bail!("--serving answers in KV tokens and sequences: leave --symbol out");
    }
    if args.workload.batch.is_some() {
        bail!("--serving sizes the cache for --seq; --batch does not apply (see --max-seqs)");
    }
    let mut config = args.model.load()?;
    // vLLM's `--dtype auto` serves a float32 checkpoint (or one whose config names no
    // dtype) in 16 bits: bf16 where the device has it, the first dtype it supports.
    if !args.workload.dtype_given() && matches!(config.dtype, None | Some(DType::F32)) {
        crate::ui::note(format!(
            "note: serving in bf16, as vLLM's --dtype auto does for a {} config; --dtype f32 keeps 32 bits",
            if config.dtype.is_some() {
                "float32"
            } else {
                "dtype-less"
            }
        ));
        config.dtype = Some(DType::BF16);
    }
    let workload = args.workload.workload(&config)?;
    if workload.training.is_some() {
        bail!("--serving is inference: leave --training out");
    }
    if let Some(r) = workload.runtime.filter(|&r| r != Runtime::Vllm) {
        bail!(
            "--serving sizes vLLM's KV cache (--runtime vllm); --runtime {r} estimates with `estimate` or `fit --symbol`"
        );
    }
    let defaults = Serving::new(budget);
    let serving = Serving {
        budget,
        gpu_util_ppm: args.serving.gpu_util.unwrap_or(defaults.gpu_util_ppm),
        max_batched_tokens: args
            .serving
            .max_batched_tokens
            .unwrap_or(defaults.max_batched_tokens),
        max_seqs: args.serving.max_seqs.unwrap_or(defaults.max_seqs),
        block_size: args.serving.block_size.unwrap_or(defaults.block_size),
        reserve: args.serving.reserve.unwrap_or(defaults.reserve),
        seq: args.workload.seq,
    };
    if let Some(s) = serving
        .seq
        .filter(|&s| config.max_positions > 0 && s > config.max_positions)
    {
        crate::ui::note(format!(
            "note: --seq {s} is past the model's context limit of {} positions",
            config.max_positions
        ));
    }
    let c = serving_capacity(&config, &workload, &serving).context("sizing the KV cache")?;
    let out = if args.format == Format::Json {
        format!("{}\n", serving_json(&config, &workload, &serving, &c))
    } else {
        serving_text(&config, &workload, &serving, &c)
    };
    crate::ui::print(&out)?;
    Ok(if c.fits {
        ExitCode::SUCCESS
    } else {
        crate::ui::exit(crate::ui::NOTHING_FITS)
    })
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
        "sliding_layers": crate::model::sliding_layers(config),
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
