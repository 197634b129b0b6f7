//! Mutants of valid plans, unsafe and safe by construction, for proving that the checks
//! work: the plan verifier (`crates/planner/tests/plan_mutants.rs`) and the byte-pattern
//! check (`crates/cuda-arena/tests/mutants.rs`) must each reject every unsafe mutant and
//! accept every safe one.
//!
//! Unsafe (each makes some tensor's bytes wrong at some step when the plan runs):
//! - `overlap`: a whole storage moved onto another storage live at a common step;
//! - `false-view`: an output of an op that computes new values (Conv, MatMul, Transpose,
//!   ...) claimed as a view of an input it reads;
//! - `false-inplace`: such an output claimed as written over an input of the same size;
//! - `short-lifetime`: a buffer's last step moved before its last reader, and a storage that
//!   starts in the steps given up moved onto its bytes (a shorter lifetime is only unsafe
//!   when the bytes are reused, which is what a planner trusting it would do);
//! - `moved-view`: a view moved by one element inside its parent (it would read other
//!   elements);
//! - `moved-part`: a Concat part moved by one element inside the Concat's output (its
//!   producer would write where another input's slice is).
//!
//! Safe: a storage moved past the end of the arena (the arena grown to hold it); a view or a
//! Concat part with no children turned into a storage of its own there (a copy instead);
//! slack added to the arena.

use std::path::PathBuf;

use memplan_ir::{Attr, DType, Graph, GraphBuilder, TensorId, TensorKind};
use memplan_planner::{Alias, Plan};

/// Ops whose outputs are new values: never a view, never written over an input.
const COMPUTING: &[&str] = &[
    "Conv",
    "MatMul",
    "Gemm",
    "Transpose",
    "Concat",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "Softmax",
    "ReduceMean",
    "ConvTranspose",
    "Resize",
    "LSTM",
    "GRU",
    "Gather",
    "Pad",
    "LayerNormalization",
];

/// The kinds of unsafe mutant, in report order.
pub const UNSAFE: [&str; 6] = [
    "overlap",
    "false-view",
    "false-inplace",
    "short-lifetime",
    "moved-view",
    "moved-part",
];

/// The kinds of safe mutant, in report order.
pub const SAFE: [&str; 4] = [
    "storage-moved-past-end",
    "view-made-a-copy",
    "arena-slack",
    "part-made-a-copy",
];

/// One mutant: its kind (an index into [`UNSAFE`] or [`SAFE`]) and the mutated plan.
pub struct Mutant {
    pub unsafe_kind: Option<usize>,
    pub safe_kind: Option<usize>,
    pub plan: Plan,
}

/// A corpus graph from `testdata/graphs/json`.
pub fn corpus_graph(name: &str) -> Graph {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/graphs/json")
        .join(format!("{name}.json"));
    Graph::load_json(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Partial views: a Slice of two rows and a Split into one row and three, of one tensor,
/// then an in-place Relu over a whole Reshape view.
pub fn partial_views() -> Graph {
    let mut g = GraphBuilder::new("partial_views");
    let x = g.input("x", DType::F32, [4, 8]);
    let a = g.op("Conv", &[x], DType::F32, [4, 8]);
    let starts = g.int_constant("starts", &[1]);
    let ends = g.int_constant("ends", &[3]);
    let axes = g.int_constant("axes", &[0]);
    let s = g.tensor("s", DType::F32, [2, 8], TensorKind::Activation);
    g.node(
        "slice",
        "Slice",
        &[Some(a), Some(starts), Some(ends), Some(axes)],
        &[s],
    );
    let p = g.tensor("p", DType::F32, [1, 8], TensorKind::Activation);
    let q = g.tensor("q", DType::F32, [3, 8], TensorKind::Activation);
    g.node("split", "Split", &[Some(a)], &[p, q]);
    g.attr("split", Attr::Ints(vec![1, 3]));
    let c = g.op("Concat", &[s, p, q], DType::F32, [6, 8]);
    let r = g.op("Reshape", &[c], DType::F32, [48]);
    let y = g.op("Relu", &[r], DType::F32, [48]);
    g.mark_output(y);
    g.build().unwrap()
}

/// Concat parts: both inputs of a Concat written into its output (one made right after the
/// graph input, one from a small tensor right before the Concat), which the planner keeps
/// because it lowers the peak.
pub fn concat_parts() -> Graph {
    let mut g = GraphBuilder::new("concat_parts");
    let x = g.input("x", DType::F32, [1, 4, 8, 8]);
    let a = g.op("Conv", &[x], DType::F32, [1, 4, 8, 8]);
    let s = g.op("Conv", &[a], DType::F32, [1, 1, 8, 8]);
    let d = g.op("Resize", &[s], DType::F32, [1, 4, 8, 8]);
    let r = g.op("Reshape", &[d], DType::F32, [4, 64]);
    let e = g.op("Relu", &[r], DType::F32, [4, 64]);
    let y = g.op("Concat", &[a, d], DType::F32, [1, 8, 8, 8]);
    g.attr("axis", Attr::Int(1));
    let z = g.op("Sigmoid", &[y], DType::F32, [1, 8, 8, 8]);
    g.mark_output(z);
    g.mark_output(e);
    g.build().unwrap()
}

/// Makes an alias of a parent at an offset (a view or a Concat part).
type MakeAlias = fn(TensorId, u64) -> Alias;

fn index(plan: &Plan, t: TensorId) -> Option<usize> {
    plan.buffers.iter().position(|b| b.tensor == t)
}

/// The buffers of the storage rooted at buffer `r` (following parents).
fn storage_of(plan: &Plan, r: usize) -> Vec<usize> {
    let root_of = |mut i: usize| {
        for _ in 0..plan.buffers.len() {
            match plan.buffers[i].parent().and_then(|p| index(plan, p)) {
                Some(p) => i = p,
                None => break,
            }
        }
        i
    };
    (0..plan.buffers.len())
        .filter(|&i| root_of(i) == r)
        .collect()
}

fn span(plan: &Plan, members: &[usize]) -> (u32, u32) {
    let first = members.iter().map(|&m| plan.buffers[m].first).min();
    let last = members.iter().map(|&m| plan.buffers[m].last).max();
    (first.unwrap_or(0), last.unwrap_or(0))
}

/// `plan` with the storage of `members` (rooted at `from_root`) moved to start at `to`.
fn moved(plan: &Plan, members: &[usize], from_root: usize, to: u64) -> Plan {
    let mut m = plan.clone();
    let from = plan.buffers[from_root].offset;
    for &i in members {
        m.buffers[i].offset = m.buffers[i].offset - from + to;
    }
    m
}

/// Mutants of `plan` (a valid plan of `graph`), at most about `per_kind` of each kind.
pub fn mutants(graph: &Graph, plan: &Plan, per_kind: usize) -> Vec<Mutant> {
    let mut out = Vec::new();
    let mut push = |unsafe_kind: Option<usize>, safe_kind: Option<usize>, plan: Plan| {
        out.push(Mutant {
            unsafe_kind,
            safe_kind,
            plan,
        });
    };
    let producers = graph.producers();
    let n = plan.buffers.len();
    let stride = (n / per_kind.max(1)).max(1);
    let end = plan.arena_bytes.next_multiple_of(plan.alignment.max(1));
    let roots: Vec<usize> = (0..n)
        .filter(|&i| plan.buffers[i].alias.is_none())
        .collect();
    let storages: Vec<Vec<usize>> = roots.iter().map(|&r| storage_of(plan, r)).collect();
    let computes_at = |step: u32| {
        plan.schedule
            .get(step as usize)
            .is_some_and(|&n| COMPUTING.contains(&graph.nodes()[n].op.as_str()))
    };
    for (k, &r) in roots.iter().enumerate().step_by(stride) {
        let members = &storages[k];
        let (f, l) = span(plan, members);
        let rb = &plan.buffers[r];
        // overlap: onto the next root live at two common steps (or at one where the node
        // computes new values: at a single shared step an element-wise node could write one
        // over the other), at another offset.
        if let Some(o) = (k + 1..roots.len()).find(|&o| {
            let (of, ol) = span(plan, &storages[o]);
            let (lo, hi) = (f.max(of), l.min(ol));
            lo <= hi && (hi > lo || computes_at(lo)) && plan.buffers[roots[o]].offset != rb.offset
        }) {
            push(
                Some(0),
                None,
                moved(plan, members, r, plan.buffers[roots[o]].offset),
            );
        }
        // short-lifetime: an unaliased root read after its first step loses its last step,
        // and a storage starting in that step moves onto its bytes. The node of that step
        // reads the root and computes the other storage's first value: for it to be unsafe,
        // the node must compute new values (an element-wise one could write in place).
        if members.len() == 1 && rb.last > rb.first && computes_at(rb.last) {
            let cut = rb.last;
            if let Some(o) = (0..roots.len()).find(|&o| {
                let (of, _) = span(plan, &storages[o]);
                o != k && of == cut && plan.buffers[roots[o]].bytes <= rb.bytes
            }) {
                let mut m = moved(plan, &storages[o], roots[o], rb.offset);
                m.buffers[r].last = cut - 1;
                push(Some(3), None, m);
            }
        }
        // safe: the whole storage moved past the end.
        let mut m = moved(plan, members, r, end);
        m.arena_bytes = end + rb.bytes;
        push(None, Some(0), m);
    }
    for i in (0..n).step_by(stride) {
        let b = &plan.buffers[i];
        let Some(node) = producers[b.tensor].map(|p| &graph.nodes()[p]) else {
            continue;
        };
        let computing = COMPUTING.contains(&node.op.as_str());
        let arena_input = node
            .inputs
            .iter()
            .flatten()
            .filter_map(|&x| index(plan, x))
            .find(|&x| plan.buffers[x].bytes >= b.bytes);
        if b.alias.is_none()
            && computing
            && let Some(x) = arena_input
        {
            let xb = &plan.buffers[x];
            let mut m = plan.clone();
            m.buffers[i].alias = Some(Alias::View {
                of: xb.tensor,
                offset: 0,
            });
            m.buffers[i].offset = xb.offset;
            push(Some(1), None, m);
            if xb.bytes == b.bytes {
                let mut m = plan.clone();
                m.buffers[i].alias = Some(Alias::InPlace { of: xb.tensor });
                m.buffers[i].offset = xb.offset;
                push(Some(2), None, m);
            }
        }
        // A view or a Concat part: (its parent, its offset in it, how to make one at another
        // offset, the unsafe and safe kinds).
        let placed: Option<(TensorId, u64, MakeAlias, usize, usize)> = match b.alias {
            Some(Alias::View { of, offset }) => {
                Some((of, offset, |of, offset| Alias::View { of, offset }, 4, 1))
            }
            Some(Alias::Part { of, offset }) => {
                Some((of, offset, |of, offset| Alias::Part { of, offset }, 5, 3))
            }
            _ => None,
        };
        if let Some((of, offset, make, unsafe_kind, safe_kind)) = placed {
            // moved-view, moved-part: one element further into its parent, still inside it.
            let elem = u64::from(
                graph.tensors()[b.tensor]
                    .dtype
                    .bits()
                    .unwrap_or(8)
                    .div_ceil(8),
            );
            let parent = index(plan, of).unwrap();
            let pb = &plan.buffers[parent];
            if b.offset + elem + b.bytes <= pb.offset + pb.bytes {
                let mut m = plan.clone();
                m.buffers[i].offset += elem;
                m.buffers[i].alias = Some(make(of, offset + elem));
                push(Some(unsafe_kind), None, m);
            }
            // safe: a childless view or part becomes a copy at the arena's end.
            if !plan.buffers.iter().any(|x| x.parent() == Some(b.tensor)) {
                let mut m = plan.clone();
                m.buffers[i].alias = None;
                m.buffers[i].offset = end;
                m.arena_bytes = end + b.bytes;
                push(None, Some(safe_kind), m);
            }
        }
    }
    let mut m = plan.clone();
    m.arena_bytes += plan.alignment.max(1);
    push(None, Some(2), m);
    out
}

/// Counts of mutants made and judged right, by kind.
#[derive(Default)]
pub struct Counts {
    pub unsafe_made: [usize; 6],
    pub unsafe_rejected: [usize; 6],
    pub safe_made: [usize; 4],
    pub safe_accepted: [usize; 4],
}

impl Counts {
    /// Counts one mutant that the check under test `rejected` (or not).
    pub fn add(&mut self, m: &Mutant, rejected: bool) {
        if let Some(k) = m.unsafe_kind {
            self.unsafe_made[k] += 1;
            self.unsafe_rejected[k] += usize::from(rejected);
        }
        if let Some(k) = m.safe_kind {
            self.safe_made[k] += 1;
            self.safe_accepted[k] += usize::from(!rejected);
        }
    }

    /// Prints the counts for `check` and asserts every kind was made and judged right.
    pub fn assert_all_right(&self, check: &str) {
        for (k, name) in UNSAFE.iter().enumerate() {
            eprintln!(
                "{check}: {name:>24} (unsafe): {} of {} rejected",
                self.unsafe_rejected[k], self.unsafe_made[k]
            );
        }
        for (k, name) in SAFE.iter().enumerate() {
            eprintln!(
                "{check}: {name:>24} (safe): {} of {} accepted",
                self.safe_accepted[k], self.safe_made[k]
            );
        }
        for (k, name) in UNSAFE.iter().enumerate() {
            assert!(self.unsafe_made[k] > 0, "no {name} mutant was made");
            assert_eq!(
                self.unsafe_rejected[k], self.unsafe_made[k],
                "{check}: {name}"
            );
        }
        for (k, name) in SAFE.iter().enumerate() {
            assert!(self.safe_made[k] > 0, "no {name} mutant was made");
            assert_eq!(self.safe_accepted[k], self.safe_made[k], "{check}: {name}");
        }
    }
}
