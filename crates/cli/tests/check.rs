//! `memplan check` end to end: clean plans in each planning mode, half-precision weights, a
//! plan file read back, a corrupted plan file (exit 1), and bad input (exit 2).

use std::path::PathBuf;

mod common;
use common::{memplan_at_root as memplan, stderr, stdout};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memplan-check-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

const SILERO: &str = "testdata/graphs/json/silero_vad_16k_b1.json";
const RESNET: &str = "testdata/graphs/json/light_resnet50_b1.json";

#[test]
fn a_planned_graph_holds_every_byte() {
    let o = memplan(&["check", SILERO]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    // Not a terminal: no progress bar.
    assert!(!stderr(&o).contains("steps checked"), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("graph silero_vad_16k_b1: 42 steps, 96 tensors"),
        "{text}"
    );
    assert!(text.contains("every byte"), "{text}");
    assert!(text.contains("ok: no live tensor was clobbered"), "{text}");
}

#[test]
fn the_embedded_graph_is_checked_without_a_file() {
    let o = memplan(&["check", "--sample", "65536"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("graph light_densenet121_b1: 668 steps"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("sampled"));
    assert!(stderr(&o).contains("embedded"));
}

#[test]
fn every_planning_mode_holds() {
    for extra in [
        &["--schedule", "memory"][..],
        &["--no-views", "--no-inplace"],
        &["--align", "64", "--strategy", "greedy-size"],
    ] {
        let mut args = vec!["check", RESNET];
        args.extend_from_slice(extra);
        let o = memplan(&args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{extra:?}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert!(
            stdout(&o).contains("ok: no live tensor was clobbered"),
            "{extra:?}"
        );
    }
}

#[test]
fn weights_are_checked_only_when_asked() {
    let o = memplan(&["check", SILERO]);
    assert!(
        stdout(&o).contains("weight reads skipped"),
        "{}",
        stdout(&o)
    );
    let o = memplan(&["check", SILERO, "--check-weights", "--strict"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        !stdout(&o).contains("weight reads skipped"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn half_weights_live_in_their_own_region() {
    let o = memplan(&["check", SILERO, "--half-weights", "bf16"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("half weights"), "{}", stdout(&o));
    assert!(stdout(&o).contains("BF16"), "{}", stdout(&o));
}

#[test]
fn a_plan_file_is_checked_and_a_corrupted_one_fails() {
    let plan = tmp("resnet.plan.json");
    let o = memplan(&[
        "plan",
        RESNET,
        "--no-views",
        "--no-inplace",
        "--format",
        "json",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = memplan(&["check", RESNET, "--plan", plan.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));

    // Every buffer at offset 0: the residual branches are overwritten while still live.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    for b in v["buffers"].as_array_mut().unwrap() {
        b["offset"] = serde_json::json!(0);
    }
    let bad = tmp("resnet.bad.json");
    std::fs::write(&bad, v.to_string()).unwrap();
    let o = memplan(&[
        "check",
        RESNET,
        "--plan",
        bad.to_str().unwrap(),
        "--max-report",
        "3",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    // 312 placement problems, and the arena no longer the end of the placement.
    assert!(
        text.contains("UNSAFE: the plan has 313 problems:"),
        "{text}"
    );
    assert!(text.contains("... and 310 more problems"), "{text}");
    assert!(text.contains("are both live at step"), "{text}");
    assert!(text.contains("CLOBBERED:"), "{text}");
    assert!(
        text.contains("reads t") && text.contains("overwritten by t"),
        "{text}"
    );
    assert!(text.contains("... and"), "{text}");
    // Its own files only: the folder is shared with the tests running beside it.
    let _ = std::fs::remove_file(&plan);
    let _ = std::fs::remove_file(&bad);
}

/// `check --format json` names the tensors and nodes of each problem by id (their index in
/// the graph file's lists) and name, line for line with the messages.
#[test]
fn json_findings_name_tensor_and_node_ids() {
    let plan = tmp("silero.findings.json");
    let o = memplan(&[
        "plan",
        SILERO,
        "--format",
        "json",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let graph: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(SILERO),
        )
        .unwrap(),
    )
    .unwrap();
    let tensors = graph["tensors"].as_array().unwrap();
    let nodes = graph["nodes"].as_array().unwrap();
    // The second scheduled node runs first: it reads a tensor before its producer runs.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    v["schedule"].as_array_mut().unwrap().swap(0, 1);
    let bad = tmp("silero.findings.bad.json");
    std::fs::write(&bad, v.to_string()).unwrap();
    let o = memplan(&[
        "check",
        SILERO,
        "--plan",
        bad.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let out: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let findings = out["verifier_findings"].as_array().unwrap();
    let messages = out["verifier_problems"].as_array().unwrap();
    assert!(!findings.is_empty());
    assert_eq!(findings.len(), messages.len());
    let mut saw_node = false;
    for (f, m) in findings.iter().zip(messages) {
        assert_eq!(&f["message"], m);
        let text = m.as_str().unwrap();
        for (list, all) in [(&f["tensors"], tensors), (&f["nodes"], nodes)] {
            for e in list.as_array().unwrap() {
                let id = e["id"].as_u64().unwrap() as usize;
                assert_eq!(all[id]["name"], e["name"], "{f}");
                let name = e["name"].as_str().unwrap();
                assert!(text.contains(&format!("`{name}`")), "{f}");
            }
        }
        saw_node |= text.contains("reads") && !f["nodes"].as_array().unwrap().is_empty();
    }
    assert!(saw_node, "{findings:?}");
    let clobbers = out["clobber_findings"].as_array().unwrap();
    assert_eq!(clobbers.len(), out["clobbered"].as_array().unwrap().len());
    for c in clobbers {
        for e in c["tensors"].as_array().unwrap() {
            let id = e["id"].as_u64().unwrap() as usize;
            assert_eq!(tensors[id]["name"], e["name"], "{c}");
        }
    }
    let _ = std::fs::remove_file(&plan);
    let _ = std::fs::remove_file(&bad);
}

#[test]
fn bad_input_exits_2() {
    let o = memplan(&["check", SILERO, "--align", "3"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a power of two"), "{}", stderr(&o));
    let o = memplan(&["check", "testdata/graphs/json/no_such_graph.json"]);
    assert_eq!(o.status.code(), Some(2));
    let o = memplan(&["check", SILERO, "--plan", "testdata/graphs/README.md"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("reading the plan"), "{}", stderr(&o));
}

/// A plan file records its alignment and policy: one made with `--align 1` is checked
/// without repeating the flag, and the verifier's verdict names tensors by name.
#[test]
fn a_plan_file_carries_its_own_settings() {
    let plan = tmp("silero.align1.json");
    let o = memplan(&[
        "plan",
        SILERO,
        "--align",
        "1",
        "--format",
        "json",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = memplan(&["check", SILERO, "--plan", plan.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));

    // The same plan claiming it was made without in-place writes: the verifier refuses the
    // in-place aliases it holds, by tensor name.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let inplace = v["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["alias"] == "inplace")
        .map(|b| b["tensor"].as_str().unwrap().to_owned())
        .expect("silero has an in-place write");
    v["settings"]["inplace"] = serde_json::json!(false);
    let bad = tmp("silero.policy.json");
    std::fs::write(&bad, v.to_string()).unwrap();
    let o = memplan(&["check", SILERO, "--plan", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(&format!("tensor `{inplace}` is aliased (inplace)")),
        "{text}"
    );
}

/// Planning options beside `--plan` are refused, naming them: the file records the settings
/// the plan was made with, and `check G --plan P --align 64` used to check P as made and
/// say nothing of the `--align 64` it dropped.
#[test]
fn planning_options_beside_a_plan_file_are_refused() {
    // A folder of its own: another test removes the shared one when it ends.
    let dir =
        std::env::temp_dir().join(format!("memplan-check-options-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("silero.json");
    let o = memplan(&[
        "plan",
        SILERO,
        "--format",
        "json",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let p = plan.to_str().unwrap();
    let o = memplan(&["check", SILERO, "--plan", p, "--align", "64"]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("--align"), "{}", stderr(&o));
    let o = memplan(&[
        "check",
        SILERO,
        "--plan",
        p,
        "--no-inplace",
        "--schedule",
        "memory",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--schedule, --no-inplace"),
        "{}",
        stderr(&o)
    );
    // What a plan file leaves open is still taken.
    let o = memplan(&["check", SILERO, "--plan", p, "--check-weights", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
