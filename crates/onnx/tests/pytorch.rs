//! Today's PyTorch exports as they come (`testdata/pytorch`): every one imports, its weight
//! data file absent; the only symbols are the dims the exporter named, and the ones memplan
//! makes follow one naming scheme; a dynamo export leaves no size unbounded, so `--dim` on
//! its named dims (and `--bound`) sizes everything.

use std::path::{Path, PathBuf};

use memplan_ir::Graph;
use memplan_onnx::{ImportOptions, load, proto};
use prost::Message;

fn exports() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/pytorch/onnx");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    files.sort();
    assert!(files.len() >= 28, "{} exports", files.len());
    files
}

/// The dims the exporters name on graph inputs.
const NAMED: &[&str] = &["batch", "seq", "past", "height", "width", "samples"];

/// `{node}_o{k}_d{axis}` (a dim a node's output makes), `{node}_b{i}` (a broadcast that is no
/// whole output dim), `{node}_q{i}` (a quotient that is none), `{input}_d{axis}`, each perhaps
/// with a `_{n}` to keep it unique.
fn made_by_memplan(name: &str) -> bool {
    let parts: Vec<&str> = name.split('_').collect();
    let is = |p: &str, head: char| {
        p.strip_prefix(head)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let number = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    match parts.as_slice() {
        [.., o, d] if is(o, 'o') && is(d, 'd') => true,
        [.., o, d, n] if is(o, 'o') && is(d, 'd') && number(n) => true,
        [.., b] if is(b, 'b') || is(b, 'd') || is(b, 'q') => true,
        _ => false,
    }
}

#[test]
fn every_export_imports_without_its_weight_data() {
    for path in exports() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // The weights are external and their file is not vendored.
        let model = proto::ModelProto::decode(std::fs::read(&path).unwrap().as_slice()).unwrap();
        let graph = model.graph.as_ref().unwrap();
        let external: Vec<&proto::TensorProto> = graph
            .initializer
            .iter()
            .filter(|t| t.data_location == 1)
            .collect();
        assert!(!external.is_empty(), "{name}: no external initializer");
        for t in &external {
            for entry in &t.external_data {
                if entry.key == "location" {
                    let data = path.with_file_name(&entry.value);
                    assert!(!data.exists(), "{name}: {} is vendored", data.display());
                }
            }
        }
        let g = load(&path, &ImportOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        for t in &external {
            let id = g.find_tensor(&t.name).unwrap();
            let dims: Vec<u64> = t.dims.iter().map(|&d| d as u64).collect();
            assert_eq!(
                g.tensor(id).static_dims(),
                Some(dims),
                "{name}: `{}`",
                t.name
            );
        }
        for s in g.symbols().iter() {
            assert!(
                NAMED.contains(&s.as_str()) || made_by_memplan(s),
                "{name}: symbol `{s}` is neither a named dim nor in memplan's scheme"
            );
        }
    }
}

#[test]
fn a_dynamo_export_is_sized_by_its_named_dims_and_the_bounds() {
    for path in exports() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.contains("dynamo") {
            continue;
        }
        let g: Graph = load(&path, &ImportOptions::default()).unwrap();
        let named: Vec<(&str, u64)> = NAMED
            .iter()
            .filter(|n| g.find_symbol(n).is_some())
            .map(|&n| {
                let v = match n {
                    "past" => 0,
                    "height" | "width" => 224,
                    "samples" => 16_000,
                    _ => 3,
                };
                (n, v)
            })
            .collect();
        let given = g.bind(&named).unwrap();
        let (all, _) = g.bind_to_bounds(&given).unwrap();
        for t in g.tensors().iter() {
            t.bytes(&all)
                .unwrap_or_else(|e| panic!("{name}: `{}` has no size: {e}", t.name));
        }
        // Every symbol memplan made is bounded or follows from others.
        for (s, n) in g.symbols().iter_enumerated() {
            if NAMED.contains(&n.as_str()) {
                continue;
            }
            assert!(
                g.symbol_bound(s).is_some() || g.is_derived(s),
                "{name}: `{n}` is neither bounded nor a broadcast or quotient"
            );
        }
    }
}

#[test]
fn the_naming_scheme_is_what_the_tests_expect() {
    for ok in [
        "node_NonZero_197_o0_d1",
        "Add_3_o1_d0_2",
        "x_d0",
        "Where_b0",
        "Div_q1",
    ] {
        assert!(made_by_memplan(ok), "{ok}");
    }
    for bad in ["batch", "unk__3", "s3", "Add_o", "d"] {
        assert!(!made_by_memplan(bad), "{bad}");
    }
}
