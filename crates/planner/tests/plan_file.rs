//! The plan file written whole ([`Plan::to_json_file`]) and read back in any order, and the
//! device total ([`Plan::device_bytes`]) it carries: checked, and an error where a size is
//! unknown.

mod common;

use memplan_ir::{DType, Expr, Graph, GraphBuilder, TensorId};
use memplan_planner::{DeviceBytesError, Plan, PlanHeader, PlanOptions, plan_graph, verify_plan};
use serde_json::Value;

/// A fixed permutation of `0..n` (Fisher-Yates with a small linear congruential generator),
/// so a failure is repeatable.
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut state = seed;
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = usize::try_from((state >> 33) % (i as u64 + 1)).unwrap();
        order.swap(i, j);
    }
    order
}

/// The plan file of `plan` with its buffers, weights and workspaces listed in a shuffled
/// order, as a hand edit or another tool might list them.
fn shuffled_file(graph: &Graph, plan: &Plan, seed: u64) -> String {
    let text = plan.to_json_file(graph, &PlanHeader::default()).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    for key in ["buffers", "weights", "workspaces"] {
        let Some(Value::Array(items)) = v.get_mut(key) else {
            continue;
        };
        let order = shuffled(items.len(), seed);
        let old = std::mem::take(items);
        *items = order.iter().map(|&i| old[i].clone()).collect();
    }
    serde_json::to_string(&v).unwrap()
}

#[test]
fn a_shuffled_plan_file_reads_as_the_plan_and_every_lookup_finds_its_tensor() {
    // Views and in-place writes (ResNet), Concat parts (the U-Net), many weights (BERT).
    for name in ["light_resnet50_b1", "smp_unet_resnet34_b1", "bert_base_b1"] {
        let graph = common::mutants::corpus_graph(name);
        let plan = plan_graph(&graph, &PlanOptions::default()).unwrap();
        verify_plan(&graph, &plan).unwrap();
        for seed in [1, 2, 3] {
            let text = shuffled_file(&graph, &plan, seed);
            let back = Plan::from_json(&graph, &text).unwrap();
            assert_eq!(back, plan, "{name}, seed {seed}");
            verify_plan(&graph, &back).unwrap();
            for b in &plan.buffers {
                assert_eq!(back.buffer(b.tensor), Some(b), "{name}");
            }
            for w in &plan.weights {
                assert_eq!(back.weight(w.tensor), Some(w), "{name}");
            }
            // A tensor with no place is found nowhere.
            for (t, _) in graph.tensors().iter_enumerated() {
                let placed = plan.buffers.iter().any(|b| b.tensor == t);
                assert_eq!(back.buffer(t).is_some(), placed, "{name}: {t}");
            }
        }
    }
}

/// A shuffle really moves entries: the test above would prove nothing otherwise.
#[test]
fn the_shuffle_changes_the_order() {
    let graph = common::mutants::corpus_graph("light_resnet50_b1");
    let plan = plan_graph(&graph, &PlanOptions::default()).unwrap();
    let v: Value = serde_json::from_str(&shuffled_file(&graph, &plan, 1)).unwrap();
    let names: Vec<&str> = v["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["tensor"].as_str().unwrap())
        .collect();
    let in_order: Vec<String> = plan
        .buffers
        .iter()
        .map(|b| graph.tensors()[b.tensor].name.clone())
        .collect();
    assert_eq!(names.len(), in_order.len());
    assert!(names.iter().zip(&in_order).any(|(a, b)| a != b));
}

/// `x[batch, 256] -> Relu -> y`, inputs and outputs left to the caller.
fn caller_io() -> (Graph, TensorId, PlanOptions) {
    let mut b = GraphBuilder::new("io");
    let batch = b.symbol("batch");
    let x = b.input(
        "x",
        DType::F32,
        vec![Expr::symbol(batch), Expr::constant(256)],
    );
    let w = b.weight("w", DType::F32, [256]);
    let h = b.op(
        "Add",
        &[x, w],
        DType::F32,
        vec![Expr::symbol(batch), Expr::constant(256)],
    );
    let y = b.op(
        "Relu",
        &[h],
        DType::F32,
        vec![Expr::symbol(batch), Expr::constant(256)],
    );
    b.mark_output(y);
    let graph = b.build().unwrap();
    let options = PlanOptions::default()
        .with_bindings(graph.bind(&[("batch", 3)]).unwrap())
        .with_inputs_in_arena(false)
        .with_outputs_in_arena(false);
    (graph, x, options)
}

#[test]
fn device_bytes_adds_the_caller_owned_inputs_and_outputs() {
    let (graph, _, options) = caller_io();
    let plan = plan_graph(&graph, &options).unwrap();
    verify_plan(&graph, &plan).unwrap();
    let d = plan.device_bytes(&graph).unwrap();
    // x and y are 3 x 256 f32 each, with the caller; h is alone in the arena.
    assert_eq!(
        (
            d.arena,
            d.weights,
            d.caller_inputs,
            d.caller_outputs,
            d.total
        ),
        (
            plan.arena_bytes,
            1024,
            3072,
            3072,
            plan.arena_bytes + 1024 + 6144
        )
    );
    assert_eq!(plan.arena_bytes, 3072);
    assert_eq!(d.planned(), 3072 + 1024);
    // The plan file carries the same figures after the weights.
    let v: Value = serde_json::from_str(
        &plan
            .to_json_file(
                &graph,
                &PlanHeader::default().with_produced_by(Some("test".to_owned())),
            )
            .unwrap(),
    )
    .unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys[0], "produced_by");
    let at = keys.iter().position(|&k| k == "weight_bytes").unwrap();
    assert_eq!(
        keys[at + 1..at + 4],
        ["caller_input_bytes", "caller_output_bytes", "total_bytes"]
    );
    assert_eq!(v["total_bytes"].as_u64(), Some(d.total));
    // Reading takes the plan from its fields, not from the totals.
    let text = serde_json::to_string(&v).unwrap();
    assert_eq!(Plan::from_json(&graph, &text).unwrap(), plan);
    // But caller-owned totals that are not the plan's are refused: a hand edit of one of
    // them, or of the bindings alone (`batch` 3 to 4: the file would still say 3 x 256 f32
    // caller bytes each; where only the caller's tensors grow, nothing else would notice).
    for key in ["caller_input_bytes", "caller_output_bytes"] {
        let mut w = v.clone();
        w[key] = serde_json::json!(v[key].as_u64().unwrap() - 1);
        let err = Plan::from_json(&graph, &w.to_string()).unwrap_err();
        assert!(err.to_string().contains(key), "{err}");
    }
    let mut w = v.clone();
    w["settings"]["bindings"][0][1] = serde_json::json!(4);
    let err = Plan::from_json(&graph, &w.to_string()).unwrap_err();
    assert!(err.to_string().contains("caller_input_bytes"), "{err}");
}

#[test]
fn an_unknown_caller_owned_size_is_an_error_not_zero() {
    let (graph, x, options) = caller_io();
    let mut plan = plan_graph(&graph, &options).unwrap();
    // The plan no longer says what `batch` is: the caller's input has no size.
    plan.settings.bindings.clear();
    match plan.device_bytes(&graph) {
        Err(DeviceBytesError::UnknownSize { tensor, name, .. }) => {
            assert_eq!((tensor, name.as_str()), (x, "x"));
        }
        other => panic!("{other:?}"),
    }
    // With the arena holding inputs and outputs, nothing is the caller's: no size needed.
    plan.settings.inputs_in_arena = true;
    plan.settings.outputs_in_arena = true;
    assert_eq!(
        plan.device_bytes(&graph).unwrap().total,
        plan.arena_bytes + 1024
    );
}

#[test]
fn a_total_past_2_to_the_64_is_an_error() {
    let (graph, _, options) = caller_io();
    let mut plan = plan_graph(&graph, &options).unwrap();
    plan.arena_bytes = u64::MAX - 4096;
    assert_eq!(plan.device_bytes(&graph), Err(DeviceBytesError::Overflow));
    assert!(plan.to_json_file(&graph, &PlanHeader::default()).is_err());
    plan.settings.bindings = vec![("nope".to_owned(), 1)];
    assert_eq!(
        plan.device_bytes(&graph),
        Err(DeviceBytesError::UnknownSymbol("nope".to_owned()))
    );
}
