//! Plan files whose every figure is checked (issue 36, items 4 to 8): `check --plan`
//! refuses a file whose totals, arena figures, lower bound, counts or `training` figures are
//! not the plan's own, and a training plan carries the graph it is a plan of (in the file,
//! or beside it with `--emit-graph FILE`), which `check --plan` verifies against.

mod common;

use std::path::{Path, PathBuf};

use common::{graph, memplan, stderr, stdout};
use serde_json::Value;

fn scratch(test: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("memplan-cli-figures-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A small model trained in f16: three parameters (`w1 f16[8,16]`, `b1 f16[16]`,
/// `w2 f16[16,8]`).
const F16_MLP: &str = r#"{
"name": "f16_mlp",
"tensors": [
{"name":"x","dtype":"f16","shape":[4,8],"kind":"input"},
{"name":"w1","dtype":"f16","shape":[8,16],"kind":"weight"},
{"name":"b1","dtype":"f16","shape":[16],"kind":"weight"},
{"name":"w2","dtype":"f16","shape":[16,8],"kind":"weight"},
{"name":"h","dtype":"f16","shape":[4,16],"kind":"activation"},
{"name":"hb","dtype":"f16","shape":[4,16],"kind":"activation"},
{"name":"r","dtype":"f16","shape":[4,16],"kind":"activation"},
{"name":"y","dtype":"f16","shape":[4,8],"kind":"output"}
],
"nodes": [
{"name":"mm1","op":"MatMul","inputs":["x","w1"],"outputs":["h"],"attrs":{}},
{"name":"add","op":"Add","inputs":["h","b1"],"outputs":["hb"],"attrs":{}},
{"name":"relu","op":"Relu","inputs":["hb"],"outputs":["r"],"attrs":{}},
{"name":"mm2","op":"MatMul","inputs":["r","w2"],"outputs":["y"],"attrs":{}}
]
}"#;

fn write(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `check MODEL --plan FILE`: the exit code and what it printed.
fn check(model: &str, plan: &Path) -> (Option<i32>, String) {
    let o = memplan(&["check", model, "--plan", plan.to_str().unwrap(), "-q"]);
    (o.status.code(), format!("{}{}", stdout(&o), stderr(&o)))
}

#[test]
fn a_total_that_is_not_the_plans_is_refused() {
    let dir = scratch("total");
    let g = graph("json/gpt2_b1.json");
    let plan = dir.join("plan.json");
    let o = memplan(&["plan", &g, "--format", "json", "-o", plan.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(check(&g, &plan).0, Some(0));
    let v = read(&plan);
    let total = v["total_bytes"].as_u64().unwrap();
    assert_eq!(
        total,
        v["arena_bytes"].as_u64().unwrap() + v["weight_bytes"].as_u64().unwrap()
    );
    let edited = dir.join("edited.json");
    for bad in [1, 0, total - 1, total + 1] {
        let mut e = v.clone();
        e["total_bytes"] = bad.into();
        write(&edited, &e);
        let (code, text) = check(&g, &edited);
        assert_eq!(code, Some(2), "{bad}: {text}");
        assert!(
            text.contains(&format!(
                "total_bytes is {bad}, but its plan makes it {total}"
            )),
            "{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_plans_own_figures_are_checked() {
    let dir = scratch("figures");
    let g = graph("json/light_squeezenet_b1.json");
    let plan = dir.join("plan.json");
    let o = memplan(&["plan", &g, "--format", "json", "-o", plan.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = read(&plan);
    let edited = dir.join("edited.json");
    let arena = v["arena_bytes"].as_u64().unwrap();
    // The lower bound above the arena (issue 36, item 7), and below what the plan makes.
    for (path, value) in [
        ("/lower_bound_bytes", arena + 1),
        ("/lower_bound_bytes", 1),
        ("/naive_bytes", 1),
        ("/stats/views", 999),
        ("/stats/inplace", 1000),
        ("/stats/storages", 1),
        ("/stats/unaliased_lower_bound", 5),
        ("/stats/peak", 5),
        ("/stats/any_order_bound", arena * 2),
    ] {
        let mut e = v.clone();
        *e.pointer_mut(path).unwrap() = value.into();
        write(&edited, &e);
        let (code, text) = check(&g, &edited);
        assert_eq!(code, Some(1), "{path}={value}: {text}");
        let key = path.trim_start_matches('/').replace('/', ".");
        assert!(
            text.contains(&key) || text.contains("lower bound"),
            "{path}: {text}"
        );
    }
    // The arena and weight figures, with the totals that add them up edited to match.
    for key in ["arena_bytes", "weight_bytes"] {
        let mut e = v.clone();
        let was = e[key].as_u64().unwrap();
        e[key] = (was + 256).into();
        e["total_bytes"] = (v["total_bytes"].as_u64().unwrap() + 256).into();
        write(&edited, &e);
        let (code, text) = check(&g, &edited);
        assert_eq!(code, Some(1), "{key}: {text}");
        assert!(
            text.contains(&format!("{key} is {}", was + 256)),
            "{key}: {text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_training_figure_is_the_derived_steps() {
    let dir = scratch("training");
    let model = dir.join("f16_mlp.json");
    std::fs::write(&model, F16_MLP).unwrap();
    let model = model.to_str().unwrap().to_owned();
    let plan = dir.join("plan.json");
    let o = memplan(&[
        "plan",
        &model,
        "--training",
        "adamw",
        "--loss",
        "mse",
        // Gradients kept in their own region (without it they are transient, in the arena).
        "--accumulate",
        "--format",
        "json",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(check(&model, &plan).0, Some(0));
    let v = read(&plan);
    let t = &v["training"];
    // Three f16 parameters: 544 bytes of gradients (f16), f32 moments and master weights
    // (3 x 4 bytes an element, 272 elements).
    assert_eq!(t["parameters"], 3);
    assert_eq!(t["parameter_elements"], 272);
    assert_eq!(t["gradient_bytes"], 544);
    assert_eq!(t["optimizer_state_bytes"], 3264);
    let edited = dir.join("edited.json");
    // Both names of the total edited to 0, then one alone: each is named as what it is.
    let total = v["total_bytes"].as_u64().unwrap();
    let mut e = v.clone();
    e["total_bytes"] = 0.into();
    e["total_device_bytes"] = 0.into();
    write(&edited, &e);
    let (code, text) = check(&model, &edited);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains(&format!("total_bytes is 0, but its plan makes it {total}")),
        "{text}"
    );
    let mut e = v.clone();
    e["total_device_bytes"] = 7.into();
    write(&edited, &e);
    let (code, text) = check(&model, &edited);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains(&format!(
            "total_device_bytes is 7, but its plan makes it {total}"
        )),
        "{text}"
    );
    // Every figure of the `training` object.
    let figures = [
        "parameters",
        "parameter_elements",
        "saved_bytes",
        "weight_bytes",
        "gradient_bytes",
        "optimizer_state_bytes",
        "persistent_bytes",
    ];
    let mut refused = 0;
    for key in figures {
        for bad in [0u64, 1] {
            let mut e = v.clone();
            if e["training"][key] == bad {
                continue;
            }
            e["training"][key] = bad.into();
            write(&edited, &e);
            let (code, text) = check(&model, &edited);
            assert_eq!(code, Some(2), "training.{key}={bad}: {text}");
            assert!(text.contains(&format!("training.{key}")), "{text}");
            refused += 1;
        }
    }
    for (path, value) in [
        ("/training/recompute/nodes", Value::from(3)),
        ("/training/recompute/flops", Value::from(1)),
        ("/training/recompute/forward_flops", Value::from(0)),
        ("/training/phases/backward", serde_json::json!([0, 1])),
        ("/training/checkpoints", serde_json::json!(["mm1"])),
        ("/training/fused_optimizer", Value::from(true)),
        ("/training/optimizer", Value::from("sgd")),
        ("/training/master_weights", Value::from(false)),
    ] {
        let mut e = v.clone();
        *e.pointer_mut(path).unwrap() = value;
        write(&edited, &e);
        let (code, text) = check(&model, &edited);
        assert_eq!(code, Some(2), "{path}: {text}");
        refused += 1;
    }
    assert!(refused >= 20, "{refused}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_training_plan_carries_its_step_graph() {
    let dir = scratch("step-graph");
    let model = dir.join("f16_mlp.json");
    std::fs::write(&model, F16_MLP).unwrap();
    let model = model.to_str().unwrap().to_owned();
    let plan = dir.join("plan.json");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["plan", &model, "--training", "sgd", "--format", "json"]
            .map(str::to_owned)
            .to_vec();
        a.extend(extra.iter().map(|s| (*s).to_owned()));
        a
    };
    let run = |a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        memplan(&refs)
    };
    let o = run(args(&["-o", plan.to_str().unwrap()]));
    assert!(o.status.success(), "{}", stderr(&o));
    let v = read(&plan);
    let step = &v["step_graph"];
    assert_eq!(step["name"], "f16_mlp.train");
    let nodes = step["nodes"].as_array().unwrap();
    assert!(
        nodes
            .iter()
            .any(|n| n["op"] == "memplan.SGD" && n["inputs"][0] == "w1"),
        "{step}"
    );
    // Checked with the model (derived again, compared), and with no graph at all: an
    // outside checker needs only the file.
    assert_eq!(check(&model, &plan).0, Some(0));
    let o = memplan(&["check", "--plan", plan.to_str().unwrap(), "-q"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    // A step graph that is not the model's: refused with the model.
    let mut e = v.clone();
    let grad = e["step_graph"]["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|n| n["op"] == "com.microsoft.ReluGrad")
        .unwrap();
    grad["inputs"][1] = "hb".into();
    let edited = dir.join("edited.json");
    write(&edited, &e);
    let (code, text) = check(&model, &edited);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("step graph"), "{text}");
    // Beside the file: `--emit-graph FILE` writes the graph and the file names it with its
    // digest; `check STEP --plan FILE` checks against it, and so does the model.
    let beside = dir.join("step.json");
    let plan2 = dir.join("plan2.json");
    let o = run(args(&[
        "-o",
        plan2.to_str().unwrap(),
        "--emit-graph",
        beside.to_str().unwrap(),
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    let v2 = read(&plan2);
    assert!(
        v2["step_graph"]["fnv1a64"].as_str().is_some(),
        "{}",
        v2["step_graph"]
    );
    assert_eq!(read(&beside)["name"], "f16_mlp.train");
    assert_eq!(check(beside.to_str().unwrap(), &plan2).0, Some(0));
    assert_eq!(check(&model, &plan2).0, Some(0));
    // An edited graph beside the file no longer has the recorded digest.
    let mut g = read(&beside);
    g["nodes"][0]["name"] = "renamed".into();
    write(&beside, &g);
    let (code, text) = check(beside.to_str().unwrap(), &plan2);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("digest"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
