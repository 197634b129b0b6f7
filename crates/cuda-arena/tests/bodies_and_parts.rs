//! The host run (pattern check) of issue 29's control-flow and Concat findings: it runs the
//! plans of bodies inside their workspaces (item 3), reads what bodies capture by name at
//! any depth (item 2), and writes and checks strided Concat parts run by run (item 7), so
//! that each broken plan below is caught without the plan verifier.

use memplan_cuda_arena::{CheckArena, CheckOptions, CheckReport, Layout, LayoutOptions, run_check};
use memplan_ir::{Attr, DType, Graph, GraphBuilder, TensorId, TensorKind};
use memplan_planner::{Alias, Plan, PlanOptions, plan_graph, verify_plan};

/// Lays `plan` out without the verifier and runs it on a host arena.
fn run(graph: &Graph, plan: &Plan) -> CheckReport {
    let layout = Layout::new_unverified(graph, plan, &LayoutOptions::default()).unwrap();
    let mut arena = CheckArena::new(layout.clone()).unwrap();
    run_check(graph, &layout, &mut arena, CheckOptions::default()).unwrap()
}

/// `x = Relu(a)`, `t = Neg(x)`, a Loop (carrying `t`) whose body runs an If whose
/// then-branch reads `x` and makes two 256-byte temporaries, then `out = Add(v, t)`. With
/// `declared`, every level lists `x` as the ONNX importer (or the JSON reader) would.
fn loop_if(declared: bool) -> Graph {
    let mut then = GraphBuilder::new("then");
    let x = then.input("x", DType::F32, [64]);
    let e1 = then.op("Neg", &[x], DType::F32, [64]);
    let e2 = then.op("Exp", &[x], DType::F32, [64]);
    let y = then.op("Add", &[e1, e2], DType::F32, [64]);
    then.mark_output(y);
    let mut other = GraphBuilder::new("else");
    let vin = other.input("vin", DType::F32, [64]);
    let y2 = other.op("Relu", &[vin], DType::F32, [64]);
    other.mark_output(y2);

    let mut body = GraphBuilder::new("body");
    let _i = body.input("i", DType::I64, [0i64; 0]);
    let cin = body.input("cin", DType::Bool, [0i64; 0]);
    let _vin = body.input("vin", DType::F32, [64]);
    if declared {
        body.input("x", DType::F32, [64]);
    }
    let cout = body.tensor("cout", DType::Bool, [0i64; 0], TensorKind::Output);
    body.node("cid", "Identity", &[Some(cin)], &[cout]);
    let vout = body.tensor("vout", DType::F32, [64], TensorKind::Output);
    body.node("if", "If", &[Some(cin)], &[vout]);
    body.body("then_branch", then.build_unchecked());
    body.body("else_branch", other.build_unchecked());

    let mut g = GraphBuilder::new("loop_if");
    let a = g.input("a", DType::F32, [64]);
    let m = g.weight("m", DType::I64, [0i64; 0]);
    let c = g.input("c", DType::Bool, [0i64; 0]);
    let x = g.tensor("x", DType::F32, [64], TensorKind::Activation);
    g.node("relu", "Relu", &[Some(a)], &[x]);
    let t = g.tensor("t", DType::F32, [64], TensorKind::Activation);
    g.node("neg", "Neg", &[Some(x)], &[t]);
    let v = g.tensor("v", DType::F32, [64], TensorKind::Activation);
    g.node("loop", "Loop", &[Some(m), Some(c), Some(t)], &[v]);
    g.body("body", body.build_unchecked());
    let out = g.op("Add", &[v, t], DType::F32, [64]);
    g.mark_output(out);
    g.build_unchecked()
}

/// Item 2: the plan the old reading made (`x` dead after Neg, `t` written over it), run on
/// the graph as the file had it (no level declaring `x`): the host run reads what the
/// bodies capture by name, so it finds `x` clobbered all the same.
#[test]
fn an_undeclared_deep_capture_is_read_by_name() {
    let good = loop_if(true);
    good.validate().unwrap();
    let plan = plan_graph(&good, &PlanOptions::default()).unwrap();
    verify_plan(&good, &plan).unwrap();
    assert!(run(&good, &plan).is_clean());

    // The graph as the file had it: no node listing `x` (validation refuses it; the run
    // does not need it to).
    let mut bad = good.clone();
    let lp = bad.find_node("loop").unwrap();
    bad.node_mut(lp).implicit_inputs.clear();
    assert!(
        bad.validate().is_err(),
        "validation refuses the undeclared capture"
    );
    assert!(loop_if(false).validate().is_err());
    let x = bad.find_tensor("x").unwrap();
    let t = bad.find_tensor("t").unwrap();
    let mut old = plan.clone();
    let x_at = old.buffer(x).unwrap().offset;
    for b in &mut old.buffers {
        if b.tensor == x {
            b.last = 1;
        }
        if b.tensor == t {
            b.offset = x_at;
            b.alias = Some(Alias::InPlace { of: x });
        }
    }
    let report = run(&bad, &old);
    assert!(
        report
            .clobbers
            .iter()
            .any(|c| c.tensor == x && c.step == Some(2)),
        "{:?}",
        report.render_clobbers(&bad)
    );
}

/// Item 3: the workspace cut below what its body's plan needs: the body's run reaches past
/// it, two levels down.
#[test]
fn a_body_plan_past_its_workspace_is_caught_at_any_depth() {
    let g = loop_if(true);
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    let report = run(&g, &plan);
    assert!(report.is_clean());
    assert_eq!(report.bodies.len(), 1, "the Loop's body ran");
    assert_eq!(
        report.bodies[0].report.bodies.len(),
        2,
        "the If's branches ran in it"
    );

    // The If's workspace, inside the Loop's body plan, cut to one temporary.
    let mut cut = plan.clone();
    let inner = &mut cut.workspaces[0].bodies[0].plan.workspaces[0];
    assert_eq!(inner.bytes, 512);
    inner.bytes = 256;
    let report = run(&g, &cut);
    assert!(!report.is_clean());
    let lines = report.render_clobbers(&g);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("body `body`") && l.contains("outside the node's workspace")),
        "{lines:?}"
    );
}

/// `[a; b]` along the channels of f32[2, c, 4, 4]: two runs (one per image) per part.
fn two_images() -> (Graph, [TensorId; 3]) {
    let mut g = GraphBuilder::new("concat_b2");
    let x = g.input("x", DType::F32, [2, 1, 4, 4]);
    let a = g.op("Conv", &[x], DType::F32, [2, 4, 4, 4]);
    let b = g.op("Conv", &[x], DType::F32, [2, 2, 4, 4]);
    let y = g.op("Concat", &[a, b], DType::F32, [2, 6, 4, 4]);
    g.attr("axis", Attr::Int(1));
    let z = g.op("Relu", &[y], DType::F32, [2, 6, 4, 4]);
    g.mark_output(z);
    (g.build().unwrap(), [a, b, y])
}

/// Item 7: strided parts run clean; moved by one element, or read as a flat view, they are
/// caught run by run.
#[test]
fn strided_parts_are_written_and_checked_run_by_run() {
    let (g, [a, b, y]) = two_images();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    let parts: Vec<TensorId> = plan
        .buffers
        .iter()
        .filter(|x| matches!(x.alias, Some(Alias::Part { .. })))
        .map(|x| x.tensor)
        .collect();
    assert!(!parts.is_empty(), "parts at batch 2");
    assert!(run(&g, &plan).is_clean());
    let layout = Layout::new(&g, &plan, &LayoutOptions::default()).unwrap();
    let slot = layout.slot(parts[0]).unwrap();
    assert_eq!(slot.rows, 2, "one run per image");
    assert!(
        layout.view::<f32>(parts[0]).is_err(),
        "no flat view of runs"
    );

    // Every part moved by one element (4 bytes) into its neighbour's bytes.
    let y_at = plan.buffer(y).unwrap().offset;
    let mut moved = plan.clone();
    for bf in &mut moved.buffers {
        if let Some(Alias::Part { of, offset }) = bf.alias {
            bf.alias = Some(Alias::Part {
                of,
                offset: offset + 4,
            });
            bf.offset = y_at + offset + 4;
        }
    }
    assert!(verify_plan(&g, &moved).is_err());
    assert!(!run(&g, &moved).is_clean());

    // Written as if contiguous: `b`'s runs claimed as one range at its first run.
    let whole = plan
        .buffer(if parts.contains(&b) { b } else { a })
        .unwrap()
        .clone();
    let mut flat = plan.clone();
    for bf in &mut flat.buffers {
        if bf.tensor == whole.tensor {
            bf.alias = None;
        }
    }
    assert!(!run(&g, &flat).is_clean() || verify_plan(&g, &flat).is_err());
}
