//! `memplan inspect`: what a graph holds — nodes, tensors, bytes by kind, the largest
//! tensors and an op histogram ([`memplan::inspect`]); `--dim` binds symbols to numbers.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use memplan::load::{self, DEFAULT_GRAPH_NAME};

use crate::plan::Format;
use crate::ui;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Graph file: memplan JSON or ONNX (recognised by content), `-` for standard input.
    /// Without one, inspects the embedded default graph.
    graph: Option<PathBuf>,
    /// Value of a shape symbol, NAME=VALUE (repeatable), e.g. `--dim batch=8`.
    #[arg(long = "dim", value_parser = load::parse_dim)]
    dims: Vec<(String, u64)>,
    /// How many of the largest tensors to list.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the report to FILE (atomically); `-` is standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.top == 0 {
        bail!("--top 0 lists nothing: give at least 1");
    }
    if args.graph.is_none() {
        ui::note(format!(
            "no graph given: inspecting the embedded {DEFAULT_GRAPH_NAME}"
        ));
    }
    let graph = load::load_graph(args.graph.as_deref())?;
    let graph = load::bind_dims(graph, &args.dims, false)?;
    let text = match args.format {
        Format::Text => memplan::inspect::text(&graph, args.top)?,
        Format::Json => memplan::inspect::json_text(&graph, args.top)?,
    };
    ui::write_output(args.output.as_deref(), text.as_bytes())?;
    Ok(ui::exit(ui::OK))
}
