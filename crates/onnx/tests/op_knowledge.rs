//! Every op the importer has a shape rule for has a stated memory rule in
//! [`memplan_ir::OpTable::default`] (an explicit "opaque" counts), so the two lists cannot
//! drift apart: a new shape rule without a memory rule fails here. The op names are read
//! from the shape rules' own source (every capitalised string literal there names an op,
//! except the `auto_pad` and `pixel_format` values and MatMulNBits' `N` attribute).

use std::path::PathBuf;

use memplan_ir::OpTable;

/// Capitalised string literals of the shape-rule sources that are attribute values, not ops.
const NOT_OPS: &[&str] = &[
    "NOTSET",
    "VALID",
    "SAME",
    "SAME_UPPER",
    "SAME_LOWER",
    "RGB",
    "Grayscale",
    "N",
];

fn ops_with_shape_rules() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/infer");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let mut ops = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for literal in text.split('"').skip(1).step_by(2) {
            let op = literal.trim();
            let looks_like_op = op.starts_with(|c: char| c.is_ascii_uppercase())
                && op.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if looks_like_op && !NOT_OPS.contains(&op) {
                ops.push(op.to_owned());
            }
        }
    }
    ops.sort();
    ops.dedup();
    ops
}

#[test]
fn every_op_with_a_shape_rule_has_a_memory_rule() {
    let table = OpTable::default();
    let ops = ops_with_shape_rules();
    assert!(
        ops.len() > 150,
        "the source scan found only {} ops",
        ops.len()
    );
    // Contrib ops are named `com.microsoft.Op` in the graph.
    let missing: Vec<&String> = ops
        .iter()
        .filter(|op| !table.states(op) && !table.states(&format!("com.microsoft.{op}")))
        .collect();
    assert!(
        missing.is_empty(),
        "ops with a shape rule but no memory rule: {missing:?}"
    );
}
