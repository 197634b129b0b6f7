//! Training on real bytes: derived training steps and ONNX Runtime-style graphs run clean in
//! the pattern check, which finds a reader moved across an in-place update, an updated
//! tensor sharing its bytes, and a clobbered parameter; and the three independent
//! statements of which inputs an op updates and which it reads only the shape of (the
//! planner's `OpTable`, the plan verifier's rules, the pattern check's `op_effects`) agree.

use memplan_cuda_arena::{
    Cause, CheckArena, CheckOptions, Layout, LayoutOptions, op_effects, run_check,
};
use memplan_ir::{Attr, DType, Graph, GraphBuilder, Node, NodeId, OpTable, TensorKind};
use memplan_planner::{
    Checkpoint, Optimizer, Plan, PlanOptions, PlanViolation, TrainingOptions, plan_graph,
    plan_training, verify_plan,
};

fn run(graph: &Graph, plan: &Plan) -> memplan_cuda_arena::CheckReport {
    let layout = Layout::new_unverified(graph, plan, &LayoutOptions::default()).unwrap();
    let mut arena = CheckArena::new(layout.clone()).unwrap();
    let options = CheckOptions::default().with_skip_weights(false);
    run_check(graph, &layout, &mut arena, options).unwrap()
}

fn mlp() -> Graph {
    let mut g = GraphBuilder::new("mlp");
    let x = g.input("x", DType::F32, [8, 32]);
    let w1 = g.weight("w1", DType::F32, [32, 64]);
    let w2 = g.weight("w2", DType::F32, [64, 10]);
    let h = g.op("MatMul", &[x, w1], DType::F32, [8, 64]);
    let r = g.op("Gelu", &[h], DType::F32, [8, 64]);
    let d = g.op("Dropout", &[r], DType::F32, [8, 64]);
    let y = g.op("MatMul", &[d, w2], DType::F32, [8, 10]);
    g.mark_output(y);
    g.build().unwrap()
}

#[test]
fn derived_steps_run_clean_with_every_option() {
    let g = mlp();
    for optimizer in Optimizer::ALL {
        for fused_optimizer in [false, true] {
            for checkpoint in [Checkpoint::None, Checkpoint::Cheap, Checkpoint::Every(1)] {
                let options = TrainingOptions::default()
                    .with_optimizer(optimizer)
                    .with_fused_optimizer(fused_optimizer)
                    .with_checkpoint(checkpoint.clone());
                let s = plan_training(&g, &options).unwrap();
                verify_plan(&s.graph, &s.plan).unwrap();
                let report = run(&s.graph, &s.plan);
                assert!(
                    report.is_clean(),
                    "{optimizer} fused {fused_optimizer} {checkpoint:?}: {:?}",
                    report.render_clobbers(&s.graph)
                );
            }
        }
    }
}

#[test]
fn a_weight_read_after_its_update_is_caught() {
    let g = mlp();
    let s = plan_training(&g, &TrainingOptions::default().with_fused_optimizer(true)).unwrap();
    // Move the update of w2 before the backward node that reads w2 (dX = dY . w2^T).
    let w2 = s.graph.find_tensor("w2").unwrap();
    let update = s
        .graph
        .nodes()
        .iter_enumerated()
        .find(|(_, n)| n.op == "memplan.Adam" && n.inputs[0] == Some(w2))
        .map(|(id, _)| id)
        .unwrap();
    let reader = s
        .graph
        .nodes()
        .iter_enumerated()
        .find(|(id, n)| *id > NodeId(3) && *id != update && n.inputs.contains(&Some(w2)))
        .map(|(id, _)| id)
        .unwrap();
    let mut plan = s.plan.clone();
    let at = |p: &Plan, n| p.schedule.iter().position(|&x| x == n).unwrap();
    let (r, u) = (at(&plan, reader), at(&plan, update));
    assert!(r < u);
    plan.schedule.remove(u);
    plan.schedule.insert(r, update);
    let problems = verify_plan(&s.graph, &plan).unwrap_err().0;
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, PlanViolation::MovedAcrossUpdate { .. })),
        "{problems:?}"
    );
    let report = run(&s.graph, &plan);
    assert!(
        report
            .clobbers
            .iter()
            .any(|c| c.tensor == w2 && matches!(c.cause, Cause::UpdateOrder { .. })),
        "{:?}",
        report.render_clobbers(&s.graph)
    );
}

/// An ONNX Runtime-style step: parameter and gradient buffer as inputs, the buffer updated
/// in place, big activations after the parameter's last read.
fn ort_like() -> Graph {
    let mut b = GraphBuilder::new("ort");
    let x = b.input("x", DType::F32, [32, 64]);
    let w = b.input("w", DType::F32, [64, 64]);
    let buf = b.input("w_grad.accumulation.buffer", DType::F32, [64, 64]);
    let h = b.op("MatMul", &[x, w], DType::F32, [32, 64]);
    let dw = b.op("MatMul", &[x, h], DType::F32, [64, 64]);
    let flag = b.tensor("flag", DType::Bool, [1], TensorKind::Output);
    b.node(
        "accumulate",
        "com.microsoft.InPlaceAccumulatorV2",
        &[Some(buf), Some(dw)],
        &[flag],
    );
    let big = b.op("Tile", &[h], DType::F32, [64, 256]);
    let out = b.op("Relu", &[big], DType::F32, [64, 256]);
    b.mark_output(out);
    b.build().unwrap()
}

#[test]
fn parameters_planned_as_plain_inputs_are_clobbered_and_as_state_are_not() {
    let mut g = ort_like();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    // The caller's parameter `w` is overwritten once read: a clean run of this step, but the
    // next step finds its weights gone. Checked as the caller would: `w` read after the step.
    let w = g.find_tensor("w").unwrap();
    let wb = plan.buffer(w).unwrap();
    assert!(plan.buffers.iter().any(|b| b.tensor != w
        && b.first > wb.last
        && b.offset < wb.offset + wb.bytes
        && wb.offset < b.offset + b.bytes));
    memplan_planner::mark_state(&mut g, &OpTable::default(), &[]).unwrap();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    let report = run(&g, &plan);
    assert!(report.is_clean(), "{:?}", report.render_clobbers(&g));
    // The buffer, updated, is read back after the last step (state is checked then).
    assert!(report.reads > 0);
    // A plan that puts an activation over the persistent buffer is caught.
    let buf = g.find_tensor("w_grad.accumulation.buffer").unwrap();
    let mut bad = plan.clone();
    let slot = bad.weight(buf).unwrap().offset;
    bad.weights.iter_mut().for_each(|wt| {
        if wt.tensor == w {
            wt.offset = slot;
        }
    });
    let report = run(&g, &bad);
    assert!(!report.is_clean());
}

/// Nodes of every op the three statements talk about, with `n` inputs each.
fn probe_nodes() -> (Graph, Vec<NodeId>) {
    let ops = [
        "com.microsoft.InPlaceAccumulatorV2",
        "com.microsoft.AdamWOptimizer",
        "com.microsoft.SGDOptimizerV2",
        "memplan.SGD",
        "memplan.Momentum",
        "memplan.Adam",
        "Add",
        "Shape",
        "Size",
        "com.microsoft.ReluGrad",
        "MatMul",
    ];
    let mut b = GraphBuilder::new("probe");
    let xs: Vec<_> = (0..7)
        .map(|i| b.input(format!("x{i}"), DType::F32, [4]))
        .collect();
    let mut nodes = Vec::new();
    for (k, op) in ops.iter().enumerate() {
        for n in 1..=7 {
            let out = b.tensor(format!("y{k}_{n}"), DType::F32, [4], TensorKind::Output);
            let inputs: Vec<_> = xs.iter().take(n).map(|&x| Some(x)).collect();
            nodes.push(b.node(format!("{op}_{n}"), op, &inputs, &[out]));
        }
    }
    b.attr("axis", Attr::Int(0));
    (b.build_unchecked(), nodes)
}

#[test]
fn the_three_statements_of_updates_and_shape_reads_agree() {
    let (g, nodes) = probe_nodes();
    let table = OpTable::default();
    let mut updating = 0;
    for &n in &nodes {
        let node: &Node = g.node(n);
        let ir: Vec<usize> = table.mutated_inputs(node).to_vec();
        let arena = op_effects::updates(node);
        assert_eq!(ir, arena, "{}", node.name);
        updating += usize::from(!ir.is_empty());
        for pos in 0..node.inputs.len() {
            assert_eq!(
                memplan_ir::reads_bytes(node, pos),
                op_effects::reads_bytes(node, pos),
                "{} input {pos}",
                node.name
            );
        }
    }
    assert!(updating >= 30, "{updating}");
    // The verifier's statement, through its verdicts: for each node alone in a graph with a
    // second reader of each input after it, swapping the two is refused exactly when the
    // node updates that input.
    for &n in &nodes {
        let node = g.node(n).clone();
        let updates = table.mutated_inputs(&node);
        for pos in 0..node.inputs.len() {
            let mut b = GraphBuilder::new("pair");
            let xs: Vec<_> = (0..node.inputs.len())
                .map(|i| b.input(format!("x{i}"), DType::F32, [4]))
                .collect();
            let y = b.tensor("y", DType::F32, [4], TensorKind::Output);
            let inputs: Vec<_> = xs.iter().map(|&x| Some(x)).collect();
            let first = b.node("first", &node.op, &inputs, &[y]);
            let z = b.op("Neg", &[xs[pos]], DType::F32, [4]);
            b.mark_output(z);
            let pair = b.build_unchecked();
            let mut plan = plan_graph(&pair, &PlanOptions::default()).unwrap();
            plan.schedule = vec![NodeId(1), first];
            for buf in &mut plan.buffers {
                buf.first = 0;
                buf.last = 1;
            }
            let moved = match verify_plan(&pair, &plan) {
                Ok(()) => false,
                Err(v) => {
                    v.0.iter()
                        .any(|p| matches!(p, PlanViolation::MovedAcrossUpdate { .. }))
                }
            };
            assert_eq!(moved, updates.contains(&pos), "{} input {pos}", node.op);
        }
    }
}
