//! `memplan compare`: plan each graph under several configurations (packing strategies,
//! schedule modes, aliasing on or off) and tabulate, per graph, each one's arena, its
//! ratio to its own lower bound and its time, marking the smallest arena. Text, CSV,
//! markdown or JSON.
//!
//! Every plan passes the plan verifier before it is counted; one that does not is reported
//! and the exit status is 1. Rows are in a fixed order (graphs as given, folders sorted by
//! file name; then strategy, schedule, aliasing in the order asked), so the output is the
//! same on every run except the time column, which `--no-time` leaves out.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use memplan_ir::Bindings;
use memplan_ir::GraphError as _;
use memplan_packing::Strategy;
use memplan_planner::{PlanContext, PlanOptions, ScheduleMode, verify_plan};

use crate::load;
use crate::progress::Progress;
use crate::ui::{self, size};

/// Output format of `memplan compare`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
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

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Graph files (memplan JSON or ONNX) or folders of them (at any depth); without any,
    /// the embedded default graph.
    graphs: Vec<PathBuf>,
    /// Packing strategies, comma separated, or `all`.
    #[arg(long, default_value = "auto", value_name = "LIST")]
    strategies: String,
    /// Schedule modes, comma separated: given, memory.
    #[arg(long, default_value = "given", value_name = "LIST")]
    schedules: String,
    /// Aliasing (views and in-place writes), comma separated: on, off.
    #[arg(long, default_value = "on", value_name = "LIST")]
    aliasing: String,
    /// Alignment of every buffer offset in bytes (a power of two).
    #[arg(long, default_value_t = 256)]
    align: u64,
    /// Value of a shape symbol, NAME=VALUE (repeatable), for every graph that has it (a
    /// graph without the symbol ignores it; a symbol no graph has is an error).
    #[arg(long = "dim", value_parser = load::parse_dim)]
    dims: Vec<(String, u64)>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Leave the time column out (the rest of the output is the same on every run).
    #[arg(long)]
    no_time: bool,
    /// Write the table to FILE (atomically); `-` is standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

/// One configuration.
#[derive(Clone, Copy, Debug)]
struct Config {
    strategy: Strategy,
    schedule: ScheduleMode,
    aliasing: bool,
}

/// One row of the table.
#[derive(Clone, Debug)]
struct Row {
    graph: String,
    config: Config,
    arena: u64,
    lower_bound: u64,
    seconds: f64,
    best: bool,
}

impl Row {
    fn ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            1.0
        } else {
            #[allow(clippy::cast_precision_loss, reason = "a ratio for display")]
            let r = self.arena as f64 / self.lower_bound as f64;
            r
        }
    }
}

fn list<T>(
    text: &str,
    flag: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<T>,
) -> anyhow::Result<Vec<T>>
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
/// any depth, in path order.
fn graph_files(paths: &[PathBuf]) -> anyhow::Result<Vec<Option<PathBuf>>> {
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
fn graphs_under(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
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

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let strategies = list(&args.strategies, "--strategies", &Strategy::ALL, |s| {
        s.parse().ok()
    })
    .with_context(|| {
        format!(
            "(strategies: all, {})",
            Strategy::ALL.map(Strategy::name).join(", ")
        )
    })?;
    let schedules = list(
        &args.schedules,
        "--schedules",
        &[ScheduleMode::Given, ScheduleMode::Memory],
        |s| match s {
            "given" => Some(ScheduleMode::Given),
            "memory" => Some(ScheduleMode::Memory),
            _ => None,
        },
    )?;
    let aliasing = list(&args.aliasing, "--aliasing", &[true, false], |s| match s {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    })?;
    if !args.align.is_power_of_two() {
        bail!("--align {} is not a power of two", args.align);
    }
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
    let files = graph_files(&args.graphs)?;
    if files.iter().any(Option::is_none) {
        ui::note(format!(
            "no graph given: comparing on the embedded {}",
            load::DEFAULT_GRAPH_NAME
        ));
    }
    let total = (files.len() * configs.len()) as u64;
    let mut progress = Progress::new(total, "plans");
    let mut rows: Vec<Row> = Vec::new();
    let mut unsafe_plans = 0usize;
    let dims = load::unique_dims(&args.dims)?;
    let mut used = vec![false; dims.len()];
    // The planner's working memory, reused by every plan of every graph.
    let mut work = PlanContext::new();
    for file in &files {
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
        for &config in &configs {
            let options = PlanOptions {
                bindings: Bindings::new(),
                schedule: config.schedule,
                views: config.aliasing,
                inplace: config.aliasing,
                concat_elision: config.aliasing,
                alignment: args.align,
                strategy: config.strategy,
                ..PlanOptions::default()
            };
            let start = Instant::now();
            let plan = work.plan(&graph, &options).with_context(|| {
                format!("planning graph `{}` with {}", graph.name, describe(config))
            })?;
            let seconds = start.elapsed().as_secs_f64();
            if let Err(problems) = verify_plan(&graph, &plan) {
                ui::eprint_line(format_args!(
                    "error: the plan of `{}` with {} fails the verifier: {}",
                    graph.name,
                    describe(config),
                    problems.with_graph(&graph)
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
            progress.set((rows.len()) as u64);
        }
        let best = rows[first..].iter().map(|r| r.arena).min().unwrap_or(0);
        for r in &mut rows[first..] {
            r.best = r.arena == best;
        }
    }
    progress.finish();
    if let Some(((name, _), _)) = dims.iter().zip(&used).find(|(_, used)| !**used) {
        bail!("--dim {name}: no graph compared has a symbol `{name}`");
    }
    let time = !args.no_time;
    let text = match args.format {
        Format::Text => text_table(&rows, time),
        Format::Csv => csv_table(&rows, time),
        Format::Markdown => markdown_table(&rows, time),
        Format::Json => json_rows(&rows, time),
    };
    ui::write_output(args.output.as_deref(), text.as_bytes())?;
    Ok(if unsafe_plans > 0 {
        ui::exit(ui::NEGATIVE)
    } else {
        ui::exit(ui::OK)
    })
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
