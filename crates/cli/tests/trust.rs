//! The audit's and the newcomer's findings of issue 29, end to end through the binary: each
//! command that gave an unsafe plan, accepted one, panicked or answered unclearly, and what
//! it answers now. Graphs are written here (JSON) into a scratch folder.

mod common;

use std::path::PathBuf;

use common::{graph, memplan, stderr, stdout};

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memplan-trust-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn code(o: &std::process::Output) -> Option<i32> {
    o.status.code()
}

/// Plans graph file `g` with `extra` options into `DIR/NAME`: the file's path, its text and
/// its JSON.
fn plan_file(
    dir: &std::path::Path,
    name: &str,
    g: &str,
    extra: &[&str],
) -> (String, String, serde_json::Value) {
    let path = dir.join(name).to_string_lossy().into_owned();
    let mut args = vec!["plan", g, "--format", "json", "-o", path.as_str()];
    args.extend_from_slice(extra);
    let o = memplan(&args);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&path).unwrap();
    let json = serde_json::from_str(&text).unwrap();
    (path, text, json)
}

/// The three shapes of item 1 in one graph, with `k <= 8` data-dependent: a Split chunk
/// after a data-dependent chunk, a Slice `[-2:]` of a data-dependent length (`k + 4`, so
/// that the declared `[2]` holds at every `k` from 0: issue 36 checks declared shapes across
/// the range), and a Concat part after a data-dependent part.
const BOUNDED: &str = r#"{
"name": "bounded",
"symbols": ["k"],
"symbol_bounds": {"k": 8},
"tensors": [
{"name":"x","dtype":"f32","shape":[1,2,"k"],"kind":"input"},
{"name":"a","dtype":"f32","shape":[1,2,"k"],"kind":"activation"},
{"name":"y0","dtype":"f32","shape":[1,1,"k"],"kind":"activation"},
{"name":"y1","dtype":"f32","shape":[1,1,"k"],"kind":"activation"},
{"name":"s","dtype":"f32","shape":[1,1,"k"],"kind":"activation"},
{"name":"r","dtype":"f32","shape":["k"],"kind":"activation"},
{"name":"starts","dtype":"i64","shape":[1],"kind":"weight","value":[-2]},
{"name":"ends","dtype":"i64","shape":[1],"kind":"weight","value":[1000]},
{"name":"t","dtype":"f32","shape":[2],"kind":"activation"},
{"name":"w","dtype":"f32","shape":[4],"kind":"input"},
{"name":"u","dtype":"f32","shape":[4],"kind":"activation"},
{"name":"c","dtype":"f32","shape":["k+4"],"kind":"activation"},
{"name":"out","dtype":"f32","shape":["k+4"],"kind":"output"},
{"name":"out2","dtype":"f32","shape":[2],"kind":"output"}
],
"nodes": [
{"name":"relu","op":"Relu","inputs":["x"],"outputs":["a"]},
{"name":"split","op":"Split","inputs":["a"],"outputs":["y0","y1"],"attrs":{"axis":1}},
{"name":"add","op":"Add","inputs":["y0","y1"],"outputs":["s"]},
{"name":"flat","op":"Reshape","inputs":["s"],"outputs":["r"]},
{"name":"neg","op":"Neg","inputs":["w"],"outputs":["u"]},
{"name":"cat","op":"Concat","inputs":["r","u"],"outputs":["c"],"attrs":{"axis":0}},
{"name":"slice","op":"Slice","inputs":["c","starts","ends"],"outputs":["t"]},
{"name":"o","op":"Relu","inputs":["c"],"outputs":["out"]},
{"name":"o2","op":"Relu","inputs":["t"],"outputs":["out2"]}
]
}"#;

/// Item 1 (and 13): a plan at the bound of `k`, checked by the verifier and on the host
/// arena at every smaller value down to 1 (`check --plan` re-sizes it), with the bound
/// recorded in the plan file.
#[test]
fn a_plan_at_the_bound_holds_every_smaller_value() {
    let dir = scratch("bound");
    let g = write(&dir, "bounded.json", BOUNDED);
    let (p, _, plan) = plan_file(&dir, "plan.json", &g, &["--bound"]);
    let p = p.as_str();
    assert_eq!(plan["settings"]["bindings"], serde_json::json!([["k", 8]]));
    assert_eq!(plan["settings"]["bounded"], serde_json::json!(["k"]));
    for v in 1..=8 {
        let dim = format!("k={v}");
        let o = memplan(&["check", &g, "--plan", p, "--dim", &dim]);
        assert_eq!(code(&o), Some(0), "k={v}: {}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("ok: no live tensor was clobbered"));
    }
    // Above the bound, or a symbol planned for one value, is bad input.
    let o = memplan(&["check", &g, "--plan", p, "--dim", "k=9"]);
    assert_eq!(code(&o), Some(2));
    assert!(
        stderr(&o).contains("above the bound the plan was made at"),
        "{}",
        stderr(&o)
    );
    let o = memplan(&["check", &g, "--plan", p]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
}

/// Item 13: `--dim` values are recorded, so `check --plan` needs none; another value is
/// refused (exit 2), naming the value the plan was made for.
#[test]
fn bindings_are_recorded_and_checked() {
    let dir = scratch("bindings");
    let g = graph("dynamic/json/gpt2.json");
    let (p, text, _) = plan_file(
        &dir,
        "plan.json",
        &g,
        &["--dim", "batch=1", "--dim", "seq=8"],
    );
    let p = p.as_str();
    assert!(
        text.contains(r#""bindings":[["batch",1],["seq",8]]"#),
        "{}",
        &text[..600]
    );
    let o = memplan(&["check", &g, "--plan", p]);
    assert_eq!(code(&o), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o = memplan(&["check", &g, "--plan", p, "--dim", "seq=8"]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let o = memplan(&["check", &g, "--plan", p, "--dim", "seq=16"]);
    assert_eq!(code(&o), Some(2));
    assert!(
        stderr(&o).contains("the plan was made for seq=8, not seq=16"),
        "{}",
        stderr(&o)
    );
    // Item 14: no graph given: the plan names the one it needs.
    let o = memplan(&["check", "--plan", p]);
    assert_eq!(code(&o), Some(2));
    assert!(
        stderr(&o).contains("is for graph `gpt2`: give its graph file"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("names node"), "{}", stderr(&o));
}

const CAPTURED: &str = r#"{
"name": "captured",
"tensors": [
{"name":"a","dtype":"f32","shape":[64],"kind":"input"},
{"name":"m","dtype":"i64","shape":[],"kind":"weight","value":[2]},
{"name":"c","dtype":"bool","shape":[],"kind":"input"},
{"name":"x","dtype":"f32","shape":[64],"kind":"activation"},
{"name":"t","dtype":"f32","shape":[64],"kind":"activation"},
{"name":"v","dtype":"f32","shape":[64],"kind":"activation"},
{"name":"out","dtype":"f32","shape":[64],"kind":"output"}
],
"nodes": [
{"name":"relu","op":"Relu","inputs":["a"],"outputs":["x"]},
{"name":"neg","op":"Neg","inputs":["x"],"outputs":["t"]},
{"name":"loop","op":"Loop","inputs":["m","c","t"],"outputs":["v"],"bodies":[{"attr":"body","graph":{"name":"lb","tensors":[
 {"name":"i","dtype":"i64","shape":[],"kind":"input"},
 {"name":"cin","dtype":"bool","shape":[],"kind":"input"},
 {"name":"vin","dtype":"f32","shape":[64],"kind":"input"},
 {"name":"cout","dtype":"bool","shape":[],"kind":"output"},
 {"name":"vout","dtype":"f32","shape":[64],"kind":"output"}
],"nodes":[
 {"name":"cid","op":"Identity","inputs":["cin"],"outputs":["cout"]},
 {"name":"if","op":"If","inputs":["cin"],"outputs":["vout"],"bodies":[
   {"attr":"then_branch","graph":{"name":"tb","tensors":[{"name":"x","dtype":"f32","shape":[64],"kind":"input"},{"name":"e1","dtype":"f32","shape":[64],"kind":"activation"},{"name":"e2","dtype":"f32","shape":[64],"kind":"activation"},{"name":"y","dtype":"f32","shape":[64],"kind":"output"}],"nodes":[{"name":"n1","op":"Neg","inputs":["x"],"outputs":["e1"]},{"name":"n2","op":"Exp","inputs":["x"],"outputs":["e2"]},{"name":"n3","op":"Add","inputs":["e1","e2"],"outputs":["y"]}]}},
   {"attr":"else_branch","graph":{"name":"eb","tensors":[{"name":"x","dtype":"f32","shape":[64],"kind":"input"},{"name":"y2","dtype":"f32","shape":[64],"kind":"output"}],"nodes":[{"name":"n4","op":"Relu","inputs":["x"],"outputs":["y2"]}]}}
 ]}
]}}]},
{"name":"add","op":"Add","inputs":["v","t"],"outputs":["out"]}
]
}"#;

/// Items 2 and 3: a value captured two levels deep stays live until the Loop runs (it was
/// overwritten in place before it), and a workspace cut below its body plan is refused by
/// the verifier and overruns in the host run.
#[test]
fn control_flow_captures_and_workspaces_are_safe() {
    let dir = scratch("control");
    let g = write(&dir, "captured.json", CAPTURED);
    let (p, text, plan) = plan_file(&dir, "plan.json", &g, &["--align", "1"]);
    let p = p.as_str();
    let x = plan["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["tensor"] == "x")
        .unwrap();
    assert!(
        x["last"].as_u64().unwrap() >= 2,
        "x dies before the Loop: {x}"
    );
    let o = memplan(&["check", &g, "--plan", p]);
    assert_eq!(code(&o), Some(0), "{}{}", stdout(&o), stderr(&o));

    // The Loop's workspace holds the If's, which holds the then-branch's 512 bytes.
    let ws = plan["workspaces"][0]["bytes"].as_u64().unwrap();
    assert!(ws >= 512, "{ws}");
    let cut = text.replacen(
        &format!("\"bytes\":{ws},\"step\":2"),
        "\"bytes\":256,\"step\":2",
        1,
    );
    assert_ne!(cut, text);
    let q = write(&dir, "cut.json", &cut);
    let o = memplan(&["check", &g, "--plan", &q]);
    assert_eq!(code(&o), Some(1), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("UNSAFE"), "{out}");
    assert!(out.contains("cannot hold the plan of body `body`"), "{out}");
    assert!(out.contains("outside the node's workspace"), "{out}");
}

/// Item 11: a plan whose arena is too small exits 1 with its problems, JSON included,
/// never an internal error.
#[test]
fn an_arena_too_small_is_an_unsafe_plan_not_an_error() {
    let dir = scratch("small");
    let g = graph("json/silero_vad_16k_b1.json");
    let (_, text, plan) = plan_file(&dir, "plan.json", &g, &[]);
    let arena = plan["arena_bytes"].as_u64().unwrap();
    // The total that adds the arena up is edited with it (a file whose total is not its
    // plan's is refused as not this plan's file, exit 2: issue 36).
    let total = plan["total_bytes"].as_u64().unwrap();
    let small = text
        .replacen(
            &format!("\"arena_bytes\": {arena},"),
            &format!("\"arena_bytes\": {},", arena / 2),
            1,
        )
        .replacen(
            &format!("\"total_bytes\": {total},"),
            &format!("\"total_bytes\": {},", total - (arena - arena / 2)),
            1,
        );
    let q = write(&dir, "small.json", &small);
    let o = memplan(&["check", &g, "--plan", &q, "--format", "json"]);
    assert_eq!(code(&o), Some(1), "{}{}", stdout(&o), stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["executed"], false);
    // Item 18: exact byte counts grouped by thousands, in problems too.
    let region = format!(
        "past the end of its region ({} bytes)",
        memplan_ir::Grouped(arena / 2)
    );
    assert!(arena / 2 >= 1000 && region.contains(','), "{region}");
    assert!(
        v["verifier_problems"][0]
            .as_str()
            .unwrap()
            .contains(&region),
        "{v}"
    );
    let o = memplan(&["check", &g, "--plan", &q]);
    assert_eq!(code(&o), Some(1));
    assert!(stdout(&o).contains("UNSAFE"), "{}", stdout(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}

/// Items 6 and 10: QuickGelu in place runs clean (it was reported clobbered); a Concat part
/// that the Concat reads twice is refused by the verifier and by the host run.
#[test]
fn quick_gelu_in_place_is_clean_and_a_twice_read_part_is_refused() {
    let dir = scratch("ops");
    let g = write(
        &dir,
        "gelu.json",
        r#"{"name":"gelu","tensors":[
{"name":"x","dtype":"f32","shape":[64],"kind":"input"},
{"name":"a","dtype":"f32","shape":[64],"kind":"activation"},
{"name":"b","dtype":"f32","shape":[64],"kind":"activation"},
{"name":"y","dtype":"f32","shape":[64],"kind":"output"}],
"nodes":[
{"name":"n1","op":"Exp","inputs":["x"],"outputs":["a"]},
{"name":"n2","op":"QuickGelu","inputs":["a"],"outputs":["b"],"attrs":{"alpha":1.702}},
{"name":"n3","op":"com.microsoft.QuickGelu","inputs":["b"],"outputs":["y"]}]}"#,
    );
    let o = memplan(&["check", &g]);
    assert_eq!(code(&o), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o = memplan(&["plan", &g]);
    assert!(stdout(&o).contains("(written over a)"), "{}", stdout(&o));

    let g = write(
        &dir,
        "aba.json",
        r#"{"name":"aba","tensors":[
{"name":"x","dtype":"f32","shape":[1,64],"kind":"input"},
{"name":"a","dtype":"f32","shape":[1,64],"kind":"activation"},
{"name":"b","dtype":"f32","shape":[1,64],"kind":"activation"},
{"name":"y","dtype":"f32","shape":[1,192],"kind":"output"}],
"nodes":[
{"name":"n1","op":"Relu","inputs":["x"],"outputs":["a"]},
{"name":"n2","op":"Neg","inputs":["x"],"outputs":["b"]},
{"name":"cat","op":"Concat","inputs":["a","b","a"],"outputs":["y"],"attrs":{"axis":1}}]}"#,
    );
    let (_, _, plan) = plan_file(&dir, "aba_plan.json", &g, &[]);
    let y_at = plan["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["tensor"] == "y")
        .unwrap()["offset"]
        .as_u64()
        .unwrap();
    // `a` claimed as a part at the first slice of `y`, alive from step 0.
    let mut edited: serde_json::Value = plan.clone();
    for b in edited["buffers"].as_array_mut().unwrap() {
        if b["tensor"] == "a" {
            b["offset"] = y_at.into();
            b["alias"] = "part".into();
            b["alias_of"] = "y".into();
        }
        if b["tensor"] == "y" {
            b["first"] = 0.into();
        }
    }
    let q = write(&dir, "aba_edit.json", &edited.to_string());
    let o = memplan(&["check", &g, "--plan", &q]);
    assert_eq!(code(&o), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("reads it more than once"),
        "{}",
        stdout(&o)
    );
}

/// Item 17: a folder of folders, and `--dim` for the graphs that have the symbol.
#[test]
fn compare_walks_folders_and_binds_only_the_graphs_with_the_symbol() {
    let dir = scratch("compare");
    let sub = dir.join("nested/deeper");
    std::fs::create_dir_all(&sub).unwrap();
    for (from, to) in [
        ("json/silero_vad_16k_b1.json", sub.join("static.json")),
        ("dynamic/json/gpt2.json", dir.join("nested/gpt2.json")),
    ] {
        std::fs::copy(graph(from), to).unwrap();
    }
    let d = dir.to_str().unwrap();
    let o = memplan(&[
        "compare",
        d,
        "--dim",
        "batch=1",
        "--dim",
        "seq=8",
        "--format",
        "csv",
        "--no-time",
    ]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("gpt2") && out.contains("silero_vad_16k_b1"),
        "{out}"
    );
    let o = memplan(&[
        "compare", d, "--dim", "batch=1", "--dim", "seq=8", "--dim", "heads=2",
    ]);
    assert_eq!(code(&o), Some(2));
    assert!(
        stderr(&o).contains("no graph compared has a symbol `heads`"),
        "{}",
        stderr(&o)
    );
}

/// Items 18, 19, 20: messages a person reads.
#[test]
fn first_contact_messages_are_clear() {
    let dir = scratch("messages");
    let g = graph("json/light_squeezenet_b1.json");
    // Steps as `3-4`, never `3..=4`.
    let o = memplan(&["plan", &g]);
    let out = stdout(&o);
    assert!(!out.contains("..="), "{out}");
    assert!(out.contains("   0-1  r0"), "{out}");
    // The pictures it wrote.
    let svg = dir.join("p.svg");
    let html = dir.join("p.html");
    let o = memplan(&[
        "plan",
        &g,
        "--svg",
        svg.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    assert!(
        stderr(&o).contains("wrote the SVG picture to")
            && stderr(&o).contains("wrote the HTML picture to"),
        "{}",
        stderr(&o)
    );
    // inspect: shapes as arrays, one input (not `1 inputs`).
    let o = memplan(&[
        "inspect",
        &graph("dynamic/json/gpt2.json"),
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let shape = &v["largest"][0]["shape"];
    assert!(shape.is_array(), "{shape}");
    assert!(
        shape.as_array().unwrap().iter().any(|d| d == "seq"),
        "{shape}"
    );
    let o = memplan(&["inspect", &g]);
    assert!(stdout(&o).contains("1 input, 1 output,"), "{}", stdout(&o));
    // --opaque in the wrong case is an error; an op no rule knows, a note.
    let o = memplan(&["plan", &g, "--opaque", "relu"]);
    assert_eq!(code(&o), Some(2));
    assert!(
        stderr(&o).contains("did you mean `Relu`?"),
        "{}",
        stderr(&o)
    );
    let o = memplan(&["plan", &g, "--opaque", "MyKernel"]);
    assert_eq!(code(&o), Some(0));
    assert!(stderr(&o).contains("opaque already"), "{}", stderr(&o));
    // A model config given as a graph points to `estimate`.
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/configs/gpt2.json");
    let o = memplan(&["plan", config.to_str().unwrap()]);
    assert_eq!(code(&o), Some(2));
    assert!(
        stderr(&o).contains("is a Hugging Face model config (model_type gpt2)")
            && stderr(&o).contains("memplan estimate --config"),
        "{}",
        stderr(&o)
    );
}

/// Item 16: a tensor live for one step of thousands (the logits at the end) is drawn a few
/// pixels wide and labelled; the legend says what its figures are and has the peak line;
/// the page says when `?tensor=` names nothing.
#[test]
fn pictures_show_the_tensors_that_make_the_peak() {
    let dir = scratch("picture");
    let mut tensors = vec![r#"{"name":"x","dtype":"f32","shape":[16],"kind":"input"}"#.to_owned()];
    let mut nodes = Vec::new();
    let mut prev = "x".to_owned();
    for i in 0..2000 {
        let t = format!("h{i}");
        tensors.push(format!(
            r#"{{"name":"{t}","dtype":"f32","shape":[16],"kind":"activation"}}"#
        ));
        nodes.push(format!(
            r#"{{"name":"n{i}","op":"Sin","inputs":["{prev}"],"outputs":["{t}"]}}"#
        ));
        prev = t;
    }
    tensors.push(r#"{"name":"logits","dtype":"f32","shape":[1000000],"kind":"output"}"#.to_owned());
    nodes.push(format!(
        r#"{{"name":"head","op":"MatMul","inputs":["{prev}","{prev}"],"outputs":["logits"]}}"#
    ));
    let text = format!(
        r#"{{"name":"lm","tensors":[{}],"nodes":[{}]}}"#,
        tensors.join(","),
        nodes.join(",")
    );
    let g = write(&dir, "lm.json", &text);
    let svg = dir.join("lm.svg");
    let html = dir.join("lm.html");
    let o = memplan(&[
        "plan",
        &g,
        "--svg",
        svg.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(svg).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let logits = doc
        .descendants()
        .find(|n| {
            n.tag_name().name() == "rect"
                && n.children()
                    .any(|c| c.text().is_some_and(|t| t.starts_with("logits (MatMul)")))
        })
        .expect("the logits are drawn");
    let width: f64 = logits.attribute("width").unwrap().parse().unwrap();
    assert!(width >= 4.0, "the logits are {width} px wide");
    let labels = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("labels"))
        .unwrap();
    assert!(
        labels
            .descendants()
            .any(|n| n.text().is_some_and(|t| t.starts_with("logits"))),
        "the peak tensor has a label"
    );
    assert!(
        svg.contains("figures: its bytes live at the peak step"),
        "legend caption"
    );
    assert!(svg.contains(">peak step</text>"), "the legend's peak line");
    let html = std::fs::read_to_string(html).unwrap();
    assert!(html.contains("no tensor named"));
    assert!(!html.contains("\"..=\""));
}
