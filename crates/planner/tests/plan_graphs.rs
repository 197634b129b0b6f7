//! The graph planner on small hand-built graphs: lifetimes, views, in-place writes, regions,
//! alignment, errors, the JSON shape, and the plan verifier catching broken plans.

use memplan_ir::{
    AnyEntity, Attr, DType, Expr, Graph, GraphBuilder, GraphError, TensorId, TensorKind,
};
use memplan_planner::{
    Alias, AliasKind, Occupant, Plan, PlanError, PlanOptions, PlanViolation, PlannedBuffer,
    plan_graph, verify_plan,
};

mod common;
use common::plan_ok;

fn buffer(plan: &Plan, t: TensorId) -> &PlannedBuffer {
    plan.buffers
        .iter()
        .find(|b| b.tensor == t)
        .unwrap_or_else(|| panic!("no buffer for {t}"))
}

fn has_buffer(plan: &Plan, t: TensorId) -> bool {
    plan.buffers.iter().any(|b| b.tensor == t)
}

const KB: i64 = 256; // f32 elements in 1 KiB

/// x -> a = Conv(x) -> b = Conv(a) -> y = Conv(a, b) (output); plus `u`, produced and never
/// read. All ops opaque.
fn chain() -> (Graph, [TensorId; 5]) {
    let mut g = GraphBuilder::new("chain");
    let x = g.input("x", DType::F32, [KB]);
    let a = g.op("Conv", &[x], DType::F32, [2 * KB]);
    let b = g.op("Conv", &[a], DType::F32, [4 * KB]);
    let u = g.op("Conv", &[b], DType::F32, [KB]);
    let y = g.op("Conv", &[a, b], DType::F32, [KB]);
    g.mark_output(y);
    (g.build().unwrap(), [x, a, b, u, y])
}

#[test]
fn lifetimes_follow_the_documented_convention() {
    let (graph, [x, a, b, u, y]) = chain();
    let plan = plan_ok(&graph, &PlanOptions::default());
    let steps = |t| {
        let b = buffer(&plan, t);
        (b.first, b.last)
    };
    assert_eq!(
        steps(x),
        (0, 0),
        "an input lives from step 0 to its last reader"
    );
    assert_eq!(
        steps(a),
        (0, 3),
        "a lives from its producer to its last reader"
    );
    assert_eq!(steps(b), (1, 3));
    assert_eq!(
        steps(u),
        (2, 2),
        "a tensor nobody reads lives at its own step only"
    );
    assert_eq!(steps(y), (3, 3), "an output lives to the last step");
    // At step 3, a (2K), b (4K) and y (1K) are live: 7 KiB.
    assert_eq!(plan.lower_bound_bytes, 7 * 1024);
    assert_eq!(plan.arena_bytes, 7 * 1024);
    assert_eq!(plan.naive_bytes, (1 + 2 + 4 + 1 + 1) * 1024);
    assert_eq!(plan.schedule.len(), 4);
}

#[test]
fn outputs_live_to_the_last_step() {
    let mut g = GraphBuilder::new("early_output");
    let x = g.input("x", DType::F32, [KB]);
    let y = g.op("Conv", &[x], DType::F32, [KB]);
    let z = g.op("Conv", &[x], DType::F32, [KB]);
    let w = g.op("Conv", &[z], DType::F32, [KB]);
    g.mark_output(y);
    g.mark_output(w);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!((buffer(&plan, y).first, buffer(&plan, y).last), (0, 2));
    let _ = z;
}

#[test]
fn a_reshape_is_a_view_at_the_same_offset_and_keeps_its_parent_live() {
    let mut g = GraphBuilder::new("reshape");
    let x = g.input("x", DType::F32, [KB]);
    let a = g.op("Conv", &[x], DType::F32, [4, KB]);
    let v = g.op("Reshape", &[a], DType::F32, [4 * KB]);
    let c = g.op("Conv", &[x], DType::F32, [KB]);
    let y = g.op("Conv", &[v, c], DType::F32, [KB]);
    g.mark_output(y);
    let graph = g.build().unwrap();

    let plan = plan_ok(&graph, &PlanOptions::default());
    let (pa, pv) = (buffer(&plan, a), buffer(&plan, v));
    assert_eq!(pv.alias_kind(), Some(AliasKind::View));
    assert_eq!(pv.parent(), Some(a));
    assert_eq!(pv.offset, pa.offset);
    assert_eq!((pv.first, pv.last), (1, 3));
    assert_eq!(plan.stats.views, 1);
    // a's storage (4K) stays live through the view's last reader (step 3), with c and y.
    // Without views, a and v (4K each) are both live at step 1 with x: 9K.
    assert_eq!(plan.lower_bound_bytes, 6 * 1024);

    let no_views = plan_ok(&graph, &PlanOptions::default().with_views(false));
    assert_eq!(buffer(&no_views, v).alias, None);
    assert_eq!(no_views.stats.views, 0);
    assert_eq!(no_views.lower_bound_bytes, 9 * 1024);
}

#[test]
fn a_contiguous_slice_is_a_view_at_its_byte_offset() {
    let mut g = GraphBuilder::new("slice");
    let x = g.input("x", DType::F32, [KB]);
    let a = g.op("Conv", &[x], DType::F32, [4, KB]);
    let starts = g.int_constant("starts", &[2]);
    let ends = g.int_constant("ends", &[3]);
    let axes = g.int_constant("axes", &[0]);
    let s = g.op("Slice", &[a, starts, ends, axes], DType::F32, [1, KB]);
    let y = g.op("Conv", &[s], DType::F32, [KB]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    let ps = buffer(&plan, s);
    assert_eq!(ps.alias_kind(), Some(AliasKind::View));
    assert_eq!(ps.offset, buffer(&plan, a).offset + 2 * 1024);
    assert_eq!(ps.bytes, 1024);
}

#[test]
fn split_outputs_are_consecutive_views() {
    let mut g = GraphBuilder::new("split");
    let x = g.input("x", DType::F32, [KB]);
    let a = g.op("Conv", &[x], DType::F32, [1, 4, KB]);
    let p = g.tensor("p", DType::F32, [1, 1, KB], TensorKind::Activation);
    let q = g.tensor("q", DType::F32, [1, 3, KB], TensorKind::Activation);
    g.node("split", "Split", &[Some(a)], &[p, q]);
    g.attr("axis", Attr::Int(1));
    g.attr("split", Attr::Ints(vec![1, 3]));
    let y = g.op("Conv", &[p, q], DType::F32, [KB]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    let base = buffer(&plan, a).offset;
    assert_eq!(buffer(&plan, p).offset, base);
    assert_eq!(buffer(&plan, q).offset, base + 1024);
    assert_eq!(buffer(&plan, q).parent(), Some(a));
}

#[test]
fn an_elementwise_op_writes_in_place_over_a_dead_input() {
    let mut g = GraphBuilder::new("relu");
    let x = g.input("x", DType::F32, [KB]);
    let a = g.op("Conv", &[x], DType::F32, [4 * KB]);
    let r = g.op("Relu", &[a], DType::F32, [4 * KB]);
    let y = g.op("Conv", &[r], DType::F32, [KB]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    let pr = buffer(&plan, r);
    assert_eq!(pr.alias_kind(), Some(AliasKind::InPlace));
    assert_eq!(pr.parent(), Some(a));
    assert_eq!(pr.offset, buffer(&plan, a).offset);
    assert_eq!(plan.stats.inplace, 1);
    assert_eq!(
        plan.lower_bound_bytes,
        (1 + 4) * 1024,
        "x and the one 16K storage"
    );

    let off = plan_ok(&graph, &PlanOptions::default().with_inplace(false));
    assert_eq!(buffer(&off, r).alias, None);
    assert_eq!(off.lower_bound_bytes, (4 + 4) * 1024);
}

#[test]
fn no_in_place_write_over_an_input_still_read_later() {
    let mut g = GraphBuilder::new("read_later");
    let x = g.input("x", DType::F32, [KB]);
    let a = g.op("Conv", &[x], DType::F32, [KB]);
    let r = g.op("Relu", &[a], DType::F32, [KB]);
    let y = g.op("Add", &[r, a], DType::F32, [KB]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(
        buffer(&plan, r).alias,
        None,
        "a is read at step 2, after the Relu"
    );
    // The Add is the last reader of both r and a: it may overwrite r, its first candidate
    // (r and a are separate storages; y being a graph output is fine).
    assert_eq!(buffer(&plan, y).alias_kind(), Some(AliasKind::InPlace));
    assert_eq!(buffer(&plan, y).parent(), Some(r));
}

#[test]
fn no_in_place_write_over_a_view_whose_parent_is_read_later() {
    let mut g = GraphBuilder::new("view_read_later");
    let x = g.input("x", DType::F32, [KB]);
    let a = g.op("Conv", &[x], DType::F32, [KB]);
    let v = g.op("Reshape", &[a], DType::F32, [4, 64]);
    let r = g.op("Relu", &[v], DType::F32, [4, 64]);
    let y = g.op("Conv", &[r, a], DType::F32, [KB]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(buffer(&plan, v).alias_kind(), Some(AliasKind::View));
    assert_eq!(buffer(&plan, r).alias, None);
}

#[test]
fn graph_inputs_outputs_and_weights_are_never_overwritten_by_default() {
    let mut g = GraphBuilder::new("protected");
    let x = g.input("x", DType::F32, [KB]);
    let w = g.weight("w", DType::F32, [KB]);
    let r = g.op("Relu", &[x], DType::F32, [KB]);
    let s = g.op("Add", &[w, r], DType::F32, [KB]);
    g.mark_output(s);
    let t = g.op("Sigmoid", &[s], DType::F32, [KB]);
    g.mark_output(t);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(buffer(&plan, r).alias, None, "x is a graph input");
    assert_eq!(
        buffer(&plan, s).parent(),
        Some(r),
        "the Add overwrites r, not the weight"
    );
    assert_eq!(buffer(&plan, t).alias, None, "s is a graph output");

    let allowed = plan_ok(
        &graph,
        &PlanOptions::default().with_inplace_over_inputs(true),
    );
    assert_eq!(buffer(&allowed, r).alias_kind(), Some(AliasKind::InPlace));
    assert_eq!(buffer(&allowed, r).parent(), Some(x));
}

#[test]
fn weights_get_their_own_region_and_inputs_outputs_can_be_left_to_the_caller() {
    let mut g = GraphBuilder::new("regions");
    let x = g.input("x", DType::F32, [KB]);
    let w1 = g.weight("w1", DType::F32, [100]);
    let w2 = g.weight("w2", DType::F16, [KB]);
    let a = g.op("MatMul", &[x, w1], DType::F32, [KB]);
    let y = g.op("MatMul", &[a, w2], DType::F32, [KB]);
    g.mark_output(y);
    let graph = g.build().unwrap();

    let plan = plan_ok(&graph, &PlanOptions::default());
    assert!(
        plan.buffers
            .iter()
            .all(|b| b.tensor != w1 && b.tensor != w2)
    );
    let offsets: Vec<(TensorId, u64, u64)> = plan
        .weights
        .iter()
        .map(|w| (w.tensor, w.offset, w.bytes))
        .collect();
    assert_eq!(offsets, vec![(w1, 0, 400), (w2, 512, 512)]);
    assert_eq!(plan.weight_bytes, 1024);
    assert!(has_buffer(&plan, x) && has_buffer(&plan, y));

    let options = PlanOptions::default()
        .with_inputs_in_arena(false)
        .with_outputs_in_arena(false);
    let caller = plan_ok(&graph, &options);
    assert!(!has_buffer(&caller, x) && !has_buffer(&caller, y));
    assert!(has_buffer(&caller, a));
    assert_eq!(caller.arena_bytes, 1024);
}

#[test]
fn offsets_are_aligned_globally_and_per_dtype() {
    let mut g = GraphBuilder::new("align");
    let x = g.input("x", DType::F32, [3]);
    let a = g.op("Conv", &[x], DType::F16, [5]);
    let b = g.op("Conv", &[a, x], DType::F32, [7]);
    let y = g.op("Conv", &[a, b], DType::F32, [3]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert!(plan.buffers.iter().all(|b| b.offset % 256 == 0));
    assert_eq!(plan.alignment, 256);

    let options = PlanOptions::default()
        .with_alignment(8)
        .with_dtype_alignment(vec![(DType::F16, 1024)]);
    let plan = plan_ok(&graph, &options);
    assert!(plan.buffers.iter().all(|b| b.offset % 8 == 0));
    assert_eq!(buffer(&plan, a).offset % 1024, 0);

    let bad = PlanOptions::default().with_alignment(48);
    assert_eq!(
        plan_graph(&graph, &bad),
        Err(PlanError::BadAlignment { align: 48 })
    );
}

#[test]
fn zero_byte_tensors_take_no_buffer() {
    let mut g = GraphBuilder::new("empty_tensor");
    let x = g.input("x", DType::F32, [KB]);
    let e = g.op("Conv", &[x], DType::F32, [0, 4]);
    let y = g.op("Conv", &[x, e], DType::F32, [KB]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert!(!has_buffer(&plan, e));
    assert_eq!(plan.buffers.len(), 2);
}

#[test]
fn a_graph_without_nodes_plans_its_inputs() {
    let mut g = GraphBuilder::new("no_nodes");
    let x = g.input("x", DType::F32, [KB]);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert!(plan.schedule.is_empty());
    assert_eq!(buffer(&plan, x).bytes, 1024);
    assert_eq!(plan.arena_bytes, 1024);
}

#[test]
fn symbolic_shapes_need_every_symbol_bound() {
    let mut g = GraphBuilder::new("symbolic");
    let batch = Expr::symbol(g.symbol("batch"));
    let x = g.input("x", DType::F32, [batch.clone(), Expr::constant(KB)]);
    let y = g.op("Conv", &[x], DType::F32, [batch, Expr::constant(KB)]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let err = plan_graph(&graph, &PlanOptions::default()).unwrap_err();
    assert_eq!(
        err,
        PlanError::UnboundSymbol {
            tensor: x,
            symbol: "batch".into()
        }
    );
    // The caller's graph: the error holds its id, the graph names it.
    assert_eq!(
        err.to_string(),
        "tensor `t0` needs a value for symbol `batch`"
    );
    assert_eq!(
        err.with_graph(&graph).to_string(),
        "tensor `x` needs a value for symbol `batch`"
    );
    assert_eq!(err.entities(), [AnyEntity::Tensor(x)]);

    let bindings = graph.bind(&[("batch", 3)]).unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default().with_bindings(bindings));
    assert_eq!(buffer(&plan, y).bytes, 3 * 1024);
}

#[test]
fn an_invalid_graph_is_reported_by_validation_not_a_panic() {
    let mut g = GraphBuilder::new("broken");
    let x = g.input("x", DType::F32, [KB]);
    let late = g.tensor("late", DType::F32, [KB], TensorKind::Activation);
    let y = g.tensor("y", DType::F32, [KB], TensorKind::Output);
    g.node("reads_late", "Conv", &[Some(late)], &[y]);
    g.node("makes_late", "Conv", &[Some(x)], &[late]);
    let graph = g.build_unchecked();
    let err = plan_graph(&graph, &PlanOptions::default()).unwrap_err();
    assert!(matches!(err, PlanError::Invalid(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("late") && text.contains("reads_late"),
        "{text}"
    );
}

#[test]
fn json_has_exactly_the_documented_shape_and_is_deterministic() {
    let mut g = GraphBuilder::new("json");
    let x = g.input("x", DType::F32, [KB]);
    let w = g.weight("w", DType::F32, [KB]);
    let a = g.op("Mul", &[x, w], DType::F32, [KB]);
    let r = g.op("Relu", &[a], DType::F32, [KB]);
    let v = g.op("Reshape", &[r], DType::F32, [4, 64]);
    g.mark_output(v);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    let text = plan.to_json(&graph);
    assert_eq!(
        text,
        plan_graph(&graph, &PlanOptions::default())
            .unwrap()
            .to_json(&graph)
    );
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "graph",
            "arena_bytes",
            "lower_bound_bytes",
            "naive_bytes",
            "weight_bytes",
            "alignment",
            "settings",
            "schedule",
            "buffers",
            "weights",
            "stats"
        ]
    );
    assert_eq!(value["graph"], "json");
    assert_eq!(
        value["schedule"],
        serde_json::json!(["n0_Mul", "n1_Relu", "n2_Reshape"])
    );
    let buffers = value["buffers"].as_array().unwrap();
    let names: Vec<&str> = buffers
        .iter()
        .map(|b| b["tensor"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["x", "t2_Mul", "t3_Relu", "t4_Reshape"]);
    for b in buffers {
        let keys: Vec<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "tensor", "offset", "bytes", "first", "last", "alias_of", "alias"
            ]
        );
    }
    assert_eq!(buffers[0]["alias"], serde_json::Value::Null);
    assert_eq!(buffers[0]["alias_of"], serde_json::Value::Null);
    assert_eq!(buffers[2]["alias"], "inplace");
    assert_eq!(buffers[2]["alias_of"], "t2_Mul");
    assert_eq!(buffers[3]["alias"], "view");
    assert_eq!(buffers[3]["alias_of"], "t3_Relu");
    assert_eq!(buffers[3]["last"], 2);
    assert_eq!(
        value["weights"],
        serde_json::json!([{"tensor": "w", "offset": 0, "bytes": 1024}])
    );
}

// The verifier, fed broken plans.

fn violations(graph: &Graph, plan: &Plan) -> Vec<PlanViolation> {
    verify_plan(graph, plan)
        .err()
        .map(|v| v.0)
        .unwrap_or_default()
}

#[test]
fn the_verifier_reports_overlapping_storages_by_name() {
    let (graph, [_, a, b, _, _]) = chain();
    let mut plan = plan_ok(&graph, &PlanOptions::default());
    let a_off = buffer(&plan, a).offset;
    plan.buffers
        .iter_mut()
        .filter(|x| x.tensor == b)
        .for_each(|x| x.offset = a_off);
    let v = violations(&graph, &plan);
    assert!(
        v.iter().any(
            |v| matches!(v, PlanViolation::Overlap { a, b, .. } if *a == Occupant::Tensor(graph.find_tensor("t1_Conv").unwrap()) && *b == Occupant::Tensor(graph.find_tensor("t2_Conv").unwrap()))
        ),
        "{v:?}"
    );
}

#[test]
fn the_verifier_reports_every_problem_at_once() {
    let (graph, [x, a, b, u, _]) = chain();
    let mut plan = plan_ok(&graph, &PlanOptions::default());
    plan.schedule.swap(0, 1);
    plan.buffers.retain(|p| p.tensor != u);
    for p in &mut plan.buffers {
        if p.tensor == a {
            p.last = 1;
        }
        if p.tensor == b {
            p.bytes += 4;
        }
        if p.tensor == x {
            p.offset = plan.arena_bytes;
        }
    }
    let v = violations(&graph, &plan);
    let has = |f: &dyn Fn(&PlanViolation) -> bool| v.iter().any(f);
    assert!(
        has(
            &|v| matches!(v, PlanViolation::NotTopological { node, .. } if graph.node(*node).name == "n1_Conv")
        ),
        "{v:?}"
    );
    assert!(
        has(
            &|v| matches!(v, PlanViolation::Missing { tensor, .. } if graph.tensor(*tensor).name == "t3_Conv")
        ),
        "{v:?}"
    );
    assert!(
        has(
            &|v| matches!(v, PlanViolation::TooShort { tensor, .. } if graph.tensor(*tensor).name == "t1_Conv")
        ),
        "{v:?}"
    );
    assert!(
        has(
            &|v| matches!(v, PlanViolation::WrongBytes { tensor, .. } if graph.tensor(*tensor).name == "t2_Conv")
        ),
        "{v:?}"
    );
    assert!(
        has(
            &|v| matches!(v, PlanViolation::OutsideRegion { tensor, .. } if graph.tensor(*tensor).name == "x")
        ),
        "{v:?}"
    );
}

#[test]
fn the_verifier_rejects_an_in_place_write_before_the_last_reader() {
    let mut g = GraphBuilder::new("early_write");
    let x = g.input("x", DType::F32, [KB]);
    let a = g.op("Conv", &[x], DType::F32, [KB]);
    let r = g.op("Relu", &[a], DType::F32, [KB]);
    let y = g.op("Add", &[r, a], DType::F32, [KB]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let mut plan = plan_ok(&graph, &PlanOptions::default());
    let a_off = buffer(&plan, a).offset;
    for p in &mut plan.buffers {
        if p.tensor == r {
            p.offset = a_off;
            p.alias = Some(Alias::InPlace { of: a });
        }
    }
    let v = violations(&graph, &plan);
    assert!(
        v.iter().any(|v| matches!(v, PlanViolation::InPlaceTooEarly { tensor, other, step: 1, other_last: 2 } if graph.tensor(*tensor).name == "t2_Relu" && graph.tensor(*other).name == "t1_Conv")),
        "{v:?}"
    );
}

#[test]
fn the_verifier_rejects_an_alias_outside_its_root_or_of_an_unread_parent() {
    let mut g = GraphBuilder::new("bad_alias");
    let x = g.input("x", DType::F32, [KB]);
    let a = g.op("Conv", &[x], DType::F32, [KB]);
    let v = g.op("Reshape", &[a], DType::F32, [4, 64]);
    let y = g.op("Conv", &[v], DType::F32, [KB]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());

    let mut shifted = plan.clone();
    shifted
        .buffers
        .iter_mut()
        .filter(|p| p.tensor == v)
        .for_each(|p| p.offset += 16);
    let found = violations(&graph, &shifted);
    assert!(found.iter().any(|e| matches!(e, PlanViolation::OutsideRoot { tensor, root, .. } if graph.tensor(*tensor).name == "t2_Reshape" && graph.tensor(*root).name == "t1_Conv")), "{found:?}");

    let mut unrelated = plan.clone();
    unrelated
        .buffers
        .iter_mut()
        .filter(|p| p.tensor == y)
        .for_each(|p| {
            p.alias = Some(Alias::View { of: x, offset: 0 });
        });
    let found = violations(&graph, &unrelated);
    assert!(found.iter().any(|e| matches!(e, PlanViolation::BadAlias { tensor, parent, .. } if graph.tensor(*tensor).name == "t3_Conv" && parent.map(|p| graph.tensor(p).name.as_str()) == Some("x"))), "{found:?}");

    // A Conv reads v, but its output is no view: claiming one is caught even though the
    // bytes would lie inside the root.
    let v_offset = buffer(&plan, v).offset;
    let mut opaque = plan.clone();
    opaque
        .buffers
        .iter_mut()
        .filter(|p| p.tensor == y)
        .for_each(|p| {
            p.alias = Some(Alias::View { of: v, offset: 0 });
            p.offset = v_offset;
        });
    let found = violations(&graph, &opaque);
    assert!(
        found.iter().any(|e| matches!(e, PlanViolation::BadAlias { tensor, reason: memplan_planner::AliasFault::NotARange, .. } if graph.tensor(*tensor).name == "t3_Conv")),
        "{found:?}"
    );
    assert!(
        !found
            .iter()
            .any(|e| matches!(e, PlanViolation::OutsideRoot { .. })),
        "{found:?}"
    );
}
