//! A [`PlanContext`] reused from plan to plan (as `memplan fit` and `memplan compare` reuse
//! one) gives the plans a fresh one gives: nothing an earlier plan leaves in its vectors or
//! its solver reaches the next, whatever the order of graphs, sizes and options.

mod common;

use std::time::Duration;

use memplan_planner::{PlanContext, PlanOptions, ScheduleMode, plan_graph, verify_plan};

#[test]
fn a_reused_context_plans_as_a_fresh_one() {
    // Large, small, then large again, with Concat parts (U-Net, DenseNet), views and
    // in-place writes (ResNet, ShuffleNet) and weights only (SqueezeNet).
    let names = [
        "light_densenet121_b1",
        "light_squeezenet_b1",
        "smp_unet_resnet34_b1",
        "light_shufflenet_b1",
        "light_resnet50_b1",
        "light_squeezenet_b1",
    ];
    let base = PlanOptions::default().with_solve_time_limit(Duration::ZERO);
    let options = [
        base.clone(),
        base.clone().with_schedule(ScheduleMode::Memory),
        base.clone()
            .without_aliasing()
            .with_inputs_in_arena(false)
            .with_outputs_in_arena(false),
    ];
    let mut context = PlanContext::new();
    let mut plans = 0;
    for name in names {
        let graph = common::mutants::corpus_graph(name);
        for o in &options {
            let fresh = plan_graph(&graph, o).unwrap();
            let reused = context.plan(&graph, o).unwrap();
            verify_plan(&graph, &reused).unwrap();
            assert_eq!(reused, fresh, "{name}");
            assert_eq!(reused.to_json(&graph), fresh.to_json(&graph), "{name}");
            plans += 1;
        }
    }
    assert_eq!(plans, 18);
}
