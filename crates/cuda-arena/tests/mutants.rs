//! Proof that the byte-pattern check works, on the same mutants as the plan verifier's
//! (`crates/planner/tests/common/mutants.rs`): each mutant is laid out without the
//! verifier and executed on a host arena; the check must find every unsafe mutant wrong
//! (a clobbered tensor or a refused view) and every safe one clean. And on random graphs
//! built to hit aliasing corners (`crates/planner/tests/common/random_graph.rs`), planned
//! with every option set, every plan runs clean.
//!
//! Run with `--nocapture` to see the counts.

#[path = "../../planner/tests/common/mutants.rs"]
#[allow(dead_code, reason = "shared with the planner's tests")]
mod mutants;
#[path = "../../planner/tests/common/random_graph.rs"]
mod random_graph;

use memplan_cuda_arena::{CheckArena, CheckOptions, Layout, LayoutOptions, run_check};
use memplan_ir::Graph;
use memplan_planner::{Plan, PlanOptions, plan_graph, verify_plan};
use mutants::{Counts, concat_parts, corpus_graph, mutants, partial_views};

/// Whether the pattern check finds `plan` wrong (an error laying it out or running it
/// counts as wrong too: the backends bound-check every range).
fn pattern_rejects(graph: &Graph, plan: &Plan) -> bool {
    let Ok(layout) = Layout::new_unverified(graph, plan, &LayoutOptions::default()) else {
        return true;
    };
    let Ok(mut arena) = CheckArena::new(layout.clone()) else {
        return true;
    };
    match run_check(graph, &layout, &mut arena, CheckOptions::default()) {
        Ok(report) => !report.is_clean(),
        Err(_) => true,
    }
}

#[test]
fn the_pattern_check_rejects_every_unsafe_mutant_and_accepts_every_safe_one() {
    let mut c = Counts::default();
    let graphs = ["light_squeezenet_b1", "silero_vad_16k_b1", "magika_v3_3_b1"]
        .iter()
        .map(|n| corpus_graph(n))
        .chain([partial_views(), concat_parts()]);
    for graph in graphs {
        for options in random_graph::option_sets() {
            let plan = plan_graph(&graph, &options).unwrap();
            assert!(
                !pattern_rejects(&graph, &plan),
                "{}: the plan itself",
                graph.name
            );
            for m in mutants(&graph, &plan, 12) {
                let rejected = pattern_rejects(&graph, &m.plan);
                if m.unsafe_kind.is_some() && !rejected {
                    eprintln!("{}: an unsafe mutant ran clean", graph.name);
                }
                c.add(&m, rejected);
            }
        }
    }
    c.assert_all_right("pattern check");
}

#[test]
fn every_plan_of_a_random_graph_runs_clean() {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for case in 0..300u32 {
        let bytes = random_graph::bytes(&mut state, 80);
        let graph = random_graph::graph_from_bytes(&bytes);
        let options = random_graph::options_from_byte((case % 256) as u8 ^ bytes[0]);
        let plan = plan_graph(&graph, &options).unwrap();
        verify_plan(&graph, &plan).unwrap();
        let layout = Layout::new(&graph, &plan, &LayoutOptions::default()).unwrap();
        let mut arena = CheckArena::new(layout.clone()).unwrap();
        let report = run_check(&graph, &layout, &mut arena, CheckOptions::default()).unwrap();
        assert!(
            report.is_clean(),
            "case {case}: {:?}\n{}",
            report.render_clobbers(&graph),
            graph.to_json()
        );
    }
}

/// A node with a body gets a workspace: the check scribbles on it while the node runs. A
/// plan whose workspace sits on a value still needed is caught, with the workspace named.
#[test]
fn a_workspace_over_a_live_value_is_caught() {
    use memplan_cuda_arena::Cause;
    use memplan_ir::{DType, GraphBuilder};

    let mut body = GraphBuilder::new("then");
    // Captures the outer `x` (named as the builder names it).
    let bx = body.input("t2_Relu", DType::F32, [256]);
    let t1 = body.op("Exp", &[bx], DType::F32, [256]);
    let t2 = body.op("Conv", &[t1], DType::F32, [256]);
    body.mark_output(t2);
    let body = body.build().unwrap();

    let mut g = GraphBuilder::new("if");
    let x0 = g.input("x0", DType::F32, [256]);
    let c = g.input("c", DType::Bool, [1]);
    let x = g.op("Relu", &[x0], DType::F32, [256]);
    let t = g.op("Neg", &[x0], DType::F32, [256]);
    let y = g.op("If", &[c], DType::F32, [256]);
    g.body("then_branch", body.clone());
    g.body("else_branch", body);
    let z = g.op("Add", &[y, t], DType::F32, [256]);
    g.mark_output(z);
    let graph = g.build().unwrap();
    let if_node = graph.find_node("n2_If").unwrap();
    assert_eq!(graph.nodes()[if_node].implicit_inputs, vec![x]);

    let plan = plan_graph(&graph, &PlanOptions::default()).unwrap();
    verify_plan(&graph, &plan).unwrap();
    assert_eq!(plan.workspaces.len(), 1);
    assert!(!pattern_rejects(&graph, &plan));

    // The workspace moved onto `t`, which the Add reads after the If.
    let mut bad = plan.clone();
    let t_at = plan.buffers.iter().find(|b| b.tensor == t).unwrap().offset;
    bad.workspaces[0].offset = t_at;
    assert!(verify_plan(&graph, &bad).is_err());
    let layout = Layout::new_unverified(&graph, &bad, &LayoutOptions::default()).unwrap();
    let mut arena = CheckArena::new(layout.clone()).unwrap();
    let report = run_check(&graph, &layout, &mut arena, CheckOptions::default()).unwrap();
    let found = report
        .clobbers
        .iter()
        .find(|cl| cl.tensor == t)
        .expect("t is clobbered");
    assert!(
        matches!(found.cause, Cause::Workspace { .. }),
        "{:?}",
        found.cause
    );
    let lines = report.render_clobbers(&graph);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("overwritten by the workspace of")),
        "{lines:?}"
    );
}
