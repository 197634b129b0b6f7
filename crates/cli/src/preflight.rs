//! `memplan preflight`: does a graph's plan fit a budget, or the free memory of a CUDA
//! device? Exit status 0 when it fits, 1 when it does not (the message states the bytes
//! needed and available and, with `--symbol`, the largest value that would fit), 2 on bad
//! input.

use std::process::ExitCode;

use anyhow::Context;
use memplan_ir::GraphError as _;
use memplan_planner::{plan_graph, verify_plan};
use memplan_tracker::{PreflightError, Suggestion, preflight};

use crate::plan::PlanningArgs;
use memplan::estimate::{budget, parse_positive_budget};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    planning: PlanningArgs,
    /// The memory available: 24GiB, 24GB, 512MiB or a number of bytes.
    #[arg(long, value_parser = parse_positive_budget, allow_hyphen_values = true)]
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
    /// Output format (JSON, the same keys whatever the verdict: `graph`, `fits`,
    /// `total_bytes`, `budget_bytes`, `free_bytes`, `over_bytes`, `largest_fitting`).
    #[arg(long, value_enum, default_value_t = crate::plan::Format::Text)]
    format: crate::plan::Format,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let available = budget(args.budget, args.device, &mut |line: String| {
        crate::ui::eprint_line(line);
    })?;
    let (graph, options) = args.planning.load_symbolic(&args.planning.settings(None))?;
    let plan =
        plan_graph(&graph, &options).with_context(|| format!("planning graph `{}`", graph.name))?;
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
                        Suggestion::None => serde_json::Value::Null,
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
