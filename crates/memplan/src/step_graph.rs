//! The graph a training plan is a plan of, given with the plan (issue 36): an outside
//! checker cannot tell from a forward model what each backward and recompute node of the
//! derived step reads, so the step graph itself goes with every training plan file, in the
//! file (`step_graph`: the graph in the graph format) or beside it (`memplan plan
//! --emit-graph FILE`: the file records `{"file": FILE, "fnv1a64": DIGEST}`, the FNV-1a
//! digest of the graph file's bytes). `memplan check --plan` checks the plan against it:
//! the graph the model derives must be that graph, and the plan is verified against it; given
//! the step graph itself (or, for an embedded one, no graph at all) it checks the plan
//! against that graph without deriving anything.
//!
//! The `training` object's figures are checked too: every figure the step derived from the
//! model gives (parameters, saved, weight, gradient, optimizer-state and persistent bytes,
//! recompute counts and FLOPs, phases) must be the file's.

use memplan_ir::Graph;
use memplan_planner::{Plan, TrainingOptions, TrainingStep};
use serde_json::Value;

use crate::{Context, Result, bail};

/// The 64-bit FNV-1a digest of `bytes`, as 16 hex digits.
pub fn fnv1a64(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The `step_graph` value of a plan file for `graph`: the graph itself, or, with `beside`
/// (the name of the file the caller writes `graph.to_json()` to), that name and the digest
/// of those bytes.
pub fn header_value(graph: &Graph, beside: Option<&str>) -> Result<Value> {
    let text = graph.to_json();
    match beside {
        None => serde_json::from_str(&text).context("writing the step graph into the plan"),
        Some(file) => Ok(serde_json::json!({
            "file": file,
            "fnv1a64": fnv1a64(text.as_bytes()),
        })),
    }
}

/// What a plan file says of the graph it is a plan of.
#[derive(Debug)]
pub enum Recorded {
    /// The graph, in the file.
    Embedded(Box<Graph>, Value),
    /// The graph is in a file of this name, whose bytes have this digest.
    Beside {
        /// The file name recorded.
        file: String,
        /// Its FNV-1a digest.
        digest: String,
    },
}

/// The step graph a plan file records, if any.
pub fn recorded(plan: &Value) -> Result<Option<Recorded>> {
    let Some(v) = plan.get("step_graph") else {
        return Ok(None);
    };
    if let (Some(file), Some(digest)) = (
        v.get("file").and_then(Value::as_str),
        v.get("fnv1a64").and_then(Value::as_str),
    ) {
        return Ok(Some(Recorded::Beside {
            file: file.to_owned(),
            digest: digest.to_owned(),
        }));
    }
    let text = serde_json::to_string(v).context("reading the plan's step_graph")?;
    let graph = Graph::from_json(&text).context("reading the step graph the plan holds")?;
    Ok(Some(Recorded::Embedded(Box::new(graph), v.clone())))
}

/// Checks that `graph` (derived from the model, or given) is the step graph the file
/// records.
pub fn matches(recorded: &Recorded, graph: &Graph, what: &str) -> Result<()> {
    let text = graph.to_json();
    match recorded {
        Recorded::Embedded(_, value) => {
            let mine: Value =
                serde_json::from_str(&text).context("writing the step graph as JSON")?;
            if &mine != value {
                bail!(
                    "the step graph in the plan file is not {what}: {}",
                    first_difference(value, &mine)
                );
            }
        }
        Recorded::Beside { file, digest } => {
            let mine = fnv1a64(text.as_bytes());
            if &mine != digest {
                bail!(
                    "the plan file names its step graph {file} with digest {digest}, but {what} has digest {mine}"
                );
            }
        }
    }
    Ok(())
}

/// Where two graphs in the graph format first differ: the first node or tensor (by
/// position) that is not the same, or the first other key.
fn first_difference(file: &Value, derived: &Value) -> String {
    for key in ["nodes", "tensors"] {
        let (a, b) = (
            file.get(key).and_then(Value::as_array),
            derived.get(key).and_then(Value::as_array),
        );
        if let (Some(a), Some(b)) = (a, b) {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                if x != y {
                    let name = y.get("name").and_then(Value::as_str).unwrap_or("?");
                    return format!("{key} entry {i} (`{name}`) differs");
                }
            }
            if a.len() != b.len() {
                return format!("the file has {} {key}, the step {}", a.len(), b.len());
            }
        }
    }
    "a key other than its nodes and tensors differs".to_owned()
}

/// Checks the file's `training` object against the step derived from the model, planned as
/// the file's `plan`: every figure must be the same. The policy asked for (`checkpoint`:
/// `auto`, `every:N`, ...) is recorded as asked; the cuts it chose (`checkpoints`) are what
/// the derivation used.
pub fn check_training_object(
    file: &Value,
    derived: &TrainingStep,
    plan: &Plan,
    options: &TrainingOptions,
) -> Result<()> {
    let mut summary = derived.summary.clone();
    summary.persistent_bytes = plan.weight_bytes;
    let step = TrainingStep::new(derived.graph.clone(), plan.clone(), summary);
    let mine = crate::training::training_json(&step, options);
    let (Some(mine), Some(theirs)) = (mine.as_object(), file.as_object()) else {
        bail!("the plan's `training` is not an object");
    };
    let mut wrong = Vec::new();
    for (key, value) in mine {
        if key == "checkpoint" {
            continue;
        }
        match theirs.get(key) {
            Some(v) if v == value => {}
            Some(v) => wrong.push(format!(
                "training.{key} is {v} in the file, but the step the model derives makes it {value}"
            )),
            None => wrong.push(format!("the file's `training` has no `{key}`")),
        }
    }
    for key in theirs.keys() {
        if !mine.contains_key(key) {
            wrong.push(format!("the file's `training` has an unknown key `{key}`"));
        }
    }
    if !wrong.is_empty() {
        bail!(
            "the plan's training figures are not its step's:\n  - {}",
            wrong.join("\n  - ")
        );
    }
    Ok(())
}
