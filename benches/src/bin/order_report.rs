//! The ordering report: `--schedule memory` on the XLA graphs, the corpus and
//! training-shaped graphs, with its time, its arena, and the ratio to XLA's best order.
//!
//! ```text
//! cargo xtask order-report [--xla] [--corpus] [--training] [--runs N] [FILTER]
//! ```
//!
//! (`cargo run --release -p memplan-benches --bin order_report -- ...` is the same.) With no
//! section flag it prints all three. Every plan is checked by the plan verifier outside the
//! timing; a time is the median of `--runs` plans (default 3) on the wall clock, so it
//! includes everything `plan_graph` does (ordering, Concat elision, placement): `ms` with
//! `--schedule memory`, `given ms` with the same options in the graph's own order (the
//! difference is what choosing the order costs).
//!
//! - **XLA graphs** (`testdata/xla/graphs`): each JAX program in XLA's default order
//!   (`NAME`) and in its memory-optimized order (`NAME_xlamem`), planned as `memplan plan G
//!   --schedule memory --caller-inputs --caller-outputs --align 64` plans it. `xla default`
//!   and `xla mem-opt` are XLA's own peaks of live bytes on its two orders
//!   (`xla_peaks.csv`, measured from XLA's dumps); `ratio` is memplan's arena over the lower
//!   of the two; `bound` is the any-order bound and `gap` the arena's distance above it.
//! - **Corpus** (`testdata/graphs/json`): default options (inputs and outputs in the arena,
//!   256-byte alignment); the given order's arena beside the memory schedule's.
//! - **Training-shaped**: the forward graphs of some corpus models and transformer encoders
//!   of 24 and 600 layers, each joined with a backward mirrored from it
//!   (`memplan_benches::training_shaped`) by the two-graph training API, planned with the
//!   caller owning inputs and outputs.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use memplan_benches::{load_graphs, testdata, training_shaped};
use memplan_ir::GraphError as _;
use memplan_ir::{DType, Graph};
use memplan_planner::{
    Plan, PlanOptions, ScheduleMode, plan_forward_backward, plan_graph, verify_plan,
};

const MIB: f64 = 1024.0 * 1024.0;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut runs = 3usize;
    let mut sections = Vec::new();
    let mut filter = String::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--xla" | "--corpus" | "--training" => sections.push(a.clone()),
            "--runs" => match it.next().and_then(|v| v.parse().ok()) {
                Some(n) if n > 0 => runs = n,
                _ => {
                    eprintln!("error: --runs needs a positive number");
                    return ExitCode::FAILURE;
                }
            },
            other if other.starts_with("--") => {
                eprintln!("error: unknown argument {other:?}");
                return ExitCode::FAILURE;
            }
            other => filter = other.to_owned(),
        }
    }
    let all = sections.is_empty();
    let want = |s: &str| all || sections.iter().any(|x| x == s);
    let result = (|| -> Result<(), String> {
        if want("--xla") {
            xla(runs, &filter)?;
        }
        if want("--corpus") {
            corpus(runs, &filter)?;
        }
        if want("--training") {
            training(runs, &filter)?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One graph's figures: arenas, any-order bound, chosen order, median times.
struct Measured {
    arena: u64,
    bound: u64,
    chosen: String,
    time: Duration,
    /// The same plan in the graph's own order.
    given_arena: u64,
    given_time: Duration,
}

/// Plans `graph` with `options` (a memory schedule) and in its own order.
fn measure(
    name: &str,
    graph: &Graph,
    options: &PlanOptions,
    runs: usize,
) -> Result<Measured, String> {
    let given = options.clone().with_schedule(ScheduleMode::Given);
    let (given_plan, given_time) = timed(name, graph, &given, runs)?;
    let (plan, time) = timed(name, graph, options, runs)?;
    let c = &plan.stats.schedule;
    Ok(Measured {
        arena: plan.arena_bytes,
        bound: c.any_order_bound,
        chosen: format!("{}{}", c.chosen, if c.exact { " (exact)" } else { "" }),
        time,
        given_arena: given_plan.arena_bytes,
        given_time,
    })
}

/// The plan and the median time of `runs` plans; the plan passes the verifier.
fn timed(
    name: &str,
    graph: &Graph,
    options: &PlanOptions,
    runs: usize,
) -> Result<(Plan, Duration), String> {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        let plan =
            plan_graph(graph, options).map_err(|e| format!("{name}: {}", e.with_graph(graph)))?;
        times.push(t.elapsed());
        last = Some(plan);
    }
    let plan = last.ok_or_else(|| format!("{name}: no run"))?;
    verify_plan(graph, &plan).map_err(|e| {
        format!(
            "{name}: the plan fails the verifier: {}",
            e.with_graph(graph)
        )
    })?;
    times.sort();
    let median = times.get(times.len() / 2).copied().unwrap_or_default();
    Ok((plan, median))
}

fn mib(b: u64) -> String {
    format!("{:.2}", b as f64 / MIB)
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e3)
}

fn gap(m: &Measured) -> String {
    if m.bound == 0 {
        return "-".to_owned();
    }
    format!("{:+.1}%", (m.arena as f64 / m.bound as f64 - 1.0) * 100.0)
}

fn xla(runs: usize, filter: &str) -> Result<(), String> {
    let csv = std::fs::read_to_string(testdata().join("xla/graphs/xla_peaks.csv"))
        .map_err(|e| format!("xla_peaks.csv: {e}"))?;
    let mut peaks = std::collections::BTreeMap::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if let (Some(n), Some(d), Some(m)) = (f.first(), f.get(2), f.get(3))
            && let (Ok(d), Ok(m)) = (d.parse::<u64>(), m.parse::<u64>())
        {
            peaks.insert((*n).to_owned(), (d, m));
        }
    }
    println!(
        "## XLA graphs (`--schedule memory --caller-inputs --caller-outputs --align 64`), MiB\n"
    );
    println!(
        "| graph | nodes | xla default | xla mem-opt | memplan | ratio to xla best | bound | gap | ms | given ms | order |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let options = memplan_benches::xla_options();
    let mut worst: f64 = 0.0;
    for (name, graph) in load_graphs("xla/graphs", filter)? {
        let base = name.trim_end_matches("_xlamem");
        let Some(&(d, m)) = peaks.get(base) else {
            continue;
        };
        let r = measure(&name, &graph, &options, runs)?;
        let ratio = r.arena as f64 / d.min(m) as f64;
        worst = worst.max(ratio);
        println!(
            "| {name} | {} | {} | {} | {} | {ratio:.4} | {} | {} | {} | {} | {} |",
            graph.nodes().len(),
            mib(d),
            mib(m),
            mib(r.arena),
            mib(r.bound),
            gap(&r),
            ms(r.time),
            ms(r.given_time),
            r.chosen
        );
    }
    println!("\nLargest ratio to XLA's best: {worst:.4}\n");
    Ok(())
}

fn table_header() {
    println!("| graph | nodes | given | memory | bound | gap | ms | given ms | order |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
}

fn table_row(name: &str, graph: &Graph, r: &Measured) {
    println!(
        "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |",
        graph.nodes().len(),
        mib(r.given_arena),
        mib(r.arena),
        mib(r.bound),
        gap(r),
        ms(r.time),
        ms(r.given_time),
        r.chosen
    );
}

fn corpus(runs: usize, filter: &str) -> Result<(), String> {
    println!("## Corpus (default options), MiB\n");
    table_header();
    let memory = PlanOptions::default().with_schedule(ScheduleMode::Memory);
    for (name, graph) in load_graphs("graphs/json", filter)? {
        let r = measure(&name, &graph, &memory, runs)?;
        table_row(&name, &graph, &r);
    }
    println!();
    Ok(())
}

fn training(runs: usize, filter: &str) -> Result<(), String> {
    println!(
        "## Training-shaped graphs (forward + mirrored backward + SGD, caller-owned inputs and outputs), MiB\n"
    );
    table_header();
    let mut forwards: Vec<(String, Graph)> = Vec::new();
    for name in [
        "gpt2_b1",
        "light_resnet50_b1",
        "light_densenet121_b1",
        "smollm_135m_b1",
        "sd15_unet_b1",
    ] {
        let train = format!("{name}_train");
        if !train.contains(filter) {
            continue;
        }
        let p = testdata().join(format!("graphs/json/{name}.json"));
        let g = Graph::load_json(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        forwards.push((train, g));
    }
    for layers in [24usize, 600] {
        let name = format!("tfm{layers}_train");
        if !name.contains(filter) {
            continue;
        }
        let g = training_shaped::transformer(layers, 2048, 512, 512, 8, DType::BF16)
            .map_err(|e| format!("{name}: {e}"))?;
        forwards.push((name, g));
    }
    let options = PlanOptions::default()
        .with_schedule(ScheduleMode::Memory)
        .with_inputs_in_arena(false)
        .with_outputs_in_arena(false);
    for (name, forward) in forwards {
        let backward =
            training_shaped::backward_of(&forward).map_err(|e| format!("{name}: {e}"))?;
        let graph = plan_forward_backward(&forward, &backward, &options)
            .map_err(|e| format!("{name}: {}", e.with_graph(&forward)))?
            .joint;
        let r = measure(&name, &graph, &options, runs)?;
        table_row(&name, &graph, &r);
    }
    println!();
    Ok(())
}
