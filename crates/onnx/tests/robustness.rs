//! The in-`cargo test` smoke run of the fuzz target (`fuzz/fuzz_targets/import.rs`): random
//! bytes and random mutations of real corpus files never make the importer panic, and any graph
//! it does return is valid with computable sizes.

use std::path::Path;

use memplan_ir::{Bindings, Graph};
use memplan_onnx::{ImportOptions, import};
use proptest::prelude::*;

/// The same check as the fuzz target.
fn check(bytes: &[u8]) {
    for infer_all in [false, true] {
        let options = ImportOptions::default().with_infer_all(infer_all);
        if let Ok(graph) = import(bytes, &options) {
            assert_valid(&graph);
        }
    }
}

fn assert_valid(graph: &Graph) {
    assert!(graph.validate().is_ok(), "an imported graph must validate");
    // Every size is computable once each symbol is bound to 1 (no overflow, no negative dim).
    let mut ones = Bindings::new();
    for s in graph.symbols().ids() {
        ones.set(s, 1);
    }
    for t in graph.tensors().iter() {
        match t.bytes(&ones) {
            Ok(_)
            | Err(memplan_ir::SizeError::Unsized(_))
            | Err(memplan_ir::SizeError::NegativeDim { .. }) => {}
            Err(e) => panic!("tensor `{}`: {e}", t.name),
        }
    }
}

fn corpus(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/graphs")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const FILES: [&str; 3] = [
    "onnx/light_bvlc_alexnet_b1.onnx",
    "onnx/silero_vad_16k_b1.onnx",
    "dynamic/onnx/gpt2.onnx",
];

#[test]
fn corpus_files_pass_the_fuzz_check_unmutated() {
    for f in FILES {
        let bytes = corpus(f);
        assert!(import(&bytes, &ImportOptions::default()).is_ok(), "{f}");
        check(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&bytes);
    }

    #[test]
    fn mutated_corpus_files_never_panic(
        file in 0..FILES.len(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = corpus(FILES[file]);
        for (at, byte, how) in edits {
            let i = at.index(bytes.len());
            match how {
                0 => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ => {
                    bytes.remove(i);
                }
            }
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        check(&bytes);
    }
}

/// Deterministic single-byte mutations of every position of a small file: most still decode,
/// so the graph builder and inference see damaged-but-parseable models, not just decode errors.
#[test]
fn every_single_byte_mutation_of_a_small_model_is_handled() {
    let original = corpus(FILES[0]);
    let (mut ok, mut failed) = (0, 0);
    for i in 0..original.len() {
        for byte in [0x00, 0x7f, 0xff] {
            let mut bytes = original.clone();
            bytes[i] = byte;
            check(&bytes);
            match import(&bytes, &ImportOptions::default()) {
                Ok(_) => ok += 1,
                Err(_) => failed += 1,
            }
        }
    }
    assert!(ok > 0 && failed > 0, "{ok} imported, {failed} rejected");
}

/// Single-byte mutations of node-test models whose shapes depend on data (fresh symbols,
/// bounds, element counts) and of the newer ops' models: never a panic, and a graph that
/// imports is valid with computable sizes at its bounds.
#[test]
fn mutated_data_dependent_models_are_handled() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/node-tests/models");
    for name in [
        "test_nonzero_example",
        "test_reshape_extended_dims",
        "test_top_k",
        "test_nonmaxsuppression_two_batches",
        "test_dft_rfft",
        "test_col2im",
        "test_affine_grid_2d",
    ] {
        let original = std::fs::read(dir.join(format!("{name}.onnx"))).unwrap();
        for i in 0..original.len() {
            for byte in [0x00, 0x7f, 0xff] {
                let mut bytes = original.clone();
                bytes[i] = byte;
                check(&bytes);
                if let Ok(g) = import(&bytes, &ImportOptions::default()) {
                    let (at_bound, _) = match g.bind_to_bounds(&Bindings::new()) {
                        Ok(b) => b,
                        Err(_) => continue,
                    };
                    for t in g.tensors().iter() {
                        let _ = t.bytes(&at_bound);
                    }
                }
            }
        }
    }
}
