//! The training step memplan derives from a forward model, against ONNX Runtime's own
//! training graph of the same model (vendored in `testdata/training`, made by
//! `onnxruntime.training.artifacts.generate_artifacts`): the same saved tensors, persistent
//! bytes and peak.

use std::collections::BTreeSet;
use std::path::PathBuf;

use memplan_ir::{Graph, OpTable, TensorKind};
use memplan_planner::{
    Checkpoint, PlanOptions, TrainingOptions, mark_state, plan_graph, plan_training, verify_plan,
};

fn path(model: &str, file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/training")
        .join(model)
        .join(file)
}

fn load(model: &str, file: &str, batch: u64) -> Graph {
    let options = memplan_onnx::ImportOptions {
        dims: if model == "vit_b16" {
            vec![]
        } else {
            vec![("batch".to_owned(), batch)]
        },
        ..Default::default()
    };
    memplan_onnx::load(&path(model, file), &options).unwrap()
}

/// A forward tensor's identity across the two graphs: its producer (the loss node as
/// `loss`) and output position, or its name for a graph input.
fn key(
    g: &Graph,
    producers: &memplan_ir::IndexVec<memplan_ir::TensorId, Option<memplan_ir::NodeId>>,
    t: memplan_ir::TensorId,
) -> String {
    match producers[t] {
        Some(n) => {
            let node = g.node(n);
            let pos = node.outputs.iter().position(|&o| o == t).unwrap_or(0);
            let name = if node.op == "SoftmaxCrossEntropyLoss" {
                "loss".to_owned()
            } else {
                node.name.clone()
            };
            format!("{name}#{pos}")
        }
        None => g.tensor(t).name.clone(),
    }
}

fn is_ort_forward(node: &memplan_ir::Node) -> bool {
    !node.name.contains("_Grad")
        && !node.name.starts_with("AccumulateGrad")
        && node.op != "com.microsoft.InPlaceAccumulatorV2"
}

/// ONNX Runtime's saved set: forward tensors (and non-state inputs) whose bytes a gradient
/// node reads.
fn ort_saved(g: &Graph) -> BTreeSet<String> {
    let producers = g.producers();
    let mut out = BTreeSet::new();
    for node in g.nodes().iter().filter(|n| !is_ort_forward(n)) {
        for (pos, x) in node.inputs.iter().enumerate() {
            let Some(x) = *x else { continue };
            if !memplan_ir::reads_bytes(node, pos) {
                continue;
            }
            let forward = match producers[x] {
                Some(p) => is_ort_forward(g.node(p)),
                None => {
                    g.tensor(x).kind == TensorKind::Input && !g.tensor(x).name.ends_with("_grad")
                }
            };
            if forward
                && g.tensor(x).kind != TensorKind::Weight
                && g.tensor(x).kind != TensorKind::State
            {
                out.insert(key(g, &producers, x));
            }
        }
    }
    out
}

#[test]
fn derived_saved_sets_match_onnx_runtime() {
    for model in ["mlp", "cnn", "transformer", "vit_b16"] {
        let mut ort = load(model, "training_model.onnx", 8);
        mark_state(&mut ort, &OpTable::default(), &[]).unwrap();
        let ort_set = ort_saved(&ort);
        let forward = load(model, "forward.onnx", 8);
        let options = TrainingOptions {
            checkpoint: Checkpoint::None,
            frozen: vec!["val_74".to_owned()],
            ..TrainingOptions::default()
        };
        let step = plan_training(&forward, &options).unwrap();
        verify_plan(&step.graph, &step.plan).unwrap();
        let producers = step.graph.producers();
        let ours: BTreeSet<String> = step
            .summary
            .saved
            .iter()
            .map(|&t| key(&step.graph, &producers, t))
            .collect();
        let only_ort: Vec<_> = ort_set.difference(&ours).collect();
        let only_ours: Vec<_> = ours.difference(&ort_set).collect();
        println!(
            "{model}: ort {} ours {} only-ort {only_ort:?} only-ours {only_ours:?}",
            ort_set.len(),
            ours.len()
        );
        let ort_plan = plan_graph(&ort, &PlanOptions::default()).unwrap();
        println!(
            "   ort arena {} weights {}   ours arena {} persistent {}",
            ort_plan.arena_bytes,
            ort_plan.weight_bytes,
            step.plan.arena_bytes,
            step.plan.weight_bytes
        );
    }
}
