//! Aliasing hazards, each on a small graph written to hit it: the planner must not make the
//! unsafe alias, and the verifier must reject a plan that does (a hand-made mutant of the
//! planner's own valid plan).

use std::sync::Arc;

use memplan_ir::{
    Attr, DType, Graph, GraphBuilder, GraphError, MemorySemantics, OpRule, OpTable, TensorId,
    TensorKind, ValidationError,
};
use memplan_planner::{
    Alias, AliasKind, Plan, PlanError, PlanOptions, PlanViolation, plan_graph, verify_plan,
    verify_plan_report,
};

mod common;
use common::plan_ok;

fn alias(plan: &Plan, t: TensorId) -> Option<(TensorId, AliasKind)> {
    let b = plan
        .buffers
        .iter()
        .find(|b| b.tensor == t)
        .expect("a buffer");
    b.parent().zip(b.alias_kind())
}

/// `plan` with `t` claimed as a `kind` alias of `parent`, `delta` bytes into it.
fn mutant(plan: &Plan, t: TensorId, parent: TensorId, kind: AliasKind, delta: u64) -> Plan {
    let mut m = plan.clone();
    let at = m
        .buffers
        .iter()
        .find(|b| b.tensor == parent)
        .expect("the parent has a buffer")
        .offset;
    for b in m.buffers.iter_mut().filter(|b| b.tensor == t) {
        b.alias = Some(match kind {
            AliasKind::View => Alias::View {
                of: parent,
                offset: delta,
            },
            AliasKind::InPlace => Alias::InPlace { of: parent },
            AliasKind::Part => Alias::Part {
                of: parent,
                offset: delta,
            },
        });
        b.offset = at + delta;
    }
    m
}

fn violations(graph: &Graph, plan: &Plan) -> Vec<PlanViolation> {
    match verify_plan(graph, plan) {
        Ok(()) => Vec::new(),
        Err(v) => v.0,
    }
}

/// x: i4[1,7] split [3,4]: `q` starts at bit 12, inside a byte. Neither chunk is a view
/// (`p` ends inside the byte `q` starts in); a plan claiming `q` at byte 1 or 2 is rejected.
#[test]
fn a_sub_byte_split_at_an_odd_element_is_not_a_view() {
    let mut g = GraphBuilder::new("split_i4");
    let x = g.input("x", DType::I4, [1, 7]);
    let a = g.op("Conv", &[x], DType::I4, [1, 7]);
    let split = g.int_constant("split", &[3, 4]);
    let p = g.tensor("p", DType::I4, [1, 3], TensorKind::Activation);
    let q = g.tensor("q", DType::I4, [1, 4], TensorKind::Activation);
    g.node("split", "Split", &[Some(a), Some(split)], &[p, q]);
    g.attr("axis", Attr::Int(1));
    let y = g.op("Concat", &[p, q], DType::I4, [1, 7]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(alias(&plan, p), None);
    assert_eq!(alias(&plan, q), None);
    for delta in [1, 2] {
        let bad = mutant(&plan, q, a, AliasKind::View, delta);
        let found = violations(&graph, &bad);
        assert!(
            found
                .iter()
                .any(|v| matches!(v, PlanViolation::BadAlias { tensor, .. } if graph.tensor(*tensor).name == "q")),
            "delta {delta}: {found:?}"
        );
    }
}

/// The same split at an even element is two views, at bytes 0 and 2.
#[test]
fn a_sub_byte_split_on_byte_boundaries_is_two_views() {
    let mut g = GraphBuilder::new("split_i4_even");
    let x = g.input("x", DType::I4, [1, 8]);
    let a = g.op("Conv", &[x], DType::I4, [1, 8]);
    let p = g.tensor("p", DType::I4, [1, 4], TensorKind::Activation);
    let q = g.tensor("q", DType::I4, [1, 4], TensorKind::Activation);
    g.node("split", "Split", &[Some(a)], &[p, q]);
    g.attr("axis", Attr::Int(1));
    let y = g.op("Concat", &[p, q], DType::I4, [1, 8]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(alias(&plan, p), Some((a, AliasKind::View)));
    assert_eq!(alias(&plan, q), Some((a, AliasKind::View)));
    let base = plan.buffers.iter().find(|b| b.tensor == a).unwrap().offset;
    let q_at = plan.buffers.iter().find(|b| b.tensor == q).unwrap().offset;
    assert_eq!(q_at, base + 2);
}

/// `Add(x: i4[1], y: i4[2]) -> z: i4[2]`: one byte each, but `x` is broadcast, read at
/// every index: `z` is not written over it.
#[test]
fn in_place_needs_the_same_element_count_not_the_same_bytes() {
    let mut g = GraphBuilder::new("broadcast_i4");
    let x0 = g.input("x0", DType::I4, [1]);
    let x = g.op("Conv", &[x0], DType::I4, [1]);
    let y = g.input("y", DType::I4, [2]);
    let z = g.op("Add", &[x, y], DType::I4, [2]);
    let out = g.op("Conv", &[z], DType::I4, [2]);
    g.mark_output(out);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(alias(&plan, z), None);
    let found = violations(&graph, &mutant(&plan, z, x, AliasKind::InPlace, 0));
    assert!(
        found
            .iter()
            .any(|v| matches!(v, PlanViolation::BadAlias { tensor, .. } if graph.tensor(*tensor).name == "t3_Add")),
        "{found:?}"
    );
}

fn batch_norm(training: Option<i64>) -> (Graph, TensorId, TensorId) {
    let mut g = GraphBuilder::new("bn");
    let x = g.input("x", DType::F32, [1, 4, 2, 2]);
    let a = g.op("Conv", &[x], DType::F32, [1, 4, 2, 2]);
    let params: Vec<Option<TensorId>> = ["scale", "b", "mean", "var"]
        .iter()
        .map(|n| Some(g.weight(*n, DType::F32, [4])))
        .collect();
    let bn = g.tensor("bn", DType::F32, [1, 4, 2, 2], TensorKind::Activation);
    let mut inputs = vec![Some(a)];
    inputs.extend(params);
    g.node("norm", "BatchNormalization", &inputs, &[bn]);
    if let Some(t) = training {
        g.attr("training_mode", Attr::Int(t));
    }
    let y = g.op("Conv", &[bn], DType::F32, [1, 4, 2, 2]);
    g.mark_output(y);
    (g.build().unwrap(), a, bn)
}

#[test]
fn training_mode_batch_norm_is_not_in_place() {
    let (graph, a, bn) = batch_norm(Some(1));
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(alias(&plan, bn), None);
    let found = violations(&graph, &mutant(&plan, bn, a, AliasKind::InPlace, 0));
    assert!(
        found
            .iter()
            .any(|v| matches!(v, PlanViolation::BadAlias { tensor, .. } if graph.tensor(*tensor).name == "bn")),
        "{found:?}"
    );
    // Inference mode (explicit 0 or absent) stays in place.
    for t in [Some(0), None] {
        let (graph, a, bn) = batch_norm(t);
        let plan = plan_ok(&graph, &PlanOptions::default());
        assert_eq!(alias(&plan, bn), Some((a, AliasKind::InPlace)), "{t:?}");
    }
}

#[test]
fn a_split_whose_outputs_contradict_its_parameters_is_invalid() {
    let mut g = GraphBuilder::new("split_lies");
    let x = g.input("x", DType::F32, [6]);
    let a = g.op("Conv", &[x], DType::F32, [6]);
    let p = g.tensor("p", DType::F32, [2], TensorKind::Activation);
    let q = g.tensor("q", DType::F32, [4], TensorKind::Activation);
    g.node("split", "Split", &[Some(a)], &[p, q]);
    g.attr("split", Attr::Ints(vec![4, 2]));
    let y = g.op("Concat", &[p, q], DType::F32, [6]);
    g.mark_output(y);
    let graph = g.build_unchecked();
    let Err(PlanError::Invalid(errors)) = plan_graph(&graph, &PlanOptions::default()) else {
        panic!("a contradicting Split must not be planned");
    };
    let split = graph
        .nodes()
        .ids()
        .find(|&n| graph.nodes()[n].name == "split");
    assert!(errors.errors.iter().any(|e| matches!(e,
        ValidationError::SplitMismatch { node, output, position: 0, expected: 4, declared: 2 } if Some(*node) == split && *output == Some(p))),
        "{errors}");
    // The errors carry the graph they were found in: their message names its entities.
    assert!(
        errors
            .to_string()
            .contains("Split `split`: output `p` is declared with 2"),
        "{errors}"
    );
}

#[test]
fn a_constant_value_on_a_graph_input_is_invalid() {
    let mut g = GraphBuilder::new("value_on_input");
    let x = g.input("x", DType::I64, [2]);
    let y = g.op("Neg", &[x], DType::I64, [2]);
    g.mark_output(y);
    let mut graph = g.build_unchecked();
    graph.set_int_value(x, Some(vec![1, 2]));
    let errors = graph.validate().unwrap_err();
    assert!(
        errors.errors.iter().any(|e| matches!(e,
        ValidationError::ValueOnNonWeight { tensor, kind: TensorKind::Input } if *tensor == x)),
        "{errors}"
    );
}

/// V1: `y = Add(a, v)` with `v` a view of `a`: writing `y` over `a` destroys `v` while the
/// same node reads it.
#[test]
fn the_verifier_rejects_in_place_over_bytes_another_input_reads() {
    let mut g = GraphBuilder::new("v1");
    let x = g.input("x", DType::F32, [8]);
    let a = g.op("Conv", &[x], DType::F32, [8]);
    let v = g.op("Identity", &[a], DType::F32, [8]);
    let y = g.op("Add", &[a, v], DType::F32, [8]);
    let out = g.op("Conv", &[y], DType::F32, [8]);
    g.mark_output(out);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(alias(&plan, v), Some((a, AliasKind::View)));
    assert_eq!(alias(&plan, y), None, "the planner refuses it");
    let found = violations(&graph, &mutant(&plan, y, a, AliasKind::InPlace, 0));
    assert!(
        found.iter().any(|e| matches!(e, PlanViolation::InPlaceOverRead { tensor, other, .. } if graph.tensor(*tensor).name == "t3_Add" && graph.tensor(*other).name == "t2_Identity")),
        "{found:?}"
    );
}

/// V2: a graph output overwritten in place at the last step; the caller reads it after.
#[test]
fn the_verifier_rejects_in_place_over_a_graph_output() {
    let mut g = GraphBuilder::new("v2");
    let x = g.input("x", DType::F32, [8]);
    let o = g.op("Conv", &[x], DType::F32, [8]);
    let z = g.op("Relu", &[o], DType::F32, [8]);
    g.mark_output(o);
    g.mark_output(z);
    let graph = g.build().unwrap();
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(alias(&plan, z), None);
    let found = violations(&graph, &mutant(&plan, z, o, AliasKind::InPlace, 0));
    assert!(
        found.iter().any(|e| matches!(e, PlanViolation::InPlaceOverOutput { tensor, output } if graph.tensor(*tensor).name == "t2_Relu" && graph.tensor(*output).name == "t1_Conv")),
        "{found:?}"
    );
}

/// V3: overwriting a graph input is allowed only when the plan's settings say so.
#[test]
fn the_verifier_enforces_the_input_policy_the_plan_records() {
    let mut g = GraphBuilder::new("v3");
    let x = g.input("x", DType::F32, [8]);
    let r = g.op("Relu", &[x], DType::F32, [8]);
    let y = g.op("Conv", &[r], DType::F32, [8]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let allowed = PlanOptions::default().with_inplace_over_inputs(true);
    let plan = plan_ok(&graph, &allowed);
    assert_eq!(alias(&plan, r), Some((x, AliasKind::InPlace)));
    let mut strict = plan.clone();
    strict.settings.inplace_over_inputs = false;
    let found = violations(&graph, &strict);
    assert!(
        found
            .iter()
            .any(|e| matches!(e, PlanViolation::InPlaceOverInput { input, .. } if graph.tensor(*input).name == "x")),
        "{found:?}"
    );
    // And aliasing a kind the settings turn off.
    let mut no_inplace = plan.clone();
    no_inplace.settings.inplace = false;
    let found = violations(&graph, &no_inplace);
    assert!(
        found.iter().any(|e| matches!(
            e,
            PlanViolation::Policy {
                kind: AliasKind::InPlace,
                ..
            }
        )),
        "{found:?}"
    );
}

/// A custom op rule's alias that the verifier's own rules cannot confirm is trusted, and
/// listed; strict verification refuses it. An op the table does not make custom gets no
/// such trust.
#[test]
fn custom_rules_are_trusted_not_verified_unless_strict() {
    let mut g = GraphBuilder::new("custom");
    let x = g.input("x", DType::F32, [8]);
    let a = g.op("Conv", &[x], DType::F32, [8]);
    let v = g.op("my.Reinterpret", &[a], DType::F32, [8]);
    let y = g.op("Conv", &[v], DType::F32, [8]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let mut ops = OpTable::default();
    ops.insert(
        "my.Reinterpret",
        OpRule::Custom(Arc::new(|_, _, _| {
            vec![MemorySemantics::View {
                input: 0,
                offset: 0,
            }]
        })),
    );
    let options = PlanOptions::default().with_op_table(ops.clone());
    let plan = plan_ok(&graph, &options);
    assert_eq!(alias(&plan, v), Some((a, AliasKind::View)));
    let lenient = verify_plan_report(&graph, &plan, false);
    assert!(lenient.violations.is_empty(), "{:?}", lenient.violations);
    assert_eq!(lenient.trusted.len(), 1);
    let strict = verify_plan_report(&graph, &plan, true);
    assert!(
        matches!(&strict.violations[..], [PlanViolation::Unconfirmed { tensor, op, .. }] if graph.tensor(*tensor).name == "t2_my.Reinterpret" && op == "my.Reinterpret"),
        "{:?}",
        strict.violations
    );
    // Without the custom table the same plan is simply wrong.
    let mut plain = plan.clone();
    plain.settings.op_table = OpTable::default();
    assert!(!violations(&graph, &plain).is_empty());
}

/// The plan file round-trips every field, records what checking needs, and a file from
/// before those fields existed still loads.
#[test]
fn the_plan_file_round_trips_and_old_files_load() {
    let mut g = GraphBuilder::new("file");
    let batch = g.symbol("batch");
    let x = g.input("x", DType::F32, [memplan_ir::Expr::symbol(batch), 4.into()]);
    let r = g.op(
        "Relu",
        &[x],
        DType::F32,
        [memplan_ir::Expr::symbol(batch), 4.into()],
    );
    let y = g.op(
        "Reshape",
        &[r],
        DType::F32,
        [memplan_ir::Expr::symbol(batch), 4.into()],
    );
    g.mark_output(y);
    let graph = g.build().unwrap();
    let options = PlanOptions::default()
        .with_bindings(memplan_ir::Bindings::new().with(batch, 3))
        .with_alignment(1);
    let plan = plan_ok(&graph, &options);
    let text = plan.to_json(&graph);
    let back = Plan::from_json(&graph, &text).unwrap();
    assert_eq!(back, plan);
    assert_eq!(back.to_json(&graph), text);
    assert_eq!(back.settings.bindings, vec![("batch".to_owned(), 3)]);
    assert_eq!(back.alignment, 1);
    assert!(back.settings.bindings_for(&graph).is_ok());
    verify_plan(&graph, &back).unwrap();

    let mut old: serde_json::Value = serde_json::from_str(&text).unwrap();
    for key in ["weight_bytes", "alignment", "settings", "stats"] {
        old.as_object_mut().unwrap().remove(key);
    }
    let mut old = Plan::from_json(&graph, &old.to_string()).unwrap();
    assert_eq!(old.buffers, plan.buffers);
    assert_eq!(old.alignment, 1);
    // An old file records no bindings: sizes of a symbolic graph are then unknown, said
    // clearly; given the bindings, it verifies.
    let unbound = verify_plan(&graph, &old)
        .unwrap_err()
        .with_graph(&graph)
        .to_string();
    assert!(unbound.contains("has no value"), "{unbound}");
    old.settings.bindings = vec![("batch".to_owned(), 3)];
    verify_plan(&graph, &old).unwrap();

    for (bad, what) in [
        ("{", "not a plan file"),
        (
            &text.replace("\"t1_Relu\"", "\"nope\"")[..],
            "tensor `nope`",
        ),
        (
            &text.replace("\"view\"}", "\"sideways\"}")[..],
            "alias kind",
        ),
    ] {
        let e = Plan::from_json(&graph, bad).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
}

/// A Reshape declared with another element count would be planned as a view of the wrong
/// size; validation refuses it.
#[test]
fn a_reshape_that_changes_the_element_count_is_invalid() {
    let mut g = GraphBuilder::new("reshape_lies");
    let x = g.input("x", DType::F32, [6]);
    let a = g.op("Conv", &[x], DType::F32, [6]);
    let y = g.op("Reshape", &[a], DType::F32, [2, 4]);
    g.mark_output(y);
    let graph = g.build_unchecked();
    let errors = graph.validate().unwrap_err();
    assert!(
        errors.errors.iter().any(|e| matches!(
            e,
            ValidationError::ElementsChanged {
                input_elements: 6,
                output_elements: 8,
                ..
            }
        )),
        "{errors}"
    );
}

/// `alignment: 1` still puts every element on its natural boundary (an `f16` never at an
/// odd byte); the verifier refuses a plan that does not.
#[test]
fn elements_stay_on_their_natural_boundary_at_alignment_one() {
    let mut g = GraphBuilder::new("odd");
    let x = g.input("x", DType::U8, [3]);
    let a = g.op("Conv", &[x], DType::U8, [3]);
    let h = g.op("Conv", &[x, a], DType::F16, [5]);
    let y = g.op("Conv", &[a, h], DType::F32, [3]);
    g.mark_output(y);
    let graph = g.build().unwrap();
    let options = PlanOptions::default().with_alignment(1);
    let plan = plan_ok(&graph, &options);
    for b in &plan.buffers {
        let natural = graph.tensors()[b.tensor].dtype.element_align();
        assert_eq!(b.offset % natural, 0, "{}", graph.tensors()[b.tensor].name);
    }
    let mut odd = plan.clone();
    for b in odd.buffers.iter_mut().filter(|b| b.tensor == h) {
        b.offset = 1;
    }
    odd.arena_bytes = odd.arena_bytes.max(1 + 10);
    let found = violations(&graph, &odd);
    assert!(
        found.iter().any(|e| matches!(
            e,
            PlanViolation::Misaligned {
                offset: 1,
                alignment: 2,
                ..
            }
        )),
        "{found:?}"
    );
}

/// Element-wise ops that had a shape rule but no in-place rule now write in place, and the
/// verifier's own rules agree.
#[test]
fn more_elementwise_ops_write_in_place() {
    for (op, dtype) in [
        ("Sinh", DType::F32),
        ("Acos", DType::F16),
        ("Atanh", DType::F32),
        ("Swish", DType::F32),
        ("BitwiseNot", DType::I32),
    ] {
        let mut g = GraphBuilder::new("unary");
        let x = g.input("x", dtype, [64]);
        let a = g.op("Conv", &[x], dtype, [64]);
        let u = g.op(op, &[a], dtype, [64]);
        let y = g.op("Conv", &[u], dtype, [64]);
        g.mark_output(y);
        let graph = g.build().unwrap();
        let plan = plan_ok(&graph, &PlanOptions::default());
        assert_eq!(alias(&plan, u), Some((a, AliasKind::InPlace)), "{op}");
    }
}

/// Row-wise ops (Softmax, the normalisations) write output 0 over input 0 when nothing
/// later reads it; never over another operand, never over an input read later; and not at
/// all when the op table makes the op opaque, which the plan file records.
#[test]
fn row_wise_ops_write_over_their_data_input_only() {
    let mut g = GraphBuilder::new("rows");
    let x = g.input("x", DType::F32, [4, 64]);
    let w = g.weight("w", DType::F32, [64, 64]);
    let scores = g.op("MatMul", &[x, w], DType::F32, [4, 64]);
    let probs = g.op("Softmax", &[scores], DType::F32, [4, 64]);
    g.attr("axis", Attr::Int(-1));
    // LayerNormalization whose scale is an activation of the same size: only the data
    // operand may be overwritten.
    let scale = g.op("Relu", &[probs], DType::F32, [4, 64]);
    let normed = g.op("LayerNormalization", &[probs, scale], DType::F32, [4, 64]);
    let kept = g.op("Softmax", &[normed], DType::F32, [4, 64]);
    let y = g.op("Add", &[kept, normed], DType::F32, [4, 64]);
    g.mark_output(y);
    let graph = g.build().expect("valid");
    let plan = plan_ok(&graph, &PlanOptions::default());
    assert_eq!(alias(&plan, probs), Some((scores, AliasKind::InPlace)));
    // `probs` is read by the normalisation too, but it runs last among its readers.
    assert_eq!(alias(&plan, normed), Some((probs, AliasKind::InPlace)));
    // `normed` is read after the second Softmax: no in-place there.
    assert_eq!(alias(&plan, kept), None);

    // Mutants: over the scale operand, and over an input read later.
    let over_scale = mutant(&plan, normed, scale, AliasKind::InPlace, 0);
    assert!(!violations(&graph, &over_scale).is_empty());
    let over_live = mutant(&plan, kept, normed, AliasKind::InPlace, 0);
    assert!(!violations(&graph, &over_live).is_empty());

    // Kernels that cannot normalise in place: the op table makes Softmax opaque.
    let mut table = OpTable::default();
    table.insert("Softmax", OpRule::Opaque);
    let options = PlanOptions::default().with_op_table(table);
    let plain = plan_ok(&graph, &options);
    assert_eq!(alias(&plain, probs), None);
    assert!(plain.arena_bytes >= plan.arena_bytes);
    // The default plan checked against that table is refused, op by op.
    let mut claimed = plan.clone();
    claimed.settings.op_table = options.op_table.clone();
    let found = violations(&graph, &claimed);
    assert!(
        found
            .iter()
            .any(|e| matches!(e, PlanViolation::OpaqueOp { op, .. } if op == "Softmax")),
        "{found:?}"
    );
    // The plan file keeps the table's opaque ops, so a plan read back is checked the same.
    let back = Plan::from_json(&graph, &claimed.to_json(&graph)).expect("reads back");
    assert_eq!(back.settings.op_table.made_opaque(), vec!["Softmax"]);
    assert!(!violations(&graph, &back).is_empty());
}

/// The plans of `graph` at alignment 64 with Concat elision on (the default) and off, both
/// verified.
fn with_and_without_elision(graph: &Graph) -> (Plan, Plan) {
    let on = PlanOptions::default().with_alignment(64);
    let off = on.clone().with_concat_elision(false);
    (plan_ok(graph, &on), plan_ok(graph, &off))
}

/// Concat elision where it pays: `d` is made from a small tensor right before the Concat,
/// and `a` right after the input, so writing both into the output lowers the peak (4 KiB at
/// the Concat without elision; 3 KiB with it, at step 0). Both become parts at their slices;
/// the verifier refuses a part moved off its slice, a graph output as a part, and a part of
/// a tensor no Concat makes.
#[test]
fn concat_inputs_are_written_into_the_output_where_that_lowers_the_peak() {
    let mut g = GraphBuilder::new("concat");
    let x = g.input("x", DType::F32, [1, 4, 8, 8]);
    let a = g.op("Conv", &[x], DType::F32, [1, 4, 8, 8]);
    let s = g.op("Conv", &[a], DType::F32, [1, 1, 8, 8]);
    let d = g.op("Resize", &[s], DType::F32, [1, 4, 8, 8]);
    let y = g.op("Concat", &[a, d], DType::F32, [1, 8, 8, 8]);
    g.attr("axis", Attr::Int(1));
    g.mark_output(y);
    let graph = g.build().expect("valid");
    let (plan, plain) = with_and_without_elision(&graph);
    let part = |t| {
        let b = plan.buffer(t).expect("a buffer");
        match b.alias {
            Some(Alias::Part { of, offset }) => Some((of, offset)),
            _ => None,
        }
    };
    assert_eq!(part(a), Some((y, 0)));
    assert_eq!(part(d), Some((y, 1024)));
    assert_eq!(plan.stats.parts, 2);
    assert_eq!(plan.lower_bound_bytes, 3072);
    assert_eq!(plain.lower_bound_bytes, 4096);
    assert!(plan.arena_bytes < plain.arena_bytes);
    // The order-free bound knows elision: it stays below what the plan reaches.
    assert!(plan.stats.schedule.any_order_bound <= plan.lower_bound_bytes);

    let mut moved = plan.clone();
    for b in moved.buffers.iter_mut().filter(|b| b.tensor == d) {
        b.offset += 64;
        b.alias = Some(Alias::Part {
            of: y,
            offset: 1088,
        });
    }
    assert!(!violations(&graph, &moved).is_empty());
    let wrong_parent = mutant(&plan, s, d, AliasKind::Part, 0);
    assert!(!violations(&graph, &wrong_parent).is_empty());
    let mut off = plan.clone();
    off.settings.concat_elision = false;
    assert!(violations(&graph, &off).iter().any(|e| matches!(
        e,
        PlanViolation::Policy {
            kind: AliasKind::Part,
            ..
        }
    )));
    // The plan file keeps parts.
    let back = Plan::from_json(&graph, &plan.to_json(&graph)).expect("reads back");
    assert_eq!(back.buffers, plan.buffers);
    assert!(violations(&graph, &back).is_empty());
}

/// Concat elision where it does not pay (a DenseNet-like skip produced long before its
/// Concat, with a big tensor in between): no part is made, and the plan is the one without
/// elision.
#[test]
fn concat_elision_is_skipped_where_it_would_raise_the_peak() {
    let mut g = GraphBuilder::new("dense");
    let x = g.input("x", DType::F32, [1, 4, 8, 8]);
    let a = g.op("Conv", &[x], DType::F32, [1, 4, 8, 8]);
    let b = g.op("Conv", &[a], DType::F32, [1, 16, 8, 8]);
    let c = g.op("Conv", &[b], DType::F32, [1, 4, 8, 8]);
    let y = g.op("Concat", &[a, c], DType::F32, [1, 8, 8, 8]);
    g.attr("axis", Attr::Int(1));
    g.mark_output(y);
    let graph = g.build().expect("valid");
    let (plan, plain) = with_and_without_elision(&graph);
    assert_eq!(plan.stats.parts, 0);
    assert_eq!(plan.buffers, plain.buffers);
    assert_eq!(plan.lower_bound_bytes, 6144);
}
