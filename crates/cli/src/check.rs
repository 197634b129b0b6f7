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
//! a `memplan plan --format json` file instead (`--align` must then be the alignment it was
//! made with), which lets any plan, hand-edited ones included, be checked on real bytes.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use memplan_cuda_arena::{
    CheckOptions, HalfFormat, HostArena, Layout, LayoutOptions, Region, Sampling, run_check,
};
use memplan_ir::{Graph, NodeId, TensorId};
use memplan_planner::{
    AliasKind, Plan, PlanStats, PlannedBuffer, PlannedWeight, PlannedWorkspace, ScheduleChoice,
    ScheduleMode, plan_graph,
};
use serde_json::Value;

use crate::plan::PlanningArgs;

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
    /// Check this plan (`memplan plan --format json` output) instead of planning.
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
    /// Print at most this many clobbered tensors.
    #[arg(long, default_value_t = 20)]
    max_report: usize,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let align = args.planning.align()?;
    let graph = args.planning.load("checking")?;
    let plan = match &args.plan {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            plan_from_json(&graph, &text, align)
                .with_context(|| format!("reading the plan in {}", path.display()))?
        }
        None => {
            let options = args.planning.options()?;
            plan_graph(&graph, &options)
                .with_context(|| format!("planning graph `{}`", graph.name))?
        }
    };
    let half_weights = match args.half_weights {
        HalfWeights::Off => None,
        HalfWeights::F16 => Some(HalfFormat::F16),
        HalfWeights::Bf16 => Some(HalfFormat::BF16),
    };
    let layout = Layout::new(
        &graph,
        &plan,
        &LayoutOptions {
            half_weights,
            ..LayoutOptions::default()
        },
    )
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
    let report = run_check(&graph, &layout, &mut arena, CheckOptions { sampling })?;
    let seconds = start.elapsed().as_secs_f64();

    let mut out = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "graph {}: {} steps, {} tensors",
        graph.name,
        report.steps,
        graph.tensors.len()
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
    if report.unplaced_reads > 0 {
        let _ = writeln!(
            out,
            "skipped {} reads of tensors outside the arena",
            report.unplaced_reads
        );
    }
    let code = if report.is_clean() {
        let _ = writeln!(out, "ok: no live tensor was clobbered ({seconds:.2} s)");
        ExitCode::SUCCESS
    } else {
        let _ = writeln!(
            out,
            "CLOBBERED: {} tensors do not hold their bytes ({seconds:.2} s)",
            report.clobbers.len()
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
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .context("writing to standard output")?;
    Ok(code)
}

/// Reads a plan JSON (`memplan plan --format json`): names become ids; the JSON has no
/// alignment, so `alignment` is the one it was made with, and the weight region ends after
/// its last weight (rounded up to the alignment).
fn plan_from_json(graph: &Graph, text: &str, alignment: u64) -> anyhow::Result<Plan> {
    let v: Value = serde_json::from_str(text).context("not JSON")?;
    let u64_field = |v: &Value, key: &str| -> anyhow::Result<u64> {
        v.get(key)
            .and_then(Value::as_u64)
            .with_context(|| format!("`{key}` is missing or not a non-negative integer"))
    };
    let tensor = |v: &Value, key: &str| -> anyhow::Result<TensorId> {
        let name = v
            .get(key)
            .and_then(Value::as_str)
            .with_context(|| format!("`{key}` is missing or not a string"))?;
        graph
            .find_tensor(name)
            .with_context(|| format!("the graph has no tensor `{name}`"))
    };
    let array = |key: &str| -> anyhow::Result<&Vec<Value>> {
        v.get(key)
            .and_then(Value::as_array)
            .with_context(|| format!("`{key}` is missing or not a list"))
    };
    let mut schedule = Vec::new();
    for n in array("schedule")? {
        let name = n.as_str().context("a schedule entry is not a string")?;
        let id: NodeId = graph
            .find_node(name)
            .with_context(|| format!("the graph has no node `{name}`"))?;
        schedule.push(id);
    }
    let mut buffers = Vec::new();
    for b in array("buffers")? {
        let alias_of = match b.get("alias_of") {
            None | Some(Value::Null) => None,
            Some(_) => Some(tensor(b, "alias_of")?),
        };
        let alias = match b.get("alias").and_then(Value::as_str) {
            None => None,
            Some("view") => Some(AliasKind::View),
            Some("inplace") => Some(AliasKind::InPlace),
            Some(other) => bail!("unknown alias kind `{other}`"),
        };
        let step = |key: &str| -> anyhow::Result<u32> {
            u32::try_from(u64_field(b, key)?).with_context(|| format!("`{key}` is too large"))
        };
        buffers.push(PlannedBuffer {
            tensor: tensor(b, "tensor")?,
            offset: u64_field(b, "offset")?,
            bytes: u64_field(b, "bytes")?,
            first: step("first")?,
            last: step("last")?,
            alias_of,
            alias,
        });
    }
    let mut workspaces = Vec::new();
    let no_workspaces = Vec::new();
    let listed = match v.get("workspaces") {
        None | Some(Value::Null) => &no_workspaces,
        Some(_) => array("workspaces")?,
    };
    for w in listed {
        let name = w
            .get("node")
            .and_then(Value::as_str)
            .context("a workspace's `node` is missing or not a string")?;
        workspaces.push(PlannedWorkspace {
            node: graph
                .find_node(name)
                .with_context(|| format!("the graph has no node `{name}`"))?,
            offset: u64_field(w, "offset")?,
            bytes: u64_field(w, "bytes")?,
            step: u32::try_from(u64_field(w, "step")?).context("`step` is too large")?,
        });
    }
    let mut weights = Vec::new();
    let mut weight_end: u64 = 0;
    for w in array("weights")? {
        let pw = PlannedWeight {
            tensor: tensor(w, "tensor")?,
            offset: u64_field(w, "offset")?,
            bytes: u64_field(w, "bytes")?,
        };
        weight_end = weight_end.max(
            pw.offset
                .checked_add(pw.bytes)
                .context("a weight's end overflows")?,
        );
        weights.push(pw);
    }
    let weight_bytes = weight_end
        .checked_next_multiple_of(alignment)
        .context("the weight region's size overflows")?;
    let count = |kind: AliasKind| buffers.iter().filter(|b| b.alias == Some(kind)).count() as u32;
    let stats = PlanStats {
        unaliased_lower_bound: 0,
        views: count(AliasKind::View),
        inplace: count(AliasKind::InPlace),
        storages: buffers.iter().filter(|b| b.alias.is_none()).count() as u32,
        placed_by: "plan file".to_owned(),
        proven_optimal: false,
        schedule: ScheduleChoice {
            mode: ScheduleMode::Given,
            chosen: "file",
            given_peak: 0,
            peak: 0,
            candidates: Vec::new(),
            exact: false,
        },
    };
    Ok(Plan {
        graph: v
            .get("graph")
            .and_then(Value::as_str)
            .unwrap_or(&graph.name)
            .to_owned(),
        arena_bytes: u64_field(&v, "arena_bytes")?,
        lower_bound_bytes: u64_field(&v, "lower_bound_bytes").unwrap_or(0),
        naive_bytes: u64_field(&v, "naive_bytes").unwrap_or(0),
        weight_bytes,
        alignment,
        schedule,
        buffers,
        weights,
        workspaces,
        stats,
    })
}
