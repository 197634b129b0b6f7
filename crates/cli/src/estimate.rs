//! `memplan estimate`: a transformer's memory without a graph, from a Hugging Face
//! `config.json` or from flags: parameters (and active parameters of MoE models), weights
//! (plain or quantized), KV cache, activations, and for training gradients and optimizer
//! states; with `--tp/--pp/--ep/--dp` the busiest device's share too. A breakdown table, or
//! JSON with `--format json`.

use std::process::ExitCode;

use crate::model_args::{ModelArgs, WorkloadArgs};
use crate::plan::Format;
use crate::ui;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = args.model.load()?;
    let answer = memplan::estimate::estimate(config, &args.workload.settings(), &mut ui::Stderr)?;
    let text = match args.format {
        Format::Text => answer.text(),
        Format::Json => answer.json_text()?,
    };
    ui::print(&text)?;
    Ok(ExitCode::SUCCESS)
}
