//! The review rendering: names, not ids or steps, so that a node inserted elsewhere adds its
//! own lines and changes no other; statistics apart; every tensor answered; the
//! reproducible preset.

use memplan_ir::{DType, Expr, Graph, GraphBuilder, TensorId};
use memplan_planner::{PlanOptions, Review, plan_graph, verify_plan};

/// A chain `x -> a -> b -> c -> y` with a weight, and optionally a side node between `b`
/// and `c` that reads the weight and writes a caller-owned output `side` (every later step
/// number moves by one).
fn chain(side: bool) -> Graph {
    let mut g = GraphBuilder::new("chain");
    let x = g.input("x", DType::F32, [4, 32]);
    let w = g.weight("w", DType::F32, [32, 32]);
    let a = g.named_op("a", "MatMul", &[x, w], DType::F32, [4, 32]);
    let b = g.named_op("b", "Relu", &[a], DType::F32, [4, 32]);
    let s = side.then(|| g.named_op("a_longer_side_branch", "ReduceSum", &[w], DType::F32, [4]));
    let c = g.named_op("c", "MatMul", &[b, w], DType::F32, [4, 32]);
    let y = g.named_op("y", "Reshape", &[c], DType::F32, [128]);
    g.mark_output(y);
    if let Some(s) = s {
        g.mark_output(s);
    }
    g.build().unwrap()
}

fn render(graph: &Graph, options: &PlanOptions) -> Review {
    let plan = plan_graph(graph, options).unwrap();
    verify_plan(graph, &plan).unwrap();
    Review::new(graph, &plan)
}

#[test]
fn a_node_inserted_elsewhere_adds_only_its_own_lines() {
    let options = PlanOptions::reproducible().with_outputs_in_arena(false);
    let before = render(&chain(false), &options);
    let after = render(&chain(true), &options);
    // Raw lines: no column width depends on another line's name.
    let lines = |r: &Review| -> Vec<String> { r.placements().lines().map(str::to_owned).collect() };
    let (b, a) = (lines(&before), lines(&after));
    let removed: Vec<&String> = b.iter().filter(|l| !a.contains(l)).collect();
    let added: Vec<&String> = a.iter().filter(|l| !b.contains(l)).collect();
    assert_eq!(removed, Vec::<&String>::new(), "{}\n{}", before, after);
    let added: Vec<String> = added
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        added,
        vec![
            "a_longer_side_branch",
            "a_longer_side_branch f32[4] 16 B bound by the caller"
        ],
        "{after}"
    );
}

#[test]
fn statistics_stay_apart_from_placements() {
    let r = render(&chain(false), &PlanOptions::reproducible());
    for word in ["lower bound", "placed by", "naive", "tried"] {
        assert!(!r.placements().contains(word), "{word}: {r}");
        assert!(
            r.statistics().contains(word) || word == "tried",
            "{word}: {r}"
        );
    }
    assert!(r.statistics().contains("greedy-size"), "{r}");
    assert_eq!(
        r.to_string(),
        format!("{}{}", r.placements(), r.statistics())
    );
    // No id and no step number: `t3`, `n2` or `step` never appear.
    for word in ["step", " t1", " n1"] {
        assert!(!r.placements().contains(word), "{word}: {r}");
    }
}

#[test]
fn every_tensor_gets_an_answer() {
    let mut g = GraphBuilder::new("answers");
    let batch = Expr::symbol(g.symbol("batch"));
    let c = Expr::constant;
    let x = g.input("x", DType::F32, [batch.clone(), c(8)]);
    let e = g.input("empty", DType::F32, [0, 8]);
    let w = g.weight("w", DType::F32, [8]);
    let k = g.int_constant("k", &[2]);
    let folded = g.named_op("wk", "Mul", &[w, w], DType::F32, [8]);
    let a = g.named_op("a", "Add", &[x, folded], DType::F32, [batch.clone(), c(8)]);
    let z = g.named_op("z", "Concat", &[e, e], DType::F32, [0, 8]);
    g.attr("axis", memplan_ir::Attr::Int(0));
    let y = g.named_op("y", "Tile", &[a, k], DType::F32, [batch.clone(), c(16)]);
    g.mark_output(y);
    g.mark_output(z);
    let graph = g.build().unwrap();
    let options = PlanOptions::reproducible()
        .with_inputs_in_arena(false)
        .with_bindings(graph.bind(&[("batch", 3)]).unwrap());
    let r = render(&graph, &options);
    let line = |name: &str| -> String {
        r.placements()
            .lines()
            .skip_while(|l| *l != "tensors:")
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name}: {r}"))
            .to_owned()
    };
    assert!(r.placements().contains("symbols: batch=3"), "{r}");
    assert!(line("x").contains("f32[batch,8]") && line("x").contains("bound by the caller"));
    assert!(line("empty").contains("no bytes"), "{r}");
    assert!(line("z").contains("no bytes"), "{r}");
    assert!(line("w").contains("weights ["), "{r}");
    // Computed from weights alone: folded into the weight region.
    assert!(line("wk").contains("weights ["), "{r}");
    assert!(line("a").contains("live a .. y"), "{r}");
    assert!(line("y").contains("arena [") && line("y").ends_with("live y .. end"));
    let _: [TensorId; 2] = [k, y];
}

#[test]
fn the_reproducible_preset_names_one_heuristic_and_no_search() {
    let o = PlanOptions::reproducible();
    assert_eq!(o.strategy.name(), "greedy-size");
    assert_eq!(o.schedule, memplan_planner::ScheduleMode::Given);
    assert!(o.solve_time_limit.is_zero() && o.solve_node_limit.is_none());
    let g = chain(true);
    assert_eq!(render(&g, &o), render(&g, &o));
}
