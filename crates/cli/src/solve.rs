//! `memplan solve`: place the buffers of a packing problem in MiniMalloc's CSV format.
//!
//! Reads the problem (or solves an embedded example when no file is given), runs
//! [`packing::solve`], writes the solution as the same CSV rows plus an `offset` column to
//! `-o FILE` (through a temporary file in the same folder, renamed into place, so a reader
//! never sees half a file) or to stdout, and prints a one-line summary on stderr. Exit
//! status: 0 with a solution; 1 when nothing fits the capacity in time (nothing is written
//! then); 2 on errors, among them a solution the independent verifier rejects (which
//! [`packing::solve`] runs on every solution it returns, in every build).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use memplan_ir::ExactBytes;
use memplan_packing::{self as packing, Outcome, Strategy, csv};

/// MiniMalloc's README example (capacity 12), solved when no file is given.
const EXAMPLE: &str = include_str!("../data/minimalloc_input.12.csv");

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The problem: a CSV with columns id,lower,upper,size (optional alignment); buffer
    /// lifetimes are half-open [lower, upper). Without it, solves a small built-in example.
    problem: Option<PathBuf>,
    /// Packing strategy (`auto`: every heuristic, then the exact search while time allows).
    #[arg(long, default_value = "auto", value_parser = crate::plan::strategy_parser())]
    strategy: Strategy,
    /// The largest arena allowed (`1MiB`, `4096`, `2GB`): the first placement that fits
    /// answers it (add --minimize to search for a smaller one); exit status 1 if nothing
    /// fitting is found.
    #[arg(long, value_name = "SIZE", value_parser = memplan::estimate::parse_budget)]
    capacity: Option<u64>,
    /// Keep searching for a smaller arena after the heuristic, whatever the strategy, and
    /// after a placement within --capacity is found.
    #[arg(long)]
    minimize: bool,
    /// Stop improving once the arena is within this fraction of the lower bound (`0.001`:
    /// 0.1%), in [0, 1). The default, 0, stops only at the bound or when the budget runs out.
    #[arg(long, value_name = "FRACTION", value_parser = parse_gap, default_value = "0")]
    gap: packing::Gap,
    /// A cap on the time of the whole solve, in seconds (the heuristics always finish): the
    /// solve stops at the limit, or earlier when it has answered. The node budget
    /// (--node-limit) still bounds the search, except the search for a placement within
    /// --capacity, which runs until one fits or the limit.
    #[arg(long, value_name = "SECS")]
    time_limit: Option<f64>,
    /// Node budget of the exact search (the default budget, or 5,000,000 with --minimize).
    /// Bounded by it, the answer is the same on every machine.
    #[arg(long, value_name = "N")]
    node_limit: Option<u64>,
    /// Threads for the heuristic portfolio and the exact search, whose climb and bisection run
    /// side by side on two (0: every core). The answer does not depend on it.
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Accepted for compatibility: the engine verifies every solution it returns.
    #[arg(long, hide = true)]
    no_verify: bool,
    /// Accepted for compatibility: solutions are always verified.
    #[arg(long, hide = true)]
    verify: bool,
    /// Write the solution here (atomically) instead of standard output; `-` is standard
    /// output.
    #[arg(short = 'o', long = "output", value_name = "SOLUTION.csv")]
    output: Option<PathBuf>,
    /// Output format: the problem's CSV with an `offset` column, or JSON.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    format: Format,
    /// Also print, on standard error, every phase of the solve: the work it did and the
    /// bytes it gained.
    #[arg(long, short = 'v')]
    verbose: bool,
}

/// Output format of `memplan solve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The rows of the problem plus an `offset` column.
    Csv,
    /// The figures and every buffer's placement, as JSON.
    Json,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = memplan::solve::options(&memplan::solve::SolveSettings {
        strategy: args.strategy,
        capacity: args.capacity,
        minimize: args.minimize,
        time_limit: args.time_limit,
        node_limit: args.node_limit,
        gap: args.gap,
        threads: args.threads,
    })?;
    let (label, text) = match &args.problem {
        Some(path) if crate::ui::is_dash(path) => {
            ("standard input".to_owned(), crate::ui::read_text(path)?)
        }
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            (path.display().to_string(), text)
        }
        None => (
            "built-in example input.12.csv".to_owned(),
            EXAMPLE.to_owned(),
        ),
    };
    let problem = csv::read(&text)
        .with_context(|| format!("{label}: not a valid problem"))?
        .problem;
    // The exact search may take a while: a spinner from a second on (terminals only).
    let spinner = Some(crate::progress::Spinner::new("searching"));
    let outcome =
        packing::solve(&problem, &options).with_context(|| format!("{label}: cannot solve"));
    if let Some(s) = spinner {
        s.finish();
    }
    let outcome = outcome?;

    let Some(solution) = &outcome.solution else {
        let capacity = outcome.capacity.unwrap_or_default();
        if outcome.proven_infeasible {
            crate::ui::eprint_line(format_args!(
                "{label}: no placement fits the capacity of {} (lower bound {})",
                ExactBytes(capacity),
                ExactBytes(outcome.lower_bound)
            ));
        } else if outcome.exact_search_skipped {
            crate::ui::eprint_line(format_args!(
                "{label}: found no placement within the capacity of {} in {:.1?} \
                 (smallest found: {}; lower bound {}); the problem is too large for the exact \
                 search ({} buffers, at most {}), so the search over orders and local improvement had \
                 the budget",
                ExactBytes(capacity),
                outcome.elapsed,
                ExactBytes(outcome.arena),
                ExactBytes(outcome.lower_bound),
                problem.len(),
                packing::EXACT_SEARCH_MAX_BUFFERS
            ));
        } else {
            crate::ui::eprint_line(format_args!(
                "{label}: found no placement within the capacity of {} in {:.1?} \
                 (smallest found: {}; lower bound {}); try a larger --node-limit or --time-limit",
                ExactBytes(capacity),
                outcome.elapsed,
                ExactBytes(outcome.arena),
                ExactBytes(outcome.lower_bound)
            ));
        }
        return Ok(crate::ui::exit(crate::ui::NEGATIVE));
    };
    // `packing::solve` has run the verifier on the solution (and checked the capacity).
    // Where the gap to the bound is open and the figures are asked for, the stronger bound of
    // windows around the peak (a fixed node budget: the same figure on every machine).
    let window = (outcome.arena > outcome.lower_bound
        && (args.verbose || matches!(args.format, Format::Json)))
    .then(|| packing::window_bound(&problem, WINDOW_NODES));
    let rows = match args.format {
        Format::Csv => csv::write(&problem, Some(solution)).context("cannot write the solution")?,
        Format::Json => solution_json(&problem, solution, &outcome, window),
    };
    crate::ui::write_output(args.output.as_deref(), rows.as_bytes())?;
    if args.verbose {
        if let Some(window) = window {
            let ratio = outcome.arena as f64 / window.max(1) as f64;
            crate::ui::note(format_args!(
                "  window bound: {} ({ratio:.3}x; the exact search on windows of up to {} \
                 buffers around the peak and on up to {} buffers live at sampled times of \
                 highest load)",
                ExactBytes(window),
                packing::WINDOW_MAX_BUFFERS,
                packing::SAMPLE_MAX_BUFFERS
            ));
        }
        for line in phase_lines(&outcome) {
            crate::ui::note(line);
        }
    }
    crate::ui::note(summary(&label, &outcome, args.gap, args.minimize));
    Ok(crate::ui::exit(crate::ui::OK))
}

/// A `--gap`: a fraction of the lower bound in [`packing::Gap::RANGE`].
fn parse_gap(text: &str) -> Result<packing::Gap, String> {
    text.parse::<f64>()
        .ok()
        .and_then(packing::Gap::from_fraction)
        .ok_or_else(|| {
            format!(
                "{text:?} is not a fraction of the lower bound in {} (0, 0.001 for 0.1%, 0.05, ...)",
                packing::Gap::RANGE
            )
        })
}

/// The exact search's node budget for the window bound ([`packing::window_bound`]): a tenth
/// to a few tenths of a second.
const WINDOW_NODES: u64 = 200_000;

/// The solution as JSON: the figures (exact bytes), then each buffer's placement in row
/// order. No times, so the same problem gives the same bytes.
fn solution_json(
    problem: &packing::Problem,
    solution: &packing::Solution,
    o: &Outcome,
    window: Option<u64>,
) -> String {
    let buffers: Vec<serde_json::Value> = problem
        .ids()
        .zip(&problem.buffers)
        .zip(&solution.offsets)
        .map(|((id, b), offset)| {
            serde_json::json!({
                "id": problem.name(id), "lower": b.start, "upper": b.end, "size": b.size, "offset": offset,
            })
        })
        .collect();
    let v = serde_json::json!({
        "arena_bytes": o.arena,
        "lower_bound_bytes": o.lower_bound,
        "window_bound_bytes": window.unwrap_or(o.lower_bound),
        "capacity_bytes": o.capacity,
        "proven_optimal": o.proven_optimal,
        "produced_by": o.produced_by.to_string(),
        "phases": o.phases.iter().map(|p| serde_json::json!({
            "phase": p.producer.to_string(),
            "work": p.work,
            "arena_bytes": p.arena,
            "gained_bytes": p.gained,
            "rounds": p.rounds,
            "skipped": p.skipped.map(|reason| reason.to_string()),
        })).collect::<Vec<_>>(),
        "buffers": buffers,
    });
    let mut text = serde_json::to_string_pretty(&v).unwrap_or_default();
    text.push('\n');
    text
}

/// One line per phase: `  greedy-lifetime: work 1,234, arena 96 B, gained 0 B`.
fn phase_lines(outcome: &Outcome) -> Vec<String> {
    outcome
        .phases
        .iter()
        .map(|p| {
            let arena = match (p.arena, p.skipped) {
                (Some(a), _) => format!("arena {}", ExactBytes(a)),
                (None, Some(reason)) => format!("skipped ({reason})"),
                (None, None) => "given up (work cap, or above a better arena)".to_owned(),
            };
            let rounds = match p.producer {
                packing::Producer::Reordering => format!(", {} rounds", p.rounds),
                packing::Producer::LocalImprovement => format!(", {} moves kept", p.rounds),
                _ => String::new(),
            };
            format!(
                "  {}: work {}, {arena}, gained {}{rounds}",
                p.producer,
                memplan_ir::Grouped(p.work),
                ExactBytes(p.gained)
            )
        })
        .collect()
}

/// `label: greedy-size, arena 12 B, lower bound 12 B (1.000x), 0.2 ms, proven optimal`.
fn summary(label: &str, outcome: &Outcome, gap: packing::Gap, minimize: bool) -> String {
    let ratio = if outcome.lower_bound == 0 {
        1.0
    } else {
        outcome.arena as f64 / outcome.lower_bound as f64
    };
    let within = format!(
        "within the --gap of {}% of the bound",
        gap.fraction() * 100.0
    );
    let fitted = outcome
        .capacity
        .map(|c| format!("within the capacity of {}", ExactBytes(c)));
    let proof = if outcome.proven_optimal {
        "proven optimal"
    } else if let Some(fitted) = fitted.as_deref().filter(|_| !minimize) {
        fitted
    } else if gap != packing::Gap::ZERO && outcome.arena <= gap.accepted(outcome.lower_bound) {
        &within
    } else if outcome.exact_search_skipped {
        "not proven optimal (too large for the exact search)"
    } else {
        "not proven optimal"
    };
    format!(
        "{label}: {}, arena {}, lower bound {} ({ratio:.3}x), {:.1} ms, {proof}, verified",
        outcome.produced_by,
        ExactBytes(outcome.arena),
        ExactBytes(outcome.lower_bound),
        outcome.elapsed.as_secs_f64() * 1e3,
    )
}
