//! Graphs whose control-flow bodies update a value in place (issue 36, item 1), shared by the
//! planner's tests and the pattern check's: a tensor `w` read before and after an If, Loop
//! or Scan whose body, at some depth of nesting, runs an optimizer step or a gradient
//! accumulator on it (captured), or on a value the node hands its body (formal).
//!
//! ```text
//! wv = Reshape(w)            # a view of w, were w not updated
//! wt = Transpose(w)          # computed at load, were w a constant
//! r  = flow0(...)            # a body, at depth d, updates w
//! y  = Add(Relu(wv), Reshape(r))
//! u  = Relu(wt)
//! ```
//!
//! Every reader of `wv` and `wt` comes after the update in node order, so they must hold the
//! values `w` had before it: no view of `w`, nothing folded from it, the view and the
//! transpose run before the node in every schedule.

use memplan_ir::{Attr, DType, Graph, GraphBuilder, NodeId, TensorId, TensorKind};

/// A control-flow op.
#[derive(Clone, Copy, Debug)]
pub enum Flow {
    If,
    Loop,
    Scan,
}

/// What the innermost body does to the value.
#[derive(Clone, Copy, Debug)]
pub enum Updater {
    /// `memplan.SGD(w, g)`.
    Sgd,
    /// `memplan.Adam(w, g, m, v)` (the moments are body constants).
    Adam,
    /// `com.microsoft.InPlaceAccumulatorV2(w, g)`.
    Accumulate,
}

/// Which value the update reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `w`, captured by every body down to the update.
    Captured,
    /// The outermost node is a Loop carrying `w` as its loop-carried value; the update
    /// reaches that formal input of its body (at any depth: deeper bodies capture it).
    Formal,
}

/// One case: the graph and the ids the tests look at.
pub struct Case {
    pub graph: Graph,
    pub w: TensorId,
    pub wv: TensorId,
    pub wt: TensorId,
    pub view: NodeId,
    pub transpose: NodeId,
    pub flow: NodeId,
    pub label: String,
}

const DIMS: [i64; 2] = [4, 8];

/// Nests to try: depth 1 of each op, and deeper chains mixing them.
pub fn nests() -> Vec<Vec<Flow>> {
    use Flow::{If, Loop, Scan};
    vec![
        vec![If],
        vec![Loop],
        vec![Scan],
        vec![If, If],
        vec![Loop, If],
        vec![Scan, Loop],
        vec![If, Loop, If],
        vec![Loop, Scan, If, Loop],
    ]
}

/// Every case: each nest with each updater, `w` an input, state or weight; and the formal
/// target under a Loop.
pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for nest in nests() {
        for updater in [Updater::Sgd, Updater::Adam, Updater::Accumulate] {
            for kind in [TensorKind::Input, TensorKind::State, TensorKind::Weight] {
                out.push(case(&nest, updater, kind, Target::Captured));
            }
        }
    }
    for nest in [vec![Flow::Loop], vec![Flow::Loop, Flow::If]] {
        out.push(case(&nest, Updater::Sgd, TensorKind::Input, Target::Formal));
    }
    out
}

/// The case of `nest` (outermost first), `updater`, `w` of kind `kind`, updating `target`.
pub fn case(nest: &[Flow], updater: Updater, kind: TensorKind, target: Target) -> Case {
    let mut b = GraphBuilder::new("body_update");
    let w = b.tensor("w", DType::F32, DIMS, kind);
    b.input("g", DType::F32, DIMS);
    let shape = b.int_constant("shape", &[32]);
    let wv = b.op("Reshape", &[w, shape], DType::F32, [32]);
    let view = NodeId(0);
    let wt = b.op("Transpose", &[w], DType::F32, [8, 4]);
    b.attr("perm", Attr::Ints(vec![1, 0]));
    let transpose = NodeId(1);
    let (first, rest) = nest.split_first().expect("a nest has a level");
    let victim = match target {
        Target::Captured => "w",
        Target::Formal => "carried0",
    };
    let r = level(&mut b, *first, rest, updater, 0, victim);
    let flow = NodeId(2);
    let a = b.op("Relu", &[wv], DType::F32, [32]);
    let rv = b.op("Reshape", &[r, shape], DType::F32, [32]);
    let y = b.op("Add", &[a, rv], DType::F32, [32]);
    b.mark_output(y);
    let u = b.op("Relu", &[wt], DType::F32, [8, 4]);
    b.mark_output(u);
    let graph = b.build().unwrap_or_else(|e| panic!("{nest:?}: {e}"));
    Case {
        graph,
        w,
        wv,
        wt,
        view,
        transpose,
        flow,
        label: format!("{nest:?} {updater:?} {kind:?} {target:?}"),
    }
}

/// The update of `w` by `updater` with gradient `g`, in `b`.
fn update(b: &mut GraphBuilder, updater: Updater, w: TensorId, g: TensorId, depth: usize) {
    match updater {
        Updater::Sgd => {
            b.node(
                format!("sgd{depth}"),
                "memplan.SGD",
                &[Some(w), Some(g)],
                &[],
            );
        }
        Updater::Adam => {
            let m = b.weight(format!("m{depth}"), DType::F32, DIMS);
            let v = b.weight(format!("v{depth}"), DType::F32, DIMS);
            b.node(
                format!("adam{depth}"),
                "memplan.Adam",
                &[Some(w), Some(g), Some(m), Some(v)],
                &[],
            );
        }
        Updater::Accumulate => {
            let flag = b.tensor(
                format!("flag{depth}"),
                DType::Bool,
                [1],
                TensorKind::Activation,
            );
            b.node(
                format!("acc{depth}"),
                "com.microsoft.InPlaceAccumulatorV2",
                &[Some(w), Some(g)],
                &[flag],
            );
        }
    }
}

/// Adds to `b` a node of kind `flow` whose body holds the `rest` of the nest and, innermost,
/// the update of the value named `victim` (captured by every body down to it, unless it is
/// this body's own formal input); `g` is a tensor of `b` by name. Returns the node's
/// `f32[4, 8]` result.
fn level(
    b: &mut GraphBuilder,
    flow: Flow,
    rest: &[Flow],
    updater: Updater,
    depth: usize,
    victim: &str,
) -> TensorId {
    let g_outer = b.graph().find_tensor("g").expect("g is in every scope");
    let mut body = GraphBuilder::new(format!("body{depth}"));
    // The formal inputs first, in the op's order.
    let formal = match flow {
        Flow::If => Vec::new(),
        Flow::Loop => vec![
            body.input(format!("iter{depth}"), DType::I64, [0i64; 0]),
            body.input(format!("cin{depth}"), DType::Bool, [0i64; 0]),
            body.input(format!("carried{depth}"), DType::F32, DIMS),
        ],
        Flow::Scan => vec![
            body.input(format!("state{depth}"), DType::F32, DIMS),
            body.input(format!("slice{depth}"), DType::F32, DIMS),
        ],
    };
    let g = body.input("g", DType::F32, DIMS);
    let target = match body.graph().find_tensor(victim) {
        Some(own) => own,
        None => body.input(victim, DType::F32, DIMS),
    };
    let inner = match rest.split_first() {
        Some((next, more)) => level(&mut body, *next, more, updater, depth + 1, victim),
        None => {
            update(&mut body, updater, target, g, depth);
            body.op("Neg", &[g], DType::F32, DIMS)
        }
    };
    let name = format!("flow{depth}");
    let out = b.tensor(
        format!("r{depth}"),
        DType::F32,
        DIMS,
        TensorKind::Activation,
    );
    match flow {
        Flow::If => {
            let r = body.op("Add", &[inner, g], DType::F32, DIMS);
            body.mark_output(r);
            let c = b.weight(format!("c{depth}"), DType::Bool, [0i64; 0]);
            b.node(name, "If", &[Some(c)], &[out]);
            b.body("then_branch", body.build_unchecked());
            let mut other = GraphBuilder::new(format!("else{depth}"));
            let og = other.input("g", DType::F32, DIMS);
            let r = other.op("Neg", &[og], DType::F32, DIMS);
            other.mark_output(r);
            b.body("else_branch", other.build_unchecked());
        }
        Flow::Loop => {
            let cout = body.op("Identity", &[formal[1]], DType::Bool, [0i64; 0]);
            body.mark_output(cout);
            let v = body.op("Add", &[formal[2], inner], DType::F32, DIMS);
            body.mark_output(v);
            let m = b.int_constant(format!("trips{depth}"), &[2]);
            let c = b.weight(format!("c{depth}"), DType::Bool, [0i64; 0]);
            // The outermost Loop of a formal case carries `w` itself.
            let init = if victim == format!("carried{depth}") {
                b.graph().find_tensor("w").expect("w is the outer graph's")
            } else {
                g_outer
            };
            b.node(name, "Loop", &[Some(m), Some(c), Some(init)], &[out]);
            b.body("body", body.build_unchecked());
        }
        Flow::Scan => {
            let s = body.op("Add", &[formal[0], inner], DType::F32, DIMS);
            body.mark_output(s);
            let xs = b.weight(format!("xs{depth}"), DType::F32, [2, 4, 8]);
            b.node(name, "Scan", &[Some(g_outer), Some(xs)], &[out]);
            b.attr("num_scan_inputs", Attr::Int(1));
            b.body("body", body.build_unchecked());
        }
    }
    out
}

/// `schedule` with `node` moved to right after `anchor`.
pub fn moved_after(schedule: &[NodeId], node: NodeId, anchor: NodeId) -> Vec<NodeId> {
    let mut order: Vec<NodeId> = schedule.iter().copied().filter(|&n| n != node).collect();
    let at = order
        .iter()
        .position(|&n| n == anchor)
        .map_or(order.len(), |p| p + 1);
    order.insert(at, node);
    order
}
