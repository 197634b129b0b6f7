//! Helpers shared by the planner's integration tests (and, by path, by cuda-arena's tests
//! and the planner's fuzz target).

#![allow(dead_code, reason = "each test binary uses part of the shared helpers")]

pub mod body_updates;
pub mod csv;
pub mod digest;
pub mod fixtures;
pub mod mutants;
pub mod random_graph;

use memplan_ir::{Graph, GraphError as _};
use memplan_planner::{Plan, PlanOptions, plan_graph, verify_plan};

/// Plans `graph` and checks the plan with the verifier, panicking with the graph's names on
/// either failure.
pub fn plan_ok(graph: &Graph, options: &PlanOptions) -> Plan {
    let plan =
        plan_graph(graph, options).unwrap_or_else(|e| panic!("planning {}: {e}", graph.name));
    if let Err(problems) = verify_plan(graph, &plan) {
        panic!(
            "plan of {} fails the verifier: {}",
            graph.name,
            problems.with_graph(graph)
        );
    }
    let figures = memplan_planner::verify_plan_figures(graph, &plan);
    assert!(
        figures.is_empty(),
        "plan of {}: figures not its own: {figures:?}",
        graph.name
    );
    plan
}
