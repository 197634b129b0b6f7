//! `memplan estimate`: a transformer's memory without a graph, from a Hugging Face
//! `config.json` or from flags: parameters (and active parameters of MoE models), weights
//! (plain or quantized), KV cache, activations, and for training gradients and optimizer
//! states; with `--tp/--pp/--ep/--dp` the busiest device's share too. A breakdown table, or
//! JSON with `--format json`.

use std::process::ExitCode;

use crate::model_args::{AttentionArg, ModelArgs, OptimizerKernelArg, WorkloadArgs};
use crate::plan::Format;
use crate::ui;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    attention: AttentionArg,
    #[command(flatten)]
    kernel: OptimizerKernelArg,
    /// An hf training step: also plan the step with memplan's own planner (its allocations,
    /// with the lifetimes PyTorch gives them, at fixed offsets in one arena) and report that
    /// figure apart from PyTorch's (`arena plan:`, JSON `arena_step`).
    #[arg(long)]
    plan_step: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    args.workload.attention = args.attention.attention;
    args.workload.optimizer_kernel = args.kernel.optimizer_kernel;
    args.workload.plan_step = args.plan_step;
    let config = args.model.load()?;
    let answer = memplan::estimate::estimate(config, &args.workload.settings(), &mut ui::Stderr)?;
    let text = match args.format {
        Format::Text => answer.text(),
        Format::Json => answer.json_text()?,
    };
    ui::print(&text)?;
    Ok(ExitCode::SUCCESS)
}
