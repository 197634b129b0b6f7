//! `memplan plan` end to end: formats, verification, atomic output, symbolic graphs, errors.

use std::path::{Path, PathBuf};

mod common;
use common::{graph, memplan, stderr, stdout};

/// A fresh scratch folder for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memplan-cli-plan-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn json_output_is_verified_written_atomically_and_deterministic() {
    let dir = scratch("json");
    let out = dir.join("plan.json");
    let g = graph("json/light_squeezenet_b1.json");
    let run = memplan(&[
        "plan",
        &g,
        "--format",
        "json",
        "--verify",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stdout(&run).is_empty());
    let plan = read_json(&out);
    let keys: Vec<&str> = plan
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "produced_by",
            "graph",
            "arena_bytes",
            "lower_bound_bytes",
            "naive_bytes",
            "weight_bytes",
            "caller_input_bytes",
            "caller_output_bytes",
            "total_bytes",
            "alignment",
            "settings",
            "schedule",
            "buffers",
            "weights",
            "stats"
        ]
    );
    assert_eq!(plan["graph"], "light_squeezenet_b1");
    assert_eq!(plan["schedule"].as_array().unwrap().len(), 66);
    let arena = plan["arena_bytes"].as_u64().unwrap();
    assert!(arena >= plan["lower_bound_bytes"].as_u64().unwrap());
    // No temporary file is left behind.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);

    let again = memplan(&["plan", &g, "--format", "json"]);
    assert_eq!(stdout(&again), std::fs::read_to_string(&out).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_graph_it_plans_the_embedded_network() {
    let run = memplan(&["plan", "--verify"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stderr(&run).contains("light_densenet121_b1"));
    let text = stdout(&run);
    assert!(
        text.contains("graph light_densenet121_b1: 668 nodes"),
        "{text}"
    );
    assert!(text.contains("verified"), "{text}");
}

#[test]
fn aliasing_switches_and_the_memory_schedule_take_effect() {
    let g = graph("json/light_shufflenet_b1.json");
    let plain = memplan(&[
        "plan",
        &g,
        "--format",
        "json",
        "--no-inplace",
        "--no-views",
        "--no-concat-elision",
        "--align",
        "64",
    ]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&plain)).unwrap();
    let buffers = plan["buffers"].as_array().unwrap();
    assert!(
        buffers
            .iter()
            .all(|b| b["alias"].is_null() && b["alias_of"].is_null())
    );
    assert!(
        buffers
            .iter()
            .all(|b| b["offset"].as_u64().unwrap() % 64 == 0)
    );

    let memory = memplan(&["plan", &g, "--schedule", "memory", "--verify"]);
    assert!(memory.status.success(), "{}", stderr(&memory));
    assert!(
        stdout(&memory).contains("schedule         memory-aware search"),
        "{}",
        stdout(&memory)
    );
}

#[test]
fn symbolic_graphs_need_their_dims() {
    let g = graph("dynamic/json/bert_base.json");
    let run = memplan(&["plan", &g]);
    assert_eq!(run.status.code(), Some(2));
    let err = stderr(&run);
    assert!(
        err.contains("batch") && err.contains("seq") && err.contains("--dim"),
        "{err}"
    );

    let run = memplan(&[
        "plan", &g, "--dim", "batch=2", "--dim", "seq=16", "--verify",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stdout(&run).contains("graph bert_base"));

    let run = memplan(&["plan", &g, "--dim", "heads=2"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("heads"), "{}", stderr(&run));
}

#[test]
fn an_error_leaves_an_existing_output_untouched() {
    let dir = scratch("untouched");
    let out = dir.join("plan.json");
    std::fs::write(&out, "previous contents").unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"name": "bad", "tensors": [], "nodes": [{"name": "n", "op": "Relu", "inputs": ["nope"], "outputs": []}]}"#).unwrap();
    let run = memplan(&["plan", bad.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("nope"), "{}", stderr(&run));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous contents");

    let missing_dir = dir.join("no/such/dir/plan.json");
    let g = graph("json/light_squeezenet_b1.json");
    let run = memplan(&["plan", &g, "-o", missing_dir.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2));
    assert!(!missing_dir.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_options_are_clear_errors() {
    let g = graph("json/light_squeezenet_b1.json");
    let run = memplan(&["plan", &g, "--align", "48"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("power of two"), "{}", stderr(&run));

    let run = memplan(&["plan", &g, "--strategy", "bogus"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("greedy-size"), "{}", stderr(&run));

    let run = memplan(&[
        "plan",
        &g,
        "--strategy",
        "greedy-breadth",
        "--format",
        "text",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(
        stdout(&run).contains("placement        greedy-breadth"),
        "{}",
        stdout(&run)
    );
}
