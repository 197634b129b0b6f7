//! Training steps derived from forward graphs ([`plan_training`]): what the backward saves,
//! gradients and their accumulation, optimizer state, losses, recomputation, and the
//! verifier's own check of what the backward reads (fed broken steps, it rejects each one).

use memplan_ir::{Attr, DType, Graph, GraphBuilder, GraphError, TensorId, TensorKind};
use memplan_planner::{
    ATTR_GRAD_OF, Checkpoint, Fusions, Loss, Optimizer, Phase, PlanError, PlanOptions,
    PlanViolation, TrainingOptions, TrainingStep, UnknownOps, plan_graph, plan_training,
    verify_plan,
};

const B: i64 = 16;

/// x[B,64] -> Gemm(w1, b1) -> Relu -> Gemm(w2, b2) -> logits[B,10].
fn mlp(dtype: DType) -> Graph {
    let mut g = GraphBuilder::new("mlp");
    let x = g.input("x", dtype, [B, 64]);
    let w1 = g.weight("w1", dtype, [128, 64]);
    let b1 = g.weight("b1", dtype, [128]);
    let w2 = g.weight("w2", dtype, [10, 128]);
    let b2 = g.weight("b2", dtype, [10]);
    let h = g.op("Gemm", &[x, w1, b1], dtype, [B, 128]);
    g.attr("transB", Attr::Int(1));
    let r = g.op("Relu", &[h], dtype, [B, 128]);
    let y = g.op("Gemm", &[r, w2, b2], dtype, [B, 10]);
    g.attr("transB", Attr::Int(1));
    g.mark_output(y);
    g.build().unwrap()
}

fn step(g: &Graph, options: &TrainingOptions) -> TrainingStep {
    let s = plan_training(g, options).unwrap();
    verify_plan(&s.graph, &s.plan).unwrap();
    s
}

fn names(s: &TrainingStep, ids: &[TensorId]) -> Vec<String> {
    let mut v: Vec<String> = ids
        .iter()
        .map(|&t| s.graph.tensor(t).name.clone())
        .collect();
    v.sort();
    v
}

fn bytes(s: &TrainingStep, t: TensorId) -> u64 {
    s.graph.tensor(t).static_bytes().unwrap()
}

#[test]
fn an_mlp_step_saves_what_each_gradient_reads() {
    let g = mlp(DType::F32);
    let s = step(&g, &TrainingOptions::default());
    // Gemm saves the other operand (x for dW1, the Relu's output for dW2), Relu its output,
    // the loss its log-probabilities and the labels.
    assert_eq!(
        names(&s, &s.summary.saved),
        ["labels", "log_prob", "t6_Relu", "x"]
    );
    let saved: u64 = s.summary.saved.iter().map(|&t| bytes(&s, t)).sum();
    assert_eq!(s.summary.saved_bytes, saved);
    // Parameters are training state, never in the arena; each has a gradient of its size
    // (in the arena until its update: no gradient region without accumulation) and AdamW's
    // two moments.
    let params = (128 * 64 + 128 + 10 * 128 + 10) * 4;
    assert_eq!(s.summary.parameters.len(), 4);
    assert_eq!(s.summary.parameter_elements * 4, params);
    // Weights: the parameters and the small constants of the step (the loss's seed, axes).
    let constants: u64 = s
        .graph
        .tensors()
        .iter()
        .filter(|t| t.kind == TensorKind::Weight)
        .map(|t| t.static_bytes().unwrap())
        .sum();
    assert!(constants < 64, "{constants}");
    assert_eq!(s.summary.weight_bytes, params + constants);
    assert_eq!(s.summary.gradient_bytes, 0);
    assert_eq!(s.summary.all_gradient_bytes, params);
    assert_eq!(s.summary.optimizer_state_bytes, 2 * params);
    assert!(s.summary.persistent_bytes >= 3 * params);
    assert!(s.summary.persistent_bytes < 4 * params);
    // Accumulated across micro-steps, the gradients are a persistent region of their own.
    let acc = step(&g, &TrainingOptions::default().with_accumulate(true));
    assert_eq!(acc.summary.gradient_bytes, params);
    assert!(acc.summary.persistent_bytes >= 4 * params);
    assert_eq!(s.plan.weight_bytes, s.summary.persistent_bytes);
    for &p in &s.summary.parameters {
        assert_eq!(s.graph.tensor(p).kind, TensorKind::State);
        assert!(s.plan.buffer(p).is_none() && s.plan.weight(p).is_some());
    }
    // Phases: the forward and loss, the backward, then one update per parameter.
    let phases: Vec<Phase> = s
        .plan
        .schedule
        .iter()
        .map(|&n| s.summary.phases[n])
        .collect();
    assert!(phases.windows(2).all(|w| w[0] <= w[1]), "{phases:?}");
    assert_eq!(phases.iter().filter(|&&p| p == Phase::Optimizer).count(), 4);
    assert_eq!(s.summary.recompute.nodes, 0);
    assert!(s.summary.recompute.forward_flops >= 2 * (B as u64) * (128 * 64 + 10 * 128) as u64);
}

#[test]
fn optimizers_keep_their_state_and_16_bit_parameters_f32_masters() {
    let g = mlp(DType::F32);
    let params: u64 = (128 * 64 + 128 + 10 * 128 + 10) * 4;
    for (optimizer, buffers) in [
        (Optimizer::Sgd, 0),
        (Optimizer::Momentum, 1),
        (Optimizer::Adam, 2),
        (Optimizer::AdamW, 2),
    ] {
        let s = step(&g, &TrainingOptions::default().with_optimizer(optimizer));
        assert_eq!(
            s.summary.optimizer_state_bytes,
            buffers * params,
            "{optimizer}"
        );
    }
    // f16 parameters: f32 moments and an f32 master weight (ZeRO's 2 + 2 + 12 bytes).
    let g16 = mlp(DType::F16);
    let elements = params / 4;
    let s = step(&g16, &TrainingOptions::default());
    assert!((2 * elements..2 * elements + 64).contains(&s.summary.weight_bytes));
    assert_eq!(s.summary.all_gradient_bytes, 2 * elements);
    assert_eq!(s.summary.optimizer_state_bytes, 12 * elements);
    let s = step(&g16, &TrainingOptions::default().with_master_weights(false));
    assert_eq!(s.summary.optimizer_state_bytes, 4 * elements);
}

#[test]
fn a_fused_optimizer_updates_each_parameter_after_its_last_reader() {
    let g = mlp(DType::F32);
    let s = step(&g, &TrainingOptions::default().with_fused_optimizer(true));
    assert_eq!(s.summary.gradient_bytes, 0);
    // Updates run inside the backward, each after every node reading its weight.
    let step_of = |n: memplan_ir::NodeId| s.plan.schedule.iter().position(|&x| x == n).unwrap();
    let mut updates = 0;
    for (n, node) in s.graph.nodes().iter_enumerated() {
        if s.summary.phases[n] != Phase::Optimizer {
            continue;
        }
        updates += 1;
        let w = node.inputs[0].unwrap();
        for (r, reader) in s.graph.nodes().iter_enumerated() {
            if r != n && reader.inputs.contains(&Some(w)) {
                assert!(
                    step_of(r) < step_of(n),
                    "{} reads {} after its update",
                    reader.name,
                    node.name
                );
            }
        }
    }
    assert_eq!(updates, 4);
    let last_backward = s
        .plan
        .schedule
        .iter()
        .rposition(|&n| s.summary.phases[n] == Phase::Backward)
        .unwrap();
    let first_update = s
        .plan
        .schedule
        .iter()
        .position(|&n| s.summary.phases[n] == Phase::Optimizer)
        .unwrap();
    assert!(
        first_update < last_backward,
        "updates are interleaved with the backward"
    );
    // The memory-aware order keeps them there.
    let memory = TrainingOptions::default()
        .with_fused_optimizer(true)
        .with_plan(PlanOptions::default().with_schedule(memplan_planner::ScheduleMode::Memory));
    step(&g, &memory);
}

#[test]
fn tensors_read_twice_sum_their_gradients_and_a_shared_weight_gets_one() {
    // The same weight used by two MatMuls (tied), the input of the second read twice.
    let mut b = GraphBuilder::new("tied");
    let x = b.input("x", DType::F32, [B, 32]);
    let w = b.weight("w", DType::F32, [32, 32]);
    let h = b.op("MatMul", &[x, w], DType::F32, [B, 32]);
    let t = b.op("Tanh", &[h], DType::F32, [B, 32]);
    let y = b.op("MatMul", &[t, w], DType::F32, [B, 32]);
    let z = b.op("Add", &[y, t], DType::F32, [B, 32]);
    b.mark_output(z);
    let g = b.build().unwrap();
    let s = step(&g, &TrainingOptions::default().with_accumulate(true));
    assert_eq!(s.summary.parameters.len(), 1);
    assert_eq!(s.summary.gradient_bytes, 32 * 32 * 4);
    // Two sums: w's gradient from its two readers, t's from the MatMul and the Add.
    let sums = s
        .graph
        .nodes()
        .iter()
        .filter(|n| n.op == "Add" && n.attr(ATTR_GRAD_OF).is_some())
        .count();
    assert_eq!(sums, 2);
    let w_grad = s
        .graph
        .tensors()
        .iter()
        .filter(|t| t.kind == TensorKind::State && t.name.starts_with("w_grad"))
        .count();
    assert_eq!(w_grad, 1);
}

#[test]
fn losses_take_their_inputs() {
    let g = mlp(DType::F32);
    let mse = step(&g, &TrainingOptions::default().with_loss(Loss::Mse));
    let target = mse.graph.find_tensor("target").unwrap();
    assert_eq!(mse.graph.tensor(target).kind, TensorKind::Input);
    // MSE's backward reads the difference of output and target.
    assert!(names(&mse, &mse.summary.saved).contains(&"loss/diff".to_owned()));
    let none = step(&g, &TrainingOptions::default().with_loss(Loss::None));
    let seed = none.graph.find_tensor("t7_Gemm_grad").unwrap();
    assert_eq!(none.graph.tensor(seed).kind, TensorKind::Input);
    let labels = step(&g, &TrainingOptions::default());
    let l = labels.graph.find_tensor("labels").unwrap();
    assert_eq!(labels.graph.tensor(l).dtype, DType::I64);
    assert_eq!(labels.graph.tensor(l).static_bytes(), Ok(8 * B as u64));
    // Cross-entropy needs scores with a class axis.
    let mut b = GraphBuilder::new("flat");
    let x = b.input("x", DType::F32, [8]);
    let w = b.weight("w", DType::F32, [8]);
    let y = b.op("Mul", &[x, w], DType::F32, [8]);
    b.mark_output(y);
    let flat = b.build().unwrap();
    let err = plan_training(&flat, &TrainingOptions::default()).unwrap_err();
    // The output is a tensor of the step's graph, which the error carries: rendered with the
    // caller's graph or alone, it names the output, not the forward's tensor of that id.
    let PlanError::InGraph { graph, error } = &err else {
        panic!("{err:?}")
    };
    assert!(
        matches!(error.as_ref(), PlanError::LossNeedsScores { output, rank: 1, .. } if graph.graph().tensor(*output).name == "t2_Mul"),
        "{err:?}"
    );
    assert!(matches!(err.inner(), PlanError::LossNeedsScores { .. }));
    for text in [err.to_string(), err.with_graph(&flat).to_string()] {
        assert!(text.contains("cross-entropy"), "{text}");
        assert!(text.contains("output `t2_Mul` is f32[1]"), "{text}");
    }
}

#[test]
fn ops_without_a_backward_rule_are_refused_by_name_unless_saved_whole() {
    let mut b = GraphBuilder::new("odd");
    let x = b.input("x", DType::F32, [B, 16]);
    let w = b.weight("w", DType::F32, [16, 16]);
    let h = b.op("MatMul", &[x, w], DType::F32, [B, 16]);
    let o = b.op("Hardmax", &[h], DType::F32, [B, 16]);
    b.mark_output(o);
    let g = b.build().unwrap();
    match plan_training(&g, &TrainingOptions::default()) {
        Err(err @ PlanError::InGraph { .. }) => {
            let PlanError::InGraph { graph, error } = &err else {
                unreachable!()
            };
            let PlanError::NoBackwardRule { op, node } = error.as_ref() else {
                panic!("{err:?}")
            };
            assert_eq!(
                (op.as_str(), graph.graph().nodes()[*node].name.as_str()),
                ("Hardmax", "n1_Hardmax")
            );
            assert!(
                err.with_graph(&g)
                    .to_string()
                    .contains("op `Hardmax` (node `n1_Hardmax`)"),
                "{err}"
            );
        }
        other => panic!("{other:?}"),
    }
    let s = step(
        &g,
        &TrainingOptions::default().with_unknown_ops(UnknownOps::SaveAll),
    );
    let saved = names(&s, &s.summary.saved);
    assert!(saved.contains(&"t2_MatMul".to_owned()) && saved.contains(&"t3_Hardmax".to_owned()));
}

/// x -> MatMul(w1) -> h; an If whose branches read `h` and the weight `w2` without the node
/// listing them (captured values, as PyTorch's exports of `EmbeddingBag` capture its table
/// in a Loop's body).
fn weight_read_only_in_a_body() -> Graph {
    let branch = |name: &str| {
        let mut body = GraphBuilder::new(name);
        let h = body.input("h", DType::F32, [B, 16]);
        let w2 = body.input("w2", DType::F32, [16, 16]);
        let r = body.named_op(
            &format!("{name}_mm"),
            "MatMul",
            &[h, w2],
            DType::F32,
            [B, 16],
        );
        body.mark_output(r);
        body.build_unchecked()
    };
    let mut b = GraphBuilder::new("captures");
    let x = b.input("x", DType::F32, [B, 16]);
    let c = b.input("c", DType::Bool, [0i64; 0]);
    let w1 = b.weight("w1", DType::F32, [16, 16]);
    b.weight("w2", DType::F32, [16, 16]);
    let h = b.named_op("h", "MatMul", &[x, w1], DType::F32, [B, 16]);
    let _ = h;
    let r = b.tensor("r", DType::F32, [B, 16], TensorKind::Output);
    b.node("branch", "If", &[Some(c)], &[r]);
    b.body("then_branch", branch("then"));
    b.body("else_branch", branch("else"));
    b.build().unwrap()
}

#[test]
// Fields set one by one: the options are about to be non-exhaustive (issue 39), where a
// struct literal no longer compiles outside the crate.
#[allow(clippy::field_reassign_with_default)]
fn a_weight_only_a_body_reads_is_refused_or_trained_never_left_out() {
    let g = weight_read_only_in_a_body();
    let err = plan_training(&g, &TrainingOptions::default()).unwrap_err();
    assert!(
        matches!(err.inner(), PlanError::NoBackwardRule { op, .. } if op == "If"),
        "{err:?}"
    );
    assert!(
        err.with_graph(&g)
            .to_string()
            .contains("op `If` (node `branch`) has no backward rule"),
        "{err}"
    );
    // Saved whole, both weights are trained: the If's backward writes w2's gradient and h's
    // (which w1's needs).
    let mut options = TrainingOptions::default();
    options.unknown_ops = UnknownOps::SaveAll;
    let s = step(&g, &options);
    assert_eq!(names(&s, &s.summary.parameters), ["w1", "w2"]);
    let saved = names(&s, &s.summary.saved);
    assert!(
        saved.contains(&"h".to_owned()) && saved.contains(&"x".to_owned()),
        "{saved:?}"
    );
}

/// PyTorch's `scatter_add(1, groups[:, :, None].expand_as(e), e)`: token vectors summed into
/// 4 groups by a per-token group id, the int64 id broadcast over the width by an Expand;
/// then `torch.gather` of the sums back at the tokens' groups, likewise broadcast.
fn scatter_by_broadcast_index() -> Graph {
    const T: i64 = 20;
    let mut b = GraphBuilder::new("segment_sum");
    let x = b.input("x", DType::F32, [B, T, 16]);
    let groups = b.input("groups", DType::I64, [B, T]);
    let base = b.input("base", DType::F32, [B, 4, 64]);
    let w = b.weight("w", DType::F32, [16, 64]);
    let axes = b.int_constant("axes", &[2]);
    let shape = b.int_constant("shape", &[B, T, 64]);
    let e = b.named_op("e", "MatMul", &[x, w], DType::F32, [B, T, 64]);
    let col = b.named_op("col", "Unsqueeze", &[groups, axes], DType::I64, [B, T, 1]);
    let index = b.named_op("index", "Expand", &[col, shape], DType::I64, [B, T, 64]);
    let sums = b.named_op(
        "sums",
        "ScatterElements",
        &[base, index, e],
        DType::F32,
        [B, 4, 64],
    );
    b.attr("axis", Attr::Int(1));
    b.attr("reduction", Attr::Str("add".to_owned()));
    let back = b.named_op(
        "back",
        "GatherElements",
        &[sums, index],
        DType::F32,
        [B, T, 64],
    );
    b.attr("axis", Attr::Int(1));
    let y = b.named_op("y", "Mul", &[back, e], DType::F32, [B, T, 64]);
    b.mark_output(y);
    b.build().unwrap()
}

#[test]
// Fields set one by one: the options are about to be non-exhaustive (issue 39), where a
// struct literal no longer compiles outside the crate.
#[allow(clippy::field_reassign_with_default)]
fn a_broadcast_index_is_read_small_by_the_gradients_never_kept_expanded() {
    let g = scatter_by_broadcast_index();
    for checkpoint in [Checkpoint::None, Checkpoint::Cheap] {
        let mut options = TrainingOptions::default();
        options.checkpoint = checkpoint.clone();
        let s = step(&g, &options);
        let saved = names(&s, &s.summary.saved);
        // The Expand's input (`col`, a view of the ids, `[B, T, 1]`), or the ids, which
        // `cheap` makes it again from.
        assert!(
            saved.contains(&"col".to_owned()) || saved.contains(&"groups".to_owned()),
            "{checkpoint:?}: {saved:?}"
        );
        assert!(
            !saved.contains(&"index".to_owned()),
            "{checkpoint:?}: {saved:?}"
        );
        // No backward node reads the expanded copy, nor a copy made again.
        for node in s.graph.nodes().iter() {
            if node.attr(ATTR_GRAD_OF).is_some() {
                for t in node.present_inputs() {
                    let name = &s.graph.tensor(t).name;
                    assert!(!name.starts_with("index"), "{} reads {name}", node.name);
                }
            }
        }
        // Only the forward's two readers hold the expanded copy: it is dead before the
        // backward starts.
        let index = s.graph.find_tensor("index").unwrap();
        let last = s
            .graph
            .nodes()
            .iter()
            .rev()
            .find(|n| n.present_inputs().any(|t| t == index))
            .map(|n| n.name.clone());
        assert_eq!(last.as_deref(), Some("back"), "{checkpoint:?}");
    }
}

#[test]
fn a_graph_without_trainable_weights_is_an_error() {
    let mut b = GraphBuilder::new("none");
    let x = b.input("x", DType::F32, [B, 4]);
    let y = b.op("Relu", &[x], DType::F32, [B, 4]);
    b.mark_output(y);
    let err = plan_training(&b.build().unwrap(), &TrainingOptions::default()).unwrap_err();
    assert!(err.to_string().contains("nothing to train"), "{err}");
    // Frozen weights are not trained either.
    let err = plan_training(
        &mlp(DType::F32),
        &TrainingOptions::default().with_frozen(vec!["*".to_owned()]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("nothing to train"), "{err}");
}

/// Attention-like: the softmax's output, a NaN mask of it, and the masked probabilities a
/// MatMul reads (ViT's `Softmax -> IsNaN -> Where -> MatMul`).
fn masked_attention() -> Graph {
    let mut b = GraphBuilder::new("attention");
    let q = b.input("q", DType::F32, [B, 64, 32]);
    let wk = b.weight("wk", DType::F32, [32, 64]);
    let wv = b.weight("wv", DType::F32, [32, 64]);
    let zero = b.weight("zero", DType::F32, [1]);
    let scores = b.op("MatMul", &[q, wk], DType::F32, [B, 64, 64]);
    let p = b.op("Softmax", &[scores], DType::F32, [B, 64, 64]);
    g_attr_axis(&mut b);
    let nan = b.op("IsNaN", &[p], DType::Bool, [B, 64, 64]);
    let masked = b.op("Where", &[nan, zero, p], DType::F32, [B, 64, 64]);
    let v = b.op("MatMul", &[q, wv], DType::F32, [B, 64, 64]);
    let out = b.op("MatMul", &[masked, v], DType::F32, [B, 64, 64]);
    let r = b.op("Reshape", &[out], DType::F32, [B, 64 * 64]);
    b.mark_output(r);
    b.build().unwrap()
}

fn g_attr_axis(b: &mut GraphBuilder) {
    b.attr("axis", Attr::Int(-1));
}

#[test]
fn cheap_element_wise_outputs_are_recomputed_from_saved_inputs() {
    let g = masked_attention();
    let none = step(
        &g,
        &TrainingOptions::default()
            .with_checkpoint(Checkpoint::None)
            .with_loss(Loss::None),
    );
    let cheap = step(&g, &TrainingOptions::default().with_loss(Loss::None));
    // The probabilities are kept; the NaN mask and the Where's output are made again from
    // them right before the backward reads them (saving the scores instead would cost the
    // same bytes: the cut nearest the backward is taken).
    let saved_none = names(&none, &none.summary.saved);
    let saved_cheap = names(&cheap, &cheap.summary.saved);
    for t in ["t5_Softmax", "t6_IsNaN", "t7_Where"] {
        assert!(saved_none.contains(&t.to_owned()), "{saved_none:?}");
    }
    assert!(
        saved_cheap.contains(&"t5_Softmax".to_owned()),
        "{saved_cheap:?}"
    );
    for t in ["t6_IsNaN", "t7_Where"] {
        assert!(!saved_cheap.contains(&t.to_owned()), "{saved_cheap:?}");
    }
    assert_eq!(cheap.summary.recompute.nodes, 2);
    assert_eq!(cheap.summary.recompute.flops, 2 * (B * 64 * 64) as u64);
    assert_eq!(
        none.summary.saved_bytes - cheap.summary.saved_bytes,
        (B * 64 * 64 * (4 + 1)) as u64
    );
    assert!(cheap.plan.arena_bytes <= none.plan.arena_bytes);
}

/// A chain of `n` MatMuls with weights, every activation saved for the next one's weight
/// gradient.
fn chain(n: usize) -> Graph {
    let mut b = GraphBuilder::new("chain");
    let mut x = b.input("x", DType::F32, [B, 64]);
    for i in 0..n {
        let w = b.weight(format!("w{i}"), DType::F32, [64, 64]);
        x = b.op("MatMul", &[x, w], DType::F32, [B, 64]);
    }
    b.mark_output(x);
    b.build().unwrap()
}

#[test]
fn checkpoints_keep_what_crosses_them_and_recompute_the_rest() {
    let g = chain(8);
    // Gradients in their own region, so that the arena is the activations'.
    let opts = |checkpoint| {
        TrainingOptions::default()
            .with_checkpoint(checkpoint)
            .with_loss(Loss::None)
            .with_accumulate(true)
    };
    let none = step(&g, &opts(Checkpoint::None));
    assert_eq!(none.summary.recompute.nodes, 0);
    assert_eq!(none.summary.saved.len(), 8); // x and the first seven outputs
    // Checkpoints after nodes 3 and 5 (0-based): segments [0..=3], [4..=5], [6..=7]; the
    // last segment is kept, the others recomputed from their checkpoint.
    let named = step(
        &g,
        &opts(Checkpoint::After(vec![
            "n3_MatMul".to_owned(),
            "n5_MatMul".to_owned(),
        ])),
    );
    assert_eq!(named.summary.checkpoints, ["n3_MatMul", "n5_MatMul"]);
    // Recomputed: the outputs of n0..n2 (from x) and of n4 (from n3's).
    assert_eq!(named.summary.recompute.nodes, 4);
    assert_eq!(named.summary.recompute.flops, 4 * 2 * (B as u64) * 64 * 64);
    assert!(named.plan.arena_bytes < none.plan.arena_bytes);
    let every = step(&g, &opts(Checkpoint::Every(2)));
    assert_eq!(every.summary.checkpoints.len(), 3);
    assert_eq!(every.summary.recompute.nodes, 3);
    // Recompute nodes name the node they run again.
    for &n in &every.plan.schedule {
        let node = every.graph.node(n);
        if node.name.ends_with("/recompute") {
            assert!(node.attr(memplan_planner::ATTR_RECOMPUTE_OF).is_some());
        }
    }
    let err = plan_training(&g, &opts(Checkpoint::After(vec!["nope".to_owned()]))).unwrap_err();
    assert!(
        matches!(&err, PlanError::UnknownCheckpoint { name } if name == "nope"),
        "{err:?}"
    );
    assert!(err.to_string().contains("`nope`"), "{err}");
}

#[test]
fn batch_norm_layer_norm_pool_and_dropout_save_their_statistics_indices_and_masks() {
    let mut b = GraphBuilder::new("cnn");
    let x = b.input("x", DType::F32, [B, 3, 8, 8]);
    let w = b.weight("w", DType::F32, [8, 3, 3, 3]);
    let s = b.weight("s", DType::F32, [8]);
    let bias = b.weight("bias", DType::F32, [8]);
    let mean = b.weight("mean", DType::F32, [8]);
    let var = b.weight("var", DType::F32, [8]);
    let c = b.op("Conv", &[x, w], DType::F32, [B, 8, 6, 6]);
    let n = b.op(
        "BatchNormalization",
        &[c, s, bias, mean, var],
        DType::F32,
        [B, 8, 6, 6],
    );
    let r = b.op("Relu", &[n], DType::F32, [B, 8, 6, 6]);
    let p = b.op("MaxPool", &[r], DType::F32, [B, 8, 3, 3]);
    b.attr("kernel_shape", Attr::Ints(vec![2, 2]))
        .attr("strides", Attr::Ints(vec![2, 2]));
    let d = b.op("Dropout", &[p], DType::F32, [B, 8, 3, 3]);
    let f = b.op("Reshape", &[d], DType::F32, [B, 72]);
    let ls = b.weight("ls", DType::F32, [72]);
    let lb = b.weight("lb", DType::F32, [72]);
    let ln = b.op("LayerNormalization", &[f, ls, lb], DType::F32, [B, 72]);
    let fc = b.weight("fc", DType::F32, [72, 10]);
    let y = b.op("MatMul", &[ln, fc], DType::F32, [B, 10]);
    b.mark_output(y);
    let g = b.build().unwrap();
    let s = step(
        &g,
        &TrainingOptions::default().with_checkpoint(Checkpoint::None),
    );
    let saved = names(&s, &s.summary.saved);
    for want in [
        "x",
        "t6_Conv",
        "t7_BatchNormalization.saved_mean",
        "t7_BatchNormalization.saved_inv_std",
        "t8_Relu",
        "t9_MaxPool.indices",
        "t10_Dropout.mask",
        "t11_Reshape",
        "t14_LayerNormalization.mean",
        "t14_LayerNormalization.inv_std",
        "t14_LayerNormalization",
    ] {
        assert!(saved.contains(&want.to_owned()), "{want} not in {saved:?}");
    }
    // The running statistics are not trained.
    assert_eq!(s.summary.parameters.len(), 6);
}

/// What PyTorch's exporters make of a freshly built model: a BatchNorm's scale and running
/// variance (ones) one initializer, its bias and running mean (zeros) another, here also
/// read by LayerNorms. The scale and bias are trained, the running statistics are not.
#[test]
fn weights_merged_with_running_statistics_are_still_trained() {
    let mut b = GraphBuilder::new("merged");
    let x = b.input("x", DType::F32, [B, 8, 6, 6]);
    let ones = b.weight("ones", DType::F32, [8]);
    let zeros = b.weight("zeros", DType::F32, [8]);
    let w = b.weight("w", DType::F32, [8, 8, 1, 1]);
    let c = b.op("Conv", &[x, w], DType::F32, [B, 8, 6, 6]);
    // BatchNormalization(c, scale, bias, mean, var): bias and mean the same zeros.
    let n = b.op(
        "BatchNormalization",
        &[c, ones, zeros, zeros, ones],
        DType::F32,
        [B, 8, 6, 6],
    );
    let f = b.op("Reshape", &[n], DType::F32, [B * 36, 8]);
    let l1 = b.op(
        "LayerNormalization",
        &[f, ones, zeros],
        DType::F32,
        [B * 36, 8],
    );
    let fc = b.weight("fc", DType::F32, [8, 8]);
    let m = b.op("MatMul", &[l1, fc], DType::F32, [B * 36, 8]);
    let l2 = b.op(
        "LayerNormalization",
        &[m, ones, zeros],
        DType::F32,
        [B * 36, 8],
    );
    b.mark_output(l2);
    let g = b.build().unwrap();
    let s = step(
        &g,
        &TrainingOptions::default()
            .with_checkpoint(Checkpoint::None)
            .with_loss(Loss::None),
    );
    // w, fc, and the merged scale and bias (the LayerNorms read the same two tensors: a
    // module applied at several places is one parameter); the running mean and variance
    // are copies, not trained.
    assert_eq!(
        names(&s, &s.summary.parameters),
        ["fc", "ones", "w", "zeros"]
    );
    assert_eq!(s.summary.parameter_elements, 64 + 64 + 2 * 8);
    // Accumulated, each parameter has one gradient buffer of its size, whatever the number
    // of its readers (testdata/training/cnn_dense's `bnd1`: 160 bytes each, not twice).
    let s = step(
        &g,
        &TrainingOptions::default()
            .with_checkpoint(Checkpoint::None)
            .with_loss(Loss::None)
            .with_accumulate(true),
    );
    assert_eq!(s.summary.gradient_bytes, 4 * (64 + 64 + 2 * 8));
}

/// Removes input `slot` of backward node `n` and plans the result: the plan is right for
/// the broken graph, so only the verifier's own gradient rules can tell.
fn without_read(
    s: &TrainingStep,
    n: memplan_ir::NodeId,
    slot: usize,
) -> Option<Vec<PlanViolation>> {
    let mut g = s.graph.clone();
    g.node_mut(n).inputs[slot] = None;
    let plan = plan_graph(&g, &PlanOptions::default()).ok()?;
    Some(match verify_plan(&g, &plan) {
        Ok(()) => Vec::new(),
        Err(v) => v.0,
    })
}

#[test]
fn the_verifier_rejects_every_backward_that_misses_a_saved_tensor() {
    let graphs = [mlp(DType::F32), masked_attention(), chain(4), rule_zoo()];
    let (mut mutants, mut rejected) = (0, 0);
    for g in &graphs {
        for loss in [Loss::CrossEntropy, Loss::None] {
            let Ok(s) = plan_training(
                g,
                &TrainingOptions::default()
                    .with_loss(loss)
                    .with_checkpoint(Checkpoint::None),
            ) else {
                continue;
            };
            verify_plan(&s.graph, &s.plan).unwrap();
            let saved: Vec<TensorId> = s.summary.saved.clone();
            for (n, node) in s.graph.nodes().iter_enumerated() {
                if node.attr(ATTR_GRAD_OF).is_none() {
                    continue;
                }
                for (slot, x) in node.inputs.iter().enumerate() {
                    let Some(x) = *x else { continue };
                    // A saved activation, or a weight the gradient reads.
                    let weight = s.graph.tensor(x).kind.is_persistent()
                        && s.graph.tensor(x).kind != TensorKind::Weight;
                    if !saved.contains(&x) && !weight {
                        continue;
                    }
                    let Some(v) = without_read(&s, n, slot) else {
                        continue;
                    };
                    mutants += 1;
                    if v.iter()
                        .any(|p| matches!(p, PlanViolation::BackwardMissesSaved { .. }))
                    {
                        rejected += 1;
                    } else {
                        println!("accepted: {} without input {slot}", node.name);
                    }
                }
            }
        }
    }
    println!("{rejected} of {mutants} mutants rejected");
    assert!(mutants >= 20, "{mutants}");
    assert_eq!(rejected, mutants);
}

/// `x * 0.5 * (1 + erf(x / sqrt 2))` after a MatMul and a bias, as exporters write GELU.
fn erf_gelu(expose: bool) -> Graph {
    let mut b = GraphBuilder::new("gelu");
    let x = b.input("x", DType::F32, [B, 32]);
    let w = b.weight("w", DType::F32, [32, 64]);
    let bias = b.weight("bias", DType::F32, [64]);
    let c: Vec<TensorId> = ["sqrt2", "one", "half"]
        .iter()
        .map(|n| b.weight(*n, DType::F32, [0i64; 0]))
        .collect();
    let mm = b.op("MatMul", &[x, w], DType::F32, [B, 64]);
    let h = b.op("Add", &[mm, bias], DType::F32, [B, 64]);
    let d = b.op("Div", &[h, c[0]], DType::F32, [B, 64]);
    let e = b.op("Erf", &[d], DType::F32, [B, 64]);
    let a = b.op("Add", &[e, c[1]], DType::F32, [B, 64]);
    let m = b.op("Mul", &[h, a], DType::F32, [B, 64]);
    let y = b.op("Mul", &[m, c[2]], DType::F32, [B, 64]);
    b.mark_output(y);
    if expose {
        let other = b.op("Neg", &[e], DType::F32, [B, 64]);
        b.mark_output(other);
    }
    b.build().unwrap()
}

#[test]
fn gelu_written_out_is_fused_as_onnx_runtime_fuses_it() {
    let opts = TrainingOptions::default()
        .with_loss(Loss::None)
        .with_checkpoint(Checkpoint::None);
    let s = step(&erf_gelu(false), &opts);
    // BiasGelu(mm, bias): its gradient reads mm; the input x for the weight's gradient.
    assert_eq!(names(&s, &s.summary.saved), ["t6_MatMul", "x"]);
    // One gradient node for mm and the bias, the bias's gradient its sum.
    let grads = |s: &TrainingStep, op: &str| s.graph.nodes().iter().filter(|n| n.op == op).count();
    assert_eq!(grads(&s, "com.microsoft.BiasGeluGrad_dX"), 1);
    // It is element-wise in dY and X (the bias broadcast), so it writes over dY, dead after.
    let grad = s
        .graph
        .nodes()
        .iter()
        .find(|n| n.op == "com.microsoft.BiasGeluGrad_dX")
        .unwrap();
    assert_eq!(
        s.plan.buffer(grad.outputs[0]).unwrap().alias_kind(),
        Some(memplan_planner::AliasKind::InPlace)
    );
    assert!(
        s.graph
            .nodes()
            .iter()
            .any(|n| n.op == "com.microsoft.BiasGelu")
    );
    // An intermediate something else reads is not fused away: every op saves its own.
    let s = step(&erf_gelu(true), &opts);
    assert!(
        s.graph
            .nodes()
            .iter()
            .all(|n| n.op != "com.microsoft.BiasGelu")
    );
    assert!(s.summary.saved.len() > 2);
}

/// Blocks `x_{j+1} = tanh(x_j · W_j + b_j)`: only the `x_j` are saved (the MatMul's weight
/// gradient reads its input, Tanh's its output); the MatMul and Add outputs are not.
fn tanh_blocks(n: usize) -> Graph {
    let mut b = GraphBuilder::new("tanh_blocks");
    let mut x = b.input("x", DType::F32, [B, 64]);
    for j in 0..n {
        let w = b.weight(format!("w{j}"), DType::F32, [64, 64]);
        let bias = b.weight(format!("b{j}"), DType::F32, [64]);
        let m = b.op("MatMul", &[x, w], DType::F32, [B, 64]);
        let a = b.op("Add", &[m, bias], DType::F32, [B, 64]);
        x = b.op("Tanh", &[a], DType::F32, [B, 64]);
    }
    b.mark_output(x);
    b.build().unwrap()
}

/// Every forward-made activation some node after the forward reads either crosses a cut
/// (made by a checkpoint's node, or read by a forward node after the cut closing its
/// segment) or lies after the last cut: what a segment computed on the way to a dropped
/// tensor is recomputed, not kept alive for the recomputation.
fn assert_segments_recomputed(s: &TrainingStep) {
    let g = &s.graph;
    let phase = &s.summary.phases;
    let cuts: Vec<u32> = s
        .summary
        .checkpoints
        .iter()
        .map(|c| g.find_node(c).unwrap().0)
        .collect();
    let Some(&last) = cuts.last() else { return };
    let producers = g.producers();
    let forward = |n: memplan_ir::NodeId| phase[n] == Phase::Forward;
    for (t, tensor) in g.tensors().iter_enumerated() {
        let Some(p) = producers[t].filter(|&p| forward(p)) else {
            continue;
        };
        if tensor.kind != TensorKind::Activation || p.0 > last {
            continue;
        }
        let cut = cuts[cuts.partition_point(|&c| c < p.0)];
        let crosses = cut == p.0
            || g.nodes()
                .iter_enumerated()
                .any(|(n, node)| forward(n) && n.0 > cut && node.present_inputs().any(|x| x == t));
        if crosses {
            continue;
        }
        for (n, node) in g.nodes().iter_enumerated() {
            assert!(
                forward(n) || node.present_inputs().all(|x| x != t),
                "`{}` reads `{}`, which its segment (cut after `{}`) drops",
                node.name,
                tensor.name,
                g.node(memplan_ir::NodeId(cut)).name
            );
        }
    }
}

#[test]
fn checkpoint_segments_are_recomputed_from_their_checkpoints() {
    let g = tanh_blocks(6);
    let opts = |checkpoint| {
        TrainingOptions::default()
            .with_checkpoint(checkpoint)
            .with_loss(Loss::None)
            .with_accumulate(true)
    };
    let none = step(&g, &opts(Checkpoint::None));
    // Cuts after every second block's Tanh (nodes 5 and 11): x_2 and x_4 are kept, x_1
    // and x_3 are recomputed from x_0 and x_2 through their MatMul, Add and Tanh; the last
    // segment (blocks 4 and 5) is kept.
    let every = step(&g, &opts(Checkpoint::Every(6)));
    assert_eq!(every.summary.checkpoints, ["n5_Tanh", "n11_Tanh"]);
    assert_segments_recomputed(&every);
    assert_eq!(every.summary.recompute.nodes, 6);
    let matmul = 2 * (B as u64) * 64 * 64;
    assert_eq!(
        every.summary.recompute.flops,
        2 * matmul + 4 * (B as u64) * 64
    );
    assert!(every.plan.arena_bytes < none.plan.arena_bytes);
    for k in 1..=18 {
        let s = step(&g, &opts(Checkpoint::Every(k)));
        assert_segments_recomputed(&s);
    }
    let named = step(
        &g,
        &opts(Checkpoint::After(vec![
            "n1_Add".to_owned(),
            "n9_MatMul".to_owned(),
        ])),
    );
    assert_segments_recomputed(&named);
}

#[test]
fn the_loss_goes_on_the_first_output_the_model_declares() {
    // `aux` is made first, `logits` declared first (as ONNX's output list may order them).
    let mut b = GraphBuilder::new("two_outputs");
    let x = b.input("x", DType::F32, [B, 32]);
    let w1 = b.weight("w1", DType::F32, [32, 64]);
    let w2 = b.weight("w2", DType::F32, [64, 10]);
    let h = b.op("MatMul", &[x, w1], DType::F32, [B, 64]);
    let aux = b.op("Relu", &[h], DType::F32, [B, 64]);
    let logits = b.op("MatMul", &[aux, w2], DType::F32, [B, 10]);
    b.mark_output(logits);
    b.mark_output(aux);
    let g = b.build().unwrap();
    assert_eq!(g.outputs(), [logits, aux]);
    let s = step(&g, &TrainingOptions::default());
    assert_eq!(names(&s, &s.summary.parameters), ["w1", "w2"]);
    let loss = s.graph.find_node("loss/SoftmaxCrossEntropyLoss").unwrap();
    assert_eq!(s.graph.node(loss).inputs[0], Some(logits));
    // Labels: the logits' shape without the class axis.
    let labels = s.graph.find_tensor("labels").unwrap();
    assert_eq!(s.graph.tensor(labels).static_dims(), Some(vec![B as u64]));
}

/// Ops with rules of their own: Max of one and of three inputs, Min, TopK, ScatterND,
/// ScatterElements, RotaryEmbedding (ONNX's and ONNX Runtime's input orders).
fn rule_zoo() -> Graph {
    let f = DType::F32;
    let mut b = GraphBuilder::new("zoo");
    let x = b.input("x", f, [B, 16, 32]);
    let idx = b.input("idx", DType::I64, [B, 16, 8]);
    let nd = b.input("nd", DType::I64, [4, 1]);
    let pos = b.input("pos", DType::I64, [B, 16]);
    let cos = b.weight("cos", f, [16, 16]);
    let sin = b.weight("sin", f, [16, 16]);
    let w = b.weight("w", f, [32, 32]);
    let u = b.weight("u", f, [4, 16, 32]);
    let k = b.int_constant("k", &[8]);
    let h = b.op("MatMul", &[x, w], f, [B, 16, 32]);
    let m1 = b.op("Max", &[h], f, [B, 16, 32]);
    let m3 = b.op("Max", &[m1, h, x], f, [B, 16, 32]);
    let mn = b.op("Min", &[m3, h], f, [B, 16, 32]);
    let r1 = b.op("RotaryEmbedding", &[mn, cos, sin, pos], f, [B, 16, 32]);
    b.attr("num_heads", Attr::Int(2));
    let r2 = b.op(
        "com.microsoft.RotaryEmbedding",
        &[r1, pos, cos, sin],
        f,
        [B, 16, 32],
    );
    let sn = b.op("ScatterND", &[r2, nd, u], f, [B, 16, 32]);
    let se = b.op("ScatterElements", &[sn, idx, h], f, [B, 16, 32]);
    b.attr("axis", Attr::Int(2));
    let top = b.op("TopK", &[se, k], f, [B, 16, 8]);
    let top_idx = b.tensor("top_idx", DType::I64, [B, 16, 8], TensorKind::Activation);
    b.attr("axis", Attr::Int(-1));
    let y = b.op("Reshape", &[top], f, [B, 128]);
    b.mark_output(y);
    let mut g = b.build_unchecked();
    // TopK's second output.
    let n = g.find_node("n8_TopK").unwrap();
    g.node_mut(n).outputs.push(top_idx);
    g.validate().unwrap();
    g
}

#[test]
fn max_min_topk_scatter_and_rotary_embedding_have_rules() {
    let g = rule_zoo();
    // The rotations' caches are constants, not trained.
    let opts = TrainingOptions::default()
        .with_checkpoint(Checkpoint::None)
        .with_loss(Loss::None)
        .with_frozen(vec!["cos".to_owned(), "sin".to_owned()]);
    let s = step(&g, &opts);
    let saved = names(&s, &s.summary.saved);
    // TopK's indices; the scatters' indices; the rotations' caches are weights and their
    // positions an input; Max and Min their inputs and outputs.
    for t in [
        "top_idx", "idx", "nd", "pos", "t10_Max", "t11_Max", "t12_Min", "x",
    ] {
        assert!(saved.contains(&t.to_owned()), "{t} not in {saved:?}");
    }
    // The updates `u` of the ScatterND are a parameter: their gradient is gathered.
    assert_eq!(names(&s, &s.summary.parameters), ["u", "w"]);
    assert!(s.graph.nodes().iter().any(|n| n.op == "GatherND"));
}

/// GELU's tanh approximation after a MatMul and a bias: `(x * 0.5) * (1 + tanh((x + x³ *
/// 0.044715) * √(2/π)))`, the cube a `Pow` (as Hugging Face's GPT-2 writes it) or `x * x *
/// x` (as PyTorch's exporter writes `gelu(approximate="tanh")`), the half first or last.
fn tanh_gelu(pow: bool, half_first: bool) -> Graph {
    let f = DType::F32;
    let mut b = GraphBuilder::new("tanh_gelu");
    let x = b.input("x", f, [B, 32]);
    let w = b.weight("w", f, [32, 64]);
    let bias = b.weight("bias", f, [64]);
    let c: Vec<TensorId> = ["three", "k1", "k2", "one", "half"]
        .iter()
        .map(|n| b.weight(*n, f, [0i64; 0]))
        .collect();
    let mm = b.op("MatMul", &[x, w], f, [B, 64]);
    let h = b.op("Add", &[mm, bias], f, [B, 64]);
    let cube = if pow {
        b.op("Pow", &[h, c[0]], f, [B, 64])
    } else {
        let sq = b.op("Mul", &[h, h], f, [B, 64]);
        b.op("Mul", &[h, sq], f, [B, 64])
    };
    let m = b.op("Mul", &[c[1], cube], f, [B, 64]);
    let a = b.op("Add", &[h, m], f, [B, 64]);
    let u = b.op("Mul", &[a, c[2]], f, [B, 64]);
    let t = b.op("Tanh", &[u], f, [B, 64]);
    let a1 = b.op("Add", &[c[3], t], f, [B, 64]);
    let y = if half_first {
        let hx = b.op("Mul", &[h, c[4]], f, [B, 64]);
        b.op("Mul", &[a1, hx], f, [B, 64])
    } else {
        let xa = b.op("Mul", &[h, a1], f, [B, 64]);
        b.op("Mul", &[xa, c[4]], f, [B, 64])
    };
    b.mark_output(y);
    b.build().unwrap()
}

#[test]
fn tanh_gelu_is_as_small_as_the_fused_op_whatever_its_spelling() {
    let opts = TrainingOptions::default()
        .with_loss(Loss::None)
        .with_checkpoint(Checkpoint::None);
    // The spelling ONNX Runtime fuses: FastGelu(mm, bias), whose gradient reads mm and the
    // bias; x for the weight's gradient.
    let s = step(&tanh_gelu(true, true), &opts);
    assert_eq!(names(&s, &s.summary.saved), ["t8_MatMul", "x"]);
    let fast = s
        .graph
        .nodes()
        .iter()
        .find(|n| n.op == "com.microsoft.FastGelu")
        .unwrap();
    assert_eq!(fast.inputs.len(), 2);
    let grads = s
        .graph
        .nodes()
        .iter()
        .filter(|n| n.op == "com.microsoft.BiasFastGeluGrad_dX")
        .count();
    assert_eq!(grads, 1);
    // The spellings ONNX Runtime leaves alone (checked with onnxruntime-training 1.19.2)
    // come out as small: one element-wise region, a function of the biased product alone,
    // saves that product and nothing of its chain.
    for (pow, half_first) in [(false, true), (true, false), (false, false)] {
        let s = step(&tanh_gelu(pow, half_first), &opts);
        let what = format!("pow {pow}, half first {half_first}");
        assert!(
            s.graph.nodes().iter().all(|n| !n.op.contains("Gelu")),
            "{what}"
        );
        assert_eq!(names(&s, &s.summary.saved), ["t9_Add", "x"], "{what}");
        let regions = s
            .graph
            .nodes()
            .iter()
            .filter(|n| n.op == "memplan.Pointwise");
        assert_eq!(regions.count(), 1, "{what}");
    }
}

/// ONNX's fused `Attention` (opset 23) on 3-D projections of 64 positions, 2 heads of 32.
fn fused_attention() -> Graph {
    let f = DType::F32;
    let mut b = GraphBuilder::new("fused_attention");
    let x = b.input("x", f, [B, 64, 64]);
    let ws: Vec<TensorId> = ["wq", "wk", "wv"]
        .iter()
        .map(|n| b.weight(*n, f, [64, 64]))
        .collect();
    let qkv: Vec<TensorId> = ws
        .iter()
        .map(|&w| b.op("MatMul", &[x, w], f, [B, 64, 64]))
        .collect();
    let y = b.op("Attention", &qkv, f, [B, 64, 64]);
    b.attr("q_num_heads", Attr::Int(2));
    b.attr("kv_num_heads", Attr::Int(2));
    b.mark_output(y);
    b.build().unwrap()
}

#[test]
fn fused_attention_saves_what_its_kernel_backward_reads() {
    let g = fused_attention();
    let opts = |attention| {
        TrainingOptions::default()
            .with_loss(Loss::None)
            .with_checkpoint(Checkpoint::None)
            .with_plan(PlanOptions::default().with_attention(attention))
    };
    let stat = |s: &TrainingStep| -> (DType, Vec<u64>) {
        let t = s
            .summary
            .saved
            .iter()
            .map(|&t| s.graph.tensor(t))
            .find(|t| t.name.ends_with(".attention_saved"))
            .unwrap();
        (t.dtype, t.static_dims().unwrap())
    };
    let b = B as u64;
    // Eager: the probabilities [batch, heads, q, kv]; the backward's dS is as large.
    let eager = step(&g, &opts(memplan_planner::AttentionKernel::Eager));
    assert_eq!(stat(&eager), (DType::F32, vec![b, 2, 64, 64]));
    assert!(
        eager
            .graph
            .nodes()
            .iter()
            .any(|n| n.op == "memplan.AttentionScoresGrad")
    );
    // Flash: the per-row log-sum-exp, f32 [batch, heads, q].
    let flash = step(&g, &opts(memplan_planner::AttentionKernel::Flash));
    assert_eq!(stat(&flash), (DType::F32, vec![b, 2, 64]));
    assert!(flash.summary.saved_bytes < eager.summary.saved_bytes);
    // Q, K and V are saved either way, Y for flash's row sums.
    for (s, y) in [(&eager, false), (&flash, true)] {
        let saved = names(s, &s.summary.saved);
        for t in ["t4_MatMul", "t5_MatMul", "t6_MatMul"] {
            assert!(saved.contains(&t.to_owned()), "{t}: {saved:?}");
        }
        assert_eq!(saved.contains(&"t7_Attention".to_owned()), y);
    }
}

#[test]
fn what_frozen_weights_compute_is_computed_at_load_not_saved() {
    // h · W1ᵀ, as PyTorch's exporter writes a Linear layer: with W1 frozen, its transpose is
    // computed once at load into the weight region (as ONNX Runtime folds it into a
    // constant), so the backward's read of it saves nothing and recomputes nothing.
    let f = DType::F32;
    let mut b = GraphBuilder::new("frozen");
    let x = b.input("x", f, [B, 32]);
    let w0 = b.weight("w0", f, [32, 64]);
    let w1 = b.weight("w1", f, [128, 64]);
    let w2 = b.weight("w2", f, [128, 10]);
    let h0 = b.op("MatMul", &[x, w0], f, [B, 64]);
    let t = b.op("Transpose", &[w1], f, [64, 128]);
    b.attr("perm", Attr::Ints(vec![1, 0]));
    let h = b.op("MatMul", &[h0, t], f, [B, 128]);
    let r = b.op("Relu", &[h], f, [B, 128]);
    let y = b.op("MatMul", &[r, w2], f, [B, 10]);
    b.mark_output(y);
    let g = b.build().unwrap();
    for checkpoint in [Checkpoint::Cheap, Checkpoint::None, Checkpoint::Every(1)] {
        let s = step(
            &g,
            &TrainingOptions::default()
                .with_frozen(vec!["w1".to_owned()])
                .with_checkpoint(checkpoint.clone()),
        );
        assert_eq!(names(&s, &s.summary.parameters), ["w0", "w2"]);
        let saved = names(&s, &s.summary.saved);
        assert!(
            !saved.contains(&"t5_Transpose".to_owned()),
            "{checkpoint:?}: {saved:?}"
        );
        assert!(
            s.plan.buffer(t).is_none(),
            "{checkpoint:?}: the transpose is in the weight region"
        );
        assert_eq!(s.summary.recompute.nodes, 0, "{checkpoint:?}");
        let total: u64 = s.summary.saved.iter().map(|&t| bytes(&s, t)).sum();
        assert_eq!(s.summary.saved_bytes, total);
    }
    // Trained, the transpose is computed each step and saved.
    let s = step(
        &g,
        &TrainingOptions::default().with_checkpoint(Checkpoint::None),
    );
    assert!(names(&s, &s.summary.saved).contains(&"t5_Transpose".to_owned()));
}

/// `x + mask`, then two MatMuls: the `f32[256, 64]` mask (64 KiB) is a Cast of an
/// `i64[256, 64]` Expand (128 KiB) of a small `i64[1, 64]` constant to a constant shape,
/// built from constants alone. Folded, both live in the weight region for the whole step;
/// made where used (the `constants` fusion), they live only at the first Add, which is not
/// the step's peak (the backward's, with `b` and its gradient). With `late`, the mask is
/// also added to the output, at the forward's end. A mask of `mask_rows` 1 is broadcast.
fn constant_mask(mask_rows: i64, late: bool) -> Graph {
    let rows = 256;
    let mut g = GraphBuilder::new("constant_mask");
    let x = g.input("x", DType::F32, [rows, 64]);
    let small = g.weight("small", DType::I64, [1, 64]);
    let shape = g.weight("shape", DType::I64, [2]);
    let wide = g.op("Expand", &[small, shape], DType::I64, [mask_rows, 64]);
    let mask = g.op("Cast", &[wide], DType::F32, [mask_rows, 64]);
    let a = g.op("Add", &[x, mask], DType::F32, [rows, 64]);
    let w1 = g.weight("w1", DType::F32, [64, 256]);
    let b = g.op("MatMul", &[a, w1], DType::F32, [rows, 256]);
    let r = g.op("Relu", &[b], DType::F32, [rows, 256]);
    let w2 = g.weight("w2", DType::F32, [256, 64]);
    let mut y = g.op("MatMul", &[r, w2], DType::F32, [rows, 64]);
    if late {
        y = g.op("Add", &[y, mask], DType::F32, [rows, 64]);
    }
    g.mark_output(y);
    g.build().unwrap()
}

#[test]
fn constants_are_made_where_used_in_a_training_step_when_that_lowers_its_need() {
    let options = |constants: bool| {
        TrainingOptions::default()
            .with_loss(Loss::None)
            .with_plan(PlanOptions::default().with_fuse(Fusions::NONE.with_constants(constants)))
    };
    let total = |s: &TrainingStep| s.plan.device_bytes(&s.graph).unwrap().total;
    // Copies made where used, in the forward (the `cheap` policy recomputes the Add in the
    // backward, with copies of its own).
    let at_use = |s: &TrainingStep| {
        s.graph
            .nodes()
            .iter_enumerated()
            .filter(|(id, n)| {
                s.summary.phases[*id] == Phase::Forward
                    && n.attr(memplan_planner::ATTR_AT_USE).is_some()
            })
            .count()
    };
    let g = constant_mask(256, false);
    let folded = step(&g, &options(false));
    let remade = step(&g, &options(true));
    // The Expand and the Cast copied before the Add; the weight region loses both
    // (128 + 64 KiB), the arena's peak is not at the Add, so it does not rise.
    assert_eq!(at_use(&folded), 0);
    assert_eq!(at_use(&remade), 2);
    assert_eq!(folded.plan.arena_bytes, remade.plan.arena_bytes);
    assert_eq!(total(&folded) - total(&remade), 192 * 1024);
    // Read again at the forward's end: still lower made where used (the copies there are
    // not at the arena's peak either), the decision is the step's, not the forward's.
    let g = constant_mask(256, true);
    let folded = step(&g, &options(false));
    let remade = step(&g, &options(true));
    assert_eq!(at_use(&remade), 4);
    assert_eq!(folded.plan.arena_bytes, remade.plan.arena_bytes);
    assert_eq!(total(&folded) - total(&remade), 192 * 1024);
    // Small (a broadcast `[1, 64]` mask: 768 bytes, under 1/1024 of the step's need): left
    // folded.
    let g = constant_mask(1, true);
    let remade = step(&g, &options(true));
    assert_eq!(at_use(&remade), 0);
    assert_eq!(total(&remade), total(&step(&g, &options(false))));
}

/// A model that sums rows of `x @ w` into 64 groups by a per-row index, as `scatter_add`
/// into a `torch.zeros(64, 256)` the exporter made a constant `zeros` (listed as all zeros;
/// a `Constant` node's output when `constant_node`), then `@ w2`.
fn scatter_into_zeros(constant_node: bool) -> Graph {
    let mut b = GraphBuilder::new("scatter_into_zeros");
    let x = b.input("x", DType::F32, [1024, 64]);
    let index = b.input("index", DType::I64, [1024, 256]);
    let w = b.weight("w", DType::F32, [64, 256]);
    let zeros = b.weight("zeros", DType::F32, [64, 256]);
    let e = b.named_op("e", "MatMul", &[x, w], DType::F32, [1024, 256]);
    let s = b.named_op(
        "s",
        "ScatterElements",
        &[zeros, index, e],
        DType::F32,
        [64, 256],
    );
    b.attr("axis", Attr::Int(0))
        .attr("reduction", Attr::Str("add".into()));
    let w2 = b.weight("w2", DType::F32, [256, 16]);
    let y = b.named_op("y", "MatMul", &[s, w2], DType::F32, [64, 16]);
    b.mark_output(y);
    let mut g = b.build().unwrap();
    g.set_metadata(memplan_ir::UNIFORM_CONSTANTS, "zeros\t0");
    if constant_node {
        g.set_metadata(memplan_ir::CONSTANT_NODES, "zeros");
    }
    g
}

/// A weight of one value that is a constant of the model (a `Constant` node's, or frozen)
/// leaves the weight region: a `ConstantOfShape` makes it where it is read. A trained
/// parameter of one value (a fresh bias) stays.
#[test]
fn a_constant_of_one_value_is_made_where_used_never_a_trained_one() {
    let options = |constants: bool, frozen: &[&str]| {
        TrainingOptions::default()
            .with_loss(Loss::None)
            .with_frozen(frozen.iter().map(|f| (*f).to_owned()).collect())
            .with_plan(PlanOptions::default().with_fuse(Fusions::NONE.with_constants(constants)))
    };
    let total = |s: &TrainingStep| s.plan.device_bytes(&s.graph).unwrap().total;
    let made = |s: &TrainingStep| -> Vec<String> {
        s.graph
            .nodes()
            .iter()
            .filter(|n| n.op == "ConstantOfShape")
            .map(|n| {
                assert_eq!(n.attr("value"), Some(&Attr::Float(0.0)));
                assert!(n.attr(memplan_planner::ATTR_AT_USE).is_some());
                n.name.clone()
            })
            .collect()
    };
    for (g, frozen) in [
        (scatter_into_zeros(true), &[][..]),
        (scatter_into_zeros(false), &["zeros"][..]),
    ] {
        let kept = step(&g, &options(false, frozen));
        let remade = step(&g, &options(true, frozen));
        assert!(kept.graph.find_tensor("zeros").is_some());
        assert_eq!(made(&kept), Vec::<String>::new());
        assert_eq!(made(&remade), ["zeros@s"]);
        assert!(remade.graph.find_tensor("zeros").is_none());
        // 64 KiB leave the weight region for the 16-byte `zeros.shape` (one 256-byte
        // aligned slot); the copy costs the arena less than that (it is live at the
        // forward's scatter only), or it would not have been made.
        assert!(remade.graph.find_tensor("zeros.shape").is_some());
        assert_eq!(
            kept.summary.persistent_bytes - remade.summary.persistent_bytes,
            64 * 1024 - 256
        );
        assert!(total(&remade) < total(&kept));
    }
    // Not frozen, not a constant node: a parameter, trained, so kept.
    let g = scatter_into_zeros(false);
    let trained = step(&g, &options(true, &[]));
    assert_eq!(made(&trained), Vec::<String>::new());
    assert!(trained.graph.find_tensor("zeros.exp_avg").is_some());
}

/// An error found while planning the step's graph (which the caller never holds) carries
/// that graph, and names the forward's tensor as the caller knows it.
#[test]
fn an_error_in_the_step_graph_names_its_own_tensor() {
    let mut b = GraphBuilder::new("unbound");
    let batch = memplan_ir::Expr::symbol(b.symbol("batch"));
    let x = b.input("x", DType::F32, [4, 8]);
    let w = b.weight("w", DType::F32, [8, 8]);
    let y = b.named_op(
        "y",
        "MatMul",
        &[x, w],
        DType::F32,
        [batch, memplan_ir::Expr::constant(8)],
    );
    b.mark_output(y);
    let g = b.build().unwrap();
    // The default policy meets it planning the step; `auto` meets it measuring the step's
    // profile, inside its search.
    let auto = TrainingOptions::default().with_checkpoint(Checkpoint::Auto { budget: 1 << 30 });
    for options in [TrainingOptions::default(), auto] {
        let err = plan_training(&g, &options).unwrap_err();
        let PlanError::InGraph { graph, error } = &err else {
            panic!("{err:?}")
        };
        assert!(
            graph.graph().name.ends_with(".train"),
            "{}",
            graph.graph().name
        );
        let PlanError::UnboundSymbol { tensor, symbol } = error.as_ref() else {
            panic!("{err:?}")
        };
        assert_eq!(symbol, "batch");
        let named = &graph.graph().tensor(*tensor).name;
        for shown in [err.to_string(), err.with_graph(&g).to_string()] {
            assert_eq!(
                shown,
                format!("tensor `{named}` needs a value for symbol `batch`")
            );
        }
    }
}

/// A declared shape the op contradicts at the binding is met in the step graph, after its
/// sizes (which take the declaration) pass: by `auto` measuring the step's profile, by the
/// default policy planning the step. Either way the error carries the step graph.
#[test]
fn a_shape_error_met_measuring_the_step_names_its_node() {
    let f = DType::F32;
    let mut b = GraphBuilder::new("sliced");
    let n = b.symbol("n");
    let a = b.input(
        "a",
        f,
        vec![memplan_ir::Expr::constant(1), memplan_ir::Expr::symbol(n)],
    );
    let starts = b.int_constant("starts", &[-2]);
    let ends = b.int_constant("ends", &[1000]);
    let axes = b.int_constant("axes", &[1]);
    // Two elements for n >= 2 only; planned at n = 1.
    let y = b.named_op("y", "Slice", &[a, starts, ends, axes], f, [1, 2]);
    let w = b.weight("w", f, [1, 2]);
    let z = b.named_op("z", "Mul", &[y, w], f, [1, 2]);
    b.mark_output(z);
    let g = b.build().unwrap();
    let plan = PlanOptions::default().with_bindings(g.bind(&[("n", 1)]).unwrap());
    for checkpoint in [Checkpoint::Auto { budget: 1 << 30 }, Checkpoint::Cheap] {
        let options = TrainingOptions::default()
            .with_checkpoint(checkpoint.clone())
            .with_loss(Loss::None)
            .with_plan(plan.clone());
        let err = plan_training(&g, &options).unwrap_err();
        let PlanError::InGraph { graph, error } = &err else {
            panic!("{checkpoint:?}: {err:?}")
        };
        let PlanError::DeclaredShape { node, .. } = error.as_ref() else {
            panic!("{checkpoint:?}: {err:?}")
        };
        assert_eq!(graph.graph().node(*node).name, "y", "{checkpoint:?}");
        for shown in [err.to_string(), err.with_graph(&g).to_string()] {
            assert!(
                shown.starts_with("node `y`: output `y`"),
                "{checkpoint:?}: {shown}"
            );
        }
    }
}

/// Conv, group normalisation (2 groups of 4 channels), SiLU written out, Conv: the group
/// normalisation either one `GroupNormalization` node (opset 21's, `[c]` weights) or as
/// PyTorch's exporters write it below opset 21 (`written_out`): `x` reshaped to
/// `[n, groups, rest]`, `InstanceNormalization` with constant ones and zeros, reshaped back,
/// `* scale + bias` with `[c, 1, 1]` weights. Every tensor named.
fn conv_group_norm_silu(written_out: bool) -> Graph {
    let f = DType::F32;
    let mut b = GraphBuilder::new("gn");
    let x = b.input("x", f, [4, 3, 8, 8]);
    let w1 = b.weight("w1", f, [8, 3, 3, 3]);
    let w2 = b.weight("w2", f, [8, 8, 3, 3]);
    let conv = |b: &mut GraphBuilder, name: &str, x: TensorId, w: TensorId| {
        let y = b.named_op(name, "Conv", &[x, w], f, [4, 8, 8, 8]);
        b.attr("pads", Attr::Ints(vec![1, 1, 1, 1]));
        y
    };
    let c1 = conv(&mut b, "c1", x, w1);
    let gn = if written_out {
        let grouped = b.int_constant("grouped", &[4, 2, -1]);
        let back = b.int_constant("back", &[4, 8, 8, 8]);
        let ones = b.weight("ones", f, [2]);
        let zeros = b.weight("zeros", f, [2]);
        let scale = b.weight("scale", f, [8, 1, 1]);
        let bias = b.weight("bias", f, [8, 1, 1]);
        let r = b.named_op("r", "Reshape", &[c1, grouped], f, [4, 2, 256]);
        let i = b.named_op(
            "i",
            "InstanceNormalization",
            &[r, ones, zeros],
            f,
            [4, 2, 256],
        );
        let v = b.named_op("v", "Reshape", &[i, back], f, [4, 8, 8, 8]);
        let m = b.named_op("m", "Mul", &[v, scale], f, [4, 8, 8, 8]);
        b.named_op("gn", "Add", &[m, bias], f, [4, 8, 8, 8])
    } else {
        let scale = b.weight("scale", f, [8]);
        let bias = b.weight("bias", f, [8]);
        let y = b.named_op(
            "gn",
            "GroupNormalization",
            &[c1, scale, bias],
            f,
            [4, 8, 8, 8],
        );
        b.attr("num_groups", Attr::Int(2));
        y
    };
    let sig = b.named_op("sig", "Sigmoid", &[gn], f, [4, 8, 8, 8]);
    let silu = b.named_op("silu", "Mul", &[gn, sig], f, [4, 8, 8, 8]);
    let c2 = conv(&mut b, "c2", silu, w2);
    b.mark_output(c2);
    b.build().unwrap()
}

#[test]
fn group_norm_written_out_saves_what_the_fused_op_saves() {
    let none = TrainingOptions::default()
        .with_checkpoint(Checkpoint::None)
        .with_loss(Loss::None);
    let fused = step(&conv_group_norm_silu(false), &none);
    let written = step(&conv_group_norm_silu(true), &none);
    // The group norm's gradient reads its input, the SiLU (one element-wise region) its
    // input, the second conv its input, the first conv x; plus the statistics (2 floats per
    // sample and group, each). Op by op, the scale's gradient would also keep `i`, the
    // normalised tensor (8 KiB).
    let expected = ["c1", "gn", "gn.inv_std", "gn.mean", "silu", "x"];
    assert_eq!(names(&fused, &fused.summary.saved), expected);
    assert_eq!(names(&written, &written.summary.saved), expected);
    let act = 4 * 8 * 8 * 8 * 4;
    let stats = 2 * 4 * 2 * 4;
    assert_eq!(
        written.summary.saved_bytes,
        (4 * 3 * 8 * 8 * 4 + 3 * act + stats) as u64
    );
    assert_eq!(written.summary.saved_bytes, fused.summary.saved_bytes);
    // The instance norm's ones and zeros are constants the fused op does not read: not
    // trained (PyTorch's group_norm has no such parameters).
    assert_eq!(
        written.summary.parameter_elements,
        fused.summary.parameter_elements
    );
}

#[test]
fn group_norm_and_silu_are_made_again_from_the_conv_output_and_the_statistics() {
    let cheap = TrainingOptions::default().with_loss(Loss::None);
    for written_out in [false, true] {
        let s = step(&conv_group_norm_silu(written_out), &cheap);
        // As torch.compile's partitioner: the conv output and the statistics are kept, the
        // normalised tensor and the SiLU's output made again from them (an element-wise
        // apply, then the SiLU) where the backward reads them.
        assert_eq!(
            names(&s, &s.summary.saved),
            ["c1", "gn.inv_std", "gn.mean", "x"],
            "written out: {written_out}"
        );
        assert_eq!(s.summary.recompute.nodes, 2, "written out: {written_out}");
        assert!(
            s.graph
                .nodes()
                .iter()
                .any(|n| n.op == "memplan.GroupNormApply")
        );
    }
}

/// A DLRM-like forward: a two-layer MLP of x (first in the forward) and an embedding of
/// ids, concatenated into a linear head.
fn mlp_beside_an_embedding() -> Graph {
    let mut b = GraphBuilder::new("mlp_beside_an_embedding");
    let x = b.input("x", DType::F32, [1024, 8]);
    let ids = b.input("ids", DType::I64, [1024]);
    let w1 = b.weight("w1", DType::F32, [64, 8]);
    let w2 = b.weight("w2", DType::F32, [64, 64]);
    let table = b.weight("table", DType::F32, [4096, 64]);
    let w3 = b.weight("w3", DType::F32, [10, 128]);
    let h1 = b.named_op("h1", "Gemm", &[x, w1], DType::F32, [1024, 64]);
    b.attr("transB", Attr::Int(1));
    let r1 = b.named_op("r1", "Relu", &[h1], DType::F32, [1024, 64]);
    let h2 = b.named_op("h2", "Gemm", &[r1, w2], DType::F32, [1024, 64]);
    b.attr("transB", Attr::Int(1));
    let r2 = b.named_op("r2", "Relu", &[h2], DType::F32, [1024, 64]);
    let e = b.named_op("e", "Gather", &[table, ids], DType::F32, [1024, 64]);
    let c = b.named_op("c", "Concat", &[r2, e], DType::F32, [1024, 128]);
    b.attr("axis", Attr::Int(1));
    let y = b.named_op("y", "Gemm", &[c, w3], DType::F32, [1024, 10]);
    b.attr("transB", Attr::Int(1));
    b.mark_output(y);
    b.build().unwrap()
}

#[test]
fn under_cheap_the_backward_finishes_the_branch_that_frees_memory_first() {
    let g = mlp_beside_an_embedding();
    // The first node of the schedule writing a gradient whose name starts with `of`.
    let first = |s: &TrainingStep, of: &str| {
        s.plan
            .schedule
            .iter()
            .position(|&n| {
                let node = s.graph.node(n);
                node.attr(ATTR_GRAD_OF).is_some()
                    && node
                        .outputs
                        .iter()
                        .any(|&t| s.graph.tensor(t).name.starts_with(of))
            })
            .unwrap_or_else(|| panic!("no gradient of {of}"))
    };
    let cheap = step(&g, &TrainingOptions::default());
    let none = step(
        &g,
        &TrainingOptions::default().with_checkpoint(Checkpoint::None),
    );
    // Eager order (`none`): the embedding's gradient (1 MiB) while the MLP's saved
    // activations (256 KiB each) still wait for their backward. `cheap` runs the MLP's
    // backward first, freeing them, and needs less.
    assert!(first(&none, "table") < first(&none, "w1"));
    assert!(first(&cheap, "w1") < first(&cheap, "table"));
    assert!(
        cheap.plan.arena_bytes < none.plan.arena_bytes,
        "{} {}",
        cheap.plan.arena_bytes,
        none.plan.arena_bytes
    );
}
