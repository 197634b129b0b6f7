//! `fit_graph` on the dynamic corpus graphs: the answer fits and the next value does not
//! (each checked here by planning independently of the search), every plan passes the
//! verifier, and the errors for a missing or unbound symbol say what is wrong.

use std::path::PathBuf;

use memplan_ir::Graph;
use memplan_planner::{PlanOptions, plan_graph, verify_plan};
use memplan_tracker::{FitError, FitRequest, fit_graph, plan_peak};

fn dynamic(model: &str) -> Graph {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/graphs/dynamic/json")
        .join(format!("{model}.json"));
    Graph::load_json(&path).unwrap()
}

fn options(graph: &Graph, dims: &[(&str, u64)]) -> PlanOptions {
    PlanOptions::default().with_bindings(graph.bind(dims).unwrap())
}

/// Plans `graph` at `symbol = value` from scratch and returns the verified peak.
fn peak_at(graph: &Graph, base: &PlanOptions, symbol: &str, value: u64) -> u64 {
    let id = graph.find_symbol(symbol).unwrap();
    let options = base
        .clone()
        .with_bindings(base.bindings.clone().with(id, value));
    let plan = plan_graph(graph, &options).unwrap();
    verify_plan(graph, &plan).unwrap();
    plan_peak(graph, &plan, false).unwrap()
}

#[test]
fn every_dynamic_graph_answer_is_tight() {
    for (model, dims, budget) in [
        ("gpt2", &[("seq", 128)][..], 2u64 << 30),
        ("bert_base", &[("seq", 256)][..], 1 << 30),
        ("vit_base_patch16_224", &[][..], 1 << 30),
        ("tv_mobilenet_v3_large", &[][..], 1 << 30),
        ("smp_unet_resnet34", &[][..], 3 << 30),
    ] {
        let graph = dynamic(model);
        let base = options(&graph, dims);
        let fit = fit_graph(&graph, &base, &FitRequest::new("batch", budget)).unwrap();
        let n = fit.value.unwrap_or_else(|| panic!("{model}: nothing fits"));
        assert!(n > 1, "{model}: {n}");
        let plan = fit.plan.as_ref().unwrap();
        verify_plan(&graph, plan).unwrap();
        assert!(fit.peak_bytes <= budget);
        assert_eq!(
            peak_at(&graph, &base, "batch", n),
            fit.peak_bytes,
            "{model}"
        );
        let next = peak_at(&graph, &base, "batch", n + 1);
        assert!(next > budget, "{model}: {n} + 1 fits too");
        assert_eq!(fit.next_peak_bytes, Some(next), "{model}");
        // Exponential then binary search: a few dozen values at most, fewer plans.
        assert!(fit.probes <= 2 * 64 && fit.plans <= fit.probes + 1);
    }
}

/// GPT-2's arena is exactly its lower bound, `104,499,200 × batch` at seq 512
/// (`testdata/graphs/dynamic/README.md`), so the answer is known in closed form.
#[test]
fn gpt2_at_seq_512_in_4_gib_is_batch_34() {
    let graph = dynamic("gpt2");
    let base = options(&graph, &[("seq", 512)]);
    let fit = fit_graph(&graph, &base, &FitRequest::new("batch", 4 << 30)).unwrap();
    let weights = fit.plan.as_ref().unwrap().weight_bytes;
    assert_eq!(fit.value, Some(((4u64 << 30) - weights) / 104_499_200));
    assert_eq!(fit.value, Some(34));
    // The sequence length, batch fixed.
    let base = options(&graph, &[("batch", 8)]);
    let fit = fit_graph(&graph, &base, &FitRequest::new("seq", 4 << 30)).unwrap();
    let n = fit.value.unwrap();
    assert!(peak_at(&graph, &base, "seq", n) <= 4 << 30);
    assert!(peak_at(&graph, &base, "seq", n + 1) > 4 << 30);
}

#[test]
fn nothing_fits_below_the_weights() {
    let graph = dynamic("bert_base");
    let base = options(&graph, &[("seq", 128)]);
    let fit = fit_graph(&graph, &base, &FitRequest::new("batch", 100 << 20)).unwrap();
    assert_eq!(fit.value, None);
    assert!(fit.plan.is_none());
    assert!(fit.peak_bytes > 100 << 20);
}

#[test]
fn missing_and_unbound_symbols_are_named() {
    let graph = dynamic("tv_mobilenet_v3_large");
    let err = fit_graph(
        &graph,
        &PlanOptions::default(),
        &FitRequest::new("seq", 1 << 30),
    )
    .unwrap_err();
    assert!(matches!(&err, FitError::NoSymbol { symbols, .. } if symbols == &["batch"]));
    assert!(err.to_string().contains("has no symbol `seq`"), "{err}");
    let graph = dynamic("gpt2");
    let err = fit_graph(
        &graph,
        &PlanOptions::default(),
        &FitRequest::new("batch", 1 << 30),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("has symbols with no value: seq"),
        "{err}"
    );
    let err = fit_graph(
        &graph,
        &options(&graph, &[("seq", 8)]),
        &FitRequest::new("batch", 1 << 30).with_min(5).with_max(4),
    )
    .unwrap_err();
    assert!(matches!(err, FitError::EmptyRange { .. }));
}

/// A budget of 2^64 - 1 and no upper limit: the search climbs until the byte sums overflow
/// 64 bits (the planner's naive total overflows first, near batch 2^38.8 for MobileNet),
/// which fits no budget, and answers without panicking.
#[test]
fn overflowing_sizes_do_not_fit() {
    let graph = dynamic("tv_mobilenet_v3_large");
    let fit = fit_graph(
        &graph,
        &PlanOptions::default(),
        &FitRequest::new("batch", u64::MAX).with_max(u64::MAX),
    )
    .unwrap();
    let n = fit.value.unwrap();
    assert!(n > 1 << 36, "{n}");
    assert_eq!(fit.next_peak_bytes, Some(u64::MAX));
    verify_plan(&graph, fit.plan.as_ref().unwrap()).unwrap();
}

/// `y = x[batch, 1024] + bias[b, 1024]`, `b` a broadcast symbol of `batch` and `rows`:
/// fitting `batch` with `rows = 1` resolves `b` to `batch` at every value tried.
#[test]
fn a_broadcast_dim_follows_the_symbol_being_fitted() {
    use memplan_ir::{DType, Expr, GraphBuilder};
    let mut g = GraphBuilder::new("broadcast_fit");
    let batch = g.symbol("batch");
    let rows = g.symbol("rows");
    let b = g.symbol("Add_o0_d0");
    let x = g.input("x", DType::F32, [Expr::symbol(batch), 1024.into()]);
    let bias = g.input("bias", DType::F32, [Expr::symbol(rows), 1024.into()]);
    let y = g.op(
        "Add",
        &[x, bias],
        DType::F32,
        [Expr::symbol(b), 1024.into()],
    );
    g.mark_output(y);
    let mut graph = g.build().unwrap();
    assert!(graph.set_symbol_broadcast(b, Expr::symbol(batch), Expr::symbol(rows)));
    let base = options(&graph, &[("rows", 1)]);
    // x and y: 4 KiB per batch row each, plus the 4 KiB bias: 100 rows fit 804 KiB.
    let fit = fit_graph(&graph, &base, &FitRequest::new("batch", 804 << 10)).unwrap();
    assert_eq!(fit.value, Some(100));
    verify_plan(&graph, fit.plan.as_ref().unwrap()).unwrap();
    assert_eq!(fit.bindings.get(b), Some(100));
}
