//! Every corpus model imports to exactly the graph of its JSON file: the same tensors (names,
//! dtypes, shapes, bytes, kinds) and nodes (names, ops, inputs, outputs, attributes), once
//! trusting the file's `value_info` and once inferring every shape (`infer_all`). The dynamic
//! models are compared as symbolic expressions and bound at several sizes.

use std::path::{Path, PathBuf};

use memplan_ir::{Bindings, Graph};
use memplan_onnx::{ImportOptions, load};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/graphs")
}

/// The `.onnx` files of a corpus folder, with their JSON twins.
fn pairs(onnx_dir: &str, json_dir: &str) -> Vec<(PathBuf, PathBuf)> {
    let dir = root().join(onnx_dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let json = root()
                .join(json_dir)
                .join(p.with_extension("json").file_name().unwrap());
            (p, json)
        })
        .collect()
}

fn dims(g: &Graph, t: &memplan_ir::Tensor) -> Vec<String> {
    t.shape
        .iter()
        .map(|d| d.display(g.symbols()).to_string())
        .collect()
}

/// Asserts that `got` (imported) equals `want` (the JSON graph), naming the first difference.
fn assert_same_graph(got: &Graph, want: &Graph, what: &str) {
    assert_eq!(
        got.tensors().len(),
        want.tensors().len(),
        "{what}: tensor count"
    );
    for (a, b) in got.tensors().iter().zip(want.tensors().iter()) {
        assert_eq!(a.name, b.name, "{what}: tensor order");
        assert_eq!(a.dtype, b.dtype, "{what}: dtype of `{}`", a.name);
        assert_eq!(a.kind, b.kind, "{what}: kind of `{}`", a.name);
        assert_eq!(dims(got, a), dims(want, b), "{what}: shape of `{}`", a.name);
        if b.is_static() {
            assert_eq!(
                a.static_bytes(),
                b.static_bytes(),
                "{what}: bytes of `{}`",
                a.name
            );
        }
    }
    assert_eq!(got.nodes().len(), want.nodes().len(), "{what}: node count");
    for (a, b) in got.nodes().iter().zip(want.nodes().iter()) {
        assert_eq!((&a.name, &a.op), (&b.name, &b.op), "{what}: node order");
        let names =
            |g: &Graph, ids: &mut dyn Iterator<Item = memplan_ir::TensorId>| -> Vec<String> {
                ids.map(|t| g.tensors().get(t).unwrap().name.clone())
                    .collect()
            };
        assert_eq!(
            names(got, &mut a.present_inputs()),
            names(want, &mut b.present_inputs()),
            "{what}: inputs of `{}`",
            a.name
        );
        assert_eq!(
            names(got, &mut a.outputs.iter().copied()),
            names(want, &mut b.outputs.iter().copied()),
            "{what}: outputs of `{}`",
            a.name
        );
        assert_eq!(a.attrs, b.attrs, "{what}: attributes of `{}`", a.name);
    }
}

/// Each of the `count` models of a corpus folder, imported (`what`, got) and read from its
/// JSON twin (want).
fn imported(
    onnx_dir: &str,
    json_dir: &str,
    count: usize,
    infer_all: bool,
) -> Vec<(String, Graph, Graph)> {
    let files = pairs(onnx_dir, json_dir);
    assert_eq!(files.len(), count);
    let options = ImportOptions::default().with_infer_all(infer_all);
    files
        .into_iter()
        .map(|(onnx, json)| {
            let what = format!("{} (infer_all {infer_all})", onnx.display());
            let got = load(&onnx, &options).unwrap_or_else(|e| panic!("{what}: {e}"));
            let want = Graph::load_json(&json).unwrap();
            (what, got, want)
        })
        .collect()
}

fn check_static(infer_all: bool) {
    for (what, got, want) in imported("onnx", "json", 32, infer_all) {
        assert_eq!(got.name, want.name);
        assert!(
            got.symbols().is_empty(),
            "{what}: symbols {:?}",
            got.symbols()
        );
        assert_same_graph(&got, &want, &what);
    }
}

#[test]
fn static_models_match_their_json_with_value_info() {
    check_static(false);
}

#[test]
fn static_models_match_their_json_by_inference_alone() {
    check_static(true);
}

/// Binds `batch` (and `seq` where the graph has it) in both graphs and compares bytes.
fn assert_same_bytes_bound(got: &Graph, want: &Graph, batch: u64, seq: u64, what: &str) {
    let values = |g: &Graph| -> Vec<(&'static str, u64)> {
        let mut v = vec![("batch", batch)];
        if g.find_symbol("seq").is_some() {
            v.push(("seq", seq));
        }
        v
    };
    let bg = got.bind(&values(got)).unwrap();
    let bw = want.bind(&values(want)).unwrap();
    for (a, b) in got.tensors().iter().zip(want.tensors().iter()) {
        assert_eq!(
            a.bytes(&bg),
            b.bytes(&bw),
            "{what} at batch {batch}, seq {seq}: bytes of `{}`",
            a.name
        );
    }
    let bound = got.bound(&bg).unwrap();
    assert!(
        bound.tensors().iter().all(|t| t.is_static()),
        "{what}: symbols left after binding"
    );
    for (a, b) in bound.tensors().iter().zip(want.tensors().iter()) {
        assert_eq!(
            a.static_bytes(),
            b.bytes(&bw),
            "{what}: bound bytes of `{}`",
            a.name
        );
    }
}

fn check_dynamic(infer_all: bool) {
    for (what, got, want) in imported("dynamic/onnx", "dynamic/json", 5, infer_all) {
        assert!(got.find_symbol("batch").is_some(), "{what}");
        assert_same_graph(&got, &want, &what);
        for (batch, seq) in [(1, 128), (8, 256), (3, 77)] {
            assert_same_bytes_bound(&got, &want, batch, seq, &what);
        }
    }
}

#[test]
fn dynamic_models_match_their_json_with_value_info() {
    check_dynamic(false);
}

#[test]
fn dynamic_models_match_their_json_by_inference_alone() {
    check_dynamic(true);
}

#[test]
fn dims_option_binds_symbols_at_import() {
    let path = root().join("dynamic/onnx/gpt2.onnx");
    let options = ImportOptions::default()
        .with_dim("batch", 8)
        .with_dim("seq", 256);
    let g = load(&path, &options).unwrap();
    assert!(g.tensors().iter().all(|t| t.is_static()));
    let want = Graph::load_json(&root().join("dynamic/json/gpt2.json")).unwrap();
    let b = want.bind(&[("batch", 8), ("seq", 256)]).unwrap();
    for (a, w) in g.tensors().iter().zip(want.tensors().iter()) {
        assert_eq!(a.static_bytes(), w.bytes(&b), "`{}`", a.name);
    }
    let err = load(&path, &ImportOptions::default().with_dim("heads", 12)).unwrap_err();
    assert!(err.to_string().contains("heads"), "{err}");
}

#[test]
fn unbound_symbols_stay_symbolic_and_name_themselves() {
    let g = load(
        &root().join("dynamic/onnx/vit_base_patch16_224.onnx"),
        &ImportOptions::default(),
    )
    .unwrap();
    let t = g.tensors().iter().find(|t| !t.is_static()).unwrap();
    let err = t.bytes(&Bindings::new()).unwrap_err();
    let batch = g.find_symbol("batch").unwrap();
    assert_eq!(err, memplan_ir::SizeError::Unbound(batch));
}
