//! `memplan fit`: the largest value of a symbol (batch, sequence length) that fits a budget,
//! by planning a graph at each value tried ([`memplan::fit::fit_graph`], or with `--training`
//! [`memplan::training::fit`]) or from a model's estimate ([`memplan::fit::fit_config`]);
//! `--serving` sizes a serving engine's KV cache instead ([`memplan::fit::serving`]). Exit
//! status 3 when nothing fits, 2 on bad input.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use memplan::estimate::{budget, parse_budget, parse_positive_budget};
use memplan::fit::ServingSettings;
use memplan_tracker::FitRequest;

use crate::model_args::{ModelArgs, WorkloadArgs};
use crate::plan::{Format, PlanningArgs};
use crate::ui;

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
    step: crate::training_args::StepArgs,
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
    #[arg(long, value_name = "FRACTION", value_parser = memplan::fit::parse_fraction)]
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
    fn settings(&self) -> ServingSettings {
        ServingSettings {
            gpu_util_ppm: self.gpu_util,
            max_batched_tokens: self.max_batched_tokens,
            max_seqs: self.max_seqs,
            block_size: self.block_size,
            reserve: self.reserve,
        }
    }
}

pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    // With --config, --attention names transformers' attention implementation.
    // and --optimizer-kernel the kernel of the estimate's optimizer step.
    if args.planning.graph.is_none() {
        args.workload.attention = args.planning.attention.map(|a| a.implementation());
        args.workload.optimizer_kernel = args.step.optimizer_kernel.map(|k| {
            use memplan_tracker::estimate::OptimizerKernel as Estimated;
            match k {
                memplan_planner::OptimizerKernel::Fused => Estimated::Fused,
                memplan_planner::OptimizerKernel::Foreach => Estimated::Foreach,
                memplan_planner::OptimizerKernel::PerTensor => Estimated::PerTensor,
                _ => Estimated::default(),
            }
        });
    }
    let budget = budget(args.budget, args.device, &mut |line: String| {
        ui::eprint_line(line)
    })?;
    if args.serving.settings().given() && !args.serving.serving {
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
            if args.workload.training_name().is_some() {
                return fit_training(&args, symbol(&args)?, budget);
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

/// The exit code of an answer: 0, or 3 when nothing fits.
fn exit(fits: bool) -> ExitCode {
    if fits {
        ExitCode::SUCCESS
    } else {
        ui::exit(ui::NOTHING_FITS)
    }
}

fn fit_model(args: &Args, symbol: &str, budget: u64) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    if args.planning.binds(symbol) {
        bail!("--dim {symbol}=... fixes the symbol being fitted; leave it out");
    }
    let settings = args.planning.settings(None);
    let (graph, options) = args.planning.load_symbolic(&settings)?;
    let request = FitRequest::new(symbol, budget)
        .with_min(args.min)
        .with_max(args.max.unwrap_or(FitRequest::new("", 0).max))
        .with_count_caller_io(args.count_caller_io);
    let spinner = crate::progress::Spinner::new(&format!("fitting {symbol}"));
    let fit = memplan::fit::fit_graph(&graph, &options, &settings.dims, &request);
    spinner.finish();
    let fit = fit?;
    let elapsed = start.elapsed();
    let out = if args.format == Format::Json {
        fit.json()
    } else {
        fit.text(args.top)?
    };
    ui::print(&out)?;
    ui::note(format!(
        "{} for {} of {symbol} in {:.2} s",
        memplan::report::plural(u64::from(fit.fit.plans), "plan", "plans"),
        memplan::report::plural(u64::from(fit.fit.probes), "value", "values"),
        elapsed.as_secs_f64()
    ));
    Ok(exit(fit.fit.value.is_some()))
}

/// `memplan fit MODEL --training OPTIMIZER`: the largest value whose training step fits.
fn fit_training(args: &Args, symbol: &str, budget: u64) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    if args.planning.binds(symbol) {
        bail!("--dim {symbol}=... fixes the symbol being fitted; leave it out");
    }
    let mut settings = args.planning.settings(None);
    args.step.apply(&mut settings);
    settings.training = args
        .workload
        .training_name()
        .map(memplan::training::parse_optimizer)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    settings.master_weights = args.workload.master_weights();
    let (graph, options) = args.planning.load_symbolic(&settings)?;
    let request = memplan::training::FitRequest {
        symbol,
        budget,
        min: args.min,
        max: args.max.unwrap_or(u64::from(u32::MAX)),
    };
    let fit = memplan::training::fit(&graph, &options, &settings, &request)?;
    let out = if args.format == Format::Json {
        fit.json()
    } else {
        fit.text(args.top)?
    };
    ui::print(&out)?;
    ui::note(format!(
        "{} planned for {} of {symbol} in {:.2} s",
        memplan::report::plural(u64::from(fit.plans), "training step", "training steps"),
        memplan::report::plural(u64::from(fit.probes), "value", "values"),
        start.elapsed().as_secs_f64()
    ));
    Ok(exit(fit.value.is_some()))
}

fn fit_config(args: &Args, symbol: &str, budget: u64) -> anyhow::Result<ExitCode> {
    let config = args.model.load()?;
    let fit = memplan::fit::fit_config(
        &config,
        &args.workload.settings(),
        symbol,
        budget,
        args.min,
        args.max,
        &mut ui::Stderr,
    )?;
    let out = if args.format == Format::Json {
        fit.json()
    } else {
        fit.text()
    };
    ui::print(&out)?;
    Ok(exit(fit.value.is_some()))
}

/// `fit --config C --serving`: the KV cache a serving engine gets on each device.
fn fit_serving(args: &Args, budget: u64) -> anyhow::Result<ExitCode> {
    if args.symbol.is_some() {
        bail!("--serving answers in KV tokens and sequences: leave --symbol out");
    }
    let workload = args.workload.settings();
    if workload.batch.is_some() {
        bail!("--serving sizes the cache for --seq; --batch does not apply (see --max-seqs)");
    }
    let config = args.model.load()?;
    let answer = memplan::fit::serving(
        config,
        &workload,
        &args.serving.settings(),
        budget,
        &mut ui::Stderr,
    )?;
    let out = if args.format == Format::Json {
        format!("{}\n", answer.json())
    } else {
        answer.text()
    };
    ui::print(&out)?;
    Ok(exit(answer.capacity.fits))
}
