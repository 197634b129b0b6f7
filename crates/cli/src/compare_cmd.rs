//! `memplan compare`: plan each graph under several configurations (packing strategies,
//! schedule modes, aliasing on or off) and tabulate, per graph, each one's arena, its
//! ratio to its own lower bound and its time, marking the smallest arena
//! ([`memplan::compare`]). Text, CSV, markdown or JSON; exit status 1 when a plan fails the
//! verifier.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use memplan::compare;
use memplan::load;

use crate::progress::Progress;
use crate::ui;

/// Output format of `memplan compare`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables, one per graph.
    Text,
    /// One row per configuration, with a header.
    Csv,
    /// One markdown table.
    Markdown,
    /// A JSON array of rows.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Graph files (memplan JSON or ONNX) or folders of them (at any depth); without any,
    /// the embedded default graph.
    graphs: Vec<PathBuf>,
    /// Packing strategies, comma separated, or `all`.
    #[arg(long, default_value = "auto", value_name = "LIST")]
    strategies: String,
    /// Schedule modes, comma separated: given, memory.
    #[arg(long, default_value = "given", value_name = "LIST")]
    schedules: String,
    /// Aliasing (views and in-place writes), comma separated: on, off.
    #[arg(long, default_value = "on", value_name = "LIST")]
    aliasing: String,
    /// Alignment of every buffer offset in bytes (a power of two).
    #[arg(long, default_value_t = 256)]
    align: u64,
    /// Value of a shape symbol, NAME=VALUE (repeatable), for every graph that has it (a
    /// graph without the symbol ignores it; a symbol no graph has is an error).
    #[arg(long = "dim", value_parser = load::parse_dim)]
    dims: Vec<(String, u64)>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Leave the time column out (the rest of the output is the same on every run).
    #[arg(long)]
    no_time: bool,
    /// Write the table to FILE (atomically); `-` is standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let configs = compare::configs(&args.strategies, &args.schedules, &args.aliasing)?;
    if !args.align.is_power_of_two() {
        bail!("--align {} is not a power of two", args.align);
    }
    let files = compare::graph_files(&args.graphs)?;
    if files.iter().any(Option::is_none) {
        ui::note(format!(
            "no graph given: comparing on the embedded {}",
            load::DEFAULT_GRAPH_NAME
        ));
    }
    let mut progress = Progress::new((files.len() * configs.len()) as u64, "plans");
    let comparison = compare::compare(
        &files,
        &configs,
        args.align,
        &args.dims,
        &mut |done, _| progress.set(done),
        &mut |line: String| ui::eprint_line(line),
    );
    progress.finish();
    let comparison = comparison?;
    let format = match args.format {
        Format::Text => compare::Format::Text,
        Format::Csv => compare::Format::Csv,
        Format::Markdown => compare::Format::Markdown,
        Format::Json => compare::Format::Json,
    };
    let text = compare::table(&comparison.rows, format, !args.no_time);
    ui::write_output(args.output.as_deref(), text.as_bytes())?;
    Ok(if comparison.unsafe_plans > 0 {
        ui::exit(ui::NEGATIVE)
    } else {
        ui::exit(ui::OK)
    })
}
