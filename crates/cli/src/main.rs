//! `memplan`: the command line.
//!
//! Each subcommand lives in its own module with an `Args` struct and a `run` function that
//! returns the process exit code. Exit codes are the same on every command (see [`ui`]): 0
//! ok, 1 a negative answer (an unsafe plan, an infeasible capacity, a plan that does not
//! fit), 2 bad input or usage (errors print as one `error:` report, each cause once), and
//! 3 when `memplan fit` finds nothing that fits.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod compare_cmd;
mod estimate;
mod fit_cmd;
mod inspect_cmd;
mod model_args;
mod plan;
mod preflight;
mod progress;
mod solve;
mod training_args;
mod ui;

/// Plan, place and track the memory of ML computation graphs.
#[derive(Debug, Parser)]
#[command(
    name = "memplan",
    version,
    about,
    after_help = concat!(
        "Examples:\n",
        "  memplan plan                              plan the embedded DenseNet-121\n",
        "  memplan plan model.onnx --html plan.html  plan a model and draw the plan\n",
        "  memplan fit model.onnx --symbol batch --budget 24GiB\n",
        "  memplan compare testdata/graphs/json --strategies all\n",
        "\n",
        "Exit codes (every command):\n",
        "  0  ok\n",
        "  1  a negative answer: an unsafe plan, an infeasible capacity, a plan that does not fit\n",
        "  2  bad input or usage\n",
        "  3  memplan fit: not even the smallest value fits"
    )
)]
struct Cli {
    /// Print only results and errors: no notes, no progress bars.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// The exit codes, under every command's help.
macro_rules! exit_codes {
    () => {
        "\nExit codes: 0 ok, 1 a negative answer, 2 bad input or usage (3: memplan fit found nothing that fits)."
    };
}

#[derive(Debug, Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per process; boxing the arguments buys nothing"
)]
enum Command {
    /// Summarize a graph: nodes, tensors, bytes by kind, largest tensors, op histogram.
    #[command(after_help = concat!(
        "Examples:\n",
        "  memplan inspect model.onnx\n",
        "  memplan inspect gpt2.json                  sizes as formulas: 4*batch*seq*768\n",
        "  memplan inspect gpt2.json --dim batch=8 --dim seq=512 --format json\n",
        exit_codes!()
    ))]
    Inspect(inspect_cmd::Args),
    /// Plan a graph's memory: schedule, lifetimes, aliasing and arena offsets.
    #[command(after_help = concat!(
        "Examples:\n",
        "  memplan plan                               the embedded DenseNet-121\n",
        "  memplan plan model.onnx --svg plan.svg --html plan.html\n",
        "  memplan plan gpt2.json --dim batch=8 --dim seq=512 --schedule memory\n",
        "  memplan plan model.onnx --format json -o plan.json\n",
        "  cat graph.json | memplan plan - --format json -o -\n",
        exit_codes!()
    ))]
    Plan(plan::Args),
    /// Solve a packing problem in MiniMalloc's CSV format.
    #[command(after_help = concat!(
        "Examples:\n",
        "  memplan solve                              the built-in example\n",
        "  memplan solve problem.csv -o solution.csv\n",
        "  memplan solve problem.csv --capacity 1MiB --time-limit 10\n",
        exit_codes!()
    ))]
    Solve(solve::Args),
    /// Plan a graph and execute the plan on a host arena with a byte-pattern check.
    #[command(after_help = concat!(
        "Examples:\n",
        "  memplan check model.onnx\n",
        "  memplan check model.onnx --plan plan.json  check a saved (or hand-edited) plan\n",
        "  memplan check big.onnx --sample 65536      check one block per 64 KiB\n",
        exit_codes!()
    ))]
    Check(check::Args),
    /// The largest batch (or sequence length) whose plan, or estimate, fits a budget.
    #[command(after_help = concat!(
        "Examples:\n",
        "  memplan fit gpt2.json --symbol batch --dim seq=512 --budget 24GiB\n",
        "  memplan fit --config config.json --symbol seq --batch 4 --budget 80GiB --dtype bf16\n",
        exit_codes!()
    ))]
    Fit(fit_cmd::Args),
    /// A transformer's memory from its config.json or sizes: weights, KV cache,
    /// activations, gradients, optimizer states.
    #[command(after_help = concat!(
        "Examples:\n",
        "  memplan estimate --config config.json --batch 8 --seq 2048 --dtype bf16\n",
        "  memplan estimate --config config.json --training adamw --checkpointing\n",
        "  memplan estimate --arch llama --layers 32 --hidden 4096 --heads 32 --intermediate 11008 --vocab 32000\n",
        exit_codes!()
    ))]
    Estimate(estimate::Args),
    /// Does a graph's plan fit a budget or a device's free memory?
    #[command(after_help = concat!(
        "Examples:\n",
        "  memplan preflight model.onnx --budget 8GiB\n",
        "  memplan preflight gpt2.json --dim batch=64 --dim seq=512 --budget 24GiB --symbol batch\n",
        exit_codes!()
    ))]
    Preflight(preflight::Args),
    /// Compare strategies, schedules and aliasing on one graph or many.
    #[command(after_help = concat!(
        "Examples:\n",
        "  memplan compare model.onnx\n",
        "  memplan compare testdata/graphs/json --strategies all --schedules given,memory\n",
        "  memplan compare a.json b.json --aliasing on,off --format csv --no-time\n",
        exit_codes!()
    ))]
    Compare(compare_cmd::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    ui::set_quiet(cli.quiet);
    let result = match cli.command {
        Command::Inspect(args) => inspect_cmd::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Solve(args) => solve::run(args),
        Command::Check(args) => check::run(args),
        Command::Fit(args) => fit_cmd::run(args),
        Command::Estimate(args) => estimate::run(args),
        Command::Preflight(args) => preflight::run(args),
        Command::Compare(args) => compare_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            ui::eprint_line(format_args!("error: {}", ui::error_report(&err)));
            ui::exit(ui::BAD_INPUT)
        }
    }
}
