//! Helpers shared by the planner's integration tests.

pub mod random_graph;
