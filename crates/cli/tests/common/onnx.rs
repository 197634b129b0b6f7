//! ONNX protobuf builders for the tests that make their models in memory.

use memplan_onnx::proto::{
    NodeProto, TensorShapeProto, TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};

/// The ONNX element type code of 32-bit floats.
pub const F32: i32 = 1;
/// The ONNX element type code of 64-bit signed integers.
pub const I64: i32 = 7;
/// The ONNX element type code of booleans.
pub const BOOL: i32 = 9;

/// A value-info entry for a tensor of element type `elem`; a dim is a number or a symbol
/// name.
pub fn vi(name: &str, elem: i32, dims: &[&str]) -> ValueInfoProto {
    use tensor_shape_proto::dimension::Value as D;
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(
                d.parse()
                    .map_or_else(|_| D::DimParam((*d).into()), D::DimValue),
            ),
            ..Default::default()
        })
        .collect();
    let tensor = type_proto::Tensor {
        elem_type: elem,
        shape: Some(TensorShapeProto { dim }),
    };
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(tensor)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A node named `{op_type}_{first output}`.
pub fn op(op_type: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        name: format!("{op_type}_{}", outputs.first().copied().unwrap_or("")),
        op_type: op_type.into(),
        input: inputs.iter().map(|s| (*s).to_owned()).collect(),
        output: outputs.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}
