//! Memory-aware scheduling: finds lower peaks than the given order, is exact on small
//! graphs, and is never worse than the given order.

use memplan_ir::{DType, Graph, GraphBuilder, NodeId, TensorId};
use memplan_planner::{OrderingOptions, PlanOptions, ScheduleMode, peak_bytes};

mod common;
use common::plan_ok;

fn memory() -> PlanOptions {
    PlanOptions::default().with_schedule(ScheduleMode::Memory)
}

/// `k` branches, each a big tensor reduced to a small one, all big ones first in the given
/// order: the given order holds every big tensor at once.
fn wide(k: usize) -> Graph {
    let mut g = GraphBuilder::new("wide");
    let x = g.input("x", DType::F32, [256]);
    let bigs: Vec<TensorId> = (0..k)
        .map(|_| g.op("Conv", &[x], DType::F32, [16 * 256]))
        .collect();
    let smalls: Vec<TensorId> = bigs
        .iter()
        .map(|&b| g.op("Conv", &[b], DType::F32, [256]))
        .collect();
    let y = g.op("Concat", &smalls, DType::F32, [256 * k as i64]);
    g.mark_output(y);
    g.build().unwrap()
}

#[test]
fn the_memory_schedule_interleaves_branches_to_lower_the_peak() {
    let graph = wide(4);
    let given = plan_ok(&graph, &PlanOptions::default());
    let plan = plan_ok(&graph, &memory());
    let choice = &plan.stats.schedule;
    assert_eq!(choice.given_peak, given.lower_bound_bytes);
    // Given: four 16K tensors and one 1K one. Interleaved: one 16K and the four 1K ones.
    assert_eq!(choice.given_peak, (64 + 1) * 1024);
    assert_eq!(choice.peak, (16 + 4) * 1024);
    assert_eq!(plan.lower_bound_bytes, choice.peak);
    assert!(plan.arena_bytes < given.arena_bytes);
    assert_ne!(choice.chosen, "given");
    assert!(choice.exact, "an 9-node graph is searched exactly");
    assert!(
        choice
            .candidates
            .iter()
            .any(|c| c.name == "given" && c.peak == choice.given_peak)
    );
}

#[test]
fn the_given_order_is_kept_when_nothing_is_strictly_better() {
    let mut g = GraphBuilder::new("chain");
    let x = g.input("x", DType::F32, [256]);
    let a = g.op("Conv", &[x], DType::F32, [512]);
    let y = g.op("Conv", &[a], DType::F32, [256]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &memory());
    assert_eq!(plan.stats.schedule.chosen, "given");
    assert_eq!(plan.schedule, vec![NodeId(0), NodeId(1)]);
}

#[test]
fn a_beam_search_runs_on_graphs_too_large_for_the_exact_one() {
    let graph = wide(6);
    let options = memory().with_ordering(
        OrderingOptions::default()
            .with_exact_max_nodes(0)
            .with_beam_width(4),
    );
    let plan = plan_ok(&graph, &options);
    let choice = &plan.stats.schedule;
    assert!(!choice.exact);
    assert!(choice.peak < choice.given_peak);
}

/// A deterministic pseudo-random generator for test graphs.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

/// A random DAG of `nodes` nodes with opaque, elementwise (in-place) and reshape (view) ops;
/// every tensor is read or is an output, so the model and the measure agree exactly.
fn random_graph(seed: u64, nodes: usize) -> Graph {
    let mut rng = Rng(seed);
    let mut g = GraphBuilder::new(format!("random{seed}"));
    let mut tensors: Vec<(TensorId, i64)> = vec![(g.input("x", DType::F32, [64]), 64)];
    for _ in 0..nodes {
        let pick = rng.below(tensors.len() as u64) as usize;
        let (a, size_a) = tensors[pick];
        let (t, size) = match rng.below(4) {
            0 => (g.op("Relu", &[a], DType::F32, [size_a]), size_a),
            1 => (g.op("Reshape", &[a], DType::F32, [1, size_a]), size_a),
            _ => {
                let pick2 = rng.below(tensors.len() as u64) as usize;
                let size = 64 * (1 + rng.below(8) as i64);
                (
                    g.op("Conv", &[a, tensors[pick2].0], DType::F32, [size]),
                    size,
                )
            }
        };
        tensors.push((t, size));
    }
    let graph = g.graph().clone();
    let consumers = graph.consumers();
    for &(t, _) in &tensors {
        if consumers[t].is_empty() {
            g.mark_output(t);
        }
    }
    g.build().unwrap()
}

fn all_orders(graph: &Graph) -> Vec<Vec<NodeId>> {
    let producers = graph.producers();
    let preds: Vec<Vec<NodeId>> = graph
        .nodes()
        .iter()
        .map(|n| n.present_inputs().filter_map(|t| producers[t]).collect())
        .collect();
    let mut out = Vec::new();
    let mut order = Vec::new();
    let mut done = vec![false; graph.nodes().len()];
    fn go(
        preds: &[Vec<NodeId>],
        done: &mut Vec<bool>,
        order: &mut Vec<NodeId>,
        out: &mut Vec<Vec<NodeId>>,
    ) {
        if order.len() == done.len() {
            out.push(order.clone());
            return;
        }
        for i in 0..done.len() {
            if !done[i] && preds[i].iter().all(|p| done[p.0 as usize]) {
                done[i] = true;
                order.push(NodeId(i as u32));
                go(preds, done, order, out);
                order.pop();
                done[i] = false;
            }
        }
    }
    go(&preds, &mut done, &mut order, &mut out);
    out
}

#[test]
fn the_exact_search_finds_the_best_order_of_small_graphs() {
    for seed in 1..=12 {
        let graph = random_graph(seed, 7);
        for aliasing in [false, true] {
            let base = PlanOptions::default().with_alignment(1);
            let base = if aliasing {
                base
            } else {
                base.without_aliasing()
            };
            let best = all_orders(&graph)
                .iter()
                .map(|o| peak_bytes(&graph, o, &base).unwrap())
                .min()
                .unwrap();
            let plan = plan_ok(&graph, &base.clone().with_schedule(ScheduleMode::Memory));
            let choice = &plan.stats.schedule;
            assert!(choice.exact, "seed {seed}");
            assert_eq!(
                choice.peak, best,
                "seed {seed}, aliasing {aliasing}: {choice:?}"
            );
            assert_eq!(plan.lower_bound_bytes, best);
        }
    }
}

#[test]
fn the_memory_schedule_is_never_worse_than_the_given_one() {
    for seed in 100..120 {
        let graph = random_graph(seed, 20);
        for options in [memory(), memory().without_aliasing()] {
            let plan = plan_ok(&graph, &options);
            let choice = &plan.stats.schedule;
            assert!(choice.peak <= choice.given_peak, "seed {seed}: {choice:?}");
            assert_eq!(plan.lower_bound_bytes, choice.peak, "seed {seed}");
            let given: Vec<NodeId> = graph.nodes().iter_enumerated().map(|(n, _)| n).collect();
            assert_eq!(
                choice.given_peak,
                peak_bytes(&graph, &given, &options).unwrap()
            );
        }
    }
}

#[test]
fn the_memory_schedule_is_deterministic() {
    let graph = random_graph(7, 20);
    let a = plan_ok(&graph, &memory());
    let b = plan_ok(&graph, &memory());
    assert_eq!(a.to_json(&graph), b.to_json(&graph));
}
