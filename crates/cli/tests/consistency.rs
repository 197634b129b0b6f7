//! What every command shares: help with examples, exit codes, `--quiet`, `-` for standard
//! input and output, human sizes, ONNX recognised by content, and the errors users ran
//! into (each cause said once, a misspelt key reported first, `--dim` mistakes).

mod common;

use common::{graph, memplan, stderr, stdout, with_closed_output};

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn memplan_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run memplan");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "memplan-cli-consistency-{}-{test}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const COMMANDS: [&str; 8] = [
    "inspect",
    "plan",
    "solve",
    "check",
    "fit",
    "estimate",
    "preflight",
    "compare",
];

#[test]
fn every_command_has_examples_exit_codes_json_and_quiet_in_its_help() {
    for command in COMMANDS {
        let o = memplan(&[command, "--help"]);
        assert!(o.status.success(), "{command}: {}", stderr(&o));
        let help = stdout(&o);
        assert!(help.contains("Examples:"), "{command}:\n{help}");
        assert!(
            help.contains(&format!("memplan {command}")),
            "{command}:\n{help}"
        );
        assert!(help.contains("Exit codes: 0 ok, 1"), "{command}:\n{help}");
        assert!(
            help.contains("--format"),
            "{command} has no --format:\n{help}"
        );
        assert!(help.contains("--quiet"), "{command}:\n{help}");
    }
    let top = stdout(&memplan(&["--help"]));
    assert!(top.contains("Exit codes"), "{top}");
}

#[test]
fn usage_errors_exit_2_on_every_command() {
    for command in COMMANDS {
        let o = memplan(&[command, "--no-such-flag"]);
        assert_eq!(o.status.code(), Some(2), "{command}");
    }
}

#[test]
fn a_missing_file_says_its_cause_once() {
    let o = memplan(&["plan", "no/such/model.onnx"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn a_protobuf_error_says_its_cause_once() {
    let dir = scratch("protobuf");
    let bytes = std::fs::read(graph("onnx/light_squeezenet_b1.onnx")).unwrap();
    let cut = dir.join("cut.onnx");
    std::fs::write(&cut, &bytes[..100]).unwrap();
    let o = memplan(&["plan", cut.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("not a valid ONNX model"), "{err}");
    assert_eq!(err.matches("failed to decode Protobuf").count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn onnx_is_recognised_by_content_and_json_read_from_stdin() {
    let dir = scratch("content");
    let model = dir.join("model.bin");
    std::fs::copy(graph("onnx/light_squeezenet_b1.onnx"), &model).unwrap();
    let o = memplan(&["plan", model.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json = std::fs::read(graph("json/light_squeezenet_b1.json")).unwrap();
    let o = memplan_stdin(&["plan", "-", "--format", "json", "-o", "-"], &json);
    assert!(o.status.success(), "{}", stderr(&o));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(plan["graph"], "light_squeezenet_b1");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_misspelt_key_is_reported_first_and_alone() {
    let dir = scratch("misspelt");
    let text = std::fs::read_to_string(graph("json/light_densenet121_b1.json")).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, text.replacen("\"tensors\":", "\"tensor\":", 1)).unwrap();
    let o = memplan(&["plan", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("unknown key `tensor` (did you mean `tensors`?)"),
        "{err}"
    );
    assert!(err.lines().count() <= 5, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn long_error_lists_are_folded() {
    let o = memplan(&[
        "plan",
        &graph("dynamic/json/gpt2.json"),
        "--dim",
        "batch=400000",
        "--dim",
        "seq=1000000",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.lines().count() <= 27, "{err}");
    assert!(err.contains("more lines"), "{err}");
}

#[test]
fn dim_mistakes_are_named() {
    let gpt2 = graph("dynamic/json/gpt2.json");
    let o = memplan(&["plan", &gpt2, "--dim", "seq=4"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("with no value: batch (pass --dim batch=N)"),
        "{err}"
    );
    assert!(!err.contains("seq=N"), "{err}");

    let o = memplan(&["plan", &gpt2, "--dim", "batch=1", "--dim", "batch=2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("given twice"), "{}", stderr(&o));

    let o = memplan(&["plan", &gpt2, "--dim", "batch=-1", "--dim", "seq=4"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("batch=-1"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("non-negative integer"),
        "{}",
        stderr(&o)
    );

    let o = memplan(&[
        "plan",
        &graph("json/light_squeezenet_b1.json"),
        "--dim",
        "batch=1",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("no symbolic dimensions"), "{err}");
    assert!(!err.contains("(it has: )"), "{err}");
}

#[test]
fn top_zero_is_refused_and_counts_agree_in_number() {
    let g = graph("json/light_squeezenet_b1.json");
    let o = memplan(&["plan", &g, "--top", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let o = memplan(&["inspect", &g, "--top", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let text = stdout(&memplan(&["plan", &graph("json/light_shufflenet_b1.json")]));
    assert!(!text.contains(" 1 views"), "{text}");
}

#[test]
fn output_errors_name_the_target_not_a_temporary_file() {
    let dir = scratch("target");
    let target = dir.join("no/such/dir/plan.json");
    let o = memplan(&[
        "plan",
        &graph("json/light_squeezenet_b1.json"),
        "-o",
        target.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("writing {}", target.display())),
        "{err}"
    );
    assert!(!err.contains(".tmp"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn quiet_silences_notes_but_not_results() {
    let o = memplan(&["plan", "--quiet"]);
    assert!(o.status.success());
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    assert!(stdout(&o).contains("device memory"));
}

#[test]
fn sizes_are_human_in_text_and_exact_in_json() {
    let g = graph("json/light_squeezenet_b1.json");
    let text = stdout(&memplan(&["plan", &g]));
    assert!(
        text.contains("device memory: 8.46 MiB (8,871,424 bytes)"),
        "{text}"
    );
    assert!(text.contains("3.75 MiB"), "{text}");
    assert!(!text.contains("0.00 MiB"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&memplan(&["plan", &g, "--format", "json"]))).unwrap();
    assert_eq!(json["total_bytes"], 8_871_424);
    assert_eq!(
        json["total_bytes"].as_u64(),
        Some(json["arena_bytes"].as_u64().unwrap() + json["weight_bytes"].as_u64().unwrap())
    );
}

#[test]
fn caller_owned_inputs_and_outputs_count_in_the_total() {
    let g = graph("json/light_squeezenet_b1.json");
    let json: serde_json::Value = serde_json::from_str(&stdout(&memplan(&[
        "plan",
        &g,
        "--format",
        "json",
        "--caller-inputs",
        "--caller-outputs",
    ])))
    .unwrap();
    let get = |k: &str| json[k].as_u64().unwrap();
    assert!(get("caller_input_bytes") > 0);
    assert_eq!(
        get("total_bytes"),
        get("arena_bytes")
            + get("weight_bytes")
            + get("caller_input_bytes")
            + get("caller_output_bytes")
    );
    assert_eq!(json["settings"]["inputs_in_arena"], false);
}

#[test]
fn human_sizes_are_accepted_as_capacities() {
    let o = memplan(&["solve", "--capacity", "12B"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = memplan(&["solve", "--capacity", "11"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let o = memplan(&["solve", "--capacity", "12G"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn inspect_shows_symbolic_sizes_as_formulas_and_refuses_overflow() {
    let gpt2 = graph("dynamic/json/gpt2.json");
    let text = stdout(&memplan(&["inspect", &gpt2]));
    assert!(text.contains("*batch*seq"), "{text}");
    let o = memplan(&[
        "inspect",
        &gpt2,
        "--dim",
        "batch=400000",
        "--dim",
        "seq=1000000",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("overflow"), "{}", stderr(&o));
}

#[test]
fn every_command_writes_json() {
    let g = graph("json/light_squeezenet_b1.json");
    let runs: [&[&str]; 5] = [
        &["inspect", &g, "--format", "json"],
        &["solve", "--format", "json"],
        &["check", &g, "--format", "json"],
        &["preflight", &g, "--budget", "1GiB", "--format", "json"],
        &["compare", &g, "--format", "json", "--no-time"],
    ];
    for args in runs {
        let o = memplan(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v: Result<serde_json::Value, _> = serde_json::from_str(&stdout(&o));
        assert!(v.is_ok(), "{args:?}: {}", stdout(&o));
    }
}

/// One name for the total in every JSON: `total_bytes` (the plan file and `check` said
/// `total_device_bytes`, where `estimate`, `fit` and `preflight` said `total_bytes`). A
/// plan file written before, with the old name, still checks.
#[test]
fn every_json_total_is_total_bytes() {
    let g = graph("json/light_squeezenet_b1.json");
    let llama = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/configs/llama-3-8b.json")
        .to_string_lossy()
        .into_owned();
    let runs: [&[&str]; 6] = [
        &["plan", &g, "--format", "json"],
        &["check", &g, "--format", "json"],
        &["preflight", &g, "--budget", "1GiB", "--format", "json"],
        &["estimate", "--config", &llama, "--format", "json"],
        &[
            "fit", "--config", &llama, "--symbol", "batch", "--budget", "80GiB", "--format", "json",
        ],
        &[
            "fit",
            "--config",
            &llama,
            "--serving",
            "--budget",
            "80GiB",
            "--format",
            "json",
        ],
    ];
    for args in runs {
        let o = memplan(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let text = stdout(&o);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(v["total_bytes"].as_u64().is_some(), "{args:?}: {text}");
        assert!(!text.contains("total_device_bytes"), "{args:?}");
    }
    let dir = scratch("total-name");
    let plan = stdout(&memplan(&["plan", &g, "--format", "json"]));
    let old = dir.join("old.json");
    std::fs::write(
        &old,
        plan.replace("\"total_bytes\"", "\"total_device_bytes\""),
    )
    .unwrap();
    let o = memplan(&["check", &g, "--plan", old.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Every command's output, JSON and pictures included, ends quietly when its reader has
/// gone away, and so do the notes on standard error when it has gone too (`2>&1 | head`):
/// `plan --format json | head` used to fail with "error: writing to standard output:
/// Broken pipe" (exit 2), and `fit ... 2>&1 | head` to panic (exit 101) on its last note.
#[test]
fn a_closed_pipe_ends_every_output_quietly() {
    let gpt2 = graph("dynamic/json/gpt2.json");
    let unet = graph("json/smp_unet_resnet34_b1.json");
    let runs: Vec<Vec<&str>> = vec![
        vec!["plan", "--format", "json"],
        vec!["plan", "-o", "-", "--format", "json"],
        vec!["plan", "--svg", "-"],
        vec!["plan", "--html", "-"],
        vec!["inspect", "--format", "json"],
        vec!["check", "--format", "json"],
        vec!["check"],
        vec!["compare", &unet, "--format", "json", "--no-time"],
        vec![
            "fit", &gpt2, "--symbol", "batch", "--dim", "seq=16", "--budget", "1GiB",
        ],
        vec![
            "preflight",
            &gpt2,
            "--dim",
            "batch=1",
            "--dim",
            "seq=8",
            "--budget",
            "1GiB",
        ],
    ];
    for args in &runs {
        for close_stderr in [false, true] {
            let (code, err) = with_closed_output(args, close_stderr);
            assert_eq!(
                code,
                Some(0),
                "{args:?} (stderr closed: {close_stderr}): {err}"
            );
            assert!(!err.contains("error"), "{args:?}: {err}");
        }
    }
}

/// `check` counts steps, tensors, writes and reads with thousands separators, as `plan`
/// and `inspect` do ("2,140 steps", not "2140 steps").
#[test]
fn check_groups_the_digits_of_its_counts() {
    let o = memplan(&["check", &graph("json/smollm_135m_b1.json")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("2,140 steps, 3,469 tensors"), "{text}");
    assert!(text.contains("wrote 1,750 tensors"), "{text}");
    assert!(text.contains("weight reads skipped"), "{text}");
    assert!(!text.contains("1536 weight"), "{text}");
}
