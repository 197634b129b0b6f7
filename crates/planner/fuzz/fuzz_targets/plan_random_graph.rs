//! Fuzzes the graph planner: the bytes build a graph with views, slices, splits (sub-byte
//! too), broadcasting, repeated inputs, multi-output ops and odd graph inputs and outputs
//! (the generator of `crates/planner/tests/plan_random.rs`), the first byte picks the
//! options; planning never fails or panics, and every plan passes the independent verifier.
//! Run with `cargo fuzz run plan_random_graph` from `crates/planner`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use memplan_ir::GraphError as _;
use memplan_planner::{plan_graph, verify_plan};

#[path = "../../tests/common/random_graph.rs"]
mod random_graph;

fuzz_target!(|bytes: &[u8]| {
    let Some((&option_byte, rest)) = bytes.split_first() else {
        return;
    };
    let graph = random_graph::graph_from_bytes(rest);
    let options = random_graph::options_from_byte(option_byte);
    let plan = plan_graph(&graph, &options).expect("a valid graph is planned");
    if let Err(problems) = verify_plan(&graph, &plan) {
        panic!("{}", problems.with_graph(&graph));
    }
});
