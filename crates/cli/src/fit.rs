//! `memplan fit`: the largest value of a symbol (batch, sequence length) that fits a budget.
//!
//! With a graph (`memplan fit MODEL --symbol batch --budget 24GiB --dim seq=512`), "fits"
//! means the arena plus the weight region of `memplan plan MODEL --dim batch=N` is within the
//! budget; the answer is checked by planning at N (fits, and passes the plan verifier) and
//! N + 1 (does not). With `--config` (or model flags), it means the `total_bytes` of
//! `memplan estimate` at that value is within the budget. The first line is `SYMBOL = N`,
//! then the plan summary (or the estimate) at N; `--format json` writes
//! `{"symbol", "value", "peak_bytes", "budget_bytes"}`. Exit status 3 when even the smallest
//! value does not fit, 2 on bad input.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use memplan_tracker::estimate::{EstimateError, estimate};
use memplan_tracker::{FitRequest, HumanBytes, fit_graph, group_digits, largest_fitting};

use crate::model::{ModelArgs, WorkloadArgs, budget, estimate_table, parse_budget};
use crate::plan::{Format, PlanningArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    planning: PlanningArgs,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// The symbol to maximise: a shape symbol of the graph, or batch or seq with --config.
    #[arg(long)]
    symbol: String,
    /// The budget: 24GiB, 24GB, 512MiB or a number of bytes.
    #[arg(long, value_parser = parse_budget)]
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

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let budget = budget(args.budget, args.device)?;
    match (&args.planning.graph, args.model.given()) {
        (Some(_), true) => bail!("give a graph or --config (or model flags), not both"),
        (None, false) => bail!("give a graph (MODEL) or --config FILE (or model flags)"),
        (Some(_), false) => {
            if let Some(optimizer) = args.workload.training_name() {
                let request = crate::training::FitRequest {
                    symbol: &args.symbol,
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
            fit_model(&args, budget)
        }
        (None, true) => fit_config(&args, budget),
    }
}

fn json_line(symbol: &str, value: Option<u64>, peak: u64, budget: u64) -> String {
    let v = serde_json::json!({
        "symbol": symbol,
        "value": value,
        "peak_bytes": peak,
        "budget_bytes": budget,
    });
    format!("{v}\n")
}

fn fit_model(args: &Args, budget: u64) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    if args.planning.binds(&args.symbol) {
        bail!(
            "--dim {}=... fixes the symbol being fitted; leave it out",
            args.symbol
        );
    }
    let (graph, options) = args.planning.load_symbolic()?;
    let request = FitRequest {
        min: args.min,
        max: args.max.unwrap_or(FitRequest::new("", 0).max),
        count_caller_io: args.count_caller_io,
        ..FitRequest::new(args.symbol.clone(), budget)
    };
    let spinner = crate::progress::Spinner::new(&format!("fitting {}", args.symbol));
    let fit = fit_graph(&graph, &options, &request)
        .with_context(|| format!("fitting `{}` of graph `{}`", args.symbol, graph.name));
    spinner.finish();
    let fit = fit?;
    let elapsed = start.elapsed();
    let symbol = &args.symbol;
    if args.format == Format::Json {
        print!("{}", json_line(symbol, fit.value, fit.peak_bytes, budget));
    } else {
        match (fit.value, &fit.plan) {
            (Some(n), Some(plan)) => {
                println!("{symbol} = {n}");
                println!(
                    "needs {} ({} bytes: arena {} + weights {}{}) within the budget of {} ({} bytes)",
                    HumanBytes(fit.peak_bytes),
                    group_digits(fit.peak_bytes),
                    HumanBytes(plan.arena_bytes),
                    HumanBytes(plan.weight_bytes),
                    if fit.peak_bytes > plan.arena_bytes.saturating_add(plan.weight_bytes) {
                        " + caller-owned inputs and outputs"
                    } else {
                        ""
                    },
                    HumanBytes(budget),
                    group_digits(budget)
                );
                match fit.next_peak_bytes {
                    Some(next) => println!(
                        "{symbol} = {} needs {} ({} bytes): over the budget",
                        n + 1,
                        HumanBytes(next),
                        group_digits(next)
                    ),
                    None => println!("{symbol} = {n} is the top of the range searched (--max)"),
                }
                let bound = graph.bound(&fit.bindings).context("binding the answer")?;
                println!();
                print!("{}", crate::report::plan_report(&bound, plan, args.top));
                println!("\nverified: the plan passes the independent plan verifier");
            }
            _ => println!(
                "nothing fits: {symbol} = {} needs {} ({} bytes), the budget is {} ({} bytes)",
                args.min,
                HumanBytes(fit.peak_bytes),
                group_digits(fit.peak_bytes),
                HumanBytes(budget),
                group_digits(budget)
            ),
        }
    }
    crate::ui::note(format!(
        "{} plans for {} values of {symbol} in {:.2} s",
        fit.plans,
        fit.probes,
        elapsed.as_secs_f64()
    ));
    Ok(match fit.value {
        Some(_) => ExitCode::SUCCESS,
        None => crate::ui::exit(crate::ui::NOTHING_FITS),
    })
}

fn fit_config(args: &Args, budget: u64) -> anyhow::Result<ExitCode> {
    let config = args.model.load()?;
    let symbol = args.symbol.as_str();
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
    let total = |value: u64| match estimate(&config, &at(value)) {
        Ok(e) => Ok(Some(e.total_bytes)),
        Err(EstimateError::Overflow { .. }) => Ok(None),
        Err(e) => Err(e),
    };
    let outcome = largest_fitting(args.min, max, |v| {
        Ok::<_, EstimateError>(total(v)?.is_some_and(|t| t <= budget))
    })
    .context("estimating")?;
    let shown = outcome.largest.unwrap_or(args.min);
    let workload = at(shown);
    let e = estimate(&config, &workload).context("estimating")?;
    if args.format == Format::Json {
        print!(
            "{}",
            json_line(symbol, outcome.largest, e.total_bytes, budget)
        );
    } else {
        match outcome.largest {
            Some(n) => {
                println!("{symbol} = {n}");
                println!(
                    "total: {} ({} bytes) within the budget of {} ({budget} bytes)",
                    HumanBytes(e.total_bytes),
                    e.total_bytes,
                    HumanBytes(budget)
                );
                if n < max {
                    let next = total(n + 1).context("estimating")?;
                    println!(
                        "{symbol} = {} needs {}: over the budget",
                        n + 1,
                        next.map_or("more than 2^64 bytes".to_owned(), |t| format!(
                            "{} ({t} bytes)",
                            HumanBytes(t)
                        ))
                    );
                } else if context_limit {
                    println!(
                        "{symbol} = {n} is the model's context limit (max_position_embeddings; --max to go past it)"
                    );
                } else {
                    println!("{symbol} = {n} is the top of the range searched");
                }
            }
            None => println!(
                "nothing fits: {symbol} = {} needs {} ({} bytes), the budget is {} ({budget} bytes)",
                args.min,
                HumanBytes(e.total_bytes),
                e.total_bytes,
                HumanBytes(budget)
            ),
        }
        print!("{}", estimate_table(&config, &workload, &e));
    }
    Ok(match outcome.largest {
        Some(_) => ExitCode::SUCCESS,
        None => crate::ui::exit(crate::ui::NOTHING_FITS),
    })
}
