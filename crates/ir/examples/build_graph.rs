//! Build a graph in code, validate it, ask the op table what each node may alias, and write
//! the graph as JSON (the format `memplan` reads): a small MLP block with a symbolic batch, a
//! Reshape view and an in-place Relu. A broken graph is then built on purpose to show what
//! validation reports.
//!
//! `cargo run -p memplan-ir --example build_graph`

use memplan_ir::{DType, Expr, Graph, GraphBuilder, MemorySemantics, OpTable, TensorKind};

fn main() {
    let graph = match mlp_block() {
        Ok(graph) => graph,
        Err(e) => {
            eprintln!("invalid graph: {e}");
            std::process::exit(1);
        }
    };

    // Sizes are polynomials in the symbols; bind them to get bytes.
    let bindings = match graph.bind(&[("batch", 8)]) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cannot bind: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "{}: {} tensors, {} nodes",
        graph.name,
        graph.tensors().len(),
        graph.nodes().len()
    );
    for t in graph.tensors().iter() {
        let bytes = t
            .bytes(&bindings)
            .map_or_else(|e| format!("? ({e})"), |b| format!("{b} bytes at batch 8"));
        println!("  {:<10} {:<10} {bytes}", t.name, t.kind.name());
    }

    // What the default op table lets each output share with an input.
    let table = OpTable::default();
    for node in graph.nodes().iter() {
        for (out, sem) in node
            .outputs
            .iter()
            .zip(table.semantics(&graph, node, &bindings))
        {
            let how = match sem {
                MemorySemantics::Opaque => "needs its own bytes".to_owned(),
                MemorySemantics::View { input, offset } => {
                    format!("is a view of input {input} at byte {offset}")
                }
                MemorySemantics::InPlace { inputs } => {
                    format!("may be written over input(s) {inputs:?}")
                }
            };
            println!(
                "  {} ({}): {} {how}",
                node.name,
                node.op,
                graph.tensor(*out).name
            );
        }
    }

    // The JSON graph format; reading it back gives the same graph.
    let json = graph.to_json();
    match Graph::from_json(&json) {
        Ok(back) if back.to_json() == json => {
            println!("JSON: {} bytes, reads back the same", json.len())
        }
        Ok(_) => println!("JSON reads back differently"),
        Err(e) => println!("JSON does not read back: {e}"),
    }

    // Validation reports every problem, not just the first.
    let mut broken = GraphBuilder::new("broken");
    let x = broken.input("x", DType::F32, [4, 4]);
    let y = broken.op("Relu", &[x], DType::F32, [4, 4]);
    broken.op("Relu", &[y], DType::F32, [4, 4]);
    broken.input("x", DType::F32, [4]); // a second tensor named `x`
    // An output that no node produces.
    let orphan = broken.tensor("orphan", DType::F32, [4], TensorKind::Activation);
    broken.mark_output(orphan);
    match broken.build() {
        Ok(_) => println!("the broken graph validated (it should not)"),
        Err(e) => println!("the broken graph: {e}"),
    }
}

/// `y = Relu(Reshape(x) · w + b)` with x: f16[batch, 16, 16].
fn mlp_block() -> Result<Graph, memplan_ir::ValidationErrors> {
    let mut g = GraphBuilder::new("mlp_block");
    let batch = g.symbol("batch");
    let b = || Expr::symbol(batch);
    let x = g.input("x", DType::F16, [b(), 16.into(), 16.into()]);
    let shape = g.int_constant("shape", &[-1, 256]);
    let w = g.weight("w", DType::F16, [256, 64]);
    let bias = g.weight("bias", DType::F16, [64]);
    let flat = g.op("Reshape", &[x, shape], DType::F16, [b(), 256.into()]);
    let mm = g.op("MatMul", &[flat, w], DType::F16, [b(), 64.into()]);
    let sum = g.op("Add", &[mm, bias], DType::F16, [b(), 64.into()]);
    let y = g.op("Relu", &[sum], DType::F16, [b(), 64.into()]);
    g.mark_output(y);
    g.build()
}
