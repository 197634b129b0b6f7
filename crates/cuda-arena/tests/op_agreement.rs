//! The three statements of what ops do to memory agree op by op: the planner's
//! [`memplan_ir::OpTable`], the plan verifier's rules (`crates/planner/src/verify/rules.rs`,
//! asked through [`memplan_planner::verify_plan`] on a plan that claims the alias) and the
//! pattern check's [`memplan_cuda_arena::op_effects`] (with its statement of memplan's fused
//! kernels, [`memplan_cuda_arena::fused_effects`]). They stay separate code on purpose
//! (a checker must share no rule table with what it checks); this test is what keeps them
//! from drifting apart. A disagreement is a bug in one of them, to be settled from the ONNX
//! (or ONNX Runtime contrib) definition of the op.
//!
//! The ops asked about are the union of every op name any of the three files states (their
//! string literals of a capitalised name, with or without a lower-case domain such as
//! `com.microsoft.` or `memplan.`, underscores and digits included: `SoftmaxGrad_13`), read
//! from the sources as `crates/onnx/tests/op_knowledge.rs` does, and a few none knows;
//! `every_op_of_each_statement_is_asked_about` checks the scan misses none of them. For each op: may output 0 be written over input 0, 1 or 2 (three
//! inputs of one shape and dtype), and is it a view of all of input 0? Then directed cases
//! for the ops with parameters: Slice, Split, Concat, BatchNormalization's modes.

use memplan_cuda_arena::op_effects;
use memplan_ir::{
    Attr, Bindings, DType, Graph, GraphBuilder, MemorySemantics, NodeId, OpTable, TensorId,
    TensorKind,
};
use memplan_planner::{Alias, Plan, PlanOptions, plan_graph, verify_plan};

const SOURCES: [&str; 4] = [
    include_str!("../../ir/src/semantics.rs"),
    include_str!("../../planner/src/verify/rules.rs"),
    include_str!("../src/op_effects.rs"),
    include_str!("../src/fused_effects.rs"),
];

/// Every op name the three statements mention, and a few none knows.
fn ops() -> Vec<String> {
    let mut ops: Vec<String> = vec!["Frobnicate".into(), "com.example.Relu".into()];
    for text in SOURCES {
        for literal in text.split('"').skip(1).step_by(2) {
            // A domain (`com.microsoft.`, `memplan.`) is lower case; the op's own name
            // starts upper case and may hold digits and underscores (`SoftmaxGrad_13`).
            let name = literal.rsplit('.').next().unwrap_or(literal);
            let domain = &literal[..literal.len() - name.len()];
            let looks_like_op = name.starts_with(|c: char| c.is_ascii_uppercase())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && domain
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.');
            if looks_like_op {
                ops.push(literal.to_owned());
            }
        }
    }
    ops.sort();
    ops.dedup();
    ops
}

/// `in_i -> Conv -> x_i` for i in 0..3, then `y = op(x0, x1, x2)`, all f32[4, 8]; the plan
/// without aliasing, so that each question is one alias added to it.
struct Case {
    graph: Graph,
    plan: Plan,
    xs: [TensorId; 3],
    y: TensorId,
    node: NodeId,
}

fn case(op: &str, inputs: usize, attrs: &[(&str, Attr)], outputs: usize) -> Case {
    // `y` is declared [4, 8]; where the op's own shape rule makes other dims from these
    // inputs (Transpose: [8, 4]), it is declared as the op makes it, which the planner checks.
    let first = build_case(op, inputs, attrs, outputs, &[4, 8]);
    let made = first
        .shape_conflicts(&Bindings::new(), &[])
        .into_iter()
        .find_map(|c| match c.kind {
            memplan_ir::ConflictKind::Dims { made, .. } if first.tensor(c.output).name == "y" => {
                Some(made)
            }
            _ => None,
        });
    let graph = match made {
        Some(dims) => build_case(op, inputs, attrs, outputs, &dims),
        None => first,
    };
    plan_case(graph)
}

fn build_case(
    op: &str,
    inputs: usize,
    attrs: &[(&str, Attr)],
    outputs: usize,
    y_dims: &[u64],
) -> Graph {
    let mut b = GraphBuilder::new("agree");
    let mut xs = Vec::new();
    for i in 0..3 {
        let input = b.input(format!("in{i}"), DType::F32, [4, 8]);
        xs.push(b.op("Conv", &[input], DType::F32, [4, 8]));
    }
    let mut outs = vec![
        b.tensor(
            "y",
            DType::F32,
            y_dims
                .iter()
                .map(|&d| memplan_ir::Expr::constant(d as i64))
                .collect::<Vec<_>>(),
            TensorKind::Output,
        ),
    ];
    for k in 1..outputs {
        outs.push(b.tensor(format!("y{k}"), DType::F32, [8], TensorKind::Output));
    }
    let ins: Vec<Option<TensorId>> = xs[..inputs].iter().copied().map(Some).collect();
    b.node("node", op, &ins, &outs);
    for (name, value) in attrs {
        b.attr(name, value.clone());
    }
    b.build().unwrap_or_else(|e| panic!("{op}: {e}"))
}

fn plan_case(graph: Graph) -> Case {
    let node = graph.find_node("node").unwrap();
    let plan = plan_graph(&graph, &PlanOptions::default().without_aliasing())
        .unwrap_or_else(|e| panic!("{}: {e}", graph.node(node).op));
    // The three Conv nodes come first; their outputs are the op's candidate inputs.
    let xs: Vec<TensorId> = graph.nodes().iter().take(3).map(|n| n.outputs[0]).collect();
    let y = graph.find_tensor("y").unwrap();
    Case {
        graph,
        plan,
        xs: [xs[0], xs[1], xs[2]],
        y,
        node,
    }
}

impl Case {
    /// Whether the verifier accepts the plan with `y` claimed as `alias` (aliasing on).
    fn verifier_accepts(&self, alias: Alias) -> bool {
        let mut plan = self.plan.clone();
        plan.settings.views = true;
        plan.settings.inplace = true;
        let parent_at = plan.buffer(alias.of()).unwrap().offset;
        let offset = match alias {
            Alias::View { offset, .. } | Alias::Part { offset, .. } => offset,
            Alias::InPlace { .. } => 0,
        };
        let b = plan
            .buffers
            .iter_mut()
            .find(|b| b.tensor == self.y)
            .unwrap();
        b.alias = Some(alias);
        b.offset = parent_at + offset;
        verify_plan(&self.graph, &plan).is_ok()
    }

    fn semantics(&self) -> MemorySemantics {
        let node = self.graph.node(self.node);
        OpTable::default().semantics(&self.graph, node, &Bindings::new())[0].clone()
    }
}

#[test]
fn the_three_op_statements_agree_op_by_op() {
    let ops = ops();
    assert!(
        ops.len() > 150,
        "the source scan found only {} ops",
        ops.len()
    );
    let mut disagree: Vec<String> = Vec::new();
    let mut in_place = 0;
    let mut views = 0;
    // memplan's fused attention sizes its scratch from two attributes.
    let axes = [("kv_axis", Attr::Int(0)), ("dv_axis", Attr::Int(1))];
    for op in &ops {
        let attrs: &[(&str, Attr)] = if op == "memplan.Attention" {
            &axes
        } else {
            &[]
        };
        let c = case(op, 3, attrs, 1);
        let b = Bindings::new();
        let node = c.graph.node(c.node);
        let sem = c.semantics();
        for (i, &x) in c.xs.iter().enumerate() {
            let table = matches!(&sem, MemorySemantics::InPlace { inputs } if inputs.contains(&i));
            let verifier = c.verifier_accepts(Alias::InPlace { of: x });
            let effects = op_effects::in_place_allowed(&c.graph, node, i, &b);
            if table != verifier || verifier != effects {
                disagree.push(format!(
                    "{op}: write over input {i}: table {table}, verifier {verifier}, op effects {effects}"
                ));
            }
            in_place += usize::from(table);
        }
        let table = sem
            == MemorySemantics::View {
                input: 0,
                offset: 0,
            };
        let verifier = c.verifier_accepts(Alias::View {
            of: c.xs[0],
            offset: 0,
        });
        let effects = op_effects::view_selection(&c.graph, node, 0, &b)
            .is_some_and(|s| s.input == 0 && s.offset == 0 && s.bytes == 128);
        if table != verifier || verifier != effects {
            disagree.push(format!(
                "{op}: view of input 0: table {table}, verifier {verifier}, op effects {effects}"
            ));
        }
        views += usize::from(table);
    }
    assert!(
        disagree.is_empty(),
        "the op statements disagree:\n{}",
        disagree.join("\n")
    );
    // The questions had yes answers too, not only agreeing noes.
    assert!(
        in_place > 150 && views >= 5,
        "{in_place} in-place, {views} views"
    );
}

/// Issue 29, item 6: `memplan check` called QuickGelu in place a clobber, its op effects
/// knowing no such op.
#[test]
fn quick_gelu_in_place_is_legal_in_all_three() {
    for op in ["QuickGelu", "com.microsoft.QuickGelu"] {
        let c = case(op, 1, &[("alpha", Attr::Float(1.702))], 1);
        let node = c.graph.node(c.node);
        assert!(
            matches!(c.semantics(), MemorySemantics::InPlace { .. }),
            "{op}"
        );
        assert!(c.verifier_accepts(Alias::InPlace { of: c.xs[0] }), "{op}");
        assert!(
            op_effects::in_place_allowed(&c.graph, node, 0, &Bindings::new()),
            "{op}"
        );
    }
}

/// BatchNormalization: in place over its data in inference mode only; training mode is the
/// attribute (opset 14) or statistics among its outputs (opsets 9 to 13, issue 29 item 9).
#[test]
fn batch_normalization_modes_agree() {
    for (attrs, outputs, legal) in [
        (vec![], 1, true),
        (vec![("training_mode", Attr::Int(0))], 1, true),
        (vec![("training_mode", Attr::Int(1))], 1, false),
        (vec![("training_mode", Attr::Int(1))], 3, false),
        (vec![], 5, false),
    ] {
        let c = case("BatchNormalization", 3, &attrs, outputs);
        let node = c.graph.node(c.node);
        let table = matches!(c.semantics(), MemorySemantics::InPlace { .. });
        let verifier = c.verifier_accepts(Alias::InPlace { of: c.xs[0] });
        let effects = op_effects::in_place_allowed(&c.graph, node, 0, &Bindings::new());
        assert_eq!(
            (table, verifier, effects),
            (legal, legal, legal),
            "{attrs:?} with {outputs} outputs"
        );
    }
}

/// Views with parameters: every statement puts the view at the same offset, or none.
#[test]
fn slice_split_and_concat_places_agree() {
    // Slice rows 1..3 of x[4, 8] f32: a view 32 bytes in; a repeated axis: no view.
    for (axes, want) in [(vec![0i64], Some(32u64)), (vec![0, 0], None)] {
        let mut b = GraphBuilder::new("slice");
        let input = b.input("in", DType::F32, [4, 8]);
        let x = b.op("Conv", &[input], DType::F32, [4, 8]);
        let n = axes.len();
        let s = b.int_constant("s", &vec![1; n]);
        let e = b.int_constant("e", &vec![3; n]);
        let a = b.int_constant("a", &axes);
        let y = b.tensor("y", DType::F32, [2, 8], TensorKind::Output);
        b.node("node", "Slice", &[Some(x), Some(s), Some(e), Some(a)], &[y]);
        let graph = b.build_unchecked();
        agree_on_view(&graph, x, y, 0, want);
    }
    // Split x[4, 8] into rows [1, 3]: the second chunk 32 bytes in.
    let mut b = GraphBuilder::new("split");
    let input = b.input("in", DType::F32, [4, 8]);
    let x = b.op("Conv", &[input], DType::F32, [4, 8]);
    let p = b.tensor("p", DType::F32, [1, 8], TensorKind::Output);
    let q = b.tensor("q", DType::F32, [3, 8], TensorKind::Output);
    b.node("node", "Split", &[Some(x)], &[p, q]);
    b.attr("split", Attr::Ints(vec![1, 3]));
    let graph = b.build().unwrap();
    agree_on_view(&graph, x, q, 1, Some(32));
    // Concat([a, c], axis 1) of f32[1, 8] each: `c`'s slice is 32 bytes into the output.
    let mut b = GraphBuilder::new("concat");
    let input = b.input("in", DType::F32, [1, 8]);
    let a = b.op("Relu", &[input], DType::F32, [1, 8]);
    let c = b.op("Neg", &[input], DType::F32, [1, 8]);
    let y = b.tensor("y", DType::F32, [1, 16], TensorKind::Output);
    b.node("node", "Concat", &[Some(a), Some(c)], &[y]);
    b.attr("axis", Attr::Int(1));
    let graph = b.build().unwrap();
    let node = graph.node(graph.find_node("node").unwrap());
    let bindings = Bindings::new();
    assert_eq!(
        op_effects::concat_slot(&graph, node, 1, &bindings).map(|s| (s.offset, s.bytes, s.rows)),
        Some((32, 32, 1))
    );
    let mut plan = plan_graph(&graph, &PlanOptions::default().without_aliasing()).unwrap();
    plan.settings.concat_elision = true;
    // The output moved past everything else, so that its storage, now live from `c`'s step,
    // meets no other.
    let at = plan.arena_bytes.next_multiple_of(256);
    plan.buffers
        .iter_mut()
        .find(|b| b.tensor == y)
        .unwrap()
        .offset = at;
    plan.arena_bytes = at + 64;
    let accepted: Vec<u64> = [0u64, 16, 32]
        .into_iter()
        .filter(|&offset| {
            let mut m = plan.clone();
            let cb = m.buffers.iter_mut().find(|b| b.tensor == c).unwrap();
            cb.alias = Some(Alias::Part { of: y, offset });
            cb.offset = at + offset;
            verify_plan(&graph, &m).is_ok()
        })
        .collect();
    assert_eq!(accepted, vec![32]);
}

/// The table, the verifier and the op effects agree that output `j` (`y`) is a view of `x`
/// at `want` (or no view).
fn agree_on_view(graph: &Graph, x: TensorId, y: TensorId, j: usize, want: Option<u64>) {
    let node_id = graph.find_node("node").unwrap();
    let node = graph.node(node_id);
    let b = Bindings::new();
    let table = match &OpTable::default().semantics(graph, node, &b)[j] {
        MemorySemantics::View { input: 0, offset } => Some(*offset),
        _ => None,
    };
    let effects = op_effects::view_selection(graph, node, j, &b).map(|s| s.offset);
    assert_eq!((table, effects), (want, want), "{}", node.op);
    let plan = plan_graph(graph, &PlanOptions::default().without_aliasing());
    let Ok(mut plan) = plan else {
        // An invalid graph (the repeated axis): validation refuses it before any rule.
        assert!(want.is_none());
        return;
    };
    plan.settings.views = true;
    let at = plan.buffer(x).unwrap().offset;
    let mut accepted = Vec::new();
    for offset in [0, 32, 64] {
        let mut m = plan.clone();
        let yb = m.buffers.iter_mut().find(|b| b.tensor == y).unwrap();
        yb.alias = Some(Alias::View { of: x, offset });
        yb.offset = at + offset;
        if verify_plan(graph, &m).is_ok() {
            accepted.push(offset);
        }
    }
    assert_eq!(
        accepted,
        want.into_iter().collect::<Vec<_>>(),
        "{}",
        node.op
    );
}

/// The scan of the three sources asks about every op the planner's table states, and about
/// names that a narrower scan missed: underscores and digits (`SoftmaxGrad_13`), and a domain
/// other than `com.microsoft.` (memplan's fused optimizer steps).
#[test]
fn every_op_of_each_statement_is_asked_about() {
    let ops = ops();
    let table = OpTable::default();
    let missing: Vec<&str> = table
        .ops()
        .into_iter()
        .filter(|op| !ops.iter().any(|o| o == op))
        .collect();
    assert!(missing.is_empty(), "not asked about: {missing:?}");
    for op in [
        "com.microsoft.SoftmaxGrad_13",
        "com.microsoft.BiasGeluGrad_dX",
        "memplan.SGD",
        "memplan.Adam",
        "memplan.AdamUpdate",
        "QuickGelu",
        "com.microsoft.QuickGelu",
        "memplan.ConvAdd",
        "memplan.BiasAct",
        "memplan.SkipNorm",
        "memplan.Attention",
    ] {
        assert!(ops.iter().any(|o| o == op), "{op} is not asked about");
    }
    // No prose slipped in: every name is one identifier after its domain.
    assert!(ops.iter().all(|o| !o.contains(' ')), "{ops:?}");
}
