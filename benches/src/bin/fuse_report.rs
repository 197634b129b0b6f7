//! The fusion report: what `--fuse all --attention flash` costs in planning time, and what it
//! saves, on every corpus graph (`testdata/graphs/json`, the SD 1.5 UNet among them).
//!
//! ```text
//! cargo xtask fuse-report [--runs N] [--memory] [FILTER]
//! ```
//!
//! (`cargo run --release -p memplan-benches --bin fuse_report -- ...` is the same.) Each graph
//! is planned with the default options and `--attention flash`, without fusions and with
//! every fusion (`--memory`: with the memory-aware schedule too), the two alternating run by
//! run so that a loaded machine slows both alike; a time is the median of `--runs` plans
//! (default 5) on the wall clock and includes everything `plan_graph` does (with fusions:
//! the rewrite and the `constants` fusion's measurements; `of which fusing` times the
//! rewrite alone, the rest being the plan of another graph). `ratio` is the fused time over
//! the plain one; `CPU ratio` the same for the process's CPU time (all threads: a shared,
//! loaded machine stretches wall times by bursts that CPU time does not see). The last line
//! gives the median ratio and the largest, of each. Every plan passes the plan verifier,
//! and every rewrite the fusion verifier, outside the timing.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use memplan_benches::load_graphs;
use memplan_ir::Graph;
use memplan_ir::GraphError as _;
use memplan_planner::{
    AttentionKernel, Fusions, PlanOptions, ScheduleMode, fuse_graph, plan_graph, verify_fusion,
    verify_plan,
};

const MIB: f64 = 1024.0 * 1024.0;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The CPU time this process has used so far, all threads (zero where unknown).
fn cpu_now() -> Duration {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        )
    }
    #[cfg(not(unix))]
    {
        Duration::ZERO
    }
}

/// A wall-clock and a CPU-time stopwatch.
struct Watch(Instant, Duration);

impl Watch {
    fn start() -> Watch {
        Watch(Instant::now(), cpu_now())
    }

    /// Wall and CPU time since the start.
    fn stop(self) -> (Duration, Duration) {
        (self.0.elapsed(), cpu_now().saturating_sub(self.1))
    }
}

/// The median of `v` and its largest value.
fn summary(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() - 1])
}

/// The arena of `graph` under `options`, checked.
fn checked(name: &str, graph: &Graph, options: &PlanOptions) -> Result<u64, String> {
    let fused =
        fuse_graph(graph, options).map_err(|e| format!("{name}: {}", e.with_graph(graph)))?;
    verify_fusion(graph, &fused.graph).map_err(|e| format!("{name}: {e}"))?;
    let plan =
        plan_graph(graph, options).map_err(|e| format!("{name}: {}", e.with_graph(graph)))?;
    verify_plan(&fused.graph, &plan)
        .map_err(|e| format!("{name}: {}", e.with_graph(&fused.graph)))?;
    Ok(plan.arena_bytes)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut runs = 5usize;
    let mut memory = false;
    let mut filter = String::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--memory" => memory = true,
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
    let graphs = match load_graphs("graphs/json", &filter) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let plain = PlanOptions::default()
        .with_attention(AttentionKernel::Flash)
        .with_schedule(if memory {
            ScheduleMode::Memory
        } else {
            ScheduleMode::Given
        });
    let fused = plain.clone().with_fuse(Fusions::ALL);
    println!(
        "| graph | nodes | arena MiB | fused arena MiB | ms | fused ms | of which fusing | ratio | CPU ms | fused CPU ms | CPU ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let (mut ratios, mut cpu_ratios) = (Vec::new(), Vec::new());
    for (name, graph) in &graphs {
        let (a, b) = match (checked(name, graph, &plain), checked(name, graph, &fused)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let (mut ta, mut tb, mut tf) = (Vec::new(), Vec::new(), Vec::new());
        let (mut ca, mut cb) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let w = Watch::start();
            let _ = plan_graph(graph, &plain);
            let (wall, cpu) = w.stop();
            ta.push(wall);
            ca.push(cpu);
            let w = Watch::start();
            let _ = plan_graph(graph, &fused);
            let (wall, cpu) = w.stop();
            tb.push(wall);
            cb.push(cpu);
            let t = Instant::now();
            let _ = fuse_graph(graph, &fused);
            tf.push(t.elapsed());
        }
        let (ma, mb, mf) = (median(ta), median(tb), median(tf));
        let (mca, mcb) = (median(ca), median(cb));
        let ratio = mb.as_secs_f64() / ma.as_secs_f64().max(1e-9);
        let cpu_ratio = mcb.as_secs_f64() / mca.as_secs_f64().max(1e-9);
        ratios.push(ratio);
        cpu_ratios.push(cpu_ratio);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "| {name} | {} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {ratio:.2} | {:.1} | {:.1} | {cpu_ratio:.2} |",
            graph.nodes().len(),
            a as f64 / MIB,
            b as f64 / MIB,
            ms(ma),
            ms(mb),
            ms(mf),
            ms(mca),
            ms(mcb),
        );
    }
    if !ratios.is_empty() {
        let n = ratios.len();
        let (median, largest) = summary(ratios);
        let (cpu_median, cpu_largest) = summary(cpu_ratios);
        println!(
            "\nmedian ratio {median:.2}, largest {largest:.2}; CPU time: median ratio \
             {cpu_median:.2}, largest {cpu_largest:.2} ({n} graphs, {runs} runs each)"
        );
    }
    ExitCode::SUCCESS
}
