//! Today's PyTorch exports as they come (`testdata/pytorch`: Hugging Face-style models built
//! from small configs, exported by the dynamo exporter at opsets 18 and 23 and by the
//! TorchScript exporter, weight data not vendored), end to end: each one plans and passes
//! `check`; the arena is at most PyTorch's own eager activation peak at the same batch and
//! sequence (`eager_peaks.csv`, measured by `testdata/pytorch/export.py measure`), tied
//! output layers included; a KV-cache prefill with an empty past plans; an opset-23
//! attention plan holds its kernel's scratch; a Mixtral-style MoE plans with `--bound` and
//! two `--dim` flags; a vision model with dynamic height and width, and wav2vec2 over audio
//! of any length, plan with `--dim` on the dims the exporter named and nothing else.

mod common;

use std::path::PathBuf;

use common::{memplan, stderr, stdout};

fn export(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/pytorch/onnx")
        .join(format!("{name}.onnx"))
        .to_string_lossy()
        .into_owned()
}

/// Every vendored export's name (`llama_dynamo18`, ...), sorted.
fn exports() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/pytorch/onnx");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            (p.extension()? == "onnx").then_some(())?;
            Some(p.file_stem()?.to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    names
}

/// The model of an export (`llama_kv_dynamo23` -> `llama_kv`).
fn model(name: &str) -> &str {
    name.rsplit_once('_').map_or(name, |(m, _)| m)
}

/// The `--dim` flags of a model at the sizes its eager peak was measured at
/// (`eager_peaks.csv`: batch 1, sequence 128, an empty past, an image's height and width).
fn dims(name: &str) -> Vec<String> {
    let model = model(name);
    let (_, dims, _) = eager_peaks()
        .into_iter()
        .find(|(m, _, _)| m == model)
        .unwrap_or_else(|| panic!("{name}: no row in eager_peaks.csv"));
    dims.split_whitespace()
        .flat_map(|d| ["--dim".to_owned(), d.to_owned()])
        .collect()
}

/// Runs memplan with `args`, then the export's file and dims; the parsed JSON on success.
fn run_json(args: &[&str], name: &str, extra: &[&str]) -> serde_json::Value {
    let path = export(name);
    let dims = dims(name);
    let mut all: Vec<&str> = args.to_vec();
    all.push(&path);
    all.extend(dims.iter().map(String::as_str));
    all.extend(["--format", "json", "-q"]);
    all.extend(extra);
    let o = memplan(&all);
    assert_eq!(o.status.code(), Some(0), "{name} {all:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn arena(name: &str, extra: &[&str]) -> u64 {
    run_json(&["plan"], name, extra)["arena_bytes"]
        .as_u64()
        .unwrap()
}

#[test]
fn every_export_plans_and_passes_check() {
    let names = exports();
    assert_eq!(names.len(), 47, "{names:?}");
    for name in &names {
        let report = run_json(&["check"], name, &["--bound"]);
        assert_eq!(report["ok"], true, "{name}: {report}");
        assert!(report["arena_bytes"].as_u64().unwrap() > 0, "{name}");
    }
}

/// Each model, the dims its eager peak was measured at, and that peak in bytes.
fn eager_peaks() -> Vec<(String, String, u64)> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/pytorch/eager_peaks.csv");
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            (
                cells[0].to_owned(),
                cells[1].to_owned(),
                cells[2].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_arena_is_at_most_pytorchs_eager_peak() {
    let peaks = eager_peaks();
    assert_eq!(peaks.len(), 16);
    let mut compared = 0;
    for name in exports() {
        let eager = peaks
            .iter()
            .find(|(m, _, _)| m == model(&name))
            .map(|p| p.2)
            .unwrap_or_else(|| panic!("no eager peak for {name}"));
        let (arena, how) = match name.as_str() {
            // PyTorch ran the Whisper encoder's attention with its flash CPU kernel; at
            // opset 23 the export keeps it fused, and memplan plans it for the same kernel
            // with `--attention flash`.
            "whisper_encoder_dynamo23" => {
                (arena(&name, &["--attention", "flash", "--bound"]), "flash")
            }
            // Below opset 23 the exporter writes attention as MatMul, Softmax, MatMul: the
            // graph itself holds the 6 x 1500 x 1500 scores (51.5 MiB), which no placement
            // avoids. Its arena is the scores' and the rest's, above the eager peak.
            "whisper_encoder_dynamo18" | "whisper_encoder_torchscript" => {
                let a = arena(&name, &["--bound"]);
                assert!(a > 54_000_000 && a > eager, "{name}: {a}");
                continue;
            }
            _ => (arena(&name, &["--bound"]), "eager"),
        };
        assert!(
            arena * 100 <= eager * 102,
            "{name} ({how}): arena {arena} above the eager peak {eager} + 2%"
        );
        compared += 1;
    }
    assert_eq!(compared, 45);
}

#[test]
fn a_tied_output_layer_is_computed_once_from_the_weights() {
    // GPT-2 ties its output layer to the token embedding, [50257, 256] f32: the dynamo
    // exporter transposes it in the graph.
    let transposed: u64 = 50257 * 256 * 4;
    let path = export("gpt2_dynamo18");
    let o = memplan(&["plan", &path, "--dim", "batch=1", "--dim", "seq=128", "-q"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(
            "of which computed once from weights: 49.08 MiB (51,463,168 bytes), from 1 node"
        ),
        "{text}"
    );
    let folded = run_json(&["plan"], "gpt2_dynamo18", &[]);
    let unfolded = run_json(&["plan"], "gpt2_dynamo18", &["--no-fold-weights"]);
    let get = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap();
    assert!(get(&unfolded, "arena_bytes") >= get(&folded, "arena_bytes") + transposed);
    // The weight region grows by the transpose (and at most an alignment's padding).
    let grown = get(&folded, "weight_bytes") - get(&unfolded, "weight_bytes");
    assert!((transposed..transposed + 256).contains(&grown), "{grown}");
    let computed: Vec<&serde_json::Value> = folded["weights"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w.get("computed_by").is_some())
        .collect();
    assert_eq!(computed.len(), 1);
    assert_eq!(computed[0]["bytes"].as_u64(), Some(transposed));
    assert_eq!(folded["settings"]["fold_weights"], true);
    assert_eq!(unfolded["settings"]["fold_weights"], false);
}

#[test]
fn a_kv_cache_prefill_with_an_empty_past_plans() {
    for exporter in ["dynamo18", "dynamo23", "torchscript"] {
        let name = format!("llama_kv_{exporter}");
        let plan = run_json(&["plan"], &name, &[]);
        // The past inputs are empty: no buffer holds them.
        let buffers = plan["buffers"].as_array().unwrap();
        assert!(
            !buffers
                .iter()
                .any(|b| b["tensor"].as_str().unwrap().starts_with("past_")),
            "{name}"
        );
        // The present keys hold the 128 new positions: [1, 2, 128, 64] f32.
        let present = buffers
            .iter()
            .find(|b| b["tensor"] == "present_key_0")
            .unwrap_or_else(|| panic!("{name}: no present_key_0"));
        assert_eq!(present["bytes"].as_u64(), Some(2 * 128 * 64 * 4), "{name}");
    }
}

#[test]
fn the_torchscript_exporters_decoders_import() {
    for name in exports().iter().filter(|n| n.ends_with("torchscript")) {
        let path = export(name);
        let o = memplan(&["inspect", &path, "-q"]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
    }
}

#[test]
fn an_opset_23_attention_plan_holds_its_kernels_scratch() {
    // The Whisper encoder: 2 fused Attention nodes over 6 heads x 1500 positions, f32.
    let eager = run_json(&["plan"], "whisper_encoder_dynamo23", &[]);
    let flash = run_json(
        &["plan"],
        "whisper_encoder_dynamo23",
        &["--attention", "flash"],
    );
    let sizes = |plan: &serde_json::Value| -> Vec<u64> {
        plan["workspaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["bytes"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(sizes(&eager), vec![6 * 1500 * 1500 * 4; 2]);
    assert_eq!(sizes(&flash), vec![6 * 1500 * 8; 2]);
    assert_eq!(eager["settings"]["attention"], "eager");
    assert!(eager["arena_bytes"].as_u64() >= Some(54_000_000));
    // The report names the kernel.
    let path = export("whisper_encoder_dynamo23");
    let o = memplan(&["plan", &path, "--dim", "batch=1", "-q"]);
    let text = stdout(&o);
    assert!(
        text.contains("attention        2 fused nodes, scratch up to 51.50 MiB each while it runs: eager kernels"),
        "{text}"
    );
    // A plan file keeps the kernel, and `check --plan` verifies and runs it as it is.
    let dir = std::env::temp_dir().join(format!("memplan-pytorch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("flash.json");
    let file = file.to_string_lossy();
    let o = memplan(&[
        "plan",
        &path,
        "--dim",
        "batch=1",
        "--attention",
        "flash",
        "--format",
        "json",
        "-o",
        &file,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = memplan(&["check", &path, "--dim", "batch=1", "--plan", &file, "-q"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_mixtral_style_moe_plans_with_bound_and_two_dims() {
    for exporter in ["dynamo18", "dynamo23", "torchscript"] {
        let path = export(&format!("mixtral_{exporter}"));
        let base = ["plan", &path, "--dim", "batch=2", "--dim", "seq=64"];
        let o = memplan(&base);
        assert_eq!(o.status.code(), Some(2), "{exporter}");
        assert!(stderr(&o).contains("or --bound"), "{}", stderr(&o));
        let mut bound = base.to_vec();
        bound.push("--bound");
        let o = memplan(&bound);
        assert_eq!(o.status.code(), Some(0), "{exporter}: {}", stderr(&o));
        // Each expert takes each token at most once (a token's 2 experts are TopK's distinct
        // indices): batch x seq, not the 2 x batch x seq tokens routed.
        assert!(
            stderr(&o).contains("= 128 (at most batch*seq)"),
            "{exporter}: {}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("2*batch*seq"), "{}", stderr(&o));
    }
}

#[test]
fn a_moe_with_a_shared_expert_plans_with_bound_and_two_dims() {
    // Qwen2-MoE: 8 experts, 2 per token, and a shared expert every token takes.
    for exporter in ["dynamo18", "dynamo23"] {
        let path = export(&format!("qwen2_moe_{exporter}"));
        let o = memplan(&[
            "check", &path, "--dim", "batch=3", "--dim", "seq=50", "--bound", "-q",
        ]);
        assert_eq!(o.status.code(), Some(0), "{exporter}: {}", stderr(&o));
        // The bounds are notes: --quiet keeps them off standard error.
        assert_eq!(stderr(&o), "", "{exporter}");
    }
}

#[test]
fn a_vision_model_with_dynamic_height_and_width_plans_at_any_size() {
    // ResNet-50 exported with batch, height and width dynamic: each strided window's output
    // is a quotient of the input's dims, which binding sets; only the three dims are given.
    for exporter in ["dynamo18", "dynamo23", "torchscript"] {
        let name = format!("resnet50_hw_{exporter}");
        let path = export(&name);
        let mut arenas = Vec::new();
        for (h, w) in [(224, 224), (320, 256), (97, 33)] {
            let (h, w) = (format!("height={h}"), format!("width={w}"));
            let o = memplan(&[
                "check", &path, "--dim", "batch=1", "--dim", &h, "--dim", &w, "--format", "json",
                "-q",
            ]);
            assert_eq!(o.status.code(), Some(0), "{name} {h} {w}: {}", stderr(&o));
            let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
            assert_eq!(report["ok"], true, "{name}: {report}");
            arenas.push(report["arena_bytes"].as_u64().unwrap());
        }
        assert!(
            arenas[0] < arenas[1] && arenas[2] < arenas[0],
            "{name}: {arenas:?}"
        );
        // At 224 x 224 the plan is the static export's (the vendored resnet50 is the same
        // network at a fixed size).
        let fixed = run_json(&["plan"], &format!("resnet50_{exporter}"), &["--bound"]);
        assert_eq!(Some(arenas[0]), fixed["arena_bytes"].as_u64(), "{name}");
        // The divided dims are listed, each with its rule; the plan report names only the
        // dims given (the plan file has them all).
        let o = memplan(&["inspect", &path, "-q"]);
        let text = stdout(&o);
        assert!(text.contains("= floor((height+1)/2)"), "{text}");
        assert!(
            text.contains("  symbols: batch, height, width (sizes below"),
            "{text}"
        );
        let dims = [
            "--dim",
            "batch=1",
            "--dim",
            "height=224",
            "--dim",
            "width=224",
        ];
        let o = memplan(&[&["plan", path.as_str(), "-q"][..], &dims[..]].concat());
        let text = stdout(&o);
        assert!(
            text.contains("\nwith batch=1, height=224, width=224\n"),
            "{text}"
        );
    }
}

#[test]
fn audio_of_any_length_plans() {
    // wav2vec2's seven strided convolutions over raw samples, and the dynamo exporter's own
    // arithmetic for the same length, are one quotient: `--dim samples=N` sizes everything.
    for exporter in ["dynamo18", "dynamo23", "torchscript"] {
        let path = export(&format!("wav2vec2_{exporter}"));
        for samples in ["samples=16000", "samples=16321", "samples=400"] {
            let o = memplan(&["check", &path, "--dim", "batch=2", "--dim", samples, "-q"]);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{exporter} {samples}: {}",
                stderr(&o)
            );
        }
        // Too short for the first window: the error names the tensors, no panic.
        let o = memplan(&["plan", &path, "--dim", "batch=1", "--dim", "samples=4"]);
        assert_eq!(o.status.code(), Some(2), "{exporter}");
        assert!(stderr(&o).contains("negative"), "{}", stderr(&o));
    }
}

#[test]
fn empty_tensors_plan_and_pass_the_pattern_check() {
    // Every dim of 0 is allowed: an empty batch, an empty sequence. Empty tensors take no
    // arena space, and the pattern check runs the plan over them.
    for dims in [["batch=0", "seq=128"], ["batch=1", "seq=0"]] {
        let path = export("llama_dynamo23");
        let o = memplan(&[
            "check",
            &path,
            "--dim",
            dims[0],
            "--dim",
            dims[1],
            "--check-weights",
            "--format",
            "json",
            "-q",
        ]);
        assert_eq!(o.status.code(), Some(0), "{dims:?}: {}", stderr(&o));
        let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(report["ok"], true, "{report}");
        // Only what does not grow with the empty dim is left (rotary tables, masks).
        assert!(
            report["arena_bytes"].as_u64().unwrap() < 1 << 20,
            "{report}"
        );
    }
}

/// Two inputs `a[n, 4]` and `b[m, 1]` added: their first dims only the values decide.
fn broadcasting_model() -> Vec<u8> {
    use memplan_onnx::proto::{GraphProto, ModelProto, OperatorSetIdProto, ValueInfoProto};
    use prost::Message;
    let graph = GraphProto {
        name: "broadcast".into(),
        input: vec![
            common::onnx::vi("a", common::onnx::F32, &["n", "4"]),
            common::onnx::vi("b", common::onnx::F32, &["m", "1"]),
        ],
        node: vec![common::onnx::op("Add", &["a", "b"], &["y"])],
        output: vec![ValueInfoProto {
            name: "y".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 18,
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn a_broadcast_dim_is_listed_set_by_binding_and_checked() {
    let dir = std::env::temp_dir().join(format!("memplan-broadcast-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("broadcast.onnx");
    std::fs::write(&path, broadcasting_model()).unwrap();
    let path = path.to_string_lossy().into_owned();
    let o = memplan(&["inspect", &path, "-q"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("broadcast dims (binding their two dims sets them, and checks that they broadcast): Add_y_o0_d0 = broadcast(n, m)"),
        "{}",
        stdout(&o)
    );
    // Only n and m are asked for; the broadcast dim follows.
    let o = memplan(&["plan", &path, "-q"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("with no value: m, n (pass --dim m=N --dim n=N)"),
        "{}",
        stderr(&o)
    );
    let o = memplan(&["check", &path, "--dim", "n=1", "--dim", "m=5", "-q"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = memplan(&["plan", &path, "--dim", "n=3", "--dim", "m=5", "-q"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("`Add_y_o0_d0` broadcasts n = 3 with m = 5, which do not broadcast"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
