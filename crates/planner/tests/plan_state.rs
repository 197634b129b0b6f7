//! Training state and in-place updates: ONNX Runtime's parameters and gradient buffers are
//! persistent (never reused), an op that updates an input keeps its readers on their side
//! of the update and shares its bytes with nothing, and `Shape` keeps no bytes alive. The
//! verifier states each rule itself: it rejects plans that break them.

use memplan_ir::{DType, Graph, GraphBuilder, GraphError, NodeId, OpTable, TensorKind};
use memplan_planner::{
    Alias, PlanError, PlanOptions, PlanViolation, ScheduleFault, ScheduleMode, StateError,
    StateReason, mark_state, plan_graph, plan_with_schedule, verify_plan,
};

/// ONNX Runtime's shape of a training graph: a parameter `w` and its gradient buffer as graph
/// inputs; the gradient is added into the buffer in place.
fn ort_like() -> Graph {
    let mut b = GraphBuilder::new("ort");
    let x = b.input("x", DType::F32, [32, 64]);
    let w = b.input("w", DType::F32, [64, 64]);
    let buf = b.input("w_grad.accumulation.buffer", DType::F32, [64, 64]);
    let reset = b.input("lazy_reset_grad", DType::Bool, [1]);
    let h = b.op("MatMul", &[x, w], DType::F32, [32, 64]);
    let r = b.op("Relu", &[h], DType::F32, [32, 64]);
    // A reader of the buffer before the accumulation (a gradient-norm, say).
    let norm = b.op("ReduceSum", &[buf], DType::F32, [1]);
    b.mark_output(norm);
    let dw = b.op("MatMul", &[x, r], DType::F32, [64, 64]);
    let flag = b.tensor("flag", DType::Bool, [1], TensorKind::Output);
    b.node(
        "accumulate",
        "com.microsoft.InPlaceAccumulatorV2",
        &[Some(buf), Some(dw), Some(reset)],
        &[flag],
    );
    // Big tensors made after w's last read, that would reuse its bytes.
    let big = b.op("Tile", &[r], DType::F32, [64, 128]);
    let out = b.op("Relu", &[big], DType::F32, [64, 128]);
    b.mark_output(out);
    b.build().unwrap()
}

#[test]
fn ort_parameters_and_buffers_are_state_and_never_reused() {
    let mut g = ort_like();
    // As plain inputs, the parameter's bytes are reused after its last read.
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    let w = g.find_tensor("w").unwrap();
    let wb = plan.buffer(w).unwrap().clone();
    let reused = plan.buffers.iter().any(|b| {
        b.tensor != w
            && b.first > wb.last
            && b.offset < wb.offset + wb.bytes
            && wb.offset < b.offset + b.bytes
    });
    assert!(reused, "the plain plan reuses the parameter's bytes");
    // The buffer the accumulator updates lives through the last step: the caller reads it.
    let buf = g.find_tensor("w_grad.accumulation.buffer").unwrap();
    assert_eq!(plan.buffer(buf).unwrap().last as usize, g.nodes().len() - 1);

    let marked = mark_state(&mut g, &OpTable::default(), &[]).unwrap();
    assert_eq!(
        marked,
        vec![(w, StateReason::OrtNaming), (buf, StateReason::OrtNaming)]
    );
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    for t in [w, buf] {
        assert_eq!(g.tensor(t).kind, TensorKind::State);
        assert!(plan.buffer(t).is_none() && plan.weight(t).is_some());
    }
}

#[test]
fn state_is_recognised_by_update_and_by_pattern() {
    let mut b = GraphBuilder::new("g");
    let acc = b.input("acc", DType::F32, [8]);
    let x = b.input("x", DType::F32, [8]);
    let flag = b.tensor("flag", DType::Bool, [1], TensorKind::Output);
    b.node(
        "accumulate",
        "com.microsoft.InPlaceAccumulatorV2",
        &[Some(acc), Some(x)],
        &[flag],
    );
    let g0 = b.build().unwrap();
    let mut g = g0.clone();
    let marked = mark_state(&mut g, &OpTable::default(), &["x*".to_owned()]).unwrap();
    assert_eq!(
        marked,
        vec![
            (g.find_tensor("acc").unwrap(), StateReason::Updated),
            (g.find_tensor("x").unwrap(), StateReason::Pattern)
        ]
    );
    let mut g = g0;
    assert_eq!(
        mark_state(&mut g, &OpTable::default(), &["moment*".to_owned()]),
        Err(StateError::NoMatch {
            pattern: "moment*".to_owned(),
            graph: "g".to_owned()
        })
    );
}

fn step_of(schedule: &[NodeId], n: NodeId) -> usize {
    schedule.iter().position(|&x| x == n).unwrap()
}

#[test]
fn readers_keep_their_side_of_an_update() {
    let g = ort_like();
    let reader = g.find_node("n2_ReduceSum").unwrap();
    let acc = g.find_node("accumulate").unwrap();
    // The memory-aware order may move nodes, but not the reader past the accumulation.
    for mode in [ScheduleMode::Given, ScheduleMode::Memory] {
        let plan = plan_graph(&g, &PlanOptions::default().with_schedule(mode)).unwrap();
        verify_plan(&g, &plan).unwrap();
        assert!(step_of(&plan.schedule, reader) < step_of(&plan.schedule, acc));
    }
    // A caller's schedule that does is refused.
    let mut order: Vec<NodeId> = g.nodes().iter_enumerated().map(|(n, _)| n).collect();
    let (i, j) = (step_of(&order, reader), step_of(&order, acc));
    let moved = order.remove(i);
    order.insert(j, moved);
    match plan_with_schedule(&g, &order, &PlanOptions::default()) {
        Err(
            e @ PlanError::BadSchedule {
                reason: ScheduleFault::AcrossWrite { node, before },
                ..
            },
        ) => {
            assert_eq!((node, before), (acc, reader));
            assert!(
                e.with_graph(&g)
                    .to_string()
                    .contains("node `accumulate` runs before `n2_ReduceSum`"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    // And the verifier, given such a plan, says why.
    let mut plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    plan.schedule = order;
    for b in &mut plan.buffers {
        b.first = 0;
        b.last = u32::try_from(g.nodes().len() - 1).unwrap();
    }
    let problems = verify_plan(&g, &plan).unwrap_err().0;
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, PlanViolation::MovedAcrossUpdate { tensor, .. } if g.tensor(*tensor).name == "w_grad.accumulation.buffer")),
        "{problems:?}"
    );
}

#[test]
fn an_updated_tensor_shares_its_bytes_with_nothing() {
    // y = Relu(x); the accumulator updates y; Relu could otherwise run in place over x.
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [256]);
    let h = b.op("Exp", &[x], DType::F32, [256]);
    let y = b.op("Relu", &[h], DType::F32, [256]);
    let d = b.input("d", DType::F32, [256]);
    let flag = b.tensor("flag", DType::Bool, [1], TensorKind::Activation);
    b.node(
        "accumulate",
        "com.microsoft.InPlaceAccumulatorV2",
        &[Some(y), Some(d)],
        &[flag],
    );
    let out = b.op("Neg", &[y], DType::F32, [256]);
    b.mark_output(out);
    let g = b.build().unwrap();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    assert!(
        plan.buffer(y).unwrap().alias.is_none(),
        "no in-place write makes y"
    );
    assert!(
        plan.buffers.iter().all(|b| b.parent() != Some(y)),
        "nothing is written over or inside y"
    );
    // A plan that writes y over h anyway is rejected.
    let mut bad = plan.clone();
    let hb = bad.buffer(h).unwrap().clone();
    for b in &mut bad.buffers {
        if b.tensor == y {
            b.alias = Some(Alias::InPlace { of: h });
            b.offset = hb.offset;
        }
    }
    let problems = verify_plan(&g, &bad).unwrap_err().0;
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, PlanViolation::UpdatedShared { .. })),
        "{problems:?}"
    );
}

#[test]
fn shape_and_size_keep_no_bytes_alive() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [1024]);
    let big = b.op("Exp", &[x], DType::F32, [1024]);
    let small = b.op("ReduceSum", &[big], DType::F32, [1]);
    let t = b.op("Tile", &[small], DType::F32, [1024]);
    let shape = b.op("Shape", &[big], DType::I64, [1]);
    let size = b.op("Size", &[big], DType::I64, [0i64; 0]);
    let out = b.op("Add", &[t, small], DType::F32, [1024]);
    b.mark_output(out);
    b.mark_output(shape);
    b.mark_output(size);
    let g = b.build().unwrap();
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    // `big` dies after the ReduceSum (step 1), though Shape and Size read it at steps 3, 4.
    assert_eq!(plan.buffer(big).unwrap().last, 1);
    // The Tile's output may take its bytes.
    let tb = plan.buffer(t).unwrap();
    let bb = plan.buffer(big).unwrap();
    assert!(tb.offset < bb.offset + bb.bytes && bb.offset < tb.offset + tb.bytes);
}
