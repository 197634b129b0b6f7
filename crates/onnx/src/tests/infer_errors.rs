//! Shape-inference failures as typed errors: each malformed node gives its own
//! [`InferError`] variant with the input, attribute, ranks and counts as fields, and the
//! message names the node, its op and the output as well as what is wrong.

use crate::{Counted, Quantity, Ranks};

use super::*;

/// A model of inputs `x: f32[dims]` (and `b` when `b` is given) and one node.
fn one(x: &[&str], b: Option<&[&str]>, n: NodeProto) -> M {
    let mut inputs = vec![vi("x", F32, x)];
    if let Some(b) = b {
        inputs.push(vi("b", F32, b));
    }
    M::new(inputs).node(n)
}

/// The import error of `m`, which must be a shape failure of node `node`: its reason.
fn reason(m: M, node_name: &str, op_type: &str) -> (InferError, String) {
    let e = m.import().unwrap_err();
    let text = e.to_string();
    match e {
        OnnxError::Shape {
            node, op, reason, ..
        } => {
            assert_eq!((node.as_str(), op.as_str()), (node_name, op_type), "{text}");
            (*reason, text)
        }
        other => panic!("not a shape failure: {other}"),
    }
}

/// A one-dimensional MaxPool over `x: f32[1, 3, 8]` with `attrs`.
fn pool1d(attrs: Vec<AttributeProto>) -> M {
    one(
        &["1", "3", "8"],
        None,
        node("MaxPool", &["x"], &["y"], attrs),
    )
}

#[test]
fn each_failure_is_its_own_variant_with_its_fields() {
    let s = |v: &str| v.to_owned();
    let cases: Vec<(M, &str, InferError, &str)> = vec![
        (
            one(
                &["2", "3", "4"],
                Some(&["4", "5"]),
                node("Gemm", &["x", "b"], &["y"], vec![]),
            ),
            "Gemm",
            InferError::Rank {
                input: s("x"),
                rank: 3,
                expected: Ranks::Exactly(2),
            },
            "`x` has rank 3, not 2",
        ),
        (
            one(
                &["2", "3"],
                Some(&["4", "3"]),
                node("Concat", &["x", "b"], &["y"], vec![int("axis", 5)]),
            ),
            "Concat",
            InferError::Axis { axis: 5, rank: 2 },
            "axis 5 is out of range for rank 2",
        ),
        (
            one(
                &["2", "3"],
                Some(&["4"]),
                node("Concat", &["x", "b"], &["y"], vec![int("axis", 0)]),
            ),
            "Concat",
            InferError::Rank {
                input: s("b"),
                rank: 1,
                expected: Ranks::Exactly(2),
            },
            "`b` has rank 1, not 2",
        ),
        (
            one(
                &["4"],
                Some(&["3", "5"]),
                node("RoiAlign", &["x", "b", "b"], &["y"], vec![]),
            ),
            "RoiAlign",
            InferError::Rank {
                input: s("x"),
                rank: 1,
                expected: Ranks::AtLeast(2),
            },
            "`x` has rank 1, not at least 2",
        ),
        (
            one(
                &["1", "3", "8", "8"],
                None,
                node("MaxPool", &["x"], &["y"], vec![ints("kernel_shape", &[2])]),
            ),
            "MaxPool",
            InferError::Count {
                counted: Counted::Kernel,
                count: 1,
                expected: 2,
            },
            "kernel has 1 dims for 2 spatial dims",
        ),
        (
            pool1d(vec![
                ints("kernel_shape", &[i64::MAX]),
                ints("dilations", &[2]),
            ]),
            "MaxPool",
            InferError::Overflow {
                what: Quantity::Window,
            },
            "the window (dilation * (kernel - 1) + 1) overflows",
        ),
        (
            pool1d(vec![ints("kernel_shape", &[2]), ints("strides", &[1, 1])]),
            "MaxPool",
            InferError::AttrLength {
                name: s("strides"),
                count: 2,
                expected: 1,
            },
            "attribute `strides` has 2 values, expected 1",
        ),
        (
            pool1d(vec![
                ints("kernel_shape", &[2]),
                string("auto_pad", "MIDDLE"),
            ]),
            "MaxPool",
            InferError::AttrValue {
                name: s("auto_pad"),
                value: s("MIDDLE"),
            },
            "attribute `auto_pad` is `MIDDLE`, which the op does not know",
        ),
        (
            one(
                &["2", "3"],
                None,
                node("Transpose", &["x"], &["y"], vec![ints("perm", &[1, -1])]),
            ),
            "Transpose",
            InferError::Permutation {
                perm: vec![1, 1],
                rank: 2,
            },
            "perm [1, 1] is not a permutation of rank 2",
        ),
        (
            one(
                &["2", "3"],
                None,
                node("Squeeze", &["x"], &["y"], vec![ints("axes", &[1])]),
            )
            .opset(11),
            "Squeeze",
            InferError::Squeeze { axis: 1, dim: 3 },
            "axis 1 has size 3, not 1",
        ),
        (
            one(
                &["2", "3"],
                None,
                node("Unsqueeze", &["x"], &["y"], vec![ints("axes", &[0, -4])]),
            )
            .opset(11),
            "Unsqueeze",
            InferError::RepeatedAxis { axes: vec![0, -4] },
            "axes [0, -4] name an axis twice",
        ),
        (
            one(&["2", "3"], None, node("Unsqueeze", &["x"], &["y"], vec![])).opset(11),
            "Unsqueeze",
            InferError::NoAxes,
            "no axes are given",
        ),
        (
            one(&["2", "3"], None, node("Tile", &["x", "r"], &["y"], vec![])).init(i64s(
                "r",
                &[1],
                &[2],
            )),
            "Tile",
            InferError::Count {
                counted: Counted::Repeats,
                count: 1,
                expected: 2,
            },
            "1 repeats for rank 2",
        ),
        (
            one(
                &["6"],
                None,
                node("Slice", &["x", "s", "e", "a", "st"], &["y"], vec![]),
            )
            .init(i64s("s", &[1], &[0]))
            .init(i64s("e", &[1], &[4]))
            .init(i64s("a", &[1], &[0]))
            .init(i64s("st", &[1], &[0])),
            "Slice",
            InferError::Zero {
                what: Quantity::SliceStep,
            },
            "the slice step is 0",
        ),
        (
            one(
                &["2", "3"],
                None,
                node(
                    "Einsum",
                    &["x"],
                    &["y"],
                    vec![string("equation", "ij,jk->ik")],
                ),
            ),
            "Einsum",
            InferError::EinsumOperands {
                equation: s("ij,jk->ik"),
                operands: 2,
                inputs: 1,
            },
            "equation `ij,jk->ik` has 2 operands for 1 inputs",
        ),
        (
            one(
                &["2", "3"],
                None,
                node("Einsum", &["x"], &["y"], vec![string("equation", "ijk->i")]),
            ),
            "Einsum",
            InferError::EinsumTerm {
                term: s("ijk"),
                input: s("x"),
                labels: 3,
                rank: 2,
            },
            "`ijk` has 3 labels for `x` of rank 2",
        ),
        (
            one(
                &["2", "3"],
                None,
                node("Cast", &["x"], &["y"], vec![int("to", 99)]),
            ),
            "Cast",
            InferError::DType {
                what: s("attribute `to`"),
                code: 99,
            },
            "attribute `to`: ONNX element type 99 is not supported",
        ),
        (
            one(
                &["6"],
                None,
                node("Split", &["x"], &["y", "z"], vec![int("num_outputs", 3)]),
            ),
            "Split",
            InferError::SplitOutputs {
                attr: 3,
                outputs: 2,
            },
            "num_outputs is 3 but the node has 2 outputs",
        ),
        (
            one(
                &["1", "3", "2", "2"],
                None,
                node("DepthToSpace", &["x"], &["y"], vec![int("blocksize", 2)]),
            ),
            "DepthToSpace",
            InferError::NotDivisible {
                what: Quantity::Channels,
                dim: s("3"),
                divisor: s("blocksize^2 = 4"),
            },
            "the channel count 3 is not divisible by blocksize^2 = 4",
        ),
        (
            one(&["2"], None, node("TopK", &["x", "k"], &["v", "i"], vec![])).init(i64s(
                "k",
                &[0],
                &[],
            )),
            "TopK",
            InferError::EmptyValue { input: s("k") },
            "the value of input `k` is empty",
        ),
        (
            one(
                &["2", "3"],
                Some(&["4", "5"]),
                node("Add", &["x", "b"], &["y"], vec![]),
            ),
            "Add",
            InferError::Broadcast {
                a: s("[2, 3]"),
                b: s("[4, 5]"),
            },
            "shapes [2, 3] and [4, 5] do not broadcast",
        ),
    ];
    let n = cases.len();
    for (m, op, want, text) in cases {
        let node_name = format!("{op}_{}", if op == "TopK" { "v" } else { "y" });
        let (got, message) = reason(m, &node_name, op);
        assert_eq!(got, want, "{message}");
        assert!(
            message.contains(text) && message.contains(&format!("`{node_name}` ({op})")),
            "{message}"
        );
    }
    assert_eq!(n, 21);
}
