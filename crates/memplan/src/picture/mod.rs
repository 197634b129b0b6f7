//! Pictures of a plan: `memplan plan --svg FILE` and `--html FILE`.
//!
//! Both draw the same [`Picture`]: the x axis is the schedule (one column per step, a
//! buffer live at steps `first..=last` spans `[first, last + 1)`), the y axis is the
//! address in the activation arena (0 at the bottom), one rectangle per buffer of the plan
//! and one per control-flow workspace. A buffer is coloured by its own category (graph input,
//! graph output, or the op that produced it), so a storage reused in place changes colour as
//! each op takes it over; views, in-place outputs and Concat parts carry a dashed outline. A
//! legend entry says how many bytes of its colour are live at the peak step (and how many
//! its tensors hold over the whole run). Over the rectangles: the live-bytes curve (bytes in
//! use at each step, shared bytes counted once), the lower bound and the peak step with the
//! tensors live there, which get their labels first.
//!
//! The picture is a pure function of the graph and the plan: the same input gives the same
//! bytes.

use std::collections::BTreeMap;

use memplan_ir::{Graph, Names, TensorId, TensorKind};
use memplan_planner::{AliasKind, Plan, strided_part};

pub mod html;
pub mod svg;

/// Colours of the categories, in order: the first ones go to the categories holding the
/// most bytes.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#86bcb6",
];
/// Colour of graph inputs.
const INPUT_COLOUR: &str = "#7f7f7f";
/// Colour of graph outputs.
const OUTPUT_COLOUR: &str = "#2f2f5f";
/// Colour of ops past the palette.
const OTHER_COLOUR: &str = "#c9c2bc";
/// Colour of control-flow workspaces.
const WORKSPACE_COLOUR: &str = "#d4a6c8";

/// The band colour of a training phase.
pub fn phase_colour(phase: &str) -> &'static str {
    match phase {
        "forward" => "#a6cee3",
        "backward" => "#fdbf6f",
        _ => "#b2df8a",
    }
}

/// One colour of the legend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Category {
    /// What it stands for: `graph input`, `graph output`, an op name, `other ops`.
    pub label: String,
    /// Its colour, `#rrggbb`.
    pub colour: &'static str,
    /// Bytes of its blocks live at the peak step (a view, or a tensor another of them was
    /// written over, not counted again): the share of the peak this colour holds.
    pub peak_bytes: u64,
    /// Bytes of its blocks over the whole run (views not counted), summed: what its tensors
    /// hold one after another, not at once.
    pub bytes: u64,
}

/// What a [`Block`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// A tensor of this kind.
    Tensor(TensorKind),
    /// A control-flow node's workspace.
    Workspace,
}

impl BlockKind {
    /// `input`, `output`, `activation` (and the other tensor kinds) or `workspace`.
    pub fn name(self) -> &'static str {
        match self {
            BlockKind::Tensor(kind) => kind.name(),
            BlockKind::Workspace => "workspace",
        }
    }
}

/// One rectangle: a planned buffer or a workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// The tensor's name (for a workspace, `workspace of NODE`).
    pub name: String,
    /// The op that produced it (`input` for a graph input).
    pub op: String,
    /// What it holds.
    pub kind: BlockKind,
    /// The tensor's id (`None` for a workspace): what `memplan check --format json` names.
    pub tensor: Option<TensorId>,
    /// The shape as written in the graph, e.g. `[1, 64, 56, 56]`.
    pub shape: String,
    /// The element type.
    pub dtype: String,
    /// First byte in the arena.
    pub offset: u64,
    /// Size in bytes.
    pub bytes: u64,
    /// Bytes from its first to one past its last: `bytes`, but for a strided Concat part
    /// (one run per row of the output, `rows` and `stride`) the span of its runs.
    pub extent: u64,
    /// For a strided Concat part: its runs and the bytes between their starts.
    pub rows: Option<(u64, u64)>,
    /// First step it is live (inclusive).
    pub first: u32,
    /// Last step it is live (inclusive).
    pub last: u32,
    /// How it shares its parent's bytes, if it does.
    pub alias: Option<AliasKind>,
    /// Its parent's name, if it is an alias.
    pub parent: Option<String>,
    /// Index of the block whose storage it lives in (itself for a storage).
    pub storage: usize,
    /// Index into [`Picture::categories`].
    pub category: usize,
}

/// Everything a picture shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picture {
    /// The graph's name.
    pub graph: String,
    /// Steps in the schedule (the x axis runs from 0 to this).
    pub steps: u32,
    /// The arena's size (the y axis runs from 0 to this).
    pub arena_bytes: u64,
    /// The plan's lower bound.
    pub lower_bound_bytes: u64,
    /// The weight region, outside the arena.
    pub weight_bytes: u64,
    /// Bytes in use at each step, shared bytes counted once.
    pub live: Vec<u64>,
    /// The first step where `live` is largest.
    pub peak_step: u32,
    /// The op run at each step.
    pub step_ops: Vec<String>,
    /// The rectangles: the plan's buffers in tensor id order, then the workspaces.
    pub blocks: Vec<Block>,
    /// Indexes of the blocks live at the peak step, largest first.
    pub at_peak: Vec<usize>,
    /// The legend.
    pub categories: Vec<Category>,
    /// For a training step: runs of consecutive steps in one phase, `(phase, first step,
    /// last step)` in step order (empty for other plans).
    pub phases: Vec<(&'static str, u32, u32)>,
}

impl Picture {
    /// The picture of `plan`, a plan of `graph`.
    pub fn new(graph: &Graph, plan: &Plan) -> Picture {
        let producers = graph.producers();
        let op_of = |t: TensorId| -> String {
            producers
                .get(t)
                .copied()
                .flatten()
                .and_then(|n| graph.nodes().get(n))
                .map_or_else(|| "input".to_owned(), |n| n.op.clone())
        };
        let index_of: BTreeMap<TensorId, usize> = plan
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| (b.tensor, i))
            .collect();
        // The storage of each buffer: follow parents to a buffer with none.
        let storage_of = |mut i: usize| -> usize {
            for _ in 0..plan.buffers.len() {
                let Some(parent) = plan.buffers.get(i).and_then(|b| b.parent()) else {
                    break;
                };
                match index_of.get(&parent) {
                    Some(&p) => i = p,
                    None => break,
                }
            }
            i
        };
        let names = Names::of(graph);
        let mut blocks: Vec<Block> = Vec::with_capacity(plan.buffers.len() + plan.workspaces.len());
        // Category keys, decided below once their bytes are known.
        let mut keys: Vec<String> = Vec::with_capacity(blocks.capacity());
        for (i, b) in plan.buffers.iter().enumerate() {
            let tensor = graph.tensors().get(b.tensor);
            let kind = tensor.map_or(TensorKind::Activation, |t| t.kind);
            let storage = storage_of(i);
            keys.push(match kind {
                TensorKind::Input => "graph input".to_owned(),
                TensorKind::Output => "graph output".to_owned(),
                _ => op_of(b.tensor),
            });
            blocks.push(Block {
                name: names.name(b.tensor).to_string(),
                op: op_of(b.tensor),
                kind: BlockKind::Tensor(kind),
                tensor: Some(b.tensor),
                shape: tensor.map_or_else(String::new, |t| crate::inspect::shape(graph, t)),
                dtype: tensor.map_or_else(String::new, |t| t.dtype.to_string()),
                offset: b.offset,
                bytes: b.bytes,
                extent: strided_part(graph, plan, b).map_or(b.bytes, |(rows, stride)| {
                    (rows - 1)
                        .saturating_mul(stride)
                        .saturating_add(b.bytes / rows)
                }),
                rows: strided_part(graph, plan, b),
                first: b.first,
                last: b.last,
                alias: b.alias_kind(),
                parent: b
                    .parent()
                    .and_then(|p| graph.tensors().get(p))
                    .map(|t| t.name.clone()),
                storage,
                category: 0,
            });
        }
        for w in &plan.workspaces {
            let node = graph.nodes().get(w.node);
            keys.push("workspace".to_owned());
            blocks.push(Block {
                name: format!("workspace of {}", names.name(w.node)),
                op: node.map_or_else(String::new, |n| n.op.clone()),
                kind: BlockKind::Workspace,
                tensor: None,
                shape: String::new(),
                dtype: String::new(),
                offset: w.offset,
                bytes: w.bytes,
                extent: w.bytes,
                rows: None,
                first: w.step,
                last: w.step,
                alias: None,
                parent: None,
                storage: blocks.len(),
                category: 0,
            });
        }
        let steps = u32::try_from(plan.schedule.len()).unwrap_or(u32::MAX);
        let live = live_bytes(&blocks, steps);
        let peak_step = live
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
            .map_or(0, |(i, _)| u32::try_from(i).unwrap_or(0));
        let mut at_peak: Vec<usize> = (0..blocks.len())
            .filter(|&i| blocks[i].first <= peak_step && peak_step <= blocks[i].last)
            .collect();
        at_peak.sort_by(|&a, &b| blocks[b].bytes.cmp(&blocks[a].bytes).then(a.cmp(&b)));
        let holding = holding_at_peak(&blocks, &at_peak);
        let categories = categorise(&mut blocks, &keys, &holding);
        let step_ops = plan
            .schedule
            .iter()
            .map(|&n| {
                graph
                    .nodes()
                    .get(n)
                    .map_or_else(String::new, |n| n.op.clone())
            })
            .collect();
        Picture {
            graph: plan.graph.clone(),
            steps,
            arena_bytes: plan.arena_bytes,
            lower_bound_bytes: plan.lower_bound_bytes,
            weight_bytes: plan.weight_bytes,
            live,
            peak_step,
            step_ops,
            blocks,
            at_peak,
            categories,
            phases: Vec::new(),
        }
    }

    /// The blocks worth a label, in order: those holding bytes at the peak (largest
    /// first, views left out), then the `n` largest storages (size descending, then index).
    pub fn to_label(&self, n: usize) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .at_peak
            .iter()
            .copied()
            .filter(|&i| self.blocks[i].alias != Some(AliasKind::View))
            .take(n)
            .collect();
        for i in self.largest(n) {
            if !out.contains(&i) {
                out.push(i);
            }
        }
        out
    }

    /// The picture with the phase of each step (forward, backward, optimizer) shown as a
    /// band over the plot.
    pub fn with_phases(mut self, steps: &[memplan_planner::Phase]) -> Picture {
        self.phases.clear();
        for (i, p) in steps.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            match self.phases.last_mut() {
                Some(last) if last.0 == p.name() && last.2 + 1 == i => last.2 = i,
                _ => self.phases.push((p.name(), i, i)),
            }
        }
        self
    }

    /// The `n` largest storages (size descending, then index): the blocks worth a label.
    pub fn largest(&self, n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.blocks.len())
            .filter(|&i| self.blocks[i].alias.is_none())
            .collect();
        order.sort_by(|&a, &b| {
            self.blocks[b]
                .bytes
                .cmp(&self.blocks[a].bytes)
                .then(a.cmp(&b))
        });
        order.truncate(n);
        order
    }
}

/// For each block, whether it holds its bytes at the peak: live there, not a view (its bytes
/// are its parent's), and not a tensor that another block live there was written over.
fn holding_at_peak(blocks: &[Block], at_peak: &[usize]) -> Vec<bool> {
    let mut holding = vec![false; blocks.len()];
    for &i in at_peak {
        if blocks[i].alias != Some(AliasKind::View) {
            holding[i] = true;
        }
    }
    for &i in at_peak {
        let b = &blocks[i];
        let Some(parent) = &b.parent else { continue };
        for &j in at_peak {
            if &blocks[j].name != parent {
                continue;
            }
            match b.alias {
                // Written over its parent: the bytes are the child's now.
                Some(AliasKind::InPlace) => holding[j] = false,
                // A part inside a Concat output that is live too: the output's bytes.
                Some(AliasKind::Part) => holding[i] = false,
                _ => {}
            }
        }
    }
    holding
}

/// Gives each block its category: graph inputs, graph outputs, workspaces, then one colour
/// per op in order of bytes at the peak, then bytes over the run (then name), the ops past
/// the palette sharing one.
fn categorise(blocks: &mut [Block], keys: &[String], holding: &[bool]) -> Vec<Category> {
    let mut bytes: BTreeMap<&str, u64> = BTreeMap::new();
    let mut peak: BTreeMap<&str, u64> = BTreeMap::new();
    for ((block, key), &holds) in blocks.iter().zip(keys).zip(holding) {
        let entry = bytes.entry(key.as_str()).or_default();
        if block.alias != Some(AliasKind::View) {
            *entry = entry.saturating_add(block.bytes);
        }
        let at = peak.entry(key.as_str()).or_default();
        if holds {
            *at = at.saturating_add(block.bytes);
        }
    }
    let peak_of = |k: &str| peak.get(k).copied().unwrap_or(0);
    let fixed = [
        ("graph input", INPUT_COLOUR),
        ("graph output", OUTPUT_COLOUR),
        ("workspace", WORKSPACE_COLOUR),
    ];
    let mut ops: Vec<(&str, u64)> = bytes
        .iter()
        .filter(|(k, _)| !fixed.iter().any(|(f, _)| f == *k))
        .map(|(k, v)| (*k, *v))
        .collect();
    ops.sort_by(|a, b| {
        peak_of(b.0)
            .cmp(&peak_of(a.0))
            .then(b.1.cmp(&a.1))
            .then(a.0.cmp(b.0))
    });
    let mut categories: Vec<Category> = Vec::new();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (label, colour) in fixed {
        if let Some(&b) = bytes.get(label) {
            index.insert(label, categories.len());
            categories.push(Category {
                label: label.to_owned(),
                colour,
                peak_bytes: peak_of(label),
                bytes: b,
            });
        }
    }
    let mut other: Option<usize> = None;
    for (i, (op, b)) in ops.iter().enumerate() {
        if let Some(&colour) = PALETTE.get(i) {
            index.insert(op, categories.len());
            categories.push(Category {
                label: (*op).to_owned(),
                colour,
                peak_bytes: peak_of(op),
                bytes: *b,
            });
        } else {
            let at = *other.get_or_insert_with(|| {
                categories.push(Category {
                    label: "other ops".to_owned(),
                    colour: OTHER_COLOUR,
                    peak_bytes: 0,
                    bytes: 0,
                });
                categories.len() - 1
            });
            index.insert(op, at);
            if let Some(c) = categories.get_mut(at) {
                c.bytes = c.bytes.saturating_add(*b);
                c.peak_bytes = c.peak_bytes.saturating_add(peak_of(op));
            }
        }
    }
    for (block, key) in blocks.iter_mut().zip(keys) {
        block.category = index.get(key.as_str()).copied().unwrap_or(0);
    }
    categories
}

/// Bytes in use at each step, as the lower bound counts them: every storage holds its
/// bytes from its first member's first step to its last member's last (a Concat's output
/// from when its first input is written into it), and bytes that views and in-place outputs
/// share are counted once (the union of the ranges live at the step).
fn live_bytes(blocks: &[Block], steps: u32) -> Vec<u64> {
    let mut span: Vec<Option<(u32, u32)>> = vec![None; blocks.len()];
    for b in blocks {
        if let Some(slot) = span.get_mut(b.storage) {
            *slot = Some(match *slot {
                None => (b.first, b.last),
                Some((f, l)) => (f.min(b.first), l.max(b.last)),
            });
        }
    }
    let mut by_step: Vec<Vec<(u64, u64)>> = vec![Vec::new(); steps as usize];
    for (b, span) in blocks.iter().zip(&span) {
        let Some((first, last)) = *span else { continue };
        for s in first..=last.min(steps.saturating_sub(1)) {
            if let Some(v) = by_step.get_mut(s as usize) {
                v.push((b.offset, b.offset.saturating_add(b.extent)));
            }
        }
    }
    by_step
        .into_iter()
        .map(|mut ranges| {
            ranges.sort_unstable();
            let (mut total, mut end) = (0u64, 0u64);
            for (lo, hi) in ranges {
                let lo = lo.max(end);
                if hi > lo {
                    total = total.saturating_add(hi - lo);
                    end = hi;
                }
            }
            total
        })
        .collect()
}

/// Round tick values for an axis from 0 to `max`: about `target` of them, at 1, 2 or 5
/// times a power of ten (times `unit`, for byte axes in KiB, MiB, ...).
pub fn ticks(max: f64, target: f64, unit: f64) -> Vec<f64> {
    if max <= 0.0 || unit <= 0.0 {
        return vec![0.0];
    }
    let raw = max / unit / target.max(1.0);
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * magnitude)
        * unit;
    let step = if step <= 0.0 { max } else { step };
    let mut out = Vec::new();
    let mut v = 0.0;
    while v <= max * (1.0 + 1e-9) && out.len() < 1000 {
        out.push(v);
        v += step;
    }
    out
}

/// The binary unit an axis up to `max` bytes is labelled in, with its name.
pub fn byte_unit(max: u64) -> (f64, &'static str) {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (size, name) in UNITS {
        if max >= size {
            #[allow(clippy::cast_precision_loss, reason = "display only")]
            return (size as f64, name);
        }
    }
    (1.0, "B")
}

/// A tick label: `96 MiB`, `1.5 GiB`.
pub fn tick_label(value: f64, unit: f64, name: &str) -> String {
    let v = value / unit;
    if (v - v.round()).abs() < 1e-9 {
        format!("{} {name}", v.round())
    } else {
        format!("{v:.1} {name}")
    }
}
