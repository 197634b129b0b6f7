//! The plan JSON: what `memplan plan --format json` writes and `memplan check --plan` reads.
//!
//! A plan file names tensors and nodes by name, so it stays meaningful next to its graph
//! file. It holds everything needed to check the plan later without repeating options: the
//! alignment, the weight region's size, the workspaces of control-flow nodes with the plans
//! of their bodies (only when there are any), the settings the plan was made with (bindings,
//! aliasing policy, input/output policy, strategy, schedule mode) and how it was made.
//! [`Plan::to_json`] and [`Plan::from_json`] round-trip every field; reading puts buffers
//! and weights in tensor id order (what [`Plan::buffer`] and [`Plan::weight`] rely on) and
//! workspaces in schedule order, whatever order the file lists them in, and takes
//! O(n log n) for n entries (names resolve through indexes, then one sort).
//! [`Plan::to_json_file`] writes the whole file `memplan plan` writes: a [`PlanHeader`]
//! (`produced_by`, a training step's `training` object) and the device totals of
//! [`Plan::device_bytes`] around the plan; reading ignores them. A tensor computed from weights once at load is
//! a weight entry with `computed_by`, the node that computes it (the runtime runs that node
//! at load, into the entry's bytes); the settings say whether tensors were folded so
//! (`fold_weights`), which attention kernel's scratch the workspaces hold (`attention`) and,
//! when the graph was fused before planning, the fusions (`fuse`, a `--fuse` list: the
//! plan names the fused graph's tensors and nodes).
//! Files written before a field existed still load: `alignment` reads as 1 (no constraint),
//! `weight_bytes` as the end of the last weight, `settings` as [`PlanSettings::default`]
//! without folding, a missing `fold_weights` as false (nothing was folded), a missing
//! `fuse` as none, `attention` as `eager` (the safe kernel: a plan without its scratch then fails the
//! verifier, as it should), `stats` as empty.

use std::fmt::Write as _;

use memplan_ir::Graph;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::options::{AttentionKernel, Fusions, PlanOptions, ScheduleMode};
use crate::plan::{
    Alias, AliasKind, BodyPlan, OrderCandidate, Plan, PlanSettings, PlanStats, PlannedBuffer,
    PlannedWeight, PlannedWorkspace, ScheduleChoice, node_name, tensor_name,
};

/// Why a plan file cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanFileError {
    /// Not JSON, or not a plan's shape (a missing field, a wrong type).
    #[error("not a plan file: {0}")]
    Json(#[from] serde_json::Error),
    /// A tensor name the graph does not have.
    #[error("the plan names tensor `{0}`, which the graph does not have")]
    UnknownTensor(String),
    /// A node name the graph does not have.
    #[error("the plan's schedule names node `{0}`, which the graph does not have")]
    UnknownNode(String),
    /// A dtype name the graph format does not know (in `settings.dtype_alignment`).
    #[error("unknown dtype `{0}` in settings.dtype_alignment")]
    UnknownDType(String),
    /// An attention kernel other than `eager` and `flash`.
    #[error("unknown attention kernel `{0}` (eager or flash)")]
    UnknownAttention(String),
    /// A symbol the graph does not have.
    #[error("the plan binds symbol `{0}`, which the graph does not have")]
    UnknownSymbol(String),
    /// A fusion name `--fuse` does not know.
    #[error("the plan's settings: {0}")]
    UnknownFusion(crate::options::UnknownFusion),
    /// A weight entry computed by a node that does not make it.
    #[error("weight `{tensor}` is computed by `{node}`, which does not make it")]
    WrongComputer {
        /// The weight entry's tensor.
        tensor: String,
        /// The node the file names.
        node: String,
    },
    /// An alias kind other than `view` and `inplace`.
    #[error("tensor `{tensor}` has an unknown alias kind `{kind}`")]
    UnknownAliasKind {
        /// The tensor.
        tensor: String,
        /// The kind given.
        kind: String,
    },
    /// A schedule mode other than `given` and `memory`.
    #[error("unknown schedule mode `{0}`")]
    UnknownScheduleMode(String),
    /// A buffer with `alias` but no `alias_of`, or the other way round.
    #[error("tensor `{0}` has one of `alias` and `alias_of` without the other")]
    HalfAlias(String),
    /// A view or Concat part that does not start inside a buffer of its parent.
    #[error("`{0}` is a view or part of a buffer it does not start inside")]
    ViewOutsideParent(String),
    /// A step that does not fit in 32 bits.
    #[error("`{0}` has a step over 2^32")]
    StepTooLarge(String),
    /// A body plan for a body the node does not have.
    #[error(
        "the workspace of node `{node}` has a plan for body `{attr}`, which the node does not have"
    )]
    UnknownBody {
        /// The node.
        node: String,
        /// The body's attribute.
        attr: String,
    },
    /// A body plan that cannot be read.
    #[error("the plan of body `{attr}` of node `{node}`: {error}")]
    InBody {
        /// The node.
        node: String,
        /// The body's attribute.
        attr: String,
        /// Why.
        error: Box<PlanFileError>,
    },
    /// Caller-owned totals in the file's header that are not its plan's (a hand edit that
    /// changed the bindings, say): a caller that sizes its buffers from them would be short.
    #[error(
        "the file says {key} is {file}, but its plan makes it {plan}: the totals are not this plan's"
    )]
    WrongTotal {
        /// The header key.
        key: &'static str,
        /// What the file says.
        file: u64,
        /// What the plan makes it ([`Plan::device_bytes`]).
        plan: u64,
    },
    /// A weight entry for a tensor a node makes, without `computed_by`.
    #[error(
        "weight `{tensor}` is made by node `{node}`, but the file does not say so (`computed_by`): a runtime would never compute it"
    )]
    NoComputer {
        /// The weight entry's tensor.
        tensor: String,
        /// The node that makes it.
        node: String,
    },
    /// A buffer whose `rows` and `stride` are not its Concat slot's runs at the plan's
    /// bindings (or that has one without the other, has them and is no strided part, or
    /// is a strided part without them).
    #[error(
        "`{tensor}` says rows {file}, but as a part of its Concat its bytes are {graph}: a runtime would write them elsewhere"
    )]
    WrongStride {
        /// The tensor.
        tensor: String,
        /// What the file says, as `rows/stride` (`-` where absent).
        file: String,
        /// What the Concat makes them (`rows N, stride S`, or `one range`).
        graph: String,
    },
    /// The weight region's end overflows 64 bits.
    #[error("weight `{0}` ends past 2^64")]
    WeightOverflow(String),
}

/// What a plan file says besides the plan ([`Plan::to_json_file`]).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct PlanHeader {
    /// What wrote the file, e.g. `memplan 0.1.0`: the file's first key.
    pub produced_by: Option<String>,
    /// A training step's options and what it derived (`memplan plan --training`), after the
    /// device totals.
    pub training: Option<Value>,
    /// A training step's derived graph (the graph the plan is a plan of), after `training`:
    /// the graph itself in the graph format (`{"name": ..., "tensors": ..., "nodes": ...}`),
    /// or, when it is written beside the file (`memplan plan --emit-graph FILE`),
    /// `{"file": FILE, "fnv1a64": DIGEST}` naming it and the digest of its bytes.
    pub step_graph: Option<Value>,
}

impl PlanHeader {
    /// This header with [`produced_by`](PlanHeader::produced_by) set to `produced_by`.
    pub fn with_produced_by(mut self, produced_by: Option<String>) -> PlanHeader {
        self.produced_by = produced_by;
        self
    }

    /// This header with [`training`](PlanHeader::training) set to `training`.
    pub fn with_training(mut self, training: Option<Value>) -> PlanHeader {
        self.training = training;
        self
    }

    /// This header with [`step_graph`](PlanHeader::step_graph) set to `step_graph`.
    pub fn with_step_graph(mut self, step_graph: Option<Value>) -> PlanHeader {
        self.step_graph = step_graph;
        self
    }
}

#[derive(Serialize, Deserialize)]
struct FileBuffer {
    tensor: String,
    offset: u64,
    bytes: u64,
    first: u64,
    last: u64,
    #[serde(default)]
    alias_of: Option<String>,
    #[serde(default)]
    alias: Option<String>,
    /// A strided Concat part: its rows (runs of `bytes / rows`) and the bytes between their
    /// starts. Written for readers; read back from the graph, and a file whose values
    /// differ from the graph's (or that lacks them for a strided part) is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stride: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct FileWeight {
    tensor: String,
    offset: u64,
    bytes: u64,
    /// For a tensor computed from weights at load: the node that computes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    computed_by: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct FileWorkspace {
    node: String,
    offset: u64,
    bytes: u64,
    step: u64,
    /// The plans of the node's bodies (a plan file of its own each, names resolved in the
    /// body graph); only when there are any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    bodies: Vec<FileBody>,
}

#[derive(Serialize, Deserialize)]
struct FileBody {
    attr: String,
    plan: File,
}

#[derive(Serialize, Deserialize)]
struct FileSettings {
    #[serde(default)]
    bindings: Vec<(String, u64)>,
    /// Symbols whose binding is an upper bound (`--bound`); only when there are any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    bounded: Vec<String>,
    views: bool,
    inplace: bool,
    inplace_over_inputs: bool,
    #[serde(default)]
    concat_elision: bool,
    inputs_in_arena: bool,
    outputs_in_arena: bool,
    strategy: String,
    schedule: String,
    /// Ops the plan's op table makes opaque although the default table aliases them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    opaque_ops: Vec<String>,
    /// Tensors computed from weights alone were folded into the weight region.
    #[serde(default)]
    fold_weights: bool,
    /// The attention kernel the workspaces are sized for.
    #[serde(default = "eager")]
    attention: String,
    /// The fusions the planned graph was rewritten with (`--fuse`); only when there are
    /// any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    fuse: String,
    /// Per-dtype alignments above the plan's (`[dtype, alignment]`); only when there are
    /// any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    dtype_alignment: Vec<(String, u64)>,
}

/// The settings a file records (those of files written before settings existed when it
/// records none).
fn settings_of(settings: Option<FileSettings>) -> Result<PlanSettings, PlanFileError> {
    Ok(match settings {
        None => PlanSettings {
            fold_weights: false,
            ..PlanSettings::default()
        },
        Some(s) => PlanSettings {
            bindings: s.bindings,
            bounded: s.bounded,
            views: s.views,
            inplace: s.inplace,
            inplace_over_inputs: s.inplace_over_inputs,
            concat_elision: s.concat_elision,
            inputs_in_arena: s.inputs_in_arena,
            outputs_in_arena: s.outputs_in_arena,
            strategy: s.strategy,
            schedule: schedule_mode(&s.schedule)?,
            op_table: {
                let mut table = memplan_ir::OpTable::default();
                for op in &s.opaque_ops {
                    table.insert(op, memplan_ir::OpRule::Opaque);
                }
                table
            },
            fold_weights: s.fold_weights,
            attention: AttentionKernel::from_name(&s.attention)
                .ok_or(PlanFileError::UnknownAttention(s.attention))?,
            fuse: Fusions::parse(&s.fuse).map_err(PlanFileError::UnknownFusion)?,
            dtype_alignment: s
                .dtype_alignment
                .iter()
                .map(|(d, a)| {
                    d.parse::<memplan_ir::DType>()
                        .map(|d| (d, *a))
                        .map_err(|_| PlanFileError::UnknownDType(d.clone()))
                })
                .collect::<Result<_, _>>()?,
        },
    })
}

fn eager() -> String {
    AttentionKernel::Eager.name().to_owned()
}

#[derive(Serialize, Deserialize)]
struct FileCandidate {
    name: String,
    peak: u64,
}

#[derive(Serialize, Deserialize)]
struct FileStats {
    unaliased_lower_bound: u64,
    views: u32,
    inplace: u32,
    #[serde(default)]
    parts: u32,
    storages: u32,
    placed_by: String,
    proven_optimal: bool,
    schedule_mode: String,
    schedule_chosen: String,
    given_peak: u64,
    peak: u64,
    candidates: Vec<FileCandidate>,
    exact: bool,
    #[serde(default)]
    any_order_bound: u64,
}

#[derive(Serialize, Deserialize)]
struct File {
    /// What wrote the file (the tool and its version); only in a top-level file written
    /// with a header, ignored when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    produced_by: Option<String>,
    graph: String,
    arena_bytes: u64,
    #[serde(default)]
    lower_bound_bytes: u64,
    #[serde(default)]
    naive_bytes: u64,
    #[serde(default)]
    weight_bytes: Option<u64>,
    /// The device totals ([`Plan::device_bytes`]); only in a top-level file written with a
    /// header. Not read into the plan (its fields say it all), but a file whose caller-owned
    /// totals are not its plan's is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    caller_input_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    caller_output_bytes: Option<u64>,
    /// `total_bytes`, the total's name in every JSON memplan writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    total_bytes: Option<u64>,
    /// The same total as `total_device_bytes`: written beside `total_bytes` in a training
    /// step's file, where the training-step format names it so, and the only name in files
    /// written before `total_bytes`. When a file has both, they must agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    total_device_bytes: Option<u64>,
    /// The training step's options ([`PlanHeader::training`]); ignored when read here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    training: Option<Value>,
    /// The training step's graph, or where it is ([`PlanHeader::step_graph`]); ignored when
    /// read here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    step_graph: Option<Value>,
    #[serde(default)]
    alignment: Option<u64>,
    #[serde(default)]
    settings: Option<FileSettings>,
    schedule: Vec<String>,
    buffers: Vec<FileBuffer>,
    weights: Vec<FileWeight>,
    /// Only when there are any, so plans of graphs without control flow keep their shape.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    workspaces: Vec<FileWorkspace>,
    #[serde(default)]
    stats: Option<FileStats>,
}

/// For each tensor computed once at load into the weight region (an activation of the
/// graph, folded because it is made from weights alone), the node that makes it. Weights and
/// training state (which backward nodes may write straight into: gradients) have none.
fn computed_at_load(graph: &Graph) -> memplan_ir::IndexVec<memplan_ir::TensorId, Option<&str>> {
    let mut by = memplan_ir::IndexVec::from_elem(None, graph.tensors().len());
    for node in graph.nodes().iter() {
        for &o in &node.outputs {
            if graph
                .tensors()
                .get(o)
                .is_some_and(|t| t.kind == memplan_ir::TensorKind::Activation)
                && let Some(slot) = by.get_mut(o)
            {
                *slot = Some(node.name.as_str());
            }
        }
    }
    by
}

fn schedule_mode(name: &str) -> Result<ScheduleMode, PlanFileError> {
    match name {
        "given" => Ok(ScheduleMode::Given),
        "memory" => Ok(ScheduleMode::Memory),
        other => Err(PlanFileError::UnknownScheduleMode(other.to_owned())),
    }
}

impl Plan {
    fn to_file(&self, graph: &Graph) -> File {
        let computers = computed_at_load(graph);
        let st = &self.stats;
        let set = &self.settings;
        File {
            produced_by: None,
            graph: self.graph.clone(),
            arena_bytes: self.arena_bytes,
            lower_bound_bytes: self.lower_bound_bytes,
            naive_bytes: self.naive_bytes,
            weight_bytes: Some(self.weight_bytes),
            caller_input_bytes: None,
            caller_output_bytes: None,
            total_bytes: None,
            total_device_bytes: None,
            training: None,
            step_graph: None,
            alignment: Some(self.alignment),
            settings: Some(FileSettings {
                bindings: set.bindings.clone(),
                bounded: set.bounded.clone(),
                views: set.views,
                inplace: set.inplace,
                inplace_over_inputs: set.inplace_over_inputs,
                concat_elision: set.concat_elision,
                inputs_in_arena: set.inputs_in_arena,
                outputs_in_arena: set.outputs_in_arena,
                strategy: set.strategy.clone(),
                schedule: set.schedule.name().to_owned(),
                opaque_ops: set
                    .op_table
                    .made_opaque()
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                fold_weights: set.fold_weights,
                attention: set.attention.name().to_owned(),
                fuse: if set.fuse.is_none() {
                    String::new()
                } else {
                    set.fuse.describe()
                },
                dtype_alignment: set
                    .dtype_alignment
                    .iter()
                    .map(|&(d, a)| (d.name().to_owned(), a))
                    .collect(),
            }),
            schedule: self.schedule.iter().map(|&n| node_name(graph, n)).collect(),
            buffers: self
                .buffers
                .iter()
                .map(|b| FileBuffer {
                    tensor: tensor_name(graph, b.tensor),
                    offset: b.offset,
                    bytes: b.bytes,
                    first: u64::from(b.first),
                    last: u64::from(b.last),
                    alias_of: b.parent().map(|p| tensor_name(graph, p)),
                    alias: b.alias_kind().map(|k| k.name().to_owned()),
                    rows: crate::concat::strided_part(graph, self, b).map(|r| r.0),
                    stride: crate::concat::strided_part(graph, self, b).map(|r| r.1),
                })
                .collect(),
            weights: self
                .weights
                .iter()
                .map(|w| FileWeight {
                    tensor: tensor_name(graph, w.tensor),
                    offset: w.offset,
                    bytes: w.bytes,
                    computed_by: computers
                        .get(w.tensor)
                        .copied()
                        .flatten()
                        .map(str::to_owned),
                })
                .collect(),
            workspaces: self
                .workspaces
                .iter()
                .map(|w| FileWorkspace {
                    node: node_name(graph, w.node),
                    offset: w.offset,
                    bytes: w.bytes,
                    step: u64::from(w.step),
                    bodies: w
                        .bodies
                        .iter()
                        .filter_map(|b| {
                            let body = graph
                                .nodes()
                                .get(w.node)?
                                .bodies
                                .iter()
                                .find(|x| x.attr == b.attr)?;
                            Some(FileBody {
                                attr: b.attr.clone(),
                                plan: b.plan.to_file(&body.graph),
                            })
                        })
                        .collect(),
                })
                .collect(),
            stats: Some(FileStats {
                unaliased_lower_bound: st.unaliased_lower_bound,
                views: st.views,
                inplace: st.inplace,
                parts: st.parts,
                storages: st.storages,
                placed_by: st.placed_by.clone(),
                proven_optimal: st.proven_optimal,
                schedule_mode: st.schedule.mode.name().to_owned(),
                schedule_chosen: st.schedule.chosen.clone(),
                given_peak: st.schedule.given_peak,
                peak: st.schedule.peak,
                candidates: st
                    .schedule
                    .candidates
                    .iter()
                    .map(|c| FileCandidate {
                        name: c.name.clone(),
                        peak: c.peak,
                    })
                    .collect(),
                exact: st.schedule.exact,
                any_order_bound: st.schedule.any_order_bound,
            }),
        }
    }

    /// The plan as a JSON value (its fields are described in `docs/FORMATS.md`).
    pub fn to_json_value(&self, graph: &Graph) -> Value {
        serde_json::to_value(self.to_file(graph)).unwrap_or(Value::Null)
    }

    /// [`Plan::to_json_value`] as text: one buffer, weight or schedule entry per line, ending
    /// in a newline. The plan alone: [`Plan::to_json_file`] writes the file `memplan plan`
    /// writes, with its header and device totals.
    pub fn to_json(&self, graph: &Graph) -> String {
        layout(self.to_json_value(graph))
    }

    /// The whole plan file, as `memplan plan --format json` writes it: `produced_by` first
    /// (when the header has it), the plan, and after `weight_bytes` the device totals of
    /// [`Plan::device_bytes`] (`caller_input_bytes`, `caller_output_bytes`,
    /// `total_bytes`, and in a training step's file the same total as `total_device_bytes`)
    /// and the header's `training` object, laid out as
    /// [`Plan::to_json`] lays out. [`Plan::from_json`] reads it back, ignoring the header and
    /// the totals.
    pub fn to_json_file(
        &self,
        graph: &Graph,
        header: &PlanHeader,
    ) -> Result<String, crate::DeviceBytesError> {
        let device = self.device_bytes(graph)?;
        let file = File {
            produced_by: header.produced_by.clone(),
            caller_input_bytes: Some(device.caller_inputs),
            caller_output_bytes: Some(device.caller_outputs),
            total_bytes: Some(device.total),
            total_device_bytes: header.training.as_ref().map(|_| device.total),
            training: header.training.clone(),
            step_graph: header.step_graph.clone(),
            ..self.to_file(graph)
        };
        Ok(layout(serde_json::to_value(file).unwrap_or(Value::Null)))
    }

    /// Reads a plan file written by [`Plan::to_json`] (or by an earlier memplan version, as
    /// `docs/FORMATS.md` describes), resolving names against `graph`. Reading checks only the file's shape;
    /// [`crate::verify_plan`] checks the plan.
    pub fn from_json(graph: &Graph, text: &str) -> Result<Plan, PlanFileError> {
        Plan::from_file(graph, serde_json::from_str(text)?)
    }

    /// The planning options a plan file records (bindings by `graph`'s symbols, aliasing and
    /// input/output policy, alignment, op table, folding, attention kernel, fusions, schedule
    /// mode): what makes the graph it names again from `graph` (the graph before fusion, or
    /// the forward of a training step), without reading the rest of the file.
    pub fn options_in_json(graph: &Graph, text: &str) -> Result<PlanOptions, PlanFileError> {
        #[derive(Deserialize)]
        struct Head {
            #[serde(default)]
            alignment: Option<u64>,
            #[serde(default)]
            settings: Option<FileSettings>,
        }
        let head: Head = serde_json::from_str(text)?;
        let s = settings_of(head.settings)?;
        let mut bindings = memplan_ir::Bindings::new();
        for (name, value) in &s.bindings {
            let symbol = graph
                .find_symbol(name)
                .ok_or_else(|| PlanFileError::UnknownSymbol(name.clone()))?;
            bindings.set(symbol, *value);
        }
        let bounded = s
            .bounded
            .iter()
            .filter_map(|name| graph.find_symbol(name))
            .collect();
        Ok(PlanOptions {
            bindings,
            bounded,
            schedule: s.schedule,
            views: s.views,
            inplace: s.inplace,
            inplace_over_inputs: s.inplace_over_inputs,
            concat_elision: s.concat_elision,
            inputs_in_arena: s.inputs_in_arena,
            outputs_in_arena: s.outputs_in_arena,
            alignment: head.alignment.unwrap_or(1),
            op_table: s.op_table,
            fold_weights: s.fold_weights,
            attention: s.attention,
            fuse: s.fuse,
            ..PlanOptions::default()
        })
    }

    fn from_file(graph: &Graph, f: File) -> Result<Plan, PlanFileError> {
        let tensor = |name: &str| {
            graph
                .find_tensor(name)
                .ok_or_else(|| PlanFileError::UnknownTensor(name.to_owned()))
        };
        // Node names, indexed once (a lookup per schedule entry would make reading O(n^2));
        // the first node of a name wins, as in `Graph::find_node`. Only looked up, never
        // iterated, so its order reaches no output.
        let mut nodes: std::collections::HashMap<&str, memplan_ir::NodeId> =
            std::collections::HashMap::with_capacity(graph.nodes().len());
        for (id, n) in graph.nodes().iter_enumerated() {
            nodes.entry(n.name.as_str()).or_insert(id);
        }
        let node = |name: &str| {
            nodes
                .get(name)
                .copied()
                .ok_or_else(|| PlanFileError::UnknownNode(name.to_owned()))
        };
        let schedule = f
            .schedule
            .iter()
            .map(|name| node(name))
            .collect::<Result<Vec<_>, _>>()?;
        let mut buffers = Vec::with_capacity(f.buffers.len());
        for b in &f.buffers {
            let alias = match b.alias.as_deref() {
                None => None,
                Some("view") => Some(AliasKind::View),
                Some("inplace") => Some(AliasKind::InPlace),
                Some("part") => Some(AliasKind::Part),
                Some(other) => {
                    return Err(PlanFileError::UnknownAliasKind {
                        tensor: b.tensor.clone(),
                        kind: other.to_owned(),
                    });
                }
            };
            let step = |v: u64| {
                u32::try_from(v).map_err(|_| PlanFileError::StepTooLarge(b.tensor.clone()))
            };
            let parent = b.alias_of.as_deref().map(tensor).transpose()?;
            let alias = match (alias, parent) {
                (None, None) => None,
                (Some(kind), Some(of)) => Some((kind, of)),
                _ => {
                    return Err(PlanFileError::HalfAlias(b.tensor.clone()));
                }
            };
            buffers.push((
                PlannedBuffer {
                    tensor: tensor(&b.tensor)?,
                    offset: b.offset,
                    bytes: b.bytes,
                    first: step(b.first)?,
                    last: step(b.last)?,
                    alias: None,
                },
                alias,
            ));
        }
        // A view's place in its parent is its offset less the parent's.
        let offset_of: std::collections::HashMap<memplan_ir::TensorId, u64> =
            buffers.iter().map(|(b, _)| (b.tensor, b.offset)).collect();
        let mut buffers = buffers
            .into_iter()
            .map(|(mut b, alias)| {
                b.alias = match alias {
                    None => None,
                    Some((AliasKind::InPlace, of)) => Some(Alias::InPlace { of }),
                    Some((kind @ (AliasKind::View | AliasKind::Part), of)) => {
                        let parent_at = offset_of.get(&of).copied().ok_or_else(|| {
                            PlanFileError::ViewOutsideParent(tensor_name(graph, b.tensor))
                        })?;
                        let offset = b.offset.checked_sub(parent_at).ok_or_else(|| {
                            PlanFileError::ViewOutsideParent(tensor_name(graph, b.tensor))
                        })?;
                        Some(if kind == AliasKind::View {
                            Alias::View { of, offset }
                        } else {
                            Alias::Part { of, offset }
                        })
                    }
                };
                Ok(b)
            })
            .collect::<Result<Vec<_>, PlanFileError>>()?;
        // Lookups by tensor id binary-search the buffers: a file in another order (a hand
        // edit) is read into tensor id order. Stable, so a tensor listed twice keeps its
        // entries together for the verifier to report.
        buffers.sort_by_key(|b| b.tensor);
        let computers = computed_at_load(graph);
        let mut weights = Vec::with_capacity(f.weights.len());
        let mut weight_end: u64 = 0;
        for w in &f.weights {
            let end = w
                .offset
                .checked_add(w.bytes)
                .ok_or_else(|| PlanFileError::WeightOverflow(w.tensor.clone()))?;
            weight_end = weight_end.max(end);
            let t = tensor(&w.tensor)?;
            let by = computers.get(t).copied().flatten();
            match (&w.computed_by, by) {
                (Some(node), _) if by != Some(node.as_str()) => {
                    return Err(PlanFileError::WrongComputer {
                        tensor: w.tensor.clone(),
                        node: node.clone(),
                    });
                }
                // A tensor a node makes, in the weight region without the node that
                // computes it at load: a runtime following the file would never compute
                // it. (Files have said `computed_by` since weights were first folded.)
                (None, Some(node)) => {
                    return Err(PlanFileError::NoComputer {
                        tensor: w.tensor.clone(),
                        node: node.to_owned(),
                    });
                }
                _ => {}
            }
            weights.push(PlannedWeight {
                tensor: t,
                offset: w.offset,
                bytes: w.bytes,
            });
        }
        weights.sort_by_key(|w| w.tensor);
        let mut workspaces = Vec::with_capacity(f.workspaces.len());
        for w in f.workspaces {
            let id = node(&w.node)?;
            let mut bodies = Vec::with_capacity(w.bodies.len());
            for b in w.bodies {
                let body = graph
                    .node(id)
                    .bodies
                    .iter()
                    .find(|x| x.attr == b.attr)
                    .ok_or_else(|| PlanFileError::UnknownBody {
                        node: w.node.clone(),
                        attr: b.attr.clone(),
                    })?;
                let plan =
                    Plan::from_file(&body.graph, b.plan).map_err(|e| PlanFileError::InBody {
                        node: w.node.clone(),
                        attr: b.attr.clone(),
                        error: Box::new(e),
                    })?;
                bodies.push(BodyPlan { attr: b.attr, plan });
            }
            workspaces.push(PlannedWorkspace {
                node: id,
                offset: w.offset,
                bytes: w.bytes,
                step: u32::try_from(w.step)
                    .map_err(|_| PlanFileError::StepTooLarge(w.node.clone()))?,
                bodies,
            });
        }
        // Workspaces are in schedule order (stable: a node listed twice keeps its entries
        // together for the verifier to report).
        workspaces.sort_by_key(|w: &PlannedWorkspace| w.step);
        let settings = settings_of(f.settings)?;
        let count = |kind: AliasKind| {
            u32::try_from(
                buffers
                    .iter()
                    .filter(|b| b.alias_kind() == Some(kind))
                    .count(),
            )
            .unwrap_or(u32::MAX)
        };
        let stats = match f.stats {
            Some(s) => PlanStats {
                unaliased_lower_bound: s.unaliased_lower_bound,
                views: s.views,
                inplace: s.inplace,
                parts: s.parts,
                storages: s.storages,
                placed_by: s.placed_by,
                proven_optimal: s.proven_optimal,
                schedule: ScheduleChoice {
                    mode: schedule_mode(&s.schedule_mode)?,
                    chosen: s.schedule_chosen,
                    given_peak: s.given_peak,
                    peak: s.peak,
                    candidates: s
                        .candidates
                        .into_iter()
                        .map(|c| OrderCandidate {
                            name: c.name,
                            peak: c.peak,
                        })
                        .collect(),
                    exact: s.exact,
                    any_order_bound: s.any_order_bound,
                },
            },
            None => PlanStats {
                unaliased_lower_bound: 0,
                views: count(AliasKind::View),
                inplace: count(AliasKind::InPlace),
                parts: count(AliasKind::Part),
                storages: u32::try_from(buffers.iter().filter(|b| b.alias.is_none()).count())
                    .unwrap_or(u32::MAX),
                placed_by: "plan file".to_owned(),
                proven_optimal: false,
                schedule: ScheduleChoice {
                    mode: settings.schedule,
                    chosen: "file".to_owned(),
                    given_peak: 0,
                    peak: 0,
                    candidates: Vec::new(),
                    exact: false,
                    any_order_bound: 0,
                },
            },
        };
        let plan = Plan {
            graph: f.graph,
            arena_bytes: f.arena_bytes,
            lower_bound_bytes: f.lower_bound_bytes,
            naive_bytes: f.naive_bytes,
            weight_bytes: f.weight_bytes.unwrap_or(weight_end),
            alignment: f.alignment.unwrap_or(1),
            schedule,
            buffers,
            weights,
            workspaces,
            settings,
            stats,
        };
        // The header's totals are never read into the plan, but a person or a runtime
        // sizes memory from them. What the caller allocates follows from the graph, the
        // bindings and the settings alone, so it must be this plan's (a file that changed
        // the bindings and not the totals is refused; nothing else would notice when only
        // the caller's tensors grow). The arena and weight figures are the plan's own, and
        // one that is wrong is the verifier's to report (an arena too small is an unsafe
        // plan, exit 1, not a file that cannot be read). Where the plan has no total (a size
        // the verifier will name), there is nothing to compare.
        //
        // The totals too: `total_bytes` (and a training step's `total_device_bytes`) is the
        // arena, the persistent region and the caller's tensors, each compared with what
        // the plan makes, so an edit of either is named as what it is. The arena and weight
        // figures it adds up are checked by `verify_plan_figures`.
        if let Ok(d) = plan.device_bytes(graph) {
            for (key, file, made) in [
                ("caller_input_bytes", f.caller_input_bytes, d.caller_inputs),
                (
                    "caller_output_bytes",
                    f.caller_output_bytes,
                    d.caller_outputs,
                ),
                ("total_bytes", f.total_bytes, d.total),
                ("total_device_bytes", f.total_device_bytes, d.total),
            ] {
                if let Some(file) = file
                    && file != made
                {
                    return Err(PlanFileError::WrongTotal {
                        key,
                        file,
                        plan: made,
                    });
                }
            }
        } else if let (Some(total), Some(device)) = (f.total_bytes, f.total_device_bytes)
            && total != device
        {
            // No total to compare with (a size the verifier will name): the two names of
            // the one total must still agree.
            return Err(PlanFileError::WrongTotal {
                key: "total_device_bytes",
                file: device,
                plan: total,
            });
        }
        // `rows` and `stride` are derived from the graph, never read; but a runtime places
        // a strided part's runs where the file says, so a file that says otherwise than
        // the Concat, or nothing for a strided part (a hand edit: files have written them
        // since parts were first strided), is refused.
        for b in &f.buffers {
            if b.rows.is_none() && b.stride.is_none() && b.alias.as_deref() != Some("part") {
                continue;
            }
            let derived = graph
                .find_tensor(&b.tensor)
                .and_then(|t| plan.buffer(t))
                .and_then(|pb| crate::concat::strided_part(graph, &plan, pb));
            if derived != b.rows.zip(b.stride) {
                let show = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
                return Err(PlanFileError::WrongStride {
                    tensor: b.tensor.clone(),
                    file: format!("{}, stride {}", show(b.rows), show(b.stride)),
                    graph: derived.map_or_else(
                        || "one range".to_owned(),
                        |(rows, stride)| format!("rows {rows}, stride {stride}"),
                    ),
                });
            }
        }
        Ok(plan)
    }
}

/// A plan file's JSON value as text: one key a line, each array entry on a line of its own,
/// ending in a newline.
fn layout(v: Value) -> String {
    let mut out = String::from("{\n");
    let Value::Object(map) = v else { return out };
    let n = map.len();
    for (i, (key, value)) in map.iter().enumerate() {
        let sep = if i + 1 == n { "" } else { "," };
        match value {
            Value::Array(items) => {
                let _ = write!(out, "  {}: [", Value::String(key.clone()));
                for (j, item) in items.iter().enumerate() {
                    let comma = if j + 1 == items.len() { "" } else { "," };
                    let _ = write!(out, "\n    {item}{comma}");
                }
                if !items.is_empty() {
                    out.push_str("\n  ");
                }
                let _ = writeln!(out, "]{sep}");
            }
            other => {
                let _ = writeln!(out, "  {}: {other}{sep}", Value::String(key.clone()));
            }
        }
    }
    out.push_str("}\n");
    out
}
