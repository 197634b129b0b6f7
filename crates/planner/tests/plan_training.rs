//! Training plans: a forward and a backward graph share one weight layout, and saved
//! activations stay live from the forward producer to the last backward reader.

use memplan_ir::{DType, Graph, GraphBuilder, GraphError, TensorKind};
use memplan_planner::{
    PlanError, PlanOptions, TrainingFault, plan_forward_backward, plan_graph, verify_plan,
};

const B: i64 = 64;

/// x -> h = MatMul(x, w1) -> a = Relu(h) -> s = Sigmoid(a) -> y = MatMul(s, w2)
/// -> loss = ReduceSum(y).
fn forward() -> Graph {
    let mut g = GraphBuilder::new("fwd");
    let x = g.input("x", DType::F32, [B, 128]);
    let w1 = g.weight("w1", DType::F32, [128, 256]);
    let w2 = g.weight("w2", DType::F32, [256, 64]);
    let h = g.op("MatMul", &[x, w1], DType::F32, [B, 256]);
    let a = g.op("Relu", &[h], DType::F32, [B, 256]);
    let s = g.op("Sigmoid", &[a], DType::F32, [B, 256]);
    let y = g.op("MatMul", &[s, w2], DType::F32, [B, 64]);
    let loss = g.op("ReduceSum", &[y], DType::F32, [1]);
    g.mark_output(loss);
    g.build().unwrap()
}

/// Reads the saved `t4_Relu` (a, the forward builder's name for tensor `t4`) and `x`, and the
/// weights; writes dw1 and dw2. Its own tensors are named: a name it shares with the forward
/// graph means the forward's tensor.
fn backward(a_shape: [i64; 2]) -> Graph {
    let mut g = GraphBuilder::new("bwd");
    let dloss = g.input("dloss", DType::F32, [1]);
    let x = g.input("x", DType::F32, [B, 128]);
    let a = g.input("t4_Relu", DType::F32, a_shape);
    let w2 = g.weight("w2", DType::F32, [256, 64]);
    let dy = g.named_op("dy", "Expand", &[dloss], DType::F32, [B, 64]);
    let dw2 = g.named_op("dw2", "MatMul", &[a, dy], DType::F32, [256, 64]);
    g.mark_output(dw2);
    let da = g.named_op("da", "MatMul", &[dy, w2], DType::F32, [B, 256]);
    let dh = g.named_op("dh", "ReluGrad", &[da, a], DType::F32, [B, 256]);
    let dw1 = g.named_op("dw1", "MatMul", &[x, dh], DType::F32, [128, 256]);
    g.mark_output(dw1);
    g.build().unwrap()
}

#[test]
fn weights_share_one_layout_and_saved_activations_stay_live() {
    let (fwd, bwd) = (forward(), backward([B, 256]));
    let options = PlanOptions::default();
    let training = plan_forward_backward(&fwd, &bwd, &options).unwrap();

    // Every view verifies against its own graph.
    verify_plan(&training.joint, &training.plan).unwrap();
    verify_plan(&fwd, &training.forward).unwrap();
    verify_plan(&bwd, &training.backward).unwrap();

    // Forward weights have the offsets a forward-only plan gives them; the backward plan
    // reuses them.
    let alone = plan_graph(&fwd, &options).unwrap();
    assert_eq!(training.forward.weights, alone.weights);
    let fwd_w2 = fwd.find_tensor("w2").unwrap();
    let bwd_w2 = bwd.find_tensor("w2").unwrap();
    let offset_in = |plan: &memplan_planner::Plan, t| {
        plan.weights
            .iter()
            .find(|w| w.tensor == t)
            .map(|w| w.offset)
    };
    assert_eq!(
        offset_in(&training.backward, bwd_w2),
        offset_in(&alone, fwd_w2)
    );
    assert_eq!(
        training.forward.weight_bytes,
        training.backward.weight_bytes
    );

    // The saved activation lives from its forward producer through its last backward reader.
    let a = fwd.find_tensor("t4_Relu").unwrap();
    assert_eq!(training.saved, vec![a]);
    let joint_a = training
        .plan
        .buffers
        .iter()
        .find(|b| b.tensor == a)
        .unwrap();
    let relu_grad = training.joint.find_node("dh").unwrap();
    let relu_grad_step = training
        .plan
        .schedule
        .iter()
        .position(|&n| n == relu_grad)
        .unwrap() as u32;
    assert_eq!(joint_a.first, 1);
    assert_eq!(joint_a.last, relu_grad_step);
    // In the backward graph's own steps, it is an input live from step 0.
    let bwd_a = bwd.find_tensor("t4_Relu").unwrap();
    let b = training
        .backward
        .buffers
        .iter()
        .find(|b| b.tensor == bwd_a)
        .unwrap();
    assert_eq!((b.first, b.offset), (0, joint_a.offset));

    // Forward and backward schedules are the joint one split in two.
    assert_eq!(training.forward.schedule.len(), fwd.nodes().len());
    assert_eq!(training.backward.schedule.len(), bwd.nodes().len());
    assert_eq!(
        training.joint.nodes().len(),
        fwd.nodes().len() + bwd.nodes().len()
    );
    assert_eq!(training.forward.arena_bytes, training.plan.arena_bytes);
}

#[test]
fn nothing_the_backward_graph_reads_is_overwritten_in_place() {
    // In the forward graph alone the Sigmoid overwrites the dead Relu output; the backward
    // graph reads that output, so in the training plan nothing overwrites it.
    let fwd = forward();
    let alone = plan_graph(&fwd, &PlanOptions::default()).unwrap();
    let (a, s) = (
        fwd.find_tensor("t4_Relu").unwrap(),
        fwd.find_tensor("t5_Sigmoid").unwrap(),
    );
    let alias_of = |plan: &memplan_planner::Plan, t| {
        plan.buffers
            .iter()
            .find(|b| b.tensor == t)
            .and_then(|b| b.parent())
    };
    assert_eq!(alias_of(&alone, s), Some(a));
    let training =
        plan_forward_backward(&fwd, &backward([B, 256]), &PlanOptions::default()).unwrap();
    assert_eq!(alias_of(&training.plan, s), None);
    assert_eq!(alias_of(&training.forward, s), None);
    assert!(training.plan.buffers.iter().all(|b| b.parent() != Some(a)));
    let kind_of =
        |name: &str| training.joint.tensors()[training.joint.find_tensor(name).unwrap()].kind;
    assert_eq!(kind_of("t4_Relu"), TensorKind::Activation);
    assert_eq!(kind_of("dloss"), TensorKind::Input);
}

#[test]
fn mismatched_graphs_are_an_error_naming_the_tensor() {
    let err = plan_forward_backward(&forward(), &backward([B, 128]), &PlanOptions::default())
        .unwrap_err();
    match &err {
        PlanError::TrainingMismatch { tensor, reason } => {
            assert_eq!(tensor, "t4_Relu");
            assert_eq!(
                *reason,
                TrainingFault::Shape {
                    forward: "f32[64, 256]".to_owned(),
                    backward: "f32[64, 128]".to_owned(),
                },
                "{reason}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn the_memory_schedule_applies_to_the_joint_graph() {
    let (fwd, bwd) = (forward(), backward([B, 256]));
    let options = PlanOptions::default().with_schedule(memplan_planner::ScheduleMode::Memory);
    let training = plan_forward_backward(&fwd, &bwd, &options).unwrap();
    let choice = &training.plan.stats.schedule;
    assert!(choice.peak <= choice.given_peak, "{choice:?}");
    verify_plan(&training.joint, &training.plan).unwrap();
    verify_plan(&fwd, &training.forward).unwrap();
    verify_plan(&bwd, &training.backward).unwrap();
    let given = plan_forward_backward(&fwd, &bwd, &PlanOptions::default()).unwrap();
    assert_eq!(training.forward.weights, given.forward.weights);
}

/// An error found in the joint graph carries it: the backward's tensor is named, though its
/// joint id is no tensor of the backward graph (nor the forward's tensor of that id).
#[test]
fn an_error_in_the_joint_graph_names_its_own_tensor() {
    let fwd = forward();
    let mut b = GraphBuilder::new("bwd");
    let dloss = b.input("dloss", DType::F32, [1]);
    let text = b.named_op("text", "Cast", &[dloss], DType::String, [1]);
    b.mark_output(text);
    let bwd = b.build().unwrap();
    let err = plan_forward_backward(&fwd, &bwd, &PlanOptions::default()).unwrap_err();
    let PlanError::InGraph { graph, error } = &err else {
        panic!("{err:?}")
    };
    let PlanError::Size { tensor, .. } = error.as_ref() else {
        panic!("{err:?}")
    };
    assert_eq!(graph.graph().tensor(*tensor).name, "text");
    for shown in [
        err.to_string(),
        err.with_graph(&bwd).to_string(),
        err.with_graph(&fwd).to_string(),
    ] {
        assert!(
            shown.starts_with("tensor `text` has no byte size"),
            "{shown}"
        );
    }
}
