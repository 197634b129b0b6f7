//! Why a graph could not be planned. Every variant names the tensor, node or option it is
//! about; none is a panic.

use memplan_ir::ValidationErrors;

use memplan_packing::SolveError;

/// Why [`crate::plan_graph`] (or [`crate::plan_training`]) returned no plan.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The graph is not valid.
    #[error("invalid graph: {0}")]
    Invalid(ValidationErrors),
    /// A tensor's shape uses a symbol that has no value.
    #[error("tensor `{tensor}` needs a value for symbol `{symbol}` (pass e.g. --dim {symbol}=8)")]
    UnboundSymbol {
        /// The tensor.
        tensor: String,
        /// The symbol's name.
        symbol: String,
    },
    /// A tensor's size cannot be computed (overflow, negative dimension, string dtype).
    #[error("tensor `{tensor}` has no byte size: {reason}")]
    Size {
        /// The tensor.
        tensor: String,
        /// What went wrong.
        reason: String,
    },
    /// An alignment that is not a power of two.
    #[error("alignment {align} is not a power of two")]
    BadAlignment {
        /// The alignment.
        align: u64,
    },
    /// A schedule that is not a topological order of every node.
    #[error("the schedule is not a topological order of graph `{graph}`: {reason}")]
    BadSchedule {
        /// The graph.
        graph: String,
        /// What is wrong.
        reason: String,
    },
    /// Byte arithmetic overflowed.
    #[error("byte arithmetic overflows while {what}")]
    Overflow {
        /// What was being computed.
        what: String,
    },
    /// The packing engine returned no placement (only possible with a capacity, which the
    /// planner never sets: reaching this is a bug worth reporting).
    #[error("the packing engine found no placement for {storages} storages")]
    NoPlacement {
        /// Storages to place.
        storages: usize,
    },
    /// The packing engine failed.
    #[error("placement failed: {0}")]
    Solve(#[from] SolveError),
    /// A body of a control-flow node could not be planned, so the node's workspace has no
    /// size.
    #[error("cannot size the workspace of node `{node}` (body `{attr}`): {error}")]
    Body {
        /// The node that runs the body.
        node: String,
        /// The attribute holding the body.
        attr: String,
        /// Why the body could not be planned (naming the body tensor).
        error: Box<PlanError>,
    },
    /// A forward and a backward graph that do not fit together.
    #[error("training graphs do not match: tensor `{tensor}` {reason}")]
    TrainingMismatch {
        /// The tensor both graphs name.
        tensor: String,
        /// What does not match.
        reason: String,
    },
}
