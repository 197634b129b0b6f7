//! `memplan compare`: plan each graph under several configurations (packing strategies,
//! schedule modes, aliasing on or off) and tabulate, per graph, each one's arena, its
//! ratio to its own lower bound and its time, marking the smallest arena. Text, CSV,
//! markdown or JSON.
//!
//! Every plan passes the plan verifier before it is counted; one that does not is reported
//! and the exit status is 1. With fusions ([`Shared::fuse`]) every configuration plans the
//! engine's fused kernels (the rewrite verified, and timed with the plan). Rows are in a
//! fixed order (graphs as given, folders sorted by file name; then strategy, schedule,
//! aliasing in the order asked), so the output is the same on every run except the time
//! column, which `--no-time` leaves out.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use memplan_ir::Bindings;
use memplan_ir::GraphError as _;
use memplan_packing::Strategy;
use memplan_planner::{
    AttentionKernel, Fusions, PlanContext, PlanOptions, ScheduleMode, fuse_graph, verify_plan,
};

use crate::{Context, Notes, Result, bail, load, size};

/// Output format of `memplan compare`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Aligned tables, one per graph.
    Text,
    /// One row per configuration, with a header.
    Csv,
    /// One markdown table.
    Markdown,
    /// A JSON array of rows.
    Json,
}

/// One configuration.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The packing strategy.
    pub strategy: Strategy,
    /// The schedule mode.
    pub schedule: ScheduleMode,
    /// Views, in-place writes and Concat elision on or off.
    pub aliasing: bool,
}

/// One row of the table.
#[derive(Clone, Debug)]
pub struct Row {
    /// The graph's name.
    pub graph: String,
    /// The configuration.
    pub config: Config,
    /// Its arena.
    pub arena: u64,
    /// The lower bound of its schedule and aliasing.
    pub lower_bound: u64,
    /// Planning time.
    pub seconds: f64,
    /// The smallest arena of the graph.
    pub best: bool,
}

impl Row {
    /// The arena over the lower bound (1 when the bound is 0).
    pub fn ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            1.0
        } else {
            #[allow(clippy::cast_precision_loss, reason = "a ratio for display")]
            let r = self.arena as f64 / self.lower_bound as f64;
            r
        }
    }
}

fn list<T>(text: &str, flag: &str, all: &[T], parse: impl Fn(&str) -> Option<T>) -> Result<Vec<T>>
where
    T: Copy,
{
    if text.trim() == "all" {
        return Ok(all.to_vec());
    }
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match parse(item) {
            Some(v) => out.push(v),
            None => bail!("{flag}: unknown value `{item}`"),
        }
    }
    if out.is_empty() {
        bail!("{flag} needs at least one value");
    }
    Ok(out)
}

/// The graph files named by `paths`: files as given, folders' `.json` and `.onnx` files at
/// any depth, in path order; `None` (the embedded default graph) when there are no paths.
pub fn graph_files(paths: &[PathBuf]) -> Result<Vec<Option<PathBuf>>> {
    if paths.is_empty() {
        return Ok(vec![None]);
    }
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found = Vec::new();
            graphs_under(p, &mut found)?;
            found.sort();
            if found.is_empty() {
                bail!(
                    "{} holds no .json or .onnx graph (in it or its folders)",
                    p.display()
                );
            }
            out.extend(found.into_iter().map(Some));
        } else {
            out.push(Some(p.clone()));
        }
    }
    Ok(out)
}

/// The `.json` and `.onnx` files under `dir`, its folders' too (symbolic links to folders
/// are not followed, so a loop cannot trap the walk).
fn graphs_under(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("reading the folder {}", dir.display()))?;
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            graphs_under(&path, out)?;
        } else if path.is_file()
            && path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json") || e.eq_ignore_ascii_case("onnx"))
        {
            out.push(path);
        }
    }
    Ok(())
}

/// The configurations: every strategy × schedule × aliasing named (comma-separated lists,
/// or `all`), in that order.
pub fn configs(strategies: &str, schedules: &str, aliasing: &str) -> Result<Vec<Config>> {
    let strategies = list(strategies, "--strategies", &Strategy::ALL, |s| {
        s.parse().ok()
    })
    .with_context(|| {
        format!(
            "(strategies: all, {})",
            Strategy::ALL.map(Strategy::name).join(", ")
        )
    })?;
    let schedules = list(
        schedules,
        "--schedules",
        &[ScheduleMode::Given, ScheduleMode::Memory],
        |s| match s {
            "given" => Some(ScheduleMode::Given),
            "memory" => Some(ScheduleMode::Memory),
            _ => None,
        },
    )?;
    let aliasing = list(aliasing, "--aliasing", &[true, false], |s| match s {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    })?;
    let mut configs = Vec::new();
    for &strategy in &strategies {
        for &schedule in &schedules {
            for &aliasing in &aliasing {
                configs.push(Config {
                    strategy,
                    schedule,
                    aliasing,
                });
            }
        }
    }
    Ok(configs)
}

/// What every configuration of [`compare`] shares: the alignment, and the kernels the engine
/// runs (`--fuse`, `--attention`).
#[derive(Clone, Copy, Debug)]
pub struct Shared {
    /// Alignment of every offset (a power of two).
    pub align: u64,
    /// The fused kernels the engine runs; the rewrite is checked and timed with the plan.
    pub fuse: Fusions,
    /// The kernel fused attention ops run with.
    pub attention: AttentionKernel,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            align: 256,
            fuse: Fusions::NONE,
            attention: AttentionKernel::Eager,
        }
    }
}

/// What [`compare`] found: the rows, and how many plans failed the verifier.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// One row per graph and configuration, graphs in order, configurations in order.
    pub rows: Vec<Row>,
    /// Plans the verifier rejected (each reported to `problems`).
    pub unsafe_plans: usize,
}

/// Plans each graph of `files` (`None`: the embedded default) under each configuration,
/// every plan checked by the verifier (a rejection goes to `problems` as an `error:` line);
/// `progress` hears the plans done and the plans in all. Each graph takes the `dims` of the
/// symbols it has; a symbol no graph has is an error.
pub fn compare(
    files: &[Option<PathBuf>],
    configs: &[Config],
    shared: Shared,
    dims: &[(String, u64)],
    progress: &mut dyn FnMut(u64, u64),
    problems: &mut dyn Notes,
) -> Result<Comparison> {
    let align = shared.align;
    if !align.is_power_of_two() {
        bail!("--align {align} is not a power of two");
    }
    let total = (files.len() * configs.len()) as u64;
    let mut rows: Vec<Row> = Vec::new();
    let mut unsafe_plans = 0usize;
    let dims = load::unique_dims(dims)?;
    let mut used = vec![false; dims.len()];
    // The planner's working memory, reused by every plan of every graph.
    let mut work = PlanContext::new();
    for file in files {
        // Each graph takes the --dim values of the symbols it has.
        let raw = load::load_graph(file.as_deref())?;
        let mine: Vec<(String, u64)> = dims
            .iter()
            .zip(&mut used)
            .filter(|((name, _), _)| raw.find_symbol(name).is_some())
            .map(|(d, used)| {
                *used = true;
                d.clone()
            })
            .collect();
        let graph = load::bind_dims(raw, &mine, true)?;
        let first = rows.len();
        for &config in configs {
            let options = PlanOptions::default()
                .with_bindings(Bindings::new())
                .with_schedule(config.schedule)
                .with_views(config.aliasing)
                .with_inplace(config.aliasing)
                .with_concat_elision(config.aliasing)
                .with_alignment(align)
                .with_strategy(config.strategy)
                .with_fuse(shared.fuse)
                .with_attention(shared.attention);
            let start = Instant::now();
            // The time counts the rewrite too.
            let fused = if shared.fuse.is_none() {
                None
            } else {
                Some(
                    fuse_graph(&graph, &options)
                        .map_err(crate::error::named(&graph))
                        .with_context(|| {
                            format!("fusing graph `{}` with {}", graph.name, describe(config))
                        })?,
                )
            };
            let planned = fused.as_ref().map_or(&graph, |f| &f.graph);
            let plan = work
                .plan(planned, &options)
                .map_err(crate::error::named(planned))
                .with_context(|| {
                    format!("planning graph `{}` with {}", graph.name, describe(config))
                })?;
            let seconds = start.elapsed().as_secs_f64();
            if fused.is_some()
                && let Err(e) = crate::plan::verify_fused(&graph, planned)
            {
                problems.note(format!("error: {e}"));
                unsafe_plans += 1;
            }
            if let Err(problem) = verify_plan(planned, &plan) {
                problems.note(format!(
                    "error: the plan of `{}` with {} fails the verifier: {}",
                    graph.name,
                    describe(config),
                    problem.with_graph(planned)
                ));
                unsafe_plans += 1;
            }
            rows.push(Row {
                graph: graph.name.clone(),
                config,
                arena: plan.arena_bytes,
                lower_bound: plan.lower_bound_bytes,
                seconds,
                best: false,
            });
            progress(rows.len() as u64, total);
        }
        let best = rows[first..].iter().map(|r| r.arena).min().unwrap_or(0);
        for r in &mut rows[first..] {
            r.best = r.arena == best;
        }
    }
    if let Some(((name, _), _)) = dims.iter().zip(&used).find(|(_, used)| !**used) {
        bail!("--dim {name}: no graph compared has a symbol `{name}`");
    }
    Ok(Comparison { rows, unsafe_plans })
}

/// The table in `format`, with the time column unless `time` is off.
pub fn table(rows: &[Row], format: Format, time: bool) -> String {
    match format {
        Format::Text => text_table(rows, time),
        Format::Csv => csv_table(rows, time),
        Format::Markdown => markdown_table(rows, time),
        Format::Json => json_rows(rows, time),
    }
}

fn describe(c: Config) -> String {
    format!(
        "strategy {}, schedule {}, aliasing {}",
        c.strategy.name(),
        c.schedule.name(),
        on_off(c.aliasing)
    )
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

fn millis(seconds: f64) -> String {
    if seconds < 10.0 {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        format!("{seconds:.1} s")
    }
}

fn text_table(rows: &[Row], time: bool) -> String {
    let mut s = String::new();
    let mut last: Option<&str> = None;
    for r in rows {
        if last != Some(r.graph.as_str()) {
            if last.is_some() {
                s.push('\n');
            }
            let _ = writeln!(s, "{}", r.graph);
            let _ = write!(
                s,
                "  {:<16} {:<8} {:<8} {:>12} {:>12} {:>8}",
                "strategy", "schedule", "aliasing", "arena", "lower bound", "ratio"
            );
            if time {
                let _ = write!(s, " {:>10}", "time");
            }
            s.push('\n');
            last = Some(r.graph.as_str());
        }
        let _ = write!(
            s,
            "  {:<16} {:<8} {:<8} {:>12} {:>12} {:>7.3}x",
            r.config.strategy.name(),
            r.config.schedule.name(),
            on_off(r.config.aliasing),
            size(r.arena),
            size(r.lower_bound),
            r.ratio()
        );
        if time {
            let _ = write!(s, " {:>10}", millis(r.seconds));
        }
        if r.best {
            s.push_str("  best");
        }
        s.push('\n');
    }
    s.push_str(
        "\nratio: the arena over the lower bound of its own schedule and aliasing (1.000x: no placement can do better); best: the smallest arena of the graph\n",
    );
    s
}

/// The columns of a row for CSV (`human` false: exact bytes, plain ratio) or markdown
/// (`human` true: sizes in human units, `1.000x`), escaped for the format.
fn cells(r: &Row, time: bool, human: bool) -> Vec<String> {
    let bytes = |b: u64| if human { size(b) } else { b.to_string() };
    let mut out = vec![
        if human {
            r.graph.replace('|', "\\|")
        } else {
            csv_field(&r.graph)
        },
        r.config.strategy.name().to_owned(),
        r.config.schedule.name().to_owned(),
        on_off(r.config.aliasing).to_owned(),
        bytes(r.arena),
        bytes(r.lower_bound),
        if human {
            format!("{:.3}x", r.ratio())
        } else {
            format!("{:.4}", r.ratio())
        },
    ];
    if time {
        out.push(if human {
            millis(r.seconds)
        } else {
            format!("{:.6}", r.seconds)
        });
    }
    out.push(match (human, r.best) {
        (true, true) => "**best**".to_owned(),
        (true, false) => String::new(),
        (false, best) => best.to_string(),
    });
    out
}

fn csv_table(rows: &[Row], time: bool) -> String {
    let mut s =
        String::from("graph,strategy,schedule,aliasing,arena_bytes,lower_bound_bytes,ratio");
    if time {
        s.push_str(",seconds");
    }
    s.push_str(",best\n");
    for r in rows {
        let _ = writeln!(s, "{}", cells(r, time, false).join(","));
    }
    s
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn markdown_table(rows: &[Row], time: bool) -> String {
    let mut s =
        String::from("| graph | strategy | schedule | aliasing | arena | lower bound | ratio |");
    if time {
        s.push_str(" time |");
    }
    s.push_str(" best |\n|---|---|---|---|---:|---:|---:|");
    if time {
        s.push_str("---:|");
    }
    s.push_str("---|\n");
    for r in rows {
        let _ = writeln!(s, "| {} |", cells(r, time, true).join(" | "));
    }
    s
}

fn json_rows(rows: &[Row], time: bool) -> String {
    let items: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let mut v = serde_json::json!({
                "graph": r.graph,
                "strategy": r.config.strategy.name(),
                "schedule": r.config.schedule.name(),
                "aliasing": r.config.aliasing,
                "arena_bytes": r.arena,
                "lower_bound_bytes": r.lower_bound,
                "ratio": (r.ratio() * 1e4).round() / 1e4,
            });
            if time && let Some(map) = v.as_object_mut() {
                map.insert("seconds".to_owned(), serde_json::json!(r.seconds));
            }
            if let Some(map) = v.as_object_mut() {
                map.insert("best".to_owned(), serde_json::json!(r.best));
            }
            v
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&items).unwrap_or_default();
    text.push('\n');
    text
}
