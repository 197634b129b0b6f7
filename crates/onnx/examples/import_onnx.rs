//! Import an ONNX model into the memplan IR, with shape inference, and list what it holds.
//!
//! `cargo run -p memplan-onnx --example import_onnx -- testdata/graphs/onnx/gpt2_b1.onnx`
//! (without a path, a small model from `testdata`).

use memplan_onnx::{ImportOptions, import};

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "testdata/graphs/onnx/ddddocr_crnn_b1.onnx".to_owned());
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cannot read {path}: {e}");
            std::process::exit(2);
        }
    };
    let graph = match import(&bytes, &ImportOptions::default()) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    };
    let symbols: Vec<&str> = graph.symbols().iter().map(String::as_str).collect();
    println!(
        "{}: {} nodes, {} tensors, symbols [{}]",
        graph.name,
        graph.nodes().len(),
        graph.tensors().len(),
        symbols.join(", ")
    );
    for t in graph.tensors().iter().filter(|t| t.is_static()).take(5) {
        let bytes = t
            .static_bytes()
            .map_or_else(|e| e.to_string(), |b| b.to_string());
        println!(
            "  {:<40} {:>5} {:>12} bytes ({})",
            t.name,
            t.dtype.name(),
            bytes,
            t.kind
        );
    }
}
