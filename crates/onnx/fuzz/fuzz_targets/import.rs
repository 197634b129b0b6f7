//! Fuzzes `memplan_onnx::import`: any bytes give a graph or an error, never a panic, and a
//! returned graph validates with computable sizes. `crates/onnx/tests/robustness.rs` runs the
//! same check under `cargo test`. Run with `cargo fuzz run import` from `crates/onnx`; seed the
//! corpus with `testdata/graphs/onnx/*.onnx`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use memplan_ir::{Bindings, SizeError};
use memplan_onnx::{ImportOptions, import};

fuzz_target!(|bytes: &[u8]| {
    for infer_all in [false, true] {
        let options = ImportOptions::default().with_infer_all(infer_all);
        if let Ok(graph) = import(bytes, &options) {
            assert!(graph.validate().is_ok(), "an imported graph must validate");
            let mut ones = Bindings::new();
            for s in graph.symbols().ids() {
                ones.set(s, 1);
            }
            for t in graph.tensors().iter() {
                match t.bytes(&ones) {
                    Ok(_) | Err(SizeError::Unsized(_)) | Err(SizeError::NegativeDim { .. }) => {}
                    Err(e) => panic!("tensor `{}`: {e}", t.name),
                }
            }
        }
    }
});
