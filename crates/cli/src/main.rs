//! `memplan`: the command line.
//!
//! Each subcommand lives in its own module with an `Args` struct and a `run` function that
//! returns the process exit code. Errors print as one `error:` line (with their causes) and
//! exit with status 2; a check that ran and found a problem (or a negative answer) exits
//! with status 1; `memplan fit` exits with status 3 when nothing fits.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod estimate;
mod fit;
mod inspect;
mod load;
mod model;
mod output;
mod plan;
mod preflight;
mod progress;
mod solve;

/// Plan, place and track the memory of ML computation graphs.
#[derive(Debug, Parser)]
#[command(name = "memplan", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Summarize a graph: nodes, tensors, bytes by kind, largest tensors, op histogram.
    Inspect(inspect::Args),
    /// Plan a graph's memory: schedule, lifetimes, aliasing and arena offsets.
    Plan(plan::Args),
    /// Solve a packing problem in MiniMalloc's CSV format.
    Solve(solve::Args),
    /// Plan a graph and execute the plan on a host arena with a byte-pattern check.
    Check(check::Args),
    /// The largest batch (or sequence length) whose plan, or estimate, fits a budget.
    Fit(fit::Args),
    /// A transformer's memory from its config.json or sizes: weights, KV cache,
    /// activations, gradients, optimizer states.
    Estimate(estimate::Args),
    /// Does a graph's plan fit a budget or a device's free memory?
    Preflight(preflight::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Solve(args) => solve::run(args),
        Command::Check(args) => check::run(args),
        Command::Fit(args) => fit::run(args),
        Command::Estimate(args) => estimate::run(args),
        Command::Preflight(args) => preflight::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
