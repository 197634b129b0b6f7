//! The XLA graphs (`testdata/xla`): JAX programs compiled by XLA on the CPU, converted from
//! XLA's scheduled HLO, each in XLA's default order (`NAME.json`) and in its
//! memory-optimized order (`NAME_xlamem.json`). `xla_peaks.csv` holds XLA's own peak of live
//! bytes on each order, measured from XLA's dump by `tools/xla_peak.py` (no memplan code).
//!
//! Planned as `memplan plan G --caller-inputs --caller-outputs --align 64` plans them:
//! - in XLA's own order, memplan's arena is XLA's peak, less the padding of the top buffer
//!   (XLA's figure rounds every buffer up to 64 bytes): the two agree on what is live when;
//! - with `--schedule memory`, the arena is at or below the lower of XLA's two orders on
//!   every graph, whichever of XLA's orders the graph comes in, and never below the
//!   any-order bound; the two arenas are within 2% of each other;
//! - on a window of a bf16 ResNet-50 training step (`testdata/xla/windows`), where placement
//!   misses the best order's peak, the memory schedule's arena is not above the given
//!   order's. Every plan passes the verifier.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use memplan_ir::Graph;
use memplan_ir::GraphError as _;
use memplan_planner::{PlanOptions, ScheduleMode, plan_graph, verify_plan};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/xla/graphs")
}

/// Graph name -> (XLA default order's peak, XLA memory-optimized order's peak).
fn xla_peaks() -> BTreeMap<String, (u64, u64)> {
    common::csv::two_columns(
        &dir().join("xla_peaks.csv"),
        "xla_default_peak_bytes",
        "xla_memopt_peak_bytes",
    )
}

fn caller_owned() -> PlanOptions {
    PlanOptions::default()
        .with_inputs_in_arena(false)
        .with_outputs_in_arena(false)
        .with_alignment(64)
        .with_fold_weights(false)
}

#[test]
fn memplan_packs_xla_s_own_order_at_xla_s_peak() {
    let peaks = xla_peaks();
    assert!(peaks.len() >= 20, "{} graphs", peaks.len());
    let files = peaks.iter().flat_map(|(name, &(default, memopt))| {
        [(name.clone(), default), (format!("{name}_xlamem"), memopt)]
    });
    common::fixtures::each(files, |file, xla| {
        let graph = Graph::load_json(&dir().join(format!("{file}.json"))).unwrap();
        let plan = plan_graph(&graph, &caller_owned()).unwrap();
        verify_plan(&graph, &plan).unwrap_or_else(|e| panic!("{file}: {}", e.with_graph(&graph)));
        // XLA's figure rounds every buffer up to 64 bytes; memplan's arena ends where
        // its top buffer does, so it may end up to 63 bytes lower.
        let arena = plan.arena_bytes;
        assert!(
            arena <= xla && xla - arena < 64,
            "{file}: arena {arena}, XLA {xla}"
        );
    });
}

#[test]
fn the_memory_schedule_is_at_or_below_xla_s_best_order() {
    let options = caller_owned().with_schedule(ScheduleMode::Memory);
    let files = xla_peaks()
        .into_iter()
        .flat_map(|(name, (default, memopt))| {
            let best = default.min(memopt);
            [(name.clone(), best), (format!("{name}_xlamem"), best)]
        });
    common::fixtures::each(files, |file, best| {
        let graph = Graph::load_json(&dir().join(format!("{file}.json"))).unwrap();
        let plan = plan_graph(&graph, &options).unwrap();
        verify_plan(&graph, &plan).unwrap_or_else(|e| panic!("{file}: {}", e.with_graph(&graph)));
        let choice = &plan.stats.schedule;
        assert!(
            plan.arena_bytes <= best,
            "{file}: {} above XLA's best {best} ({choice:?})",
            plan.arena_bytes
        );
        assert!(choice.any_order_bound <= choice.peak, "{file}: {choice:?}");
        assert!(choice.peak <= choice.given_peak, "{file}");
    });
}

/// The memory schedule's arena of XLA's graph `name` in both of XLA's orders.
fn both_orders(name: &str, options: &PlanOptions) -> (u64, u64) {
    let arena = |file: String| {
        let graph = Graph::load_json(&dir().join(format!("{file}.json"))).unwrap();
        let plan = plan_graph(&graph, options).unwrap();
        verify_plan(&graph, &plan).unwrap_or_else(|e| panic!("{file}: {}", e.with_graph(&graph)));
        plan.arena_bytes
    };
    (arena(name.to_owned()), arena(format!("{name}_xlamem")))
}

/// Every algorithm of the portfolio breaks ties by node index, so the given numbering
/// steered them: tfm_policy_train_adam came to 162.10 MiB from XLA's default order and
/// 182.19 from its memory-optimized one, hourglass4_train_f16 to 71.61 and 79.07. With the
/// portfolio run over other numberings too, the order the graph comes in matters little.
#[test]
fn the_memory_schedule_hardly_depends_on_which_of_xla_s_orders_comes_in() {
    let options = caller_owned().with_schedule(ScheduleMode::Memory);
    common::fixtures::each(xla_peaks(), |name, _| {
        let (default, memopt) = both_orders(&name, &options);
        let (lo, hi) = (default.min(memopt), default.max(memopt));
        assert!(
            hi - lo <= lo / 50,
            "{name}: {default} from XLA's default order, {memopt} from its memory-optimized one"
        );
    });
}

/// A window of resnet50_train_bf16 in XLA's memory-optimized order (nodes 551 to 1392, cut
/// by `tools/window.py --shrink`): the portfolio's lowest peak (13.86 MB) packed at 14.90 MB
/// where the given order (peak 14.61 MB) packs at its peak, so the plan kept an order whose
/// arena was 1.9% above the given one's. Now the given order and a few runners-up are
/// placed too where placement misses the winner's peak.
#[test]
fn the_memory_schedule_s_arena_is_not_above_the_given_order_s() {
    let path = dir().join("../windows/resnet50_train_bf16_xlamem_551_1393.json");
    let graph = Graph::load_json(&path).unwrap();
    let given = plan_graph(&graph, &caller_owned()).unwrap();
    let options = caller_owned().with_schedule(ScheduleMode::Memory);
    let plan = plan_graph(&graph, &options).unwrap();
    for p in [&given, &plan] {
        verify_plan(&graph, p).unwrap_or_else(|e| panic!("{}", e.with_graph(&graph)));
    }
    let choice = &plan.stats.schedule;
    // The case this is about: some order's peak is below the given order's arena.
    assert!(
        choice.candidates.iter().map(|c| c.peak).min() < Some(given.arena_bytes),
        "{choice:?}"
    );
    assert!(
        plan.arena_bytes <= given.arena_bytes,
        "{} above the given order's {} ({choice:?})",
        plan.arena_bytes,
        given.arena_bytes
    );
    assert!(choice.peak <= choice.given_peak);
    assert_eq!(choice.peak, plan.lower_bound_bytes);
}
