//! Declared shapes are checked against the op's own rule at the binding planned, and across
//! the range under `--bound` (issue 36, item 11); a pooling or convolution window that does
//! not fit at that binding is refused, as PyTorch refuses it (item 13), not planned as an
//! empty tensor.

use memplan_ir::{Attr, Bindings, ConflictKind, DType, Expr, Graph, GraphBuilder, GraphError};
use memplan_planner::{PlanError, PlanOptions, plan_graph};

/// `y = Slice(a[1, n], starts=-2, ends=1000)` declared `[1, 2]`: right for `n >= 2` only.
fn slice_graph() -> Graph {
    let mut b = GraphBuilder::new("slice");
    let n = b.symbol("n");
    let a = b.input("a", DType::F32, vec![Expr::constant(1), Expr::symbol(n)]);
    let starts = b.int_constant("starts", &[-2]);
    let ends = b.int_constant("ends", &[1000]);
    let axes = b.int_constant("axes", &[1]);
    let y = b.op("Slice", &[a, starts, ends, axes], DType::F32, [1, 2]);
    let z = b.op("Relu", &[y], DType::F32, [1, 2]);
    b.mark_output(z);
    b.build().expect("symbolically, the declaration may hold")
}

fn at(g: &Graph, values: &[(&str, u64)]) -> PlanOptions {
    PlanOptions::default().with_bindings(g.bind(values).unwrap())
}

#[test]
fn a_slice_declared_wrongly_at_the_binding_is_refused() {
    let g = slice_graph();
    // Elements n-2 .. min(n, 1000): two of them for 2 <= n <= 1000 (ONNX clamps both ends).
    for n in [2, 3, 999, 1000] {
        plan_graph(&g, &at(&g, &[("n", n)])).unwrap_or_else(|e| panic!("n={n}: {e}"));
    }
    for (n, made) in [(0, 0), (1, 1), (1001, 1), (1002, 0), (5000, 0)] {
        let err = plan_graph(&g, &at(&g, &[("n", n)])).unwrap_err();
        assert!(
            matches!(&err, PlanError::DeclaredShape { node, .. } if g.nodes()[*node].op == "Slice"),
            "{err}"
        );
        // Rendered with the graph planned, it names the node as the graph does.
        let named = err.with_graph(&g).to_string();
        assert!(
            named.starts_with("node `n0_Slice`: output `t4_Slice`"),
            "{named}"
        );
        // The reason is data: the op, the shapes and the binding, not words to search.
        let PlanError::DeclaredShape { problem, .. } = &err else {
            unreachable!()
        };
        assert_eq!(problem.op, "Slice");
        assert_eq!(
            problem.conflict,
            ConflictKind::Dims {
                declared: vec![1, 2],
                made: vec![1, made]
            }
        );
        assert_eq!(problem.at, [("n".to_owned(), n)]);
        let text = err.to_string();
        assert!(
            text.contains(&format!("declared [1, 2] but the op makes [1, {made}]")),
            "{text}"
        );
        assert!(text.contains(&format!("n={n}")), "{text}");
    }
}

/// Planned at the bound of `k`, the slice's declaration holds at the bound but not below it:
/// `--bound` checks the range.
#[test]
fn a_declaration_that_fails_below_the_bound_is_refused() {
    let mut b = GraphBuilder::new("bounded_slice");
    let k = b.symbol("k");
    let x = b.input("x", DType::F32, vec![Expr::symbol(k)]);
    let starts = b.int_constant("starts", &[-2]);
    let ends = b.int_constant("ends", &[1000]);
    let y = b.op("Slice", &[x, starts, ends], DType::F32, [2]);
    b.mark_output(y);
    let mut g = b.build().unwrap();
    assert!(g.set_symbol_bound(k, Expr::constant(8)));
    let planned = PlanOptions::default().with_bindings(Bindings::new().with(k, 8));
    plan_graph(&g, &planned).expect("at k = 8 the declaration holds");
    let bounded = planned.with_bounded(vec![k]);
    let err = plan_graph(&g, &bounded).unwrap_err().to_string();
    assert!(err.contains("at k=0") || err.contains("at k=1"), "{err}");
    assert!(err.contains("declared [2]"), "{err}");
}

/// Dims declared otherwise than the op makes, for the ops the rule knows.
#[test]
fn wrong_declarations_of_each_op_are_refused_and_right_ones_plan() {
    type Build = fn(&mut GraphBuilder, bool) -> ();
    let cases: Vec<(&str, Build)> = vec![
        ("Add", |b, bad| {
            let x = b.input("x", DType::F32, [4, 1]);
            let y = b.input("y", DType::F32, [1, 8]);
            let z = b.op(
                "Add",
                &[x, y],
                DType::F32,
                if bad { [4, 4] } else { [4, 8] },
            );
            b.mark_output(z);
        }),
        ("Concat", |b, bad| {
            let x = b.input("x", DType::F32, [2, 3]);
            let y = b.input("y", DType::F32, [2, 5]);
            let z = b.op(
                "Concat",
                &[x, y],
                DType::F32,
                if bad { [2, 7] } else { [2, 8] },
            );
            b.attr("axis", Attr::Int(1));
            b.mark_output(z);
        }),
        ("Transpose", |b, bad| {
            let x = b.input("x", DType::F32, [2, 3, 4]);
            let z = b.op(
                "Transpose",
                &[x],
                DType::F32,
                if bad { [3, 2, 4] } else { [4, 2, 3] },
            );
            b.attr("perm", Attr::Ints(vec![2, 0, 1]));
            b.mark_output(z);
        }),
        ("Split", |b, bad| {
            let x = b.input("x", DType::F32, [6, 4]);
            let y0 = b.tensor("y0", DType::F32, [2, 4], memplan_ir::TensorKind::Output);
            let y1 = b.tensor(
                "y1",
                DType::F32,
                if bad { [3, 4] } else { [4, 4] },
                memplan_ir::TensorKind::Output,
            );
            let split = b.int_constant("split", &[2, 4]);
            b.node("split", "Split", &[Some(x), Some(split)], &[y0, y1]);
            b.attr("axis", Attr::Int(0));
        }),
        ("Reshape", |b, bad| {
            let x = b.input("x", DType::F32, [6, 4]);
            let shape = b.int_constant("shape", &[-1]);
            let y = b.op(
                "Reshape",
                &[x, shape],
                DType::F32,
                if bad { [20] } else { [24] },
            );
            b.mark_output(y);
        }),
        ("Slice step -2", |b, bad| {
            let x = b.input("x", DType::F32, [9]);
            let starts = b.int_constant("starts", &[-1]);
            let ends = b.int_constant("ends", &[i64::MIN]);
            let axes = b.int_constant("axes", &[0]);
            let steps = b.int_constant("steps", &[-2]);
            let y = b.op(
                "Slice",
                &[x, starts, ends, axes, steps],
                DType::F32,
                if bad { [4] } else { [5] },
            );
            b.mark_output(y);
        }),
    ];
    for (name, build) in cases {
        for bad in [false, true] {
            let mut b = GraphBuilder::new(name);
            build(&mut b, bad);
            let g = b.build_unchecked();
            let got = plan_graph(&g, &PlanOptions::default());
            match (bad, got) {
                (false, Ok(_)) => {}
                (true, Err(PlanError::DeclaredShape { .. } | PlanError::Invalid(_))) => {}
                (_, other) => panic!("{name} bad={bad}: {:?}", other.map(|p| p.arena_bytes)),
            }
        }
    }
}

/// A MaxPool (and a convolution) whose window does not fit the input is refused at that
/// binding, as PyTorch refuses it ("Output size is too small"), instead of planned with an
/// empty output.
#[test]
fn a_window_that_does_not_fit_is_refused() {
    for op in ["MaxPool", "AveragePool", "Conv"] {
        let mut b = GraphBuilder::new("pool");
        let h = b.symbol("h");
        let hx = Expr::symbol(h);
        let x = b.input(
            "x",
            DType::F32,
            vec![Expr::constant(1), Expr::constant(2), hx.clone(), hx.clone()],
        );
        let mut inputs = vec![x];
        if op == "Conv" {
            inputs.push(b.weight("w", DType::F32, [2, 2, 3, 3]));
        }
        // floor((h - 3) / 2) + 1 = floor((h - 1) / 2) positions: a symbol of its own in an
        // import; declared here as what it is for h >= 3.
        let out = b.symbol("o");
        let y = b.op(
            op,
            &inputs,
            DType::F32,
            vec![
                Expr::constant(1),
                Expr::constant(2),
                Expr::symbol(out),
                Expr::symbol(out),
            ],
        );
        if op != "Conv" {
            b.attr("kernel_shape", Attr::Ints(vec![3, 3]));
        }
        b.attr("strides", Attr::Ints(vec![2, 2]));
        b.mark_output(y);
        let g = b.build().unwrap();
        let fits = at(&g, &[("h", 7), ("o", 3)]);
        plan_graph(&g, &fits).unwrap_or_else(|e| panic!("{op}: {e}"));
        // h = 2: the 3-wide window does not fit (PyTorch: output size too small); the
        // declaration (o = 0) would plan an empty output.
        let err = plan_graph(&g, &at(&g, &[("h", 2), ("o", 0)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("less than one element wide"), "{op}: {err}");
    }
}

/// The verifier states it too: a plan of the slice made at `n = 2`, claimed for `n = 1` (its
/// recorded binding edited), has a declaration its op contradicts there.
#[test]
fn the_verifier_refuses_a_plan_at_a_binding_the_declarations_contradict() {
    let g = slice_graph();
    let plan = plan_graph(&g, &at(&g, &[("n", 2)])).unwrap();
    memplan_planner::verify_plan(&g, &plan).unwrap();
    let mut edited = plan.clone();
    edited.settings.bindings = vec![("n".to_owned(), 1)];
    let problems = memplan_planner::verify_plan(&g, &edited).unwrap_err().0;
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, memplan_planner::PlanViolation::DeclaredShape { .. })),
        "{problems:?}"
    );
}
