//! Training state and in-place updates in the IR: the `state` kind in the JSON format, which
//! inputs an op updates, and which inputs an op reads only the shape of.

use memplan_ir::{DType, Graph, GraphBuilder, OpTable, TensorKind, reads_bytes};

#[test]
fn state_round_trips_through_json_and_may_be_written_once() {
    let mut b = GraphBuilder::new("g");
    let w = b.tensor("w", DType::F32, [4], TensorKind::State);
    let x = b.input("x", DType::F32, [4]);
    let g = b.tensor("w_grad", DType::F32, [4], TensorKind::State);
    b.node("grad", "Mul", &[Some(x), Some(w)], &[g]);
    let graph = b.build().unwrap();
    assert!(TensorKind::State.is_persistent() && TensorKind::Weight.is_persistent());
    assert!(!TensorKind::Input.is_persistent());
    let json = graph.to_json();
    assert!(json.contains(r#""kind":"state""#), "{json}");
    let back = Graph::from_json(&json).unwrap();
    assert_eq!(back.tensor(w).kind, TensorKind::State);
    assert_eq!(back.tensor(g).kind, TensorKind::State);
    // A state tensor with two producers is refused like any other.
    let mut b = GraphBuilder::new("two");
    let x = b.input("x", DType::F32, [4]);
    let s = b.tensor("s", DType::F32, [4], TensorKind::State);
    b.node("a", "Relu", &[Some(x)], &[s]);
    b.node("b", "Relu", &[Some(x)], &[s]);
    assert!(b.build().is_err());
}

#[test]
fn updated_inputs_and_shape_reads() {
    let mut b = GraphBuilder::new("g");
    let xs: Vec<_> = (0..6)
        .map(|i| b.input(format!("x{i}"), DType::F32, [4]))
        .collect();
    let some = |k: usize| xs.iter().take(k).map(|&x| Some(x)).collect::<Vec<_>>();
    let out = |b: &mut GraphBuilder, n: &str| b.tensor(n, DType::Bool, [1], TensorKind::Output);
    let o1 = out(&mut b, "o1");
    let acc = b.node("acc", "com.microsoft.InPlaceAccumulatorV2", &some(3), &[o1]);
    let o2 = out(&mut b, "o2");
    let adamw = b.node("adamw", "com.microsoft.AdamWOptimizer", &some(6), &[o2]);
    let mut partial = some(6);
    partial[4] = None;
    let o3 = out(&mut b, "o3");
    let partial_adamw = b.node("adamw2", "com.microsoft.AdamWOptimizer", &partial, &[o3]);
    let o4 = out(&mut b, "o4");
    let adam = b.node("adam", "memplan.Adam", &some(5), &[o4]);
    let shape = b.tensor("shape", DType::I64, [1], TensorKind::Output);
    let sh = b.node("shape", "Shape", &some(1), &[shape]);
    let g = b.build_unchecked();
    let t = OpTable::default();
    assert_eq!(t.mutated_inputs(g.node(acc)).as_slice(), &[0]);
    assert_eq!(t.mutated_inputs(g.node(adamw)).as_slice(), &[2, 4, 5]);
    assert_eq!(t.mutated_inputs(g.node(partial_adamw)).as_slice(), &[2, 5]);
    assert_eq!(t.mutated_inputs(g.node(adam)).as_slice(), &[0, 2, 3, 4]);
    assert!(t.mutated_inputs(g.node(sh)).is_empty());
    assert!(!reads_bytes(g.node(sh), 0) && reads_bytes(g.node(adam), 0));
    // A table may declare its own updating ops, or drop one.
    let mut custom = OpTable::default();
    custom.insert_mutation("MyAccumulate", &[1]);
    custom.insert_mutation("memplan.Adam", &[]);
    assert!(custom.mutated_inputs(g.node(adam)).is_empty());
    assert!(custom.has_mutations());
}
