//! `memplan fit`, `memplan estimate` and `memplan preflight` end to end: answers checked
//! against `memplan plan` at N and N + 1, ONNX and JSON agreeing, exit codes, human sizes,
//! bad input, deterministic output.

use std::path::PathBuf;
use std::process::Output;

mod common;
use common::{memplan, stderr, stdout};

fn testdata(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    root.join(name).to_string_lossy().into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(o), stderr(o)))
}

/// Arena + weight region of `memplan plan GRAPH --dim ...`, verified by the CLI.
fn planned_peak(graph: &str, dims: &[String]) -> u64 {
    let mut args = vec!["plan", graph, "--format", "json"];
    for d in dims {
        args.extend(["--dim", d.as_str()]);
    }
    let out = memplan(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan = json(&out);
    plan["arena_bytes"].as_u64().unwrap() + plan["weight_bytes"].as_u64().unwrap()
}

#[test]
fn fit_answer_is_checked_by_plan_at_n_and_n_plus_1() {
    for (model, dims, budget, budget_bytes) in [
        ("gpt2", vec!["seq=512"], "24GiB", 24u64 << 30),
        ("bert_base", vec!["seq=128"], "2GB", 2_000_000_000),
        ("vit_base_patch16_224", vec![], "1073741824", 1 << 30),
        ("smp_unet_resnet34", vec![], "3GiB", 3 << 30),
    ] {
        let mut answers = Vec::new();
        for ext in ["json", "onnx"] {
            let g = testdata(&format!("graphs/dynamic/{ext}/{model}.{ext}"));
            let mut args = vec!["fit", &g, "--symbol", "batch", "--budget", budget];
            for d in &dims {
                args.extend(["--dim", d]);
            }
            let text = memplan(&args);
            assert!(text.status.success(), "{model}: {}", stderr(&text));
            let first = stdout(&text).lines().next().unwrap().to_owned();
            args.extend(["--format", "json"]);
            let out = memplan(&args);
            assert!(out.status.success(), "{model}: {}", stderr(&out));
            let v = json(&out);
            let n = v["value"].as_u64().unwrap();
            assert_eq!(first, format!("batch = {n}"));
            assert_eq!(v["symbol"], "batch");
            assert_eq!(v["budget_bytes"].as_u64(), Some(budget_bytes));
            let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
            assert_eq!(
                keys,
                [
                    "symbol",
                    "value",
                    "budget_bytes",
                    "total_bytes",
                    "breakdown",
                    "next"
                ]
            );
            let with = |b: u64| {
                let mut d: Vec<String> = dims.iter().map(|s| s.to_string()).collect();
                d.push(format!("batch={b}"));
                planned_peak(&g, &d)
            };
            assert_eq!(with(n), v["total_bytes"].as_u64().unwrap(), "{model}.{ext}");
            assert!(with(n) <= budget_bytes, "{model}.{ext}");
            assert!(with(n + 1) > budget_bytes, "{model}.{ext}: {n} + 1 fits");
            // The breakdown at N and the planned total at N + 1 are in the JSON.
            let b = &v["breakdown"];
            assert_eq!(
                b["arena_bytes"].as_u64().unwrap() + b["weights_bytes"].as_u64().unwrap(),
                with(n)
            );
            assert_eq!(v["next"]["value"].as_u64(), Some(n + 1));
            assert_eq!(v["next"]["total_bytes"].as_u64(), Some(with(n + 1)));
            // Deterministic: the same bytes again.
            assert_eq!(memplan(&args).stdout, out.stdout);
            answers.push(n);
        }
        assert_eq!(answers[0], answers[1], "{model}: JSON and ONNX disagree");
    }
}

#[test]
fn fit_text_output_has_the_plan_summary() {
    let g = testdata("graphs/dynamic/json/gpt2.json");
    let out = memplan(&[
        "fit", &g, "--symbol", "seq", "--budget", "4GiB", "--dim", "batch=8",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    let first = lines.next().unwrap();
    assert!(first.starts_with("seq = "), "{text}");
    assert!(
        text.contains("device memory:") && text.contains("verified:"),
        "{text}"
    );
    assert!(text.contains("over the budget"), "{text}");
}

#[test]
fn fit_exit_codes() {
    let g = testdata("graphs/dynamic/json/gpt2.json");
    // Nothing fits: exit 3, with the smallest value's need.
    let out = memplan(&[
        "fit", &g, "--symbol", "batch", "--budget", "100MiB", "--dim", "seq=512",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("nothing fits: batch = 1 needs"),
        "{}",
        stdout(&out)
    );
    let out = memplan(&[
        "fit", &g, "--symbol", "batch", "--budget", "100MiB", "--dim", "seq=512", "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json(&out)["value"], serde_json::Value::Null);
    // Bad input: exit 2 with the reason.
    for (args, needle) in [
        (
            vec!["--symbol", "batch", "--budget", "24G", "--dim", "seq=8"],
            "ambiguous",
        ),
        (
            vec!["--symbol", "batch", "--budget", "lots", "--dim", "seq=8"],
            "lots",
        ),
        (
            vec!["--symbol", "heads", "--budget", "1GiB", "--dim", "seq=8"],
            "no symbol `heads`",
        ),
        (vec!["--symbol", "batch", "--budget", "1GiB"], "--dim seq=N"),
        (vec!["--symbol", "batch", "--dim", "seq=8"], "--budget"),
        (
            vec!["--symbol", "batch", "--budget", "1GiB", "--dim", "batch=2"],
            "leave it out",
        ),
        (
            vec!["--symbol", "batch", "--budget", "1GiB", "--batch", "2"],
            "--dim",
        ),
    ] {
        let mut a = vec!["fit", g.as_str()];
        a.extend(args);
        let out = memplan(&a);
        assert_eq!(out.status.code(), Some(2), "{a:?}: {}", stdout(&out));
        assert!(stderr(&out).contains(needle), "{a:?}: {}", stderr(&out));
    }
    // A static graph has no symbol to fit.
    let s = testdata("graphs/json/light_squeezenet_b1.json");
    let out = memplan(&["fit", &s, "--symbol", "batch", "--budget", "1GiB"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no symbolic dims"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn estimate_from_config_and_from_flags_agree() {
    let cfg = testdata("configs/llama-2-7b.json");
    let from_config = memplan(&[
        "estimate", "--config", &cfg, "--batch", "2", "--seq", "4096", "--dtype", "bf16",
        "--format", "json",
    ]);
    assert!(from_config.status.success(), "{}", stderr(&from_config));
    let from_flags = memplan(&[
        "estimate",
        "--arch",
        "llama",
        "--layers",
        "32",
        "--hidden",
        "4096",
        "--heads",
        "32",
        "--intermediate",
        "11008",
        "--vocab",
        "32000",
        "--batch",
        "2",
        "--seq",
        "4096",
        "--dtype",
        "bf16",
        "--format",
        "json",
    ]);
    assert!(from_flags.status.success(), "{}", stderr(&from_flags));
    assert_eq!(from_config.stdout, from_flags.stdout);
    let v = json(&from_config);
    assert_eq!(v["parameters"].as_u64(), Some(6_738_415_616));
    assert_eq!(v["kv_cache_bytes"].as_u64(), Some(4 << 30));
    let sum: u64 = [
        "weights_bytes",
        "kv_cache_bytes",
        "activation_bytes",
        "gradients_bytes",
        "optimizer_bytes",
    ]
    .iter()
    .map(|k| v[k].as_u64().unwrap())
    .sum();
    // The hf runtime's total is the step's peak, a moment: never more than every part at once.
    assert!(v["total_bytes"].as_u64().unwrap() <= sum, "{v}");
    // Training: mixed-precision AdamW is 16 bytes per parameter before activations.
    let train = json(&memplan(&[
        "estimate",
        "--config",
        &cfg,
        "--dtype",
        "bf16",
        "--training",
        "adamw",
        "--checkpointing",
        "--format",
        "json",
    ]));
    let p = train["parameters"].as_u64().unwrap();
    let state: u64 = ["weights_bytes", "gradients_bytes", "optimizer_bytes"]
        .iter()
        .map(|k| train[k].as_u64().unwrap())
        .sum();
    assert_eq!(state, 16 * p);
    let text = stdout(&memplan(&["estimate", "--config", &cfg]));
    assert!(text.contains("parameters:   6,738,415,616"), "{text}");
    assert!(
        text.contains("kv cache:") && text.contains("total:"),
        "{text}"
    );
}

#[test]
fn estimate_rejects_bad_configs_clearly() {
    let dir = std::env::temp_dir().join(format!("memplan-cli-estimate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (body, needle) in [
        (
            "{\"model_type\": \"llama\", \"hidden_size\": 64",
            "not valid JSON",
        ),
        (
            "{\"model_type\": \"t5\"}",
            "model_type `t5` is not supported",
        ),
        (
            "{\"model_type\": \"gpt2\", \"n_embd\": 768, \"n_layer\": \"12\"}",
            "`n_layer` must be a positive integer",
        ),
        (
            "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 3, \"intermediate_size\": 8, \"vocab_size\": 10}",
            "not a multiple of 3 attention heads",
        ),
    ] {
        let path = dir.join("config.json");
        std::fs::write(&path, body).unwrap();
        let out = memplan(&["estimate", "--config", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{body}");
        assert!(stderr(&out).contains(needle), "{body}: {}", stderr(&out));
        assert!(stdout(&out).is_empty());
    }
    let out = memplan(&["estimate", "--config", "/nonexistent/config.json"]);
    assert_eq!(out.status.code(), Some(2));
    let out = memplan(&["estimate", "--layers", "2", "--hidden", "64"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--heads is required"),
        "{}",
        stderr(&out)
    );
    let cfg = testdata("configs/gpt2.json");
    let out = memplan(&[
        "estimate",
        "--config",
        &cfg,
        "--batch",
        "18446744073709551615",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("overflows"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fit_from_a_config() {
    let cfg = testdata("configs/mistral-7b.json");
    let args = [
        "fit", "--config", &cfg, "--symbol", "batch", "--budget", "80GiB", "--seq", "4096",
        "--dtype", "f16", "--flash", "--format", "json",
    ];
    let out = memplan(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    let n = v["value"].as_u64().unwrap();
    assert!(v["total_bytes"].as_u64().unwrap() <= 80 << 30);
    // The estimate at N is within the budget, at N + 1 it is not.
    let total = |b: u64| {
        let b = b.to_string();
        json(&memplan(&[
            "estimate", "--config", &cfg, "--batch", &b, "--seq", "4096", "--dtype", "f16",
            "--flash", "--format", "json",
        ]))["reserved_bytes"]
            .as_u64()
            .unwrap()
    };
    // fit compares the budget with the peak and the caching allocator's margin.
    assert_eq!(total(n), v["total_bytes"].as_u64().unwrap());
    assert!(total(n + 1) > 80 << 30);
    // The JSON carries the breakdown at N and the value after it.
    assert_eq!(v["breakdown"]["reserved_bytes"], v["total_bytes"]);
    assert_eq!(v["breakdown"]["batch"].as_u64(), Some(n));
    assert_eq!(v["next"]["value"].as_u64(), Some(n + 1));
    assert_eq!(v["next"]["total_bytes"].as_u64(), Some(total(n + 1)));
    assert_eq!(v["next"]["fits"], false);
    // The context for a fixed batch; GPT-2's learned positions cap it at 1024.
    let out = memplan(&[
        "fit",
        "--config",
        &testdata("configs/gpt2.json"),
        "--symbol",
        "seq",
        "--batch",
        "1",
        "--budget",
        "80GiB",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("seq = 1024\n"), "{}", stdout(&out));
    assert!(stdout(&out).contains("context limit"), "{}", stdout(&out));
    // Llama-2 stops at its 4096-token context unless --max says otherwise.
    let llama = testdata("configs/llama-2-7b.json");
    let fit_seq = |extra: &[&str]| {
        let mut a = vec![
            "fit",
            "--config",
            llama.as_str(),
            "--symbol",
            "seq",
            "--budget",
            "1TiB",
        ];
        a.extend(extra);
        a.extend(["--format", "json"]);
        json(&memplan(&a))["value"].as_u64()
    };
    assert_eq!(fit_seq(&[]), Some(4096));
    assert!(fit_seq(&["--max", "1000000"]).unwrap() > 4096);
    // Nothing fits: exit 3.
    let out = memplan(&[
        "fit", "--config", &cfg, "--symbol", "batch", "--budget", "1GiB",
    ]);
    assert_eq!(out.status.code(), Some(3));
    // A vision model has no sequence to fit.
    let vit = testdata("configs/vit-base-patch16-224.json");
    let out = memplan(&[
        "fit", "--config", &vit, "--symbol", "seq", "--budget", "1GiB",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn preflight_names_the_largest_batch() {
    let g = testdata("graphs/dynamic/json/gpt2.json");
    let fits = memplan(&[
        "preflight",
        &g,
        "--dim",
        "batch=8",
        "--dim",
        "seq=512",
        "--budget",
        "24GiB",
    ]);
    assert_eq!(fits.status.code(), Some(0), "{}", stderr(&fits));
    assert!(stdout(&fits).starts_with("fits:"));
    let no = memplan(&[
        "preflight",
        &g,
        "--dim",
        "batch=300",
        "--dim",
        "seq=512",
        "--budget",
        "24GiB",
        "--symbol",
        "batch",
    ]);
    assert_eq!(no.status.code(), Some(1));
    let text = stdout(&no);
    let fit = json(&memplan(&[
        "fit", &g, "--symbol", "batch", "--budget", "24GiB", "--dim", "seq=512", "--format", "json",
    ]));
    let largest = format!("the largest batch that fits is {}", fit["value"]);
    assert!(text.contains(&largest), "{text}");
    assert!(
        text.contains("needs") && text.contains("available"),
        "{text}"
    );
    let small = |extra: &[&str]| {
        let mut a = vec![
            "preflight",
            g.as_str(),
            "--dim",
            "batch=1",
            "--dim",
            "seq=8",
        ];
        a.extend(extra);
        memplan(&a)
    };
    let out = small(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--budget"), "{}", stderr(&out));
    // --device needs a CUDA build and a device; either way, no panic and exit 2 without one.
    let out = small(&["--device", "0"]);
    if !out.status.success() {
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("device") || err.contains("CUDA"), "{err}");
    }
    let out = small(&["--device", "0", "--budget", "1GiB"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not both"), "{}", stderr(&out));
}

#[test]
fn sliding_window_sequences_take_the_blocks_vllm_admits_them_with() {
    // Issue 36 item 3: Mistral-7B's 4,096-token window at 32,768 tokens a sequence. vLLM
    // budgets a sliding layer cdiv(min(window - 1 + max_batched_tokens, max_len), block) + 1
    // blocks: cdiv(4095 + 2048, 16) + 1 = 385 (a 65 GiB budget gets 2,048 batched tokens).
    let cfg = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/configs/mistral-7b.json")
        .to_string_lossy()
        .into_owned();
    let out = memplan(&[
        "fit",
        "--config",
        &cfg,
        "--serving",
        "--budget",
        "69952888832",
        "--gpu-util",
        "1",
        "--seq",
        "32768",
        "--max-seqs",
        "1000",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["blocks_per_seq"], 385, "{v}");
    let blocks = v["kv_blocks"].as_u64().unwrap();
    let seqs = v["max_concurrent_seqs"].as_u64().unwrap();
    assert!(
        seqs * 385 <= blocks && (seqs + 1) * 385 > blocks,
        "{seqs} × 385 vs {blocks}"
    );
}

/// `preflight --config` answers with the estimate's peak plus the caching allocator's margin
/// (the `reserved_bytes` of `estimate`, with the same runtime, precision, attention and
/// optimizer-kernel flags), exits 0 or 1 by that figure against the budget, and names the
/// largest batch that fits as `fit --config` finds it.
#[test]
fn preflight_from_a_config_takes_the_estimate_flags() {
    let cfg = testdata("configs/llama-2-7b.json");
    let base = [
        "--config",
        &cfg,
        "--training",
        "adamw",
        "--seq",
        "2048",
        "--batch",
        "8",
    ];
    let mut reserved_at_8 = 0;
    for extra in [
        &[][..],
        &["--precision", "amp", "--attention", "eager"][..],
        &["--precision", "pure", "--optimizer-kernel", "fused"][..],
        &[
            "--checkpointing",
            "full",
            "--optimizer-kernel",
            "per-tensor",
            "--attention",
            "sdpa",
        ][..],
    ] {
        let mut est = vec!["estimate"];
        est.extend(base);
        est.extend(extra);
        est.extend(["--format", "json"]);
        let e = json(&memplan(&est));
        let reserved = e["reserved_bytes"].as_u64().unwrap();
        if extra.is_empty() {
            reserved_at_8 = reserved;
        }
        assert_eq!(
            reserved,
            e["total_bytes"].as_u64().unwrap() + e["allocator_margin_bytes"].as_u64().unwrap()
        );
        // A budget of exactly the need fits; one byte less does not.
        for (budget, fits) in [(reserved, true), (reserved - 1, false)] {
            let b = budget.to_string();
            let mut pre = vec!["preflight"];
            pre.extend(base);
            pre.extend(extra);
            pre.extend(["--budget", &b, "--format", "json"]);
            let out = memplan(&pre);
            assert_eq!(
                out.status.code(),
                Some(if fits { 0 } else { 1 }),
                "{extra:?}"
            );
            let v = json(&out);
            assert_eq!(v["fits"], fits);
            assert_eq!(v["total_bytes"].as_u64(), Some(reserved), "{extra:?}");
            assert_eq!(v["peak_bytes"], e["total_bytes"]);
            assert_eq!(v["runtime"], "hf");
            assert_eq!(v["graph"], serde_json::Value::Null);
        }
    }
    // One byte short of batch 8's need: the largest batch is fit's answer, and it fits
    // (the allocator's margin is not monotonic in the batch, so it need not be 3).
    let budget = (reserved_at_8 - 1).to_string();
    let mut pre = vec!["preflight"];
    pre.extend(base);
    pre.extend(["--budget", &budget, "--symbol", "batch", "--format", "json"]);
    let out = memplan(&pre);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let largest = json(&out)["largest_fitting"]["value"].as_u64();
    let fit = json(&memplan(&[
        "fit",
        "--config",
        &cfg,
        "--training",
        "adamw",
        "--seq",
        "2048",
        "--symbol",
        "batch",
        "--budget",
        &budget,
        "--format",
        "json",
    ]));
    assert_eq!(largest, fit["value"].as_u64());
    let n = largest.unwrap().to_string();
    assert_ne!(largest, Some(8));
    let out = memplan(&[
        "preflight",
        "--config",
        &cfg,
        "--training",
        "adamw",
        "--seq",
        "2048",
        "--batch",
        &n,
        "--budget",
        &budget,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // Text names the runtime and the margin; a graph with --config is refused.
    let mut pre = vec!["preflight"];
    pre.extend(base);
    pre.extend(["--budget", "1TiB"]);
    let out = memplan(&pre);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("fits: `llama` (hf runtime, batch 8 × seq 2048) needs "),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("allocator margin"),
        "{}",
        stdout(&out)
    );
    let out = memplan(&[
        "preflight",
        &testdata("graphs/dynamic/json/gpt2.json"),
        "--config",
        &cfg,
        "--budget",
        "1TiB",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not both"), "{}", stderr(&out));
    let out = memplan(&["preflight", "--budget", "1TiB", "--batch", "4"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("go with --config"),
        "{}",
        stderr(&out)
    );
}

/// `fit --config` trains with PyTorch's default AdamW kernel on a GPU (`foreach`, a
/// `sqrt(v)` of every parameter at the step), not the graph planner's in-place `fused`.
#[test]
fn fit_from_a_config_defaults_to_the_foreach_kernel() {
    let cfg = testdata("configs/llama-2-7b.json");
    let fit = |extra: &[&str]| {
        let mut a = vec![
            "fit",
            "--config",
            &cfg,
            "--training",
            "adamw",
            "--precision",
            "amp",
            "--symbol",
            "batch",
            "--seq",
            "512",
            "--budget",
            "200GiB",
            "--format",
            "json",
        ];
        a.extend(extra);
        let v = json(&memplan(&a));
        (
            v["value"].as_u64().unwrap(),
            v["breakdown"]["optimizer_kernel"].clone(),
        )
    };
    let default = fit(&[]);
    assert_eq!(default, fit(&["--optimizer-kernel", "foreach"]));
    assert_eq!(default.1, "foreach");
    let fused = fit(&["--optimizer-kernel", "fused"]);
    assert_eq!(fused.1, "fused");
    // The fused step has no temporaries: never a smaller batch.
    assert!(fused.0 >= default.0);
}

/// The allocator's margin is not monotone in the batch (Llama-2-7B, mixed AdamW, 2,048
/// tokens: the optimizer step's temporaries fit the holes the activations left better at
/// some batches than at others), so a batch can fit where a smaller one does not. `fit`
/// looks past the first batch that does not fit, up to where the allocated peak alone
/// exceeds the budget, answers the largest it finds, and names the smaller one that does
/// not fit. Each figure is checked against `estimate`'s own.
#[test]
fn fit_from_a_config_looks_past_a_margin_that_shrinks() {
    let cfg = testdata("configs/llama-2-7b.json");
    let budget: u64 = 160_000_000_000;
    let step = [
        "--config",
        cfg.as_str(),
        "--training",
        "adamw",
        "--precision",
        "mixed",
        "--seq",
        "2048",
        "--format",
        "json",
    ];
    let run = |head: &[&str]| json(&memplan(&[head, &step[..]].concat()));
    let reserved = |batch: u64| {
        run(&["estimate", "--batch", &batch.to_string()])["reserved_bytes"]
            .as_u64()
            .unwrap()
    };
    let v = run(&["fit", "--symbol", "batch", "--budget", &budget.to_string()]);
    let answer = v["value"].as_u64().expect("a batch fits");
    let first = v["first_failure"]["value"]
        .as_u64()
        .expect("a failure below");
    assert!(first < answer, "{v}");
    assert!(reserved(answer) <= budget, "{v}");
    assert!(reserved(first) > budget, "{v}");
    assert_eq!(
        v["first_failure"]["total_bytes"].as_u64(),
        Some(reserved(first))
    );
    let next = v["next"]["value"].as_u64().unwrap();
    assert_eq!(next, answer + 1);
    assert!(reserved(next) > budget, "{v}");
}
