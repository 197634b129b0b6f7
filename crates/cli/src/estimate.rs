//! `memplan estimate`: a transformer's memory without a graph, from a Hugging Face
//! `config.json` or from flags: parameters (and active parameters of MoE models), weights
//! (plain or quantized), KV cache, activations, and for training gradients and optimizer
//! states; with `--tp/--pp/--ep/--dp` the busiest device's share too. A breakdown table, or
//! JSON with `--format json`.

use std::process::ExitCode;

use anyhow::Context;
use memplan_tracker::estimate::estimate;

use crate::model::{AttentionArg, ModelArgs, WorkloadArgs, estimate_json, estimate_table};
use crate::plan::Format;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    attention: AttentionArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    args.workload.attention = args.attention.attention;
    let config = args.model.load()?;
    let workload = args.workload.workload(&config)?;
    let e = estimate(&config, &workload).context("estimating")?;
    if config.max_positions > 0 && e.seq > config.max_positions {
        crate::ui::note(format!(
            "note: seq {} is past the model's context limit of {} positions",
            e.seq, config.max_positions
        ));
    }
    let text = match args.format {
        Format::Text => estimate_table(&config, &workload, &e),
        Format::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&estimate_json(&config, &workload, &e))?
        ),
    };
    crate::ui::print(&text)?;
    Ok(ExitCode::SUCCESS)
}
