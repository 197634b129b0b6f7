//! Loading graphs for the subcommands: memplan JSON, ONNX, or the embedded default graph,
//! with `--dim NAME=VALUE` bindings for symbolic shapes.

use std::path::Path;

use anyhow::{Context, bail};
use memplan_ir::Graph;

/// The graph used when no file is given: DenseNet-121 at batch 1, a real branchy network
/// (668 nodes) whose concatenations make placement non-trivial.
pub const DEFAULT_GRAPH_NAME: &str = "light_densenet121_b1";
const DEFAULT_GRAPH_JSON: &str =
    include_str!("../../../testdata/graphs/json/light_densenet121_b1.json");

/// Parses a `--dim NAME=VALUE` argument.
pub fn parse_dim(s: &str) -> Result<(String, u64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE (e.g. batch=8)"))?;
    if name.is_empty() {
        return Err(format!("`{s}` has no symbol name"));
    }
    let value: u64 = value
        .parse()
        .map_err(|_| format!("`{value}` in `{s}` is not a non-negative integer"))?;
    Ok((name.to_owned(), value))
}

/// Reads a graph: `.onnx` files through the ONNX importer, anything else as memplan JSON;
/// `None` gives the embedded default graph.
pub fn load_graph(path: Option<&Path>) -> anyhow::Result<Graph> {
    let Some(path) = path else {
        return Graph::from_json(DEFAULT_GRAPH_JSON).context("the embedded default graph");
    };
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
    {
        return load_onnx(path);
    }
    Graph::load_json(path).with_context(|| format!("loading {}", path.display()))
}

fn load_onnx(path: &Path) -> anyhow::Result<Graph> {
    let options = memplan_onnx::ImportOptions::default();
    memplan_onnx::load(path, &options).with_context(|| format!("importing {}", path.display()))
}

/// Binds `dims` into `graph`. Naming a symbol the graph does not have is an error; so is
/// leaving one unbound when `require_static` is set.
pub fn bind_dims(
    graph: Graph,
    dims: &[(String, u64)],
    require_static: bool,
) -> anyhow::Result<Graph> {
    let pairs: Vec<(&str, u64)> = dims.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let bindings = graph.bind(&pairs).map_err(anyhow::Error::msg)?;
    let bound = graph
        .bound(&bindings)
        .with_context(|| format!("binding {}", describe(dims)))?;
    if require_static {
        let mut unbound: Vec<&str> = Vec::new();
        for t in bound.tensors().iter() {
            for d in &t.shape {
                for s in d.symbols() {
                    let name = bound.symbols().get(s).map_or("?", String::as_str);
                    if !unbound.contains(&name) {
                        unbound.push(name);
                    }
                }
            }
        }
        if !unbound.is_empty() {
            unbound.sort_unstable();
            let hint: Vec<String> = unbound.iter().map(|s| format!("--dim {s}=N")).collect();
            bail!(
                "graph `{}` has symbolic dims with no value: {} (pass {})",
                bound.name,
                unbound.join(", "),
                hint.join(" ")
            );
        }
    }
    Ok(bound)
}

fn describe(dims: &[(String, u64)]) -> String {
    dims.iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Loads and binds in one go; the result has only static shapes.
pub fn load_static(path: Option<&Path>, dims: &[(String, u64)]) -> anyhow::Result<Graph> {
    bind_dims(load_graph(path)?, dims, true)
}
