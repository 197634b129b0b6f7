//! The JSON graph format: reading and writing (see `docs/graph-format.md`).
//!
//! Reading collects every problem it finds, each naming the tensor or node, then runs
//! [`Graph::validate`]; a graph that loads has validated. Writing produces the corpus
//! layout exactly: a header with one key per line, then one tensor or node per line in
//! compact JSON, strings escaped to ASCII and floats in shortest round-trip form (Python's
//! `repr`), so that a corpus file read and written again is byte-for-byte the same.

mod read;
mod write;

use std::path::PathBuf;

use crate::validate::ValidationErrors;

/// Why a graph file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The text is not JSON.
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser says.
        message: String,
    },
    /// The JSON does not describe a valid graph.
    #[error("invalid graph: {0}")]
    Invalid(ValidationErrors),
}
