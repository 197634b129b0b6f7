//! `memplan check`: plan a graph (or read a plan JSON), execute the plan on a host arena with
//! the byte-pattern check, and report whether any live tensor was clobbered.
//!
//! Every node writes a distinct pattern into its outputs (views and in-place outputs write
//! through their storage) and checks, before it reads, that each input still holds its
//! writer's pattern; graph outputs are checked once more after the last step. Exit status: 0
//! when every byte held, 1 when a tensor was clobbered, 2 on an error (the plan could not be
//! made, read or laid out).
//!
//! The planning options are those of `memplan plan`. With `--plan FILE` the plan is read from
//! a `memplan plan --format json` file instead (with the alignment, bindings and aliasing
//! policy it records), which lets any plan, hand-edited ones included, be checked. Either
//! way the plan verifier runs first: a plan it rejects is reported (tensors by name) and the
//! exit status is 1 without running the bytes.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use memplan_cuda_arena::{
    CheckOptions, HalfFormat, HostArena, Layout, LayoutOptions, Region, Sampling,
    run_check_observed,
};
use memplan_planner::{Plan, plan_graph, verify_plan};

use crate::plan::PlanningArgs;
use crate::progress::Progress;

/// Storage of `f32` weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HalfWeights {
    /// As planned (full precision).
    Off,
    /// In a half region as binary16.
    F16,
    /// In a half region as bfloat16.
    Bf16,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    planning: PlanningArgs,
    /// Check this plan (`memplan plan --format json` output; `-` reads standard input)
    /// instead of planning.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Store f32 weights at half precision in a side region.
    #[arg(long, value_enum, default_value_t = HalfWeights::Off)]
    half_weights: HalfWeights,
    /// Check the ends of every read and one block per stride instead of every byte
    /// (`--sample 65536`: a 4 KiB block every 64 KiB). Writes stay whole.
    #[arg(long, value_name = "STRIDE")]
    sample: Option<u64>,
    /// Threads for writing and checking large tensors (default: the machine's, at most 8).
    #[arg(long)]
    threads: Option<usize>,
    /// Print at most this many verifier problems and clobbered tensors.
    #[arg(long, default_value_t = 20)]
    max_report: usize,
    /// Write and check the weights too (by default only the activation arena is
    /// materialised: no activation write can reach the weight region).
    #[arg(long)]
    check_weights: bool,
    /// Fail on aliases the check cannot confirm (custom ops) instead of trusting them.
    #[arg(long)]
    strict: bool,
    /// Output format (JSON: the figures, the problems and the clobbered tensors).
    #[arg(long, value_enum, default_value_t = crate::plan::Format::Text)]
    format: crate::plan::Format,
    #[command(flatten)]
    training: crate::training::TrainingArgs,
}

use crate::ui::size as mib;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut graph = args.planning.load("checking")?;
    let options = args.planning.options()?;
    // A training step: derived from the forward graph, as asked or as the plan file records.
    let plan_text = match &args.plan {
        Some(path) => Some(crate::ui::read_text(path)?),
        None => None,
    };
    let training = match &plan_text {
        Some(text) => crate::training::options_from_plan(text, options.clone())?,
        None => args.training.options(&options)?,
    };
    let mut derived_plan = None;
    if let Some(training) = &training {
        let step = memplan_planner::plan_training(&graph, training)
            .with_context(|| format!("planning the training step of graph `{}`", graph.name))?;
        graph = step.graph;
        derived_plan = Some(step.plan);
    }
    let plan = match &args.plan {
        Some(path) => {
            let text = plan_text.unwrap_or_default();
            let plan = Plan::from_json(&graph, &text)
                .with_context(|| format!("reading the plan in {}", path.display()))?;
            // A plan of another graph is bad input, not an unsafe plan.
            plan.settings.bindings_for(&graph).map_err(|name| {
                anyhow::anyhow!(
                    "the plan in {} binds symbol `{name}`, which graph `{}` does not have",
                    path.display(),
                    graph.name
                )
            })?;
            plan
        }
        None => match derived_plan {
            Some(plan) => plan,
            None => plan_graph(&graph, &options)
                .with_context(|| format!("planning graph `{}`", graph.name))?,
        },
    };
    // The plan verifier first: a plan it rejects is unsafe whatever the bytes say. The
    // pattern check still runs where the plan can be laid out, to show what gets clobbered.
    let verdict = verify_plan(&graph, &plan);
    let json = args.format == crate::plan::Format::Json;
    let problem_lines: Vec<String> = match &verdict {
        Err(problems) => problems.0.iter().map(ToString::to_string).collect(),
        Ok(()) => Vec::new(),
    };
    if let Err(problems) = &verdict
        && !json
    {
        let n = problems.0.len();
        let mut text = format!(
            "UNSAFE: the plan has {n} problem{}:\n",
            if n == 1 { "" } else { "s" }
        );
        for p in problems.0.iter().take(args.max_report) {
            text.push_str(&format!("  - {p}\n"));
        }
        if n > args.max_report {
            text.push_str(&format!(
                "  ... and {} more problems\n",
                n - args.max_report
            ));
        }
        std::io::stdout()
            .lock()
            .write_all(text.as_bytes())
            .context("writing to standard output")?;
    }
    let half_weights = match args.half_weights {
        HalfWeights::Off => None,
        HalfWeights::F16 => Some(HalfFormat::F16),
        HalfWeights::Bf16 => Some(HalfFormat::BF16),
    };
    let layout_options = LayoutOptions { half_weights };
    // The verifier has run (above): lay the plan out without running it again. A plan it
    // rejects is still executed, so that its bytes show what goes wrong.
    let rejected = verdict.is_err();
    let layout = Layout::new_unverified(&graph, &plan, &layout_options)
        .with_context(|| format!("laying out the plan of `{}`", graph.name))?;
    let sampling = match args.sample {
        None => Sampling::Full,
        Some(0) => bail!("--sample needs a stride above 0"),
        Some(stride) => Sampling::Sampled {
            block: 4096.min(stride),
            stride,
        },
    };
    let start = Instant::now();
    let mut arena = HostArena::new(layout.clone()).context("allocating the host arena")?;
    if let Some(n) = args.threads {
        arena.set_threads(n);
    }
    let options = CheckOptions {
        sampling,
        skip_weights: !args.check_weights,
        strict: args.strict,
        salt: None,
    };
    let mut progress = Progress::new(plan.schedule.len() as u64, "steps checked");
    let total_steps = plan.schedule.len();
    let report = run_check_observed(
        &graph,
        &layout,
        &mut arena,
        options,
        &plan.settings.op_table,
        &mut |done, _| progress.set(u64::from(done)),
    )?;
    progress.finish();
    let seconds = start.elapsed().as_secs_f64();

    let mut out = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "graph {}: {} steps, {} tensors",
        graph.name,
        report.steps,
        graph.tensors().len()
    );
    let _ = writeln!(
        out,
        "arena {} + weights {}{}",
        mib(layout.region_bytes(Region::Arena)),
        mib(layout.region_bytes(Region::Weights)),
        match layout.half_format() {
            Some(f) => format!(
                " + half weights {} ({:?})",
                mib(layout.region_bytes(Region::Half)),
                f
            ),
            None => String::new(),
        }
    );
    let _ = writeln!(
        out,
        "wrote {} tensors ({}), checked {} reads ({}{})",
        report.writes,
        mib(report.bytes_written),
        report.reads,
        mib(report.bytes_checked),
        if report.sampled {
            ", sampled"
        } else {
            ", every byte"
        }
    );
    if report.weight_reads_skipped > 0 {
        let _ = writeln!(
            out,
            "weights not materialised: {} weight reads skipped (--check-weights checks them)",
            report.weight_reads_skipped
        );
    }
    for line in report.render_trusted(&graph) {
        let _ = writeln!(out, "{line}");
    }
    if report.unplaced_reads > 0 {
        let _ = writeln!(
            out,
            "skipped {} reads of tensors outside the arena",
            report.unplaced_reads
        );
    }
    let code = if report.is_clean() && !rejected {
        let _ = writeln!(out, "ok: no live tensor was clobbered ({seconds:.2} s)");
        ExitCode::SUCCESS
    } else if report.is_clean() {
        let _ = writeln!(
            out,
            "no live tensor was clobbered in this run, but the plan verifier rejects the plan ({seconds:.2} s)"
        );
        ExitCode::from(1)
    } else {
        let _ = writeln!(
            out,
            "CLOBBERED: {} tensors do not hold their bytes ({seconds:.2} s)",
            report.clobbers.len() + report.bad_views.len()
        );
        let lines = report.render_clobbers(&graph);
        for line in lines.iter().take(args.max_report) {
            let _ = writeln!(out, "  {line}");
        }
        if lines.len() > args.max_report {
            let _ = writeln!(out, "  ... and {} more", lines.len() - args.max_report);
        }
        ExitCode::from(1)
    };
    if json {
        let v = serde_json::json!({
            "graph": graph.name,
            "steps": total_steps,
            "tensors": graph.tensors().len(),
            "arena_bytes": layout.region_bytes(Region::Arena),
            "weight_bytes": layout.region_bytes(Region::Weights),
            "half_weight_bytes": layout.region_bytes(Region::Half),
            "writes": report.writes,
            "bytes_written": report.bytes_written,
            "reads": report.reads,
            "bytes_checked": report.bytes_checked,
            "sampled": report.sampled,
            "weight_reads_skipped": report.weight_reads_skipped,
            "verifier_problems": problem_lines,
            "clobbered": report.render_clobbers(&graph),
            "ok": report.is_clean() && !rejected,
        });
        out = serde_json::to_string_pretty(&v)?;
        out.push('\n');
    }
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .context("writing to standard output")?;
    Ok(code)
}
