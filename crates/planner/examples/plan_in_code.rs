//! Plan a graph built in code: a small attention block with a symbolic batch, planned at
//! batch 4, verified, and printed as a few figures and the plan file (`memplan plan` prints
//! the full human-readable report).
//!
//! `cargo run -p memplan-planner --example plan_in_code`

use memplan_ir::GraphError as _;
use memplan_ir::{DType, Expr, GraphBuilder};
use memplan_planner::{PlanOptions, ScheduleMode, plan_graph, verify_plan};

fn main() {
    let mut g = GraphBuilder::new("attention_block");
    let batch = g.symbol("batch");
    let b = || Expr::symbol(batch);
    let x = g.input("x", DType::F16, [b(), 128.into(), 256.into()]);
    let wq = g.weight("wq", DType::F16, [256, 256]);
    let wk = g.weight("wk", DType::F16, [256, 256]);
    let wv = g.weight("wv", DType::F16, [256, 256]);
    let q = g.op(
        "MatMul",
        &[x, wq],
        DType::F16,
        [b(), 128.into(), 256.into()],
    );
    let k = g.op(
        "MatMul",
        &[x, wk],
        DType::F16,
        [b(), 128.into(), 256.into()],
    );
    let v = g.op(
        "MatMul",
        &[x, wv],
        DType::F16,
        [b(), 128.into(), 256.into()],
    );
    let kt = g.op("Transpose", &[k], DType::F16, [b(), 256.into(), 128.into()]);
    let scores = g.op(
        "MatMul",
        &[q, kt],
        DType::F16,
        [b(), 128.into(), 128.into()],
    );
    let probs = g.op(
        "Softmax",
        &[scores],
        DType::F16,
        [b(), 128.into(), 128.into()],
    );
    let out = g.op(
        "MatMul",
        &[probs, v],
        DType::F16,
        [b(), 128.into(), 256.into()],
    );
    let y = g.op("Add", &[out, x], DType::F16, [b(), 128.into(), 256.into()]);
    g.mark_output(y);
    let graph = match g.build() {
        Ok(graph) => graph,
        Err(e) => {
            eprintln!("invalid graph: {e}");
            std::process::exit(2);
        }
    };

    let options = PlanOptions::default()
        .with_bindings(graph.bind(&[("batch", 4)]).unwrap_or_default())
        .with_schedule(ScheduleMode::Memory);
    let plan = match plan_graph(&graph, &options) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("cannot plan: {e}");
            std::process::exit(2);
        }
    };
    if let Err(problems) = verify_plan(&graph, &plan) {
        eprintln!("{}", problems.with_graph(&graph));
        std::process::exit(1);
    }
    println!(
        "arena {} bytes (lower bound {}, {} with no reuse); weights {} bytes; {} buffers, placed by {}",
        plan.arena_bytes,
        plan.lower_bound_bytes,
        plan.naive_bytes,
        plan.weight_bytes,
        plan.buffers.len(),
        plan.stats.placed_by,
    );
    print!("{}", plan.to_json(&graph));
}
