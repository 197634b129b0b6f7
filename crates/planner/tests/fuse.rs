//! The `--fuse` rewrite on graphs built by hand: each kernel replaces what it should and
//! nothing else, its plan passes the verifier with the scratch each attention kernel needs
//! (computed here by hand), patterns a kernel cannot take stay as they are, and the
//! verifier's own check of the rewrite (`verify_fusion`) refuses every unsound one.

use memplan_ir::{Attr, DType, Graph, GraphBuilder, GraphError, Node, TensorId, TensorKind};
use memplan_planner::{
    AttentionKernel, Fusions, PlanError, PlanOptions, fuse_graph, plan_fused, verify_fusion,
    verify_plan,
};

fn only(f: Fusions) -> PlanOptions {
    PlanOptions::default().with_fuse(f)
}

fn attention_only() -> PlanOptions {
    only(Fusions::NONE.with_attention(true))
}

/// `softmax(q·kᵀ · s + mask) · v` over `[2, 4, 8, 16]` Q, K, V (K transposed by a
/// `Transpose`), then the output transposed back to `[2, 8, 4, 16]`; with `reader`, the
/// scores are also a graph output (as `output_attentions` makes them).
fn attention(scores_out: bool) -> (Graph, [TensorId; 5]) {
    let mut g = GraphBuilder::new("attn");
    let q = g.input("q", DType::F32, [2, 4, 8, 16]);
    let k = g.input("k", DType::F32, [2, 4, 8, 16]);
    let v = g.input("v", DType::F32, [2, 4, 8, 16]);
    let mask = g.input("mask", DType::F32, [2, 1, 8, 8]);
    let scale = g.weight("scale", DType::F32, [1]);
    let kt = g.op("Transpose", &[k], DType::F32, [2, 4, 16, 8]);
    g.attr("perm", Attr::Ints(vec![0, 1, 3, 2]));
    let s = g.op("MatMul", &[q, kt], DType::F32, [2, 4, 8, 8]);
    let s2 = g.op("Mul", &[s, scale], DType::F32, [2, 4, 8, 8]);
    let s3 = g.op("Add", &[s2, mask], DType::F32, [2, 4, 8, 8]);
    let p = g.op("Softmax", &[s3], DType::F32, [2, 4, 8, 8]);
    g.attr("axis", Attr::Int(-1));
    let o = g.op("MatMul", &[p, v], DType::F32, [2, 4, 8, 16]);
    let y = g.op("Transpose", &[o], DType::F32, [2, 8, 4, 16]);
    g.attr("perm", Attr::Ints(vec![0, 2, 1, 3]));
    g.mark_output(y);
    // Something else the graph computes.
    let z = g.input("z", DType::F32, [4]);
    let zr = g.op("Relu", &[z], DType::F32, [4]);
    g.mark_output(zr);
    if scores_out {
        g.mark_output(s3);
    }
    (g.build().unwrap(), [q, k, v, mask, y])
}

fn fused_nodes<'a>(g: &'a Graph, op: &str) -> Vec<&'a Node> {
    g.nodes().iter().filter(|n| n.op == op).collect()
}

/// The id of the first node running `op`.
fn first_of(g: &Graph, op: &str) -> memplan_ir::NodeId {
    g.nodes()
        .iter_enumerated()
        .find(|(_, n)| n.op == op)
        .unwrap()
        .0
}

#[test]
fn attention_becomes_one_kernel_with_its_scratch() {
    let (g, [q, k, v, mask, y]) = attention(false);
    for (kernel, scratch) in [
        // 2 x 4 heads x 8 queries x 8 keys f32 scores; two f32 per query row.
        (AttentionKernel::Eager, 2 * 4 * 8 * 8 * 4),
        (AttentionKernel::Flash, 2 * 4 * 8 * 2 * 4),
    ] {
        let options = attention_only().with_attention(kernel);
        let (fused, plan) = plan_fused(&g, &options).unwrap();
        verify_fusion(&g, &fused.graph).unwrap();
        verify_plan(&fused.graph, &plan).unwrap();
        let f = &fused.graph;
        let [node] = fused_nodes(f, "memplan.Attention")[..] else {
            panic!("{:?}", f.nodes())
        };
        let name = |t: Option<TensorId>| f.tensor(t.unwrap()).name.clone();
        let ins: Vec<String> = node.inputs.iter().map(|&i| name(i)).collect();
        assert_eq!(ins, ["q", "k", "v", "mask"]);
        assert_eq!(name(node.outputs.first().copied()), g.tensor(y).name);
        // K's keys are its axis 2; the output's value size its axis 3 (after the transpose).
        assert_eq!(node.attr("kv_axis"), Some(&Attr::Int(2)));
        assert_eq!(node.attr("dv_axis"), Some(&Attr::Int(3)));
        // Nothing else is left: the fused graph is the kernel and the other Relu.
        assert_eq!(f.nodes().len(), 2);
        let w = &plan.workspaces;
        assert_eq!(w.len(), 1);
        assert!(
            w[0].bytes >= scratch,
            "{kernel:?}: {} < {scratch}",
            w[0].bytes
        );
        assert!(w[0].bytes < scratch + 256);
        let _ = (q, k, v, mask);
    }
}

#[test]
fn scores_read_elsewhere_stay_written_out() {
    let (g, _) = attention(true);
    let fused = fuse_graph(&g, &attention_only()).unwrap();
    assert!(fused.fused.is_empty());
    assert_eq!(fused.graph.nodes().len(), g.nodes().len());
}

#[test]
fn softmax_over_another_axis_is_no_attention() {
    let (g, _) = attention(false);
    let mut json = g.to_json();
    json = json.replacen("\"axis\":-1", "\"axis\":2", 1);
    let g2 = Graph::from_json(&json).unwrap();
    assert_ne!(g2.to_json(), g.to_json(), "the edit took");
    let fused = fuse_graph(&g2, &attention_only()).unwrap();
    assert!(fused.fused.is_empty());
}

/// Grouped-query attention as Hugging Face writes it: K and V of 2 heads repeated to 4
/// (`Unsqueeze`, `Expand`, `Reshape`); the kernel reads the 2-head tensors.
#[test]
fn repeated_key_value_heads_are_read_once() {
    let mut g = GraphBuilder::new("gqa");
    let q = g.input("q", DType::F32, [1, 4, 8, 16]);
    let k = g.input("k", DType::F32, [1, 2, 8, 16]);
    let v = g.input("v", DType::F32, [1, 2, 8, 16]);
    let axes = g.int_constant("axes", &[2]);
    let shape5 = g.int_constant("shape5", &[1, 2, 2, 8, 16]);
    let shape4 = g.int_constant("shape4", &[1, 4, 8, 16]);
    let repeat = |g: &mut GraphBuilder, t: TensorId| {
        let u = g.op("Unsqueeze", &[t, axes], DType::F32, [1, 2, 1, 8, 16]);
        let e = g.op("Expand", &[u, shape5], DType::F32, [1, 2, 2, 8, 16]);
        g.op("Reshape", &[e, shape4], DType::F32, [1, 4, 8, 16])
    };
    let kr = repeat(&mut g, k);
    let vr = repeat(&mut g, v);
    let kt = g.op("Transpose", &[kr], DType::F32, [1, 4, 16, 8]);
    g.attr("perm", Attr::Ints(vec![0, 1, 3, 2]));
    let s = g.op("MatMul", &[q, kt], DType::F32, [1, 4, 8, 8]);
    let p = g.op("Softmax", &[s], DType::F32, [1, 4, 8, 8]);
    g.attr("axis", Attr::Int(-1));
    let y = g.op("MatMul", &[p, vr], DType::F32, [1, 4, 8, 16]);
    g.mark_output(y);
    let g = g.build().unwrap();
    let options = attention_only().with_attention(AttentionKernel::Eager);
    let (fused, plan) = plan_fused(&g, &options).unwrap();
    verify_fusion(&g, &fused.graph).unwrap();
    verify_plan(&fused.graph, &plan).unwrap();
    let [node] = fused_nodes(&fused.graph, "memplan.Attention")[..] else {
        panic!()
    };
    let ins: Vec<&str> = node
        .inputs
        .iter()
        .map(|i| fused.graph.tensor(i.unwrap()).name.as_str())
        .collect();
    assert_eq!(ins, ["q", "k", "v"]);
    // The 4 query heads' scores: 4 x 8 x 8 f32.
    assert!(plan.workspaces[0].bytes >= 4 * 8 * 8 * 4);
    // No repeated K or V is made: the arena holds Q, K, V and the output, no more.
    assert!(plan.arena_bytes <= 4 * 8 * 16 * 4 * 2 + 2 * 8 * 16 * 4 * 2 + 4 * 8 * 8 * 4 + 4 * 256);
}

/// A bottleneck block: `relu(expand(reduce(h)) + h)`, `h` dying at the `Add`; the fused
/// kernel writes into `h`'s bytes, so the expansion's own output never exists.
#[test]
fn a_product_accumulates_into_its_dying_residual() {
    let mut g = GraphBuilder::new("res");
    let x = g.input("x", DType::F32, [1, 8, 16, 16]);
    let w1 = g.weight("w1", DType::F32, [8, 8, 1, 1]);
    let w2 = g.weight("w2", DType::F32, [2, 8, 1, 1]);
    let w3 = g.weight("w3", DType::F32, [8, 2, 1, 1]);
    let r = g.op("Conv", &[x, w1], DType::F32, [1, 8, 16, 16]);
    let h = g.op("Relu", &[r], DType::F32, [1, 8, 16, 16]);
    let m = g.op("Conv", &[h, w2], DType::F32, [1, 2, 16, 16]);
    let c = g.op("Conv", &[m, w3], DType::F32, [1, 8, 16, 16]);
    let a = g.op("Add", &[c, h], DType::F32, [1, 8, 16, 16]);
    let y = g.op("Relu", &[a], DType::F32, [1, 8, 16, 16]);
    g.mark_output(y);
    let g = g.build().unwrap();
    let options = only(Fusions::NONE.with_conv_add(true));
    let (fused, plan) = plan_fused(&g, &options).unwrap();
    verify_fusion(&g, &fused.graph).unwrap();
    verify_plan(&fused.graph, &plan).unwrap();
    let f = &fused.graph;
    let [node] = fused_nodes(f, "memplan.ConvAdd")[..] else {
        panic!("{:?}", f.nodes())
    };
    let ins: Vec<&str> = node
        .inputs
        .iter()
        .map(|i| f.tensor(i.unwrap()).name.as_str())
        .collect();
    assert_eq!(ins[0], g.tensor(h).name, "the residual is input 0");
    let out = node.outputs[0];
    let buf = plan.buffer(out).unwrap();
    assert_eq!(
        buf.alias.map(|a| a.of()),
        f.find_tensor(&g.tensor(h).name),
        "the sum is written over the residual"
    );
    // Unfused, the expansion holds h, m and c (8 + 2 + 8 KiB); fused, h and m, and the peak
    // is the first convolution's x and r (16 KiB).
    let unfused = memplan_planner::plan_graph(&g, &PlanOptions::default()).unwrap();
    assert_eq!(unfused.arena_bytes, 18 * 1024);
    assert_eq!(plan.arena_bytes, 16 * 1024);
}

/// GELU in the dynamo exporter's spelling, `x · (0.5 · (1 + erf(x / √2)))`, and SiLU.
#[test]
fn written_out_activations_become_one_op() {
    let mut g = GraphBuilder::new("act");
    let x = g.input("x", DType::F32, [4, 64]);
    let c = g.weight("c", DType::F32, [0i64; 0]);
    let d = g.op("Div", &[x, c], DType::F32, [4, 64]);
    let e = g.op("Erf", &[d], DType::F32, [4, 64]);
    let a = g.op("Add", &[e, c], DType::F32, [4, 64]);
    let h = g.op("Mul", &[c, a], DType::F32, [4, 64]);
    let y = g.op("Mul", &[x, h], DType::F32, [4, 64]);
    let s = g.op("Sigmoid", &[y], DType::F32, [4, 64]);
    let z = g.op("Mul", &[y, s], DType::F32, [4, 64]);
    g.mark_output(z);
    let g = g.build().unwrap();
    let options = only(Fusions::NONE.with_gelu(true).with_silu(true));
    let (fused, plan) = plan_fused(&g, &options).unwrap();
    verify_fusion(&g, &fused.graph).unwrap();
    verify_plan(&fused.graph, &plan).unwrap();
    let ops: Vec<&str> = fused.graph.nodes().iter().map(|n| n.op.as_str()).collect();
    assert_eq!(ops, ["Gelu", "Swish"]);
}

/// Layer normalisation written out, `(x − μ) / √(var + ε) · w + b`.
#[test]
fn written_out_layer_norm_becomes_one_op() {
    let mut g = GraphBuilder::new("ln");
    let x = g.input("x", DType::F32, [4, 64]);
    let axes = g.int_constant("axes", &[-1]);
    let eps = g.weight("eps", DType::F32, [0i64; 0]);
    let w = g.weight("w", DType::F32, [64]);
    let b = g.weight("b", DType::F32, [64]);
    let m = g.op("ReduceMean", &[x, axes], DType::F32, [4, 1]);
    let d = g.op("Sub", &[x, m], DType::F32, [4, 64]);
    let sq = g.op("Mul", &[d, d], DType::F32, [4, 64]);
    let v = g.op("ReduceMean", &[sq, axes], DType::F32, [4, 1]);
    let ve = g.op("Add", &[v, eps], DType::F32, [4, 1]);
    let sd = g.op("Sqrt", &[ve], DType::F32, [4, 1]);
    let n = g.op("Div", &[d, sd], DType::F32, [4, 64]);
    let nw = g.op("Mul", &[n, w], DType::F32, [4, 64]);
    let y = g.op("Add", &[nw, b], DType::F32, [4, 64]);
    g.mark_output(y);
    let g = g.build().unwrap();
    let options = only(Fusions::NONE.with_norm(true));
    let (fused, plan) = plan_fused(&g, &options).unwrap();
    verify_fusion(&g, &fused.graph).unwrap();
    verify_plan(&fused.graph, &plan).unwrap();
    let [node] = fused_nodes(&fused.graph, "LayerNormalization")[..] else {
        panic!("{:?}", fused.graph.nodes())
    };
    let ins: Vec<&str> = node
        .inputs
        .iter()
        .map(|i| fused.graph.tensor(i.unwrap()).name.as_str())
        .collect();
    assert_eq!(ins, ["x", "w", "b"]);
}

/// Unsound rewrites of the attention graph, each refused by `verify_fusion` (the
/// planner's matcher never makes them: they are made here by editing a sound one).
#[test]
fn the_verifier_refuses_unsound_fusions() {
    let (g, _) = attention(false);
    let sound = fuse_graph(&g, &attention_only()).unwrap().graph;
    verify_fusion(&g, &sound).unwrap();
    let attn = sound
        .nodes()
        .iter_enumerated()
        .find(|(_, n)| n.op == "memplan.Attention")
        .unwrap()
        .0;
    let edit = |f: &dyn Fn(&mut Graph)| {
        let mut bad = sound.clone();
        f(&mut bad);
        bad
    };
    let t = |g: &Graph, name: &str| g.find_tensor(name).unwrap();
    let mutants: Vec<(&str, Graph)> = vec![
        (
            "the mask dropped",
            edit(&|b| {
                b.node_mut(attn).inputs.truncate(3);
            }),
        ),
        (
            "K and V swapped",
            edit(&|b| {
                b.node_mut(attn).inputs.swap(1, 2);
            }),
        ),
        (
            "a tensor read that the pattern does not",
            edit(&|b| {
                let z = t(b, "z");
                b.node_mut(attn).inputs.push(Some(z));
            }),
        ),
        (
            "the wrong key axis",
            edit(&|b| {
                let n = b.node_mut(attn);
                n.attrs.retain(|(k, _)| k != "kv_axis");
                n.attrs.push(("kv_axis".to_owned(), Attr::Int(3)));
            }),
        ),
        (
            "the wrong value axis",
            edit(&|b| {
                let n = b.node_mut(attn);
                n.attrs.retain(|(k, _)| k != "dv_axis");
                n.attrs.push(("dv_axis".to_owned(), Attr::Int(1)));
            }),
        ),
        (
            "another kind's op",
            edit(&|b| {
                b.node_mut(attn).op = "memplan.ConvAdd".to_owned();
            }),
        ),
        (
            "a node listed that is not in the original",
            edit(&|b| {
                let n = b.node_mut(attn);
                n.attrs.retain(|(k, _)| k != "memplan.fused_nodes");
                n.attrs
                    .push(("memplan.fused_nodes".to_owned(), Attr::Ints(vec![0, 1, 99])));
            }),
        ),
    ];
    for (what, bad) in mutants {
        assert!(verify_fusion(&g, &bad).is_err(), "accepted: {what}");
    }
    // A graph in which the scores are also an output: fusing it would drop them.
    let (g2, _) = attention(true);
    let mut forced = sound.clone();
    forced.name = g2.name.clone();
    assert!(
        verify_fusion(&g2, &forced).is_err(),
        "accepted: the scores dropped"
    );
    // A kept node changed, and a node of another graph.
    let mut changed = g.clone();
    let first = changed.nodes().iter_enumerated().next().unwrap().0;
    changed.node_mut(first).op = "Identity".to_owned();
    let _ = TensorKind::Activation;
    assert!(
        verify_fusion(&g, &changed).is_err(),
        "accepted: a node changed"
    );
}

#[test]
fn fusing_twice_changes_nothing_and_none_is_the_graph() {
    let (g, _) = attention(false);
    let all = only(Fusions::ALL);
    let once = fuse_graph(&g, &all).unwrap().graph;
    let twice = fuse_graph(&once, &all).unwrap().graph;
    assert_eq!(once, twice);
    let none = fuse_graph(&g, &PlanOptions::default()).unwrap().graph;
    assert_eq!(none, g);
    // Deterministic: the same bytes every time.
    assert_eq!(
        fuse_graph(&g, &all).unwrap().graph.to_json(),
        once.to_json()
    );
}

/// `x` plus a `[256, 64]` f32 mask (64 KiB) built from `x`'s shape alone (`Shape`,
/// `ConstantOfShape`), read by the first layer and, with `late`, again by the last: between
/// them a `[256, 256]` product (256 KiB), the peak.
fn mask_graph(late: bool) -> Graph {
    let mut g = GraphBuilder::new("mask");
    let x = g.input("x", DType::F32, [256, 64]);
    let w1 = g.weight("w1", DType::F32, [64, 256]);
    let w2 = g.weight("w2", DType::F32, [256, 64]);
    let shape = g.op("Shape", &[x], DType::I64, [2]);
    let mask = g.op("ConstantOfShape", &[shape], DType::F32, [256, 64]);
    let a = g.op("Add", &[x, mask], DType::F32, [256, 64]);
    let b = g.op("MatMul", &[a, w1], DType::F32, [256, 256]);
    let c = g.op("MatMul", &[b, w2], DType::F32, [256, 64]);
    let d = if late {
        g.op("Add", &[c, mask], DType::F32, [256, 64])
    } else {
        g.op("Relu", &[c], DType::F32, [256, 64])
    };
    g.mark_output(d);
    g.build().unwrap()
}

#[test]
fn a_mask_built_from_shapes_is_made_where_used() {
    let constants = only(Fusions::NONE.with_constants(true));
    // Kept, the mask lives across the product: at `b`, `a` + `b` + the mask, 384 KiB (by
    // hand: 64 + 256 + 64). Made again before the last Add: 320 KiB, and the 16-byte shape
    // kept for that copy.
    let g = mask_graph(true);
    let plain = memplan_planner::plan_graph(&g, &PlanOptions::default()).unwrap();
    assert_eq!(plain.lower_bound_bytes, 384 * 1024);
    let fused = fuse_graph(&g, &constants).unwrap();
    // A ConstantOfShape right before each Add (the 16-byte shape stays shared).
    assert_eq!(fused.remade, 2);
    verify_fusion(&g, &fused.graph).unwrap();
    let (fg, plan) = plan_fused(&g, &constants).unwrap();
    verify_plan(&fg.graph, &plan).unwrap();
    assert_eq!(plan.lower_bound_bytes, 320 * 1024 + 16);
    let copies: Vec<&Node> = fg
        .graph
        .nodes()
        .iter()
        .filter(|n| n.attr(memplan_planner::ATTR_AT_USE).is_some())
        .collect();
    assert_eq!(copies.len(), 2);
    // Read once, the mask is where it is used already: nothing to copy.
    let g = mask_graph(false);
    let fused = fuse_graph(&g, &constants).unwrap();
    assert_eq!(fused.remade, 0);
}

/// Two attention layers over `[2, 4, 64, 16]` Q, K, V (32 KiB each) sharing one additive
/// mask as the dynamo exporter writes BERT's (opsets 18 and 20): from `ids`' shape,
/// `Range(seq)` unsqueezed to `[1, 1, 64]`, `GreaterOrEqual 0`, `Expand` to
/// `[2, 1, 64, 64]` (bool) and `Where(·, 0, -inf)`: a `[2, 1, 64, 64]` f32 mask (32 KiB)
/// made once and read by both layers.
fn shared_mask_graph() -> Graph {
    let mut g = GraphBuilder::new("shared_mask");
    let ids = g.input("ids", DType::I64, [2, 64]);
    let q = g.input("q", DType::F32, [2, 4, 64, 16]);
    let k = g.input("k", DType::F32, [2, 4, 64, 16]);
    let v = g.input("v", DType::F32, [2, 4, 64, 16]);
    let (zero_i, one_i) = (
        g.int_constant("zero_i", &[0]),
        g.int_constant("one_i", &[1]),
    );
    let axes = g.int_constant("axes", &[0, 1]);
    let shape4 = g.int_constant("shape4", &[2, 1, 64, 64]);
    let (zero, neg) = (
        g.weight("zero", DType::F32, [1]),
        g.weight("neg_inf", DType::F32, [1]),
    );
    let scale = g.weight("scale", DType::F32, [1]);
    let shape = g.op("Shape", &[ids], DType::I64, [2]);
    let seq = g.op("Gather", &[shape, one_i], DType::I64, [1]);
    let range = g.op("Range", &[zero_i, seq, one_i], DType::I64, [64]);
    let pos = g.op("Unsqueeze", &[range, axes], DType::I64, [1, 1, 64]);
    let ge = g.named_op(
        "ge",
        "GreaterOrEqual",
        &[pos, zero_i],
        DType::Bool,
        [1, 1, 64],
    );
    let wide = g.op("Expand", &[ge, shape4], DType::Bool, [2, 1, 64, 64]);
    let mask = g.named_op(
        "mask",
        "Where",
        &[wide, zero, neg],
        DType::F32,
        [2, 1, 64, 64],
    );
    let o1 = masked_layer(&mut g, 1, [q, k, v], Some(scale), mask);
    let o2 = masked_layer(&mut g, 2, [o1, o1, o1], Some(scale), mask);
    g.mark_output(o2);
    g.build().unwrap()
}

/// One layer of `softmax(q·kᵀ (· scale) + mask) · v` over `[2, 4, 64, 16]` operands, its
/// tensors named after layer `l`.
fn masked_layer(
    g: &mut GraphBuilder,
    l: usize,
    [q, k, v]: [TensorId; 3],
    scale: Option<TensorId>,
    mask: TensorId,
) -> TensorId {
    let name = |what: &str| format!("{what}{l}");
    let kt = g.named_op(&name("kt"), "Transpose", &[k], DType::F32, [2, 4, 16, 64]);
    g.attr("perm", Attr::Ints(vec![0, 1, 3, 2]));
    let mut s = g.named_op(&name("s"), "MatMul", &[q, kt], DType::F32, [2, 4, 64, 64]);
    if let Some(scale) = scale {
        s = g.named_op(
            &name("scaled"),
            "Mul",
            &[s, scale],
            DType::F32,
            [2, 4, 64, 64],
        );
    }
    let s2 = g.named_op(
        &name("masked"),
        "Add",
        &[s, mask],
        DType::F32,
        [2, 4, 64, 64],
    );
    let p = g.named_op(&name("p"), "Softmax", &[s2], DType::F32, [2, 4, 64, 64]);
    g.attr("axis", Attr::Int(-1));
    g.named_op(&name("o"), "MatMul", &[p, v], DType::F32, [2, 4, 64, 16])
}

/// The kernel reads a mask's source (BERT's dynamo exports missed torch.compile by 1.17x
/// for its `[batch, 1, seq, seq]` mask, alive across every layer's peak).
#[test]
fn a_shared_mask_is_read_from_its_source() {
    let g = shared_mask_graph();
    let options = attention_only().with_attention(AttentionKernel::Flash);
    let (fused, plan) = plan_fused(&g, &options).unwrap();
    verify_fusion(&g, &fused.graph).unwrap();
    verify_plan(&fused.graph, &plan).unwrap();
    let f = &fused.graph;
    let kernels = fused_nodes(f, "memplan.Attention");
    assert_eq!(kernels.len(), 2);
    for node in &kernels {
        let mask = node.inputs.get(3).copied().flatten().unwrap();
        assert_eq!(f.tensor(mask).name, "ge");
    }
    // The mask and its bool expansion are made no more.
    assert!(fused_nodes(f, "Where").is_empty() && fused_nodes(f, "Expand").is_empty());
    // By hand: Q, K, V and the first output live together (4 x 32 KiB), never the 32 KiB
    // mask; besides them the 1 KiB ids, a 4 KiB flash scratch and small shapes.
    let kib = 1024;
    assert!(plan.lower_bound_bytes >= 128 * kib);
    assert!(
        plan.lower_bound_bytes < 160 * kib,
        "{}",
        plan.lower_bound_bytes
    );
    // The verifier refuses a kernel reading something the mask is not made from, or no mask.
    let attn = first_of(f, "memplan.Attention");
    for (what, other) in [("ids", f.find_tensor("ids")), ("no mask", None)] {
        let mut bad = f.clone();
        bad.node_mut(attn).inputs[3] = other;
        assert!(verify_fusion(&g, &bad).is_err(), "accepted: {what}");
    }
}

/// Caffe2's bottleneck (the corpus's `light_resnet50`): `Conv` then an inference
/// `BatchNormalization`, the residual added by a two-input `Sum`. The kernel folds the
/// normalisation into its weights and accumulates into the residual; a training
/// normalisation (running statistics out) is left alone.
#[test]
fn a_normalised_product_summed_into_its_residual_is_one_kernel() {
    let build = |training: bool| {
        let mut g = GraphBuilder::new("caffe2_res");
        let x = g.input("x", DType::F32, [1, 2, 16, 16]);
        let w1 = g.weight("w1", DType::F32, [8, 2, 1, 1]);
        let w2 = g.weight("w2", DType::F32, [2, 8, 1, 1]);
        let w3 = g.weight("w3", DType::F32, [8, 2, 1, 1]);
        let bn: Vec<TensorId> = ["s", "b", "mean", "var"]
            .iter()
            .map(|n| g.weight(*n, DType::F32, [8]))
            .collect();
        let r = g.op("Conv", &[x, w1], DType::F32, [1, 8, 16, 16]);
        let h = g.op("Relu", &[r], DType::F32, [1, 8, 16, 16]);
        let m = g.op("Conv", &[h, w2], DType::F32, [1, 2, 16, 16]);
        let c = g.op("Conv", &[m, w3], DType::F32, [1, 8, 16, 16]);
        let mut ins = vec![c];
        ins.extend(&bn);
        let n = g.op("BatchNormalization", &ins, DType::F32, [1, 8, 16, 16]);
        let a = g.op("Sum", &[n, h], DType::F32, [1, 8, 16, 16]);
        let y = g.op("Relu", &[a], DType::F32, [1, 8, 16, 16]);
        g.mark_output(y);
        let mut g = g.build().unwrap();
        if training {
            // The running mean out, as a training normalisation makes it.
            let mut stat = g.tensor(bn[2]).clone();
            stat.name = "mean_out".to_owned();
            stat.kind = TensorKind::Output;
            let stat = g.add_tensor(stat);
            let norm = g.producers()[n].unwrap();
            g.node_mut(norm).outputs.push(stat);
        }
        (g, h, m, w3, bn)
    };
    let options = only(Fusions::NONE.with_conv_add(true));
    let (g, h, m, w3, bn) = build(false);
    let (fused, plan) = plan_fused(&g, &options).unwrap();
    verify_fusion(&g, &fused.graph).unwrap();
    verify_plan(&fused.graph, &plan).unwrap();
    let f = &fused.graph;
    let [node] = fused_nodes(f, "memplan.ConvAdd")[..] else {
        panic!("{:?}", f.nodes())
    };
    let name = |i: Option<TensorId>| i.map(|t| f.tensor(t).name.clone());
    let ins: Vec<Option<String>> = node.inputs.iter().map(|&i| name(i)).collect();
    let want = |t: TensorId| Some(g.tensor(t).name.clone());
    assert_eq!(ins[0], want(h), "the residual is input 0");
    assert_eq!(
        ins[4..],
        bn.iter().map(|&t| want(t)).collect::<Vec<_>>()[..]
    );
    assert_eq!(ins[1..3], [want(m), want(w3)]);
    assert_eq!(node.attr("norm_input"), Some(&Attr::Int(4)));
    assert!(fused_nodes(f, "BatchNormalization").is_empty() && fused_nodes(f, "Sum").is_empty());
    // Unfused, the expansion holds h, m and its product (8 + 2 + 8 KiB; the normalisation
    // and the sum write over what they read); fused, h and m (the sum written over h), as
    // much as x and r at the first convolution: 10 KiB.
    let unfused = memplan_planner::plan_graph(&g, &PlanOptions::default()).unwrap();
    assert_eq!(unfused.arena_bytes, 18 * 1024);
    assert_eq!(plan.arena_bytes, 10 * 1024);
    // The verifier refuses the kernel without the normalisation's parameters.
    let k = f
        .nodes()
        .iter_enumerated()
        .find(|(_, n)| n.op == "memplan.ConvAdd")
        .unwrap()
        .0;
    let mut bad = f.clone();
    bad.node_mut(k).inputs.truncate(4);
    assert!(
        verify_fusion(&g, &bad).is_err(),
        "accepted: no normalisation"
    );
    let (g, ..) = build(true);
    g.validate().unwrap();
    let fused = fuse_graph(&g, &options).unwrap();
    assert!(fused.fused.is_empty(), "{:?}", fused.fused);
}

/// ONNX Runtime's transformer optimizer writes a bias and GELU as one node,
/// `com.microsoft.BiasGelu(h, b)` (and `FastGelu(h, b)`): declared as a bias-activation
/// kernel it writes over `h`, as the written-out `Add` and `Gelu` would.
#[test]
fn a_one_node_bias_gelu_writes_over_its_input() {
    let build = |op: &str, with_bias: bool| {
        let mut g = GraphBuilder::new("ffn");
        let x = g.input("x", DType::F32, [4, 64]);
        let w1 = g.weight("w1", DType::F32, [64, 256]);
        let b = g.weight("b", DType::F32, [256]);
        let w2 = g.weight("w2", DType::F32, [256, 64]);
        let h = g.op("MatMul", &[x, w1], DType::F32, [4, 256]);
        let ins = if with_bias { vec![h, b] } else { vec![h] };
        let a = g.op(op, &ins, DType::F32, [4, 256]);
        let y = g.op("MatMul", &[a, w2], DType::F32, [4, 64]);
        g.mark_output(y);
        (g.build().unwrap(), h, b)
    };
    let options = only(Fusions::NONE.with_bias_act(true));
    for (op, act) in [
        ("com.microsoft.BiasGelu", "com.microsoft.Gelu"),
        ("com.microsoft.FastGelu", "com.microsoft.FastGelu"),
    ] {
        let (g, h, b) = build(op, true);
        let (fused, plan) = plan_fused(&g, &options).unwrap();
        verify_fusion(&g, &fused.graph).unwrap();
        verify_plan(&fused.graph, &plan).unwrap();
        let f = &fused.graph;
        let [node] = fused_nodes(f, "memplan.BiasAct")[..] else {
            panic!("{op}: {:?}", f.nodes())
        };
        assert_eq!(node.attr("activation"), Some(&Attr::Str(act.to_owned())));
        let ins: Vec<&str> = node
            .inputs
            .iter()
            .map(|i| f.tensor(i.unwrap()).name.as_str())
            .collect();
        assert_eq!(ins, [g.tensor(h).name.as_str(), g.tensor(b).name.as_str()]);
        // Unfused, the activation step holds h and its result (4 + 4 KiB); fused, the result
        // is written over h, and the peak is x and h, or the result and y (4 + 1 KiB).
        let unfused = memplan_planner::plan_graph(&g, &PlanOptions::default()).unwrap();
        assert_eq!(unfused.arena_bytes, 8 * 1024, "{op}");
        assert_eq!(plan.arena_bytes, 5 * 1024, "{op}");
        // The verifier refuses another activation, and the operands swapped.
        let k = f
            .nodes()
            .iter_enumerated()
            .find(|(_, n)| n.op == "memplan.BiasAct")
            .unwrap()
            .0;
        let mut bad = f.clone();
        for (name, value) in &mut bad.node_mut(k).attrs {
            if name == "activation" {
                *value = Attr::Str("Relu".to_owned());
            }
        }
        assert!(verify_fusion(&g, &bad).is_err(), "{op}: accepted Relu");
        let mut bad = f.clone();
        bad.node_mut(k).inputs.reverse();
        assert!(verify_fusion(&g, &bad).is_err(), "{op}: accepted swapped");
    }
    // FastGelu without its bias is an activation alone: nothing to fuse.
    let (g, ..) = build("com.microsoft.FastGelu", false);
    assert!(fuse_graph(&g, &options).unwrap().fused.is_empty());
}

/// A post-norm block as ONNX Runtime's optimizer writes it: `h = x·w`, then
/// `SkipLayerNormalization(h, x, gamma, beta, bias)` (`outputs` of them: 1, or with the
/// statistics and the sum), then `z = y·w2`; every tensor named.
fn skip_norm_graph(op: &str, outputs: usize) -> Graph {
    let mut g = GraphBuilder::new("post_norm");
    let x = g.input("x", DType::F32, [4, 64]);
    let w = g.weight("w", DType::F32, [64, 64]);
    let w2 = g.weight("w2", DType::F32, [64, 64]);
    let gamma = g.weight("gamma", DType::F32, [64]);
    let beta = g.weight("beta", DType::F32, [64]);
    let bias = g.weight("bias", DType::F32, [64]);
    let h = g.named_op("h", "MatMul", &[x, w], DType::F32, [4, 64]);
    let y = g.tensor("y", DType::F32, [4, 64], TensorKind::Activation);
    let mut outs = vec![y];
    if outputs > 1 {
        outs.push(g.tensor("mean", DType::F32, [4, 1], TensorKind::Activation));
        outs.push(g.tensor("inv_std", DType::F32, [4, 1], TensorKind::Activation));
        outs.push(g.tensor("sum", DType::F32, [4, 64], TensorKind::Activation));
    }
    g.node(
        "skip_ln",
        op,
        &[Some(h), Some(x), Some(gamma), Some(beta), Some(bias)],
        &outs,
    );
    g.attr("epsilon", Attr::Float(1e-12));
    let z = g.named_op("z", "MatMul", &[y, w2], DType::F32, [4, 64]);
    g.mark_output(z);
    if outputs > 1 {
        g.mark_output(outs[3]);
    }
    g.build().unwrap()
}

#[test]
fn a_one_node_skip_layer_norm_writes_over_its_input() {
    let options = only(Fusions::NONE.with_norm(true));
    for op in [
        "com.microsoft.SkipLayerNormalization",
        "com.microsoft.SkipSimplifiedLayerNormalization",
    ] {
        let g = skip_norm_graph(op, 1);
        let (fused, plan) = plan_fused(&g, &options).unwrap();
        verify_fusion(&g, &fused.graph).unwrap();
        verify_plan(&fused.graph, &plan).unwrap();
        let f = &fused.graph;
        let [node] = fused_nodes(f, "memplan.SkipNorm")[..] else {
            panic!("{op}: {:?}", f.nodes())
        };
        assert_eq!(node.attr("normalization"), Some(&Attr::Str(op.to_owned())));
        assert_eq!(node.attr("epsilon"), Some(&Attr::Float(1e-12)));
        let ins: Vec<&str> = node
            .inputs
            .iter()
            .map(|i| f.tensor(i.unwrap()).name.as_str())
            .collect();
        assert_eq!(ins, ["h", "x", "gamma", "beta", "bias"], "{op}");
        // By hand, f32 [4, 64] is 1 KiB. Unfused, the normalisation step holds x, h and y
        // (3 KiB: the op is opaque); fused, y is written over h: x and h, then y and z.
        let unfused = memplan_planner::plan_graph(&g, &PlanOptions::default()).unwrap();
        assert_eq!(unfused.arena_bytes, 3 * 1024, "{op}");
        assert_eq!(plan.arena_bytes, 2 * 1024, "{op}");
        // The verifier refuses the operands swapped, another normalisation named, and the
        // epsilon dropped.
        let k = f
            .nodes()
            .iter_enumerated()
            .find(|(_, n)| n.op == "memplan.SkipNorm")
            .unwrap()
            .0;
        let mut bad = f.clone();
        bad.node_mut(k).inputs.swap(0, 1);
        assert!(verify_fusion(&g, &bad).is_err(), "{op}: accepted swapped");
        let mut bad = f.clone();
        for (name, value) in &mut bad.node_mut(k).attrs {
            if name == "normalization" {
                *value = Attr::Str("LayerNormalization".to_owned());
            }
        }
        assert!(verify_fusion(&g, &bad).is_err(), "{op}: accepted another");
        let mut bad = f.clone();
        bad.node_mut(k).attrs.retain(|(name, _)| name != "epsilon");
        assert!(
            verify_fusion(&g, &bad).is_err(),
            "{op}: accepted no epsilon"
        );
    }
    // One that also makes its statistics and the sum (a pre-norm block keeps the sum as the
    // residual) is no one-output kernel: left as it is.
    let g = skip_norm_graph("com.microsoft.SkipLayerNormalization", 4);
    assert!(fuse_graph(&g, &options).unwrap().fused.is_empty());
}

/// T5's attention bias: `m = Where(c, bias, -inf)`, `[2, 4, 64, 64]` f32 made once from a
/// `[1, 4, 64, 64]` relative position bias and a `[2, 1, 1, 64]` padding condition (expanded),
/// read by two layers' scores, written out or (`onnx_op`) as opset 23's `Attention` nodes;
/// every tensor named.
fn position_bias_graph(onnx_op: bool) -> Graph {
    let mut g = GraphBuilder::new("position_bias");
    let q = g.input("q", DType::F32, [2, 4, 64, 16]);
    let k = g.input("k", DType::F32, [2, 4, 64, 16]);
    let v = g.input("v", DType::F32, [2, 4, 64, 16]);
    let bias = g.input("bias", DType::F32, [1, 4, 64, 64]);
    let cond = g.input("cond", DType::Bool, [2, 1, 1, 64]);
    let shape = g.int_constant("shape", &[2, 1, 64, 64]);
    let neg = g.weight("neg_inf", DType::F32, [1]);
    let wide = g.named_op(
        "wide",
        "Expand",
        &[cond, shape],
        DType::Bool,
        [2, 1, 64, 64],
    );
    let mask = g.named_op(
        "mask",
        "Where",
        &[wide, bias, neg],
        DType::F32,
        [2, 4, 64, 64],
    );
    let o2 = if onnx_op {
        // Opset 23's one-node spelling.
        let o1 = g.named_op(
            "o1",
            "Attention",
            &[q, k, v, mask],
            DType::F32,
            [2, 4, 64, 16],
        );
        g.attr("scale", Attr::Float(1.0));
        let o2 = g.named_op(
            "o2",
            "Attention",
            &[o1, o1, o1, mask],
            DType::F32,
            [2, 4, 64, 16],
        );
        g.attr("scale", Attr::Float(1.0));
        o2
    } else {
        let o1 = masked_layer(&mut g, 1, [q, k, v], None, mask);
        masked_layer(&mut g, 2, [o1, o1, o1], None, mask)
    };
    g.mark_output(o2);
    g.build().unwrap()
}

/// The kernel reads a mask made by `Where` from a bias and a condition as its additive and
/// boolean masks (T5's exports were above PyTorch eager, 24.51 against 23.31 MiB, holding the
/// `[batch, heads, seq, seq]` sum across every layer; at opset 23 the `Attention` node read it
/// as given).
#[test]
fn a_mask_made_from_a_bias_and_a_condition_is_read_as_both() {
    for onnx_op in [false, true] {
        mask_read_as_both(&position_bias_graph(onnx_op));
    }
}

fn mask_read_as_both(g: &Graph) {
    let options = attention_only().with_attention(AttentionKernel::Flash);
    let (fused, plan) = plan_fused(g, &options).unwrap();
    verify_fusion(g, &fused.graph).unwrap();
    verify_plan(&fused.graph, &plan).unwrap();
    let f = &fused.graph;
    let kernels = fused_nodes(f, "memplan.Attention");
    assert_eq!(kernels.len(), 2);
    for node in &kernels {
        let name = |i: usize| node.inputs[i].map(|t| f.tensor(t).name.as_str());
        assert_eq!((name(3), name(4)), (Some("bias"), Some("cond")));
        assert_eq!(node.attr("mask_keep"), Some(&Attr::Int(1)));
    }
    assert!(fused_nodes(f, "Where").is_empty() && fused_nodes(f, "Expand").is_empty());
    // By hand: at the first kernel Q, K, V (3 x 32 KiB), the bias (64 KiB) and the output
    // (32 KiB), 192 KiB, besides the 128-byte condition and a 4 KiB flash scratch. With the
    // 128 KiB mask made, its step alone holds Q, K, V, the bias, the 8 KiB expansion and the
    // mask: 296 KiB.
    let kib = 1024;
    assert!(plan.lower_bound_bytes >= 192 * kib);
    assert!(
        plan.lower_bound_bytes < 224 * kib,
        "{}",
        plan.lower_bound_bytes
    );
    // The verifier refuses the two masks swapped, the condition's sense flipped, and the
    // condition left out.
    let attn = first_of(f, "memplan.Attention");
    let mut bad = f.clone();
    bad.node_mut(attn).inputs.swap(3, 4);
    assert!(verify_fusion(g, &bad).is_err(), "accepted swapped");
    let mut bad = f.clone();
    for (name, value) in &mut bad.node_mut(attn).attrs {
        if name == "mask_keep" {
            *value = Attr::Int(0);
        }
    }
    assert!(
        verify_fusion(g, &bad).is_err(),
        "accepted the sense flipped"
    );
    let mut bad = f.clone();
    bad.node_mut(attn).inputs.truncate(4);
    assert!(verify_fusion(g, &bad).is_err(), "accepted no condition");
}

/// An error found in the fused graph carries that graph: rendered alone or with the
/// caller's graph, it names the fused graph's tensor, not the caller's tensor of the same id
/// (the fused graph has no Sigmoid output, so every later id is one less).
#[test]
fn an_error_in_the_fused_graph_names_its_own_tensor() {
    let mut g = GraphBuilder::new("silu_then_text");
    let x = g.input("x", DType::F32, [4, 64]);
    let s = g.op("Sigmoid", &[x], DType::F32, [4, 64]);
    let y = g.op("Mul", &[x, s], DType::F32, [4, 64]);
    let text = g.named_op("text", "Cast", &[y], DType::String, [4, 64]);
    g.mark_output(text);
    let g = g.build().unwrap();
    let options = only(Fusions::NONE.with_silu(true));
    let planned = memplan_planner::plan_graph(&g, &options).unwrap_err();
    let fused = plan_fused(&g, &options).unwrap_err();
    for err in [planned, fused] {
        let PlanError::InGraph { graph, error } = &err else {
            panic!("{err:?}")
        };
        let PlanError::Size { tensor, .. } = error.as_ref() else {
            panic!("{err:?}")
        };
        assert_eq!(graph.graph().tensor(*tensor).name, "text");
        assert_ne!(*tensor, text, "the ids must differ for this test to tell");
        assert!(err.entities().is_empty(), "none of the caller's graph");
        for shown in [err.to_string(), err.with_graph(&g).to_string()] {
            assert!(
                shown.starts_with("tensor `text` has no byte size"),
                "{shown}"
            );
        }
    }
}

/// Hugging Face's sdpa mask with padding (transformers 5's masking utilities, every dynamo
/// export and TorchScript): `Where(And(causal [1, 1, q, kv], padding [batch, 1, 1, kv]), 0,
/// -inf)`, `[batch, 1, q, kv]`, made once and read by every layer; with `onnx_op`, opset 23's
/// one-node `Attention` reading the boolean join itself.
fn joined_mask_graph(onnx_op: bool) -> Graph {
    let mut g = GraphBuilder::new("joined_mask");
    let q = g.input("q", DType::F32, [2, 4, 64, 16]);
    let k = g.input("k", DType::F32, [2, 4, 64, 16]);
    let v = g.input("v", DType::F32, [2, 4, 64, 16]);
    let causal = g.input("causal", DType::Bool, [1, 1, 64, 64]);
    let pad = g.input("pad", DType::Bool, [2, 1, 1, 64]);
    let zero = g.weight("zero", DType::F32, [1]);
    let neg = g.weight("neg_inf", DType::F32, [1]);
    let joined = g.named_op("joined", "And", &[causal, pad], DType::Bool, [2, 1, 64, 64]);
    let o2 = if onnx_op {
        let o1 = g.named_op(
            "o1",
            "Attention",
            &[q, k, v, joined],
            DType::F32,
            [2, 4, 64, 16],
        );
        g.named_op(
            "o2",
            "Attention",
            &[o1, o1, o1, joined],
            DType::F32,
            [2, 4, 64, 16],
        )
    } else {
        let mask = g.named_op(
            "mask",
            "Where",
            &[joined, zero, neg],
            DType::F32,
            [2, 1, 64, 64],
        );
        let o1 = masked_layer(&mut g, 1, [q, k, v], None, mask);
        masked_layer(&mut g, 2, [o1, o1, o1], None, mask)
    };
    g.mark_output(o2);
    g.build().unwrap()
}

/// The graph fused with flash attention kernels only, its plan, both verified; two kernels.
fn two_flash_kernels(g: &Graph) -> (Graph, memplan_planner::Plan) {
    let options = attention_only().with_attention(AttentionKernel::Flash);
    let (fused, plan) = plan_fused(g, &options).unwrap();
    verify_fusion(g, &fused.graph).unwrap();
    verify_plan(&fused.graph, &plan).unwrap();
    assert_eq!(fused_nodes(&fused.graph, "memplan.Attention").len(), 2);
    (fused.graph, plan)
}

/// The name of input `i` of `node`, if it has one.
fn input_name<'a>(f: &'a Graph, node: &Node, i: usize) -> Option<&'a str> {
    let t = node.inputs.get(i).copied().flatten()?;
    Some(f.tensor(t).name.as_str())
}

/// `f` with node `n`'s `mask_join` set to `join`.
fn with_join(f: &Graph, n: memplan_ir::NodeId, join: &str) -> Graph {
    let mut bad = f.clone();
    for (name, value) in &mut bad.node_mut(n).attrs {
        if name == "mask_join" {
            *value = Attr::Str(join.to_owned());
        }
    }
    bad
}

/// The kernel reads both masks a padded sdpa mask joins (RoBERTa's and Llama's sdpa exports
/// held the joined `[batch, 1, seq, seq]` mask across every layer's peak: 0.5 MiB of 5.56).
#[test]
fn a_mask_joined_from_two_smaller_masks_is_read_as_both() {
    for onnx_op in [false, true] {
        let g = joined_mask_graph(onnx_op);
        let (f, plan) = two_flash_kernels(&g);
        let f = &f;
        for node in &fused_nodes(f, "memplan.Attention") {
            let name = |i: usize| input_name(f, node, i);
            // The float mask goes in the additive slot, the boolean one in the kept-where-true
            // slot; input 5 is the other side of the join.
            let slot = if onnx_op {
                (None, Some("causal"))
            } else {
                (Some("causal"), None)
            };
            assert_eq!((name(3), name(4), name(5)), (slot.0, slot.1, Some("pad")));
            assert_eq!(node.attr("mask_join"), Some(&Attr::Str("And".to_owned())));
            let keep = onnx_op.then_some(&Attr::Int(1));
            assert_eq!(node.attr("mask_keep"), keep);
        }
        assert!(fused_nodes(f, "And").is_empty() && fused_nodes(f, "Where").is_empty());
        // By hand: at the first kernel Q, K, V (3 x 32 KiB), its output (32 KiB), the 4 KiB
        // flash scratch (2 x 4 x 64 rows of two f32) and the two masks (4 KiB + 128 bytes):
        // 136 KiB and a bit. With the joined 8 KiB mask made, 140 KiB.
        let kib = 1024;
        assert!(plan.lower_bound_bytes >= 136 * kib);
        assert!(
            plan.lower_bound_bytes < 140 * kib,
            "{}",
            plan.lower_bound_bytes
        );
        // The verifier refuses the join changed, the join's name dropped, the second mask
        // left out, and another tensor read in its place.
        let attn = first_of(f, "memplan.Attention");
        let bad = with_join(f, attn, "Or");
        assert!(verify_fusion(&g, &bad).is_err(), "accepted Or");
        let mut bad = f.clone();
        bad.node_mut(attn)
            .attrs
            .retain(|(name, _)| name != "mask_join");
        assert!(verify_fusion(&g, &bad).is_err(), "accepted no join");
        let mut bad = f.clone();
        bad.node_mut(attn).inputs.truncate(5);
        assert!(verify_fusion(&g, &bad).is_err(), "accepted one mask");
        let mut bad = f.clone();
        let q = bad.node(attn).inputs[0];
        bad.node_mut(attn).inputs[5] = q;
        assert!(verify_fusion(&g, &bad).is_err(), "accepted Q as a mask");
    }
}

/// Swin's exports add the relative position bias `[1, heads, n, n]` and the shifted-window
/// mask `[windows, 1, n, n]` into a scores-sized bias before the softmax (the exporter moves
/// the scores' own `Add` after theirs); the kernel reads both and adds them per score.
#[test]
fn a_bias_summed_from_two_smaller_biases_is_read_as_both() {
    let mut g = GraphBuilder::new("window_bias");
    let q = g.input("q", DType::F32, [8, 4, 16, 16]);
    let k = g.input("k", DType::F32, [8, 4, 16, 16]);
    let v = g.input("v", DType::F32, [8, 4, 16, 16]);
    let bias = g.input("bias", DType::F32, [1, 4, 16, 16]);
    let window = g.input("window", DType::F32, [8, 1, 16, 16]);
    let summed = g.named_op("summed", "Add", &[bias, window], DType::F32, [8, 4, 16, 16]);
    let mut o = q;
    for l in 1..=2 {
        let name = |what: &str| format!("{what}{l}");
        let (q, k, v) = if l == 1 { (q, k, v) } else { (o, o, o) };
        let kt = g.named_op(&name("kt"), "Transpose", &[k], DType::F32, [8, 4, 16, 16]);
        g.attr("perm", Attr::Ints(vec![0, 1, 3, 2]));
        let s = g.named_op(&name("s"), "MatMul", &[q, kt], DType::F32, [8, 4, 16, 16]);
        let s2 = g.named_op(
            &name("biased"),
            "Add",
            &[s, summed],
            DType::F32,
            [8, 4, 16, 16],
        );
        let p = g.named_op(&name("p"), "Softmax", &[s2], DType::F32, [8, 4, 16, 16]);
        g.attr("axis", Attr::Int(-1));
        o = g.named_op(&name("o"), "MatMul", &[p, v], DType::F32, [8, 4, 16, 16]);
    }
    g.mark_output(o);
    let g = g.build().unwrap();
    let (f, plan) = two_flash_kernels(&g);
    let f = &f;
    for node in &fused_nodes(f, "memplan.Attention") {
        let name = |i: usize| input_name(f, node, i);
        assert_eq!(
            (name(3), name(4), name(5)),
            (Some("bias"), None, Some("window"))
        );
        assert_eq!(node.attr("mask_join"), Some(&Attr::Str("Add".to_owned())));
    }
    assert_eq!(fused_nodes(f, "Add").len(), 0);
    // By hand: at the first kernel Q, K, V (3 x 32 KiB), the two biases (4 + 8 KiB), its
    // output (32 KiB) and the 4 KiB flash scratch (8 x 4 x 16 rows of two f32): 144 KiB.
    // With the 32 KiB sum made instead of the biases, 164 KiB.
    assert_eq!(plan.lower_bound_bytes, 144 * 1024);
    // The verifier refuses another join and the window mask left out.
    let attn = first_of(f, "memplan.Attention");
    let bad = with_join(f, attn, "And");
    assert!(verify_fusion(&g, &bad).is_err(), "accepted And");
    let mut bad = f.clone();
    bad.node_mut(attn).inputs.truncate(5);
    assert!(verify_fusion(&g, &bad).is_err(), "accepted one bias");
}

/// ConvNeXt's block ends `r + transpose(γ · (h·W + b))` (the channels-last product, its bias,
/// the layer scale, back to channels first): in inference one kernel accumulates into the
/// residual, folding γ into its weights and writing with strides (`scale_input`, `out_perm`).
#[test]
fn a_scaled_transposed_product_accumulates_into_its_residual() {
    let mut g = GraphBuilder::new("convnext_block");
    // The residual and the intermediate made by products of small inputs (graph inputs are
    // never written over).
    let a = g.input("a", DType::F32, [2, 16, 8, 1]);
    let a2 = g.input("a2", DType::F32, [2, 8, 8, 1]);
    let wr = g.weight("wr", DType::F32, [1, 8]);
    let wh = g.weight("wh", DType::F32, [1, 64]);
    let r = g.named_op("r", "MatMul", &[a, wr], DType::F32, [2, 16, 8, 8]);
    let h = g.named_op("h", "MatMul", &[a2, wh], DType::F32, [2, 8, 8, 64]);
    let w = g.weight("w", DType::F32, [64, 16]);
    let b = g.weight("b", DType::F32, [16]);
    let gamma = g.weight("gamma", DType::F32, [16]);
    let p = g.named_op("p", "MatMul", &[h, w], DType::F32, [2, 8, 8, 16]);
    let pb = g.named_op("pb", "Add", &[p, b], DType::F32, [2, 8, 8, 16]);
    let ps = g.named_op("ps", "Mul", &[gamma, pb], DType::F32, [2, 8, 8, 16]);
    let pt = g.named_op("pt", "Transpose", &[ps], DType::F32, [2, 16, 8, 8]);
    g.attr("perm", Attr::Ints(vec![0, 3, 1, 2]));
    let y = g.named_op("y", "Add", &[r, pt], DType::F32, [2, 16, 8, 8]);
    g.mark_output(y);
    let g = g.build().unwrap();
    let options = only(Fusions::NONE.with_conv_add(true));
    let (fused, plan) = plan_fused(&g, &options).unwrap();
    verify_fusion(&g, &fused.graph).unwrap();
    verify_plan(&fused.graph, &plan).unwrap();
    let f = &fused.graph;
    let [node] = fused_nodes(f, "memplan.MatMulAdd")[..] else {
        panic!("{:?}", f.nodes())
    };
    let names: Vec<Option<&str>> = (0..node.inputs.len())
        .map(|i| input_name(f, node, i))
        .collect();
    assert_eq!(
        names,
        [Some("r"), Some("h"), Some("w"), Some("b"), Some("gamma")]
    );
    assert_eq!(node.attr("bias_input"), Some(&Attr::Int(3)));
    assert_eq!(node.attr("scale_input"), Some(&Attr::Int(4)));
    assert_eq!(node.attr("out_perm"), Some(&Attr::Ints(vec![0, 3, 1, 2])));
    assert_eq!(f.nodes().len(), 3);
    // By hand: unfused, the product's step holds r (8 KiB), h (32 KiB) and the product
    // (8 KiB): 48 KiB. Fused, r and h, the output written over r; h's step (r, a2, h) is
    // then the peak: 40.5 KiB.
    let unfused = memplan_planner::plan_graph(&g, &PlanOptions::default()).unwrap();
    assert_eq!(unfused.lower_bound_bytes, 48 * 1024);
    assert_eq!(plan.lower_bound_bytes, 40 * 1024 + 512);
    // The verifier refuses the transpose or the scale left unsaid, another permutation, and
    // the scale read from the bias.
    let with = |name: &str, value: Option<Attr>| {
        let mut bad = f.clone();
        let id = first_of(&bad, "memplan.MatMulAdd");
        let attrs = &mut bad.node_mut(id).attrs;
        attrs.retain(|(n, _)| n != name);
        if let Some(v) = value {
            attrs.push((name.to_owned(), v));
        }
        bad
    };
    for (name, value) in [
        ("out_perm", None),
        ("scale_input", None),
        ("out_perm", Some(Attr::Ints(vec![0, 2, 3, 1]))),
        ("scale_input", Some(Attr::Int(3))),
    ] {
        let bad = with(name, value.clone());
        assert!(
            verify_fusion(&g, &bad).is_err(),
            "accepted {name} {value:?}"
        );
    }
}
