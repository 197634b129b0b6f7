//! `memplan`: the command line.
//!
//! Each subcommand lives in its own module with an `Args` struct and a `run` function that
//! returns the process exit code. Errors print as one `error:` line (with their causes) and
//! exit with status 2; a check that ran and found a problem exits with status 1.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod inspect;
mod load;
mod output;
mod plan;
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Solve(args) => solve::run(args),
        Command::Check(args) => check::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
