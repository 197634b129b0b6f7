//! Graphs the audit of issue 29 found accepted although invalid, or accepted with a capture
//! nothing kept live: each is refused with an error naming what is wrong, or (captures two
//! levels deep in a JSON file) completed so that every level passes the value on.

use memplan_ir::{
    AnyEntity, Attr, Bindings, DType, Graph, GraphBuilder, GraphError, MemorySemantics, NodeId,
    OpTable, TensorKind, ValidationError,
};

fn load_err(text: &str) -> String {
    match Graph::from_json(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

/// A graph file with these tensors and nodes (JSON fragments).
fn file(tensors: &[&str], nodes: &[&str]) -> String {
    format!(
        r#"{{"name":"g","tensors":[{}],"nodes":[{}]}}"#,
        tensors.join(","),
        nodes.join(",")
    )
}

/// `x = Relu(a)`, `t = Neg(x)`, then a Loop whose body holds an If whose then-branch reads
/// the top-level `x`; neither the Loop nor its body lists `x`. `else_input` names the
/// else-branch's input.
fn loop_if(else_input: &str) -> String {
    let then = r#"{"attr":"then_branch","graph":{"name":"tb","tensors":[{"name":"x","dtype":"f32","shape":[64],"kind":"input"},{"name":"y","dtype":"f32","shape":[64],"kind":"output"}],"nodes":[{"name":"n","op":"Neg","inputs":["x"],"outputs":["y"]}]}}"#;
    let otherwise = format!(
        r#"{{"attr":"else_branch","graph":{{"name":"eb","tensors":[{{"name":"{else_input}","dtype":"f32","shape":[64],"kind":"input"}},{{"name":"y2","dtype":"f32","shape":[64],"kind":"output"}}],"nodes":[{{"name":"n2","op":"Relu","inputs":["{else_input}"],"outputs":["y2"]}}]}}}}"#
    );
    let body = format!(
        r#"{{"attr":"body","graph":{{"name":"lb","tensors":[{{"name":"i","dtype":"i64","shape":[],"kind":"input"}},{{"name":"cin","dtype":"bool","shape":[],"kind":"input"}},{{"name":"vin","dtype":"f32","shape":[64],"kind":"input"}},{{"name":"cout","dtype":"bool","shape":[],"kind":"output"}},{{"name":"vout","dtype":"f32","shape":[64],"kind":"output"}}],"nodes":[{{"name":"cid","op":"Identity","inputs":["cin"],"outputs":["cout"]}},{{"name":"if","op":"If","inputs":["cin"],"outputs":["vout"],"bodies":[{then},{otherwise}]}}]}}}}"#
    );
    file(
        &[
            r#"{"name":"a","dtype":"f32","shape":[64],"kind":"input"}"#,
            r#"{"name":"m","dtype":"i64","shape":[],"kind":"weight","value":[2]}"#,
            r#"{"name":"c","dtype":"bool","shape":[],"kind":"input"}"#,
            r#"{"name":"x","dtype":"f32","shape":[64],"kind":"activation"}"#,
            r#"{"name":"t","dtype":"f32","shape":[64],"kind":"activation"}"#,
            r#"{"name":"v","dtype":"f32","shape":[64],"kind":"activation"}"#,
            r#"{"name":"out","dtype":"f32","shape":[64],"kind":"output"}"#,
        ],
        &[
            r#"{"name":"relu","op":"Relu","inputs":["a"],"outputs":["x"]}"#,
            r#"{"name":"neg","op":"Neg","inputs":["x"],"outputs":["t"]}"#,
            &format!(
                r#"{{"name":"loop","op":"Loop","inputs":["m","c","t"],"outputs":["v"],"bodies":[{body}]}}"#
            ),
            r#"{"name":"add","op":"Add","inputs":["v","t"],"outputs":["out"]}"#,
        ],
    )
}

/// Issue 29, item 2: a value captured two levels deep. The file lists it nowhere; reading it
/// passes `x` on through the Loop body and lists it on the Loop, so `x` lives until the
/// Loop runs.
#[test]
fn a_capture_two_levels_deep_is_passed_on_by_every_level() {
    let g = Graph::from_json(&loop_if("x")).unwrap();
    let x = g.find_tensor("x").unwrap();
    let lp = &g.nodes()[g.find_node("loop").unwrap()];
    assert_eq!(lp.implicit_inputs, vec![x], "the Loop captures `x`");
    let body = &lp.bodies[0].graph;
    let inner_x = body.find_tensor("x").expect("the Loop body passes `x` on");
    assert_eq!(body.tensor(inner_x).kind, TensorKind::Input);
    let inner_if = &body.nodes()[body.find_node("if").unwrap()];
    assert_eq!(inner_if.implicit_inputs, vec![inner_x]);
    // Written back, the completed graph reads as itself.
    assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);

    // Built in code, the missing level is a validation error naming the body and value.
    let mut broken = g.clone();
    let lp = broken.find_node("loop").unwrap();
    let body = &mut broken.node_mut(lp).bodies[0].graph;
    let inner = body.find_node("if").unwrap();
    body.node_mut(inner).implicit_inputs.clear();
    let errs = broken.validate().unwrap_err().to_string();
    assert!(
        errs.contains("captures `x`, which is not among the node's implicit inputs"),
        "{errs}"
    );
}

#[test]
fn a_deep_capture_the_middle_graph_lacks_is_refused_in_code() {
    // then-branch reads `x`; the middle body (built with the builder, which only sees one
    // level) has no `x`.
    let mut then = GraphBuilder::new("then");
    let x_in = then.input("x", DType::F32, [8]);
    let y = then.op("Neg", &[x_in], DType::F32, [8]);
    then.mark_output(y);
    let mut middle = GraphBuilder::new("middle");
    let c = middle.input("c", DType::Bool, [0i64; 0]);
    let r = middle.tensor("r", DType::F32, [8], TensorKind::Output);
    middle.node("if", "If", &[Some(c)], &[r]);
    middle.body("then_branch", then.build_unchecked());
    let mut b = GraphBuilder::new("top");
    let a = b.input("a", DType::F32, [8]);
    let c = b.input("c", DType::Bool, [0i64; 0]);
    let x = b.tensor("x", DType::F32, [8], TensorKind::Activation);
    b.node("relu", "Relu", &[Some(a)], &[x]);
    let out = b.tensor("out", DType::F32, [8], TensorKind::Output);
    b.node("if2", "If", &[Some(c)], &[out]);
    b.body("then_branch", middle.build_unchecked());
    let g = b.build_unchecked();
    let errs: Vec<String> = g
        .validate()
        .unwrap_err()
        .errors
        .iter()
        .map(|e| e.with_graph(&g).to_string())
        .collect();
    assert!(
        errs.iter()
            .any(|e| e.contains("captures `x` from an outer graph")),
        "{errs:?}"
    );
    // Completing the captures fixes it.
    let mut fixed = g.clone();
    fixed.complete_captures();
    fixed.validate().unwrap();
}

/// Issue 29, item 2: an If body input that names nothing is neither a capture nor a
/// formal input (If hands its branches none).
#[test]
fn a_body_input_naming_nothing_is_refused() {
    let err = load_err(&loop_if("zzz"));
    assert!(
        err.contains("If `if`: body `else_branch` has input `zzz`, which is neither one of the 0 inputs the op hands its body nor a value of an enclosing graph"),
        "{err}"
    );
}

fn split(attrs: &str, split_value: Option<&str>) -> String {
    let mut tensors = vec![
        r#"{"name":"x","dtype":"f32","shape":[1,8],"kind":"input"}"#.to_owned(),
        r#"{"name":"y0","dtype":"f32","shape":[1,2],"kind":"output"}"#.to_owned(),
        r#"{"name":"y1","dtype":"f32","shape":[1,3],"kind":"output"}"#.to_owned(),
    ];
    let mut inputs = r#"["x"]"#.to_owned();
    if let Some(v) = split_value {
        tensors.push(format!(
            r#"{{"name":"s","dtype":"i64","shape":[2],"kind":"weight","value":{v}}}"#
        ));
        inputs = r#"["x","s"]"#.to_owned();
    }
    let t: Vec<&str> = tensors.iter().map(String::as_str).collect();
    file(
        &t,
        &[&format!(
            r#"{{"name":"sp","op":"Split","inputs":{inputs},"outputs":["y0","y1"],"attrs":{attrs}}}"#
        )],
    )
}

/// Issue 29, items 5 and 8: Split parameters its definition forbids. `num_outputs` 2^62
/// used to allocate a list that long and panic ("capacity overflow").
#[test]
fn split_parameters_are_checked_without_allocating() {
    let err = load_err(&split(
        r#"{"axis":1,"num_outputs":4611686018427387904}"#,
        None,
    ));
    assert!(
        err.contains("`num_outputs` is 4611686018427387904, but the node has 2 outputs"),
        "{err}"
    );
    let err = load_err(&split(r#"{"axis":1,"num_outputs":-1}"#, None));
    assert!(
        err.contains("`num_outputs` is -1, but the node has 2 outputs"),
        "{err}"
    );
    // Sizes that sum below the axis (2 + 3 < 8).
    let err = load_err(&split(r#"{"axis":1}"#, Some("[2,3]")));
    assert!(
        err.contains("`split` sums to 5, but axis 1 of the input has 8"),
        "{err}"
    );
    let err = load_err(&split(r#"{"axis":2}"#, Some("[2,6]")));
    assert!(err.contains("`axis` 2 is out of range for rank 2"), "{err}");
}

/// Issue 29, item 8: a Slice naming one axis twice, or an axis past the rank.
#[test]
fn slice_axes_are_checked() {
    let slice = |axes: &str| {
        file(
            &[
                r#"{"name":"x","dtype":"f32","shape":[4,8],"kind":"input"}"#,
                r#"{"name":"s","dtype":"i64","shape":[2],"kind":"weight","value":[0,2]}"#,
                r#"{"name":"e","dtype":"i64","shape":[2],"kind":"weight","value":[1,4]}"#,
                &format!(
                    r#"{{"name":"a","dtype":"i64","shape":[2],"kind":"weight","value":{axes}}}"#
                ),
                r#"{"name":"y","dtype":"f32","shape":[1,8],"kind":"output"}"#,
            ],
            &[r#"{"name":"sl","op":"Slice","inputs":["x","s","e","a"],"outputs":["y"]}"#],
        )
    };
    let err = load_err(&slice("[0,0]"));
    assert!(err.contains("axis 0 is sliced more than once"), "{err}");
    let err = load_err(&slice("[0,9223372036854775807]"));
    assert!(
        err.contains("axis 9223372036854775807 is out of range for rank 2"),
        "{err}"
    );
    // The IR's own view rule refuses the repeated axis too (a graph built in code is not
    // validated before the rules run).
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [4, 8]);
    let s = b.int_constant("s", &[0, 2]);
    let e = b.int_constant("e", &[1, 4]);
    let a = b.int_constant("a", &[0, 0]);
    b.op("Slice", &[x, s, e, a], DType::F32, [2, 8]);
    let g = b.build_unchecked();
    let node = g.nodes().as_slice().last().unwrap();
    assert_eq!(
        OpTable::default().semantics(&g, node, &Bindings::new()),
        vec![MemorySemantics::Opaque]
    );
}

/// Issue 29, item 8: declared shapes the op cannot make.
#[test]
fn declared_shapes_must_be_what_the_op_makes() {
    // A Concat whose output does not add up.
    let err = load_err(&file(
        &[
            r#"{"name":"a","dtype":"f32","shape":[1,4],"kind":"input"}"#,
            r#"{"name":"b","dtype":"f32","shape":[1,4],"kind":"input"}"#,
            r#"{"name":"y","dtype":"f32","shape":[1,6],"kind":"output"}"#,
        ],
        &[r#"{"name":"cat","op":"Concat","inputs":["a","b"],"outputs":["y"],"attrs":{"axis":1}}"#],
    ));
    assert!(
        err.contains("Concat `cat`: output `y` is declared [1, 6], but its inputs give [1, 8]"),
        "{err}"
    );
    // Add([1,8], [8,1]) broadcasts to [8,8], not [1,8] (it was then written in place over
    // its 8-element input).
    let err = load_err(&file(
        &[
            r#"{"name":"a","dtype":"f32","shape":[1,8],"kind":"input"}"#,
            r#"{"name":"b","dtype":"f32","shape":[8,1],"kind":"input"}"#,
            r#"{"name":"t","dtype":"f32","shape":[1,8],"kind":"activation"}"#,
            r#"{"name":"y","dtype":"f32","shape":[1,8],"kind":"output"}"#,
        ],
        &[
            r#"{"name":"add","op":"Add","inputs":["a","b"],"outputs":["t"]}"#,
            r#"{"name":"r","op":"Relu","inputs":["t"],"outputs":["y"]}"#,
        ],
    ));
    assert!(
        err.contains("Add `add`: output `t` is declared [1, 8], but its inputs give [8, 8]"),
        "{err}"
    );
    // A Concat axis of -2^63.
    let err = load_err(&file(
        &[
            r#"{"name":"a","dtype":"f32","shape":[1,4],"kind":"input"}"#,
            r#"{"name":"y","dtype":"f32","shape":[1,4],"kind":"output"}"#,
        ],
        &[
            r#"{"name":"cat","op":"Concat","inputs":["a"],"outputs":["y"],"attrs":{"axis":-9223372036854775808}}"#,
        ],
    ));
    assert!(
        err.contains("`axis` -9223372036854775808 is out of range for rank 2"),
        "{err}"
    );
    // Symbolic dims that may agree at run time pass.
    let mut b = GraphBuilder::new("g");
    let n = b.symbol("n");
    let m = b.symbol("m");
    let four = memplan_ir::Expr::constant(4);
    let x = b.input("x", DType::F32, [n.into(), four.clone()]);
    let w = b.input("w", DType::F32, [m.into(), four.clone()]);
    let y = b.op("Mul", &[x, w], DType::F32, [n.into(), four]);
    b.mark_output(y);
    b.build().unwrap();
}

/// Issue 29, item 8: `num_groups` 0, a tensor named "", a dim past 2^63.
#[test]
fn other_invalid_parameters_are_refused() {
    let err = load_err(&file(
        &[
            r#"{"name":"x","dtype":"f32","shape":[1,8,4],"kind":"input"}"#,
            r#"{"name":"s","dtype":"f32","shape":[8],"kind":"weight"}"#,
            r#"{"name":"y","dtype":"f32","shape":[1,8,4],"kind":"output"}"#,
        ],
        &[
            r#"{"name":"gn","op":"GroupNormalization","inputs":["x","s","s"],"outputs":["y"],"attrs":{"num_groups":0}}"#,
        ],
    ));
    assert!(
        err.contains("`num_groups` is 0; it must be at least 1"),
        "{err}"
    );
    let err = load_err(&file(
        &[r#"{"name":"","dtype":"f32","shape":[1],"kind":"input"}"#],
        &[],
    ));
    assert!(err.contains("tensor 0 has an empty name"), "{err}");
    let err = load_err(&file(
        &[
            r#"{"name":"x","dtype":"f32","shape":[18446744073709551616],"kind":"input"}"#,
            r#"{"name":"y","dtype":"f32","shape":[1],"kind":"output"}"#,
        ],
        &[r#"{"name":"n","op":"ReduceSum","inputs":["x"],"outputs":["y"]}"#],
    ));
    assert!(
        err.contains("dimension 0 is too large: a dimension is at most 2^63-1")
            && !err.contains("e+19")
            && !err.contains("not a tensor of the graph"),
        "one clear error, no float, no follow-on error: {err}"
    );
}

/// Issue 29, item 9: BatchNormalization with its statistics among its outputs trains (opsets
/// 9 to 13 tell the mode only so), whatever its attributes say: no in-place write.
#[test]
fn batch_normalization_with_statistics_outputs_is_not_in_place() {
    let bn = |outputs: usize, training: Option<i64>| {
        let mut b = GraphBuilder::new("bn");
        let x = b.input("x", DType::F32, [2, 4]);
        let p = b.weight("p", DType::F32, [4]);
        let mut outs = vec![b.tensor("y", DType::F32, [2, 4], TensorKind::Output)];
        for k in 1..outputs {
            outs.push(b.tensor(format!("s{k}"), DType::F32, [4], TensorKind::Output));
        }
        b.node(
            "bn",
            "BatchNormalization",
            &[Some(x), Some(p), Some(p), Some(p), Some(p)],
            &outs,
        );
        if let Some(t) = training {
            b.attr("training_mode", Attr::Int(t));
        }
        let g = b.build().unwrap();
        let node = g.nodes().as_slice()[0].clone();
        OpTable::default().semantics(&g, &node, &Bindings::new())[0].clone()
    };
    assert!(matches!(bn(1, None), MemorySemantics::InPlace { .. }));
    assert_eq!(bn(5, None), MemorySemantics::Opaque, "opset 9 training");
    assert_eq!(bn(3, Some(1)), MemorySemantics::Opaque, "opset 14 training");
    assert_eq!(bn(1, Some(1)), MemorySemantics::Opaque);
}

/// Issue 29, item 6: QuickGelu (ONNX Runtime's contrib op) is element-wise under both its
/// names.
#[test]
fn quick_gelu_is_elementwise_under_both_names() {
    for op in ["QuickGelu", "com.microsoft.QuickGelu"] {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, [16]);
        let y = b.op(op, &[x], DType::F32, [16]);
        b.mark_output(y);
        let g = b.build().unwrap();
        let node = &g.nodes().as_slice()[0];
        assert!(
            matches!(
                OpTable::default().semantics(&g, node, &Bindings::new())[0],
                MemorySemantics::InPlace { .. }
            ),
            "{op}"
        );
    }
}

#[test]
fn validation_errors_name_their_node() {
    let e = ValidationError::BadParameter {
        node: NodeId(0),
        op: "Split".into(),
        reason: "`split` has a negative size (-1)".into(),
    };
    // By id alone, by name with the graph.
    assert_eq!(
        e.to_string(),
        "Split `n0`: `split` has a negative size (-1)"
    );
    let mut g = GraphBuilder::new("g");
    let x = g.input("x", DType::F32, [4]);
    let y = g.named_op("split", "Split", &[x], DType::F32, [4]);
    g.mark_output(y);
    let g = g.build().unwrap();
    assert_eq!(
        e.with_graph(&g).to_string(),
        "Split `split`: `split` has a negative size (-1)"
    );
    assert_eq!(e.entities(), [AnyEntity::Node(NodeId(0))]);
}
