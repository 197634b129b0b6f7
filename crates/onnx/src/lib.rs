//! ONNX import for memplan: reads `.onnx` model files into the `memplan-ir` graph, inferring
//! shapes where the file does not state them and keeping symbolic dims as IR symbols.
//!
//! ```no_run
//! use memplan_onnx::{ImportOptions, load};
//! let graph = load(std::path::Path::new("model.onnx"), &ImportOptions::default())?;
//! # Ok::<(), memplan_onnx::OnnxError>(())
//! ```
//!
//! The pipeline: [`import()`] refuses inputs over [`ImportOptions::max_bytes`] and decodes the
//! protobuf with prost, which checks every declared length against the bytes left, so decoding
//! allocates at most a constant factor of the input and never from a declared size. Module
//! `import` then builds the graph, taking each node output's type from `value_info` or from
//! module `infer` (one rule per operator family), while module `value` tracks small integer
//! tensors as symbolic expressions so that shape arithmetic (`Shape` → `Gather` → `Concat` →
//! `Reshape`) resolves on dynamic graphs. Graph attributes (If branches, Loop and Scan bodies)
//! become [`memplan_ir::Body`] graphs, and the outer values they read the node's implicit
//! inputs. Dim expressions are capped at 64 terms and ranks at
//! 1024, so a hostile file cannot grow work or memory without bound.
//!
//! Invariants of the result: it passes [`Graph::validate`]; tensors are listed as graph
//! inputs, initializers, `Constant` outputs (weights), then node outputs in node order;
//! `dim_param` strings are IR symbols or expressions over them (`12*batch`, `seq+1`); every
//! static tensor's byte size fits in `u64`. Import is deterministic: the same bytes give the
//! same graph.

mod attrs;
mod error;
mod import;
mod infer;
/// ONNX's protobuf messages as prost generates them: memplan's own tests build models with
/// them. Not part of the stable surface (prost's types change with prost); import models
/// from their bytes with [`import`].
#[doc(hidden)]
pub mod proto;
mod tensor;
mod value;

#[cfg(test)]
mod tests;

use std::path::Path;

use memplan_ir::Graph;
use prost::Message;

pub use error::{Counted, InferError, OnnxError, Quantity, Ranks, Refusal};

/// How to import a model.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportOptions {
    /// Ignore the types the file declares for node outputs (`value_info` and graph outputs)
    /// and infer every shape.
    pub infer_all: bool,
    /// Symbol values to bind right away (`--dim batch=8`); a name the graph lacks is an error.
    pub dims: Vec<(String, u64)>,
    /// The largest model accepted, in bytes (default 2 GiB, protobuf's own limit).
    pub max_bytes: u64,
}

impl ImportOptions {
    /// These options inferring every shape (see [`ImportOptions::infer_all`]).
    pub fn with_infer_all(mut self, infer_all: bool) -> ImportOptions {
        self.infer_all = infer_all;
        self
    }

    /// These options binding symbol `name` to `value` right away (added to
    /// [`ImportOptions::dims`]).
    pub fn with_dim(mut self, name: impl Into<String>, value: u64) -> ImportOptions {
        self.dims.push((name.into(), value));
        self
    }

    /// These options with `dims` as the symbol values bound right away.
    pub fn with_dims(mut self, dims: Vec<(String, u64)>) -> ImportOptions {
        self.dims = dims;
        self
    }

    /// These options accepting models of at most `bytes` bytes.
    pub fn with_max_bytes(mut self, bytes: u64) -> ImportOptions {
        self.max_bytes = bytes;
        self
    }
}

impl Default for ImportOptions {
    fn default() -> ImportOptions {
        ImportOptions {
            infer_all: false,
            dims: Vec::new(),
            max_bytes: 2 << 30,
        }
    }
}

/// Imports an ONNX model from its bytes.
pub fn import(bytes: &[u8], options: &ImportOptions) -> Result<Graph, OnnxError> {
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if size > options.max_bytes {
        return Err(OnnxError::TooLarge {
            size,
            max: options.max_bytes,
        });
    }
    let model = proto::ModelProto::decode(bytes)?;
    import::import_model(&model, options)
}

/// Imports an ONNX model file; the graph is named after the file (its stem).
pub fn load(path: &Path, options: &ImportOptions) -> Result<Graph, OnnxError> {
    let io = |source| OnnxError::Io {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > options.max_bytes {
        return Err(OnnxError::TooLarge {
            size,
            max: options.max_bytes,
        });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let mut graph = import(&bytes, options)?;
    if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
        graph.name = stem.to_owned();
    }
    Ok(graph)
}
