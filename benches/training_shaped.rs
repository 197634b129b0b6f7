//! Training-shaped graphs for the ordering benchmarks: a forward graph, a backward graph
//! mirrored from it, joined by the planner's two-graph training API.
//!
//! The backward graph visits the forward nodes in reverse. A node with a gradient flowing
//! into one of its outputs gets an opaque `Gradient` node reading those output gradients
//! and the node's forward inputs (saved activations, graph inputs and weights, read by name
//! as the training API expects), and writing a gradient shaped like each input. A tensor
//! read by several forward nodes sums its partial gradients (`Sum`). Each weight's gradient
//! feeds an SGD update (`Sub`) whose result is a graph output, so gradients die as soon as
//! the optimizer has used them. The seed gradient of each forward output is a backward
//! input. The shapes are the forward's, so the joint graph is as large as a real step.
//!
//! [`transformer`] builds a forward encoder of any depth (ten nodes a layer), for joint
//! graphs of tens of thousands of nodes.

use std::collections::BTreeMap;

use memplan_ir::{DType, Graph, GraphBuilder, TensorId, TensorKind, ValidationErrors};

/// The backward graph of `forward` (see the module docs).
pub fn backward_of(forward: &Graph) -> Result<Graph, ValidationErrors> {
    let mut b = GraphBuilder::new(format!("{}_backward", forward.name));
    // Forward tensors read by the backward, by forward id.
    let mut read: BTreeMap<TensorId, TensorId> = BTreeMap::new();
    // Gradient accumulated so far for a forward tensor.
    let mut grad: BTreeMap<TensorId, TensorId> = BTreeMap::new();
    let mut fresh = 0usize;
    let tensors = forward.tensors();
    let mut saved = |b: &mut GraphBuilder, t: TensorId| -> TensorId {
        *read.entry(t).or_insert_with(|| {
            let x = &tensors[t];
            let kind = if x.kind == TensorKind::Weight {
                TensorKind::Weight
            } else {
                TensorKind::Input
            };
            b.tensor(x.name.clone(), x.dtype, x.shape.clone(), kind)
        })
    };
    for (t, x) in tensors.iter_enumerated() {
        if x.kind == TensorKind::Output {
            let seed = b.input(format!("{}__grad_seed", x.name), x.dtype, x.shape.clone());
            grad.insert(t, seed);
        }
    }
    for node in forward.nodes().iter().rev() {
        let dys: Vec<TensorId> = node
            .outputs
            .iter()
            .filter_map(|y| grad.get(y).copied())
            .collect();
        if dys.is_empty() {
            continue;
        }
        let xs: Vec<TensorId> = node.present_inputs().collect();
        let mut ins: Vec<Option<TensorId>> = dys.into_iter().map(Some).collect();
        for &x in &xs {
            ins.push(Some(saved(&mut b, x)));
        }
        let mut outs = Vec::new();
        let mut targets = Vec::new();
        for &x in &xs {
            let tx = &tensors[x];
            if targets.contains(&x) || !tx.dtype.is_float() {
                continue;
            }
            fresh += 1;
            let d = like(
                &mut b,
                tx,
                &format!("__grad{fresh}"),
                TensorKind::Activation,
            );
            outs.push(d);
            targets.push(x);
        }
        if outs.is_empty() {
            continue;
        }
        b.node(format!("{}__grad", node.name), "Gradient", &ins, &outs);
        for (x, d) in targets.into_iter().zip(outs) {
            let total = match grad.get(&x) {
                Some(&prev) => {
                    let tx = &tensors[x];
                    fresh += 1;
                    let s = like(
                        &mut b,
                        tx,
                        &format!("__gradsum{fresh}"),
                        TensorKind::Activation,
                    );
                    b.node(
                        format!("{}__sum{fresh}", tx.name),
                        "Sum",
                        &[Some(prev), Some(d)],
                        &[s],
                    );
                    s
                }
                None => d,
            };
            grad.insert(x, total);
        }
    }
    // SGD updates of the weights; gradients of graph inputs are dropped.
    for (t, &d) in &grad {
        let x = &tensors[*t];
        if x.kind != TensorKind::Weight {
            continue;
        }
        let w = saved(&mut b, *t);
        let updated = like(&mut b, x, "__updated", TensorKind::Output);
        b.node(
            format!("{}__sgd", x.name),
            "Sub",
            &[Some(w), Some(d)],
            &[updated],
        );
    }
    b.build()
}

/// A new tensor of `b` shaped like `x`, named after it with `suffix`.
fn like(b: &mut GraphBuilder, x: &memplan_ir::Tensor, suffix: &str, kind: TensorKind) -> TensorId {
    b.tensor(
        format!("{}{suffix}", x.name),
        x.dtype,
        x.shape.clone(),
        kind,
    )
}

/// A transformer encoder forward of `layers` layers over `[tokens, hidden]` activations
/// (`heads` attention heads over `seq` positions; `tokens` = batch × seq), in `dtype`.
pub fn transformer(
    layers: usize,
    tokens: i64,
    seq: i64,
    hidden: i64,
    heads: i64,
    dtype: DType,
) -> Result<Graph, ValidationErrors> {
    let mut g = GraphBuilder::new(format!("tfm{layers}"));
    let mut x = g.input("x", dtype, [tokens, hidden]);
    let batch = tokens / seq;
    for l in 0..layers {
        let w = |g: &mut GraphBuilder, n: &str, a: i64, b: i64| {
            g.weight(format!("l{l}.{n}"), dtype, [a, b])
        };
        let ln1 = g.weight(format!("l{l}.ln1"), dtype, [hidden]);
        let h = g.op("LayerNormalization", &[x, ln1], dtype, [tokens, hidden]);
        let wqkv = w(&mut g, "wqkv", hidden, 3 * hidden);
        let qkv = g.op("MatMul", &[h, wqkv], dtype, [tokens, 3 * hidden]);
        let s = g.op("AttentionScores", &[qkv], dtype, [batch, heads, seq, seq]);
        let p = g.op("Softmax", &[s], dtype, [batch, heads, seq, seq]);
        let o = g.op("AttentionValues", &[p, qkv], dtype, [tokens, hidden]);
        let wo = w(&mut g, "wo", hidden, hidden);
        let a = g.op("MatMul", &[o, wo], dtype, [tokens, hidden]);
        let x1 = g.op("Add", &[x, a], dtype, [tokens, hidden]);
        let ln2 = g.weight(format!("l{l}.ln2"), dtype, [hidden]);
        let h2 = g.op("LayerNormalization", &[x1, ln2], dtype, [tokens, hidden]);
        let w1 = w(&mut g, "w1", hidden, 4 * hidden);
        let u = g.op("MatMul", &[h2, w1], dtype, [tokens, 4 * hidden]);
        let u = g.op("Gelu", &[u], dtype, [tokens, 4 * hidden]);
        let w2 = w(&mut g, "w2", 4 * hidden, hidden);
        let d = g.op("MatMul", &[u, w2], dtype, [tokens, hidden]);
        x = g.op("Add", &[x1, d], dtype, [tokens, hidden]);
    }
    g.mark_output(x);
    g.build()
}
