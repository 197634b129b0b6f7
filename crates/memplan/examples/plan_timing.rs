//! The in-process planning time of `memplan plan GRAPH`: the graph loaded once, then made
//! ready and planned (verifier included) as the command does, `RUNS` times; prints the
//! median in milliseconds. The Python package's timing script compares `memplan.plan` with
//! it (docs/MEASUREMENTS.md).
//!
//! `cargo run --release -p memplan --example plan_timing -- testdata/graphs/onnx/sd15_unet_b1.onnx 9`

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: plan_timing GRAPH [RUNS]")?;
    let runs: usize = args.next().map_or(Ok(9), |r| r.parse())?;
    let graph = memplan::load::load_graph(Some(std::path::Path::new(&path)))?;
    let settings = memplan::options::PlanSettings::default();
    let mut times = Vec::with_capacity(runs);
    let mut arena = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let (g, options) = memplan::load::prepare(graph.clone(), &settings, &mut memplan::Quiet)?;
        let planned = memplan::plan::plan(&g, &settings, &options)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        arena = planned.plan().arena_bytes;
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{path}: median {:.1} ms over {runs} runs (min {:.1}, max {:.1}), arena {arena} bytes",
        times[runs / 2],
        times[0],
        times[runs - 1]
    );
    Ok(())
}
