//! ONNX Runtime's training graphs (`testdata/training`, made by
//! `onnxruntime.training.artifacts.generate_artifacts`) import as generated, and memplan's
//! own shape rules for the training ops give every tensor the type ONNX Runtime declares:
//! each graph is imported once trusting its `value_info` and once inferring every shape,
//! and the two must agree tensor by tensor.

use std::path::PathBuf;

use memplan_ir::Graph;
use memplan_onnx::{ImportOptions, load};

fn file(model: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/training")
        .join(model)
        .join(name)
}

/// The vendored models: every folder of `testdata/training` (`testdata/training/README.md`),
/// in name order, so that a model added there is checked here without a list to update.
fn models() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/training");
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    assert!(out.len() >= 8, "{} holds only {out:?}", dir.display());
    out
}

fn import(model: &str, name: &str, infer_all: bool) -> Graph {
    let options = ImportOptions::default().with_infer_all(infer_all);
    let path = file(model, name);
    load(&path, &options)
        .unwrap_or_else(|e| panic!("{} (infer_all {infer_all}): {e}", path.display()))
}

/// Binds `batch` (where the graph has it) and every bounded data-dependent symbol to its
/// bound.
fn bindings(g: &Graph) -> memplan_ir::Bindings {
    let base = if g.find_symbol("batch").is_some() {
        g.bind(&[("batch", 8)]).unwrap()
    } else {
        memplan_ir::Bindings::new()
    };
    g.bind_to_bounds(&base).unwrap().0
}

#[test]
fn training_graphs_infer_what_onnx_runtime_declares() {
    for model in models() {
        let model = model.as_str();
        let declared = import(model, "training_model.onnx", false);
        let inferred = import(model, "training_model.onnx", true);
        assert_eq!(
            declared.tensors().len(),
            inferred.tensors().len(),
            "{model}"
        );
        let (bd, bi) = (bindings(&declared), bindings(&inferred));
        let mut exact = 0;
        for (a, b) in declared.tensors().iter().zip(inferred.tensors().iter()) {
            assert_eq!((&a.name, a.dtype), (&b.name, b.dtype), "{model}");
            let (want, got) = (a.bytes(&bd).unwrap(), b.bytes(&bi).unwrap());
            if a.shape == b.shape {
                exact += 1;
                continue;
            }
            // The pool gradients are not given the forward input's shape: their spatial
            // dims are data-dependent, bounded by the largest input that pools to dY.
            assert!(
                b.shape.iter().any(|d| !d.is_constant()
                    && d.symbols()
                        .iter()
                        .any(|&s| inferred.symbol_bound(s).is_some())),
                "{model}: tensor `{}` is declared {:?} but inferred {:?}",
                a.name,
                a.shape,
                b.shape
            );
            assert!(
                got >= want,
                "{model}: `{}` bound {got} below {want}",
                a.name
            );
        }
        assert!(
            exact > declared.tensors().len() * 9 / 10,
            "{model}: {exact} exact"
        );
        assert!(
            declared
                .nodes()
                .iter()
                .any(|n| n.op == "com.microsoft.InPlaceAccumulatorV2"),
            "{model}"
        );
    }
}

#[test]
fn optimizer_graphs_import_with_sequence_symbols() {
    for model in models() {
        let model = model.as_str();
        let g = import(model, "optimizer_model.onnx", true);
        assert!(
            g.nodes()
                .iter()
                .any(|n| n.op == "com.microsoft.AdamWOptimizer"),
            "{model}"
        );
        for name in ["params_len", "params_item", "second_order_moments_item"] {
            assert!(g.find_symbol(name).is_some(), "{model}: no symbol {name}");
        }
    }
    let g = import("mlp", "optimizer_sgd.onnx", true);
    assert!(
        g.nodes()
            .iter()
            .any(|n| n.op == "com.microsoft.SGDOptimizerV2")
    );
}
