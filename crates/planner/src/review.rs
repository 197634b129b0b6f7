//! A plan as text for review: the form an engine snapshots in its CI.
//!
//! [`Review::new`] renders a plan in two parts: the placements (order, every tensor's place
//! and lifetime, named from the graph) and the statistics (how it was made), apart.
//!
//! [`PlanOptions::reproducible`] is the options preset for snapshots. [`Review`]'s docs
//! say what each part holds, with an `insta` example.

use std::fmt;
use std::fmt::Write as _;
use std::time::Duration;

use memplan_ir::{Graph, Names, TensorId, TensorKind};
use memplan_packing::Strategy;

use crate::options::{PlanOptions, ScheduleMode};
use crate::plan::{Alias, Plan};

impl PlanOptions {
    /// The options preset for snapshots of a [`Review`]: the graph's own order, best fit
    /// largest first ([`Strategy::GreedySize`]), no search bounded by time or work;
    /// everything else as [`PlanOptions::default`]. Its placements depend on the graph and
    /// these rules alone; a release that changes them for some graph says so in its
    /// changelog.
    pub fn reproducible() -> PlanOptions {
        PlanOptions {
            schedule: ScheduleMode::Given,
            strategy: Strategy::GreedySize,
            solve_time_limit: Duration::ZERO,
            solve_node_limit: None,
            ..PlanOptions::default()
        }
    }
}

/// A plan rendered for review: the form an engine snapshots in its CI.
///
/// - [`Review::placements`]: what the plan decides, named from the graph: the execution
///   order (node names, one a line), then every tensor (one a line, in the order of the node
///   that makes it; graph inputs and weights first, in tensor id order) with its dtype and
///   shape, its bytes, where it lives (`arena [start, end)`, `view of t +offset`, `in place
///   over t`, `into t +offset`, `weights [start, end)`, `bound by the caller`, `no bytes`) and
///   when (`live <node> .. <node>`, named by the nodes whose steps start and end it, `start`
///   and `end` for the run's ends), in columns of fixed width. No id and no step number
///   appears, and no line depends on another's width, so a node inserted elsewhere adds its
///   own lines and moves no other (offsets move only where the placement does). Name the nodes and tensors ([`memplan_ir::GraphBuilder::named_op`]) for lines
///   that stay put.
/// - [`Review::statistics`]: how the plan was made (bounds, the placement strategy that won,
///   whether it is proven optimal, the orders the scheduler tried): figures a newer memplan
///   may improve for an identical plan, kept apart so that a snapshot of the placements does
///   not churn with them.
///
/// Plan with [`PlanOptions::reproducible`] for snapshots. An example with `insta`:
///
/// ```
/// use memplan_ir::{DType, GraphBuilder};
/// use memplan_planner::{PlanOptions, Review, plan_graph};
///
/// let mut g = GraphBuilder::new("mlp");
/// let x = g.input("x", DType::F32, [8, 64]);
/// let w = g.weight("w", DType::F32, [64, 64]);
/// let h = g.named_op("matmul", "MatMul", &[x, w], DType::F32, [8, 64]);
/// let r = g.named_op("relu", "Relu", &[h], DType::F32, [8, 64]);
/// let y = g.named_op("flat", "Reshape", &[r], DType::F32, [512]);
/// g.mark_output(y);
/// let graph = g.build().unwrap();
///
/// let plan = plan_graph(&graph, &PlanOptions::reproducible()).unwrap();
/// let review = Review::new(&graph, &plan);
/// insta::assert_snapshot!(review.placements(), @r"
/// plan mlp: arena 4096 bytes, weights 16384 bytes, alignment 256
/// order:
///   matmul
///   relu
///   flat
/// tensors:
///   x              f32[8,64]        2048 B    arena [2048, 4096)         live start .. matmul
///   w              f32[64,64]       16384 B   weights [0, 16384)         live start .. end
///   matmul         f32[8,64]        2048 B    arena [0, 2048)            live matmul .. relu
///   relu           f32[8,64]        2048 B    in place over matmul       live relu .. flat
///   flat           f32[512]         2048 B    view of relu +0            live flat .. end
/// ");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Review {
    placements: String,
    statistics: String,
}

impl Review {
    /// Renders `plan` of `graph`.
    pub fn new(graph: &Graph, plan: &Plan) -> Review {
        Review {
            placements: placements(graph, plan),
            statistics: statistics(plan),
        }
    }

    /// What the plan decides: order, and every tensor's place and lifetime.
    pub fn placements(&self) -> &str {
        &self.placements
    }

    /// How the plan was made: figures that may change across memplan versions.
    pub fn statistics(&self) -> &str {
        &self.statistics
    }
}

impl fmt::Display for Review {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.placements, self.statistics)
    }
}

/// One tensor's line, as columns.
struct Row {
    name: String,
    shape: String,
    bytes: String,
    place: String,
    live: String,
}

fn placements(graph: &Graph, plan: &Plan) -> String {
    let names = Names::of(graph);
    let node_name = |step: u32| -> String {
        plan.schedule
            .get(step as usize)
            .map_or_else(|| format!("step {step}"), |&n| names.name(n).to_string())
    };
    let last_step = plan.schedule.len().saturating_sub(1) as u32;
    let bindings = plan.settings.bindings_for(graph).unwrap_or_default();

    // Tensors in the order of the node that makes them (inputs and weights first).
    let mut order: Vec<TensorId> = graph
        .tensors()
        .iter_enumerated()
        .filter(|(_, t)| t.kind.is_persistent() || t.kind == TensorKind::Input)
        .map(|(id, _)| id)
        .collect();
    let mut seen = vec![false; graph.tensors().len()];
    for &t in &order {
        seen[t.0 as usize] = true;
    }
    for &n in &plan.schedule {
        for &t in &graph.node(n).outputs {
            if let Some(s) = seen.get_mut(t.0 as usize)
                && !*s
            {
                *s = true;
                order.push(t);
            }
        }
    }
    order.extend(
        graph
            .tensors()
            .iter_enumerated()
            .map(|(id, _)| id)
            .filter(|t| !seen[t.0 as usize]),
    );

    let rows: Vec<Row> = order
        .iter()
        .map(|&t| {
            let tensor = graph.tensor(t);
            let dims: Vec<String> = tensor
                .shape
                .iter()
                .map(|d| d.display(graph.symbols()).to_string())
                .collect();
            let shape = format!("{}[{}]", tensor.dtype, dims.join(","));
            let bytes = tensor.bytes(&bindings).ok();
            let (place, live) = if let Some(b) = plan.buffer(t) {
                let place = match b.alias {
                    None => format!("arena [{}, {})", b.offset, b.offset + b.bytes),
                    Some(Alias::View { of, offset }) => {
                        format!("view of {} +{offset}", names.name(of))
                    }
                    Some(Alias::InPlace { of }) => format!("in place over {}", names.name(of)),
                    Some(Alias::Part { of, offset }) => {
                        format!("into {} +{offset}", names.name(of))
                    }
                };
                let from = if b.first == 0 && tensor.kind == TensorKind::Input {
                    "start".to_owned()
                } else {
                    node_name(b.first)
                };
                let to = if b.last == last_step && tensor.kind == TensorKind::Output {
                    "end".to_owned()
                } else {
                    node_name(b.last)
                };
                (place, format!("live {from} .. {to}"))
            } else if let Some(w) = plan.weight(t) {
                (
                    format!("weights [{}, {})", w.offset, w.offset + w.bytes),
                    "live start .. end".to_owned(),
                )
            } else if bytes == Some(0) {
                ("no bytes".to_owned(), String::new())
            } else if matches!(tensor.kind, TensorKind::Input | TensorKind::Output) {
                ("bound by the caller".to_owned(), String::new())
            } else {
                ("not in the plan".to_owned(), String::new())
            };
            Row {
                name: names.name(t).to_string(),
                shape,
                bytes: bytes.map_or_else(|| "? B".to_owned(), |b| format!("{b} B")),
                place,
                live,
            }
        })
        .collect();

    let mut s = String::new();
    let _ = writeln!(
        s,
        "plan {}: arena {} bytes, weights {} bytes, alignment {}",
        plan.graph, plan.arena_bytes, plan.weight_bytes, plan.alignment
    );
    if !plan.settings.bindings.is_empty() {
        let b: Vec<String> = plan
            .settings
            .bindings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(s, "symbols: {}", b.join(", "));
    }
    let _ = writeln!(s, "order:");
    for &n in &plan.schedule {
        let _ = writeln!(s, "  {}", names.name(n));
    }
    for w in &plan.workspaces {
        let _ = writeln!(
            s,
            "workspace of {}: arena [{}, {})",
            names.name(w.node),
            w.offset,
            w.offset + w.bytes
        );
    }
    let _ = writeln!(s, "tensors:");
    // Fixed column widths (a longer value pushes its own line only), so that no line
    // depends on another tensor's name or shape.
    for r in &rows {
        let line = format!(
            "  {:<14} {:<16} {:<9} {:<26} {}",
            r.name, r.shape, r.bytes, r.place, r.live
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
    s
}

fn statistics(plan: &Plan) -> String {
    let st = &plan.stats;
    let sc = &st.schedule;
    let mut s = String::new();
    let _ = writeln!(s, "statistics:");
    let _ = writeln!(s, "  lower bound:        {} bytes", plan.lower_bound_bytes);
    let _ = writeln!(
        s,
        "  no-aliasing bound:  {} bytes",
        st.unaliased_lower_bound
    );
    let _ = writeln!(s, "  naive:              {} bytes", plan.naive_bytes);
    let _ = writeln!(
        s,
        "  aliasing:           {} views, {} in place, {} into a Concat, {} storages",
        st.views, st.inplace, st.parts, st.storages
    );
    let _ = writeln!(
        s,
        "  placed by:          {}{}",
        st.placed_by,
        if st.proven_optimal {
            " (proven optimal)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "  schedule:           {} -> {} (peak {}, given {})",
        sc.mode.name(),
        sc.chosen,
        sc.peak,
        sc.given_peak
    );
    for c in &sc.candidates {
        let _ = writeln!(s, "    tried {:<20} peak {}", c.name, c.peak);
    }
    s
}
