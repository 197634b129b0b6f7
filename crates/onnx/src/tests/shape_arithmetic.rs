//! Shape arithmetic as PyTorch's exporters write it: the TorchScript exporter's `expand`
//! chains (`Shape` → `Equal(shape, -1)` → `Where` → `Expand`), symbolic broadcasting of two
//! unknown dims, one naming scheme for the symbols memplan makes (in errors too), and empty
//! tensors (a dim bound to 0).

use memplan_ir::Expr;

use super::*;

/// `x: f32[batch, seq]`, and the TorchScript exporter's way of expanding a `[1, 1]` constant
/// to `x`'s shape: the target is built from `Shape`, `Gather`, `Unsqueeze`, `Concat`, then
/// every `-1` in it is replaced by 1 (`ConstantOfShape`, `Mul`, `Equal`, `Where`).
fn torchscript_expand() -> M {
    let scalar = |name: &str, v: i64| i64s(name, &[], &[v]);
    M::new(vec![vi("x", F32, &["batch", "seq"])])
        .init(scalar("zero", 0))
        .init(scalar("one", 1))
        .init(i64s("axes0", &[1], &[0]))
        .init(i64s("minus_one", &[1], &[-1]))
        .init(scalar("neg", -1))
        .init(f32s("c", &[1, 1], &[0.5]))
        .node(node("Shape", &["x"], &["shape"], vec![]))
        .node(node(
            "Gather",
            &["shape", "zero"],
            &["d0"],
            vec![int("axis", 0)],
        ))
        .node(node(
            "Gather",
            &["shape", "one"],
            &["d1"],
            vec![int("axis", 0)],
        ))
        .node(node("Unsqueeze", &["d0", "axes0"], &["u0"], vec![]))
        .node(node("Unsqueeze", &["d1", "axes0"], &["u1"], vec![]))
        .node(node(
            "Concat",
            &["u0", "u1"],
            &["cat"],
            vec![int("axis", 0)],
        ))
        .node(node("Reshape", &["cat", "minus_one"], &["target"], vec![]))
        .node(node("Shape", &["target"], &["tshape"], vec![]))
        .node(node(
            "ConstantOfShape",
            &["tshape"],
            &["ones"],
            vec![tensor_attr("value", i64s("v", &[1], &[1]))],
        ))
        .node(node("Mul", &["ones", "neg"], &["minus"], vec![]))
        .node(node("Equal", &["target", "minus"], &["is_minus"], vec![]))
        .node(node(
            "Where",
            &["is_minus", "ones", "target"],
            &["fixed"],
            vec![],
        ))
        .node(node("Expand", &["c", "fixed"], &["wide"], vec![]))
        .node(node("Add", &["x", "wide"], &["y"], vec![]))
}

#[test]
fn the_torchscript_exporters_expand_chain_resolves_to_the_input_shape() {
    let g = torchscript_expand().graph();
    assert_eq!(shape(&g, "wide"), s(&["batch", "seq"]));
    assert_eq!(shape(&g, "y"), s(&["batch", "seq"]));
    // No symbol was invented on the way.
    let names: Vec<&String> = g.symbols().iter().collect();
    assert_eq!(names, ["batch", "seq"]);
}

#[test]
fn symbolic_values_compare_through_their_sign() {
    // Equal(seq + 1, -1) is false whatever seq is; Less(seq, seq + 1) true; Max(2*seq, seq)
    // is 2*seq; Equal(seq, 1) is unknown, so the Expand it feeds has a data-dependent dim.
    let m = M::new(vec![vi("x", F32, &["seq"])])
        .init(i64s("one", &[1], &[1]))
        .init(i64s("minus", &[1], &[-1]))
        .init(i64s("two", &[1], &[2]))
        .init(f32s("c", &[1], &[0.0]))
        .node(node("Shape", &["x"], &["n"], vec![]))
        .node(node("Add", &["n", "one"], &["n1"], vec![]))
        .node(node("Equal", &["n1", "minus"], &["never"], vec![]))
        .node(node("Less", &["n", "n1"], &["always"], vec![]))
        .node(node("Mul", &["n", "two"], &["n2"], vec![]))
        .node(node("Max", &["n2", "n"], &["most"], vec![]))
        .node(node("Where", &["never", "one", "most"], &["w"], vec![]))
        .node(node("Where", &["always", "n1", "one"], &["w2"], vec![]))
        .node(node("Expand", &["c", "w"], &["e"], vec![]))
        .node(node("Expand", &["c", "w2"], &["e2"], vec![]))
        .node(node("Equal", &["n", "one"], &["maybe"], vec![]))
        .node(node("Where", &["maybe", "one", "n"], &["w3"], vec![]))
        .node(node("Expand", &["c", "w3"], &["e3"], vec![]));
    let g = m.graph();
    assert_eq!(shape(&g, "e"), s(&["2*seq"]));
    assert_eq!(shape(&g, "e2"), s(&["seq+1"]));
    assert_eq!(shape(&g, "e3"), s(&["Expand_e3_o0_d0"]));
}

#[test]
fn two_unknown_dims_broadcast_to_a_symbol_binding_resolves() {
    let g = M::new(vec![vi("a", F32, &["n", "4"]), vi("b", F32, &["m", "1"])])
        .node(node("Add", &["a", "b"], &["y"], vec![]))
        .node(node("Relu", &["y"], &["z"], vec![]))
        .graph();
    // Named like every symbol memplan makes: node, output, axis.
    assert_eq!(shape(&g, "y"), s(&["Add_y_o0_d0", "4"]));
    assert_eq!(shape(&g, "z"), s(&["Add_y_o0_d0", "4"]));
    let sym = g.find_symbol("Add_y_o0_d0").unwrap();
    let (n, m) = (g.find_symbol("n").unwrap(), g.find_symbol("m").unwrap());
    assert_eq!(
        g.symbol_broadcast(sym),
        Some((&Expr::symbol(n), &Expr::symbol(m)))
    );
    let y = tensor(&g, "y");
    for (nv, mv, bytes) in [(1, 5, 80), (5, 1, 80), (5, 5, 80), (0, 1, 0)] {
        let b = g.bind(&[("n", nv), ("m", mv)]).unwrap();
        assert_eq!(y.bytes(&b), Ok(bytes), "n={nv} m={mv}");
    }
    let err = g.bind(&[("n", 3), ("m", 5)]).unwrap_err().to_string();
    assert!(err.contains("n = 3 with m = 5"), "{err}");
    // `--dim` at import resolves it too, and refuses values that do not broadcast.
    let m = || {
        M::new(vec![vi("a", F32, &["n", "4"]), vi("b", F32, &["m", "1"])]).node(node(
            "Add",
            &["a", "b"],
            &["y"],
            vec![],
        ))
    };
    let dims = |n: u64, mv: u64| ImportOptions {
        dims: vec![("n".into(), n), ("m".into(), mv)],
        ..ImportOptions::default()
    };
    let bound = import(&m().bytes(), &dims(1, 7)).unwrap();
    assert_eq!(tensor(&bound, "y").static_bytes(), Ok(112));
    assert!(import(&m().bytes(), &dims(2, 7)).is_err());
}

#[test]
fn errors_name_symbols_as_inspect_does() {
    // Two constants that do not broadcast, beside symbols: the message names the symbols.
    let err = M::new(vec![vi("a", F32, &["n", "3"]), vi("b", F32, &["m", "4"])])
        .node(node("Add", &["a", "b"], &["y"], vec![]))
        .import()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("shapes [n, 3] and [m, 4] do not broadcast"),
        "{err}"
    );
    // An unnamed input dim is `{input}_d{axis}`, the scheme of node-made symbols.
    let g = M::new(vec![vi("0x", F32, &["?", "3"])])
        .node(node("Relu", &["0x"], &["y"], vec![]))
        .graph();
    assert_eq!(shape(&g, "y"), s(&["n0x_d0", "3"]));
}

#[test]
fn a_past_of_zero_makes_empty_tensors_of_zero_bytes() {
    // A KV cache: past [batch, 2, past, 8] concatenated with the new keys [batch, 2, seq, 8].
    let m = || {
        M::new(vec![
            vi("past", F32, &["batch", "2", "past", "8"]),
            vi("new", F32, &["batch", "2", "seq", "8"]),
        ])
        .node(node(
            "Concat",
            &["past", "new"],
            &["present"],
            vec![int("axis", 2)],
        ))
    };
    let options = ImportOptions {
        dims: vec![("batch".into(), 1), ("seq".into(), 4), ("past".into(), 0)],
        ..ImportOptions::default()
    };
    let g = import(&m().bytes(), &options).unwrap();
    assert_eq!(tensor(&g, "past").static_bytes(), Ok(0));
    assert_eq!(shape(&g, "present"), s(&["1", "2", "4", "8"]));
    // A 0 in a file's own dims is an empty tensor too.
    let g = M::new(vec![vi("x", F32, &["0", "3"])])
        .node(node("Relu", &["x"], &["y"], vec![]))
        .graph();
    assert_eq!(tensor(&g, "y").static_bytes(), Ok(0));
}

#[test]
fn a_token_count_summed_from_a_routing_mask_bounds_what_it_sizes() {
    // top-2 routing of `tokens` tokens: the tokens expert 3 takes are counted from the mask
    // (a sum of booleans), then gathered by a Range over that count. The count is at most
    // the tokens routed, 2 x tokens, and so is the Range's length.
    let g = M::new(vec![
        vi("hidden", F32, &["tokens", "8"]),
        vi("topk", I64, &["tokens", "2"]),
    ])
    .init(i64s("expert", &[], &[3]))
    .init(i64s("zero", &[], &[0]))
    .init(i64s("step", &[], &[1]))
    .init(i64s("eight", &[1], &[8]))
    .init(i64s("one_axis", &[1], &[0]))
    .node(node("Equal", &["topk", "expert"], &["mask"], vec![]))
    .node(node("Cast", &["mask"], &["mask_i"], vec![int("to", 7)]))
    .node(node(
        "ReduceSum",
        &["mask_i"],
        &["count"],
        vec![int("keepdims", 0)],
    ))
    .node(node(
        "Range",
        &["zero", "count", "step"],
        &["slots"],
        vec![],
    ))
    .node(node(
        "Gather",
        &["hidden", "slots"],
        &["picked"],
        vec![int("axis", 0)],
    ))
    .node(node(
        "Unsqueeze",
        &["count", "one_axis"],
        &["count1"],
        vec![],
    ))
    .node(node(
        "Concat",
        &["count1", "eight"],
        &["target"],
        vec![int("axis", 0)],
    ))
    .node(node(
        "ConstantOfShape",
        &["target"],
        &["zeros"],
        vec![tensor_attr("value", f32s("v", &[1], &[0.0]))],
    ))
    .graph();
    assert_eq!(shape(&g, "picked"), s(&["Range_slots_o0_d0", "8"]));
    assert_eq!(bound_of(&g, "picked", 0).as_deref(), Some("2*tokens"));
    // ConstantOfShape([count, 8]): every dim at most the largest value, count or 8.
    assert_eq!(bound_of(&g, "zeros", 0).as_deref(), Some("2*tokens+8"));
    // `--bound` (bind_to_bounds) sizes it from `tokens` alone.
    let given = g.bind(&[("tokens", 5)]).unwrap();
    let (all, _) = g.bind_to_bounds(&given).unwrap();
    assert_eq!(tensor(&g, "picked").bytes(&all), Ok(10 * 8 * 4));
    // A count from a subtraction has no bound: the Range stays unbounded.
    let g = M::new(vec![vi("n", I64, &[])])
        .init(i64s("zero", &[], &[0]))
        .init(i64s("step", &[], &[1]))
        .node(node("Sub", &["n", "zero"], &["m"], vec![]))
        .node(node("Range", &["zero", "m", "step"], &["r"], vec![]))
        .graph();
    assert_eq!(bound_of(&g, "r", 0), None);
}

/// A top-2 router over 8 experts as the exporters write it, up to the mask of one expert's
/// `[k, tokens]` slice: the dynamo exporter's `Equal(Unsqueeze(indices), arange)`, or the
/// TorchScript exporter's `OneHot(indices, 8, [off, on])` then `Cast` to bool; then
/// `Transpose [2, 1, 0]` and `Gather` of expert 3, and `NonZero`, whose count is the tokens
/// the expert takes. `indices` is `TopK`'s output, or a graph input when `from_topk` is false.
fn routed(one_hot: Option<i64>, from_topk: bool) -> M {
    let mut m = M::new(vec![
        vi("logits", F32, &["tokens", "8"]),
        vi("given", I64, &["tokens", "2"]),
    ])
    .init(i64s("k", &[1], &[2]))
    .init(i64s("last", &[1], &[-1]))
    .init(i64s("arange", &[8], &[0, 1, 2, 3, 4, 5, 6, 7]))
    .init(i64s("expert", &[], &[3]))
    .init(i64s("depth", &[], &[8]));
    let indices = if from_topk {
        m = m.node(node(
            "TopK",
            &["logits", "k"],
            &["weights", "indices"],
            vec![int("axis", -1)],
        ));
        "indices"
    } else {
        "given"
    };
    m = match one_hot {
        None => m
            .node(node("Unsqueeze", &[indices, "last"], &["u"], vec![]))
            .node(node("Equal", &["u", "arange"], &["mask"], vec![])),
        Some(off) => m
            .init(i64s("values", &[2], &[off, 1]))
            .node(node(
                "OneHot",
                &[indices, "depth", "values"],
                &["hot"],
                vec![int("axis", -1)],
            ))
            .node(node("Cast", &["hot"], &["mask"], vec![int("to", 9)])),
    };
    m.node(node(
        "Transpose",
        &["mask"],
        &["per_expert"],
        vec![ints("perm", &[2, 1, 0])],
    ))
    .node(node(
        "Gather",
        &["per_expert", "expert"],
        &["mine"],
        vec![int("axis", 0)],
    ))
    .node(node("NonZero", &["mine"], &["where"], vec![]))
}

#[test]
fn an_expert_takes_each_token_at_most_once() {
    // TopK's indices are distinct along k, so the expert's [k, tokens] mask has at most one
    // token-position on a column: it takes at most `tokens` tokens, not k x tokens.
    for one_hot in [None, Some(0)] {
        let g = routed(one_hot, true).graph();
        assert_eq!(shape(&g, "mine"), s(&["2", "tokens"]), "{one_hot:?}");
        assert_eq!(
            bound_of(&g, "where", 1).as_deref(),
            Some("tokens"),
            "{one_hot:?}"
        );
    }
    // Indices from anywhere else may repeat; a one-hot whose off value is not 0 is mostly
    // non-zero: both keep the element count.
    let g = routed(None, false).graph();
    assert_eq!(bound_of(&g, "where", 1).as_deref(), Some("2*tokens"));
    let g = routed(Some(2), true).graph();
    assert_eq!(bound_of(&g, "where", 1).as_deref(), Some("2*tokens"));
    // ONNX Runtime's form: the mask of expert 3 over [tokens, k] (TopK's indices against the
    // expert's id), summed: at most one a token.
    let sum = |from_topk: bool| {
        let m = routed(None, from_topk)
            .node(node(
                "Equal",
                &[if from_topk { "indices" } else { "given" }, "expert"],
                &["is3"],
                vec![],
            ))
            .node(node("Cast", &["is3"], &["is3_i"], vec![int("to", 7)]))
            .node(node(
                "ReduceSum",
                &["is3_i"],
                &["count"],
                vec![int("keepdims", 0)],
            ))
            .init(i64s("zero", &[], &[0]))
            .init(i64s("step", &[], &[1]))
            .node(node(
                "Range",
                &["zero", "count", "step"],
                &["slots"],
                vec![],
            ));
        bound_of(&m.graph(), "slots", 0)
    };
    assert_eq!(sum(true).as_deref(), Some("tokens"));
    assert_eq!(sum(false).as_deref(), Some("2*tokens"));
}

/// The TorchScript exporter's `repeat_interleave(x, k, dim=0)` with `k` read from a shape:
/// the repeats of its `Tile` are `OneHot([1], 3, [1, k])`, that is `[1, k, 1]`, so the tiled
/// tensor is `[tokens, k, width]`, not three sizes only the data decides.
#[test]
fn the_torchscript_exporters_repeat_interleave_tiles_by_a_known_count() {
    let g = M::new(vec![
        vi("x", F32, &["tokens", "64"]),
        vi("topk", I64, &["tokens", "2"]),
    ])
    .init(i64s("last", &[1], &[-1]))
    .init(i64s("end", &[1], &[i64::MAX]))
    .init(i64s("axes0", &[1], &[0]))
    .init(i64s("one", &[1], &[1]))
    .init(i64s("pos", &[1], &[1]))
    .init(i64s("depth", &[], &[3]))
    .init(i64s("flat", &[1], &[-1]))
    .node(node("Shape", &["topk"], &["sh"], vec![]))
    .node(node(
        "Slice",
        &["sh", "last", "end", "axes0"],
        &["k"],
        vec![],
    ))
    .node(node(
        "Concat",
        &["one", "k"],
        &["off_on"],
        vec![int("axis", 0)],
    ))
    .node(node("OneHot", &["pos", "depth", "off_on"], &["oh"], vec![]))
    .node(node("Reshape", &["oh", "flat"], &["reps"], vec![]))
    .node(node("Unsqueeze", &["x", "one"], &["u"], vec![]))
    .node(node("Tile", &["u", "reps"], &["t"], vec![]))
    .graph();
    assert_eq!(shape(&g, "oh"), s(&["1", "3"]));
    assert_eq!(shape(&g, "t"), s(&["tokens", "2", "64"]));
    assert_eq!(g.symbols().len(), 1, "{:?}", g.symbols());
    // On axis 0, with a negative index and one out of range (a row all off): the value is
    // [[1, 1], [1, 1], [2, 1]], row-major, and its last three are [1, 2, 1].
    let g = M::new(vec![vi("x", F32, &["2", "3", "4"])])
        .init(i64s("idx", &[2], &[-1, 5]))
        .init(i64s("depth", &[], &[3]))
        .init(i64s("vals", &[2], &[1, 2]))
        .init(i64s("flat", &[1], &[-1]))
        .init(i64s("three", &[1], &[3]))
        .init(i64s("six", &[1], &[6]))
        .node(node(
            "OneHot",
            &["idx", "depth", "vals"],
            &["oh"],
            vec![int("axis", 0)],
        ))
        .node(node("Reshape", &["oh", "flat"], &["flat_oh"], vec![]))
        .node(node(
            "Slice",
            &["flat_oh", "three", "six"],
            &["reps"],
            vec![],
        ))
        .node(node("Tile", &["x", "reps"], &["t"], vec![]))
        .graph();
    assert_eq!(shape(&g, "oh"), s(&["3", "2"]));
    assert_eq!(shape(&g, "t"), s(&["2", "6", "4"]));
}

/// The TorchScript exporter's `F.pad(x, pads)` with pads computed from shapes (Swin's window
/// padding, `(7 - w % 7) % 7`): PyTorch's pads, last dim first, become ONNX's through
/// `Reshape [-1, 2]`, a reversing `Slice`, `Transpose` and `Reshape [-1]`; the value flows
/// through all four, so the padded tensor has known dims.
#[test]
fn the_torchscript_exporters_pad_reorders_known_pads() {
    let scalar = |name: &str, v: i64| i64s(name, &[], &[v]);
    let g = M::new(vec![vi("x", F32, &["batch", "5", "6", "8"])])
        .init(scalar("seven", 7))
        .init(scalar("two", 2))
        .init(i64s("axes0", &[1], &[0]))
        .init(i64s("zeros3", &[3], &[0, 0, 0]))
        .init(i64s("zero1", &[1], &[0]))
        .init(i64s("two1", &[1], &[2]))
        .init(i64s("pairs", &[2], &[-1, 2]))
        .init(i64s("flat", &[1], &[-1]))
        .init(i64s("minus1", &[1], &[-1]))
        .init(i64s("to_start", &[1], &[-i64::MAX]))
        .node(node("Shape", &["x"], &["sh"], vec![]))
        .node(node("Gather", &["sh", "two"], &["w"], vec![int("axis", 0)]))
        .node(node("Mod", &["w", "seven"], &["wm"], vec![]))
        .node(node("Sub", &["seven", "wm"], &["ws"], vec![]))
        .node(node("Mod", &["ws", "seven"], &["pad_w"], vec![]))
        .node(node("Unsqueeze", &["pad_w", "axes0"], &["pw"], vec![]))
        // PyTorch's order: (c_lo, c_hi, w_lo, w_hi, h_lo, h_hi) = (0, 0, 0, 1, 0, 2).
        .node(node(
            "Concat",
            &["zeros3", "pw", "zero1", "two1"],
            &["torch_pads"],
            vec![int("axis", 0)],
        ))
        .node(node(
            "ConstantOfShape",
            &["two1"],
            &["rest"],
            vec![tensor_attr("value", i64s("v", &[1], &[0]))],
        ))
        .node(node(
            "Concat",
            &["torch_pads", "rest"],
            &["all"],
            vec![int("axis", 0)],
        ))
        .node(node("Reshape", &["all", "pairs"], &["p2"], vec![]))
        .node(node(
            "Slice",
            &["p2", "minus1", "to_start", "axes0", "minus1"],
            &["flipped"],
            vec![],
        ))
        .node(node(
            "Transpose",
            &["flipped"],
            &["t"],
            vec![ints("perm", &[1, 0])],
        ))
        .node(node("Reshape", &["t", "flat"], &["pads"], vec![]))
        .node(node("Pad", &["x", "pads"], &["y"], vec![]))
        .graph();
    assert_eq!(shape(&g, "p2"), s(&["4", "2"]));
    assert_eq!(shape(&g, "y"), s(&["batch", "7", "7", "8"]));
    assert_eq!(g.symbols().len(), 1, "{:?}", g.symbols());
}

/// A strided window over an unknown dim (a ResNet stem exported with dynamic height and
/// width): `floor((height - 1) / 2) + 1` positions is a quotient symbol, the same one for
/// every window that divides the same span (a 3x3 stride-2 conv and its 1x1 stride-2
/// shortcut), and binding `height` sets it. The dynamo exporter's own name for the dim
/// (`(((height-1)//2))+1`) gives way to it; `Div` and `Mod` of a shape value by a constant
/// make the same kind of symbol.
#[test]
fn strided_windows_over_unknown_dims_are_quotient_symbols() {
    let g = M::new(vec![vi("x", F32, &["batch", "8", "height", "width"])])
        .init(weight("w3", &[8, 8, 3, 3]))
        .init(weight("w1", &[8, 8, 1, 1]))
        .init(i64s("two", &[], &[2]))
        .init(i64s("three", &[], &[3]))
        .node(node(
            "Conv",
            &["x", "w3"],
            &["c3"],
            vec![ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1])],
        ))
        .node(node(
            "Conv",
            &["x", "w1"],
            &["c1"],
            vec![ints("strides", &[2, 2])],
        ))
        .node(node("Add", &["c3", "c1"], &["sum"], vec![]))
        .node(node(
            "MaxPool",
            &["sum"],
            &["pool"],
            vec![
                ints("kernel_shape", &[3, 3]),
                ints("strides", &[2, 2]),
                ints("pads", &[1, 1, 1, 1]),
            ],
        ))
        .info(vi(
            "c3",
            F32,
            &["batch", "8", "(((height-1)//2))+1", "(((width-1)//2))+1"],
        ))
        .node(node("Shape", &["x"], &["sh"], vec![]))
        .node(node("Gather", &["sh", "two"], &["h"], vec![int("axis", 0)]))
        .node(node("Div", &["h", "three"], &["third"], vec![]))
        .node(node("Mod", &["h", "three"], &["rest"], vec![]))
        .node(node("Unsqueeze", &["third", "zero"], &["third1"], vec![]))
        .node(node("Unsqueeze", &["rest", "zero"], &["rest1"], vec![]))
        .init(i64s("zero", &[1], &[0]))
        .node(node(
            "Concat",
            &["third1", "rest1"],
            &["dims"],
            vec![int("axis", 0)],
        ))
        .node(node("ConstantOfShape", &["dims"], &["z"], vec![]))
        .graph();
    let c3 = shape(&g, "c3");
    assert_eq!(c3[..2], s(&["batch", "8"]));
    assert_eq!(shape(&g, "c1"), c3);
    assert_eq!(shape(&g, "sum"), c3);
    let q = g.find_symbol(&c3[2]).unwrap();
    assert_eq!(
        g.symbol_quotient(q).unwrap().display(g.symbols()),
        "floor((height+1)/2)"
    );
    let pool = shape(&g, "pool");
    let p = g.find_symbol(&pool[2]).unwrap();
    // floor((floor((height+1)/2) + 1)/2) = floor((height+3)/4): nested divisions are one.
    assert_eq!(
        g.symbol_quotient(p).unwrap().display(g.symbols()),
        "floor((height+3)/4)"
    );
    let z = shape(&g, "z");
    let third = g.find_symbol(&z[0]).unwrap();
    assert_eq!(
        g.symbol_quotient(third).unwrap().display(g.symbols()),
        "floor(height/3)"
    );
    assert_eq!(z[1], format!("height-3*{}", z[0]));
    // No symbol is left for the caller but the graph's inputs' dims.
    let free: Vec<&String> = g
        .symbols()
        .iter_enumerated()
        .filter(|&(s, _)| !g.is_derived(s))
        .map(|(_, n)| n)
        .collect();
    assert_eq!(free, ["batch", "height", "width"]);
    for (h, pooled, thirds, rest) in [(224, 56, 74, 2), (225, 57, 75, 0), (7, 2, 2, 1)] {
        let b = g
            .bind(&[("batch", 1), ("height", h), ("width", 9)])
            .unwrap();
        let concrete = g.bound(&b).unwrap();
        let dims = |name: &str| {
            let t = concrete.find_tensor(name).unwrap();
            concrete.tensor(t).static_dims().unwrap()
        };
        assert_eq!(dims("pool")[2], pooled, "height {h}");
        assert_eq!(dims("z"), [thirds, rest], "height {h}");
    }
}

/// wav2vec2's feature encoder over raw audio: each strided convolution's length, and the
/// exporter's own arithmetic for the last one (`(samples // 5 - 2) // 2`, as sympy
/// simplifies it), are one expression in one quotient symbol, so the Reshape that reads the
/// exporter's length finds the convolution's.
#[test]
fn one_length_computed_two_ways_is_one_symbol() {
    let g = M::new(vec![vi("x", F32, &["batch", "1", "samples"])])
        .init(weight("w10", &[8, 1, 10]))
        .init(weight("w3", &[8, 8, 3]))
        .init(i64s("two", &[], &[2]))
        .init(i64s("five", &[], &[5]))
        .init(i64s("minus2", &[], &[-2]))
        .init(i64s("zero", &[1], &[0]))
        .init(i64s("eight", &[1], &[8]))
        .node(node(
            "Conv",
            &["x", "w10"],
            &["c1"],
            vec![ints("strides", &[5])],
        ))
        .node(node(
            "Conv",
            &["c1", "w3"],
            &["c2"],
            vec![ints("strides", &[2])],
        ))
        .node(node("Shape", &["x"], &["sh"], vec![]))
        .node(node(
            "Gather",
            &["sh", "two"],
            &["len"],
            vec![int("axis", 0)],
        ))
        .node(node("Div", &["len", "five"], &["fifths"], vec![]))
        .node(node("Add", &["fifths", "minus2"], &["less"], vec![]))
        .node(node("Div", &["less", "two"], &["frames"], vec![]))
        .node(node("Unsqueeze", &["frames", "zero"], &["frames1"], vec![]))
        .node(node("Shape", &["x"], &["sh0"], vec![]))
        .node(node("Slice", &["sh0", "zero", "one1"], &["b1"], vec![]))
        .init(i64s("one1", &[1], &[1]))
        .node(node(
            "Concat",
            &["b1", "eight", "frames1"],
            &["target"],
            vec![int("axis", 0)],
        ))
        .node(node("Reshape", &["c2", "target"], &["y"], vec![]))
        .graph();
    let c2 = shape(&g, "c2");
    assert_eq!(shape(&g, "y"), c2);
    let quotients: Vec<String> = g
        .symbol_quotients()
        .iter()
        .map(|(_, q)| q.display(g.symbols()))
        .collect();
    assert_eq!(quotients, ["floor(samples/5)", "floor(samples/10)"]);
    for samples in [16_000_i64, 16_003, 16_009, 15, 14] {
        let b = g
            .bind(&[("batch", 1), ("samples", samples.unsigned_abs())])
            .unwrap();
        let t = g.find_tensor("c2").unwrap();
        let frames = g.bound(&b).unwrap().tensor(t).static_dims().unwrap()[2];
        let l1 = (samples - 10).div_euclid(5) + 1;
        let l2 = (l1 - 3).div_euclid(2) + 1;
        assert_eq!(Some(frames), u64::try_from(l2).ok(), "samples {samples}");
    }
}

/// Issue 36, item 10: a mixture-of-experts block that slices each expert's sorted tokens
/// with `arange(start, end)`, where `end = counts.cumsum(0)` and `start = end - counts` (both
/// exporters write the start as `Sub(CumSum(counts), counts)`): the exclusive sum is never
/// negative and at most the inclusive one, so the `Range` is bounded as a count from 0 is.
/// A `Sub` of anything else stays unbounded.
#[test]
fn a_range_from_an_exclusive_sum_to_the_inclusive_one_is_bounded() {
    let m = |sub_of: &str| {
        M::new(vec![
            vi("routed", F32, &["n", "8"]),
            vi("topk", I64, &["tokens", "2"]),
            vi("other", I64, &["4"]),
        ])
        .init(i64s("experts", &[], &[4]))
        .init(i64s("off_on", &[2], &[0, 1]))
        .init(i64s("axes01", &[2], &[0, 1]))
        .init(i64s("zero", &[], &[0]))
        .init(i64s("two", &[], &[2]))
        .init(i64s("step", &[], &[1]))
        .node(node(
            "OneHot",
            &["topk", "experts", "off_on"],
            &["hot"],
            vec![int("axis", -1)],
        ))
        .node(node(
            "ReduceSum",
            &["hot", "axes01"],
            &["counts"],
            vec![int("keepdims", 0)],
        ))
        .node(node("CumSum", &["counts", "zero"], &["ends"], vec![]))
        .node(node("Sub", &["ends", sub_of], &["starts"], vec![]))
        .node(node(
            "Gather",
            &["starts", "two"],
            &["lo"],
            vec![int("axis", 0)],
        ))
        .node(node(
            "Gather",
            &["ends", "two"],
            &["hi"],
            vec![int("axis", 0)],
        ))
        .node(node("Range", &["lo", "hi", "step"], &["rows"], vec![]))
        .node(node(
            "Gather",
            &["routed", "rows"],
            &["picked"],
            vec![int("axis", 0)],
        ))
        .graph()
    };
    let g = m("counts");
    let b = bound_of(&g, "picked", 0).expect("the expert's rows are bounded");
    // `tokens` x 2 one-hot rows of 4, summed over both: at most 8 x tokens a count, times
    // the 4 counts the CumSum adds: a sound bound, never a guess.
    assert!(b.contains("tokens"), "{b}");
    // `ends - other`: `other` is not what `ends` sums, so the start may be negative.
    let g = m("other");
    assert_eq!(bound_of(&g, "picked", 0), None);
}

/// Issue 36, item 10: a constant `split` (the TorchScript exporter traces the counts of its
/// example) over an axis whose length is data-dependent: the model runs only where the length
/// is the split's sum, so that sum bounds it, and `--bound` binds it there instead of at a
/// larger bound the split contradicts.
#[test]
fn a_constant_split_bounds_the_data_dependent_length_it_splits() {
    // `mask`: bool (ONNX element type 9).
    let g = M::new(vec![
        vi("x", F32, &["tokens", "8"]),
        vi("mask", 9, &["tokens"]),
    ])
    .init(i64s("sizes", &[2], &[2, 2]))
    .init(i64s("zero", &[], &[0]))
    .node(node("NonZero", &["mask"], &["nz"], vec![]))
    .node(node(
        "Gather",
        &["nz", "zero"],
        &["idx"],
        vec![int("axis", 0)],
    ))
    .node(node(
        "Gather",
        &["x", "idx"],
        &["picked"],
        vec![int("axis", 0)],
    ))
    .node(node(
        "Split",
        &["picked", "sizes"],
        &["a", "b"],
        vec![int("axis", 0)],
    ))
    .graph();
    assert_eq!(bound_of(&g, "picked", 0).as_deref(), Some("4"));
    // At `tokens = 5` (the NonZero's own bound), the graph at its bounds is a valid graph.
    let given = g.bind(&[("tokens", 5)]).unwrap();
    let (all, _) = g.bind_to_bounds(&given).unwrap();
    assert_eq!(tensor(&g, "picked").bytes(&all), Ok(4 * 8 * 4));
    g.bound(&all).unwrap_or_else(|e| panic!("{e}"));
}
