//! The training step memplan derives from a forward model, against ONNX Runtime's own
//! training graph of the same model (vendored in `testdata/training`, made by
//! `onnxruntime.training.artifacts.generate_artifacts` with cross-entropy and AdamW): the
//! same saved tensors, the same persistent bytes, and the peaks side by side.
//!
//! `cargo test -p memplan-cli --test training_ort -- --nocapture` prints the table that
//! docs/MEASUREMENTS.md shows.

use std::collections::BTreeSet;
use std::path::PathBuf;

use memplan_ir::{Graph, IndexVec, Node, NodeId, OpTable, TensorId, TensorKind};
use memplan_planner::{
    Checkpoint, PlanOptions, ScheduleMode, TrainingOptions, mark_state, plan_graph, plan_training,
    verify_plan,
};

const BATCH: u64 = 8;

/// The vendored models: every folder of `testdata/training` (`testdata/training/README.md`),
/// in name order, so that a model added there is checked here without a list to update.
fn models() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/training");
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    assert!(out.len() >= 8, "{} holds only {out:?}", dir.display());
    out
}

fn path(model: &str, file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/training")
        .join(model)
        .join(file)
}

fn load(model: &str, file: &str) -> Graph {
    let options = memplan_onnx::ImportOptions::default().with_dims(if model == "vit_b16" {
        vec![]
    } else {
        vec![("batch".to_owned(), BATCH)]
    });
    memplan_onnx::load(&path(model, file), &options).unwrap()
}

/// A forward tensor's identity across the two graphs: its producer (ONNX Runtime renames
/// BatchNormalization nodes `<name>_BatchNormInternal`; the loss node is `loss`) and output
/// position, or its name for a graph input.
fn key(g: &Graph, producers: &IndexVec<TensorId, Option<NodeId>>, t: TensorId) -> String {
    match producers[t] {
        Some(n) => {
            let node = g.node(n);
            let pos = node.outputs.iter().position(|&o| o == t).unwrap_or(0);
            let name = if node.op == "SoftmaxCrossEntropyLoss" {
                "loss".to_owned()
            } else if FUSED.contains(&node.op.as_str()) {
                // A fused layer norm or GELU: ONNX Runtime names it after its scale node or
                // the op, memplan after its last node; both read the same input.
                let x = node.inputs[0].unwrap();
                format!("{}({})", node.op, key(g, producers, x))
            } else {
                // ONNX Runtime renames BatchNormalization and Concat nodes it replaces.
                node.name
                    .trim_end_matches("_BatchNormInternal")
                    .trim_end_matches("/ConcatReplacement/")
                    .to_owned()
            };
            format!("{name}#{pos}")
        }
        None => g.tensor(t).name.clone(),
    }
}

/// Ops both sides make by fusing several nodes of the forward model.
const FUSED: &[&str] = &[
    "LayerNormalization",
    "Gelu",
    "com.microsoft.BiasGelu",
    "com.microsoft.FastGelu",
];

/// ONNX Runtime names its gradient nodes `<forward>_Grad/...` and its sums
/// `AccumulateGrad_...`.
fn is_ort_forward(node: &Node) -> bool {
    !node.name.contains("_Grad")
        && !node.name.starts_with("AccumulateGrad")
        && node.op != "com.microsoft.InPlaceAccumulatorV2"
}

/// ONNX Runtime's saved set: forward activations and inputs whose bytes a gradient node
/// reads, with their bytes; and the bytes of the inputs' lengths its ConcatTraining nodes
/// keep for SplitTraining (output 1), which memplan has no counterpart of: its Concat
/// gradients slice dY at constant offsets.
fn ort_saved(g: &Graph) -> (BTreeSet<String>, u64, u64) {
    let producers = g.producers();
    let mut out = BTreeSet::new();
    let (mut bytes, mut lengths) = (0, 0);
    let mut seen: BTreeSet<TensorId> = BTreeSet::new();
    for node in g.nodes().iter().filter(|n| !is_ort_forward(n)) {
        for (pos, x) in node.inputs.iter().enumerate() {
            let Some(x) = *x else { continue };
            if !memplan_ir::reads_bytes(node, pos) {
                continue;
            }
            let t = g.tensor(x);
            let forward = match producers[x] {
                Some(p) => is_ort_forward(g.node(p)),
                None => t.kind == TensorKind::Input && !t.name.ends_with("_grad"),
            };
            if forward && !t.kind.is_persistent() && seen.insert(x) {
                let made = producers[x].map(|p| g.node(p));
                if made.is_some_and(|p| {
                    p.op == "com.microsoft.ConcatTraining" && p.outputs.get(1) == Some(&x)
                }) {
                    lengths += t.static_bytes().unwrap();
                    continue;
                }
                out.insert(key(g, &producers, x));
                bytes += t.static_bytes().unwrap();
            }
        }
    }
    (out, bytes, lengths)
}

/// The forward weights ONNX Runtime's graph does not train (those without a
/// `<name>_grad.accumulation.buffer`), frozen in memplan's step so that both train the same
/// set. The generator trains every float weight of rank 1 or more but ViT's additive
/// attention mask (`val_74`) and whatever a BatchNormalization reads as a running statistic;
/// PyTorch's exporter gave `cnn_dense`'s `bnd1` one initializer for its scale and running
/// variance (ones) and one for its bias and running mean (zeros), so the generator left
/// `bnd1.weight` and `bnd1.bias` untrained, where PyTorch (and memplan) train them.
fn untrained_by_ort(forward: &Graph, ort: &Graph) -> Vec<String> {
    let made = forward.producers();
    forward
        .tensors()
        .iter_enumerated()
        .filter(|&(t, x)| x.kind.is_persistent() && made[t].is_none())
        .map(|(_, x)| x.name.clone())
        .filter(|name| {
            ort.find_tensor(&format!("{name}_grad.accumulation.buffer"))
                .is_none()
        })
        .collect()
}

fn persistent(g: &Graph) -> u64 {
    g.tensors()
        .iter()
        .filter(|t| t.kind == TensorKind::State)
        .map(|t| t.static_bytes().unwrap())
        .sum()
}

fn pct(a: u64, b: u64) -> String {
    #[allow(clippy::cast_precision_loss, reason = "display")]
    let p = 100.0 * (a as f64 - b as f64) / b as f64;
    format!("{p:+.1}%")
}

fn mib(b: u64) -> String {
    #[allow(clippy::cast_precision_loss, reason = "display")]
    let m = b as f64 / (1 << 20) as f64;
    format!("{m:.2}")
}

#[test]
fn derived_steps_match_onnx_runtimes_training_graphs() {
    println!(
        "| model | saved (ORT / memplan) | same tensors | persistent: ORT params+buffers / memplan params+grads | ORT arena (given / memory order) | memplan arena | vs ORT memory order |"
    );
    println!("|---|---|---|---|---|---|---|");
    for model in models() {
        let model = model.as_str();
        let mut ort = load(model, "training_model.onnx");
        mark_state(&mut ort, &OpTable::default(), &[]).unwrap();
        let (ort_set, ort_bytes, concat_lengths) = ort_saved(&ort);
        let forward = load(model, "forward.onnx");
        // Its graphs accumulate gradients in persistent buffers and fuse only its own
        // patterns.
        let options = TrainingOptions::default()
            .with_checkpoint(Checkpoint::None)
            .with_frozen(untrained_by_ort(&forward, &ort))
            .with_accumulate(true)
            .with_pointwise_fusion(false);
        if model == "cnn_dense" {
            for name in ["bnd1.weight", "bnd1.bias"] {
                assert!(options.frozen.iter().any(|f| f == name), "{name}");
            }
        }
        let step = plan_training(&forward, &options).unwrap();
        verify_plan(&step.graph, &step.plan).unwrap();
        let producers = step.graph.producers();
        let ours: BTreeSet<String> = step
            .summary
            .saved
            .iter()
            .map(|&t| key(&step.graph, &producers, t))
            .collect();
        let mut only_ort: Vec<&String> = ort_set.difference(&ours).collect();
        let mut only_ours: Vec<&String> = ours.difference(&ort_set).collect();
        // Where a Relu's output feeds only a MaxPool or a Concat (the CNNs' stems and dense
        // blocks), ONNX Runtime's graph reads the Relu's input where its gradient builder
        // (`GetReluGradient: ReluGrad(GO(0), O(0))`) and memplan read its output: the same
        // bytes.
        only_ours.retain(|k| {
            let Some(&t) = step
                .summary
                .saved
                .iter()
                .find(|&&t| key(&step.graph, &producers, t) == **k)
            else {
                return true;
            };
            let relu = producers[t].map(|n| step.graph.node(n));
            let Some(x) = relu.filter(|n| n.op == "Relu").and_then(|n| n.inputs[0]) else {
                return true;
            };
            let input = key(&step.graph, &producers, x);
            match only_ort.iter().position(|o| **o == input) {
                Some(i) => {
                    only_ort.remove(i);
                    false
                }
                None => true,
            }
        });
        // What else differs, tensor by tensor, with its bytes on memplan's side (the
        // labels' bytes are compared below).
        let mut extra = 0;
        if model == "lm_tied" {
            // The causal mask `mask[:s, :s]`, sliced at the sequence length read by Shape:
            // ONNX Runtime folds it into a constant (the length is static); memplan computes
            // it each step. PyTorch's exporter made every LayerNormalization weight after the
            // first an Identity of the first (their values are equal); ONNX Runtime merges
            // the Identity nodes into one, memplan keeps each (`ln_f.weight` is the second).
            assert_eq!(only_ours, ["/Cast#0", "Identity_36#0"], "{model}");
            for k in only_ours.drain(..) {
                let t = step
                    .summary
                    .saved
                    .iter()
                    .find(|&&t| key(&step.graph, &producers, t) == *k);
                extra += step.graph.tensor(*t.unwrap()).static_bytes().unwrap();
            }
        }
        assert!(
            only_ort.is_empty() && only_ours.is_empty(),
            "{model}: ORT only {only_ort:?}, memplan only {only_ours:?}"
        );
        // Labels: ONNX Runtime's CrossEntropyLoss block declares them as the scores without
        // their last axis; ONNX's SoftmaxCrossEntropyLoss, and memplan, without axis 1, the
        // class axis. They differ for scores of rank 3 (the language model's
        // `[batch, vocab, seq]`).
        let labels = |g: &Graph| {
            g.tensor(g.find_tensor("labels").unwrap())
                .static_bytes()
                .unwrap()
        };
        let (ort_labels, our_labels) = (labels(&ort), labels(&step.graph));
        if model != "lm_tied" {
            assert_eq!(ort_labels, our_labels, "{model}");
        }
        assert_eq!(
            ort_bytes + extra - ort_labels + our_labels,
            step.summary.saved_bytes,
            "{model}"
        );
        assert_eq!(
            concat_lengths > 0,
            ["vit_b16", "cnn_dense"].contains(&model)
        );

        // Persistent: ORT's parameters and gradient buffers are memplan's parameters and
        // gradients; its optimizer graph, sized from the parameter list, holds the moments.
        let ort_persistent = persistent(&ort);
        let params_and_grads = step.summary.weight_bytes + step.summary.gradient_bytes;
        let constants: u64 = step
            .graph
            .tensors()
            .iter()
            .filter(|t| t.kind == TensorKind::Weight)
            .map(|t| t.static_bytes().unwrap())
            .sum();
        assert_eq!(ort_persistent, params_and_grads - constants, "{model}");
        assert_eq!(
            step.summary.optimizer_state_bytes, ort_persistent,
            "{model}: two moments"
        );

        let ort_given = plan_graph(&ort, &PlanOptions::default()).unwrap();
        let ort_memory = plan_graph(
            &ort,
            &PlanOptions::default().with_schedule(ScheduleMode::Memory),
        )
        .unwrap();
        verify_plan(&ort, &ort_given).unwrap();
        verify_plan(&ort, &ort_memory).unwrap();
        println!(
            "| {model} | {} / {} MiB | {} | {} / {} MiB | {} / {} MiB | {} MiB | {} |",
            mib(ort_bytes + concat_lengths),
            mib(step.summary.saved_bytes),
            ort_set.len(),
            mib(ort_persistent),
            mib(params_and_grads - constants),
            mib(ort_given.arena_bytes),
            mib(ort_memory.arena_bytes),
            mib(step.plan.arena_bytes),
            pct(step.plan.arena_bytes, ort_memory.arena_bytes),
        );
        // Parameters are never in ORT's arena once recognised.
        for t in ort
            .tensors()
            .iter_enumerated()
            .filter(|(_, t)| t.kind == TensorKind::State)
        {
            assert!(ort_given.buffer(t.0).is_none(), "{model}: {}", t.1.name);
        }
    }
}
