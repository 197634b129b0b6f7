//! `memplan inspect`: what a graph holds — nodes, tensors, bytes by kind, the largest
//! tensors and an op histogram. Symbolic graphs show their symbols, and the bounds of
//! data-dependent ones; byte figures need every symbol bound with `--dim`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use memplan_ir::{Graph, TensorKind};

use crate::load::{self, DEFAULT_GRAPH_NAME};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Graph file (memplan JSON or .onnx). Without one, inspects the embedded default graph.
    graph: Option<PathBuf>,
    /// Value of a shape symbol, NAME=VALUE (repeatable), e.g. `--dim batch=8`.
    #[arg(long = "dim", value_parser = load::parse_dim)]
    dims: Vec<(String, u64)>,
    /// How many of the largest tensors to list.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.graph.is_none() {
        eprintln!("no graph given: inspecting the embedded {DEFAULT_GRAPH_NAME}");
    }
    let graph = load::load_graph(args.graph.as_deref())?;
    let graph = load::bind_dims(graph, &args.dims, false)?;
    print!("{}", report(&graph, args.top));
    Ok(ExitCode::SUCCESS)
}

const KINDS: [TensorKind; 4] = [
    TensorKind::Input,
    TensorKind::Output,
    TensorKind::Activation,
    TensorKind::Weight,
];

/// The text report, deterministic for a given graph.
pub fn report(graph: &Graph, top: usize) -> String {
    let mut out = String::new();
    let count = |k: TensorKind| graph.tensors().iter().filter(|t| t.kind == k).count();
    let _ = writeln!(out, "graph {}", graph.name);
    let _ = writeln!(
        out,
        "  {} nodes, {} tensors: {} inputs, {} outputs, {} activations, {} weights",
        graph.nodes().len(),
        graph.tensors().len(),
        count(TensorKind::Input),
        count(TensorKind::Output),
        count(TensorKind::Activation),
        count(TensorKind::Weight),
    );
    let symbolic: Vec<&str> = {
        let mut used: Vec<&str> = graph
            .tensors()
            .iter()
            .flat_map(|t| t.shape.iter().flat_map(|d| d.symbols()))
            .filter_map(|s| graph.symbols().get(s).map(String::as_str))
            .collect();
        used.sort_unstable();
        used.dedup();
        used
    };
    if !symbolic.is_empty() {
        let _ = writeln!(
            out,
            "  symbols: {} (bind with --dim NAME=VALUE for byte figures)",
            symbolic.join(", ")
        );
    }
    if !graph.symbol_bounds().is_empty() {
        let bounds: Vec<String> = graph
            .symbol_bounds()
            .iter()
            .map(|(s, e)| {
                let name = graph.symbols().get(*s).map_or("?", String::as_str);
                format!("{name} <= {}", e.display(graph.symbols()))
            })
            .collect();
        let _ = writeln!(
            out,
            "  data-dependent sizes with a bound (plan --bound plans at them): {}",
            bounds.join(", ")
        );
    }

    let sizes: Vec<Option<u64>> = graph
        .tensors()
        .iter()
        .map(|t| t.static_bytes().ok())
        .collect();
    let _ = writeln!(out, "\nbytes by kind");
    for kind in KINDS {
        let (mut total, mut unknown) = (0u64, 0usize);
        for (t, size) in graph.tensors().iter().zip(&sizes) {
            if t.kind == kind {
                match size {
                    Some(b) => total = total.saturating_add(*b),
                    None => unknown += 1,
                }
            }
        }
        let extra = if unknown > 0 {
            format!(" (+{unknown} symbolic)")
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {:<11} {:>16} B  {:>12}{extra}",
            kind.name(),
            group(total),
            mib(total)
        );
    }

    let mut largest: Vec<(u64, &str, usize)> = graph
        .tensors()
        .iter()
        .zip(&sizes)
        .enumerate()
        .filter(|(_, (t, _))| t.kind != TensorKind::Weight)
        .filter_map(|(i, (t, s))| s.map(|b| (b, t.name.as_str(), i)))
        .collect();
    largest.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.cmp(&b.2)));
    let _ = writeln!(out, "\nlargest non-weight tensors");
    for &(bytes, name, i) in largest.iter().take(top) {
        let t = &graph.tensors().as_slice()[i];
        let dims: Vec<String> = t
            .shape
            .iter()
            .map(|d| d.display(graph.symbols()).to_string())
            .collect();
        let _ = writeln!(
            out,
            "  {:>16} B  {:>12}  {:<10} {} [{}] {}",
            group(bytes),
            mib(bytes),
            t.kind.name(),
            t.dtype,
            dims.join(", "),
            name
        );
    }

    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    for n in graph.nodes().iter() {
        *ops.entry(n.op.as_str()).or_default() += 1;
    }
    let mut ops: Vec<(&str, usize)> = ops.into_iter().collect();
    ops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let _ = writeln!(out, "\nops ({} types)", ops.len());
    for (op, n) in ops {
        let _ = writeln!(out, "  {n:>6}  {op}");
    }
    out
}

/// `1234567` as `1,234,567`.
pub use memplan_tracker::group_digits as group;

/// Bytes in MiB with one decimal.
pub fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
}
