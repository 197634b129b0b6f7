//! Sizing an LLM from the command line: serving capacity (`fit --config --serving`),
//! parallel and quantized estimates, and the first-contact messages of `estimate`, `fit`
//! and `preflight` (issue 29: closed pipes, bad budgets, silent no-ops).

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{memplan, stderr, stdout, with_closed_output};

fn config(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/configs");
    root.join(name).to_string_lossy().into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(o), stderr(o)))
}

fn u(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

#[test]
fn serving_llama3_8b_on_one_80gib_card() {
    let cfg = config("llama-3-8b.json");
    let out = memplan(&[
        "fit",
        "--config",
        &cfg,
        "--serving",
        "--budget",
        "80GiB",
        "--seq",
        "4096",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    for key in [
        "kv_tokens",
        "kv_blocks",
        "max_concurrent_seqs",
        "kv_bytes_per_token",
        "weights_bytes",
        "activation_bytes",
        "reserve_bytes",
        "total_bytes",
    ] {
        assert!(v[key].is_u64(), "{key}: {v}");
    }
    let per_token = u(&v, "kv_bytes_per_token");
    assert_eq!(per_token, 2 * 32 * 8 * 128 * 2);
    assert_eq!(u(&v, "weights_bytes"), 2 * 8_030_261_248);
    assert_eq!(u(&v, "kv_tokens"), 16 * u(&v, "kv_blocks"));
    // vLLM's arithmetic: 0.9 × budget − weights − activations − reserve − the rotary cache
    // (a buffer the model holds beside its weights), in whole blocks.
    let usable = (80u64 << 30) * 9 / 10;
    let pool = usable
        - u(&v, "weights_bytes")
        - u(&v, "activation_bytes")
        - u(&v, "reserve_bytes")
        - u(&v, "rotary_cache_bytes");
    assert_eq!(u(&v, "kv_blocks"), pool / (16 * per_token));
    assert_eq!(
        u(&v, "total_bytes"),
        usable - pool + u(&v, "kv_blocks") * 16 * per_token
    );
    // The issue's vLLM-style figure: about 450k tokens (not the 176k of full-sequence logits);
    // 436k since the profiling run's sampler and the rotary cache are counted (issue 37).
    let tokens = u(&v, "kv_tokens");
    assert!((430_000..470_000).contains(&tokens), "{tokens}");
    // 4096-token sequences: each takes 256 blocks.
    assert_eq!(u(&v, "max_concurrent_seqs"), u(&v, "kv_blocks") / 256);
    // An fp8 cache holds twice the tokens, near enough (the activations stay).
    let fp8 = json(&memplan(&[
        "fit",
        "--config",
        &cfg,
        "--serving",
        "--budget",
        "80GiB",
        "--kv-dtype",
        "fp8",
        "--format",
        "json",
    ]));
    assert_eq!(u(&fp8, "kv_bytes_per_token"), per_token / 2);
    assert!(u(&fp8, "kv_tokens") >= 2 * tokens - 16);
    // Text: the answer first, byte counts with separators.
    let text = stdout(&memplan(&[
        "fit",
        "--config",
        &cfg,
        "--serving",
        "--budget",
        "80GiB",
    ]));
    assert!(text.starts_with("kv tokens = "), "{text}");
    assert!(text.contains("16,060,522,496 bytes"), "{text}");
    // A card too small: exit 3 with the reason.
    let out = memplan(&["fit", "--config", &cfg, "--serving", "--budget", "16GiB"]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(stdout(&out).starts_with("nothing fits"), "{}", stdout(&out));
}

#[test]
fn serving_70b_over_four_cards_and_logits() {
    let cfg = config("llama-3.1-70b.json");
    let one = |extra: &[&str]| {
        let mut a = vec![
            "fit",
            "--config",
            cfg.as_str(),
            "--serving",
            "--budget",
            "80GiB",
        ];
        a.extend(extra);
        a.extend(["--format", "json"]);
        memplan(&a)
    };
    // 141 GB of weights do not fit one 80 GiB card.
    assert_eq!(one(&[]).status.code(), Some(3));
    let v = json(&one(&["--tp", "4", "--seq", "8192"]));
    assert_eq!(u(&v, "devices"), 4);
    // Two of the eight KV heads on each card.
    assert_eq!(u(&v, "kv_bytes_per_token"), 80 * 2 * 2 * 128 * 2);
    assert_eq!(
        v["per_device"]["weights_bytes"],
        v["weights_bytes_per_device"]
    );
    assert!(u(&v, "kv_tokens") > 400_000, "{v}");
    // The text says the tokens are the deployment's, each split over the cards (not four
    // times as many).
    let text = memplan(&[
        "fit",
        "--config",
        &cfg,
        "--serving",
        "--budget",
        "80GiB",
        "--tp",
        "4",
        "--seq",
        "8192",
    ]);
    let first = String::from_utf8_lossy(&text.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        first.starts_with("kv tokens = ")
            && first.ends_with(", each token's cache split over 4 devices"),
        "{first}"
    );
    // Generation's logits are the last position's: the largest batch of 4096-token
    // sequences that fits (56 under transformers' own allocations, the default runtime) is
    // nearly twice the 30 that logits for every position allow.
    let llama8 = config("llama-3-8b.json");
    let batch = |logits: &str| {
        let v = json(&memplan(&[
            "fit", "--config", &llama8, "--symbol", "batch", "--budget", "80GiB", "--seq", "4096",
            "--flash", "--logits", logits, "--format", "json",
        ]));
        u(&v, "value")
    };
    let (last, all) = (batch("last"), batch("all"));
    assert!(all > 0 && last * 2 > all * 3, "last {last}, all {all}");
}

#[test]
fn estimate_reports_moe_quantized_and_parallel_figures() {
    let v = json(&memplan(&[
        "estimate",
        "--config",
        &config("mixtral-8x7b.json"),
        "--format",
        "json",
    ]));
    assert_eq!(u(&v, "parameters"), 46_702_792_704);
    assert_eq!(u(&v, "active_parameters"), 12_879_925_248);
    assert_eq!(v["per_device"]["total_bytes"], v["total_bytes"]);
    // int4 with groups of 128 for Llama-3-8B, by hand: each linear matrix rows × cols / 2
    // bytes plus an f16 scale and a 4-bit zero per 128 inputs; embeddings and norms bf16.
    let v = json(&memplan(&[
        "estimate",
        "--config",
        &config("llama-3-8b.json"),
        "--weight-dtype",
        "int4",
        "--format",
        "json",
    ]));
    let matrices: [(u64, u64); 7] = [
        (4096, 4096),
        (1024, 4096),
        (1024, 4096),
        (4096, 4096),
        (14336, 4096),
        (14336, 4096),
        (4096, 14336),
    ];
    let layer: u64 = matrices
        .iter()
        .map(|&(r, c)| r * c / 2 + r * c.div_ceil(128) * 2 + r * c.div_ceil(128) / 2)
        .sum::<u64>()
        + 2 * 4096 * 2;
    let expected = 32 * layer + 2 * (2 * 128_256 * 4096) + 2 * 4096;
    assert_eq!(u(&v, "weights_bytes"), expected);
    assert_eq!(v["weight_format"], "int4");
    assert_eq!(u(&v, "group_size"), 128);
    // Training Mixtral with ZeRO-3 on eight data-parallel replicas: per-device figures.
    let v = json(&memplan(&[
        "estimate",
        "--config",
        &config("mixtral-8x7b.json"),
        "--training",
        "adamw",
        "--dp",
        "8",
        "--zero",
        "3",
        "--checkpointing",
        "full",
        "--flash",
        "--seq",
        "4096",
        "--format",
        "json",
    ]));
    assert_eq!(u(&v, "devices"), 8);
    let d = &v["per_device"];
    let sum: u64 = [
        "weights_bytes",
        "kv_cache_bytes",
        "activation_bytes",
        "gradients_bytes",
        "optimizer_bytes",
    ]
    .iter()
    .map(|k| u(d, k))
    .sum();
    assert_eq!(u(d, "total_bytes"), sum);
    assert_eq!(u(d, "optimizer_bytes"), 12 * 46_702_792_704u64.div_ceil(8));
    assert_eq!(v["weights_bytes_per_device"], d["weights_bytes"]);
    assert_eq!(v["checkpointing"], "full");
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let llama = config("llama-3-8b.json");
    let graph = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/graphs/dynamic/json/gpt2.json")
        .to_string_lossy()
        .into_owned();
    for args in [
        vec!["estimate", "--config", llama.as_str()],
        vec![
            "fit",
            "--config",
            llama.as_str(),
            "--symbol",
            "batch",
            "--budget",
            "80GiB",
        ],
        vec![
            "fit",
            "--config",
            llama.as_str(),
            "--serving",
            "--budget",
            "80GiB",
        ],
        vec![
            "fit",
            graph.as_str(),
            "--symbol",
            "batch",
            "--dim",
            "seq=64",
            "--budget",
            "1GiB",
        ],
        vec![
            "preflight",
            graph.as_str(),
            "--dim",
            "batch=1",
            "--dim",
            "seq=8",
            "--budget",
            "1GiB",
        ],
    ] {
        let (code, err) = with_closed_output(&args, false);
        assert_ne!(code, Some(101), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("error"), "{args:?}: {err}");
    }
}

#[test]
fn first_contact_messages() {
    let llama = config("llama-3-8b.json");
    // estimate with nothing: say what to give.
    let out = memplan(&["estimate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--config") && stderr(&out).contains("--arch"),
        "{}",
        stderr(&out)
    );
    // A negative budget: say it must be positive, not clap's `-- -5` tip.
    for budget in ["-5GiB", "0", "0GiB"] {
        let out = memplan(&[
            "fit", "--config", &llama, "--symbol", "batch", "--budget", budget,
        ]);
        assert_eq!(out.status.code(), Some(2), "{budget}");
        let err = stderr(&out);
        assert!(
            err.contains("must be") && err.contains("positive"),
            "{budget}: {err}"
        );
        assert!(!err.contains("-- -5"), "{err}");
    }
    let graph = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/graphs/dynamic/json/gpt2.json")
        .to_string_lossy()
        .into_owned();
    let out = memplan(&[
        "preflight",
        &graph,
        "--dim",
        "batch=1",
        "--dim",
        "seq=8",
        "--budget",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    // bool is not an activation dtype.
    let out = memplan(&["estimate", "--config", &llama, "--dtype", "bool"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--dtype bool"), "{}", stderr(&out));
    // --seq on a ViT (a fixed patch count) says it is ignored.
    let out = memplan(&[
        "estimate",
        "--config",
        &config("vit-base-patch16-224.json"),
        "--seq",
        "100",
    ]);
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("--seq is ignored"),
        "{}",
        stderr(&out)
    );
    // GPT-2's tied head: the estimate says why a graph export holds more.
    let out = memplan(&["estimate", "--config", &config("gpt2.json")]);
    assert!(stdout(&out).contains("counted once"), "{}", stdout(&out));
    // An unknown model_type names the supported list and the flags.
    let dir = std::env::temp_dir().join(format!("memplan-llm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let t5 = dir.join("t5.json");
    std::fs::write(&t5, r#"{"model_type": "t5"}"#).unwrap();
    let out = memplan(&["estimate", "--config", t5.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("deepseek_v3") && err.contains("--experts"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn preflight_json_keys_do_not_change_with_the_verdict() {
    let graph = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/graphs/dynamic/json/gpt2.json")
        .to_string_lossy()
        .into_owned();
    let run = |budget: &str| {
        let out = memplan(&[
            "preflight",
            &graph,
            "--dim",
            "batch=4",
            "--dim",
            "seq=128",
            "--budget",
            budget,
            "--symbol",
            "batch",
            "--format",
            "json",
        ]);
        (out.status.code(), json(&out))
    };
    let (yes_code, yes) = run("24GiB");
    let (no_code, no) = run("600MiB");
    assert_eq!((yes_code, no_code), (Some(0), Some(1)));
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&yes), keys(&no));
    assert_eq!(yes["fits"], true);
    assert_eq!(no["fits"], false);
    assert_eq!(
        u(&no, "total_bytes") - u(&no, "budget_bytes"),
        u(&no, "over_bytes")
    );
    assert_eq!(
        u(&yes, "budget_bytes") - u(&yes, "total_bytes"),
        u(&yes, "free_bytes")
    );
}

#[test]
fn small_generated_configs_run_without_flags() {
    // A GPT-2 of 16 positions and a BERT decoder of 16: without --seq the estimate runs at
    // the position table's length (it was refused at the default 1024).
    for (name, positions) in [
        ("generated/gpt2-cross-attention.json", 16),
        ("generated/bert-decoder-cross-attention.json", 16),
        ("generated/gpt2-tiny.json", 32),
    ] {
        let out = memplan(&["estimate", "--config", &config(name), "--format", "json"]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        assert_eq!(u(&json(&out), "seq"), positions, "{name}");
    }
    // A config transformers builds but whose attention could not run (8 key/value heads, the
    // class default, over 4 query heads) is counted as built, with a note saying so.
    let out = memplan(&[
        "estimate",
        "--config",
        &config("generated/mistral-kv-default-above-heads.json"),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(u(&json(&out), "parameters"), 25_760);
    assert!(stderr(&out).contains("do not divide"), "{}", stderr(&out));
    // Serving it: the KV figures of the heads it has, in bf16 as vLLM serves a config that
    // names no dtype (the estimate above is f32).
    let out = memplan(&[
        "fit",
        "--config",
        &config("generated/mistral-kv-default-above-heads.json"),
        "--serving",
        "--budget",
        "2GiB",
        "--seq",
        "64",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(u(&v, "kv_bytes_per_token"), 2 * 2 * 8 * 8 * 2);
    assert_eq!(v["dtype"], "bf16");
    assert_eq!(u(&v, "weights_bytes"), 25_760 * 2);
    assert!(
        stderr(&out).contains("vLLM's --dtype auto"),
        "{}",
        stderr(&out)
    );
    // --dtype f32 keeps 32 bits.
    let out = memplan(&[
        "fit",
        "--config",
        &config("generated/mistral-kv-default-above-heads.json"),
        "--serving",
        "--budget",
        "2GiB",
        "--dtype",
        "f32",
        "--format",
        "json",
    ]);
    assert_eq!(u(&json(&out), "kv_bytes_per_token"), 2 * 2 * 8 * 8 * 4);
}

#[test]
fn json_names_the_sliding_layers() {
    // Ministral-style: a window of 3 on layers 0 and 2 (from layer_types).
    for command in [
        &["estimate"][..],
        &["fit", "--serving", "--budget", "2GiB"][..],
    ] {
        let mut args = command.to_vec();
        let cfg = config("generated/mistral-layer-types.json");
        args.extend(["--config", &cfg, "--seq", "10", "--format", "json"]);
        let out = memplan(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["sliding_window"], 3, "{v}");
        assert_eq!(v["sliding_layers"], serde_json::json!([0, 2]), "{v}");
    }
    // Qwen3-MoE slides every layer; Llama none.
    // The fused runtime's cache (transformers' own, `--runtime hf`, holds the whole prompt
    // while it runs).
    let v = json(&memplan(&[
        "estimate",
        "--config",
        &config("generated/qwen3_moe-sliding.json"),
        "--seq",
        "10",
        "--runtime",
        "fused",
        "--format",
        "json",
    ]));
    assert_eq!(v["sliding_layers"], serde_json::json!([0, 1, 2]), "{v}");
    // Each layer holds min(10, 4) tokens: 3 layers × 4 tokens × (16 + 16) floats × 4 bytes.
    assert_eq!(u(&v, "kv_cache_bytes"), 3 * 4 * 32 * 4);
    let v = json(&memplan(&[
        "estimate",
        "--config",
        &config("llama-3-8b.json"),
        "--format",
        "json",
    ]));
    assert!(v["sliding_window"].is_null(), "{v}");
    assert_eq!(v["sliding_layers"], serde_json::json!([]), "{v}");
}

#[test]
fn no_master_weights_is_precision_pure_with_the_states_plan_counts() {
    // Issue 36 item 9: `--no-master-weights` for bf16 parameters with Adam is `--precision
    // pure`: two bf16 moments, 4 bytes a parameter, as `plan --training --no-master-weights`
    // allocates them (the planner's test counts 4 bytes an f16 element); with master
    // weights, two f32 moments and the f32 master, 12 (the planner's 12).
    let cfg = config("smollm-135m.json");
    let states = |extra: &[&str]| {
        let mut args = vec![
            "estimate",
            "--config",
            &cfg,
            "--training",
            "adam",
            "--dtype",
            "bf16",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let out = memplan(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        let p = v["parameters"].as_u64().unwrap();
        (
            v["per_device"]["optimizer_bytes"].as_u64().unwrap(),
            p,
            v["precision"].clone(),
        )
    };
    let (alias, p, name) = states(&["--no-master-weights"]);
    assert_eq!(alias, 4 * p);
    assert_eq!(name, "pure");
    assert_eq!(states(&["--precision", "pure"]).0, alias);
    assert_eq!(states(&[]).0, 12 * p);
    let out = memplan(&[
        "estimate",
        "--config",
        &cfg,
        "--training",
        "adam",
        "--dtype",
        "bf16",
        "--no-master-weights",
        "--precision",
        "mixed",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--no-master-weights is --precision pure"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_setting_the_model_refuses_names_its_flag() {
    // The library says which setting (`tp`) and why; the command adds the flag.
    let llama = config("llama-3-8b.json");
    let out = memplan(&["estimate", "--config", &llama, "--tp", "3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("`tp` 3: the 32 attention heads do not split evenly over 3 devices")
            && err.trim_end().ends_with("(set by --tp)"),
        "{err}"
    );
}

#[test]
fn plan_step_reports_the_arena_figure_apart_from_pytorchs() {
    // Issue 37 Required 3: `--plan-step` plans the hf training step with memplan's planner
    // and reports it beside PyTorch's allocated peak, never instead of it.
    let cfg = config("smollm-135m.json");
    let base = [
        "estimate",
        "--config",
        cfg.as_str(),
        "--training",
        "adamw",
        "--dtype",
        "bf16",
        "--seq",
        "512",
    ];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        memplan(&args)
    };
    let plain = json(&run(&["--format", "json"]));
    assert!(plain["arena_step"].is_null(), "{plain}");
    let out = run(&["--plan-step", "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    // The PyTorch figures do not move.
    assert_eq!(u(&v, "total_bytes"), u(&plain, "total_bytes"));
    assert_eq!(u(&v, "reserved_bytes"), u(&plain, "reserved_bytes"));
    let a = &v["arena_step"];
    assert_eq!(
        u(a, "total_bytes"),
        u(a, "resident_bytes") + u(a, "arena_bytes")
    );
    // Resident: the bf16 weights, f32 masters and two f32 moments (2 + 4 + 8 bytes a
    // parameter) with no block rounding.
    assert_eq!(u(a, "resident_bytes"), 14 * u(&v, "parameters"));
    assert!(u(a, "arena_bytes") >= u(a, "lower_bound_bytes"));
    assert!(u(a, "total_bytes") <= u(&v, "total_bytes"), "{v}");
    let text = stdout(&run(&["--plan-step"]));
    assert!(text.contains("arena plan:"), "{text}");
    let out = memplan(&["estimate", "--config", &cfg, "--plan-step"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--plan-step plans an hf training step"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_families_added_in_the_sixth_session_estimate_from_their_configs() {
    // Issue 37: Granite, SmolLM3, Phi, Cohere, GLM, GLM-4 and OLMo are read and run by the `hf`
    // runtime; the counts are transformers 5.24's on the meta device (Phi-2's is also its
    // published total). f16 autocast training keeps f32 weights: 4 bytes a parameter.
    for (file, parameters) in [
        ("granite-3.1-8b.json", 8_170_848_256u64),
        ("smollm3-3b.json", 3_075_098_624),
        ("phi-2.json", 2_779_683_840),
        ("command-r-v01.json", 34_980_831_232),
        ("glm-4-9b-chat.json", 9_399_951_360),
        ("glm-4-9b-0414.json", 9_400_279_040),
        ("olmo-7b.json", 6_888_095_744),
    ] {
        let cfg = config(file);
        let out = memplan(&[
            "estimate",
            "--config",
            &cfg,
            "--training",
            "adamw",
            "--precision",
            "amp",
            "--dtype",
            "f16",
            "--seq",
            "1024",
            "--format",
            "json",
        ]);
        assert!(out.status.success(), "{file}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(u(&v, "parameters"), parameters, "{file}");
        assert_eq!(v["runtime"], "hf", "{file}: {v}");
        assert_eq!(
            u(&v["per_device"], "weights_bytes"),
            4 * parameters,
            "{file}"
        );
        assert!(u(&v, "total_bytes") > 16 * parameters, "{file}: {v}");
    }
    // A family still not modelled is refused by name, with the list that now holds them.
    let dir = std::env::temp_dir().join(format!("memplan-qwen2_5_vl_text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    std::fs::write(&path, r#"{"model_type": "qwen2_5_vl_text"}"#).unwrap();
    let out = memplan(&["estimate", "--config", &path.to_string_lossy()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("model_type `qwen2_5_vl_text` is not supported")
            && err.contains("exaone4")
            && err.contains(", ernie4_5, ernie4_5_moe)"),
        "{err}"
    );
}

#[test]
fn the_families_added_in_the_seventh_session_run_on_every_runtime() {
    // Issue 37: gpt-oss, GLM-4.5, OLMoE, Granite-MoE, Cohere 2 and Seed-OSS (and EXAONE 4,
    // StableLM and Hunyuan dense, added in the eighth session; ERNIE 4.5 dense and MoE and
    // StableLM 2 12B's per-head Q/K LayerNorms, in the ninth) are read with transformers' parameter counts (5.24 on
    // the meta device), trained and run by the `hf` runtime, sized by the `fused` one and
    // served by the `vllm` one.
    for (file, parameters) in [
        ("gpt-oss-20b.json", 20_914_757_184u64),
        ("glm-4.5-air.json", 106_852_245_504),
        ("olmoe-1b-7b-0924.json", 6_919_161_856),
        ("granite-3.0-1b-a400m.json", 1_334_628_352),
        ("command-r7b.json", 8_028_033_024),
        ("seed-oss-36b.json", 36_151_104_512),
        ("exaone-4.0-32b.json", 32_003_216_384),
        ("exaone-4.0-1.2b.json", 1_279_391_488),
        ("stablelm-2-1.6b.json", 1_644_515_328),
        ("stablelm-3b-4e1t.json", 2_795_443_200),
        ("hunyuan-7b.json", 7_504_568_320),
        ("ernie-4.5-0.3b.json", 360_748_032),
        ("stablelm-2-12b.json", 12_143_185_920),
        ("ernie-4.5-21b-a3b.json", 21_825_437_888),
    ] {
        let cfg = config(file);
        let run = |extra: &[&str]| {
            let mut args = vec![
                "estimate", "--config", &cfg, "--seq", "1024", "--format", "json",
            ];
            args.extend_from_slice(extra);
            let out = memplan(&args);
            assert!(out.status.success(), "{file} {extra:?}: {}", stderr(&out));
            json(&out)
        };
        let train = run(&[
            "--training",
            "adamw",
            "--precision",
            "mixed",
            "--dtype",
            "bf16",
        ]);
        assert_eq!(u(&train, "parameters"), parameters, "{file}");
        assert_eq!(train["runtime"], "hf", "{file}: {train}");
        // bf16 weights and gradients, f32 masters and two moments: at least 16 bytes a
        // parameter at the step.
        assert!(
            u(&train, "total_bytes") > 16 * parameters,
            "{file}: {train}"
        );
        let infer = run(&["--runtime", "hf"]);
        let fused = run(&["--runtime", "fused"]);
        assert_eq!(fused["runtime"], "fused", "{file}: {fused}");
        for v in [&infer, &fused] {
            assert!(u(v, "total_bytes") > u(v, "kv_cache_bytes"), "{file}: {v}");
        }
        let out = memplan(&[
            "fit",
            "--config",
            &cfg,
            "--serving",
            "--budget",
            "320GiB",
            "--format",
            "json",
        ]);
        assert!(out.status.success(), "{file}: {}", stderr(&out));
        let serve = json(&out);
        assert!(u(&serve, "kv_tokens") > 0, "{file}: {serve}");
    }
    // gpt-oss-20b holds 12 sliding and 12 full layers: vLLM's two groups of 12 give every
    // layer its even share of the pool; gpt-oss has no SDPA path, so `sdpa` runs eager.
    let cfg = config("gpt-oss-20b.json");
    let sdpa = json(&memplan(&[
        "estimate", "--config", &cfg, "--format", "json",
    ]));
    let eager = json(&memplan(&[
        "estimate",
        "--config",
        &cfg,
        "--attention",
        "eager",
        "--format",
        "json",
    ]));
    assert_eq!(u(&sdpa, "total_bytes"), u(&eager, "total_bytes"));
}
