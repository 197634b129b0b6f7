//! Proof that the plan verifier works: valid plans of real graphs are mutated, unsafely and
//! safely, and every unsafe mutant must be rejected, every safe one accepted.
//!
//! Unsafe by construction (each breaks what some tensor's bytes hold at some step):
//! - `overlap`: a whole storage moved onto another storage live at the same step;
//! - `false-view`: an output of an op that computes new values (Conv, MatMul, Transpose,
//!   ...) claimed as a view of an input it reads;
//! - `false-inplace`: an output of an op that is not element-wise claimed as written over an
//!   input of the same size;
//! - `short-lifetime`: a buffer's last step moved before its last reader;
//! - `moved-view`: a view moved by one element inside its parent (it would read other
//!   elements).
//!
//! Safe by construction: a storage moved past the end of the arena (the arena grown to
//! hold it); a view with no children turned into a storage of its own there (a copy
//! instead of a view); slack added to the arena.
//!
//! Run with `--nocapture` to see the counts.

use std::path::PathBuf;

use memplan_ir::{Attr, DType, Graph, GraphBuilder, TensorId, TensorKind};
use memplan_planner::{AliasKind, Plan, PlanOptions, ScheduleMode, plan_graph, verify_plan};

const GRAPHS: &[&str] = &[
    "light_squeezenet_b1",
    "silero_vad_16k_b1",
    "ddddocr_crnn_b1",
    "magika_v3_3_b1",
    "smp_unet_resnet34_b1",
    "tv_mobilenet_v3_large_b1",
];

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

fn load(name: &str) -> Graph {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/graphs/json")
        .join(format!("{name}.json"));
    Graph::load_json(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Partial views: a Slice of two rows and a Split into one row and three, of one tensor,
/// then an in-place Relu over a whole Reshape view.
fn partial_views() -> Graph {
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

fn ok(graph: &Graph, plan: &Plan) -> bool {
    verify_plan(graph, &Default::default(), plan).is_ok()
}

fn index(plan: &Plan, t: TensorId) -> Option<usize> {
    plan.buffers.iter().position(|b| b.tensor == t)
}

/// The buffers of the storage rooted at buffer `r` (following parents).
fn storage_of(plan: &Plan, r: usize) -> Vec<usize> {
    let root_of = |mut i: usize| {
        for _ in 0..plan.buffers.len() {
            match plan.buffers[i].alias_of.and_then(|p| index(plan, p)) {
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
    let first = members
        .iter()
        .map(|&m| plan.buffers[m].first)
        .min()
        .unwrap_or(0);
    let last = members
        .iter()
        .map(|&m| plan.buffers[m].last)
        .max()
        .unwrap_or(0);
    (first, last)
}

#[derive(Default)]
struct Counts {
    unsafe_made: [usize; 5],
    unsafe_rejected: [usize; 5],
    safe_made: [usize; 3],
    safe_accepted: [usize; 3],
}

const UNSAFE: [&str; 5] = [
    "overlap",
    "false-view",
    "false-inplace",
    "short-lifetime",
    "moved-view",
];
const SAFE: [&str; 3] = ["storage-moved-past-end", "view-made-a-copy", "arena-slack"];

/// At most this many mutants of each kind per plan, spread over the buffers.
const PER_KIND: usize = 40;

fn mutate(graph: &Graph, plan: &Plan, c: &mut Counts) {
    let producers = graph.producers();
    let n = plan.buffers.len();
    let stride = (n / PER_KIND).max(1);
    let unsafe_check = |kind: usize, m: Plan, c: &mut Counts| {
        c.unsafe_made[kind] += 1;
        if !ok(graph, &m) {
            c.unsafe_rejected[kind] += 1;
        } else {
            eprintln!("{}: accepted unsafe {} mutant", graph.name, UNSAFE[kind]);
        }
    };
    let roots: Vec<usize> = (0..n)
        .filter(|&i| plan.buffers[i].alias.is_none())
        .collect();
    for (k, &r) in roots.iter().enumerate().step_by(stride) {
        let members = storage_of(plan, r);
        let (f, l) = span(plan, &members);
        // overlap: onto the next root live at a common step, at a different offset.
        if let Some(&o) = roots.iter().skip(k + 1).find(|&&o| {
            let (of, ol) = span(plan, &storage_of(plan, o));
            of <= l && f <= ol && plan.buffers[o].offset != plan.buffers[r].offset
        }) {
            let mut m = plan.clone();
            let to = plan.buffers[o].offset;
            let from = plan.buffers[r].offset;
            for &i in &members {
                m.buffers[i].offset = m.buffers[i].offset - from + to;
            }
            unsafe_check(0, m, c);
        }
        // safe: the whole storage moved past the end.
        let mut m = plan.clone();
        let end = plan.arena_bytes.next_multiple_of(plan.alignment.max(1));
        let from = plan.buffers[r].offset;
        for &i in &members {
            m.buffers[i].offset = m.buffers[i].offset - from + end;
        }
        m.arena_bytes = end + plan.buffers[r].bytes;
        c.safe_made[0] += 1;
        c.safe_accepted[0] += usize::from(ok(graph, &m));
    }
    for i in (0..n).step_by(stride) {
        let b = &plan.buffers[i];
        let Some(node) = producers[b.tensor].map(|p| &graph.nodes[p]) else {
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
            let mut m = plan.clone();
            m.buffers[i].alias_of = Some(plan.buffers[x].tensor);
            m.buffers[i].alias = Some(AliasKind::View);
            m.buffers[i].offset = plan.buffers[x].offset;
            unsafe_check(1, m, c);
            if plan.buffers[x].bytes == b.bytes {
                let mut m = plan.clone();
                m.buffers[i].alias_of = Some(plan.buffers[x].tensor);
                m.buffers[i].alias = Some(AliasKind::InPlace);
                m.buffers[i].offset = plan.buffers[x].offset;
                unsafe_check(2, m, c);
            }
        }
        // short-lifetime: a tensor read after the step it is produced.
        if b.last > b.first && graph.tensors[b.tensor].kind != TensorKind::Output {
            let mut m = plan.clone();
            m.buffers[i].last -= 1;
            unsafe_check(3, m, c);
        }
        if b.alias == Some(AliasKind::View) {
            // moved-view: one element further into its parent, still inside the root.
            let elem = graph.tensors[b.tensor]
                .dtype
                .bits()
                .unwrap_or(8)
                .div_ceil(8);
            let parent = b.alias_of.and_then(|p| index(plan, p)).unwrap();
            let pb = &plan.buffers[parent];
            if b.offset + u64::from(elem) + b.bytes <= pb.offset + pb.bytes {
                let mut m = plan.clone();
                m.buffers[i].offset += u64::from(elem);
                unsafe_check(4, m, c);
            }
            // safe: a childless view becomes a copy at the arena's end.
            if !plan.buffers.iter().any(|x| x.alias_of == Some(b.tensor)) {
                let mut m = plan.clone();
                let end = plan.arena_bytes.next_multiple_of(plan.alignment.max(1));
                m.buffers[i].alias_of = None;
                m.buffers[i].alias = None;
                m.buffers[i].offset = end;
                m.arena_bytes = end + b.bytes;
                c.safe_made[1] += 1;
                c.safe_accepted[1] += usize::from(ok(graph, &m));
            }
        }
    }
    let mut m = plan.clone();
    m.arena_bytes += plan.alignment.max(1);
    c.safe_made[2] += 1;
    c.safe_accepted[2] += usize::from(ok(graph, &m));
}

#[test]
fn the_verifier_rejects_every_unsafe_mutant_and_accepts_every_safe_one() {
    let mut c = Counts::default();
    let graphs = GRAPHS
        .iter()
        .map(|name| load(name))
        .chain([partial_views()]);
    for graph in graphs {
        let name = graph.name.clone();
        for options in [
            PlanOptions::default(),
            PlanOptions {
                schedule: ScheduleMode::Memory,
                alignment: 64,
                ..PlanOptions::default()
            },
            PlanOptions {
                alignment: 1,
                ..PlanOptions::default().without_aliasing()
            },
        ] {
            let plan = plan_graph(&graph, &options).unwrap();
            assert!(ok(&graph, &plan), "{name}: the unmutated plan must pass");
            mutate(&graph, &plan, &mut c);
        }
    }
    for (k, name) in UNSAFE.iter().enumerate() {
        eprintln!(
            "unsafe {name:>16}: {} of {} rejected",
            c.unsafe_rejected[k], c.unsafe_made[k]
        );
    }
    for (k, name) in SAFE.iter().enumerate() {
        eprintln!(
            "safe {name:>24}: {} of {} accepted",
            c.safe_accepted[k], c.safe_made[k]
        );
    }
    for (k, name) in UNSAFE.iter().enumerate() {
        assert!(c.unsafe_made[k] > 0, "no {name} mutant was made");
        assert_eq!(c.unsafe_rejected[k], c.unsafe_made[k], "{name}");
    }
    for (k, name) in SAFE.iter().enumerate() {
        assert!(c.safe_made[k] > 0, "no {name} mutant was made");
        assert_eq!(c.safe_accepted[k], c.safe_made[k], "{name}");
    }
}
