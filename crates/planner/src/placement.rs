//! Placement: storages become buffers of an arena packing problem, the engine gives offsets,
//! and weights get their own persistent region.
//!
//! One engine buffer per storage: the root's bytes and alignment, live over
//! `[storage first, storage last + 1)`. Every member of a storage sits at the storage's offset
//! plus its offset in the root. Weights are laid out side by side in tensor id order, each
//! offset aligned; they are live for the whole run, so no reuse is possible among them.
//! A node's workspace (see `workspace`) is one more engine buffer after the storages, live
//! over `[step, step + 1)` at the plan's alignment.

use memplan_ir::{IndexVec, NodeId, TensorId};

use crate::aliasing::Aliases;
use crate::error::PlanError;
use crate::liveness::Lifetimes;
use crate::options::PlanOptions;
use crate::plan::{Alias, AliasKind, PlannedBuffer, PlannedWeight, PlannedWorkspace};
use crate::regions::{Region, Regions};
use memplan_packing::{self as packing, Buffer, Problem, SolveOptions, align_up};

/// The packing problem for one schedule and aliasing, with the root of each engine buffer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Storages {
    /// One buffer per storage.
    pub problem: Problem,
    /// The root tensor of each storage buffer (the first `roots.len()` buffers).
    pub roots: Vec<TensorId>,
    /// The node and step of each workspace buffer (the buffers after the storages).
    pub workspaces: Vec<(NodeId, u32)>,
}

impl Storages {
    /// One engine buffer per storage root, in tensor id order, then one per workspace of
    /// `workspace` (bytes by node), in `schedule` order, into `self` (its vectors cleared
    /// and refilled, not reallocated). The buffers have no names: `roots` and `workspaces`
    /// say what each one is.
    pub fn fill(
        &mut self,
        regions: &Regions,
        aliases: &Aliases,
        schedule: &[NodeId],
        workspace: &IndexVec<NodeId, u64>,
        alignment: u64,
    ) {
        let mut buffers = std::mem::take(&mut self.problem.buffers);
        buffers.clear();
        let roots = &mut self.roots;
        roots.clear();
        for r in aliases.roots(regions) {
            let start = u64::from(aliases.storage_first[r]);
            let last = u64::from(aliases.storage_last[r]);
            buffers.push(Buffer {
                start,
                end: last.max(start) + 1,
                size: regions.bytes_of(r),
                align: regions.align[r],
            });
            roots.push(r);
        }
        let workspaces = &mut self.workspaces;
        workspaces.clear();
        for (step, &n) in (0u32..).zip(schedule) {
            let bytes = workspace[n];
            if bytes == 0 {
                continue;
            }
            buffers.push(Buffer {
                start: u64::from(step),
                end: u64::from(step) + 1,
                size: bytes,
                align: alignment,
            });
            workspaces.push((n, step));
        }
        self.problem = Problem::new(buffers);
    }

    /// The lower bound of this problem: the peak of the schedule with this aliasing.
    pub fn lower_bound(&self) -> u64 {
        packing::lower_bound(&self.problem)
    }

    /// The live bytes summed over the steps (bytes times steps of every buffer).
    pub fn area(&self) -> u128 {
        self.problem
            .buffers
            .iter()
            .map(|b| u128::from(b.size) * u128::from(b.end.saturating_sub(b.start)))
            .sum()
    }
}

/// What the engine made of the storages.
#[derive(Clone, Debug)]
pub(crate) struct Placed {
    pub buffers: Vec<PlannedBuffer>,
    pub workspaces: Vec<PlannedWorkspace>,
    pub arena_bytes: u64,
    pub lower_bound: u64,
    pub placed_by: String,
    pub proven_optimal: bool,
}

/// Places the storages with the engine (`solver`, whose working memory is kept for the next
/// problem) and lays every arena tensor out inside its storage.
pub(crate) fn place(
    regions: &Regions,
    lifetimes: &Lifetimes,
    aliases: &Aliases,
    storages: &Storages,
    options: &PlanOptions,
    solver: &mut packing::Solver,
) -> Result<Placed, PlanError> {
    let solve_options = SolveOptions::default()
        .with_strategy(options.strategy)
        .with_time_limit(options.solve_time_limit)
        .with_node_limit(options.solve_node_limit)
        .with_capacity(None)
        .with_minimize(false);
    let outcome = solver.solve(&storages.problem, &solve_options)?;
    let solution = outcome.solution.ok_or(PlanError::NoPlacement {
        storages: storages.problem.buffers.len(),
    })?;
    // Every arena tensor's root is one of the placed storages: no default offset to fall
    // back on.
    let mut root_offset: IndexVec<TensorId, Option<u64>> =
        IndexVec::from_elem(None, regions.bytes.len());
    for (&r, &o) in storages.roots.iter().zip(&solution.offsets) {
        root_offset[r] = Some(o);
    }
    let mut buffers = Vec::new();
    for (t, &res) in regions.region.iter_enumerated() {
        if res != Region::Arena {
            continue;
        }
        let root = aliases.root[t];
        let Some(root_at) = root_offset[root] else {
            unreachable!("the root {root} of arena tensor {t} was not placed");
        };
        let offset = root_at
            .checked_add(aliases.offset[t])
            .ok_or_else(|| PlanError::Overflow {
                what: format!("offsetting tensor {t}"),
            })?;
        let alias = aliases.parent[t].map(|(of, kind)| match kind {
            // Offsets in the root: the view starts this far into its parent.
            AliasKind::View => Alias::View {
                of,
                offset: aliases.offset[t] - aliases.offset[of],
            },
            AliasKind::InPlace => Alias::InPlace { of },
            AliasKind::Part => Alias::Part {
                of,
                offset: aliases.offset[t] - aliases.offset[of],
            },
        });
        buffers.push(PlannedBuffer {
            tensor: t,
            offset,
            bytes: regions.bytes_of(t),
            first: lifetimes.first[t],
            last: lifetimes.last[t],
            alias,
        });
    }
    let workspace_offsets = solution.offsets.get(storages.roots.len()..).unwrap_or(&[]);
    let workspaces = storages
        .workspaces
        .iter()
        .zip(workspace_offsets)
        .zip(
            storages
                .problem
                .buffers
                .get(storages.roots.len()..)
                .unwrap_or(&[]),
        )
        .map(|((&(node, step), &offset), b)| PlannedWorkspace {
            node,
            offset,
            bytes: b.size,
            step,
            bodies: Vec::new(),
        })
        .collect();
    Ok(Placed {
        buffers,
        workspaces,
        arena_bytes: outcome.arena,
        lower_bound: outcome.lower_bound,
        placed_by: outcome.produced_by.to_string(),
        proven_optimal: outcome.proven_optimal,
    })
}

/// Weights side by side in tensor id order, each offset aligned; returns them and the size
/// of the region.
pub(crate) fn place_weights(regions: &Regions) -> Result<(Vec<PlannedWeight>, u64), PlanError> {
    let mut top: u64 = 0;
    let mut weights = Vec::new();
    for (t, &res) in regions.region.iter_enumerated() {
        if res != Region::Weights {
            continue;
        }
        let align = regions.align[t];
        let bytes = regions.bytes_of(t);
        let overflow = || PlanError::Overflow {
            what: format!("laying out weight {t}"),
        };
        let offset = align_up(top, align).ok_or_else(overflow)?;
        top = offset.checked_add(bytes).ok_or_else(overflow)?;
        weights.push(PlannedWeight {
            tensor: t,
            offset,
            bytes,
        });
    }
    Ok((weights, top))
}

/// The naive arena: every arena tensor its own buffer, side by side, no reuse, no aliasing.
pub(crate) fn naive_bytes(regions: &Regions) -> Result<u64, PlanError> {
    let mut top: u64 = 0;
    for (t, &res) in regions.region.iter_enumerated() {
        if res == Region::Arena {
            let overflow = || PlanError::Overflow {
                what: "summing the naive arena".to_owned(),
            };
            let offset = align_up(top, regions.align[t]).ok_or_else(overflow)?;
            top = offset
                .checked_add(regions.bytes_of(t))
                .ok_or_else(overflow)?;
        }
    }
    Ok(top)
}
