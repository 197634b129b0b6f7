//! The unsafe plans, and unsafe plans the verifier accepted, that the audit of issue 29
//! found: each hand-made case, the plan the planner makes of it (which must pass the
//! verifier, at every binding it claims to serve), and the broken plan the verifier must
//! now refuse.

use memplan_ir::GraphError as _;
use memplan_ir::{
    Attr, Bindings, DType, Expr, Graph, GraphBuilder, SymbolId, TensorId, TensorKind,
};
use memplan_planner::{
    Alias, AliasKind, Occupant, Plan, PlanError, PlanList, PlanOptions, PlanViolation,
    PlannedBuffer, WorkspaceFault, plan_graph, verify_plan,
};

fn violations(graph: &Graph, plan: &Plan) -> Vec<PlanViolation> {
    verify_plan(graph, plan)
        .err()
        .map(|v| v.0)
        .unwrap_or_default()
}

fn buffer(plan: &mut Plan, t: TensorId) -> &mut PlannedBuffer {
    plan.buffers
        .iter_mut()
        .find(|b| b.tensor == t)
        .expect("a buffer")
}

// ---------------------------------------------------------------------------------------
// Item 1: plans at the bounds of data-dependent sizes.

/// A graph with a bounded data-dependent symbol `k <= 8` (beside a static one).
struct Bounded {
    graph: Graph,
    k: SymbolId,
}

impl Bounded {
    fn new(build: impl FnOnce(&mut GraphBuilder, Expr)) -> Bounded {
        let mut b = GraphBuilder::new("bounded");
        let k = b.symbol("k");
        build(&mut b, Expr::symbol(k));
        let mut graph = b.build().unwrap();
        assert!(graph.set_symbol_bound(k, Expr::constant(8)));
        Bounded { graph, k }
    }

    /// The plan at the bound, `k` named as bounded.
    fn plan(&self) -> Plan {
        let (bindings, bound) = self.graph.bind_to_bounds(&Bindings::new()).unwrap();
        assert_eq!(bound, vec![(self.k, 8)]);
        let options = PlanOptions::default()
            .with_bindings(bindings)
            .with_bounded(vec![self.k]);
        let plan = plan_graph(&self.graph, &options).unwrap();
        assert_eq!(plan.settings.bounded, vec!["k".to_owned()]);
        verify_plan(&self.graph, &plan).unwrap();
        plan
    }

    /// The same placement passes the verifier at every value of `k` from 0 to the bound.
    fn holds_below(&self, plan: &Plan) {
        for v in 0..=8 {
            let small = plan.at_values(&self.graph, &[("k".to_owned(), v)]).unwrap();
            if let Err(e) = verify_plan(&self.graph, &small) {
                panic!(
                    "the plan at k=8 fails at k={v}: {}",
                    e.with_graph(&self.graph)
                );
            }
        }
    }
}

fn f32_in(b: &mut GraphBuilder, name: &str, shape: Vec<Expr>) -> TensorId {
    b.input(name, DType::F32, shape)
}

/// A Split whose second chunk starts after a data-dependent first chunk: `x[1, 2, k]` split
/// along axis 1. At the bound its view sits `8 * 4` bytes in; at `k = 3` the runtime
/// puts it 12 bytes in.
#[test]
fn a_split_chunk_after_a_data_dependent_chunk_is_no_view_below_the_bound() {
    let case = Bounded::new(|b, k| {
        let c = Expr::constant;
        let x = f32_in(b, "x", vec![c(1), c(2), k.clone()]);
        let a = b.op("Relu", &[x], DType::F32, vec![c(1), c(2), k.clone()]);
        let y0 = b.tensor(
            "y0",
            DType::F32,
            vec![c(1), c(1), k.clone()],
            TensorKind::Activation,
        );
        let y1 = b.tensor(
            "y1",
            DType::F32,
            vec![c(1), c(1), k.clone()],
            TensorKind::Activation,
        );
        b.node("split", "Split", &[Some(a)], &[y0, y1]);
        b.attr("axis", Attr::Int(1));
        let z = b.op("Add", &[y0, y1], DType::F32, vec![c(1), c(1), k.clone()]);
        b.mark_output(z);
        // A view of all of `a`: the same at every k.
        let two_k = k.checked_mul(&c(2)).unwrap();
        let r = b.op("Reshape", &[a], DType::F32, vec![two_k]);
        b.mark_output(r);
    });
    let plan = case.plan();
    let g = &case.graph;
    let (y0, y1) = (g.find_tensor("y0").unwrap(), g.find_tensor("y1").unwrap());
    // The second chunk moves with k: no view. (The first, of part of a varying tensor, is
    // not one either: only views of all of a tensor are kept where sizes vary.)
    assert_eq!(plan.buffer(y1).unwrap().alias, None);
    assert_eq!(plan.buffer(y0).unwrap().alias, None);
    let r = g.find_tensor("t5_Reshape").unwrap();
    assert!(matches!(
        plan.buffer(r).unwrap().alias,
        Some(Alias::View { offset: 0, .. })
    ));
    case.holds_below(&plan);

    // The old plan (the second chunk a view at its bound offset) is refused below the
    // bound by the verifier itself.
    let mut old = plan.clone();
    let a = g.find_tensor("t1_Relu").unwrap();
    let at = plan.buffer(a).unwrap().offset + 32;
    let b = buffer(&mut old, y1);
    b.alias = Some(Alias::View { of: a, offset: 32 });
    b.offset = at;
    let v = violations(g, &old);
    assert!(
        v.iter()
            .any(|v| matches!(v, PlanViolation::BelowBound { .. })),
        "{v:?}"
    );
}

/// A Slice `[-2:]` of a data-dependent length: the view would start `k - 2` rows in.
#[test]
fn a_slice_from_the_end_of_a_data_dependent_length_is_no_view() {
    let case = Bounded::new(|b, k| {
        let c = Expr::constant;
        let x = f32_in(b, "x", vec![k.clone(), c(4)]);
        let a = b.op("Relu", &[x], DType::F32, vec![k.clone(), c(4)]);
        let s = b.int_constant("s", &[-2]);
        let e = b.int_constant("e", &[i64::MAX]);
        let ax = b.int_constant("ax", &[0]);
        let y = b.op("Slice", &[a, s, e, ax], DType::F32, vec![c(2), c(4)]);
        let z = b.op("Neg", &[y], DType::F32, vec![c(2), c(4)]);
        b.mark_output(z);
    });
    // The declared [2, 4] is only right for k >= 2: planned at the bound, the graph claims
    // it for every smaller k too, which the op contradicts (issue 36: refused).
    let (bindings, _) = case.graph.bind_to_bounds(&Bindings::new()).unwrap();
    let bounded = PlanOptions::default()
        .with_bindings(bindings.clone())
        .with_bounded(vec![case.k]);
    let err = plan_graph(&case.graph, &bounded).unwrap_err().to_string();
    assert!(err.contains("declared [2, 4] but the op makes"), "{err}");
    // At k = 8 alone the declaration holds; the slice, two rows from the end of a length
    // the data decides, is still no view.
    let plan = plan_graph(&case.graph, &PlanOptions::default().with_bindings(bindings)).unwrap();
    verify_plan(&case.graph, &plan).unwrap();
    let y = case.graph.find_tensor("t5_Slice").unwrap();
    assert!(plan.buffer(y).is_some());
}

/// A Concat part after a data-dependent part: `[a; b]` with `a[k, 4]`; `b`'s slice starts
/// `k` rows in.
#[test]
fn a_concat_part_after_a_data_dependent_part_is_not_written_into_place() {
    let case = Bounded::new(|b, k| {
        let c = Expr::constant;
        let x = f32_in(b, "x", vec![k.clone(), c(4)]);
        let w = f32_in(b, "w", vec![c(2), c(4)]);
        let a = b.op("Relu", &[x], DType::F32, vec![k.clone(), c(4)]);
        let d = b.op("Neg", &[w], DType::F32, vec![c(2), c(4)]);
        let y = b.op(
            "Concat",
            &[a, d],
            DType::F32,
            vec![k.checked_add(&c(2)).unwrap(), c(4)],
        );
        b.attr("axis", Attr::Int(0));
        b.mark_output(y);
    });
    let plan = case.plan();
    let d = case.graph.find_tensor("t3_Neg").unwrap();
    assert!(
        plan.buffer(d)
            .unwrap()
            .alias
            .is_none_or(|a| a.kind() != AliasKind::Part)
    );
    case.holds_below(&plan);
}

/// A strided Concat part whose offset is fixed but whose rows move: `[d; a]` along axis 1
/// with `d[2, 64]` and `a[2, k]`. `d` starts at byte 0 at every `k`, but its second row
/// starts one output row in, `(64 + k) * 4` bytes: 288 at the bound, 268 at `k = 3`. The
/// plan file records one stride, so `d` is no part; a plan that makes it one is refused
/// below the bound.
#[test]
fn a_strided_concat_part_whose_row_length_moves_is_not_written_into_place() {
    let case = Bounded::new(|b, k| {
        let c = Expr::constant;
        let x = f32_in(b, "x", vec![c(2), c(64)]);
        let xa = f32_in(b, "xa", vec![c(2), k.clone()]);
        let d = b.op("Neg", &[x], DType::F32, vec![c(2), c(64)]);
        let a = b.op("Relu", &[xa], DType::F32, vec![c(2), k.clone()]);
        let y = b.op(
            "Concat",
            &[d, a],
            DType::F32,
            vec![c(2), k.checked_add(&c(64)).unwrap()],
        );
        b.attr("axis", Attr::Int(1));
        let z = b.op(
            "Sigmoid",
            &[y],
            DType::F32,
            vec![c(2), k.checked_add(&c(64)).unwrap()],
        );
        b.mark_output(z);
    });
    let g = &case.graph;
    let d = g.find_tensor("t2_Neg").unwrap();
    let y = g.find_tensor("t4_Concat").unwrap();
    let plan = case.plan();
    assert!(
        plan.buffer(d)
            .unwrap()
            .alias
            .is_none_or(|a| a.kind() != AliasKind::Part),
        "{:?}",
        plan.buffer(d)
    );
    case.holds_below(&plan);

    // The same graph without the bound: `d` is written into place (it pays), and that
    // placement, claimed for every k up to 8, is refused below the bound.
    let (bindings, _) = g.bind_to_bounds(&Bindings::new()).unwrap();
    let fixed = plan_graph(g, &PlanOptions::default().with_bindings(bindings)).unwrap();
    assert_eq!(
        fixed.buffer(d).unwrap().alias,
        Some(Alias::Part { of: y, offset: 0 })
    );
    let mut claimed = fixed.clone();
    claimed.settings.bounded = vec!["k".to_owned()];
    let v = violations(g, &claimed);
    assert!(
        v.iter().any(|v| matches!(
            v,
            PlanViolation::BelowBound { problem, .. } if matches!(
                **problem,
                PlanViolation::BadAlias { reason: memplan_planner::AliasFault::StrideMoves, .. }
            )
        )),
        "{v:?}"
    );
}

/// A size that grows as a bounded symbol falls (`10 - k`) cannot be planned at the bound.
#[test]
fn a_size_falling_with_a_bounded_symbol_is_refused() {
    let mut b = GraphBuilder::new("falling");
    let k = b.symbol("k");
    let shrink = Expr::constant(10).checked_sub(&Expr::symbol(k)).unwrap();
    let x = b.input("x", DType::F32, vec![shrink.clone()]);
    let y = b.op("Relu", &[x], DType::F32, vec![shrink]);
    b.mark_output(y);
    let mut g = b.build().unwrap();
    assert!(g.set_symbol_bound(k, Expr::constant(8)));
    let options = PlanOptions::default()
        .with_bindings(Bindings::new().with(k, 8))
        .with_bounded(vec![k]);
    let err = plan_graph(&g, &options).unwrap_err();
    assert!(matches!(err, PlanError::FallingSize { .. }), "{err}");
    assert!(err.to_string().contains("grows as `k` falls"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Item 3: body plans in workspaces.

/// A then-branch whose two 256-byte temporaries live together (512 bytes) and an
/// else-branch of one, both reading the outer `x`.
fn branches() -> (Graph, Graph) {
    let mut then = GraphBuilder::new("then");
    let x = then.input("x", DType::F32, [64]);
    let e1 = then.op("Neg", &[x], DType::F32, [64]);
    let e2 = then.op("Exp", &[x], DType::F32, [64]);
    let y = then.op("Add", &[e1, e2], DType::F32, [64]);
    then.mark_output(y);
    let mut other = GraphBuilder::new("else");
    let x = other.input("x", DType::F32, [64]);
    let y = other.op("Relu", &[x], DType::F32, [64]);
    other.mark_output(y);
    (then.build_unchecked(), other.build_unchecked())
}

/// Adds `x = Relu(a)` and `r = If(c)` over [`branches`] to `g`; returns `x` and `r`.
fn add_if(
    g: &mut GraphBuilder,
    a: TensorId,
    c: TensorId,
    r_kind: TensorKind,
) -> (TensorId, TensorId) {
    let x = g.tensor("x", DType::F32, [64], TensorKind::Activation);
    g.node("relu", "Relu", &[Some(a)], &[x]);
    let r = g.tensor("r", DType::F32, [64], r_kind);
    g.node("if", "If", &[Some(c)], &[r]);
    let (then, other) = branches();
    g.body("then_branch", then);
    g.body("else_branch", other);
    (x, r)
}

fn if_plan() -> (Graph, Plan) {
    let mut g = GraphBuilder::new("if");
    let a = g.input("a", DType::F32, [64]);
    let c = g.input("c", DType::Bool, [0i64; 0]);
    let (x, r) = add_if(&mut g, a, c, TensorKind::Activation);
    let out = g.op("Add", &[r, x], DType::F32, [64]);
    g.mark_output(out);
    let g = g.build().unwrap();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    (g, plan)
}

#[test]
fn workspaces_carry_body_plans_through_the_plan_file() {
    let (g, plan) = if_plan();
    let w = &plan.workspaces[0];
    assert_eq!(w.bytes, 512);
    let attrs: Vec<&str> = w.bodies.iter().map(|b| b.attr.as_str()).collect();
    assert_eq!(attrs, ["then_branch", "else_branch"]);
    assert_eq!(w.bodies[0].plan.arena_bytes, 512);
    let back = Plan::from_json(&g, &plan.to_json(&g)).unwrap();
    assert_eq!(back.workspaces, plan.workspaces);
    verify_plan(&g, &back).unwrap();
}

/// Issue 29, item 3: the workspace cut to 256 bytes, which used to pass (the verifier asked
/// only for the largest body tensor).
#[test]
fn a_workspace_smaller_than_its_body_plan_is_refused() {
    let (g, plan) = if_plan();
    let mut small = plan.clone();
    small.workspaces[0].bytes = 256;
    let v = violations(&g, &small);
    assert!(
        v.iter().any(|v| matches!(
            v,
            PlanViolation::BadWorkspace {
                reason: WorkspaceFault::TooSmall { need: 512, .. },
                ..
            }
        )),
        "{v:?}"
    );
    // And the body plan squeezed to fit: its two temporaries now overlap.
    let body = &mut small.workspaces[0].bodies[0].plan;
    body.arena_bytes = 256;
    for b in &mut body.buffers {
        b.offset = 0;
    }
    let v = violations(&g, &small);
    assert!(
        v.iter()
            .any(|v| matches!(v, PlanViolation::InBody { problem, .. }
            if matches!(**problem, PlanViolation::Overlap { .. }))),
        "{v:?}"
    );
    // Rendered with the graph, the body's problem names the body's own tensors (its ids
    // index the body graph, not the outer one); without a graph, ids.
    let in_body = v
        .iter()
        .find(|v| matches!(v, PlanViolation::InBody { .. }))
        .unwrap();
    let (n, body) = g
        .nodes()
        .iter_enumerated()
        .find(|(_, n)| n.op == "If")
        .map(|(id, n)| (id, &n.bodies[0].graph))
        .unwrap();
    let text = in_body.with_graph(&g).to_string();
    let prefix = "in the plan of body `then_branch` of node `if`: storages of `";
    assert!(text.starts_with(prefix), "{text}");
    let first = text[prefix.len()..].split('`').next().unwrap();
    assert!(body.find_tensor(first).is_some(), "{text}");
    assert!(g.find_tensor(first).is_none(), "{text}");
    assert_eq!(in_body.entities(), vec![memplan_ir::AnyEntity::Node(n)]);
    assert!(
        in_body.to_string().contains(&format!("of node `{n}`")),
        "{in_body}"
    );
    // A plan file without body plans (as written before) no longer passes.
    let mut none = plan.clone();
    none.workspaces[0].bodies.clear();
    let v = violations(&g, &none);
    assert!(
        v.iter().any(|v| matches!(
            v,
            PlanViolation::BadWorkspace {
                reason: WorkspaceFault::NoBodyPlan(_),
                ..
            }
        )),
        "{v:?}"
    );
}

/// The same If inside a Loop body: the inner body plan is checked too, two levels down.
#[test]
fn nested_body_plans_are_checked_at_every_level() {
    let mut body = GraphBuilder::new("loop_body");
    let _i = body.input("i", DType::I64, [0i64; 0]);
    let cin = body.input("cin", DType::Bool, [0i64; 0]);
    let a = body.input("a", DType::F32, [64]);
    let cout = body.tensor("cout", DType::Bool, [0i64; 0], TensorKind::Output);
    body.node("cid", "Identity", &[Some(cin)], &[cout]);
    add_if(&mut body, a, cin, TensorKind::Output);
    let mut top = GraphBuilder::new("top");
    let m = top.input("m", DType::I64, [0i64; 0]);
    let c = top.input("c", DType::Bool, [0i64; 0]);
    let v = top.input("v", DType::F32, [64]);
    let out = top.tensor("out", DType::F32, [64], TensorKind::Output);
    top.node("loop", "Loop", &[Some(m), Some(c), Some(v)], &[out]);
    top.body("body", body.build_unchecked());
    let g = top.build().unwrap();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    let loop_body = &plan.workspaces[0].bodies[0].plan;
    assert_eq!(loop_body.workspaces[0].bodies[0].plan.arena_bytes, 512);

    let mut broken = plan.clone();
    let inner_plan = &mut broken.workspaces[0].bodies[0].plan.workspaces[0].bodies[0].plan;
    for b in &mut inner_plan.buffers {
        b.offset = 0;
    }
    let v = violations(&g, &broken);
    assert!(
        v.iter()
            .any(|v| matches!(v, PlanViolation::InBody { problem, .. }
            if matches!(&**problem, PlanViolation::InBody { .. }))),
        "the problem two levels down is found: {v:?}"
    );
    let back = Plan::from_json(&g, &plan.to_json(&g)).unwrap();
    assert_eq!(back.workspaces, plan.workspaces);
}

// ---------------------------------------------------------------------------------------
// Item 4: a plan that leaves out a graph input or output the arena holds.

#[test]
fn a_plan_without_an_input_or_output_the_arena_holds_is_refused() {
    let mut b = GraphBuilder::new("io");
    let x = b.input("x", DType::F32, [64]);
    let a = b.op("MatMul", &[x, x], DType::F32, [64]);
    let y = b.op("MatMul", &[a, a], DType::F32, [64]);
    b.mark_output(y);
    let g = b.build().unwrap();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    for t in [x, y] {
        let mut dropped = plan.clone();
        dropped.buffers.retain(|b| b.tensor != t);
        let v = violations(&g, &dropped);
        assert!(
            v.iter()
                .any(|v| matches!(v, PlanViolation::Missing { tensor, .. } if *tensor == t)),
            "{v:?}"
        );
    }
    // Left to the caller, they have no buffer; a buffer for them is then refused.
    let caller = PlanOptions::default()
        .with_inputs_in_arena(false)
        .with_outputs_in_arena(false);
    let plan = plan_graph(&g, &caller).unwrap();
    verify_plan(&g, &plan).unwrap();
    assert!(plan.buffer(x).is_none() && plan.buffer(y).is_none());
    let mut extra = plan.clone();
    let end = extra.arena_bytes;
    extra.buffers.push(PlannedBuffer {
        tensor: y,
        offset: end,
        bytes: 256,
        first: 1,
        last: 1,
        alias: None,
    });
    extra.arena_bytes += 256;
    assert!(
        violations(&g, &extra)
            .iter()
            .any(|v| matches!(v, PlanViolation::WrongRegion { .. }))
    );
}

// ---------------------------------------------------------------------------------------
// Item 10: `Concat(a, b, a)` with `a` written into one of its two slices.

#[test]
fn a_part_the_concat_reads_twice_is_refused() {
    let mut b = GraphBuilder::new("aba");
    let x = b.input("x", DType::F32, [1, 64]);
    let a = b.op("Relu", &[x], DType::F32, [1, 64]);
    let c = b.op("Neg", &[x], DType::F32, [1, 64]);
    let y = b.op("Concat", &[a, c, a], DType::F32, [1, 192]);
    b.attr("axis", Attr::Int(1));
    b.mark_output(y);
    let g = b.build().unwrap();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    assert!(
        plan.buffer(a).unwrap().alias.is_none(),
        "the planner makes no part of `a`"
    );
    let mut m = plan.clone();
    let at = plan.buffer(y).unwrap().offset;
    let ab = buffer(&mut m, a);
    ab.alias = Some(Alias::Part { of: y, offset: 0 });
    ab.offset = at;
    let v = violations(&g, &m);
    assert!(
        v.iter()
            .any(|v| v.to_string().contains("reads it more than once")),
        "{v:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Item 15 (and issue 30): the order lookups rely on, alignment 0, weight overlaps.

fn three_weights() -> (Graph, Plan) {
    let mut b = GraphBuilder::new("w");
    let x = b.input("x", DType::F32, [64]);
    let w1 = b.weight("w1", DType::F32, [64]);
    let w2 = b.weight("w2", DType::F32, [4]);
    let w3 = b.weight("w3", DType::F32, [4]);
    let a = b.op("Add", &[x, w1], DType::F32, [64]);
    let c = b.op("Add", &[a, w2], DType::F32, [64]);
    let y = b.op("Add", &[c, w3], DType::F32, [64]);
    b.mark_output(y);
    let g = b.build().unwrap();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    (g, plan)
}

#[test]
fn a_plan_file_in_another_order_is_read_into_tensor_order() {
    let (g, plan) = three_weights();
    let mut reversed = plan.clone();
    reversed.buffers.reverse();
    reversed.weights.reverse();
    // Built in code, the order is the verifier's to check.
    let v = violations(&g, &reversed);
    assert!(
        v.iter().any(|v| matches!(
            v,
            PlanViolation::OutOfOrder {
                what: PlanList::Buffers,
                ..
            }
        )),
        "{v:?}"
    );
    assert!(v.iter().any(|v| matches!(
        v,
        PlanViolation::OutOfOrder {
            what: PlanList::Weights,
            ..
        }
    )));
    // Read from a file, it is put in order, and lookups find every tensor.
    let back = Plan::from_json(&g, &reversed.to_json(&g)).unwrap();
    assert_eq!(back, plan);
    for b in &plan.buffers {
        assert_eq!(back.buffer(b.tensor), Some(b));
    }
    for w in &plan.weights {
        assert_eq!(back.weight(w.tensor), Some(w));
    }
}

#[test]
fn alignment_zero_is_refused() {
    let (g, mut plan) = three_weights();
    plan.alignment = 0;
    assert!(
        violations(&g, &plan)
            .iter()
            .any(|v| matches!(v, PlanViolation::BadAlignment { alignment: 0 }))
    );
}

/// Weights overlapping past their neighbour: `w1` over `w3` with `w2` between them.
#[test]
fn weight_overlaps_are_found_for_every_pair() {
    let (g, mut plan) = three_weights();
    let w = |n: &str| g.find_tensor(n).unwrap();
    let (w1, w2, w3) = (w("w1"), w("w2"), w("w3"));
    for pw in &mut plan.weights {
        pw.offset = if pw.tensor == w1 {
            0
        } else if pw.tensor == w2 {
            16
        } else {
            128
        };
    }
    plan.weight_bytes = 256;
    let pairs: Vec<(Occupant, Occupant)> = violations(&g, &plan)
        .into_iter()
        .filter_map(|v| match v {
            PlanViolation::Overlap { a, b, .. } => Some((a, b)),
            _ => None,
        })
        .collect();
    let name = Occupant::Tensor;
    assert!(pairs.contains(&(name(w1), name(w2))), "{pairs:?}");
    assert!(pairs.contains(&(name(w1), name(w3))), "{pairs:?}");
}

// ---------------------------------------------------------------------------------------
// Item 7: Concat elision does not depend on the batch size.

/// `smp_unet_resnet34_b1` with every activation's (and input's and output's) batch dim 1
/// made `batch`: what the audit built to find that batch 2 elided nothing.
pub fn unet_at_batch(batch: i64) -> Graph {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/graphs/json/smp_unet_resnet34_b1.json"
    );
    let mut g = Graph::load_json(std::path::Path::new(path)).unwrap();
    let ids: Vec<TensorId> = g.tensors().ids().collect();
    for t in ids {
        let tensor = g.tensor(t);
        if tensor.kind == TensorKind::Weight || tensor.shape.first() != Some(&Expr::constant(1)) {
            continue;
        }
        let mut shape = tensor.shape.clone();
        shape[0] = Expr::constant(batch);
        g.set_shape(t, shape);
    }
    g.name = format!("smp_unet_resnet34_b{batch}");
    g.batch = u64::try_from(batch).ok();
    g.validate().unwrap();
    g
}

#[test]
fn concat_elision_is_the_same_at_every_batch() {
    let mut arenas = Vec::new();
    for batch in [1, 2, 3, 4, 8] {
        let g = unet_at_batch(batch);
        let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
        verify_plan(&g, &plan).unwrap_or_else(|e| panic!("batch {batch}: {}", e.with_graph(&g)));
        assert_eq!(
            plan.stats.parts, 4,
            "batch {batch}: the four skip inputs are parts"
        );
        let without = plan_graph(&g, &PlanOptions::default().with_concat_elision(false)).unwrap();
        assert!(
            plan.arena_bytes < without.arena_bytes,
            "batch {batch}: {} against {} without elision",
            plan.arena_bytes,
            without.arena_bytes
        );
        arenas.push((batch as u64, plan.arena_bytes));
        // Past batch 1 the parts are strided: one run per image, the output's image apart.
        let strided = plan
            .buffers
            .iter()
            .filter(|b| memplan_planner::strided_part(&g, &plan, b).is_some())
            .count();
        assert_eq!(strided, if batch == 1 { 0 } else { 4 });
    }
    // 52 MiB at batch 1, and as much per image at every batch.
    let (_, one) = arenas[0];
    assert_eq!(one, 52 << 20);
    for (batch, arena) in arenas {
        assert_eq!(arena, batch * one, "batch {batch}");
    }
}

/// A strided part misplaced by one element, or with a view made of it, or written over in
/// place, is refused.
#[test]
fn strided_parts_are_checked_run_by_run() {
    let g = unet_at_batch(2);
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    let part = plan
        .buffers
        .iter()
        .find(|b| memplan_planner::strided_part(&g, &plan, b).is_some())
        .unwrap()
        .clone();
    let Some(Alias::Part { of, offset }) = part.alias else {
        panic!("a part")
    };
    let mut shifted = plan.clone();
    let b = buffer(&mut shifted, part.tensor);
    b.offset += 4;
    b.alias = Some(Alias::Part {
        of,
        offset: offset + 4,
    });
    assert!(!violations(&g, &shifted).is_empty());
    // The plan file writes its runs for readers, and reads back the same plan.
    let json = plan.to_json(&g);
    assert!(
        json.contains("\"rows\":2,\"stride\":"),
        "the runs are written"
    );
    assert_eq!(Plan::from_json(&g, &json).unwrap(), plan);

    // A runtime places the runs where the file says: a file whose `rows` or `stride` is
    // not the Concat's (a hand edit) is refused, not read as if it said the right ones.
    let (rows, stride) = memplan_planner::strided_part(&g, &plan, &part).unwrap();
    let written = format!("\"rows\":{rows},\"stride\":{stride}");
    assert!(json.contains(&written));
    for edit in [
        format!("\"rows\":{rows},\"stride\":{}", stride + 4),
        format!("\"rows\":{},\"stride\":{stride}", rows - 1),
        format!("\"rows\":{rows}"),
    ] {
        let edited = json.replacen(&written, &edit, 1);
        let err = Plan::from_json(&g, &edited).unwrap_err();
        assert!(err.to_string().contains("stride"), "{edit}: {err}");
    }
    // Nor is a file that drops them: a runtime would write the part as one range.
    let dropped = json.replacen(&format!(",{written}"), "", 1);
    let err = Plan::from_json(&g, &dropped).unwrap_err();
    assert!(err.to_string().contains("stride"), "{err}");
}

/// A plan at the bound of a graph with control flow: its body plans are checked below the
/// bound along with it (they were once refused there as made "with other bindings").
#[test]
fn body_plans_are_checked_below_the_bound_too() {
    let mut b = GraphBuilder::new("if_bounded");
    let k = b.symbol("k");
    let kx = Expr::symbol(k);
    let c = b.input("c", DType::Bool, [0i64; 0]);
    let x = b.input("x", DType::F32, vec![kx.clone()]);
    let _ = x;
    let mut then = GraphBuilder::new("then");
    then.symbol("k");
    let tx = then.input("x", DType::F32, vec![kx.clone()]);
    let t1 = then.op("Neg", &[tx], DType::F32, vec![kx.clone()]);
    let t2 = then.op("Exp", &[t1], DType::F32, vec![kx.clone()]);
    then.mark_output(t2);
    let r = b.tensor("r", DType::F32, vec![kx], TensorKind::Output);
    b.node("if", "If", &[Some(c)], &[r]);
    b.body("then_branch", then.build_unchecked());
    let mut g = b.build().unwrap();
    assert!(g.set_symbol_bound(k, Expr::constant(4)));
    let options = PlanOptions::default()
        .with_bindings(Bindings::new().with(k, 4))
        .with_bounded(vec![k]);
    let plan = plan_graph(&g, &options).unwrap();
    assert_eq!(plan.workspaces[0].bodies[0].plan.settings.bounded, ["k"]);
    verify_plan(&g, &plan).unwrap();
    for v in 0..=4 {
        verify_plan(&g, &plan.at_values(&g, &[("k".to_owned(), v)]).unwrap())
            .unwrap_or_else(|e| panic!("k={v}: {e}"));
    }
}

/// A weight that an optimizer step updates in place is no constant: `wt = Transpose(w)`,
/// read after `memplan.SGD(w, g)`, must see the new `w`, so it is computed in its step and
/// not once at load (it was folded into the weight region, computed from the old `w`, and
/// `memplan check --check-weights` accepted it). A plan that folds it is refused.
#[test]
fn nothing_computed_from_an_updated_weight_is_folded() {
    let mut b = GraphBuilder::new("updated_weight");
    let x = b.input("x", DType::F32, [4, 8]);
    let w = b.weight("w", DType::F32, [8, 8]);
    let g = b.input("g", DType::F32, [8, 8]);
    b.node("sgd", "memplan.SGD", &[Some(w), Some(g)], &[]);
    let wt = b.op("Transpose", &[w], DType::F32, [8, 8]);
    b.attr("perm", Attr::Ints(vec![1, 0]));
    let y = b.op("MatMul", &[x, wt], DType::F32, [4, 8]);
    b.mark_output(y);
    let graph = b.build().unwrap();
    let plan = plan_graph(&graph, &PlanOptions::default()).unwrap();
    verify_plan(&graph, &plan).unwrap();
    assert!(plan.buffer(wt).is_some(), "{:?}", plan.weights);
    assert!(plan.weight(wt).is_none());

    // The plan that computed it at load: `wt` moved from the arena to the weight region.
    let mut folded = plan.clone();
    folded.buffers.retain(|b| b.tensor != wt);
    folded.weights.push(memplan_planner::PlannedWeight {
        tensor: wt,
        offset: folded.weight_bytes,
        bytes: 256,
    });
    folded.weight_bytes += 256;
    folded.weights.sort_by_key(|w| w.tensor);
    assert!(!violations(&graph, &folded).is_empty());
}

/// A folded weight entry without the node that computes it (`computed_by` dropped by a
/// hand edit) is refused on reading: a runtime following the file would never compute it,
/// and the plan read back (which derives folding from the graph) used to pass the checks.
#[test]
fn a_folded_weight_without_its_computer_is_refused() {
    let mut b = GraphBuilder::new("folded");
    let x = b.input("x", DType::F32, [4, 8]);
    let w = b.weight("w", DType::F32, [8, 8]);
    let wt = b.op("Transpose", &[w], DType::F32, [8, 8]);
    b.attr("perm", Attr::Ints(vec![1, 0]));
    let y = b.op("MatMul", &[x, wt], DType::F32, [4, 8]);
    b.mark_output(y);
    let g = b.build().unwrap();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    assert!(plan.weight(wt).is_some(), "folded");
    let json = plan.to_json(&g);
    let node = &g.node(g.producers()[wt].unwrap()).name;
    let said = format!(",\"computed_by\":\"{node}\"");
    assert!(json.contains(&said), "{json}");
    assert_eq!(Plan::from_json(&g, &json).unwrap(), plan);
    let err = Plan::from_json(&g, &json.replacen(&said, "", 1)).unwrap_err();
    assert!(err.to_string().contains("computed_by"), "{err}");
}
