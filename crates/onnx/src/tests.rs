//! Unit tests on small hand-built models: graph building, attributes, symbols, the inference
//! rules one by one, and the errors for malformed files.

use memplan_ir::{Attr, DType, Graph, TensorKind};
use prost::Message;

use crate::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};
use crate::{ImportOptions, InferError, OnnxError, Refusal, import};

const F32: i32 = 1;
const I64: i32 = 7;

/// A value-info entry; dims are numbers (`"3"`), names or expressions (`"batch"`), or `"?"`.
fn vi(name: &str, elem: i32, dims: &[&str]) -> ValueInfoProto {
    use tensor_shape_proto::dimension::Value as D;
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: match (*d, d.parse::<i64>()) {
                ("?", _) => None,
                (_, Ok(v)) => Some(D::DimValue(v)),
                (p, Err(_)) => Some(D::DimParam(p.to_owned())),
            },
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem,
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        name: format!("{op}_{}", outputs.first().copied().unwrap_or("")),
        op_type: op.into(),
        input: inputs.iter().map(|s| (*s).to_owned()).collect(),
        output: outputs.iter().map(|s| (*s).to_owned()).collect(),
        attribute,
        ..Default::default()
    }
}

fn int(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 2,
        i,
        ..Default::default()
    }
}

fn ints(name: &str, ints: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 7,
        ints: ints.to_vec(),
        ..Default::default()
    }
}

fn float(name: &str, f: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 1,
        f,
        ..Default::default()
    }
}

fn string(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 3,
        s: s.as_bytes().to_vec(),
        ..Default::default()
    }
}

fn tensor_attr(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 4,
        t: Some(t),
        ..Default::default()
    }
}

fn i64s(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        data_type: I64,
        dims: dims.to_vec(),
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

fn f32s(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        data_type: F32,
        dims: dims.to_vec(),
        float_data: values.to_vec(),
        ..Default::default()
    }
}

/// A weight without data, as the corpus strips them.
fn weight(name: &str, dims: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        data_type: F32,
        dims: dims.to_vec(),
        ..Default::default()
    }
}

struct M {
    graph: GraphProto,
    opset: i64,
}

impl M {
    fn new(inputs: Vec<ValueInfoProto>) -> M {
        M {
            graph: GraphProto {
                name: "g".into(),
                input: inputs,
                ..Default::default()
            },
            opset: 20,
        }
    }
    fn init(mut self, t: TensorProto) -> M {
        self.graph.initializer.push(t);
        self
    }
    fn node(mut self, n: NodeProto) -> M {
        self.graph.node.push(n);
        self
    }
    fn output(mut self, o: ValueInfoProto) -> M {
        self.graph.output.push(o);
        self
    }
    fn info(mut self, o: ValueInfoProto) -> M {
        self.graph.value_info.push(o);
        self
    }
    fn opset(mut self, v: i64) -> M {
        self.opset = v;
        self
    }
    fn bytes(self) -> Vec<u8> {
        ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: self.opset,
            }],
            graph: Some(self.graph),
            ..Default::default()
        }
        .encode_to_vec()
    }
    fn import(self) -> Result<Graph, OnnxError> {
        import(&self.bytes(), &ImportOptions::default())
    }
    fn graph(self) -> Graph {
        self.import().unwrap_or_else(|e| panic!("{e}"))
    }
}

/// The shape of `name` as strings.
fn shape(g: &Graph, name: &str) -> Vec<String> {
    let t = g
        .find_tensor(name)
        .unwrap_or_else(|| panic!("no tensor `{name}`"));
    g.tensors()
        .get(t)
        .unwrap()
        .shape
        .iter()
        .map(|d| d.display(g.symbols()).to_string())
        .collect()
}

fn tensor<'g>(g: &'g Graph, name: &str) -> &'g memplan_ir::Tensor {
    g.tensors().get(g.find_tensor(name).unwrap()).unwrap()
}

/// A one-node model on input `x` of `dims`, output `y`, with extra initializers.
fn one(
    op: &str,
    dims: &[&str],
    inputs: &[&str],
    attrs: Vec<AttributeProto>,
    inits: Vec<TensorProto>,
) -> Graph {
    let mut m = M::new(vec![vi("x", F32, dims)]);
    for t in inits {
        m = m.init(t);
    }
    m.node(node(op, inputs, &["y"], attrs)).graph()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

#[test]
fn builds_tensors_in_corpus_order_with_kinds() {
    let g = M::new(vec![vi("x", F32, &["1", "4"]), vi("w", F32, &["4", "4"])])
        .init(weight("w", &[4, 4]))
        .node(node("MatMul", &["x", "w"], &["h"], vec![]))
        .node(NodeProto {
            name: String::new(),
            ..node("Relu", &["h"], &["y"], vec![])
        })
        .output(vi("y", F32, &["1", "4"]))
        .graph();
    let names: Vec<(&str, TensorKind)> = g
        .tensors()
        .iter()
        .map(|t| (t.name.as_str(), t.kind))
        .collect();
    // `w` is listed as an input too (IR < 4 style) and is dropped from the inputs.
    assert_eq!(
        names,
        [
            ("x", TensorKind::Input),
            ("w", TensorKind::Weight),
            ("h", TensorKind::Activation),
            ("y", TensorKind::Output)
        ]
    );
    assert_eq!(g.nodes().len(), 2);
    assert_eq!(g.nodes().iter().nth(1).unwrap().name, "n1_Relu");
    assert_eq!(tensor(&g, "w").static_bytes(), Ok(64));
}

#[test]
fn constant_nodes_become_weights_with_values() {
    let g = M::new(vec![vi("x", F32, &["2", "6"])])
        .node(node(
            "Constant",
            &[],
            &["shape"],
            vec![tensor_attr("value", i64s("", &[2], &[3, -1]))],
        ))
        .node(node(
            "Constant",
            &[],
            &["k"],
            vec![ints("value_ints", &[1, 2, 3])],
        ))
        .node(node(
            "Constant",
            &[],
            &["eps"],
            vec![float("value_float", 1e-5)],
        ))
        .node(node("Reshape", &["x", "shape"], &["y"], vec![]))
        .graph();
    assert_eq!(g.nodes().len(), 1, "Constant nodes leave no node");
    let t = tensor(&g, "shape");
    assert_eq!(
        (t.kind, t.dtype, t.int_value.clone()),
        (TensorKind::Weight, DType::I64, Some(vec![3, -1]))
    );
    assert_eq!(tensor(&g, "k").int_value, Some(vec![1, 2, 3]));
    assert_eq!(tensor(&g, "eps").int_value, None);
    assert_eq!(shape(&g, "y"), s(&["3", "4"]));
}

#[test]
fn weights_of_one_value_are_listed_with_it() {
    let raw = |v: f32, n: usize| -> Vec<u8> { v.to_le_bytes().repeat(n) };
    let zeros = TensorProto {
        raw_data: raw(0.0, 256),
        ..weight("zeros", &[16, 16])
    };
    let mut one_off = raw(0.0, 256);
    one_off[1020] = 1;
    let almost = TensorProto {
        raw_data: one_off,
        ..weight("almost", &[16, 16])
    };
    let external = TensorProto {
        data_location: 1,
        ..weight("external", &[16, 16])
    };
    let small = TensorProto {
        raw_data: raw(2.0, 16),
        ..weight("small", &[16])
    };
    let g = M::new(vec![vi("x", F32, &["16", "16"])])
        .init(zeros)
        .init(almost)
        .init(external)
        .init(small)
        .init(i64s("steps", &[300], &[7; 300]))
        .node(node(
            "Constant",
            &[],
            &["mask"],
            vec![tensor_attr(
                "value",
                f32s("", &[16, 16], &[f32::NEG_INFINITY; 256]),
            )],
        ))
        .node(node("Add", &["x", "zeros"], &["a"], vec![]))
        .node(node("Add", &["a", "almost"], &["b"], vec![]))
        .node(node("Add", &["b", "external"], &["c"], vec![]))
        .node(node("Add", &["c", "small"], &["d"], vec![]))
        .node(node("Add", &["d", "mask"], &["y"], vec![]))
        .graph();
    // Below 1 KiB (`small`), one element off (`almost`) and data kept elsewhere
    // (`external`) are not listed.
    let listed: Vec<(&str, &str)> = g.uniform_constants().collect();
    assert_eq!(
        listed,
        [("zeros", "0"), ("steps", "7"), ("mask", "-inf")],
        "{:?}",
        g.metadata()
    );
}

#[test]
fn external_data_initializers_are_sized_from_dims() {
    let ext = TensorProto {
        data_location: 1,
        ..weight("big", &[1024, 1024])
    };
    let g = M::new(vec![vi("x", F32, &["1", "1024"])])
        .init(ext)
        .node(node("MatMul", &["x", "big"], &["y"], vec![]))
        .graph();
    assert_eq!(tensor(&g, "big").static_bytes(), Ok(4 << 20));
}

#[test]
fn small_attributes_are_kept_as_the_corpus_keeps_them() {
    let big: Vec<i64> = (0..65).collect();
    let g = one(
        "Relu",
        &["1"],
        &["x"],
        vec![
            int("i", 3),
            float("f", 0.5),
            string("s", "nearest"),
            ints("l", &[1, 2]),
            ints("big", &big),
            tensor_attr("t", f32s("", &[1], &[2.5])),
            tensor_attr("t2", f32s("", &[2], &[1.0, 2.0])),
        ],
        vec![],
    );
    let attrs = &g.nodes().iter().next().unwrap().attrs;
    let want: Vec<(String, Attr)> = vec![
        ("i".into(), Attr::Int(3)),
        ("f".into(), Attr::Float(0.5)),
        ("s".into(), Attr::Str("nearest".into())),
        ("l".into(), Attr::Ints(vec![1, 2])),
        ("t".into(), Attr::Float(2.5)),
    ];
    assert_eq!(attrs, &want);
}

#[test]
fn non_default_domains_are_opaque_ops() {
    let custom = |with_info: bool| {
        let mut n = node("FusedGelu", &["x"], &["y"], vec![]);
        n.domain = "com.microsoft".into();
        let m = M::new(vec![vi("x", F32, &["2", "3"])]).node(n);
        if with_info {
            m.info(vi("y", F32, &["2", "3"]))
        } else {
            m
        }
    };
    let g = custom(true).graph();
    assert_eq!(
        g.nodes().iter().next().unwrap().op,
        "com.microsoft.FusedGelu"
    );
    let err = custom(false).import().unwrap_err().to_string();
    assert!(
        err.contains("FusedGelu_y") && err.contains("`y`") && err.contains("value_info"),
        "{err}"
    );
}

#[test]
fn dim_params_are_symbols_and_expressions() {
    let g = M::new(vec![
        vi("x", F32, &["batch", "seq + 1", "12*batch"]),
        vi("z", F32, &["N/2", "?"]),
    ])
    .node(node("Relu", &["x"], &["y"], vec![]))
    .graph();
    assert_eq!(shape(&g, "x"), s(&["batch", "seq+1", "12*batch"]));
    assert_eq!(shape(&g, "z"), s(&["N/2", "z_d1"]));
    let names: Vec<&str> = g.symbols().iter().map(String::as_str).collect();
    assert_eq!(names, ["batch", "seq", "N/2", "z_d1"]);
    let bound = import(
        &M::new(vec![vi("x", F32, &["batch", "seq + 1"])])
            .node(node("Relu", &["x"], &["y"], vec![]))
            .bytes(),
        &ImportOptions {
            dims: vec![("batch".into(), 2), ("seq".into(), 9)],
            ..ImportOptions::default()
        },
    )
    .unwrap();
    assert_eq!(tensor(&bound, "y").static_bytes(), Ok(2 * 10 * 4));
}

#[test]
fn shape_arithmetic_builds_symbolic_reshape_targets() {
    // [batch, seq, 768] -> [batch, seq, 12, 64] -> transpose -> [12*batch, seq, 64] -> back.
    let g = M::new(vec![vi("x", F32, &["batch", "seq", "768"])])
        .init(i64s("i0", &[], &[0]))
        .init(i64s("i1", &[], &[1]))
        .init(i64s("ax", &[1], &[0]))
        .init(i64s("tail", &[2], &[12, 64]))
        .init(i64s("twelve", &[1], &[12]))
        .init(i64s("m1", &[1], &[-1]))
        .init(i64s("s64", &[1], &[64]))
        .node(node("Shape", &["x"], &["sh"], vec![]))
        .node(node("Gather", &["sh", "i0"], &["b"], vec![int("axis", 0)]))
        .node(node("Gather", &["sh", "i1"], &["q"], vec![int("axis", 0)]))
        .node(node("Unsqueeze", &["b"], &["b1"], vec![]).tap_input("ax"))
        .node(node("Unsqueeze", &["q"], &["q1"], vec![]).tap_input("ax"))
        .node(node(
            "Concat",
            &["b1", "q1", "tail"],
            &["t4"],
            vec![int("axis", 0)],
        ))
        .node(node("Reshape", &["x", "t4"], &["x4"], vec![]))
        .node(node(
            "Transpose",
            &["x4"],
            &["xt"],
            vec![ints("perm", &[0, 2, 1, 3])],
        ))
        .node(node("Mul", &["b1", "twelve"], &["bh"], vec![]))
        .node(node(
            "Concat",
            &["bh", "m1", "s64"],
            &["t3"],
            vec![int("axis", 0)],
        ))
        .node(node("Reshape", &["xt", "t3"], &["x3"], vec![]))
        .node(node("Reshape", &["x3", "sh"], &["back"], vec![]))
        .node(node("Slice", &["sh", "i1b", "end"], &["rest"], vec![]))
        .init(i64s("i1b", &[1], &[1]))
        .init(i64s("end", &[1], &[i64::MAX]))
        .graph();
    assert_eq!(shape(&g, "x4"), s(&["batch", "seq", "12", "64"]));
    assert_eq!(shape(&g, "xt"), s(&["batch", "12", "seq", "64"]));
    assert_eq!(shape(&g, "x3"), s(&["12*batch", "seq", "64"]));
    assert_eq!(shape(&g, "back"), s(&["batch", "seq", "768"]));
    assert_eq!(shape(&g, "rest"), s(&["2"]));
}

trait Tap {
    fn tap_input(self, name: &str) -> Self;
}

impl Tap for NodeProto {
    fn tap_input(mut self, name: &str) -> NodeProto {
        self.input.push(name.into());
        self
    }
}

#[test]
fn conv_and_pool_window_arithmetic() {
    let w = || vec![weight("w", &[16, 3, 3, 3])];
    let conv = |attrs| one("Conv", &["1", "3", "224", "224"], &["x", "w"], attrs, w());
    assert_eq!(
        shape(
            &conv(vec![ints("pads", &[1, 1, 1, 1]), ints("strides", &[2, 2])]),
            "y"
        ),
        s(&["1", "16", "112", "112"])
    );
    assert_eq!(shape(&conv(vec![]), "y"), s(&["1", "16", "222", "222"]));
    assert_eq!(
        shape(
            &conv(vec![
                string("auto_pad", "SAME_UPPER"),
                ints("strides", &[2, 2])
            ]),
            "y"
        ),
        s(&["1", "16", "112", "112"])
    );
    assert_eq!(
        shape(&conv(vec![ints("dilations", &[2, 2])]), "y"),
        s(&["1", "16", "220", "220"])
    );
    let sym = one(
        "Conv",
        &["batch", "3", "h", "8"],
        &["x", "w"],
        vec![ints("pads", &[1, 1, 1, 1])],
        w(),
    );
    assert_eq!(shape(&sym, "y"), s(&["batch", "16", "h", "8"]));
    let pool = |attrs| one("MaxPool", &["1", "64", "112", "112"], &["x"], attrs, vec![]);
    let k3s2 = || vec![ints("kernel_shape", &[3, 3]), ints("strides", &[2, 2])];
    assert_eq!(shape(&pool(k3s2()), "y"), s(&["1", "64", "55", "55"]));
    let mut ceil = k3s2();
    ceil.push(int("ceil_mode", 1));
    assert_eq!(shape(&pool(ceil), "y"), s(&["1", "64", "56", "56"]));
    let g = one(
        "GlobalAveragePool",
        &["2", "8", "7", "7"],
        &["x"],
        vec![],
        vec![],
    );
    assert_eq!(shape(&g, "y"), s(&["2", "8", "1", "1"]));
    let t = one(
        "ConvTranspose",
        &["1", "16", "32", "32"],
        &["x", "w"],
        vec![
            ints("strides", &[2, 2]),
            ints("pads", &[1, 1, 1, 1]),
            ints("output_padding", &[1, 1]),
        ],
        vec![weight("w", &[16, 8, 3, 3])],
    );
    assert_eq!(shape(&t, "y"), s(&["1", "8", "64", "64"]));
}

#[test]
fn matmul_gemm_and_broadcasting() {
    let g = one(
        "MatMul",
        &["batch", "12", "seq", "64"],
        &["x", "w"],
        vec![],
        vec![weight("w", &[64, 5])],
    );
    assert_eq!(shape(&g, "y"), s(&["batch", "12", "seq", "5"]));
    let g = one(
        "MatMul",
        &["7"],
        &["x", "w"],
        vec![],
        vec![weight("w", &[3, 7, 5])],
    );
    assert_eq!(shape(&g, "y"), s(&["3", "5"]));
    let g = one(
        "Gemm",
        &["4", "8"],
        &["x", "w"],
        vec![int("transB", 1)],
        vec![weight("w", &[6, 8])],
    );
    assert_eq!(shape(&g, "y"), s(&["4", "6"]));
    let g = one(
        "Add",
        &["batch", "1", "5"],
        &["x", "w"],
        vec![],
        vec![weight("w", &[3, 1])],
    );
    assert_eq!(shape(&g, "y"), s(&["batch", "3", "5"]));
    let g = one(
        "Equal",
        &["2", "3"],
        &["x", "w"],
        vec![],
        vec![weight("w", &[3])],
    );
    assert_eq!(tensor(&g, "y").dtype, DType::Bool);
    let err = M::new(vec![vi("x", F32, &["2", "3"])])
        .init(weight("w", &[4]))
        .node(node("Add", &["x", "w"], &["y"], vec![]))
        .import()
        .unwrap_err()
        .to_string();
    assert!(err.contains("Add_y") && err.contains("broadcast"), "{err}");
}

#[test]
fn layout_ops() {
    let g = one(
        "Flatten",
        &["2", "3", "4"],
        &["x"],
        vec![int("axis", 2)],
        vec![],
    );
    assert_eq!(shape(&g, "y"), s(&["6", "4"]));
    let g = one("Transpose", &["2", "3", "4"], &["x"], vec![], vec![]);
    assert_eq!(shape(&g, "y"), s(&["4", "3", "2"]));
    let g = one(
        "Squeeze",
        &["1", "3", "1"],
        &["x", "a"],
        vec![],
        vec![i64s("a", &[1], &[-1])],
    );
    assert_eq!(shape(&g, "y"), s(&["1", "3"]));
    let g = one("Squeeze", &["1", "3", "1"], &["x"], vec![], vec![]);
    assert_eq!(shape(&g, "y"), s(&["3"]));
    let old = M::new(vec![vi("x", F32, &["3"])])
        .node(node(
            "Unsqueeze",
            &["x"],
            &["y"],
            vec![ints("axes", &[0, 2])],
        ))
        .opset(11)
        .graph();
    assert_eq!(shape(&old, "y"), s(&["1", "3", "1"]));
    let g = one(
        "Split",
        &["10", "4"],
        &["x"],
        vec![int("axis", 0), int("num_outputs", 1)],
        vec![],
    );
    assert_eq!(shape(&g, "y"), s(&["10", "4"]));
    let split3 = M::new(vec![vi("x", F32, &["10", "4"])])
        .node(node(
            "Split",
            &["x"],
            &["a", "b", "c"],
            vec![int("num_outputs", 3)],
        ))
        .graph();
    assert_eq!(
        (shape(&split3, "a"), shape(&split3, "c")),
        (s(&["4", "4"]), s(&["2", "4"]))
    );
    let sized = M::new(vec![vi("x", F32, &["10", "4"])])
        .init(i64s("sp", &[2], &[7, 3]))
        .node(node("Split", &["x", "sp"], &["a", "b"], vec![]))
        .graph();
    assert_eq!(shape(&sized, "b"), s(&["3", "4"]));
    let sl = one(
        "Slice",
        &["20", "10"],
        &["x", "st", "en", "ax", "sp"],
        vec![],
        vec![
            i64s("st", &[2], &[-1, 1]),
            i64s("en", &[2], &[i64::MIN, 9]),
            i64s("ax", &[2], &[0, 1]),
            i64s("sp", &[2], &[-2, 3]),
        ],
    );
    assert_eq!(shape(&sl, "y"), s(&["10", "3"]));
    let g = one(
        "Gather",
        &["5", "6"],
        &["x", "i"],
        vec![int("axis", 1)],
        vec![i64s("i", &[2, 3], &[0; 6])],
    );
    assert_eq!(shape(&g, "y"), s(&["5", "2", "3"]));
    let g = one(
        "Pad",
        &["1", "3", "4"],
        &["x", "p"],
        vec![],
        vec![i64s("p", &[6], &[0, 1, 2, 0, 1, 2])],
    );
    assert_eq!(shape(&g, "y"), s(&["1", "5", "8"]));
    let g = one(
        "ReduceMean",
        &["2", "3", "4"],
        &["x"],
        vec![ints("axes", &[-1]), int("keepdims", 0)],
        vec![],
    );
    assert_eq!(
        shape(&g, "y"),
        s(&["2", "3"]),
        "the attribute form of axes is read past its opset too"
    );
    let g = one(
        "ReduceSum",
        &["2", "3", "4"],
        &["x", "a"],
        vec![],
        vec![i64s("a", &[1], &[1])],
    );
    assert_eq!(shape(&g, "y"), s(&["2", "1", "4"]));
    let g = one(
        "Einsum",
        &["2", "3", "4"],
        &["x", "w"],
        vec![string("equation", "bij,jk->bik")],
        vec![weight("w", &[3, 5])],
    );
    assert_eq!(shape(&g, "y"), s(&["2", "3", "5"]));
}

#[test]
fn resize_expand_range_and_constant_of_shape() {
    let g = one(
        "Resize",
        &["1", "3", "8", "8"],
        &["x", "", "sc"],
        vec![],
        vec![f32s("sc", &[4], &[1.0, 1.0, 2.0, 2.0])],
    );
    assert_eq!(shape(&g, "y"), s(&["1", "3", "16", "16"]));
    let g = one(
        "Resize",
        &["1", "3", "8", "8"],
        &["x", "", "", "sz"],
        vec![],
        vec![i64s("sz", &[4], &[1, 3, 5, 7])],
    );
    assert_eq!(shape(&g, "y"), s(&["1", "3", "5", "7"]));
    let g = one(
        "Expand",
        &["3", "1"],
        &["x", "t"],
        vec![],
        vec![i64s("t", &[3], &[2, 1, 4])],
    );
    assert_eq!(shape(&g, "y"), s(&["2", "3", "4"]));
    let g = M::new(vec![vi("x", I64, &["seq"])])
        .init(i64s("zero", &[], &[0]))
        .init(i64s("one", &[], &[1]))
        .node(node("Size", &["x"], &["n"], vec![]))
        .node(node("Range", &["zero", "n", "one"], &["r"], vec![]))
        .node(node("Shape", &["r"], &["rs"], vec![]))
        .node(node(
            "ConstantOfShape",
            &["rs"],
            &["c"],
            vec![tensor_attr("value", i64s("", &[1], &[1]))],
        ))
        .graph();
    assert_eq!(shape(&g, "r"), s(&["seq"]));
    assert_eq!(
        (shape(&g, "c"), tensor(&g, "c").dtype),
        (s(&["seq"]), DType::I64)
    );
}

#[test]
fn windows_and_center_crop_pad_are_sized_by_a_known_value() {
    // A window's length is its `size` input: known from an initializer or a Constant node
    // (symbolic through `Size`), a fresh unbounded symbol at run time.
    let g = M::new(vec![vi("x", F32, &["n", "3"])])
        .init(i64s("ten", &[], &[10]))
        .node(node(
            "HannWindow",
            &["ten"],
            &["hann"],
            vec![int("output_datatype", 10)],
        ))
        .node(node(
            "Constant",
            &[],
            &["six"],
            vec![tensor_attr("value", i64s("", &[], &[6]))],
        ))
        .node(node("HammingWindow", &["six"], &["hamming"], vec![]))
        .node(node("Size", &["x"], &["len"], vec![]))
        .node(node("BlackmanWindow", &["len"], &["blackman"], vec![]))
        .graph();
    assert_eq!(shape(&g, "hann"), s(&["10"]));
    assert_eq!(tensor(&g, "hann").dtype, DType::F16);
    assert_eq!(shape(&g, "hamming"), s(&["6"]));
    assert_eq!(shape(&g, "blackman"), s(&["3*n"]));
    let g = M::new(vec![vi("size", I64, &[])])
        .node(node("HannWindow", &["size"], &["w"], vec![]))
        .graph();
    assert_eq!(shape(&g, "w"), s(&["HannWindow_w_o0_d0"]));
    assert_eq!(bound_of(&g, "w", 0), None);

    // CenterCropPad sets the dims at `axes` to its `shape` input, cropping or padding.
    let g = one(
        "CenterCropPad",
        &["20", "10", "3"],
        &["x", "sh"],
        vec![ints("axes", &[0, -2])],
        vec![i64s("sh", &[2], &[8, 14])],
    );
    assert_eq!(shape(&g, "y"), s(&["8", "14", "3"]));
    let g = M::new(vec![
        vi("x", F32, &["20", "10", "3"]),
        vi("sh", I64, &["2"]),
    ])
    .node(node(
        "CenterCropPad",
        &["x", "sh"],
        &["y"],
        vec![ints("axes", &[0, 1])],
    ))
    .graph();
    assert_eq!(
        shape(&g, "y"),
        s(&["CenterCropPad_y_o0_d0", "CenterCropPad_y_o0_d1", "3"])
    );
    assert_eq!(bound_of(&g, "y", 0), None);
}

#[test]
fn recurrent_and_normalization_outputs() {
    let g = M::new(vec![vi("x", F32, &["5", "2", "8"])])
        .init(weight("w", &[2, 64, 8]))
        .init(weight("r", &[2, 64, 16]))
        .node(node(
            "LSTM",
            &["x", "w", "r"],
            &["", "h", "c"],
            vec![int("hidden_size", 16), string("direction", "bidirectional")],
        ))
        .graph();
    assert_eq!(shape(&g, "h"), s(&["2", "2", "16"]));
    assert!(
        g.find_tensor("").is_none(),
        "absent optional outputs are left out"
    );
    let g = M::new(vec![vi("x", F32, &["2", "5", "8"])])
        .init(weight("s", &[8]))
        .node(node(
            "LayerNormalization",
            &["x", "s"],
            &["y", "mean"],
            vec![int("axis", -1)],
        ))
        .graph();
    assert_eq!(shape(&g, "mean"), s(&["2", "5", "1"]));
}

#[test]
fn malformed_models_are_clear_errors() {
    let err = |m: M| m.import().unwrap_err().to_string();
    let neg = M::new(vec![vi("x", F32, &["2"])])
        .init(weight("w", &[-3]))
        .node(node("Add", &["x", "w"], &["y"], vec![]));
    assert!(err(neg).contains("`w` dim 0: negative size -3"));
    let huge = M::new(vec![vi("x", F32, &["2"])])
        .init(weight("w", &[1 << 40, 1 << 40]))
        .node(node("Add", &["x", "w"], &["y"], vec![]));
    assert!(err(huge).contains("`w` dim 1: the element count overflows"));
    let missing =
        M::new(vec![vi("x", F32, &["2"])]).node(node("Add", &["x", "nope"], &["y"], vec![]));
    let e = err(missing);
    assert!(e.contains("Add_y") && e.contains("`nope`"), "{e}");
    let dup = M::new(vec![vi("x", F32, &["2"])]).node(node("Relu", &["x"], &["x"], vec![]));
    assert!(err(dup).contains("`x` is defined twice"));
    let out = M::new(vec![vi("x", F32, &["2"])]).output(vi("z", F32, &["2"]));
    assert!(err(out).contains("`z`"));
    let neg_dim = M::new(vec![vi("x", F32, &["-2"])]);
    assert!(err(neg_dim).contains("negative"));
    let dtype = M::new(vec![vi("x", 99, &["2"])]);
    assert!(err(dtype).contains("element type 99"));
    // A runtime target of unknown length: not even the rank is known.
    let reshape = M::new(vec![vi("x", F32, &["2", "3"]), vi("t", I64, &["n"])]).node(node(
        "Reshape",
        &["x", "t"],
        &["y"],
        vec![],
    ));
    let e = err(reshape);
    assert!(
        e.contains("Reshape_y") && e.contains("`t`") && e.contains("symbolic"),
        "{e}"
    );
    let ml = {
        let mut n = node("LinearRegressor", &["x"], &["y"], vec![]);
        n.domain = "ai.onnx.ml".into();
        M::new(vec![vi("x", F32, &["2"])]).node(n)
    };
    let e = ml.import().unwrap_err();
    assert!(
        matches!(&e, OnnxError::Shape { reason, .. }
            if matches!(&**reason, InferError::Unsupported { why: Refusal::Domain(d), .. } if d == "ai.onnx.ml")),
        "{e}"
    );
    let seq = M::new(vec![ValueInfoProto {
        name: "s".into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::MapType(Box::new(type_proto::Map {
                key_type: 7,
                value_type: None,
            }))),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    assert!(err(seq).contains("`s`: graph input is a map"));
    let unknown =
        M::new(vec![vi("x", F32, &["2"])]).node(node("Frobnicate", &["x"], &["y"], vec![]));
    assert!(err(unknown).contains("no shape rule for op `Frobnicate`"));
    let overflow = M::new(vec![vi("x", F32, &["4611686018427387904", "4"])]);
    assert!(matches!(
        overflow.import().unwrap_err(),
        OnnxError::Size { .. }
    ));
    assert!(matches!(
        import(&[], &ImportOptions::default()),
        Err(OnnxError::NoGraph)
    ));
    let limit = ImportOptions {
        max_bytes: 3,
        ..ImportOptions::default()
    };
    assert!(matches!(
        import(&[0; 4], &limit),
        Err(OnnxError::TooLarge { size: 4, max: 3 })
    ));
}

#[test]
fn truncated_and_mistyped_bytes_are_decode_errors() {
    let bytes = M::new(vec![vi("x", F32, &["batch", "3"])])
        .node(node("Relu", &["x"], &["y"], vec![]))
        .bytes();
    for cut in 1..bytes.len() {
        // Every strict prefix is either a decode error or a smaller valid model; never a panic.
        let _ = import(&bytes[..cut], &ImportOptions::default());
    }
    assert!(matches!(
        import(&bytes[..bytes.len() - 1], &ImportOptions::default()),
        Err(OnnxError::Decode(_))
    ));
    // Field 7 (graph) as a varint instead of a message.
    assert!(matches!(
        import(&[0x38, 0x01], &ImportOptions::default()),
        Err(OnnxError::Decode(_))
    ));
    // A length prefix claiming 2 GiB with 3 bytes behind it: refused before any allocation.
    assert!(matches!(
        import(
            &[0x3a, 0xff, 0xff, 0xff, 0xff, 0x07, 1, 2, 3],
            &ImportOptions::default()
        ),
        Err(OnnxError::Decode(_))
    ));
}

#[test]
fn expression_growth_is_bounded() {
    let dims: Vec<String> = (0..13).map(|i| format!("a{i}+b{i}")).collect();
    let dims: Vec<&str> = dims.iter().map(String::as_str).collect();
    let err = M::new(vec![vi("x", F32, &dims)])
        .import()
        .unwrap_err()
        .to_string();
    assert!(err.contains("`x`") && err.contains("terms"), "{err}");
    let long: String = (0..100)
        .map(|i| format!("s{i}"))
        .collect::<Vec<_>>()
        .join("+");
    let err = M::new(vec![vi("x", F32, &[long.as_str()])])
        .import()
        .unwrap_err()
        .to_string();
    assert!(err.contains("more than 64 terms"), "{err}");
}

#[test]
fn absurd_ranks_are_refused() {
    let dims = vec![1i64; 5000];
    let err = M::new(vec![vi("x", F32, &["2"])])
        .init(weight("w", &dims))
        .import()
        .unwrap_err()
        .to_string();
    assert!(err.contains("`w`") && err.contains("rank 5000"), "{err}");
}

/// Physically removing `value_info` from every corpus file gives the same graph as the file
/// as shipped: inference reproduces every shape the file states.
#[test]
fn corpus_files_without_value_info_import_identically() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/graphs");
    if !root.is_dir() {
        // A packaged crate: the repository's corpus is not there.
        eprintln!("skipped: no corpus at {}", root.display());
        return;
    }
    let mut n = 0;
    for dir in ["onnx", "dynamic/onnx"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|x| x != "onnx") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let mut model = ModelProto::decode(bytes.as_slice()).unwrap();
            let graph = model.graph.as_mut().unwrap();
            assert!(!graph.value_info.is_empty(), "{}", path.display());
            graph.value_info.clear();
            let stripped = model.encode_to_vec();
            let want = import(&bytes, &ImportOptions::default()).unwrap();
            let got = import(&stripped, &ImportOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(got == want, "{}: the graphs differ", path.display());
            n += 1;
        }
    }
    assert_eq!(n, 37);
}

#[test]
fn invented_dim_names_give_way_to_inference() {
    let g = M::new(vec![vi("x", F32, &["batch", "4"])])
        .init(weight("w", &[4, 6]))
        .node(node("MatMul", &["x", "w"], &["y"], vec![]))
        .node(node("Relu", &["y"], &["z"], vec![]))
        .info(vi("y", F32, &["unk__1", "6"]))
        .info(vi("z", F32, &["unk__2", "unk__3"]))
        .graph();
    assert_eq!(shape(&g, "y"), s(&["batch", "6"]));
    assert_eq!(shape(&g, "z"), s(&["batch", "6"]));
    let names: Vec<&str> = g.symbols().iter().map(String::as_str).collect();
    assert_eq!(
        names,
        ["batch"],
        "names replaced by inference leave no symbols behind"
    );
    // Without a rule, the declared name stays, as a symbol the caller can bind.
    let mut n = node("Mystery", &["x"], &["y"], vec![]);
    n.domain = "custom".into();
    let g = M::new(vec![vi("x", F32, &["batch", "4"])])
        .node(n)
        .info(vi("y", F32, &["unk__1", "4"]))
        .graph();
    assert_eq!(shape(&g, "y"), s(&["unk__1", "4"]));
}

#[test]
fn attention_and_newer_ops() {
    let g = M::new(vec![
        vi("q", F32, &["batch", "12", "seq", "64"]),
        vi("k", F32, &["batch", "4", "seq", "64"]),
    ])
    .init(weight("v", &[1, 4, 1, 32]))
    .node(node("Attention", &["q", "k", "k"], &["y"], vec![]))
    .node(node("Attention", &["q", "k", "v"], &["y2"], vec![]))
    .graph();
    assert_eq!(shape(&g, "y"), s(&["batch", "12", "seq", "64"]));
    assert_eq!(shape(&g, "y2"), s(&["batch", "12", "seq", "32"]));
    let g = M::new(vec![vi("q", F32, &["2", "seq", "768"])])
        .node(node(
            "Attention",
            &["q", "q", "q"],
            &["y", "pk"],
            vec![int("q_num_heads", 12), int("kv_num_heads", 12)],
        ))
        .graph();
    assert_eq!(
        (shape(&g, "y"), shape(&g, "pk")),
        (s(&["2", "seq", "768"]), s(&["2", "12", "seq", "64"]))
    );
    // Integer Mod on shape values takes the divisor's sign: -7 % 4 = 1, -12 % 5 = 3.
    let g = M::new(vec![vi("x", F32, &["7", "12"])])
        .init(i64s("d", &[2], &[4, 5]))
        .node(node("Shape", &["x"], &["sh"], vec![]))
        .node(node("Neg", &["sh"], &["neg"], vec![]))
        .node(node("Mod", &["neg", "d"], &["m"], vec![]))
        .node(node("ConstantOfShape", &["m"], &["z"], vec![]))
        .graph();
    assert_eq!(shape(&g, "z"), s(&["1", "3"]));
}

/// Huge declared or computed sizes are arithmetic, never allocations: these tiny models
/// describe terabytes and import at once.
#[test]
fn huge_shapes_allocate_nothing() {
    let bytes = M::new(vec![vi("x", F32, &["1"])])
        .init(i64s("big", &[2], &[1 << 20, 1 << 20]))
        .init(i64s("zero", &[], &[0]))
        .init(i64s("limit", &[], &[1 << 40]))
        .init(i64s("one", &[], &[1]))
        .node(node("ConstantOfShape", &["big"], &["c"], vec![]))
        .node(node("Range", &["zero", "limit", "one"], &["r"], vec![]))
        .node(node("Expand", &["x", "big"], &["e"], vec![]))
        .node(node("Tile", &["x", "limit"], &["t"], vec![]))
        .bytes();
    assert!(bytes.len() < 300, "{} bytes", bytes.len());
    let g = import(&bytes, &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tensor(&g, "c").static_bytes(), Ok(4 << 40));
    assert_eq!(tensor(&g, "r").static_bytes(), Ok(8 << 40));
    assert_eq!(shape(&g, "e"), s(&["1048576", "1048576"]));
}

/// The graph's bound of the symbol at `name`'s dim `axis`, as text.
fn bound_of(g: &Graph, name: &str, axis: usize) -> Option<String> {
    let t = tensor(g, name);
    let [sym] = t.shape[axis].symbols()[..] else {
        panic!("dim {axis} of `{name}` is not one symbol");
    };
    g.symbol_bound(sym)
        .map(|b| b.display(g.symbols()).to_string())
}

#[test]
fn data_dependent_dims_are_fresh_symbols_with_what_the_op_knows() {
    // Equal: a runtime Reshape keeps its input's element count.
    let g = M::new(vec![vi("x", F32, &["b", "6"]), vi("t", I64, &["3"])])
        .node(node("Reshape", &["x", "t"], &["y"], vec![]))
        .graph();
    assert_eq!(
        shape(&g, "y"),
        s(&["Reshape_y_o0_d0", "Reshape_y_o0_d1", "Reshape_y_o0_d2"])
    );
    let y = tensor(&g, "y");
    assert_eq!(
        y.elements_expr().unwrap().display(g.symbols()).to_string(),
        "6*b"
    );
    let b = g.bind(&[("b", 2)]).unwrap();
    assert_eq!(y.bytes(&b), Ok(48));
    assert_eq!(bound_of(&g, "y", 1).as_deref(), Some("6*b"));

    // Bounded: NonZero is at most the input's elements; TopK's outputs share one symbol.
    let g = M::new(vec![vi("x", F32, &["3", "4"]), vi("k", I64, &["1"])])
        .node(node("NonZero", &["x"], &["nz"], vec![]))
        .node(node("TopK", &["x", "k"], &["v", "i"], vec![int("axis", 1)]))
        .graph();
    assert_eq!(shape(&g, "nz"), s(&["2", "NonZero_nz_o0_d1"]));
    assert_eq!(bound_of(&g, "nz", 1).as_deref(), Some("12"));
    assert_eq!(shape(&g, "v"), s(&["3", "TopK_v_o0_d1"]));
    assert_eq!(shape(&g, "i"), shape(&g, "v"));
    assert_eq!(bound_of(&g, "v", 1).as_deref(), Some("4"));
    let (at_bound, bound) = g.bind_to_bounds(&memplan_ir::Bindings::new()).unwrap();
    assert_eq!(bound.len(), 2);
    assert_eq!(tensor(&g, "nz").bytes(&at_bound), Ok(2 * 12 * 8));
    assert_eq!(tensor(&g, "i").bytes(&at_bound), Ok(3 * 4 * 8));

    // Bounded by the batch: NonMaxSuppression with a known max per class.
    let g = M::new(vec![
        vi("boxes", F32, &["1", "6", "4"]),
        vi("scores", F32, &["1", "2", "6"]),
    ])
    .init(i64s("max", &[1], &[3]))
    .node(node(
        "NonMaxSuppression",
        &["boxes", "scores", "max"],
        &["sel"],
        vec![],
    ))
    .graph();
    assert_eq!(bound_of(&g, "sel", 0).as_deref(), Some("6"));

    // Unbounded: a Range over runtime bounds; the user binds it.
    let g = M::new(vec![
        vi("a", I64, &[]),
        vi("l", I64, &[]),
        vi("d", I64, &[]),
    ])
    .node(node("Range", &["a", "l", "d"], &["r"], vec![]))
    .graph();
    assert_eq!(shape(&g, "r"), s(&["Range_r_o0_d0"]));
    assert_eq!(bound_of(&g, "r", 0), None);
}

/// A `Col2Im` of input `[1, cb, l]` with runtime image and block shapes of one spatial dim
/// (or a known block `k`), and the bound of its image dim.
fn col2im_bound(cb: &str, l: &str, k: Option<i64>, attrs: Vec<AttributeProto>) -> Option<i64> {
    let mut inputs = vec![vi("x", F32, &["1", cb, l]), vi("img", I64, &["1"])];
    if k.is_none() {
        inputs.push(vi("blk", I64, &["1"]));
    }
    let mut m = M::new(inputs);
    if let Some(k) = k {
        m = m.init(i64s("blk", &[1], &[k]));
    }
    let g = m
        .node(node("Col2Im", &["x", "img", "blk"], &["y"], attrs))
        .graph();
    bound_of(&g, "y", 2).map(|b| b.parse().unwrap())
}

#[test]
fn col2im_runtime_image_dims_are_bounded_by_the_block_count() {
    // Runtime image and block shapes: the block is at most the channels (5), the blocks
    // along the dim at most L (5), so the image is at most 5 + (5 - 1).
    assert_eq!(col2im_bound("5", "5", None, vec![]), Some(9));
    // A known block, strides, dilations and pads.
    let attrs = || {
        vec![
            ints("strides", &[2]),
            ints("dilations", &[3]),
            ints("pads", &[1, 2]),
        ]
    };
    assert_eq!(
        col2im_bound("6", "4", Some(3), attrs()),
        Some(2 * 4 + 3 * 2 - 3)
    );
    // Unbounded where the block count or the channels may be 0.
    assert_eq!(col2im_bound("5", "L", None, vec![]), None);
    assert_eq!(col2im_bound("c", "5", None, vec![]), None);
    // The bound holds for every image and block that give L blocks.
    for (cb, l, s, d, pads) in [
        (6, 4, 2, 3, [1, 2]),
        (4, 3, 1, 1, [0, 0]),
        (3, 7, 3, 2, [2, 0]),
    ] {
        let attrs = vec![
            ints("strides", &[s]),
            ints("dilations", &[d]),
            ints("pads", &pads),
        ];
        let bound = col2im_bound(&cb.to_string(), &l.to_string(), None, attrs).unwrap();
        for k in (1..=cb).filter(|k| cb % k == 0) {
            for image in 0..200 {
                let span = image + pads[0] + pads[1] - d * (k - 1) - 1;
                if span >= 0 && span / s + 1 == l {
                    assert!(image <= bound, "image {image}, block {k}: bound {bound}");
                }
            }
        }
    }
}

/// An `If` branch named `attr` that hands back the outer value `result`.
fn branch(attr: &str, result: &str) -> AttributeProto {
    AttributeProto {
        name: attr.into(),
        r#type: 5,
        g: Some(GraphProto {
            name: attr.into(),
            node: vec![node(
                "Identity",
                &[result],
                &[&format!("{attr}_out")],
                vec![],
            )],
            output: vec![vi(&format!("{attr}_out"), I64, &["?"])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn an_if_with_a_known_condition_takes_its_branch_with_values() {
    // The condition compares the input's rank with 2, which the import knows: the If gives
    // the `then` branch's shape and value, though the branches differ in rank, and a Reshape
    // to that value has a known shape.
    let model = |dims: &[&str]| {
        M::new(vec![vi("x", F32, dims)])
            .init(i64s("two", &[], &[2]))
            .init(i64s("flat", &[1], &[-1]))
            .init(i64s("square", &[2], &[2, -1]))
            .node(node("Shape", &["x"], &["shape"], vec![]))
            .node(node("Size", &["shape"], &["rank"], vec![]))
            .node(node("Equal", &["rank", "two"], &["is_2d"], vec![]))
            .node(node(
                "If",
                &["is_2d"],
                &["target"],
                vec![
                    branch("then_branch", "flat"),
                    branch("else_branch", "square"),
                ],
            ))
            .node(node("Reshape", &["x", "target"], &["y"], vec![]))
            .graph()
    };
    let g = model(&["3", "4"]);
    assert_eq!(shape(&g, "target"), s(&["1"]));
    assert_eq!(shape(&g, "y"), s(&["12"]));
    let g = model(&["2", "3", "4"]);
    assert_eq!(shape(&g, "target"), s(&["2"]));
    assert_eq!(shape(&g, "y"), s(&["2", "12"]));
    // A condition only the data decides: a dim where the branches differ is data-dependent,
    // at most the larger.
    let g = M::new(vec![vi("x", F32, &["3"]), vi("c", 9, &[])])
        .init(i64s("flat", &[1], &[-1]))
        .init(i64s("square", &[2], &[2, -1]))
        .node(node(
            "If",
            &["c"],
            &["target"],
            vec![
                branch("then_branch", "flat"),
                branch("else_branch", "square"),
            ],
        ))
        .graph();
    assert_eq!(bound_of(&g, "target", 0).as_deref(), Some("2"));
}

/// A `com.microsoft` node.
fn ms(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    let mut n = node(op, inputs, outputs, attrs);
    n.domain = "com.microsoft".into();
    n
}

#[test]
fn contrib_transformer_ops() {
    let g = M::new(vec![
        vi("x", F32, &["b", "s", "64"]),
        vi("skip", F32, &["b", "s", "64"]),
        vi("past_k", F32, &["b", "2", "p", "16"]),
        vi("past_v", F32, &["b", "2", "p", "16"]),
        vi("ids", I64, &["b", "s"]),
        // Two 4-bit values per byte.
        vi("emb", 2, &["100", "32"]),
    ])
    .init(weight("gamma", &[64]))
    .init(weight("w", &[64, 192]))
    .init(weight("wq", &[64, 2, 16]))
    .init(weight("emb_scales", &[100, 2]))
    .init(weight("qkv_w", &[64, 192]))
    .node(ms(
        "SkipLayerNormalization",
        &["x", "skip", "gamma"],
        &["ln", "", "", "sum"],
        vec![],
    ))
    .node(ms("FastGelu", &["ln"], &["g"], vec![]))
    .node(ms(
        "Attention",
        &["x", "w"],
        &["att"],
        vec![int("num_heads", 4)],
    ))
    .node(ms(
        "GroupQueryAttention",
        &["x", "x", "x", "past_k", "past_v"],
        &["gqa", "pk", "pv"],
        vec![int("num_heads", 4), int("kv_num_heads", 2)],
    ))
    .node(ms(
        "MultiHeadAttention",
        &["x", "x", "x"],
        &["mha", "mk", "mv"],
        vec![int("num_heads", 4)],
    ))
    .node(ms(
        "FusedMatMul",
        &["x", "w"],
        &["fm"],
        vec![int("transA", 0), int("transB", 0)],
    ))
    .node(ms(
        "MatMulNBits",
        &["x", "wq"],
        &["q4"],
        vec![
            int("K", 64),
            int("N", 96),
            int("bits", 4),
            int("block_size", 32),
        ],
    ))
    .node({
        let mut n = node(
            "GatherBlockQuantized",
            &["emb", "ids", "emb_scales"],
            &["e"],
            vec![],
        );
        n.domain = "com.microsoft".into();
        n.attribute.push(int("bits", 4));
        n
    })
    .node(node(
        "SimplifiedLayerNormalization",
        &["x", "gamma"],
        &["rms", "inv"],
        vec![],
    ))
    .init(weight("words", &[100, 64]))
    .init(weight("positions", &[512, 64]))
    .node(ms(
        "EmbedLayerNormalization",
        &["ids", "", "words", "positions", "", "gamma", "gamma"],
        &["emb_out", "mask_index"],
        vec![],
    ))
    .graph();
    assert_eq!(shape(&g, "emb_out"), s(&["b", "s", "64"]));
    assert_eq!(shape(&g, "mask_index"), s(&["b"]));
    assert_eq!(shape(&g, "ln"), s(&["b", "s", "64"]));
    assert_eq!(shape(&g, "sum"), s(&["b", "s", "64"]));
    assert_eq!(shape(&g, "g"), s(&["b", "s", "64"]));
    assert_eq!(shape(&g, "att"), s(&["b", "s", "64"]));
    assert_eq!(shape(&g, "gqa"), s(&["b", "s", "64"]));
    // The cache length is the runtime total: at most past + new.
    let pk = shape(&g, "pk");
    assert_eq!(pk[..2], s(&["b", "2"]));
    assert_eq!(pk[3], "16");
    assert_eq!(shape(&g, "pv"), pk);
    assert_eq!(bound_of(&g, "pk", 2).as_deref(), Some("s+p"));
    assert_eq!(shape(&g, "mha"), s(&["b", "s", "64"]));
    assert_eq!(shape(&g, "mk"), s(&["b", "4", "s", "16"]));
    assert_eq!(shape(&g, "fm"), s(&["b", "s", "192"]));
    assert_eq!(shape(&g, "q4"), s(&["b", "s", "96"]));
    assert_eq!(shape(&g, "e"), s(&["b", "s", "64"]));
    assert_eq!(shape(&g, "inv"), s(&["b", "s", "1"]));
    assert_eq!(
        g.nodes().iter().map(|n| n.op.as_str()).nth(2),
        Some("com.microsoft.Attention")
    );
}

#[test]
fn sequences_are_their_items_back_to_back() {
    let g = M::new(vec![vi("a", F32, &["2", "3"]), vi("b", F32, &["4", "3"])])
        .node(node("SequenceConstruct", &["a", "a"], &["same"], vec![]))
        .node(node("SequenceConstruct", &["a", "b"], &["mixed"], vec![]))
        .node(node("SequenceAt", &["same", "zero"], &["item"], vec![]))
        .node(node("SequenceLength", &["mixed"], &["len"], vec![]))
        .node(node(
            "ConcatFromSequence",
            &["same"],
            &["cat"],
            vec![int("axis", 0)],
        ))
        .node(node(
            "SplitToSequence",
            &["b"],
            &["rows"],
            vec![int("keepdims", 0)],
        ))
        .init(i64s("zero", &[], &[0]))
        .graph();
    assert_eq!(shape(&g, "same"), s(&["2", "2", "3"]));
    // Items of 2 and 4 rows: a data-dependent row count of at most 6.
    assert_eq!(shape(&g, "mixed")[0], "2");
    assert_eq!(bound_of(&g, "mixed", 1).as_deref(), Some("6"));
    assert_eq!(shape(&g, "item"), s(&["2", "3"]));
    assert_eq!(shape(&g, "len"), s(&[]));
    assert_eq!(shape(&g, "cat"), s(&["4", "3"]));
    assert_eq!(shape(&g, "rows"), s(&["4", "3"]));
}

/// Issue 29, item 8: parameters the op's definition forbids, which shape inference used to
/// turn into sizes (an Einsum `ii->iiii` of 1 PiB, a pool window of 0 larger than its input,
/// GroupNormalization with no groups).
#[test]
fn forbidden_parameters_are_refused() {
    let err = |m: M| m.import().unwrap_err().to_string();
    let einsum = M::new(vec![vi("x", F32, &["4096", "4096"])]).node(node(
        "Einsum",
        &["x"],
        &["y"],
        vec![string("equation", "ii->iiii")],
    ));
    let e = err(einsum);
    assert!(e.contains("output label `i` appears more than once"), "{e}");
    let pool = M::new(vec![vi("x", F32, &["1", "3", "8", "8"])]).node(node(
        "MaxPool",
        &["x"],
        &["y"],
        vec![ints("kernel_shape", &[0, 0])],
    ));
    let e = err(pool);
    assert!(
        e.contains("attribute `kernel_shape` has 0; it must be at least 1"),
        "{e}"
    );
    let strides = M::new(vec![vi("x", F32, &["1", "3", "8", "8"])]).node(node(
        "AveragePool",
        &["x"],
        &["y"],
        vec![ints("kernel_shape", &[2, 2]), ints("strides", &[0, 1])],
    ));
    assert!(err(strides).contains("attribute `strides` has 0"));
    let groups = M::new(vec![vi("x", F32, &["1", "8", "4"])])
        .init(weight("s", &[8]))
        .node(node(
            "GroupNormalization",
            &["x", "s", "s"],
            &["y"],
            vec![int("num_groups", 0)],
        ));
    let e = groups.import().unwrap_err();
    assert!(
        matches!(&e, OnnxError::Shape { reason, .. } if matches!(
            &**reason,
            InferError::AttrTooSmall { name, value: 0, min: 1 } if name == "num_groups"
        )),
        "{e:?}"
    );
    let e = e.to_string();
    assert!(
        e.contains("attribute `num_groups` has 0; it must be at least 1"),
        "{e}"
    );
}

/// The ONNX models the issue 29 audit found still imported: a convolution of 0 groups, a
/// recurrent layer of hidden size 0, a CumSum along an axis the input lacks and a Gather of
/// a constant index past its dim. Their sizes were consistent, but no runtime runs them.
#[test]
fn models_no_runtime_runs_are_refused() {
    let err = |m: M| m.import().unwrap_err().to_string();
    let conv = M::new(vec![vi("x", F32, &["1", "4", "8", "8"])])
        .init(weight("w", &[4, 4, 3, 3]))
        .node(node("Conv", &["x", "w"], &["y"], vec![int("group", 0)]));
    let e = err(conv);
    assert!(
        e.contains("attribute `group` has 0; it must be at least 1"),
        "{e}"
    );
    let deconv = M::new(vec![vi("x", F32, &["1", "4", "8", "8"])])
        .init(weight("w", &[4, 4, 3, 3]))
        .node(node(
            "ConvTranspose",
            &["x", "w"],
            &["y"],
            vec![int("group", -2)],
        ));
    assert!(err(deconv).contains("attribute `group` has -2"));
    let lstm = M::new(vec![vi("x", F32, &["5", "2", "8"])])
        .init(weight("w", &[1, 0, 8]))
        .init(weight("r", &[1, 0, 0]))
        .node(node(
            "LSTM",
            &["x", "w", "r"],
            &["y"],
            vec![int("hidden_size", 0)],
        ));
    assert!(err(lstm).contains("attribute `hidden_size` has 0"));
    let cumsum = |axis: i64| {
        M::new(vec![vi("x", F32, &["2", "3"])])
            .init(i64s("axis", &[], &[axis]))
            .node(node("CumSum", &["x", "axis"], &["y"], vec![]))
    };
    assert!(err(cumsum(2)).contains("axis 2 is out of range for rank 2"));
    assert_eq!(shape(&cumsum(-2).graph(), "y"), s(&["2", "3"]));
    let gather = |index: i64| {
        M::new(vec![vi("x", F32, &["5", "3"])])
            .init(i64s("at", &[1], &[index]))
            .node(node("Gather", &["x", "at"], &["y"], vec![int("axis", 0)]))
    };
    assert!(err(gather(5)).contains("index 5 is out of range for a dim of 5"));
    assert!(err(gather(-6)).contains("index -6 is out of range for a dim of 5"));
    assert_eq!(shape(&gather(-5).graph(), "y"), s(&["1", "3"]));
    assert_eq!(shape(&gather(4).graph(), "y"), s(&["1", "3"]));
}

#[test]
fn graph_outputs_keep_the_order_the_model_declares() {
    // `b` is made first, `a` declared first.
    let g = M::new(vec![vi("x", F32, &["4"])])
        .node(node("Relu", &["x"], &["b"], vec![]))
        .node(node("Neg", &["b"], &["a"], vec![]))
        .output(vi("a", F32, &["4"]))
        .output(vi("b", F32, &["4"]))
        .graph();
    let names: Vec<&str> = g
        .outputs()
        .iter()
        .map(|&t| g.tensor(t).name.as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
}

mod infer_errors;
mod shape_arithmetic;
