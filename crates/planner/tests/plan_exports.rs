//! What today's PyTorch exports need from the planner, on small hand-built graphs: tensors
//! computed from weights alone planned once, in the weight region (and as activations with
//! folding off); the scratch of fused attention kernels; symbols that stand for a broadcast;
//! empty tensors. Each plan passes the verifier, and broken plans (mutants) are refused.

use memplan_ir::{Attr, DType, Expr, Graph, GraphBuilder, TensorId, TensorKind};
use memplan_planner::{
    AttentionKernel, Plan, PlanOptions, PlanViolation, PlannedBuffer, PlannedWeight,
    PlannedWorkspace, WorkspaceFault, plan_graph, verify_plan,
};

mod common;
use common::plan_ok;

fn violations(graph: &Graph, plan: &Plan) -> Vec<PlanViolation> {
    verify_plan(graph, plan)
        .err()
        .map(|v| v.0)
        .unwrap_or_default()
}

/// A tied output layer: `logits = Gather(W, ids) · Transpose(W)`, with the transpose of the
/// embedding `W: f32[1000, 16]` made on the way, as the dynamo exporter writes GPT-2; and a
/// weight cast feeding a second, unrelated branch. Returns the graph, the transpose and the
/// cast.
fn tied() -> (Graph, TensorId, TensorId) {
    let mut g = GraphBuilder::new("tied");
    let ids = g.input("ids", DType::I64, [1, 8]);
    let w = g.weight("w", DType::F32, [1000, 16]);
    let h = g.op("Gather", &[w, ids], DType::F32, [1, 8, 16]);
    let wt = g.op("Transpose", &[w], DType::F32, [16, 1000]);
    g.attr("perm", Attr::Ints(vec![1, 0]));
    let logits = g.op("MatMul", &[h, wt], DType::F32, [1, 8, 1000]);
    g.mark_output(logits);
    let w16 = g.weight("w16", DType::F16, [8, 16]);
    let cast = g.op("Cast", &[w16], DType::F32, [8, 16]);
    g.attr("to", Attr::Int(1));
    let scaled = g.op("Mul", &[cast, cast], DType::F32, [8, 16]);
    let y = g.op("Add", &[h, scaled], DType::F32, [1, 8, 16]);
    g.mark_output(y);
    (g.build().unwrap(), wt, cast)
}

#[test]
fn tensors_made_from_weights_alone_are_planned_once_in_the_weight_region() {
    let (graph, wt, cast) = tied();
    let folded = plan_ok(&graph, &PlanOptions::default());
    assert!(folded.settings.fold_weights);
    // The transpose (64,000 bytes), the cast and the product of the cast (512 each) are
    // weight entries; nothing the nodes read or write from weights is in the arena.
    for t in [wt, cast] {
        assert!(
            folded.weight(t).is_some(),
            "{t} is not in the weight region"
        );
        assert!(folded.buffer(t).is_none(), "{t} is in the arena");
    }
    let computed: u64 = folded
        .weights
        .iter()
        .filter(|w| graph.tensor(w.tensor).kind != TensorKind::Weight)
        .map(|w| w.bytes)
        .sum();
    assert_eq!(computed, 64_000 + 512 + 512);
    // At its peak (the MatMul, and the Add written in place over h) the arena holds h
    // (512 B) and the logits (32,000 B): no 64,000-byte transpose.
    assert_eq!(folded.arena_bytes, 512 + 32_000);

    let unfolded = plan_ok(&graph, &PlanOptions::default().with_fold_weights(false));
    assert!(unfolded.buffer(wt).is_some() && unfolded.weight(wt).is_none());
    assert!(unfolded.arena_bytes >= 64_000 + 32_000);
    assert_eq!(
        folded.weight_bytes,
        unfolded.weight_bytes + 64_000 + 1024,
        "the folded tensors are added to the weight region (all aligned to 256)"
    );
}

#[test]
fn only_pure_nodes_reading_weights_alone_and_feeding_no_output_are_folded() {
    let mut g = GraphBuilder::new("chains");
    let x = g.input("x", DType::F32, [4]);
    let w = g.weight("w", DType::F32, [4]);
    let s = g.weight("s", DType::F32, [1]);
    // A dequantisation chain of three nodes: all folded.
    let a = g.op("Cast", &[w], DType::F32, [4]);
    let b = g.op("Sub", &[a, s], DType::F32, [4]);
    let c = g.op("Mul", &[b, s], DType::F32, [4]);
    // Random from weights: runs every time, and what reads it too.
    let r = g.op("RandomNormalLike", &[w], DType::F32, [4]);
    let r2 = g.op("Relu", &[r], DType::F32, [4]);
    let d = g.op("com.microsoft.BiasDropout", &[w, s], DType::F32, [4]);
    // Reads an input: not folded.
    let e = g.op("Add", &[x, c], DType::F32, [4]);
    // From weights, but a graph output: the caller reads it where outputs live.
    let out = g.op("Neg", &[w], DType::F32, [4]);
    g.mark_output(out);
    let y = g.op("Sum", &[e, r2, d], DType::F32, [4]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    for t in [a, b, c] {
        assert!(plan.weight(t).is_some(), "{}", graph.tensor(t).name);
    }
    for t in [r, r2, d, e, out] {
        assert!(plan.weight(t).is_none(), "{}", graph.tensor(t).name);
    }
}

/// Mutants of a folding plan: each moves a tensor to the wrong region or drops it, and the
/// verifier refuses every one.
#[test]
fn the_verifier_knows_where_weight_derived_tensors_belong() {
    let (graph, wt, cast) = tied();
    let folded = plan_ok(&graph, &PlanOptions::default());
    let unfolded = plan_ok(&graph, &PlanOptions::default().with_fold_weights(false));
    let mut refused = 0;
    let mut mutants: Vec<(Plan, &str)> = Vec::new();
    // Folding on, the transpose dropped from the weight region.
    let mut m = folded.clone();
    m.weights.retain(|w| w.tensor != wt);
    mutants.push((m, "not folded"));
    // Folding on, the transpose moved into the arena (a buffer of its own past the end).
    let mut m = folded.clone();
    m.weights.retain(|w| w.tensor != wt);
    m.buffers.push(PlannedBuffer {
        tensor: wt,
        offset: m.arena_bytes,
        bytes: 64_000,
        first: 1,
        last: 2,
        alias: None,
    });
    m.buffers.sort_by_key(|b| b.tensor);
    m.arena_bytes += 64_000;
    mutants.push((m, "in the arena"));
    // Folding off, yet the cast placed in the weight region.
    let mut m = unfolded.clone();
    m.buffers.retain(|b| b.tensor != cast);
    m.weights.push(PlannedWeight {
        tensor: cast,
        offset: m.weight_bytes,
        bytes: 512,
    });
    m.weight_bytes += 512;
    m.weights.sort_by_key(|w| w.tensor);
    mutants.push((m, "folded without folding"));
    // The settings say nothing was folded, but the plan folded.
    let mut m = folded.clone();
    m.settings.fold_weights = false;
    mutants.push((m, "settings disagree"));
    for (m, what) in &mutants {
        let v = violations(&graph, m);
        assert!(!v.is_empty(), "mutant `{what}` passes");
        refused += 1;
    }
    assert_eq!(refused, mutants.len());
    let v = violations(&graph, &mutants[0].0);
    assert!(
        v.iter()
            .any(|v| matches!(v, PlanViolation::NotFolded { tensor } if *tensor == wt)),
        "{v:?}"
    );
    // The plan file records both, and reads back to the same plan.
    let text = folded.to_json(&graph);
    assert!(text.contains("\"computed_by\":\"n1_Transpose\""), "{text}");
    assert!(text.contains("\"fold_weights\":true"), "{text}");
    assert_eq!(Plan::from_json(&graph, &text).unwrap(), folded);
    let lie = text.replace(
        "\"computed_by\":\"n1_Transpose\"",
        "\"computed_by\":\"n2_MatMul\"",
    );
    assert!(Plan::from_json(&graph, &lie).is_err());
    // A file from before folding (no `fold_weights`) reads as unfolded.
    let old = unfolded
        .to_json(&graph)
        .replace("\"fold_weights\":false,", "");
    assert!(!old.contains("fold_weights"));
    let back = Plan::from_json(&graph, &old).unwrap();
    assert!(!back.settings.fold_weights);
    verify_plan(&graph, &back).unwrap();
}

/// ONNX `Attention` (opset 23) on 4-D Q, K, V `[2, 4, 8, 16]` with a past of 24 positions:
/// the kernel attends to 32 keys.
fn attention(dtype: DType, softmax: Option<i64>) -> (Graph, TensorId) {
    let mut g = GraphBuilder::new("attention");
    let q = g.input("q", dtype, [2, 4, 8, 16]);
    let k = g.input("k", dtype, [2, 4, 8, 16]);
    let v = g.input("v", dtype, [2, 4, 8, 16]);
    let pk = g.input("past_key", dtype, [2, 4, 24, 16]);
    let pv = g.input("past_value", dtype, [2, 4, 24, 16]);
    let y = g.tensor("y", dtype, [2, 4, 8, 16], TensorKind::Output);
    let present_k = g.tensor("present_key", dtype, [2, 4, 32, 16], TensorKind::Output);
    let present_v = g.tensor("present_value", dtype, [2, 4, 32, 16], TensorKind::Output);
    g.node(
        "attn",
        "Attention",
        &[Some(q), Some(k), Some(v), None, Some(pk), Some(pv)],
        &[y, present_k, present_v],
    );
    if let Some(code) = softmax {
        g.attr("softmax_precision", Attr::Int(code));
    }
    (g.build().unwrap(), y)
}

fn workspace(plan: &Plan) -> &PlannedWorkspace {
    assert_eq!(plan.workspaces.len(), 1, "{:?}", plan.workspaces);
    &plan.workspaces[0]
}

#[test]
fn fused_attention_gets_the_scratch_of_its_kernel() {
    let (graph, _) = attention(DType::F16, None);
    // Eager: 2 batch x 4 heads x 8 queries x 32 keys, f16.
    let eager = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(workspace(&eager).bytes, 2 * 4 * 8 * 32 * 2);
    assert_eq!(eager.settings.attention, AttentionKernel::Eager);
    // Flash: a max and a sum per row, f32.
    let flash = plan_ok(
        &graph,
        &PlanOptions::default().with_attention(AttentionKernel::Flash),
    );
    assert_eq!(workspace(&flash).bytes, 2 * 4 * 8 * 8);
    // The softmax precision the op names is the score dtype.
    let (graph32, _) = attention(DType::F16, Some(1));
    let wide = plan_ok(&graph32, &PlanOptions::default());
    assert_eq!(workspace(&wide).bytes, 2 * 4 * 8 * 32 * 4);
    // The arena holds the scratch beside the live tensors at that step.
    assert!(eager.arena_bytes >= flash.arena_bytes + 2 * 4 * 8 * 32 * 2 - 2 * 4 * 8 * 8);
}

#[test]
fn the_verifier_sizes_attention_scratch_on_its_own() {
    let (graph, _) = attention(DType::F32, None);
    let plan = plan_ok(&graph, &PlanOptions::default());
    let need = 2 * 4 * 8 * 32 * 4;
    assert_eq!(workspace(&plan).bytes, need);
    let bad = |plan: &Plan| violations(&graph, plan);
    // Too small by one byte.
    let mut m = plan.clone();
    m.workspaces[0].bytes = need - 1;
    assert!(bad(&m).iter().any(|v| matches!(
        v,
        PlanViolation::BadWorkspace {
            reason: WorkspaceFault::NoRoomForScratch { .. },
            ..
        }
    )));
    // Gone.
    let mut m = plan.clone();
    m.workspaces.clear();
    assert!(bad(&m).iter().any(|v| matches!(
        v,
        PlanViolation::BadWorkspace {
            reason: WorkspaceFault::Missing,
            ..
        }
    )));
    // A flash-sized workspace in a plan that says eager.
    let flash = plan_ok(
        &graph,
        &PlanOptions::default().with_attention(AttentionKernel::Flash),
    );
    let mut m = flash.clone();
    m.settings.attention = AttentionKernel::Eager;
    assert!(!bad(&m).is_empty());
    // The eager plan serves a flash kernel too (more room than it needs).
    let mut m = plan.clone();
    m.settings.attention = AttentionKernel::Flash;
    verify_plan(&graph, &m).unwrap();
    // Round trip through the plan file.
    let text = flash.to_json(&graph);
    assert!(text.contains("\"attention\":\"flash\""), "{text}");
    assert_eq!(Plan::from_json(&graph, &text).unwrap(), flash);
    let unknown = text.replace("\"attention\":\"flash\"", "\"attention\":\"paged\"");
    assert!(Plan::from_json(&graph, &unknown).is_err());
}

/// `y[b] = a[n] + c[m]`, `b` a symbol standing for the broadcast of `n` and `m`.
fn broadcasting() -> Graph {
    let mut g = GraphBuilder::new("broadcast");
    let n = g.symbol("n");
    let m = g.symbol("m");
    let b = g.symbol("Add_o0_d0");
    let a = g.input("a", DType::F32, [Expr::symbol(n)]);
    let c = g.input("c", DType::F32, [Expr::symbol(m)]);
    let y = g.op("Add", &[a, c], DType::F32, [Expr::symbol(b)]);
    let z = g.op("Relu", &[y], DType::F32, [Expr::symbol(b)]);
    g.mark_output(z);
    let mut graph = g.build().unwrap();
    assert!(graph.set_symbol_broadcast(b, Expr::symbol(n), Expr::symbol(m)));
    graph
}

#[test]
fn a_broadcast_symbol_is_resolved_from_its_dims_and_checked() {
    let graph = broadcasting();
    let options = |n: u64, m: u64| {
        PlanOptions::default()
            .with_bindings(graph.bind(&[("n", 1), ("m", 1)]).map_or_else(
                |_| unreachable!(),
                |_| {
                    let mut b = memplan_ir::Bindings::new();
                    b.set(graph.find_symbol("n").unwrap(), n);
                    b.set(graph.find_symbol("m").unwrap(), m);
                    b
                },
            ))
            .with_alignment(1)
    };
    // The caller binds n and m only (as `fit` does); the planner resolves the rest.
    let plan = plan_ok(&graph, &options(1, 64));
    assert!(
        plan.settings
            .bindings
            .contains(&("Add_o0_d0".to_owned(), 64))
    );
    let y = graph.find_tensor("t2_Add").unwrap();
    assert_eq!(plan.buffer(y).unwrap().bytes, 256);
    let err = plan_graph(&graph, &options(3, 64)).unwrap_err().to_string();
    assert!(err.contains("n = 3 with m = 64"), "{err}");
    // A plan whose recorded bindings contradict the broadcast is refused.
    let mut m = plan.clone();
    for (name, value) in &mut m.settings.bindings {
        if name == "Add_o0_d0" {
            *value = 1;
        }
    }
    assert!(matches!(
        violations(&graph, &m).as_slice(),
        [PlanViolation::Bindings(_)]
    ));
}

#[test]
fn empty_tensors_take_no_bytes_and_no_arena_space() {
    // A KV-cache step at past = 0: the past is empty, the Concat is the new keys alone.
    let mut g = GraphBuilder::new("prefill");
    let past = g.symbol("past");
    let p = g.input(
        "past_key",
        DType::F32,
        [1.into(), 2.into(), Expr::symbol(past), 8.into()],
    );
    let k = g.input("new_key", DType::F32, [1, 2, 4, 8]);
    let present = g.op(
        "Concat",
        &[p, k],
        DType::F32,
        [
            1.into(),
            2.into(),
            Expr::symbol(past).checked_add(&4.into()).unwrap(),
            8.into(),
        ],
    );
    g.attr("axis", Attr::Int(2));
    let r = g.op("Reshape", &[p], DType::F32, [Expr::symbol(past), 16.into()]);
    let y = g.op(
        "Relu",
        &[present],
        DType::F32,
        [
            1.into(),
            2.into(),
            Expr::symbol(past).checked_add(&4.into()).unwrap(),
            8.into(),
        ],
    );
    g.mark_output(y);
    g.mark_output(r);
    let graph = g.build().unwrap();
    let plan = plan_ok(
        &graph,
        &PlanOptions::default().with_bindings(graph.bind(&[("past", 0)]).unwrap()),
    );
    for t in [p, r] {
        assert!(plan.buffer(t).is_none(), "an empty tensor got a buffer");
    }
    // new_key, present and y: 256 bytes each, present written in place by y's Relu.
    assert_eq!(plan.arena_bytes, 512);
    // The verifier accepts a plan that lists an empty tensor with 0 bytes, and refuses one
    // that gives it bytes.
    let mut m = plan.clone();
    m.buffers.push(PlannedBuffer {
        tensor: p,
        offset: 0,
        bytes: 0,
        first: 0,
        last: 1,
        alias: None,
    });
    m.buffers.sort_by_key(|b| b.tensor);
    verify_plan(&graph, &m).unwrap();
    m.buffers.iter_mut().find(|b| b.tensor == p).unwrap().bytes = 64;
    assert!(!violations(&graph, &m).is_empty());
}

#[test]
fn a_training_step_folds_nothing() {
    // The weights change every step: the tied transpose is computed every step, in the arena.
    let (forward, wt, _) = tied();
    let mut b = GraphBuilder::new("bwd");
    let dlogits = b.input("dlogits", DType::F32, [1, 8, 1000]);
    // The forward's `h`, named as the forward's builder names tensor `t2`.
    let h = b.input("t2_Gather", DType::F32, [1, 8, 16]);
    let dwt = b.named_op("dwt", "MatMul", &[h, dlogits], DType::F32, [16, 1000]);
    b.mark_output(dwt);
    let backward = b.build().unwrap();
    let training =
        memplan_planner::plan_forward_backward(&forward, &backward, &PlanOptions::default())
            .unwrap();
    verify_plan(&forward, &training.forward).unwrap();
    // The backward reads the forward's `h`: it is saved for it.
    assert_eq!(training.saved, [forward.find_tensor("t2_Gather").unwrap()]);
    assert!(!training.plan.settings.fold_weights);
    assert!(training.forward.buffer(wt).is_some());
    assert!(training.forward.weight(wt).is_none());
}
