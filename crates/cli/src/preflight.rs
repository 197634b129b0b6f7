//! `memplan preflight`: does a graph's plan fit a budget, or the free memory of a CUDA
//! device? Exit status 0 when it fits, 1 when it does not (the message states the bytes
//! needed and available and, with `--symbol`, the largest value that would fit), 2 on bad
//! input.

use std::process::ExitCode;

use anyhow::Context;
use memplan_planner::{plan_graph, verify_plan};
use memplan_tracker::{HumanBytes, PreflightError, Suggestion, preflight};

use crate::model::{budget, parse_budget};
use crate::plan::PlanningArgs;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    planning: PlanningArgs,
    /// The memory available: 24GiB, 24GB, 512MiB or a number of bytes.
    #[arg(long, value_parser = parse_budget)]
    budget: Option<u64>,
    /// Use the free memory of this CUDA device (needs `--features cuda`).
    #[arg(long, value_name = "ORDINAL")]
    device: Option<usize>,
    /// When it does not fit, the symbol whose largest fitting value to name (e.g. batch).
    #[arg(long)]
    symbol: Option<String>,
    /// Count graph inputs and outputs the caller provides (--caller-inputs/--caller-outputs).
    #[arg(long)]
    count_caller_io: bool,
    /// Output format (JSON: `fits`, `needed_bytes`, `available_bytes`, `largest_fitting`).
    #[arg(long, value_enum, default_value_t = crate::plan::Format::Text)]
    format: crate::plan::Format,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let available = budget(args.budget, args.device)?;
    let (graph, options) = args.planning.load_symbolic()?;
    let plan =
        plan_graph(&graph, &options).with_context(|| format!("planning graph `{}`", graph.name))?;
    if let Err(problems) = verify_plan(&graph, &plan) {
        eprintln!("error: {problems}");
        return Ok(crate::ui::exit(crate::ui::NEGATIVE));
    }
    let json = args.format == crate::plan::Format::Json;
    match preflight(
        &graph,
        &options,
        &plan,
        available,
        args.count_caller_io,
        args.symbol.as_deref(),
    ) {
        Ok(h) if json => {
            println!(
                "{}",
                serde_json::json!({
                    "graph": graph.name, "fits": true, "needed_bytes": h.needed,
                    "available_bytes": h.available, "free_bytes": h.free(),
                })
            );
            Ok(crate::ui::exit(crate::ui::OK))
        }
        Ok(h) => {
            println!(
                "fits: graph `{}` needs {} ({} bytes) of {} ({} bytes), {} free",
                graph.name,
                HumanBytes(h.needed),
                memplan_tracker::group_digits(h.needed),
                HumanBytes(h.available),
                memplan_tracker::group_digits(h.available),
                HumanBytes(h.free())
            );
            Ok(crate::ui::exit(crate::ui::OK))
        }
        Err(e @ PreflightError::DoesNotFit { .. }) => {
            if json {
                if let PreflightError::DoesNotFit {
                    needed,
                    available,
                    suggestion,
                    ..
                } = &e
                {
                    let largest = match suggestion {
                        Suggestion::Largest { symbol, value } => {
                            serde_json::json!({ "symbol": symbol, "value": value })
                        }
                        Suggestion::Nothing { symbol } => {
                            serde_json::json!({ "symbol": symbol, "value": null })
                        }
                        Suggestion::None => serde_json::Value::Null,
                    };
                    println!(
                        "{}",
                        serde_json::json!({
                            "graph": graph.name, "fits": false, "needed_bytes": needed,
                            "available_bytes": available, "largest_fitting": largest,
                        })
                    );
                }
            } else {
                println!("does not fit: {e}");
            }
            Ok(crate::ui::exit(crate::ui::NEGATIVE))
        }
        Err(e) => Err(e.into()),
    }
}
