//! The pattern check: execute a plan on real bytes and prove no live tensor is clobbered.
//!
//! Walk the schedule. Before step 0, every weight and every graph input in the layout gets
//! its pattern. At each step the node's inputs are checked (each must still hold the pattern
//! its writer left), then each output the node writes gets its own pattern:
//! - an ordinary output is written over its whole range;
//! - an in-place output is written too: it overwrites its parent's bytes;
//! - a view output is not written: its bytes *are* its parent's, so its writer is its root
//!   storage's writer and reading it checks that writer's pattern over the view's range;
//! - a Concat part (Concat elision) is written by its producer where the Concat's output
//!   will be. The Concat then writes its whole output, but a part at exactly its input's
//!   slice (the op's definition, [`op_effects::concat_slot`]) is a legal source of that
//!   write: its bytes, and every tensor reading them, now hold the output's pattern. A part
//!   of an output with several rows (the dims before the axis) is one run per row: it is
//!   written and checked run by run, and the bytes between its runs are its neighbours'.
//!
//! A node that runs bodies reads, besides its inputs, every value of the graph its bodies
//! read at any depth, found by name (as ONNX resolves them), so a capture the graph forgot
//! to declare is still checked live. A node with a workspace fills it with a pattern of its
//! own (its bodies' scratch), then
//! runs the plan of each of its bodies there: a check of its own on the body graph, its
//! arena and weights inside the workspace (nested bodies too), reported per body run; a
//! body range outside the workspace is reported and not touched.
//!
//! Some ops overwrite an input with new values while it stays live (a gradient accumulator,
//! an optimizer step: [`op_effects::updates`]), and so does a control-flow node whose body
//! does that to a value it captures or is handed, at any depth
//! ([`op_effects::updated_values`]). Each such update writes a pattern of its own over the
//! tensor's bytes; a reader of the tensor must find the version the graph's node order gives
//! it (the original before the first update in node order, else the last update before
//! it), so a schedule that moves a reader across an update is caught
//! ([`Cause::UpdateOrder`]). A view of an updated tensor keeps the version its producer
//! saw: a view still read after an update of the bytes it shares is caught
//! ([`Cause::UpdatedUnder`]). `Shape` and `Size` read no bytes ([`op_effects::reads_bytes`]).
//!
//! After the last step every graph output is checked once more, and so is every graph input
//! or training state that a node updated (the caller reads it back). The check reads only the
//! graph, the layout and the bytes; it knows nothing of how the plan was made, so a planner
//! bug shows up as a [`Clobber`] naming the victim, the reader and (from a log of writes) the
//! tensor whose write destroyed it.
//!
//! The pattern of writer `w` at byte address `a` of a region is byte `a % 8` (little-endian)
//! of `seed(w) ^ (a / 8) * K`, with `seed` a bijective 64-bit mix of the tensor id. So two
//! writers differ in every 8-byte word they share, and whole words can be written and checked
//! with wide stores and loads. Backends implement [`PatternMemory`] (fill a range, verify a
//! range); the host arena does it in place, the device arena through staging copies.

mod bytes;
mod report;
mod run;
mod sampling;

pub use bytes::{MAX_THREADS, Mismatch, OutOfRegion, PatternMemory, Salts};
#[cfg(feature = "cuda")]
pub use bytes::{fill, verify};
pub use report::{BadView, BodyRun, Cause, CheckReport, Clobber, Trusted, ViewFault};
pub use run::{BodyMemoryError, run_check, run_check_observed, run_check_with_ops};
pub use sampling::{CheckOptions, Sampling};
