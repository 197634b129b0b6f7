//! Memory semantics: which outputs are views, which may run in place, and when the rules
//! decline.

use std::sync::Arc;

use memplan_ir::{Attr, Bindings, DType, Expr, GraphBuilder, MemorySemantics, OpRule, OpTable};
use smallvec::smallvec;

fn semantics_of_last(b: GraphBuilder) -> Vec<MemorySemantics> {
    let g = b.build().expect("valid graph");
    let node = g.nodes().as_slice().last().unwrap();
    OpTable::default().semantics(&g, node, &Bindings::new())
}

#[test]
fn reshape_is_a_view_at_offset_zero() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [2, 3, 4]);
    let shape = b.int_constant("shape", &[6, 4]);
    b.op("Reshape", &[x, shape], DType::F32, [6, 4]);
    assert_eq!(
        semantics_of_last(b),
        vec![MemorySemantics::View {
            input: 0,
            offset: 0
        }]
    );
}

#[test]
fn cast_is_a_view_only_to_the_same_dtype() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [8]);
    b.op("Cast", &[x], DType::F32, [8]);
    assert_eq!(
        semantics_of_last(b),
        vec![MemorySemantics::View {
            input: 0,
            offset: 0
        }]
    );
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [8]);
    b.op("Cast", &[x], DType::F16, [8]);
    assert_eq!(semantics_of_last(b), vec![MemorySemantics::Opaque]);
}

#[test]
fn split_along_the_outermost_axis_gives_consecutive_views() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F16, [1, 10, 4]);
    let y0 = b.tensor(
        "y0",
        DType::F16,
        [1, 3, 4],
        memplan_ir::TensorKind::Activation,
    );
    let y1 = b.tensor(
        "y1",
        DType::F16,
        [1, 7, 4],
        memplan_ir::TensorKind::Activation,
    );
    b.node("split", "Split", &[Some(x)], &[y0, y1]);
    b.attr("axis", Attr::Int(1));
    b.attr("split", Attr::Ints(vec![3, 7]));
    assert_eq!(
        semantics_of_last(b),
        vec![
            MemorySemantics::View {
                input: 0,
                offset: 0
            },
            MemorySemantics::View {
                input: 0,
                offset: 3 * 4 * 2
            }
        ]
    );
    // Along an inner axis of a tensor with an outer dim > 1 the chunks are strided.
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F16, [2, 10]);
    let y0 = b.tensor("y0", DType::F16, [2, 5], memplan_ir::TensorKind::Activation);
    let y1 = b.tensor("y1", DType::F16, [2, 5], memplan_ir::TensorKind::Activation);
    b.node("split", "Split", &[Some(x)], &[y0, y1]);
    b.attr("axis", Attr::Int(-1));
    assert_eq!(
        semantics_of_last(b),
        vec![MemorySemantics::Opaque, MemorySemantics::Opaque]
    );
}

#[test]
fn slice_views_need_known_contiguous_bounds() {
    // x[0, 2:5, :] of a [3, 6, 4] f32 tensor: row 0 of axis 0, rows 2..5 of axis 1, all of
    // axis 2 is contiguous, at element (0*6 + 2)*4 = 8, byte 32.
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [3, 6, 4]);
    let starts = b.int_constant("starts", &[0, 2]);
    let ends = b.int_constant("ends", &[1, 5]);
    let axes = b.int_constant("axes", &[0, 1]);
    b.op("Slice", &[x, starts, ends, axes], DType::F32, [1, 3, 4]);
    assert_eq!(
        semantics_of_last(b),
        vec![MemorySemantics::View {
            input: 0,
            offset: 32
        }]
    );

    // Negative and out-of-range bounds clamp as ONNX says: x[-2:1000] of [5, 2] is rows 3..5.
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [5, 2]);
    let starts = b.int_constant("starts", &[-2]);
    let ends = b.int_constant("ends", &[1000]);
    b.op("Slice", &[x, starts, ends], DType::F32, [2, 2]);
    assert_eq!(
        semantics_of_last(b),
        vec![MemorySemantics::View {
            input: 0,
            offset: 24
        }]
    );

    // A slice of the inner axis with an outer dim > 1 is strided: opaque.
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [3, 6]);
    let starts = b.int_constant("starts", &[1]);
    let ends = b.int_constant("ends", &[3]);
    let axes = b.int_constant("axes", &[1]);
    b.op("Slice", &[x, starts, ends, axes], DType::F32, [3, 2]);
    assert_eq!(semantics_of_last(b), vec![MemorySemantics::Opaque]);

    // Bounds that are not known constants: opaque.
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [4]);
    let starts = b.weight("starts", DType::I64, [1]);
    let ends = b.weight("ends", DType::I64, [1]);
    b.op("Slice", &[x, starts, ends], DType::F32, [2]);
    assert_eq!(semantics_of_last(b), vec![MemorySemantics::Opaque]);
}

#[test]
fn elementwise_ops_may_run_over_inputs_of_the_same_size_and_dtype() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [4, 8]);
    let bias = b.weight("bias", DType::F32, [8]);
    let y = b.op("Relu", &[x], DType::F32, [4, 8]);
    b.op("Add", &[bias, y], DType::F32, [4, 8]);
    assert_eq!(
        semantics_of_last(b),
        vec![MemorySemantics::InPlace {
            inputs: smallvec![1]
        }]
    );

    // A comparison writes bool: no input has its dtype.
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [4]);
    let y = b.input("y", DType::F32, [4]);
    b.op("Equal", &[x, y], DType::Bool, [4]);
    assert_eq!(semantics_of_last(b), vec![MemorySemantics::Opaque]);
}

#[test]
fn symbolic_sizes_are_compared_under_bindings() {
    let mut b = GraphBuilder::new("g");
    let batch = Expr::symbol(b.symbol("batch"));
    let x = b.input("x", DType::F32, [batch.clone(), Expr::constant(4)]);
    b.op("Sigmoid", &[x], DType::F32, [batch, Expr::constant(4)]);
    let g = b.build().unwrap();
    let node = &g.nodes().as_slice()[0];
    let table = OpTable::default();
    let bound = g.bind(&[("batch", 3)]).unwrap();
    assert_eq!(
        table.semantics(&g, node, &bound),
        vec![MemorySemantics::InPlace {
            inputs: smallvec![0]
        }]
    );
    // Unbound: nothing can be checked, so nothing is claimed.
    assert_eq!(
        table.semantics(&g, node, &Bindings::new()),
        vec![MemorySemantics::Opaque]
    );
}

#[test]
fn users_extend_the_table_for_custom_ops() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, [16]);
    b.op("my.Fused", &[x], DType::F32, [16]);
    let g = b.build().unwrap();
    let node = &g.nodes().as_slice()[0];
    let mut table = OpTable::default();
    assert_eq!(
        table.semantics(&g, node, &Bindings::new()),
        vec![MemorySemantics::Opaque]
    );
    table.insert("my.Fused", OpRule::Elementwise);
    assert_eq!(
        table.semantics(&g, node, &Bindings::new()),
        vec![MemorySemantics::InPlace {
            inputs: smallvec![0]
        }]
    );
    table.insert(
        "my.Fused",
        OpRule::Custom(Arc::new(|_, _, _| {
            vec![MemorySemantics::View {
                input: 0,
                offset: 4,
            }]
        })),
    );
    assert_eq!(
        table.semantics(&g, node, &Bindings::new()),
        vec![MemorySemantics::View {
            input: 0,
            offset: 4
        }]
    );
}
