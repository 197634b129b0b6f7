//! Property test: random graphs built to hit the risky corners of aliasing (see
//! `common/random_graph.rs`), planned with every option set and both schedules; every plan
//! passes the independent verifier, and the planner never fails on a valid graph.

mod common;

use common::random_graph::{graph_from_bytes, options_from_byte};
use memplan_ir::GraphError as _;
use memplan_planner::{plan_graph, verify_plan};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn every_plan_of_a_random_graph_passes_the_verifier(
        bytes in proptest::collection::vec(any::<u8>(), 0..120),
        option_byte in any::<u8>(),
    ) {
        let graph = graph_from_bytes(&bytes);
        let options = options_from_byte(option_byte);
        let plan = plan_graph(&graph, &options).map_err(|e| TestCaseError::fail(e.to_string()))?;
        if let Err(problems) = verify_plan(&graph, &plan) {
            return Err(TestCaseError::fail(format!("{}\n{}", problems.with_graph(&graph),  graph.to_json())));
        }
        // No order peaks below the order-free bound, the chosen one included.
        let bound = plan.stats.schedule.any_order_bound;
        prop_assert!(bound <= plan.stats.schedule.peak, "{bound} > {:?}", plan.stats.schedule);
    }
}

/// The generator reaches the corners it is for: over a fixed set of byte strings, plans
/// have views, in-place writes and Concat parts, and sub-byte graphs appear.
#[test]
fn random_graphs_exercise_views_and_in_place_writes() {
    let (mut views, mut inplace, mut parts, mut sub_byte) = (0u32, 0u32, 0u32, 0u32);
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..200 {
        let bytes = common::random_graph::bytes(&mut state, 80);
        let graph = graph_from_bytes(&bytes);
        sub_byte += u32::from(graph.tensors().iter().any(|t| t.dtype.bits() == Some(4)));
        let options = options_from_byte(0);
        let plan = plan_graph(&graph, &options).unwrap();
        verify_plan(&graph, &plan).unwrap();
        views += plan.stats.views;
        inplace += plan.stats.inplace;
        parts += plan.stats.parts;
    }
    assert!(
        views > 100 && inplace > 100 && parts > 10 && sub_byte > 20,
        "{views} {inplace} {parts} {sub_byte}"
    );
}
