//! Updates in place inside If, Loop and Scan bodies, at any depth, on real bytes (issue 36,
//! item 1): the pattern check runs the node as the update of the value its body updates
//! (`op_effects::updated_values`, its own statement), so a plan of a planner blind to such
//! updates is caught (a view of the value read after the node holds the new values; a
//! reader moved across the node reads the wrong version), and every plan the planner makes
//! runs clean. The three statements of which tensors such a node updates (the planner's
//! `OpTable::updated_tensors`, the verifier's, through its verdicts, and the pattern
//! check's) agree on every case.

#[path = "../../planner/tests/common/body_updates.rs"]
#[allow(dead_code, reason = "shared with the planner's tests")]
mod body_updates;

use body_updates::{Case, cases, moved_after};
use memplan_cuda_arena::{
    Cause, CheckArena, CheckOptions, CheckReport, Layout, LayoutOptions, op_effects, run_check,
};
use memplan_ir::{OpTable, TensorKind};
use memplan_planner::{
    Alias, Plan, PlanOptions, ScheduleMode, plan_graph, plan_with_schedule, verify_plan,
};

fn run(c: &Case, plan: &Plan) -> CheckReport {
    let layout = Layout::new_unverified(&c.graph, plan, &LayoutOptions::default()).unwrap();
    let mut arena = CheckArena::new(layout.clone()).unwrap();
    let options = CheckOptions::default().with_skip_weights(false);
    run_check(&c.graph, &layout, &mut arena, options).unwrap()
}

/// The default table without the ops that update in place: a planner that knows of no
/// update anywhere (what the planner was to updates inside bodies before the fix).
fn blind() -> PlanOptions {
    let mut table = OpTable::default();
    for op in [
        "memplan.SGD",
        "memplan.Momentum",
        "memplan.Adam",
        "com.microsoft.InPlaceAccumulatorV2",
    ] {
        table.insert_mutation(op, &[]);
    }
    PlanOptions::default().with_op_table(table)
}

#[test]
fn plans_of_updates_in_bodies_run_clean() {
    for c in cases() {
        for schedule in [ScheduleMode::Given, ScheduleMode::Memory] {
            let options = PlanOptions::default().with_schedule(schedule);
            let plan = plan_graph(&c.graph, &options).unwrap();
            let report = run(&c, &plan);
            assert!(
                report.is_clean(),
                "{} {schedule:?}: {:?}",
                c.label,
                report.render_clobbers(&c.graph)
            );
        }
    }
}

#[test]
fn a_view_sharing_a_value_a_body_updates_is_caught() {
    let mut caught = 0;
    for c in cases() {
        if c.graph.tensor(c.w).kind != TensorKind::Input {
            continue;
        }
        let plan = plan_graph(&c.graph, &blind()).unwrap();
        // The blind plan is the one issue 36 found: `wv` a view of `w`.
        assert!(
            matches!(plan.buffer(c.wv).and_then(|b| b.alias), Some(Alias::View { of, .. }) if of == c.w),
            "{}",
            c.label
        );
        let report = run(&c, &plan);
        let found = report
            .clobbers
            .iter()
            .find(|k| k.tensor == c.wv)
            .unwrap_or_else(|| panic!("{}: {:?}", c.label, report.render_clobbers(&c.graph)));
        assert_eq!(
            found.cause,
            Cause::UpdatedUnder { node: c.flow },
            "{}",
            c.label
        );
        caught += 1;
    }
    assert!(caught >= 24, "{caught}");
}

#[test]
fn a_reader_moved_across_a_body_update_is_caught() {
    for c in cases() {
        let plan = plan_graph(&c.graph, &blind()).unwrap();
        let order = moved_after(&plan.schedule, c.transpose, c.flow);
        let moved = plan_with_schedule(&c.graph, &order, &blind()).unwrap();
        let report = run(&c, &moved);
        assert!(
            report.clobbers.iter().any(|k| k.tensor == c.w
                && k.reader == Some(c.transpose)
                && k.cause == Cause::UpdateOrder { node: c.flow }),
            "{}: {:?}",
            c.label,
            report.render_clobbers(&c.graph)
        );
        // The planner that knows refuses that order; the verifier refuses the plan.
        assert!(plan_with_schedule(&c.graph, &order, &PlanOptions::default()).is_err());
        assert!(verify_plan(&c.graph, &moved).is_err(), "{}", c.label);
    }
}

#[test]
fn the_three_statements_of_updates_in_bodies_agree() {
    let table = OpTable::default();
    for c in cases() {
        for (n, node) in c.graph.nodes().iter_enumerated() {
            let ir = table.updated_tensors(&c.graph, node).to_vec();
            let arena = op_effects::updated_values(&c.graph, node);
            assert_eq!(ir, arena, "{} node {n:?}", c.label);
            assert_eq!(ir.contains(&c.w), n == c.flow, "{} node {n:?}", c.label);
        }
    }
}
