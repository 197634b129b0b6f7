//! Every graph of the in-repo corpus loads, validates, and writes back byte for byte.

use std::path::{Path, PathBuf};

#[path = "../../planner/tests/common/fixtures.rs"]
mod fixtures;

use memplan_ir::{Bindings, Graph};

fn corpus(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/graphs")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// Fails naming the first line that differs (a whole-file diff is too long to read).
fn assert_same_text(written: &str, original: &str, path: &Path) {
    if written == original {
        return;
    }
    for (i, (a, b)) in written.lines().zip(original.lines()).enumerate() {
        assert_eq!(
            a,
            b,
            "{} line {} differs after a round trip",
            path.display(),
            i + 1
        );
    }
    panic!(
        "{}: {} lines written, {} in the file",
        path.display(),
        written.lines().count(),
        original.lines().count()
    );
}

/// Loads every graph of `dir` (there must be `count`), runs `check` on it, and writes it
/// back: the text must be the file's, byte for byte. One verdict per file.
fn round_trip(dir: &str, count: usize, check: impl Fn(&Graph, &Path)) {
    let files = corpus(dir);
    assert_eq!(files.len(), count);
    fixtures::each(
        files.into_iter().map(|p| (p.display().to_string(), p)),
        |_, path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let graph =
                Graph::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            check(&graph, &path);
            assert_same_text(&graph.to_json(), &text, &path);
        },
    );
}

#[test]
fn static_graphs_round_trip_byte_for_byte() {
    round_trip("json", 32, |graph, _| {
        assert!(graph.symbols().is_empty());
        assert!(graph.tensors().iter().all(|t| t.is_static()));
    });
}

#[test]
fn dynamic_graphs_round_trip_byte_for_byte() {
    round_trip("dynamic/json", 5, |graph, path| {
        assert!(graph.find_symbol("batch").is_some(), "{}", path.display());
        assert!(graph.tensors().iter().any(|t| !t.is_static()));
    });
}

/// The dynamic graphs bound to a corpus batch size hold every tensor of the matching static
/// graph, name for name, with the same bytes (check A of the dynamic graphs' README; gpt2
/// and bert renumber some constants once `seq` is symbolic, so they are not compared here).
#[test]
fn dynamic_graphs_bind_to_the_static_sizes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/graphs");
    for (model, batch) in [
        ("vit_base_patch16_224", 1),
        ("vit_base_patch16_224", 8),
        ("tv_mobilenet_v3_large", 1),
        ("tv_mobilenet_v3_large", 8),
        ("smp_unet_resnet34", 1),
    ] {
        let dynamic = Graph::load_json(&root.join(format!("dynamic/json/{model}.json"))).unwrap();
        let stat = Graph::load_json(&root.join(format!("json/{model}_b{batch}.json"))).unwrap();
        let bindings: Bindings = dynamic.bind(&[("batch", batch)]).unwrap();
        for t in stat.tensors().iter() {
            let d = dynamic
                .find_tensor(&t.name)
                .unwrap_or_else(|| panic!("{model}: {} missing", t.name));
            assert_eq!(dynamic.tensors()[d].dtype, t.dtype, "{model}: {}", t.name);
            assert_eq!(
                dynamic.tensors()[d].bytes(&bindings).unwrap(),
                t.static_bytes().unwrap(),
                "{model}: {}",
                t.name
            );
        }
        let bound = dynamic.bound(&bindings).unwrap();
        assert!(bound.tensors().iter().all(|t| t.is_static()));
    }
    let gpt2 = Graph::load_json(&root.join("dynamic/json/gpt2.json")).unwrap();
    assert!(gpt2.bind(&[("heads", 1)]).is_err());
    let unbound = gpt2.tensors().iter().find(|t| !t.is_static()).unwrap();
    assert!(matches!(
        unbound.bytes(&Bindings::new()),
        Err(memplan_ir::SizeError::Unbound(_))
    ));
}

#[test]
fn the_declared_order_of_outputs_round_trips_and_only_when_it_differs() {
    use memplan_ir::{DType, GraphBuilder};
    let mut b = GraphBuilder::new("outputs");
    let x = b.input("x", DType::F32, [4]);
    let first_made = b.op("Relu", &[x], DType::F32, [4]);
    let second_made = b.op("Neg", &[first_made], DType::F32, [4]);
    b.mark_output(second_made);
    b.mark_output(first_made);
    let g = b.build().unwrap();
    assert_eq!(g.outputs(), [second_made, first_made]);
    let json = g.to_json();
    assert!(
        json.contains(r#""outputs": ["t2_Neg", "t1_Relu"]"#),
        "{json}"
    );
    let back = Graph::from_json(&json).unwrap();
    assert_eq!(back.outputs(), [second_made, first_made]);
    assert_eq!(back.to_json(), json);
    // In id order, nothing is written.
    let mut b = GraphBuilder::new("outputs");
    let x = b.input("x", DType::F32, [4]);
    let y = b.op("Relu", &[x], DType::F32, [4]);
    let z = b.op("Neg", &[y], DType::F32, [4]);
    b.mark_output(y);
    b.mark_output(z);
    let g = b.build().unwrap();
    assert!(!g.to_json().contains("\n  \"outputs\": ["));
    // A name that is no output is refused.
    let bad = json.replace(r#""outputs": ["t2_Neg", "t1_Relu"]"#, r#""outputs": ["x"]"#);
    let err = Graph::from_json(&bad).unwrap_err().to_string();
    assert!(err.contains("outputs[0]"), "{err}");
}
