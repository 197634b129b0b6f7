//! `memplan inspect` end to end: the embedded graph, files, symbols, and bad input.

mod common;
use common::{memplan_at_root as memplan, stderr, stdout};

#[test]
fn inspects_the_embedded_graph_with_no_file() {
    let o = memplan(&["inspect"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    // DenseNet-121: 668 nodes, 1517 tensors; its 58 Concat ops (summary.csv and the JSON).
    assert!(text.contains("668 nodes, 1,517 tensors"), "{text}");
    assert!(text.contains("    58  Concat"), "{text}");
    assert!(
        text.contains("activation    305.63 MiB           320,478,208 B"),
        "{text}"
    );
    assert!(stderr(&o).contains("embedded"));
}

#[test]
fn output_is_deterministic() {
    let a = memplan(&["inspect", "testdata/graphs/json/sd15_unet_b1.json"]);
    let b = memplan(&["inspect", "testdata/graphs/json/sd15_unet_b1.json"]);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn symbols_are_listed_and_bound() {
    let o = memplan(&["inspect", "testdata/graphs/dynamic/json/gpt2.json"]);
    assert!(stdout(&o).contains("symbols: batch, seq"), "{}", stdout(&o));
    // logits: f32 [batch, seq, 50257] at batch 2, seq 128 = 2*128*50257*4 bytes.
    let o = memplan(&[
        "inspect",
        "testdata/graphs/dynamic/json/gpt2.json",
        "--dim",
        "batch=2",
        "--dim",
        "seq=128",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("51,463,168 B"), "{}", stdout(&o));
    let o = memplan(&[
        "inspect",
        "testdata/graphs/dynamic/json/gpt2.json",
        "--dim",
        "heads=2",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("has no symbol `heads`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn malformed_json_is_a_clear_error_not_a_panic() {
    let dir = std::env::temp_dir().join(format!("memplan-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "truncated.json",
            "{\"name\": \"g\", \"tensors\": [",
            "invalid JSON at line 1",
        ),
        (
            "dangling.json",
            r#"{"name":"g","tensors":[{"name":"a","dtype":"f32","shape":[2],"kind":"output"}],"nodes":[{"name":"n","op":"Relu","inputs":["zz"],"outputs":["a"]}]}"#,
            "node `n` reads `zz`",
        ),
        (
            "cycle.json",
            r#"{"name":"g","tensors":[{"name":"a","dtype":"f32","shape":[2],"kind":"activation"},{"name":"b","dtype":"f32","shape":[2],"kind":"output"}],"nodes":[{"name":"n1","op":"Relu","inputs":["b"],"outputs":["a"]},{"name":"n2","op":"Relu","inputs":["a"],"outputs":["b"]}]}"#,
            "cycle through nodes",
        ),
        ("binary.json", "\u{0}\u{1}\u{2}", "invalid JSON"),
    ];
    for (name, text, expected) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let o = memplan(&["inspect", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{name}");
        let err = stderr(&o);
        assert!(
            err.starts_with("error: ") && err.contains(expected),
            "{name}: {err}"
        );
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
    let o = memplan(&["inspect", "no/such/file.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("reading no/such/file.json: No such file or directory"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn onnx_files_inspect_like_their_json_twins() {
    for name in ["light_densenet121_b1", "gpt2_b1", "silero_vad_16k_b1"] {
        let json = memplan(&["inspect", &format!("testdata/graphs/json/{name}.json")]);
        let onnx = memplan(&["inspect", &format!("testdata/graphs/onnx/{name}.onnx")]);
        assert!(onnx.status.success(), "{name}: {}", stderr(&onnx));
        assert_eq!(stdout(&onnx), stdout(&json), "{name}");
    }
    let dir = std::env::temp_dir().join(format!("memplan-inspect-onnx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("garbage.onnx");
    std::fs::write(&path, b"\x0a\xff\xff\xff\xff\x0fnot a model").unwrap();
    let o = memplan(&["inspect", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).starts_with("error: importing"), "{}", stderr(&o));
}
