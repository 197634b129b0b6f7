//! Reading an engine's own graph through `GraphSource`: ids both ways, declared semantics
//! kept only where the sizes allow them, no op name deciding anything, and every bad
//! declaration an error that names it.

use std::borrow::Cow;

use memplan_ir::{
    DType, Dim, GraphSource, ImportError, MemorySemantics, NodeDecl, TensorDecl, TensorKind, import,
};

/// A graph given as plain lists, with string handles.
struct Lists {
    tensors: Vec<(&'static str, DType, Vec<Dim>, TensorKind)>,
    nodes: Vec<NodeDecl<'static, &'static str>>,
}

impl GraphSource for Lists {
    type Tensor = &'static str;
    type Node = usize;
    fn name(&self) -> Cow<'_, str> {
        "lists".into()
    }
    fn tensors(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.tensors.iter().map(|t| t.0)
    }
    fn tensor(&self, t: &'static str) -> TensorDecl<'_> {
        let (name, dtype, shape, kind) = self.tensors.iter().find(|x| x.0 == t).unwrap();
        TensorDecl::new(*name, *dtype, shape.clone(), *kind)
    }
    fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        0..self.nodes.len()
    }
    fn node(&self, n: usize) -> NodeDecl<'_, &'static str> {
        self.nodes[n].clone()
    }
}

fn t(
    name: &'static str,
    shape: &[&str],
    kind: TensorKind,
) -> (&'static str, DType, Vec<Dim>, TensorKind) {
    let dims = shape
        .iter()
        .map(|d| match d.parse::<u64>() {
            Ok(v) => Dim::Fixed(v),
            Err(_) => Dim::from(*d),
        })
        .collect();
    (name, DType::F32, dims, kind)
}

fn base(nodes: Vec<NodeDecl<'static, &'static str>>) -> Lists {
    Lists {
        tensors: vec![
            t("x", &["batch", "16"], TensorKind::Input),
            t("a", &["batch", "16"], TensorKind::Activation),
            t("b", &["16", "batch"], TensorKind::Activation),
            t("half", &["batch", "8"], TensorKind::Activation),
            t("y", &["2*batch", "8"], TensorKind::Output),
        ],
        nodes,
    }
}

#[test]
fn ids_map_both_ways_and_declarations_are_kept() {
    let src = base(vec![
        // Named like ONNX ops on purpose: the names decide nothing.
        NodeDecl::new("n0", "Shape", ["x"], ["a"]).in_place(0, &[0]),
        NodeDecl::new("n1", "transpose", ["a"], ["b"]).with_scratch(100),
        NodeDecl::new("n2", "narrow", ["b"], ["half"]).view(0, 0, 0),
        NodeDecl::new("n3", "Relu", ["b"], ["y"]).view(0, 0, 0),
    ]);
    let imported = import(&src).unwrap();
    let g = imported.graph();
    assert_eq!(g.nodes().len(), 4);
    for name in ["x", "a", "b", "half", "y"] {
        let id = imported.tensor_id(name).unwrap();
        assert_eq!(g.tensors()[id].name, name);
        assert_eq!(imported.tensor_of(id), Some(name));
    }
    assert_eq!(imported.node_of(imported.node_id(2).unwrap()), Some(2));
    assert_eq!(g.outputs(), vec![imported.tensor_id("y").unwrap()]);
    // Symbols come by name, expressions parse.
    let b = g.bind(&[("batch", 4)]).unwrap();
    assert_eq!(
        g.tensors()[imported.tensor_id("y").unwrap()]
            .bytes(&b)
            .unwrap(),
        2 * 4 * 8 * 4
    );
    // Ops are namespaced: no built-in rule has them, and `Shape` reads its input's bytes.
    let n0 = g.node(imported.node_id(0).unwrap());
    assert_eq!(n0.op, "engine.Shape");
    assert!(memplan_ir::reads_bytes(n0, 0));
    let table = imported.op_table();
    let sem = |n: usize| table.semantics(g, g.node(imported.node_id(n).unwrap()), &b);
    assert_eq!(
        sem(0),
        vec![MemorySemantics::InPlace {
            inputs: [0].into_iter().collect()
        }]
    );
    // The scratch output of n1 is its own, opaque, and read by nobody.
    let scratch = imported.scratch(1).unwrap();
    assert_eq!(g.tensors()[scratch].name, "n1.scratch");
    assert_eq!(g.tensors()[scratch].bytes(&b).unwrap(), 100);
    assert_eq!(imported.tensor_of(scratch), None);
    assert_eq!(sem(1), vec![MemorySemantics::Opaque; 2]);
    assert_eq!(imported.scratch(0), None);
    // A view that fits is kept; one larger than its input becomes opaque (y has the bytes
    // of b, so it fits; `half` is half of b).
    assert_eq!(
        sem(2),
        vec![MemorySemantics::View {
            input: 0,
            offset: 0
        }]
    );
    assert_eq!(
        sem(3),
        vec![MemorySemantics::View {
            input: 0,
            offset: 0
        }]
    );
}

#[test]
fn declarations_the_sizes_refuse_become_opaque() {
    let src = base(vec![
        NodeDecl::new("n0", "grow", ["x"], ["a"]).view(0, 0, 8),
        NodeDecl::new("n1", "shrink", ["a"], ["half"]).in_place(0, &[0]),
        NodeDecl::new("n2", "ok", ["a"], ["b"]),
        NodeDecl::new("n3", "ok2", ["b"], ["y"]),
    ]);
    let imported = import(&src).unwrap();
    let g = imported.graph();
    let b = g.bind(&[("batch", 2)]).unwrap();
    for n in 0..2 {
        let node = g.node(imported.node_id(n).unwrap());
        assert_eq!(
            imported.op_table().semantics(g, node, &b),
            vec![MemorySemantics::Opaque],
            "{}",
            node.name
        );
    }
}

#[test]
fn bad_declarations_are_errors_naming_them() {
    let err = |nodes| import(&base(nodes)).unwrap_err();
    assert!(matches!(
        err(vec![NodeDecl::new("n0", "f", ["x", "nope"], ["a"])]),
        ImportError::UnknownTensor { ref node, ref tensor } if node == "n0" && tensor == "\"nope\""
    ));
    let e = err(vec![NodeDecl::new("n0", "f", ["x"], ["a"]).view(0, 3, 0)]);
    assert!(
        e.to_string().contains("n0") && e.to_string().contains("input 3"),
        "{e}"
    );
    let e = err(vec![NodeDecl::new("n0", "f", ["x"], ["a"]).view(1, 0, 0)]);
    assert!(e.to_string().contains("2 outputs"), "{e}");
    let e = err(vec![NodeDecl::new("n0", "f", ["x"], ["a"]).mutating(&[1])]);
    assert!(e.to_string().contains("writes input 1"), "{e}");
    let e = err(vec![
        NodeDecl::new("n0", "acc", ["x"], ["a"]).mutating(&[0]),
        NodeDecl::new("n1", "acc", ["a"], ["b"]),
    ]);
    assert!(matches!(e, ImportError::MutationsDiffer { ref op, .. } if op == "acc"));
    // Two nodes writing one tensor: the graph is not valid.
    let e = err(vec![
        NodeDecl::new("n0", "f", ["x"], ["a"]),
        NodeDecl::new("n1", "f", ["x"], ["a"]),
    ]);
    assert!(matches!(e, ImportError::Invalid(_)), "{e}");
    // A dimension that does not parse names its tensor.
    let mut src = base(Vec::new());
    src.tensors[1].2[0] = Dim::from("2**batch");
    let e = import(&src).unwrap_err();
    assert!(
        matches!(e, ImportError::BadDim { ref tensor, .. } if tensor == "a"),
        "{e}"
    );
    let mut src = base(Vec::new());
    src.tensors[1].2[0] = Dim::Fixed(u64::MAX);
    assert!(matches!(
        import(&src).unwrap_err(),
        ImportError::DimTooLarge { .. }
    ));
    // A handle listed twice.
    let mut src = base(Vec::new());
    src.tensors.push(t("x", &["1"], TensorKind::Input));
    assert!(matches!(
        import(&src).unwrap_err(),
        ImportError::DuplicateTensor(_)
    ));
}
