//! Updates in place inside If, Loop and Scan bodies, at any depth (issue 36, item 1): the
//! control-flow node is the update of the value its body updates, for the planner (aliasing,
//! liveness, ordering, folding) and for the verifier, each stating the rule on its own.
//!
//! The graphs are in `common/body_updates.rs`: `wv = Reshape(w)` and `wt = Transpose(w)`
//! before the node, read after it. Before the fix, `wv` was a view of `w` (and `w` died at
//! the node), `--schedule memory` moved the Reshape after the node, `wt` was folded into
//! the weight region from the first `w`, and the verifier accepted all three.

mod common;

use common::body_updates::{Case, Flow, Target, Updater, case, cases, moved_after};
use memplan_ir::{GraphError, NodeId, OpTable, TensorKind};
use memplan_planner::{
    Alias, Plan, PlanOptions, PlanViolation, PlannedWeight, ScheduleMode, plan_graph,
    plan_with_schedule, verify_plan,
};

fn step_of(plan: &Plan, n: NodeId) -> usize {
    plan.schedule
        .iter()
        .position(|&x| x == n)
        .expect("scheduled")
}

fn violations(c: &Case, plan: &Plan) -> Vec<PlanViolation> {
    match verify_plan(&c.graph, plan) {
        Ok(()) => Vec::new(),
        Err(v) => v.0,
    }
}

fn options(mode: ScheduleMode) -> PlanOptions {
    PlanOptions::default().with_schedule(mode)
}

#[test]
fn the_node_running_the_body_is_the_update() {
    let table = OpTable::default();
    for c in cases() {
        let node = c.graph.node(c.flow);
        assert_eq!(
            table.updated_tensors(&c.graph, node).as_slice(),
            &[c.w],
            "{}",
            c.label
        );
        // No other node updates anything.
        for (n, other) in c.graph.nodes().iter_enumerated() {
            if n != c.flow {
                assert!(
                    table.updated_tensors(&c.graph, other).is_empty(),
                    "{}",
                    c.label
                );
            }
        }
    }
    // A table without the updating ops sees none.
    let c = case(
        &[Flow::Loop, Flow::If],
        Updater::Sgd,
        TensorKind::Input,
        Target::Captured,
    );
    assert!(
        OpTable::empty()
            .updated_tensors(&c.graph, c.graph.node(c.flow))
            .is_empty()
    );
}

#[test]
fn plans_keep_the_old_values_for_readers_after_a_body_update() {
    for c in cases() {
        for mode in [ScheduleMode::Given, ScheduleMode::Memory] {
            let plan = plan_graph(&c.graph, &options(mode))
                .unwrap_or_else(|e| panic!("{} {mode:?}: {e}", c.label));
            verify_plan(&c.graph, &plan).unwrap_or_else(|e| panic!("{} {mode:?}: {e}", c.label));
            let at = |n| step_of(&plan, n);
            // Ordering: the view and the transpose read the old `w`.
            assert!(at(c.view) < at(c.flow), "{} {mode:?}", c.label);
            assert!(at(c.transpose) < at(c.flow), "{} {mode:?}", c.label);
            // Aliasing: `wv` is no view of `w` (nor of anything sharing its bytes).
            if let Some(b) = plan.buffer(c.wv) {
                assert!(
                    !matches!(b.alias, Some(Alias::View { of, .. }) if of == c.w),
                    "{} {mode:?}: {:?}",
                    c.label,
                    b.alias
                );
            }
            // Folding: nothing computed from `w` at load.
            assert!(plan.weight(c.wt).is_none(), "{} {mode:?}", c.label);
            // Liveness: an updated graph input is read back by the caller.
            if c.graph.tensor(c.w).kind == TensorKind::Input {
                let b = plan.buffer(c.w).expect("w in the arena");
                assert_eq!(
                    b.last as usize,
                    plan.schedule.len() - 1,
                    "{} {mode:?}",
                    c.label
                );
            }
        }
    }
}

#[test]
fn a_schedule_moving_a_reader_across_a_body_update_is_refused() {
    for c in cases() {
        let plan = plan_graph(&c.graph, &PlanOptions::default()).unwrap();
        // The view moved right after the node.
        let order = moved_after(&plan.schedule, c.view, c.flow);
        let err = plan_with_schedule(&c.graph, &order, &PlanOptions::default()).unwrap_err();
        let named = err.with_graph(&c.graph).to_string();
        assert!(named.contains("flow0"), "{}: {named}", c.label);
        // The verifier refuses the same order in a plan that claims it.
        let mut moved = plan.clone();
        moved.schedule = order;
        for b in &mut moved.buffers {
            b.first = 0;
            b.last = u32::try_from(moved.schedule.len() - 1).unwrap();
            b.offset = 0;
        }
        let found = violations(&c, &moved);
        assert!(
            found.iter().any(|v| matches!(
                v,
                PlanViolation::MovedAcrossUpdate { node, after, tensor }
                    if (*node, *after, *tensor) == (c.flow, c.view, c.w)
            )),
            "{}: {found:?}",
            c.label
        );
    }
}

#[test]
fn the_verifier_refuses_a_view_of_a_value_a_body_updates() {
    for c in cases() {
        if c.graph.tensor(c.w).kind != TensorKind::Input {
            continue;
        }
        let plan = plan_graph(&c.graph, &PlanOptions::default()).unwrap();
        // What the planner made before the fix: `wv` a view of `w`, at its offset.
        let mut view = plan.clone();
        let w_at = view.buffer(c.w).unwrap().offset;
        let b = view.buffers.iter_mut().find(|b| b.tensor == c.wv).unwrap();
        b.offset = w_at;
        b.alias = Some(Alias::View { of: c.w, offset: 0 });
        let found = violations(&c, &view);
        assert!(
            found.iter().any(|v| matches!(
                v,
                PlanViolation::UpdatedShared { tensor, .. } if *tensor == c.w
            )),
            "{}: {found:?}",
            c.label
        );
        // And `w` freed at the node: the caller reads it back after the last step.
        let mut short = plan.clone();
        let step = u32::try_from(step_of(&plan, c.flow)).unwrap();
        short
            .buffers
            .iter_mut()
            .find(|b| b.tensor == c.w)
            .unwrap()
            .last = step;
        assert!(!violations(&c, &short).is_empty(), "{}", c.label);
    }
}

#[test]
fn the_verifier_refuses_folding_from_a_value_a_body_updates() {
    for c in cases() {
        if c.graph.tensor(c.w).kind != TensorKind::Weight {
            continue;
        }
        let plan = plan_graph(&c.graph, &PlanOptions::default()).unwrap();
        assert!(plan.buffer(c.wt).is_some(), "{}", c.label);
        let mut folded = plan.clone();
        folded.buffers.retain(|b| b.tensor != c.wt);
        folded.weights.push(PlannedWeight {
            tensor: c.wt,
            offset: folded.weight_bytes,
            bytes: 128,
        });
        folded.weight_bytes += 128;
        folded.weights.sort_by_key(|w| w.tensor);
        assert!(!violations(&c, &folded).is_empty(), "{}", c.label);
    }
}

/// `mark_state` sees an input a body updates as training state, as it does one a top-level
/// optimizer step updates.
#[test]
fn an_input_a_body_updates_is_training_state() {
    let c = case(
        &[Flow::If, Flow::Loop, Flow::If],
        Updater::Adam,
        TensorKind::Input,
        Target::Captured,
    );
    let mut g = c.graph.clone();
    let marked = memplan_planner::mark_state(&mut g, &OpTable::default(), &[]).unwrap();
    assert!(marked.iter().any(|&(t, _)| t == c.w), "{marked:?}");
    assert_eq!(g.tensor(c.w).kind, TensorKind::State);
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    verify_plan(&g, &plan).unwrap();
    assert!(plan.weight(c.w).is_some());
}
