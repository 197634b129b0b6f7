//! `memplan plan|check|fit MODEL --training ...` and ONNX Runtime's training graphs at the
//! command line: the plan JSON's `training` object, the report, the pictures' phases, the
//! pattern check of a training step and of its plan file read back, a budget below the
//! least, persistent inputs, the optimizer graph sized from the parameters, and bad input.

mod common;

use common::{memplan, stderr, stdout};

fn model(name: &str, file: &str) -> String {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/training");
    root.join(name).join(file).to_string_lossy().into_owned()
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(&stdout(out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

#[test]
fn the_plan_json_has_a_training_object_and_adds_up() {
    let cnn = model("cnn", "forward.onnx");
    let args = [
        "plan",
        &cnn,
        "--dim",
        "batch=4",
        "--training",
        "adamw",
        // Gradients are transient without it; with it they have a persistent region.
        "--accumulate",
        "--format",
        "json",
    ];
    let out = memplan(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    // Deterministic.
    assert_eq!(out.stdout, memplan(&args).stdout);
    let v = json(&out);
    let t = &v["training"];
    for key in [
        "optimizer",
        "saved_bytes",
        "gradient_bytes",
        "optimizer_state_bytes",
        "persistent_bytes",
        "recompute",
    ] {
        assert!(!t[key].is_null(), "no {key}: {t}");
    }
    for key in ["nodes", "flops", "forward_flops"] {
        assert!(t["recompute"][key].is_u64(), "{key}");
    }
    assert_eq!(t["optimizer"], "adamw");
    let get = |k: &str| v[k].as_u64().unwrap();
    // total = arena + persistent + caller-owned.
    assert_eq!(t["persistent_bytes"].as_u64(), Some(get("weight_bytes")));
    assert_eq!(
        get("total_bytes"),
        get("arena_bytes")
            + get("weight_bytes")
            + get("caller_input_bytes")
            + get("caller_output_bytes")
    );
    let parts = t["weight_bytes"].as_u64().unwrap()
        + t["gradient_bytes"].as_u64().unwrap()
        + t["optimizer_state_bytes"].as_u64().unwrap();
    assert!(parts <= get("weight_bytes") && get("weight_bytes") - parts < 64 * 256);
    assert_eq!(
        t["optimizer_state_bytes"].as_u64().unwrap(),
        2 * t["gradient_bytes"].as_u64().unwrap()
    );
    // The phases cover the schedule in order.
    let steps = v["schedule"].as_array().unwrap().len() as u64;
    let p = &t["phases"];
    assert_eq!(p["forward"][0], 0);
    assert_eq!(p["optimizer"][1].as_u64(), Some(steps - 1));
}

#[test]
fn the_report_and_pictures_show_the_breakdown_and_phases() {
    let mlp = model("mlp", "forward.onnx");
    let dir = std::env::temp_dir().join(format!("memplan-training-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("step.svg");
    let html = dir.join("step.html");
    let out = memplan(&[
        "plan",
        &mlp,
        "--dim",
        "batch=8",
        "--training",
        "momentum",
        "--svg",
        svg.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "+ persistent",
        "training step: momentum",
        "+ gradients",
        "+ optimizer state",
        "velocity per parameter",
        "saved",
        "recompute",
        "phases           forward 0-",
        "verified",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
    // Steps as `0-5`, as everywhere else a person reads them, never `0..=5`.
    assert!(!text.contains("..="), "{text}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(!svg.contains("..="), "the phase titles say steps as `a-b`");
    for phase in ["forward", "backward", "optimizer"] {
        assert!(svg.contains(&format!(r#"data-phase="{phase}""#)), "{phase}");
    }
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(html.contains(r#""phases":[["forward",0,"#), "html phases");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn training_steps_and_their_plan_files_pass_the_pattern_check() {
    let transformer = model("transformer", "forward.onnx");
    for extra in [
        &["--checkpoint", "every:5"][..],
        &["--fused-optimizer", "--schedule", "memory"],
    ] {
        let mut args = vec![
            "check",
            &transformer,
            "--dim",
            "batch=2",
            "--training",
            "adamw",
            "--check-weights",
        ];
        args.extend_from_slice(extra);
        let out = memplan(&args);
        assert!(
            out.status.success(),
            "{extra:?}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        assert!(stdout(&out).contains("ok: no live tensor was clobbered"));
    }
    let dir = std::env::temp_dir().join(format!("memplan-training-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    let out = memplan(&[
        "plan",
        &transformer,
        "--dim",
        "batch=2",
        "--training",
        "sgd",
        "--checkpoint",
        "auto",
        // Between the least memory any checkpointing reaches (15.9 MB) and the step without
        // recomputation (17.2 MB, transient gradients), so something must be recomputed.
        "--budget",
        "16500000",
        "--format",
        "json",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert!(recorded["training"]["recompute"]["nodes"].as_u64().unwrap() > 0);
    assert!(
        !recorded["training"]["checkpoints"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let check_plan = |file: &std::path::Path| {
        memplan(&[
            "check",
            &transformer,
            "--dim",
            "batch=2",
            "--plan",
            file.to_str().unwrap(),
        ])
    };
    let read_plan = || -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap()
    };
    let out = check_plan(&plan);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    // The total's two names must agree: a file that edits one is refused as unreadable.
    let mut v = read_plan();
    let total = v["total_bytes"].as_u64().unwrap();
    assert_eq!(v["total_device_bytes"].as_u64(), Some(total));
    v["total_device_bytes"] = serde_json::json!(total - 1);
    let edited = dir.join("edited.json");
    std::fs::write(&edited, serde_json::to_string(&v).unwrap()).unwrap();
    let out = check_plan(&edited);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("total_device_bytes"), "{err}");
    // A hand-broken plan file is caught: every buffer moved onto the first one's bytes.
    let mut v = read_plan();
    let buffers = v["buffers"].as_array_mut().unwrap();
    for b in buffers.iter_mut() {
        b["offset"] = serde_json::json!(0);
    }
    std::fs::write(&edited, serde_json::to_string(&v).unwrap()).unwrap();
    let out = check_plan(&edited);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("UNSAFE"), "{}", stdout(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_budget_below_the_least_names_the_least_and_exits_1() {
    let transformer = model("transformer", "forward.onnx");
    let out = memplan(&[
        "plan",
        &transformer,
        "--dim",
        "batch=2",
        "--training",
        "adamw",
        "--checkpoint",
        "auto",
        "--budget",
        "1MiB",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("the least memory found is"), "{err}");
    // Without a budget, auto is a usage error.
    let out = memplan(&[
        "plan",
        &transformer,
        "--dim",
        "batch=2",
        "--training",
        "adamw",
        "--checkpoint",
        "auto",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--checkpoint auto needs --budget"));
}

#[test]
fn onnx_runtime_graphs_keep_parameters_persistent() {
    let vit = model("mlp", "training_model.onnx");
    let out = memplan(&["plan", &vit, "--dim", "batch=8", "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("12 graph inputs are training state"),
        "{}",
        stderr(&out)
    );
    let v = json(&out);
    let in_arena: Vec<&str> = v["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["tensor"].as_str())
        .collect();
    let persistent: Vec<&str> = v["weights"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["tensor"].as_str())
        .collect();
    for name in [
        "fc0.weight",
        "fc0.weight_grad.accumulation.buffer",
        "fc2.bias",
    ] {
        assert!(
            persistent.contains(&name) && !in_arena.contains(&name),
            "{name}"
        );
    }
    // --persistent names more; a pattern that matches nothing is an error.
    let out = memplan(&[
        "plan",
        &vit,
        "--dim",
        "batch=8",
        "--persistent",
        "lazy_*",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(r#"{"tensor":"lazy_reset_grad""#));
    let out = memplan(&["plan", &vit, "--dim", "batch=8", "--persistent", "nothing*"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("pattern `nothing*` matches no graph input")
            && stderr(&out).contains("(the pattern given to --persistent)"),
        "{}",
        stderr(&out)
    );
    // The pattern check runs ORT's step clean.
    let out = memplan(&["check", &vit, "--dim", "batch=8", "--check-weights"]);
    assert!(out.status.success(), "{}", stdout(&out));
}

#[test]
fn the_optimizer_graph_is_sized_from_the_parameters() {
    let opt = model("mlp", "optimizer_model.onnx");
    let train = model("mlp", "training_model.onnx");
    let out = memplan(&["plan", &opt, "--parameters", &train, "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    // Weights, gradients and two moments of 535,818 f32 elements each, aligned.
    let persistent = v["weight_bytes"].as_u64().unwrap();
    let params = 535_818 * 4;
    assert!(
        persistent >= 4 * params && persistent < 4 * params + 4 * 256,
        "{persistent}"
    );
    // Or bound by hand.
    let out = memplan(&[
        "plan",
        &opt,
        "--dim",
        "params_len=1",
        "--dim",
        "params_item=10",
        "--dim",
        "gradients_len=1",
        "--dim",
        "gradients_item=10",
        "--dim",
        "first_order_moments_len=1",
        "--dim",
        "first_order_moments_item=10",
        "--dim",
        "second_order_moments_len=1",
        "--dim",
        "second_order_moments_item=10",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = memplan(&["plan", &opt]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("params_len"), "{}", stderr(&out));
}

#[test]
fn fit_finds_the_largest_batch_that_trains() {
    let mlp = model("transformer", "forward.onnx");
    let out = memplan(&[
        "fit",
        &mlp,
        "--training",
        "adamw",
        "--symbol",
        "batch",
        "--budget",
        "300MiB",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    let n = v["value"].as_u64().unwrap();
    let budget = 300u64 << 20;
    let fitted = v["total_bytes"].as_u64().unwrap();
    assert!(fitted <= budget);
    // The same vocabulary as every fit: the breakdown sums to the total, and N + 1 is over.
    let b = &v["breakdown"];
    assert_eq!(
        b["arena_bytes"].as_u64().unwrap()
            + b["persistent_bytes"].as_u64().unwrap()
            + b["caller_io_bytes"].as_u64().unwrap(),
        fitted
    );
    assert_eq!(v["next"]["value"].as_u64(), Some(n + 1));
    assert!(v["next"]["total_bytes"].as_u64().unwrap() > budget);
    // Checked by hand at N and N + 1.
    let total = |b: u64| {
        let out = memplan(&[
            "plan",
            &mlp,
            "--dim",
            &format!("batch={b}"),
            "--training",
            "adamw",
            "--format",
            "json",
        ]);
        json(&out)["total_bytes"].as_u64().unwrap()
    };
    assert!(total(n) <= budget && total(n + 1) > budget, "{n}");
    assert_eq!(total(n), fitted);
    // Recomputation fits a larger batch.
    let out = memplan(&[
        "fit",
        &mlp,
        "--training",
        "adamw",
        "--symbol",
        "batch",
        "--budget",
        "300MiB",
        "--checkpoint",
        "auto",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(json(&out)["value"].as_u64().unwrap() > n);
}

#[test]
fn bad_training_options_are_usage_errors() {
    let mlp = model("mlp", "forward.onnx");
    for (args, want) in [
        (vec!["--loss", "mse"], "go with --training"),
        (vec!["--training", "adagrad"], "unknown optimizer `adagrad`"),
        (
            vec!["--training", "sgd", "--checkpoint", "every:0"],
            "every:N needs N of 1 or more",
        ),
        (vec!["--training", "sgd", "--checkpoint", "nope"], "`nope`"),
        (
            vec!["--training", "sgd", "--loss", "hinge"],
            "unknown loss `hinge`",
        ),
        (
            vec!["--training", "sgd", "--budget", "1GiB"],
            "--budget goes with --checkpoint auto",
        ),
    ] {
        let mut all = vec!["plan", mlp.as_str(), "--dim", "batch=2"];
        all.extend(args.iter());
        let out = memplan(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
    }
}

/// A tied LM head (`Transpose` of the embedding) is computed from a trained parameter: it is
/// made on every step, not once at load, and the report says nothing is computed at load
/// (the training-state tensors in the persistent region are not "computed from weights").
#[test]
fn a_training_step_folds_nothing_computed_from_trained_parameters() {
    let gpt2 = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/pytorch/onnx/gpt2_dynamo18.onnx"
    );
    let args = [
        "plan",
        gpt2,
        "--dim",
        "batch=1",
        "--dim",
        "seq=16",
        "--training",
        "adamw",
    ];
    let out = memplan(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("+ persistent"), "{text}");
    assert!(!text.contains("computed once from weights"), "{text}");
    let mut with_json = args.to_vec();
    with_json.extend(["--format", "json"]);
    let v = json(&memplan(&with_json));
    let weights = v["weights"].as_array().unwrap();
    assert!(weights.iter().all(|w| w.get("computed_by").is_none()));
}

#[test]
fn auto_keeps_everything_when_it_fits_and_its_least_is_a_budget_that_fits() {
    // cnn_dense's DenseNet-style Concats are elided in the plan: what fits without
    // recomputation must be found to fit with them elided.
    for name in [
        "mlp",
        "cnn",
        "cnn_dense",
        "gelu_tanh",
        "lm_tied",
        "decomposed",
    ] {
        let f = model(name, "forward.onnx");
        let plan = |checkpoint: &[&str]| {
            let mut args = vec!["plan", &f, "--dim", "batch=8", "--training", "adamw"];
            args.extend(checkpoint);
            args.extend(["--format", "json"]);
            memplan(&args)
        };
        let none = plan(&["--checkpoint", "none"]);
        assert!(none.status.success(), "{name}: {}", stderr(&none));
        // A training step's file gives its total under both names, `total_bytes` (every
        // JSON's) and `total_device_bytes` (the training-step format's).
        let v = json(&none);
        assert_eq!(v["total_device_bytes"], v["total_bytes"], "{name}");
        let total = v["total_device_bytes"].as_u64().unwrap().to_string();
        let auto = plan(&["--checkpoint", "auto", "--budget", &total]);
        assert!(auto.status.success(), "{name}: {}", stderr(&auto));
        let v = json(&auto);
        assert_eq!(v["training"]["recompute"]["nodes"], 0, "{name}");
        assert_eq!(v["total_device_bytes"].as_u64().unwrap().to_string(), total);
        // The least memory a refusal names is a budget that fits, and one byte less is not.
        let least = |out: &std::process::Output| -> u64 {
            let err = stderr(out);
            assert_eq!(out.status.code(), Some(1), "{name}: {err}");
            let at = err.find("the least memory found is ").unwrap() + 26;
            err[at..].split(' ').next().unwrap().parse().unwrap()
        };
        let l = least(&plan(&["--checkpoint", "auto", "--budget", "1"]));
        let fits = plan(&["--checkpoint", "auto", "--budget", &l.to_string()]);
        assert!(fits.status.success(), "{name}: {}", stderr(&fits));
        assert!(json(&fits)["total_device_bytes"].as_u64().unwrap() <= l);
        let below = plan(&["--checkpoint", "auto", "--budget", &(l - 1).to_string()]);
        assert_eq!(least(&below), l, "{name}");
    }
}
