//! Shared helpers for memplan's criterion benchmarks: locating the in-repo test data, and
//! training-shaped graphs ([`training_shaped`]).

use std::path::PathBuf;

pub mod training_shaped;

/// The repository's `testdata/` folder.
pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("testdata")
}

/// The JSON graphs in `testdata/<dir>` whose file name contains `filter`, by name, sorted.
pub fn load_graphs(dir: &str, filter: &str) -> Result<Vec<(String, memplan_ir::Graph)>, String> {
    let dir = testdata().join(dir);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let name = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.contains(filter) {
            let g =
                memplan_ir::Graph::load_json(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            out.push((name, g));
        }
    }
    Ok(out)
}

/// The options of XLA comparisons, as `memplan plan G --schedule memory --caller-inputs
/// --caller-outputs --align 64 --no-fold-weights` sets them: XLA computes its broadcasts of
/// constants on every run, so like is compared with like.
pub fn xla_options() -> memplan_planner::PlanOptions {
    memplan_planner::PlanOptions::default()
        .with_schedule(memplan_planner::ScheduleMode::Memory)
        .with_inputs_in_arena(false)
        .with_outputs_in_arena(false)
        .with_alignment(64)
        .with_fold_weights(false)
}
