//! Tests of the portfolio's algorithms over the memory model: every order respects the one
//! dependency model (constraint edges included), the anchors' rules hold on graphs built to
//! show them, and on small graphs the best order of the portfolio is checked against every
//! topological order.

use memplan_ir::{DType, Graph, GraphBuilder, NodeId, TensorId};

use super::deps::Deps;
use super::model::Model;
use super::{inductor, local, xla};
use crate::options::PlanOptions;
use crate::planner::ordering_model;

/// A deterministic pseudo-random generator for test graphs.
pub(super) struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

/// A random DAG of `nodes` nodes: opaque ops of one to three inputs and one or two outputs
/// of varied sizes, elementwise ops (in place), reshapes (views), long skips, some outputs
/// read later (pinned groups that are also read), unread tensors.
pub(super) fn random_graph(seed: u64, nodes: usize) -> Graph {
    let mut rng = Rng(seed);
    let mut g = GraphBuilder::new(format!("random{seed}"));
    let mut tensors: Vec<(TensorId, i64)> = vec![(g.input("x", DType::F32, [64]), 64)];
    if rng.below(2) == 0 {
        tensors.push((g.input("y", DType::F32, [256]), 256));
    }
    for k in 0..nodes {
        let pick = |rng: &mut Rng, tensors: &[(TensorId, i64)]| {
            // Mostly recent tensors, sometimes a long skip.
            let len = tensors.len() as u64;
            if rng.below(4) == 0 {
                tensors[rng.below(len) as usize]
            } else {
                tensors[(len - 1 - rng.below(len.min(4))) as usize]
            }
        };
        let (a, size_a) = pick(&mut rng, &tensors);
        match rng.below(6) {
            0 => {
                let t = g.op("Relu", &[a], DType::F32, [size_a]);
                tensors.push((t, size_a));
            }
            1 => {
                let t = g.op("Reshape", &[a], DType::F32, [1, size_a]);
                tensors.push((t, size_a));
            }
            2 => {
                let size = 64 * (1 + rng.below(16) as i64);
                let y0 = g.tensor(
                    format!("m{k}a"),
                    DType::F32,
                    [size],
                    memplan_ir::TensorKind::Activation,
                );
                let y1 = g.tensor(
                    format!("m{k}b"),
                    DType::F32,
                    [64],
                    memplan_ir::TensorKind::Activation,
                );
                g.node(format!("multi{k}"), "FusedPair", &[Some(a)], &[y0, y1]);
                tensors.push((y0, size));
                tensors.push((y1, 64));
            }
            _ => {
                let mut ins = vec![a];
                for _ in 0..rng.below(3) {
                    ins.push(pick(&mut rng, &tensors).0);
                }
                let size = 64 * (1 + rng.below(16) as i64);
                let t = g.op("Conv", &ins, DType::F32, [size]);
                tensors.push((t, size));
            }
        }
    }
    let graph = g.graph().clone();
    let consumers = graph.consumers();
    for (i, &(t, _)) in tensors.iter().enumerate() {
        if graph.tensor(t).kind == memplan_ir::TensorKind::Input {
            continue;
        }
        if consumers[t].is_empty() && i % 3 != 0 || i % 11 == 5 {
            g.mark_output(t);
        }
    }
    g.build().unwrap()
}

/// The model of `graph` with every option combination the tests vary.
pub(super) fn models(graph: &Graph) -> Vec<Model> {
    let base = PlanOptions {
        alignment: 1,
        ..PlanOptions::default()
    };
    let caller = PlanOptions {
        inputs_in_arena: false,
        outputs_in_arena: false,
        alignment: 64,
        ..PlanOptions::default()
    };
    [base.clone(), base.without_aliasing(), caller]
        .iter()
        .map(|o| ordering_model(graph, o).unwrap())
        .collect()
}

/// The model of `graph` with the caller owning inputs and outputs and no alignment.
fn caller_owned_model(graph: &Graph) -> Model {
    let options = PlanOptions {
        inputs_in_arena: false,
        outputs_in_arena: false,
        alignment: 1,
        ..PlanOptions::default()
    };
    ordering_model(graph, &options).unwrap()
}

pub(super) fn algorithms() -> [(&'static str, super::Algorithm); 9] {
    super::ALGORITHMS
}

/// Constraint pairs `(before, after)` that agree with graph order.
fn constraints(graph: &Graph, rng: &mut Rng, count: usize) -> Vec<(NodeId, NodeId)> {
    let n = graph.nodes().len() as u64;
    (0..count)
        .filter_map(|_| {
            let a = rng.below(n) as u32;
            let b = rng.below(n) as u32;
            (a < b).then_some((NodeId(a), NodeId(b)))
        })
        .collect()
}

#[test]
fn every_algorithm_respects_the_dependencies_and_the_constraints() {
    for seed in 1..=30 {
        let graph = random_graph(seed, 40);
        let mut rng = Rng(seed * 7);
        for mut model in models(&graph) {
            for with_constraints in [false, true] {
                let pairs = if with_constraints {
                    constraints(&graph, &mut rng, 15)
                } else {
                    Vec::new()
                };
                model.deps = Deps::new(&graph, &pairs);
                for (name, f) in algorithms() {
                    let order = f(&model);
                    assert!(model.deps.respects(&order), "seed {seed}: {name} {order:?}");
                    for &(a, b) in &pairs {
                        let pa = order.iter().position(|&n| n == a).unwrap();
                        let pb = order.iter().position(|&n| n == b).unwrap();
                        assert!(pa < pb, "seed {seed}: {name} puts {a} after {b}");
                    }
                    let (improved, _) = local::improve(&model, &order, 10_000);
                    assert!(model.deps.respects(&improved), "seed {seed}: {name}+local");
                    assert!(
                        model.peak(&improved) <= model.peak(&order),
                        "seed {seed}: {name}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_dependency_model_rejects_orders_that_break_it() {
    let graph = random_graph(3, 10);
    let deps = Deps::new(&graph, &[(NodeId(0), NodeId(9))]);
    let given: Vec<NodeId> = (0..10).map(NodeId).collect();
    assert!(deps.respects(&given));
    let mut swapped = given.clone();
    swapped.swap(0, 9);
    assert!(!deps.respects(&swapped));
    assert!(!deps.respects(&given[..9]));
    let mut twice = given.clone();
    twice[9] = NodeId(8);
    assert!(!deps.respects(&twice));
    // A constraint pair makes the edge even without data flow; no self edges.
    let d = Deps::new(&graph, &[(NodeId(2), NodeId(2)), (NodeId(0), NodeId(9))]);
    assert!(d.preds[9].contains(&0));
    assert!(!d.preds[2].contains(&2));
    assert!(d.succs[0].contains(&9));
}

/// Three chains from one input: the list scheduler runs the branch that frees the most
/// first, and of equal keys the one that became ready last (XLA's multimap end).
#[test]
fn the_list_scheduler_keeps_xla_s_keys_and_tie_breaks() {
    let mut g = GraphBuilder::new("list");
    let x = g.input("x", DType::F32, [64]);
    // Three nodes read x; each then shrinks its output.
    let a = g.op("Conv", &[x], DType::F32, [1024]); // node 0, defines 4 KiB
    let b = g.op("Conv", &[x], DType::F32, [256]); // node 1, defines 1 KiB
    let c = g.op("Conv", &[x], DType::F32, [256]); // node 2, defines 1 KiB
    let a2 = g.op("Conv", &[a], DType::F32, [64]); // node 3: frees 4 KiB, defines 256 B
    let b2 = g.op("Conv", &[b], DType::F32, [64]); // node 4
    let c2 = g.op("Conv", &[c], DType::F32, [64]); // node 5
    let y = g.op("Concat", &[a2, b2, c2], DType::F32, [192]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let model = caller_owned_model(&graph);
    let order: Vec<u32> = xla::list(&model).iter().map(|n| n.0).collect();
    // Ready at first: 0, 1, 2 (keys -4096, -1024, -1024): 2 entered last of the two best.
    // Then 5 (frees 1 KiB - 256) beats 1 (-1024); then 1, 4; then 0, 3; the Concat last.
    assert_eq!(order, vec![2, 5, 1, 4, 0, 3, 6]);
}

/// XLA's DFS visits operands with more extra users first, then larger subtrees.
#[test]
fn the_dfs_scheduler_visits_the_larger_subtree_first() {
    let mut g = GraphBuilder::new("dfs");
    let x = g.input("x", DType::F32, [64]);
    let small = g.op("Conv", &[x], DType::F32, [64]); // node 0
    let big = g.op("Conv", &[x], DType::F32, [4096]); // node 1
    let big2 = g.op("Conv", &[big], DType::F32, [64]); // node 2
    let y = g.op("Add", &[small, big2], DType::F32, [64]); // node 3
    g.mark_output(y);
    let graph = g.build().unwrap();
    let model = ordering_model(&graph, &PlanOptions::default()).unwrap();
    let order: Vec<u32> = xla::dfs(&model).iter().map(|n| n.0).collect();
    assert_eq!(order, vec![1, 2, 0, 3]);
    // The plain post-order takes the operands first to last.
    let order: Vec<u32> = xla::post_order(&model).iter().map(|n| n.0).collect();
    assert_eq!(order, vec![0, 1, 2, 3]);
}

/// Inductor's BFS runs the node whose predecessors ran earliest; its DFS visits the node
/// touching the fewest bytes first.
#[test]
fn inductor_s_orders_follow_their_keys() {
    let mut g = GraphBuilder::new("ind");
    let x = g.input("x", DType::F32, [64]);
    let a = g.op("Conv", &[x], DType::F32, [64]); // node 0
    let b = g.op("Conv", &[x], DType::F32, [4096]); // node 1
    let a2 = g.op("Conv", &[a], DType::F32, [64]); // node 2: pred ran at step 0
    let b2 = g.op("Conv", &[b], DType::F32, [64]); // node 3: pred ran at step 1
    let y = g.op("Add", &[a2, b2], DType::F32, [64]); // node 4
    g.mark_output(y);
    let graph = g.build().unwrap();
    let model = ordering_model(&graph, &PlanOptions::default()).unwrap();
    let order: Vec<u32> = inductor::bfs(&model).iter().map(|n| n.0).collect();
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
    let order: Vec<u32> = inductor::dfs(&model).iter().map(|n| n.0).collect();
    // Node 0 touches the fewest bytes, so it and its closure come first; node 2 before 3.
    assert_eq!(order, vec![0, 2, 1, 3, 4]);
    // LPMF never runs the 16 KiB node while a cheaper one keeps the peak lower.
    let order = inductor::lpmf(&model);
    assert!(model.peak(&order) <= model.peak(&[0, 1, 2, 3, 4].map(NodeId)));
}

/// Every topological order of a small graph.
fn all_orders(model: &Model) -> Vec<Vec<NodeId>> {
    fn go(
        model: &Model,
        done: &mut Vec<bool>,
        order: &mut Vec<NodeId>,
        out: &mut Vec<Vec<NodeId>>,
    ) {
        if order.len() == done.len() {
            out.push(order.clone());
            return;
        }
        for i in 0..done.len() {
            if !done[i] && model.deps.preds[i].iter().all(|&p| done[p as usize]) {
                done[i] = true;
                order.push(NodeId(i as u32));
                go(model, done, order, out);
                order.pop();
                done[i] = false;
            }
        }
    }
    let mut out = Vec::new();
    go(
        model,
        &mut vec![false; model.len()],
        &mut Vec::new(),
        &mut out,
    );
    out
}

#[test]
fn local_improvement_reaches_no_order_below_the_best_and_often_the_best() {
    let mut reached = 0;
    let mut total = 0;
    for seed in 40..70 {
        let graph = random_graph(seed, 8);
        for model in models(&graph) {
            let orders = all_orders(&model);
            let best = orders.iter().map(|o| model.peak(o)).min().unwrap();
            for (_, f) in algorithms() {
                let start = f(&model);
                let (improved, _) = local::improve(&model, &start, 100_000);
                let peak = model.peak(&improved);
                assert!(peak >= best && peak <= model.peak(&start), "seed {seed}");
                total += 1;
                reached += usize::from(peak == best);
            }
        }
    }
    // Not a guarantee, but a local search that rarely reaches the optimum of an 8-node
    // graph is broken.
    assert!(
        reached * 10 >= total * 8,
        "optimum reached {reached} of {total} times"
    );
}

#[test]
fn the_any_order_bound_is_below_every_order() {
    for seed in 70..110 {
        let graph = random_graph(seed, 8);
        for model in models(&graph) {
            let orders = all_orders(&model);
            let best = orders.iter().map(|o| model.peak(o)).min().unwrap();
            for o in orders.iter().step_by(7) {
                let bound = model.order_free_bound(o);
                assert!(bound <= best, "seed {seed}: bound {bound} > best {best}");
            }
        }
    }
}

/// A training-shaped chain: every activation the backward reads is live at the turn in
/// any order, and the bound sees all of them at once.
#[test]
fn the_any_order_bound_sees_saved_activations() {
    let mut g = GraphBuilder::new("chain");
    let x = g.input("x", DType::F32, [256]);
    let mut acts = vec![x];
    for _ in 0..6 {
        let a = g.op("Conv", &[*acts.last().unwrap()], DType::F32, [1024]);
        acts.push(a);
    }
    let loss = g.op("Loss", &[*acts.last().unwrap()], DType::F32, [1]);
    let mut grad = loss;
    for &a in acts.iter().skip(1).rev() {
        grad = g.op("ConvGrad", &[grad, a], DType::F32, [1024]);
    }
    g.mark_output(grad);
    let graph = g.build().unwrap();
    let model = caller_owned_model(&graph);
    let given: Vec<NodeId> = (0..graph.nodes().len() as u32).map(NodeId).collect();
    let bound = model.order_free_bound(&given);
    // During the first gradient's step: six saved activations of 4 KiB, the 4-byte loss
    // and the new 4 KiB gradient. The old per-node bound saw one step's inputs and outputs.
    assert_eq!(bound, 7 * 4096 + 4);
    // The only order reaches it.
    assert_eq!(model.peak(&given), bound);
}

/// A forward activation the backward reads through a copy made off the path to the loss
/// (XLA's transposed copies for weight gradients): at the loss's gradient, the activation
/// or its copy is live in any order, and the bound counts it; without that it would see
/// only what lies on the path (20.25 KiB).
#[test]
fn the_any_order_bound_sees_a_tensor_or_its_copy() {
    let mut g = GraphBuilder::new("copy");
    let x = g.input("x", DType::F32, [256]);
    let a = g.op("Conv", &[x], DType::F32, [2048]); // 8 KiB
    let b = g.op("Conv", &[a], DType::F32, [1024]); // 4 KiB, saved for the backward
    let l = g.op("Loss", &[b], DType::F32, [4096]); // 16 KiB
    let t = g.op("Transpose", &[a], DType::F32, [2048]); // 8 KiB, off the path
    let g1 = g.op("LossGrad", &[l], DType::F32, [64]);
    let d = g.op("ConvGrad", &[g1, t, b], DType::F32, [64]);
    g.mark_output(d);
    let graph = g.build().unwrap();
    let model = caller_owned_model(&graph);
    let orders = all_orders(&model);
    let best = orders.iter().map(|o| model.peak(o)).min().unwrap();
    // During LossGrad: b, the loss, the new gradient, and `a` or `t`.
    assert_eq!(best, 4096 + 16384 + 256 + 8192);
    for o in &orders {
        assert_eq!(model.order_free_bound(o), best, "{o:?}");
    }
}

/// On the forward graphs of `testdata/xla`, the DFS scheduler restated here gives XLA's own
/// memory-optimized order (`NAME_xlamem.json`) node for node, from XLA's default order.
#[test]
fn the_dfs_scheduler_is_xla_s_memory_optimized_order_on_forward_graphs() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/xla/graphs");
    if !dir.is_dir() {
        // A packaged crate: the repository's corpus is not there.
        eprintln!("skipped: no corpus at {}", dir.display());
        return;
    }
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !name.contains("fwd") || name.ends_with("_xlamem") {
            continue;
        }
        let graph = Graph::load_json(&path).unwrap();
        let xla = Graph::load_json(&dir.join(format!("{name}_xlamem.json"))).unwrap();
        let options = PlanOptions {
            inputs_in_arena: false,
            outputs_in_arena: false,
            alignment: 64,
            // XLA computes its broadcasts of constants on every run.
            fold_weights: false,
            ..PlanOptions::default()
        };
        let model = ordering_model(&graph, &options).unwrap();
        let ours: Vec<&str> = xla::dfs(&model)
            .iter()
            .map(|&n| graph.nodes()[n].name.as_str())
            .collect();
        let theirs: Vec<&str> = xla.nodes().iter().map(|n| n.name.as_str()).collect();
        assert_eq!(ours, theirs, "{name}");
        checked += 1;
    }
    assert!(checked >= 10, "{checked} forward graphs");
}

/// The model's peak is the planner's measured peak (its lifetimes, from
/// `liveness::byte_reads`, and its aliasing) on every portfolio order of graphs whose inputs
/// are all read, with Concat elision off (the model does not elide): the two count the same
/// bytes live at each step, so an op that reads only metadata changes both at once.
#[test]
fn the_model_s_peak_is_the_measured_peak() {
    let mut checked = 0;
    for seed in 200..240 {
        let graph = random_graph(seed, 30);
        let consumers = graph.consumers();
        if graph
            .tensors()
            .iter_enumerated()
            .any(|(t, x)| x.kind == memplan_ir::TensorKind::Input && consumers[t].is_empty())
        {
            continue;
        }
        let base = PlanOptions {
            alignment: 1,
            concat_elision: false,
            ..PlanOptions::default()
        };
        for options in [base.clone(), base.clone().without_aliasing()] {
            let model = ordering_model(&graph, &options).unwrap();
            for (name, f) in algorithms() {
                let order = f(&model);
                let measured = crate::peak_bytes(&graph, &order, &options).unwrap();
                assert_eq!(model.peak(&order), measured, "seed {seed}: {name}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 300, "{checked} orders compared");
}

/// A renumbered model is the same graph: every algorithm's order over it, mapped back,
/// respects the dependencies and has the peak it had there, and the any-order bound stays
/// below it; the numberings the portfolio uses are permutations.
#[test]
fn a_renumbered_model_is_the_same_graph_under_other_names() {
    for seed in 1..=20 {
        let graph = random_graph(seed, 40);
        let mut rng = Rng(seed * 13);
        for model in models(&graph) {
            let n = model.len();
            // A random permutation, and the portfolio's own numberings.
            let mut shuffled: Vec<u32> = (0..n as u32).collect();
            for i in (1..n).rev() {
                shuffled.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let mut numberings = super::numberings(&model);
            numberings.push(("random", shuffled));
            for (what, new_of) in numberings {
                let mut sorted = new_of.clone();
                sorted.sort_unstable();
                assert!(
                    sorted.iter().copied().eq(0..n as u32),
                    "{what}: a permutation"
                );
                let renumbered = model.renumbered(&new_of);
                let mut old_of = vec![0u32; n];
                for (old, &new) in (0u32..).zip(&new_of) {
                    old_of[new as usize] = old;
                }
                for (name, f) in algorithms() {
                    let order = f(&renumbered);
                    assert!(
                        renumbered.deps.respects(&order),
                        "seed {seed} {what}: {name}"
                    );
                    let back: Vec<NodeId> =
                        order.iter().map(|m| NodeId(old_of[m.0 as usize])).collect();
                    assert!(model.deps.respects(&back), "seed {seed} {what}: {name}");
                    assert_eq!(
                        model.peak(&back),
                        renumbered.peak(&order),
                        "seed {seed} {what}: {name}"
                    );
                    // The bound's pairing of groups depends on node indices; it stays a bound.
                    assert!(
                        renumbered.order_free_bound(&order) <= model.peak(&back),
                        "seed {seed} {what}: {name}"
                    );
                }
            }
        }
    }
}

/// The report's words for an order name: the algorithm, the numbering, local improvement.
#[test]
fn order_names_are_described_in_words() {
    use super::describe_order;
    assert_eq!(describe_order("xla-list"), "XLA's list scheduler");
    assert_eq!(
        describe_order("post-order/depth+local"),
        "XLA's post-order, nodes numbered by depth, then local improvement"
    );
    assert_eq!(
        describe_order("inductor-dfs/height"),
        "Inductor's DFS, nodes numbered by height"
    );
    assert_eq!(
        describe_order("given+local"),
        "the graph's own order, then local improvement"
    );
}
