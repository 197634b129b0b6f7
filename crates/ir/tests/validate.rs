//! Validation: random valid graphs validate and round-trip through JSON; each kind of
//! corruption is caught with the error that names it.

use memplan_ir::{
    Attr, DType, Expr, Graph, GraphBuilder, GraphError, LoadError, NodeId, TensorId, TensorKind,
    ValidationError,
};
use proptest::prelude::*;

/// A random valid graph: `n` nodes in order, each reading one or two earlier tensors (or
/// the input or a weight) and writing one or two new ones; the last output is the graph's.
fn random_graph(seed: &[(u8, u8, u8, u8)]) -> Graph {
    let mut b = GraphBuilder::new("random");
    let batch = Expr::symbol(b.symbol("batch"));
    let x = b.input("x", DType::F32, [batch.clone(), Expr::constant(16)]);
    let w = b.weight("w", DType::F16, [16, 16]);
    let mut live: Vec<TensorId> = vec![x, w];
    for (i, &(a, c, dt, nout)) in seed.iter().enumerate() {
        let first = live[a as usize % live.len()];
        let second = live[c as usize % live.len()];
        let dtype = [DType::F32, DType::BF16, DType::I4, DType::Bool][dt as usize % 4];
        let mut outs = Vec::new();
        for k in 0..=(nout % 2) {
            let shape = [batch.clone(), Expr::constant(1 + (i as i64 + k as i64) % 7)];
            outs.push(b.tensor(format!("t{i}_{k}"), dtype, shape, TensorKind::Activation));
        }
        let inputs = if a % 3 == 0 {
            vec![Some(first)]
        } else {
            vec![Some(first), None, Some(second)]
        };
        b.node(
            format!("n{i}"),
            // Ops of a domain of their own: this graph's shapes follow no op's definition
            // (validation checks those of the ONNX ops it knows).
            if nout % 2 == 0 {
                "test.Mix"
            } else {
                "test.Fork"
            },
            &inputs,
            &outs,
        );
        b.attr("axis", Attr::Int(i64::from(a % 2)))
            .attr("alpha", Attr::Float(f64::from(c) / 7.0));
        live.extend(outs);
    }
    let last = *live.last().unwrap_or(&x);
    if last != x && last != w {
        b.mark_output(last);
    }
    b.build_unchecked()
}

fn errors(g: &Graph) -> Vec<ValidationError> {
    g.validate().err().map(|e| e.errors).unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_graphs_validate_and_round_trip(seed in prop::collection::vec(any::<(u8, u8, u8, u8)>(), 1..40)) {
        let g = random_graph(&seed);
        prop_assert_eq!(errors(&g), vec![]);
        let text = g.to_json();
        let back = Graph::from_json(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.to_json(), text);
        prop_assert_eq!(&back.tensors(), &g.tensors());
        prop_assert_eq!(&back.nodes(), &g.nodes());
    }

    #[test]
    fn a_second_producer_is_caught(seed in prop::collection::vec(any::<(u8, u8, u8, u8)>(), 2..30), pick in any::<usize>()) {
        let mut g = random_graph(&seed);
        let n = g.nodes().len();
        let victim_node = pick % n;
        // Make the victim also write an output of an earlier node.
        let earlier = g.nodes().as_slice()[pick % victim_node.max(1)].outputs[0];
        if victim_node == 0 { return Ok(()); }
        g.nodes_mut().raw_mut()[victim_node].outputs.push(earlier);
        let found = errors(&g);
        prop_assert!(found.iter().any(|e| matches!(e, ValidationError::TwoProducers { tensor, .. } if *tensor == earlier)), "{found:?}");
    }

    #[test]
    fn reordering_nodes_is_caught(seed in prop::collection::vec(any::<(u8, u8, u8, u8)>(), 2..30)) {
        let mut g = random_graph(&seed);
        // Find a node that reads another node's output and move it first.
        let producers = g.producers();
        let reader = g.nodes().iter().position(|n| n.present_inputs().any(|t| producers[t].is_some()));
        let Some(reader) = reader else { return Ok(()) };
        g.nodes_mut().raw_mut()[..=reader].rotate_right(1);
        let found = errors(&g);
        prop_assert!(found.iter().any(|e| matches!(e, ValidationError::ReadBeforeProduced { .. })), "{found:?}");
    }

    #[test]
    fn a_dangling_name_is_caught(seed in prop::collection::vec(any::<(u8, u8, u8, u8)>(), 1..30), pick in any::<usize>()) {
        let g = random_graph(&seed);
        let node = &g.nodes().as_slice()[pick % g.nodes().len()];
        let input = node.present_inputs().next().map(|t| g.tensors()[t].name.clone()).unwrap_or_default();
        let from = format!("\"name\":\"{}\",\"op\":\"{}\",\"inputs\":[\"{}\"", node.name, node.op, input);
        let to = format!("\"name\":\"{}\",\"op\":\"{}\",\"inputs\":[\"ghost\"", node.name, node.op);
        let text = g.to_json().replacen(&from, &to, 1);
        prop_assume!(text != g.to_json());
        match Graph::from_json(&text) {
            Err(LoadError::Invalid(e)) => {
                let named = e.errors.iter().any(|e| matches!(e,
                    ValidationError::Dangling { node: n, tensor, role: "reads" } if *n == node.name && tensor == "ghost"));
                prop_assert!(named, "{:?}", e);
            }
            other => prop_assert!(false, "expected a dangling-name error, got {other:?}"),
        }
    }
}

fn chain() -> GraphBuilder {
    let mut b = GraphBuilder::new("chain");
    let x = b.input("x", DType::F32, [4, 4]);
    let y = b.op("Relu", &[x], DType::F32, [4, 4]);
    let z = b.op("Neg", &[y], DType::F32, [4, 4]);
    b.mark_output(z);
    b
}

#[test]
fn a_valid_chain_validates() {
    assert!(chain().build().is_ok());
}

#[test]
fn a_cycle_is_named() {
    let mut g = chain().build_unchecked();
    // n0 now reads n1's output: n0 -> n1 -> n0.
    let z = g.nodes().as_slice()[1].outputs[0];
    g.nodes_mut().raw_mut()[0].inputs.push(Some(z));
    let found = errors(&g);
    assert!(
        found.iter().any(|e| matches!(e, ValidationError::Cycle { nodes } if nodes.len() == 2 && nodes.contains(&NodeId(0)))),
        "{found:?}"
    );
    assert!(found.iter().any(
        |e| matches!(e, ValidationError::ReadBeforeProduced { node, .. } if *node == NodeId(0))
    ));
    // The errors carry the graph, so they name its nodes; one alone names ids.
    let text = g.validate().unwrap_err().to_string();
    assert!(
        text.contains("cycle through nodes `n0_Relu` -> `n1_Neg`")
            || text.contains("cycle through nodes `n1_Neg` -> `n0_Relu`"),
        "{text}"
    );
    let cycle = found
        .iter()
        .find(|e| matches!(e, ValidationError::Cycle { .. }))
        .unwrap();
    assert!(cycle.to_string().contains("`n0`"), "{cycle}");
    assert_eq!(cycle.with_graph(&g).to_string(), cycle_named(&text));
}

/// The cycle line of a rendered error list.
fn cycle_named(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.contains("cycle"))
        .unwrap_or_default();
    line.trim_start_matches("  - ").to_owned()
}

#[test]
fn outputs_never_produced_and_written_inputs_are_named() {
    let mut b = chain();
    let lonely = b.tensor("lonely", DType::F32, [1], TensorKind::Output);
    let _ = lonely;
    let mut g = b.build_unchecked();
    let x = g.find_tensor("x").unwrap();
    g.nodes_mut().raw_mut()[1].outputs.push(x);
    let found = errors(&g);
    assert!(found.contains(&ValidationError::NeverProduced {
        tensor: g.find_tensor("lonely").unwrap(),
        kind: TensorKind::Output
    }));
    assert!(
        found
            .iter()
            .any(|e| matches!(e, ValidationError::ProducesInput { tensor, .. } if *tensor == x))
    );
}

/// `build` and `from_json` return no graph on failure: their errors carry the graph, so they
/// print its names.
#[test]
fn errors_of_a_graph_the_caller_never_held_name_its_entities() {
    let mut b = chain();
    b.tensor("lonely", DType::F32, [1], TensorKind::Output);
    let err = b.build().unwrap_err();
    assert!(err.graph.is_some());
    assert!(
        err.to_string()
            .contains("output `lonely` is never produced by any node"),
        "{err}"
    );
}

#[test]
fn sizes_that_overflow_are_errors() {
    let mut b = chain();
    b.tensor("huge", DType::F64, [1 << 40, 1 << 40], TensorKind::Weight);
    b.tensor("negative", DType::F32, [3, -2], TensorKind::Weight);
    let g = b.build_unchecked();
    let found = errors(&g);
    assert!(found.contains(&ValidationError::SizeOverflow {
        tensor: g.find_tensor("huge").unwrap()
    }));
    assert!(found.contains(&ValidationError::NegativeDim {
        tensor: g.find_tensor("negative").unwrap(),
        dim: 1,
        value: -2
    }));
}

#[test]
fn json_errors_name_what_is_wrong() {
    let cases: &[(&str, &str)] = &[
        ("[1, 2]", "top level must be an object"),
        (
            r#"{"name":"g","tensors":[],"nodes":{}}"#,
            "`nodes` must be a list",
        ),
        (
            r#"{"name":"g","tensors":[{"name":"a","dtype":"f33","shape":[1],"kind":"input"}],"nodes":[]}"#,
            "unknown dtype `f33`",
        ),
        (
            r#"{"name":"g","tensors":[{"name":"a","dtype":"f32","shape":[2],"bytes":9,"kind":"input"}],"nodes":[]}"#,
            "bytes is 9 but dtype and shape give 8",
        ),
        (
            r#"{"name":"g","tensors":[{"name":"a","dtype":"f32","shape":["heads"],"kind":"input"}],"nodes":[]}"#,
            "unknown symbol `heads`",
        ),
        (
            r#"{"name":"g","tensors":[{"name":"a","dtype":"f32","shape":[1.5],"kind":"input"}],"nodes":[]}"#,
            "dimension 0 (1.5) is not an integer",
        ),
        (
            r#"{"name":"g","tensors":[{"name":"a","dtype":"f32","shape":[4294967296,4294967296],"kind":"input"}],"nodes":[]}"#,
            // Found by validation of the graph read, which the errors carry: by name.
            "tensor `a`: size overflows",
        ),
        (
            r#"{"name":"g","tensors":[{"name":"a","dtype":"f32","shape":[1],"kind":"input"},{"name":"a","dtype":"f32","shape":[1],"kind":"input"}],"nodes":[]}"#,
            "tensor `a` is declared more than once",
        ),
        (
            r#"{"name":"g","tensors":[{"name":"a","dtype":"f32","shape":[1],"kind":"thing"}],"nodes":[]}"#,
            "unknown kind `thing`",
        ),
        (
            r#"{"name":"g","tensors":[],"nodes":[{"name":"n","op":"Relu","inputs":[],"outputs":["b"],"attrs":{"k":{"x":1}}}]}"#,
            "attribute `k`",
        ),
        ("{\"name\": ", "invalid JSON at line 1"),
    ];
    for (text, expected) in cases {
        let err = Graph::from_json(text).expect_err(text).to_string();
        assert!(
            err.contains(expected),
            "{text}\n  gave: {err}\n  expected: {expected}"
        );
    }
}

/// `x = Relu(a)`, then an `If` on `c` whose branch reads `x` without listing it.
fn captured() -> Graph {
    let mut body = GraphBuilder::new("then");
    let x_in = body.input("x", DType::F32, [8]);
    let y = body.op("Neg", &[x_in], DType::F32, [8]);
    body.mark_output(y);
    let mut b = GraphBuilder::new("cf");
    let a = b.input("a", DType::F32, [8]);
    let c = b.input("c", DType::Bool, [0i64; 0]);
    let x = b.tensor("x", DType::F32, [8], TensorKind::Activation);
    b.node("relu", "Relu", &[Some(a)], &[x]);
    let r = b.tensor("r", DType::F32, [8], TensorKind::Output);
    b.node("if", "If", &[Some(c)], &[r]);
    b.body("then_branch", body.build_unchecked());
    assert_eq!(
        b.graph().nodes().iter().last().unwrap().implicit_inputs,
        vec![x]
    );
    b.build_unchecked()
}

#[test]
fn bodies_and_implicit_inputs_validate_and_round_trip() {
    let g = captured();
    assert_eq!(errors(&g), vec![]);
    let text = g.to_json();
    assert!(text.contains(
        r#""implicit_inputs":["x"],"bodies":[{"attr":"then_branch","graph":{"name":"then","#
    ));
    let back = Graph::from_json(&text).unwrap();
    assert_eq!(back, g);
    assert_eq!(back.to_json(), text);
}

#[test]
fn bad_implicit_inputs_are_caught() {
    let mut g = captured();
    g.nodes_mut().raw_mut()[1].implicit_inputs = vec![TensorId(99)];
    let errs = errors(&g);
    assert!(errs.contains(&ValidationError::Dangling {
        node: "if".into(),
        role: "captures",
        tensor: "t99".into(),
    }));
    // The captured `x` is the body's tensor, named by the body (not the graph's tensor of
    // the same id).
    assert!(errs.iter().any(|e| e.with_graph(&g).to_string()
        == "node `if`: body `then_branch` captures `x`, which is not among the node's implicit inputs"));
    // An implicit input the node reads before its producer runs.
    let mut late = captured();
    let r = late.find_tensor("r").unwrap();
    late.nodes_mut().raw_mut()[1].implicit_inputs.push(r);
    assert!(
        errors(&late).iter().any(
            |e| matches!(e, ValidationError::ReadBeforeProduced { tensor, .. } if *tensor == r)
        )
    );
    // A problem inside a body names the node and the body.
    let mut inner = captured();
    inner.nodes_mut().raw_mut()[1].bodies[0]
        .graph
        .nodes_mut()
        .raw_mut()[0]
        .outputs
        .push(TensorId(7));
    let text: Vec<String> = errors(&inner)
        .iter()
        .map(|e| e.with_graph(&inner).to_string())
        .collect();
    assert!(
        text.iter()
            .any(|e| e.starts_with("node `if`, body `then_branch`: node `n0_Neg` writes `t7`")),
        "{text:?}"
    );
}

/// The builder's automatic names are the ids: `t3_Relu` is tensor `t3` and `n1_Relu` node
/// `n1`, whatever was added before them (named tensors, named nodes), so an error rendered
/// without its graph (`t3`) and one rendered with it (`t3_Relu`) name the same tensor.
#[test]
fn automatic_names_are_the_ids() {
    let mut b = GraphBuilder::new("ids");
    let x = b.input("x", DType::F32, [4]);
    let w = b.weight("w", DType::F32, [4]);
    let h = b.named_op("h", "Mul", &[x, w], DType::F32, [4]);
    let r = b.op("Relu", &[h], DType::F32, [4]);
    b.mark_output(r);
    let g = b.build().unwrap();
    // Ids made and read without `memplan_ir::Idx` in scope.
    assert_eq!((r, r.index()), (TensorId::new(3), 3));
    assert_eq!(g.tensor(r).name, "t3_Relu");
    assert_eq!(g.tensor(r).name, format!("{r}_Relu"));
    let n = g.find_node("n1_Relu").unwrap();
    assert_eq!(n, NodeId::new(1));
    assert_eq!(g.nodes()[n].outputs, [r]);
}
