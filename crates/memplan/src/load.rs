//! Loading graphs: memplan JSON, ONNX, or the embedded default graph, told apart by content,
//! from a file, standard input (`-`) or bytes in memory, with `--dim NAME=VALUE` bindings for
//! symbolic shapes (each name once; 0 is a value too: an empty tensor, such as a KV cache's
//! past on the first call), and `--bound` bindings of data-dependent sizes to their bounds.
//! A Hugging Face `config.json` given as a graph is recognised and pointed to
//! `memplan estimate`. [`prepare`] makes a loaded graph ready for planning, as `memplan plan`
//! does before it plans.

use std::path::Path;

use memplan_ir::Graph;
use memplan_planner::PlanOptions;

use crate::options::PlanSettings;
use crate::{Context, Notes, Result, bail};

/// The graph used when no file is given: DenseNet-121 at batch 1, a real branchy network
/// (668 nodes) whose concatenations make placement non-trivial.
pub const DEFAULT_GRAPH_NAME: &str = "light_densenet121_b1";
const DEFAULT_GRAPH_JSON: &str = include_str!("../data/light_densenet121_b1.json");

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

/// The `--dim` values with each name once: the same name twice is an error unless both
/// give the same value.
pub fn unique_dims(dims: &[(String, u64)]) -> Result<Vec<(String, u64)>> {
    let mut out: Vec<(String, u64)> = Vec::with_capacity(dims.len());
    for (name, value) in dims {
        match out.iter().find(|(n, _)| n == name) {
            Some((_, v)) if v == value => {}
            Some((_, v)) => {
                bail!("--dim {name} is given twice, as {v} and as {value}: give it once")
            }
            None => out.push((name.clone(), *value)),
        }
    }
    Ok(out)
}

/// What a graph file holds, told by its content first and its name second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphFormat {
    /// memplan's JSON graph format.
    Json,
    /// An ONNX model.
    Onnx,
}

/// Where the bytes of a graph come from: the label errors use, and a file's name.
#[derive(Clone, Copy, Debug)]
pub enum Origin<'a> {
    /// A file: its extension helps tell the format, its stem names an ONNX graph.
    File(&'a Path),
    /// Standard input (`-`).
    Stdin,
    /// Bytes handed over in memory (a Python `bytes` or `onnx.ModelProto`).
    Memory,
}

impl Origin<'_> {
    /// How errors name the source: the path, `standard input`, `the bytes given`.
    pub fn label(&self) -> String {
        match self {
            Origin::File(path) => path.display().to_string(),
            Origin::Stdin => "standard input".to_owned(),
            Origin::Memory => "the bytes given".to_owned(),
        }
    }
}

/// JSON when the text opens with `{`; ONNX when the bytes open as an ONNX model does (the
/// `ir_version` field, tag 0x08) or are not text; otherwise the extension decides, and a
/// file without a known one is read as JSON (so that its syntax error is reported).
pub fn detect(bytes: &[u8], path: &Path) -> GraphFormat {
    let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        return GraphFormat::Json;
    }
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("onnx") => return GraphFormat::Onnx,
        Some("json") => return GraphFormat::Json,
        _ => {}
    }
    if bytes.first() == Some(&0x08) || std::str::from_utf8(bytes).is_err() {
        GraphFormat::Onnx
    } else {
        GraphFormat::Json
    }
}

/// The embedded default graph ([`DEFAULT_GRAPH_NAME`]).
pub fn default_graph() -> Result<Graph> {
    Graph::from_json(DEFAULT_GRAPH_JSON).context("the embedded default graph")
}

/// Reads a graph: memplan JSON or ONNX, told apart by content (see [`detect`]); `-` reads
/// standard input; `None` gives the embedded default graph.
pub fn load_graph(path: Option<&Path>) -> Result<Graph> {
    let Some(path) = path else {
        return default_graph();
    };
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes)
            .context("reading standard input")?;
        return load_bytes(bytes, Origin::Stdin);
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    load_bytes(bytes, Origin::File(path))
}

/// A graph from its bytes: memplan JSON or ONNX, told apart by content (see [`detect`]).
pub fn load_bytes(bytes: Vec<u8>, origin: Origin<'_>) -> Result<Graph> {
    let label = origin.label();
    let path = match origin {
        Origin::File(path) => path,
        Origin::Stdin | Origin::Memory => Path::new(""),
    };
    match detect(&bytes, path) {
        GraphFormat::Onnx => import_onnx(&bytes, origin, &label),
        GraphFormat::Json => {
            let text = String::from_utf8(bytes)
                .map_err(|_| crate::err!("{label} is neither UTF-8 JSON nor ONNX"))?;
            Graph::from_json(&text).or_else(|e| {
                if let Some(model) = model_config(&text) {
                    bail!(
                        "{label} is a Hugging Face model config ({model}), not a graph: `memplan estimate --config {label}` sizes the model from it"
                    );
                }
                Err(crate::Error::wrap(e).context(format!("loading {label}")))
            })
        }
    }
}

#[cfg(feature = "onnx")]
fn import_onnx(bytes: &[u8], origin: Origin<'_>, label: &str) -> Result<Graph> {
    let options = memplan_onnx::ImportOptions::default();
    let mut graph = memplan_onnx::import(bytes, &options)
        .with_context(|| format!("importing {label} as ONNX"))?;
    if let Origin::File(path) = origin
        && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
    {
        graph.name = stem.to_owned();
    }
    Ok(graph)
}

#[cfg(not(feature = "onnx"))]
fn import_onnx(_bytes: &[u8], _origin: Origin<'_>, label: &str) -> Result<Graph> {
    bail!("{label} is ONNX, and this memplan was built without the `onnx` feature")
}

/// What a Hugging Face `config.json` says the model is (`model_type llama`), when `text` is
/// one: an object with `model_type` or `architectures` and none of a graph's lists.
pub fn model_config(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let obj = v.as_object()?;
    if obj.contains_key("tensors") || obj.contains_key("nodes") {
        return None;
    }
    if let Some(t) = obj.get("model_type").and_then(|t| t.as_str()) {
        return Some(format!("model_type {t}"));
    }
    let first = obj.get("architectures")?.as_array()?.first()?.as_str()?;
    Some(format!("architecture {first}"))
}

/// The `--dim` values as bindings of `graph`'s symbols: each name once, and only names the
/// graph has (a graph with no symbols takes no `--dim`).
pub fn bindings(graph: &Graph, dims: &[(String, u64)]) -> Result<memplan_ir::Bindings> {
    let dims = unique_dims(dims)?;
    if !dims.is_empty() && graph.symbols().is_empty() {
        bail!(
            "graph `{}` has no symbolic dimensions (every shape is fixed): leave out --dim {}",
            graph.name,
            describe(&dims)
        );
    }
    let pairs: Vec<(&str, u64)> = dims.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    Ok(graph.bind(&pairs)?)
}

/// Binds `dims` into `graph`. Naming a symbol the graph does not have is an error; so is
/// leaving one unbound when `require_static` is set.
pub fn bind_dims(graph: Graph, dims: &[(String, u64)], require_static: bool) -> Result<Graph> {
    let dims = unique_dims(dims)?;
    let bindings = bindings(&graph, &dims)?;
    let bound = graph
        .bound(&bindings)
        .with_context(|| format!("binding {}", describe(&dims)))?;
    if require_static {
        require_bound(&bound, &bindings)?;
    }
    Ok(bound)
}

/// An error naming the symbols that sizes need and `bindings` leave unbound (a dimension
/// such as `batch*seq` needs only `batch` when `seq` is given).
fn require_bound(graph: &Graph, bindings: &memplan_ir::Bindings) -> Result<()> {
    let mut unbound: Vec<&str> = Vec::new();
    let mut boundable = false;
    for t in graph.tensors().iter() {
        // A tensor with a known element count is sized whatever its dims are.
        let sizing: Vec<&memplan_ir::Expr> = match &t.element_count {
            Some(count) => vec![count],
            None => t.shape.iter().collect(),
        };
        for d in sizing {
            for s in d.symbols() {
                let name = graph.symbols().get(s).map_or("?", String::as_str);
                // A broadcast or divided dim follows from its dims, which are listed.
                let derived = graph
                    .symbol_broadcast(s)
                    .is_some_and(|(a, b)| !a.symbols().is_empty() || !b.symbols().is_empty())
                    || graph
                        .symbol_quotient(s)
                        .is_some_and(|q| !q.num.symbols().is_empty());
                if bindings.get(s).is_none() && !derived && !unbound.contains(&name) {
                    boundable |= graph.symbol_bound(s).is_some();
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
            graph.name,
            unbound.join(", "),
            hint.join(" ")
        );
    }
    Ok(())
}

/// A graph to plan, its symbols kept: the `--dim` values as bindings, and with `at_bounds`
/// (`--bound`) every bounded data-dependent symbol they leave unbound at its bound (a note),
/// listed as bounded so that the plan holds every smaller value. Every size must then be
/// bound. The plan records the bindings, so `check --plan` needs no `--dim`.
pub fn bind_for_planning(
    graph: Graph,
    dims: &[(String, u64)],
    at_bounds: bool,
    notes: &mut dyn Notes,
) -> Result<(Graph, memplan_ir::Bindings, Vec<memplan_ir::SymbolId>)> {
    let dims = unique_dims(dims)?;
    let given = bindings(&graph, &dims)?;
    let (all, bounded) = if at_bounds {
        let (all, bounded) = graph
            .bind_to_bounds(&given)
            .context("evaluating the bounds of data-dependent sizes")?;
        for &(s, value) in &bounded {
            let name = graph.symbols().get(s).map_or("?", String::as_str);
            let expr = graph
                .symbol_bound(s)
                .map(|e| e.display(graph.symbols()).to_string())
                .unwrap_or_default();
            notes.note(format!("bounded: {name} = {value} (at most {expr})"));
        }
        if bounded.is_empty() {
            notes.note(format!(
                "--bound: graph `{}` has no data-dependent size left to bound{}, so it changes nothing",
                graph.name,
                if graph.symbol_bounds().is_empty() {
                    ""
                } else {
                    " (--dim binds them all)"
                }
            ));
        }
        (all, bounded.into_iter().map(|(s, _)| s).collect())
    } else {
        (given, Vec::new())
    };
    // Every size computable: a dim that evaluates negative or a size that overflows is an
    // error here, naming every such tensor, rather than the planner's first.
    let bound = graph
        .bound(&all)
        .with_context(|| format!("binding {}", describe(&dims)))?;
    bound
        .validate()
        .with_context(|| format!("graph `{}` at {}", graph.name, describe(&dims)))?;
    require_bound(&graph, &all)?;
    Ok((graph, all, bounded))
}

/// A graph loaded with the planning settings applied, ready for [`crate::plan::plan`]: the
/// `persistent` inputs marked as training state, an optimizer graph's sequence inputs sized
/// from `parameters`, the `dims` (and with `bound` the bounds) as the options' bindings,
/// every size bound. What `memplan plan` does between loading a graph and planning it.
pub fn prepare(
    mut graph: Graph,
    settings: &PlanSettings,
    notes: &mut dyn Notes,
) -> Result<(Graph, PlanOptions)> {
    crate::training::mark_persistent(&mut graph, &settings.persistent, notes)?;
    let mut dims = settings.dims.clone();
    if let Some(parameters) = &settings.parameters {
        dims.extend(crate::training::parameter_dims(&graph, parameters, notes)?);
    }
    let (graph, bindings, bounded) = bind_for_planning(graph, &dims, settings.bound, notes)?;
    let options = settings
        .plan_options(notes)?
        .with_bindings(bindings)
        .with_bounded(bounded);
    Ok((graph, options))
}

/// The graph as it is, symbols and all, with the `persistent` inputs marked and the options
/// carrying the `dims` as bindings (for fitting, which plans at several values).
pub fn prepare_symbolic(
    mut graph: Graph,
    settings: &PlanSettings,
    notes: &mut dyn Notes,
) -> Result<(Graph, PlanOptions)> {
    crate::training::mark_persistent(&mut graph, &settings.persistent, notes)?;
    let options = settings
        .plan_options(notes)?
        .with_bindings(bindings(&graph, &settings.dims)?);
    Ok((graph, options))
}

fn describe(dims: &[(String, u64)]) -> String {
    dims.iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
