//! The facade's error: what kind of failure it is ([`ErrorKind`]: bad input, an unsafe plan,
//! something that does not fit, a file that cannot be read or written) and what happened, as
//! a chain: each caller adds what it was doing ("importing model.onnx as ONNX") in front of
//! the cause, which stays reachable through [`std::error::Error::source`]. [`Error::report`]
//! says it all on one line, each cause once, as the `memplan` command prints it; a binding
//! picks its exception by [`Error::kind`].
//!
//! [`Context`] adds such a step to any `Result` or `Option`, and [`bail!`](crate::bail)
//! returns an input error, so that code moved here from the command line reads as it did.

use std::error::Error as StdError;
use std::fmt;

/// What kind of failure an [`Error`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Bad input or usage: a malformed file, an unknown option, a value out of range.
    Input,
    /// A plan the independent verifier rejects, or whose bytes a check finds clobbered.
    Unsafe,
    /// Nothing fits: a budget below what the plan, the model or the packing needs.
    DoesNotFit,
    /// A file that cannot be read or written.
    Io,
    /// An option that does not exist, or a value of the wrong type for one.
    Option,
}

impl ErrorKind {
    /// `input`, `unsafe`, `does-not-fit`, `io` or `option`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Input => "input",
            ErrorKind::Unsafe => "unsafe",
            ErrorKind::DoesNotFit => "does-not-fit",
            ErrorKind::Io => "io",
            ErrorKind::Option => "option",
        }
    }
}

/// A failure of the facade: its kind, a message, and the cause the message is about.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    /// The message; `None` when the error only carries its cause (whose message it shows).
    message: Option<String>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

/// The facade's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: Some(message.into()),
            source: None,
        }
    }

    /// Bad input saying `message`.
    pub fn input(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Input, message)
    }

    /// An error carrying `cause`, of the kind the cause is (see [`kind_of`]).
    pub fn wrap(cause: impl StdError + Send + Sync + 'static) -> Error {
        let cause: Box<dyn StdError + Send + Sync + 'static> = Box::new(cause);
        match cause.downcast::<Error>() {
            Ok(error) => *error,
            Err(cause) => Error {
                kind: kind_of(cause.as_ref()),
                message: None,
                source: Some(cause),
            },
        }
    }

    /// This error as the cause of a step `message` in front of it (the kind is kept).
    #[must_use]
    pub fn context(self, message: impl fmt::Display) -> Error {
        Error {
            kind: self.kind,
            message: Some(message.to_string()),
            source: Some(Box::new(self)),
        }
    }

    /// The same error, of another kind.
    #[must_use]
    pub fn with_kind(mut self, kind: ErrorKind) -> Error {
        self.kind = kind;
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The whole story on one line: the message, then each cause not already said by the
    /// text before it (libraries often repeat their source in their own message).
    pub fn report(&self) -> String {
        chain_report(self)
    }
}

/// [`Error::report`] for any error: its message and each cause not already said, joined by
/// `: `.
pub fn chain_report(error: &(dyn StdError + 'static)) -> String {
    let mut text = String::new();
    let mut next: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(cause) = next {
        let message = cause.to_string();
        if !message.is_empty() && !text.contains(&message) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&message);
        }
        next = cause.source();
    }
    text
}

/// Every step of `error`'s chain, first to last, the causes an [`Error`] carries without a
/// message of its own included (its `source` skips them, their message being its own).
pub fn chain<'a>(error: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut steps = Vec::new();
    let mut next = Some(error);
    while let Some(step) = next {
        steps.push(step);
        next = match step.downcast_ref::<Error>() {
            Some(e) => e.source.as_deref().map(|s| s as &(dyn StdError + 'static)),
            None => step.source(),
        };
    }
    steps
}

/// What the `memplan` command adds to a library error it reports: the flag that sets what
/// the error is about (`pass e.g. --dim batch=8`). The library crates name no flags (a tidy
/// test holds them to it); this is where their errors meet the command line's spelling.
/// `None` when no step of the chain has advice.
pub fn flag_advice(error: &(dyn StdError + 'static)) -> Option<String> {
    chain(error).into_iter().find_map(step_advice)
}

fn step_advice(step: &(dyn StdError + 'static)) -> Option<String> {
    use memplan_planner::{PlanError, ResizeError, StateError};
    use memplan_tracker::FitError;
    use memplan_tracker::estimate::{ConfigError, EstimateError, WorkloadFault};
    if let Some(e) = step.downcast_ref::<PlanError>() {
        return match e {
            PlanError::UnboundSymbol { symbol, .. } => Some(format!("pass e.g. --dim {symbol}=8")),
            PlanError::FallingSize { symbol, .. } => {
                Some(format!("pass --dim {symbol}=N to plan for one value"))
            }
            PlanError::Body { error, .. } | PlanError::InGraph { error, .. } => {
                step_advice(error.as_ref())
            }
            PlanError::AccumulateWithFusedOptimizer => {
                Some("--accumulate does not go with --fused-optimizer".to_owned())
            }
            PlanError::LossNeedsScores { .. } => Some("pass --loss mse or none".to_owned()),
            PlanError::UnknownCheckpoint { .. } => {
                Some("the name given to --checkpoint".to_owned())
            }
            _ => None,
        };
    }
    if let Some(ResizeError::NotBounded { .. }) = step.downcast_ref::<ResizeError>() {
        return Some("plan with --bound".to_owned());
    }
    if let Some(StateError::NoMatch { .. }) = step.downcast_ref::<StateError>() {
        return Some("the pattern given to --persistent".to_owned());
    }
    if let Some(FitError::Unbound { symbols, .. }) = step.downcast_ref::<FitError>() {
        let dims: Vec<String> = symbols.iter().map(|s| format!("--dim {s}=N")).collect();
        return Some(format!("pass {}", dims.join(" ")));
    }
    let flag_of = |setting: &str| {
        crate::estimate::WORKLOAD_KEYWORDS
            .iter()
            .chain(crate::fit::SERVING_KEYWORDS)
            .find(|(keyword, _)| *keyword == setting)
            .map(|(_, flag)| *flag)
    };
    match step.downcast_ref::<EstimateError>() {
        Some(EstimateError::Setting { setting, .. }) => {
            return Some(format!("set by {}", flag_of(setting)?));
        }
        Some(EstimateError::Invalid(WorkloadFault::PastPositions { .. })) => {
            return Some(format!("set by {}", flag_of("seq")?));
        }
        Some(EstimateError::Invalid(WorkloadFault::Empty { batch, .. })) => {
            let setting = if *batch == 0 { "batch" } else { "seq" };
            return Some(format!("set by {}", flag_of(setting)?));
        }
        _ => {}
    }
    if let Some(ConfigError::NoModelType | ConfigError::UnsupportedModel(_)) =
        step.downcast_ref::<ConfigError>()
    {
        return Some(
            "describe the model with --arch and the size flags: --layers, --hidden, --heads, \
             --kv-heads, --head-dim, --intermediate, --vocab, --experts, --experts-per-token, \
             --shared-experts, --moe-intermediate"
                .to_owned(),
        );
    }
    None
}

/// A `map_err` for a planner error about `graph`: the error carries `graph` (copied only for
/// an error that names a tensor or node), so the facade's message names them as `graph` does
/// ([`memplan_planner::PlanError::found_in`]), and the error stays the cause
/// ([`flag_advice`] and [`kind_of`] read it).
pub(crate) fn named(
    graph: &memplan_ir::Graph,
) -> impl FnOnce(memplan_planner::PlanError) -> memplan_planner::PlanError + '_ {
    move |e| e.found_in(|| graph.clone())
}

/// The kind of a cause from another crate: a budget too small does not fit, a failed read or
/// write is I/O, everything else is bad input.
pub fn kind_of(cause: &(dyn StdError + 'static)) -> ErrorKind {
    if let Some(e) = cause.downcast_ref::<Error>() {
        return e.kind;
    }
    if matches!(
        cause.downcast_ref::<memplan_planner::PlanError>(),
        Some(memplan_planner::PlanError::BudgetTooSmall { .. })
    ) {
        return ErrorKind::DoesNotFit;
    }
    if cause.downcast_ref::<std::io::Error>().is_some() {
        return ErrorKind::Io;
    }
    ErrorKind::Input
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.message, &self.source) {
            (Some(message), _) => f.write_str(message),
            (None, Some(source)) => fmt::Display::fmt(source, f),
            (None, None) => f.write_str(self.kind.name()),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match &self.message {
            // A wrapped cause shows its own message; its source is the next step.
            None => self.source.as_ref()?.source(),
            Some(_) => self
                .source
                .as_ref()
                .map(|s| s.as_ref() as &(dyn StdError + 'static)),
        }
    }
}

/// Adds a step in front of a failure: `.context("reading x")`, `.with_context(|| ...)`. On
/// an `Option`, `None` becomes an input error saying the message.
pub trait Context<T> {
    /// The failure as the cause of `message`.
    fn context(self, message: impl fmt::Display) -> Result<T>;
    /// The failure as the cause of the message `f` makes (only on failure).
    fn with_context<M: fmt::Display>(self, f: impl FnOnce() -> M) -> Result<T>;
}

impl<T, E: StdError + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, message: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error::wrap(e).context(message))
    }

    fn with_context<M: fmt::Display>(self, f: impl FnOnce() -> M) -> Result<T> {
        self.map_err(|e| Error::wrap(e).context(f()))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, message: impl fmt::Display) -> Result<T> {
        self.ok_or_else(|| Error::input(message.to_string()))
    }

    fn with_context<M: fmt::Display>(self, f: impl FnOnce() -> M) -> Result<T> {
        self.ok_or_else(|| Error::input(f().to_string()))
    }
}

macro_rules! from_cause {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for Error {
            fn from(cause: $t) -> Error {
                Error::wrap(cause)
            }
        }
    )*};
}

from_cause!(
    std::io::Error,
    serde_json::Error,
    memplan_ir::ValidationErrors,
    memplan_ir::SizeError,
    memplan_planner::PlanError,
    memplan_planner::PlanFileError,
    memplan_planner::StateError,
    memplan_planner::DeviceBytesError,
    memplan_packing::SolveError,
    memplan_cuda_arena::CheckError,
    memplan_cuda_arena::LayoutError,
    memplan_cuda_arena::HostError,
    memplan_ir::LoadError,
    memplan_ir::BindError,
    memplan_ir::ExprError,
    memplan_planner::ResizeError,
    memplan_packing::csv::CsvError,
    memplan_packing::ProblemError,
    memplan_tracker::SizeParseError,
    memplan_tracker::FitError,
    memplan_tracker::PreflightError,
    memplan_tracker::estimate::EstimateError,
    memplan_tracker::estimate::ConfigError,
);

#[cfg(feature = "onnx")]
from_cause!(memplan_onnx::OnnxError);

/// Returns an input error saying the formatted message.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::Error::input(format!($($arg)*)))
    };
}

/// An input error saying the formatted message.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::Error::input(format!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        #[derive(Debug)]
        struct Wrapped(std::io::Error);
        impl fmt::Display for Wrapped {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "model.onnx: {}", self.0)
            }
        }
        impl StdError for Wrapped {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let err = Error::wrap(Wrapped(io)).context("importing model.onnx");
        assert_eq!(
            err.report(),
            "importing model.onnx: model.onnx: No such file"
        );
        assert_eq!(err.kind(), ErrorKind::Input);
    }

    /// The planner's errors hold ids; the facade's messages name the graph's tensors, as
    /// they did when the errors held names.
    #[test]
    fn planner_errors_name_the_graph_s_tensors() {
        use memplan_ir::{DType, GraphBuilder};
        let mut g = GraphBuilder::new("g");
        let x = g.input("x", DType::F32, [4]);
        let y = g.named_op("y", "Relu", &[x], DType::F32, [4]);
        let text = g.named_op("text", "Cast", &[y], DType::String, [4]);
        g.mark_output(text);
        let g = g.build().unwrap();
        let err = crate::plan::plan_checked_fusion(g, &memplan_planner::PlanOptions::default())
            .unwrap_err();
        assert_eq!(
            err.report(),
            "planning graph `g`: tensor `text` has no byte size: dtype string has no fixed size"
        );
        assert_eq!(err.kind(), ErrorKind::Input);
    }

    #[test]
    fn flags_come_from_the_error_s_data() {
        use memplan_planner::PlanError;
        use memplan_tracker::estimate::{EstimateError, WorkloadFault};
        let mut g = memplan_ir::GraphBuilder::new("g");
        let x = g.input("x", memplan_ir::DType::F32, [4]);
        let y = g.op("Relu", &[x], memplan_ir::DType::F32, [4]);
        g.mark_output(y);
        let g = g.build().unwrap();
        let unbound = PlanError::UnboundSymbol {
            tensor: x,
            symbol: "batch".into(),
        };
        // The library's message names no flag; the advice does, through any wrapping (the
        // graph the error carries included).
        let named = unbound.found_in(|| g.clone());
        assert_eq!(
            named.to_string(),
            "tensor `x` needs a value for symbol `batch`"
        );
        let err = Error::wrap(named).context("planning g");
        assert_eq!(
            err.report(),
            "planning g: tensor `x` needs a value for symbol `batch`"
        );
        assert_eq!(
            flag_advice(&err).as_deref(),
            Some("pass e.g. --dim batch=8")
        );
        let body = PlanError::Body {
            node: memplan_ir::NodeId(0),
            attr: "then_branch".into(),
            error: Box::new(PlanError::FallingSize {
                tensor: x,
                dim: "8-n".into(),
                symbol: "n".into(),
            }),
        };
        assert_eq!(
            flag_advice(&Error::wrap(body)).as_deref(),
            Some("pass --dim n=N to plan for one value")
        );
        let setting = EstimateError::Setting {
            setting: "gpu_util",
            reason: "must be above 0 and at most 1".into(),
        };
        assert_eq!(
            setting.to_string(),
            "`gpu_util` must be above 0 and at most 1"
        );
        assert_eq!(flag_advice(&setting).as_deref(), Some("set by --gpu-util"));
        let tp = EstimateError::Setting {
            setting: "tp",
            reason: String::new(),
        };
        assert_eq!(
            flag_advice(&Error::wrap(tp)).as_deref(),
            Some("set by --tp")
        );
        // A workload that makes no sense is data too: the flag of the value at fault.
        let past = EstimateError::Invalid(WorkloadFault::PastPositions {
            seq: 2048,
            positions: 1024,
        });
        assert_eq!(flag_advice(&past).as_deref(), Some("set by --seq"));
        let empty = EstimateError::Invalid(WorkloadFault::Empty { batch: 0, seq: 8 });
        assert_eq!(flag_advice(&empty).as_deref(), Some("set by --batch"));
        let io = std::io::Error::other("disk");
        assert_eq!(flag_advice(&Error::wrap(io)), None);
    }

    #[test]
    fn steps_keep_the_kind_of_their_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let err = Error::wrap(io).context("reading a.json").context("loading");
        assert_eq!(err.kind(), ErrorKind::Io);
        assert_eq!(err.report(), "loading: reading a.json: No such file");
        let none: Option<u8> = None;
        let err = none.context("no budget").unwrap_err();
        assert_eq!(
            (err.kind(), err.report()),
            (ErrorKind::Input, "no budget".into())
        );
    }
}
