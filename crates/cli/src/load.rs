//! Loading graphs for the subcommands: memplan JSON, ONNX, or the embedded default graph,
//! with `--dim NAME=VALUE` bindings for symbolic shapes, and `--bound` bindings of
//! data-dependent sizes to their bounds.

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
        let mut boundable = false;
        for t in bound.tensors().iter() {
            // A tensor with a known element count is sized whatever its dims are.
            let sizing: Vec<&memplan_ir::Expr> = match &t.element_count {
                Some(count) => vec![count],
                None => t.shape.iter().collect(),
            };
            for d in sizing {
                for s in d.symbols() {
                    let name = bound.symbols().get(s).map_or("?", String::as_str);
                    boundable |= bound.symbol_bound(s).is_some();
                    if !unbound.contains(&name) {
                        unbound.push(name);
                    }
                }
            }
        }
        if !unbound.is_empty() {
            unbound.sort_unstable();
            let hint: Vec<String> = unbound.iter().map(|s| format!("--dim {s}=N")).collect();
            let or_bound = if boundable {
                ", or --bound to plan data-dependent sizes at their bounds"
            } else {
                ""
            };
            bail!(
                "graph `{}` has symbolic dims with no value: {} (pass {}{or_bound})",
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

/// Loads and binds in one go; the result has only static sizes. With `at_bounds`
/// (`--bound`), every bounded data-dependent symbol that `dims` leaves unbound is set to its
/// bound; standard error says which.
pub fn load_static(
    path: Option<&Path>,
    dims: &[(String, u64)],
    at_bounds: bool,
) -> anyhow::Result<Graph> {
    let graph = load_graph(path)?;
    if !at_bounds {
        return bind_dims(graph, dims, true);
    }
    let pairs: Vec<(&str, u64)> = dims.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let given = graph.bind(&pairs).map_err(anyhow::Error::msg)?;
    let (_, bounded) = graph
        .bind_to_bounds(&given)
        .context("evaluating the bounds of data-dependent sizes")?;
    let mut all = dims.to_vec();
    for (s, value) in bounded {
        let name = graph.symbols().get(s).map_or("?", String::as_str);
        let expr = graph
            .symbol_bound(s)
            .map(|e| e.display(graph.symbols()).to_string())
            .unwrap_or_default();
        eprintln!("bounded: {name} = {value} (at most {expr})");
        all.push((name.to_owned(), value));
    }
    bind_dims(graph, &all, true)
}
