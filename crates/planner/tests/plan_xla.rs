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
//!   any-order bound. Every plan passes the verifier.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use memplan_ir::Graph;
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
    PlanOptions {
        inputs_in_arena: false,
        outputs_in_arena: false,
        alignment: 64,
        // XLA computes its broadcasts of constants on every run: compare like with like.
        fold_weights: false,
        ..PlanOptions::default()
    }
}

#[test]
fn memplan_packs_xla_s_own_order_at_xla_s_peak() {
    let peaks = xla_peaks();
    assert!(peaks.len() >= 20, "{} graphs", peaks.len());
    for (name, &(default, memopt)) in &peaks {
        for (file, xla) in [(name.clone(), default), (format!("{name}_xlamem"), memopt)] {
            let graph = Graph::load_json(&dir().join(format!("{file}.json"))).unwrap();
            let plan = plan_graph(&graph, &caller_owned()).unwrap();
            verify_plan(&graph, &plan).unwrap_or_else(|e| panic!("{file}: {e}"));
            // XLA's figure rounds every buffer up to 64 bytes; memplan's arena ends where
            // its top buffer does, so it may end up to 63 bytes lower.
            let arena = plan.arena_bytes;
            assert!(
                arena <= xla && xla - arena < 64,
                "{file}: arena {arena}, XLA {xla}"
            );
        }
    }
}

#[test]
fn the_memory_schedule_is_at_or_below_xla_s_best_order() {
    let options = PlanOptions {
        schedule: ScheduleMode::Memory,
        ..caller_owned()
    };
    for (name, &(default, memopt)) in &xla_peaks() {
        let best = default.min(memopt);
        for file in [name.clone(), format!("{name}_xlamem")] {
            let graph = Graph::load_json(&dir().join(format!("{file}.json"))).unwrap();
            let plan = plan_graph(&graph, &options).unwrap();
            verify_plan(&graph, &plan).unwrap_or_else(|e| panic!("{file}: {e}"));
            let choice = &plan.stats.schedule;
            assert!(
                plan.arena_bytes <= best,
                "{file}: {} above XLA's best {best} ({choice:?})",
                plan.arena_bytes
            );
            assert!(choice.any_order_bound <= choice.peak, "{file}: {choice:?}");
            assert!(choice.peak <= choice.given_peak, "{file}");
        }
    }
}
