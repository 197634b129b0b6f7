//! Helpers shared by the planner's integration tests (and, by path, by cuda-arena's tests
//! and the planner's fuzz target).

#![allow(dead_code, reason = "each test binary uses part of the shared helpers")]

pub mod csv;
pub mod digest;
pub mod mutants;
pub mod random_graph;
