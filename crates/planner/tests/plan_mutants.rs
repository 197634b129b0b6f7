//! Proof that the plan verifier works: valid plans of real graphs (and of a graph with
//! partial views) are mutated, unsafely and safely (`common/mutants.rs` says how), and the
//! verifier must reject every unsafe mutant and accept every safe one. A last step moved
//! before the last reader, with nothing else changed, is rejected too (`short-lifetime` needs
//! the bytes reused to be unsafe at run time; the verifier refuses the claim itself).
//!
//! Run with `--nocapture` to see the counts.

mod common;

use common::mutants::{Counts, concat_parts, corpus_graph, mutants, partial_views};
use memplan_ir::{Graph, TensorKind};
use memplan_planner::{Plan, plan_graph, verify_plan};

const GRAPHS: &[&str] = &[
    "light_squeezenet_b1",
    "silero_vad_16k_b1",
    "ddddocr_crnn_b1",
    "magika_v3_3_b1",
    "smp_unet_resnet34_b1",
    "tv_mobilenet_v3_large_b1",
];

fn ok(graph: &Graph, plan: &Plan) -> bool {
    verify_plan(graph, plan).is_ok()
}

#[test]
fn the_verifier_rejects_every_unsafe_mutant_and_accepts_every_safe_one() {
    let mut c = Counts::default();
    let (mut claims, mut claims_rejected) = (0usize, 0usize);
    let graphs = GRAPHS
        .iter()
        .map(|n| corpus_graph(n))
        .chain([partial_views(), concat_parts()]);
    for graph in graphs {
        for options in common::random_graph::option_sets() {
            let plan = plan_graph(&graph, &options).unwrap();
            assert!(
                ok(&graph, &plan),
                "{}: the unmutated plan must pass",
                graph.name
            );
            for m in mutants(&graph, &plan, 40) {
                c.add(&m, !ok(&graph, &m.plan));
            }
            // The bare claim of a shorter lifetime.
            for (i, b) in plan.buffers.iter().enumerate() {
                if b.last > b.first && graph.tensors()[b.tensor].kind != TensorKind::Output {
                    let mut m = plan.clone();
                    m.buffers[i].last -= 1;
                    claims += 1;
                    claims_rejected += usize::from(!ok(&graph, &m));
                }
            }
        }
    }
    eprintln!("verifier: shortened-lifetime claims: {claims_rejected} of {claims} rejected");
    assert_eq!(claims_rejected, claims);
    c.assert_all_right("verifier");
}
