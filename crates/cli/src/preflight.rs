//! `memplan preflight`: does a graph's plan, or a model's estimate (`--config` or model
//! flags), fit a budget or the free memory of a CUDA device? Exit status 0 when it fits, 1
//! when it does not (the message states the bytes needed and available and, with `--symbol`,
//! the largest value that would fit), 2 on bad input. A model's need is its estimate's peak
//! plus the caching allocator's margin (`reserved_bytes`), as `fit --config` compares.

use std::process::ExitCode;

use anyhow::bail;
use memplan_ir::GraphError as _;
use memplan_planner::verify_plan;
use memplan_tracker::{PreflightError, Suggestion, preflight};

use crate::model_args::{ModelArgs, OptimizerKernelArg, WorkloadArgs};
use crate::plan::PlanningArgs;
use memplan::estimate::{budget, parse_positive_budget};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    planning: PlanningArgs,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    kernel: OptimizerKernelArg,
    /// The memory available: 24GiB, 24GB, 512MiB or a number of bytes.
    #[arg(long, value_parser = parse_positive_budget, allow_hyphen_values = true)]
    budget: Option<u64>,
    /// Use the free memory of this CUDA device (needs `--features cuda`).
    #[arg(long, value_name = "ORDINAL")]
    device: Option<usize>,
    /// When it does not fit, the symbol whose largest fitting value to name (e.g. batch; batch
    /// or seq with --config).
    #[arg(long)]
    symbol: Option<String>,
    /// Count graph inputs and outputs the caller provides (--caller-inputs/--caller-outputs).
    #[arg(long)]
    count_caller_io: bool,
    /// Output format (JSON, the same keys whatever the verdict: `graph`, `fits`,
    /// `total_bytes`, `budget_bytes`, `free_bytes`, `over_bytes`, `largest_fitting`; with
    /// --config `graph` is null and `model`, `runtime`, `peak_bytes` and
    /// `allocator_margin_bytes` follow).
    #[arg(long, value_enum, default_value_t = crate::plan::Format::Text)]
    format: crate::plan::Format,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let available = budget(args.budget, args.device, &mut |line: String| {
        crate::ui::eprint_line(line);
    })?;
    if args.model.given() {
        if args.planning.graph.is_some() {
            bail!("give a graph or --config (or model flags), not both");
        }
        return run_config(args, available);
    }
    if args.workload.given() || args.kernel.optimizer_kernel.is_some() {
        bail!(
            "--batch, --seq, --dtype, --optimizer-kernel and the training options go with --config; for a graph pass --dim NAME=VALUE"
        );
    }
    let (graph, options) = args.planning.load_symbolic(&args.planning.settings(None))?;
    let (graph, plan, _) = memplan::plan::plan_checked_fusion(graph, &options)?;
    if let Err(problems) = verify_plan(&graph, &plan) {
        crate::ui::eprint_line(format_args!("error: {}", problems.with_graph(&graph)));
        return Ok(crate::ui::exit(crate::ui::NEGATIVE));
    }
    let json = args.format == crate::plan::Format::Json;
    let verdict = preflight(
        &graph,
        &options,
        &plan,
        available,
        args.count_caller_io,
        args.symbol.as_deref(),
    );
    // One JSON shape for both verdicts.
    let json_line = |fits: bool, needed: u64, largest: serde_json::Value| {
        format!(
            "{}\n",
            serde_json::json!({
                "graph": graph.name,
                "fits": fits,
                "total_bytes": needed,
                "budget_bytes": available,
                "free_bytes": available.saturating_sub(needed),
                "over_bytes": needed.saturating_sub(available),
                "largest_fitting": largest,
            })
        )
    };
    match verdict {
        Ok(h) => {
            let text = if json {
                json_line(true, h.needed, serde_json::Value::Null)
            } else {
                format!(
                    "fits: graph `{}` needs {} of {}, {} free\n",
                    graph.name,
                    memplan_ir::ExactBytes(h.needed),
                    memplan_ir::ExactBytes(h.available),
                    memplan_ir::ExactBytes(h.free()),
                )
            };
            crate::ui::print(&text)?;
            Ok(crate::ui::exit(crate::ui::OK))
        }
        Err(e @ PreflightError::DoesNotFit { .. }) => {
            let text = match &e {
                PreflightError::DoesNotFit {
                    needed, suggestion, ..
                } if json => {
                    let largest = match suggestion {
                        Suggestion::Largest { symbol, value } => {
                            serde_json::json!({ "symbol": symbol, "value": value })
                        }
                        Suggestion::Nothing { symbol } => {
                            serde_json::json!({ "symbol": symbol, "value": null })
                        }
                        _ => serde_json::Value::Null,
                    };
                    json_line(false, *needed, largest)
                }
                _ => format!("does not fit: {e}\n"),
            };
            crate::ui::print(&text)?;
            Ok(crate::ui::exit(crate::ui::NEGATIVE))
        }
        Err(e) => Err(e.into()),
    }
}

/// `preflight --config`: the estimate at the workload given (its peak plus the caching
/// allocator's margin) against the budget; with `--symbol batch|seq`, the largest value
/// that fits when the workload does not.
fn run_config(mut args: Args, available: u64) -> anyhow::Result<ExitCode> {
    if args.count_caller_io {
        bail!("--count-caller-io applies to a graph, not to --config");
    }
    // As in `fit --config`: --attention names transformers' attention implementation.
    args.workload.attention = args.planning.attention.map(|a| a.implementation());
    args.workload.optimizer_kernel = args.kernel.optimizer_kernel;
    let settings = args.workload.settings();
    let config = args.model.load()?;
    let answer = memplan::estimate::estimate(config.clone(), &settings, &mut crate::ui::Stderr)?;
    let e = &answer.estimate;
    let needed = e.reserved_bytes();
    let fits = needed <= available;
    let largest = match (&args.symbol, fits) {
        (Some(symbol), false) => {
            let mut free = settings.clone();
            match symbol.as_str() {
                "batch" => free.batch = None,
                "seq" => free.seq = None,
                other => bail!("--symbol with --config is batch or seq, not `{other}`"),
            }
            let fit = memplan::fit::fit_config(
                &config,
                &free,
                symbol,
                available,
                1,
                None,
                &mut crate::ui::Stderr,
            )?;
            Some((symbol.clone(), fit.value))
        }
        _ => None,
    };
    let runtime = e.runtime.name();
    let model = config.architecture.name();
    let text = if args.format == crate::plan::Format::Json {
        format!(
            "{}\n",
            serde_json::json!({
                "graph": null,
                "model": model,
                "runtime": runtime,
                "fits": fits,
                "total_bytes": needed,
                "peak_bytes": e.per_device.total_bytes,
                "allocator_margin_bytes": e.allocator_margin_bytes,
                "budget_bytes": available,
                "free_bytes": available.saturating_sub(needed),
                "over_bytes": needed.saturating_sub(available),
                "largest_fitting": largest.as_ref().map(|(symbol, value)| {
                    serde_json::json!({ "symbol": symbol, "value": value })
                }),
            })
        )
    } else {
        let need = format!(
            "{} `{model}` ({runtime} runtime, batch {} × seq {}) needs {} (peak {} + allocator margin {}) of {}",
            if fits { "fits:" } else { "does not fit:" },
            answer.workload.batch,
            e.seq,
            memplan_ir::ExactBytes(needed),
            memplan_ir::ExactBytes(e.per_device.total_bytes),
            memplan_ir::ExactBytes(e.allocator_margin_bytes),
            memplan_ir::ExactBytes(available),
        );
        match &largest {
            None if fits => format!(
                "{need}, {} free\n",
                memplan_ir::ExactBytes(available - needed)
            ),
            None => format!(
                "{need}, over by {}\n",
                memplan_ir::ExactBytes(needed - available)
            ),
            Some((symbol, Some(v))) => format!(
                "{need}, over by {}; the largest {symbol} that fits is {v}\n",
                memplan_ir::ExactBytes(needed - available)
            ),
            Some((symbol, None)) => format!(
                "{need}, over by {}; no {symbol} fits\n",
                memplan_ir::ExactBytes(needed - available)
            ),
        }
    };
    crate::ui::print(&text)?;
    Ok(crate::ui::exit(if fits {
        crate::ui::OK
    } else {
        crate::ui::NEGATIVE
    }))
}
