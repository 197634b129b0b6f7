//! Weight-derived tensors: what a graph computes from its weights alone, once, at load.
//!
//! A node runs at load when it reads at least one tensor, every tensor it reads (listed and
//! captured) is a weight or an output of a node that runs at load and no node updates it in
//! place (an optimizer's weight changes every step), it runs no body, its op
//! gives the same result on every run (not `RandomNormal`, `Bernoulli`, `Dropout` and the
//! like, nor a training op), it is not a copy the `constants` fusion made to run where its
//! output is used (attribute `memplan.at_use`), and none of its outputs is a graph output (the caller reads
//! those from where the plan puts outputs) or updated in place. Its outputs are *weight-derived*: a tied
//! embedding's transpose, a weight cast, a dequantised weight, a constant mask. A runtime
//! that folds constants (ONNX Runtime's constant folding, TensorRT) computes them once when
//! it loads the model, so with [`crate::PlanOptions::fold_weights`] they live in the weight
//! region for the whole run, like the weights they come from, and not in the arena.
//!
//! The weights the chain reads stay in the weight region too (a runtime that drops the ones
//! only folding read needs less; memplan errs on the side of more). The plan verifier states
//! this rule again on its own (`verify::derived`); a test keeps the two in agreement.

use memplan_ir::{Graph, IndexVec, OpTable, TensorId, TensorKind};

/// Ops whose result differs from run to run, so they are never computed at load even when
/// they read only weights; so are any op whose name starts with `Random` or holds
/// `Dropout` (ONNX Runtime's `BiasDropout`), and the training domains' ops (run for their
/// effect on each step).
const PER_RUN_OPS: &[&str] = &["Bernoulli", "Multinomial"];

/// Whether an op of this type (`Op` or `domain.Op`) may be computed once at load.
fn same_every_run(op: &str) -> bool {
    let name = op.rsplit('.').next().unwrap_or(op);
    !(PER_RUN_OPS.contains(&name)
        || name.starts_with("Random")
        || name.contains("Dropout")
        || op.contains("training"))
}

/// For each tensor of `graph`, whether a node computes it at load (see the module docs).
/// Node order is topological (the graph is validated), so one pass decides every node.
/// A tensor that a node of `table` updates in place (an optimizer step's weight, a
/// gradient accumulator's buffer, a value a control-flow body updates) changes from run to run: it is no constant, so nothing
/// computed from it is computed at load, and a node making it is not run at load either
/// (a weight's transpose read after the weight's update must see the new weight).
pub(crate) fn weight_derived(graph: &Graph, table: &OpTable) -> IndexVec<TensorId, bool> {
    let tensors = graph.tensors();
    let mut updated: IndexVec<TensorId, bool> = IndexVec::from_elem(false, tensors.len());
    for node in graph.nodes().iter() {
        for t in table.updated_tensors(graph, node) {
            if let Some(u) = updated.get_mut(t) {
                *u = true;
            }
        }
    }
    let is_updated = |t: TensorId| updated.get(t).copied().unwrap_or(false);
    let mut derived: IndexVec<TensorId, bool> = IndexVec::from_elem(false, tensors.len());
    for node in graph.nodes().iter() {
        let mut reads = node.present_inputs().peekable();
        if reads.peek().is_none()
            || !node.bodies.is_empty()
            || !same_every_run(&node.op)
            || node.attr(crate::fuse::ATTR_AT_USE).is_some()
        {
            continue;
        }
        let from_weights = reads.all(|t| {
            !is_updated(t)
                && (tensors.get(t).is_some_and(|x| x.kind == TensorKind::Weight)
                    || derived.get(t).copied().unwrap_or(false))
        });
        let feeds_caller = node.outputs.iter().any(|&o| {
            is_updated(o)
                || tensors
                    .get(o)
                    .is_none_or(|x| x.kind != TensorKind::Activation)
        });
        if from_weights && !feeds_caller {
            for &o in &node.outputs {
                derived[o] = true;
            }
        }
    }
    derived
}

#[cfg(test)]
mod tests {
    use memplan_ir::{DType, GraphBuilder, TensorId};

    use super::*;

    /// A small deterministic generator (xorshift), so the graphs are the same on every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    const OPS: &[&str] = &[
        "Transpose",
        "Cast",
        "Add",
        "Mul",
        "DequantizeLinear",
        "RandomNormalLike",
        "Dropout",
        "com.microsoft.BiasDropout",
        "ai.onnx.preview.training.Adam",
        "com.microsoft.MatMulNBits",
        "Shape",
        "memplan.SGD",
    ];

    /// A random graph of weights, inputs and nodes reading earlier tensors, some of whose
    /// outputs are graph outputs.
    fn random_graph(seed: u64) -> Graph {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut g = GraphBuilder::new("random");
        let mut pool: Vec<TensorId> = Vec::new();
        for i in 0..3 {
            pool.push(g.weight(format!("w{i}"), DType::F32, [4]));
        }
        pool.push(g.input("x", DType::F32, [4]));
        for _ in 0..(4 + rng.below(12)) {
            let op = OPS[rng.below(OPS.len())];
            let n = 1 + rng.below(3);
            let inputs: Vec<TensorId> = (0..n).map(|_| pool[rng.below(pool.len())]).collect();
            let y = g.op(op, &inputs, DType::F32, [4]);
            // A copy the `constants` fusion made runs where it is used, not at load.
            if rng.below(5) == 0 {
                g.attr(crate::fuse::ATTR_AT_USE, memplan_ir::Attr::Int(1));
            }
            if rng.below(6) == 0 {
                g.mark_output(y);
            }
            pool.push(y);
        }
        g.build().unwrap()
    }

    #[test]
    fn the_planner_and_the_verifier_agree_on_what_is_computed_at_load() {
        let mut folded = 0;
        for seed in 0..400 {
            let g = random_graph(seed);
            let planner = weight_derived(&g, &OpTable::default());
            let verifier = crate::verify::derived::computed_at_load(&g);
            assert_eq!(planner, verifier, "seed {seed}: {}", g.to_json());
            folded += planner.iter().filter(|&&d| d).count();
        }
        assert!(folded > 100, "the graphs fold too little to test: {folded}");
    }
}
