//! A downstream engine's model, as its CI snapshots the model's memory plan.
//!
//! The engine builds its model's graph with memplan's builder, every node and tensor named
//! (so a node added elsewhere adds its own lines to the snapshot and moves no other), plans
//! it with the reproducible preset, and renders it with [`memplan::planner::Review`]; its
//! test (`tests/snapshot.rs`) keeps the placements as an `insta` snapshot and checks the
//! statistics apart, by bounds, so that a better memplan does not churn the snapshot.

use memplan::ir::{DType, Expr, Graph, GraphBuilder, ValidationErrors};
use memplan::planner::{Plan, PlanOptions, Review, plan_graph, verify_plan};

/// A decoder layer at `batch` 1 and a symbolic `seq`: attention projections, scores, softmax,
/// the MLP, two residuals. `extra_norm` adds a normalisation before the MLP (the change a
/// snapshot review should see as a few lines).
pub fn decoder(d: i64, extra_norm: bool) -> Result<Graph, ValidationErrors> {
    let mut g = GraphBuilder::new("decoder");
    let seq = Expr::symbol(g.symbol("seq"));
    let c = Expr::constant;
    let rows = |n: i64| [seq.clone(), c(n)];
    let x = g.input("x", DType::F16, rows(d));
    let wq = g.weight("wq", DType::F16, [d, d]);
    let wk = g.weight("wk", DType::F16, [d, d]);
    let wv = g.weight("wv", DType::F16, [d, d]);
    let wo = g.weight("wo", DType::F16, [d, d]);
    let w1 = g.weight("w1", DType::F16, [d, 4 * d]);
    let w2 = g.weight("w2", DType::F16, [4 * d, d]);
    let q = g.named_op("q", "MatMul", &[x, wq], DType::F16, rows(d));
    let k = g.named_op("k", "MatMul", &[x, wk], DType::F16, rows(d));
    let v = g.named_op("v", "MatMul", &[x, wv], DType::F16, rows(d));
    let kt = g.named_op("kt", "Transpose", &[k], DType::F16, [c(d), seq.clone()]);
    let scores = g.named_op(
        "scores",
        "MatMul",
        &[q, kt],
        DType::F16,
        [seq.clone(), seq.clone()],
    );
    let probs = g.named_op(
        "probs",
        "Softmax",
        &[scores],
        DType::F16,
        [seq.clone(), seq.clone()],
    );
    let ctx = g.named_op("ctx", "MatMul", &[probs, v], DType::F16, rows(d));
    let attn = g.named_op("attn", "MatMul", &[ctx, wo], DType::F16, rows(d));
    let mut h = g.named_op("residual1", "Add", &[x, attn], DType::F16, rows(d));
    if extra_norm {
        h = g.named_op("norm", "LayerNormalization", &[h], DType::F16, rows(d));
    }
    let up = g.named_op("up", "MatMul", &[h, w1], DType::F16, rows(4 * d));
    let act = g.named_op("gelu", "Gelu", &[up], DType::F16, rows(4 * d));
    let down = g.named_op("down", "MatMul", &[act, w2], DType::F16, rows(d));
    let y = g.named_op("residual2", "Add", &[h, down], DType::F16, rows(d));
    g.mark_output(y);
    g.build()
}

/// What can go wrong: an unknown symbol, no plan, or a plan the verifier refuses.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The decoder planned at `seq` with the reproducible preset, checked by the verifier.
pub fn plan(graph: &Graph, seq: u64) -> Result<Plan, Error> {
    let options = PlanOptions::reproducible().with_bindings(graph.bind(&[("seq", seq)])?);
    let plan = plan_graph(graph, &options)?;
    verify_plan(graph, &plan)?;
    Ok(plan)
}

/// The review of the decoder's plan at `seq`.
pub fn review(graph: &Graph, seq: u64) -> Result<Review, Error> {
    Ok(Review::new(graph, &plan(graph, seq)?))
}
