//! Plans an `hf` training step with memplan's planner and prints the arena figure beside
//! PyTorch's, with the planner's time and each packing strategy's arena:
//! `cargo run --release -p memplan-tracker --example step_arena -- CONFIG.json [BATCH SEQ]`
//! (AdamW, mixed precision, foreach, SDPA). `ESTIMATE_ONLY=1`: `estimate_with_arena` alone
//! (for `perf stat`); with `NO_ARENA=1`, `estimate` (no plan).
use std::time::Instant;

use memplan_ir::DType;
use memplan_tracker::estimate::{
    Optimizer, Training, TransformerConfig, Workload, estimate, estimate_with_arena, step_plan,
};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let json = std::fs::read_to_string(&a[1]).expect("a config.json path");
    let config = TransformerConfig::from_hf_json(&json).expect("a transformer config");
    let batch = a.get(2).map_or(1, |s| s.parse().expect("a batch"));
    let seq = a
        .get(3)
        .map_or(4096, |s| s.parse().expect("a sequence length"));
    let mut w = Workload::inference(batch, seq, DType::BF16);
    w.training = Some(Training::new(Optimizer::AdamW));
    let t = Instant::now();
    let e = if std::env::var_os("NO_ARENA").is_some() {
        estimate(&config, &w)
    } else {
        estimate_with_arena(&config, &w)
    }
    .expect("an estimate");
    let est = t.elapsed();
    if std::env::var_os("ESTIMATE_ONLY").is_some() {
        println!("{} {:?} {est:?}", e.total_bytes, e.arena_step);
        return;
    }
    let t = Instant::now();
    let step = step_plan(&config, &w).expect("a step plan");
    let planned = t.elapsed();
    let v = memplan_planner::verify_plan(&step.graph, &step.plan);
    for strategy in memplan_planner::Strategy::ALL {
        let mut o = memplan_tracker::estimate::step_plan_options();
        o.strategy = strategy;
        let t = Instant::now();
        let p = memplan_planner::plan_graph(&step.graph, &o).expect("a plan");
        println!("  {} {} {:?}", strategy.name(), p.arena_bytes, t.elapsed());
    }
    println!(
        "pytorch {} arena {:?} nodes {} buffers {} estimate {:?} step_plan {:?} verified {}",
        e.total_bytes,
        e.arena_step,
        step.graph.nodes().len(),
        step.plan.buffers.len(),
        est,
        planned,
        v.is_ok()
    );
}
