//! Node attributes: the small ones copied into the IR, and typed lookups for inference.
//!
//! The IR keeps what the corpus JSON keeps: ints, floats, UTF-8 strings of at most
//! [`MAX_STRING`] bytes, lists of at most [`MAX_LIST`] ints or floats, and one-element
//! tensors (as an int or a float). Graphs, larger tensors and lists are left out. Order is the
//! file's. Files written before attribute types existed (IR 1) are read by which field is set.

use memplan_ir::{Attr, Attrs};

use crate::proto::{AttributeProto, NodeProto, TensorProto};
use crate::tensor;
use crate::value::Value;

/// The longest list attribute copied into the IR.
pub(crate) const MAX_LIST: usize = 64;
/// The longest string attribute copied into the IR, in bytes.
pub(crate) const MAX_STRING: usize = 256;

/// ONNX `AttributeProto.AttributeType` codes.
mod kind {
    pub(super) const FLOAT: i32 = 1;
    pub(super) const INT: i32 = 2;
    pub(super) const STRING: i32 = 3;
    pub(super) const TENSOR: i32 = 4;
    pub(super) const FLOATS: i32 = 6;
    pub(super) const INTS: i32 = 7;
}

/// The attribute's type, guessed from its fields when the file does not say (IR 1).
fn kind_of(a: &AttributeProto) -> i32 {
    if a.r#type != 0 {
        return a.r#type;
    }
    if !a.floats.is_empty() {
        kind::FLOATS
    } else if !a.ints.is_empty() {
        kind::INTS
    } else if !a.s.is_empty() {
        kind::STRING
    } else if a.t.is_some() {
        kind::TENSOR
    } else if a.f != 0.0 {
        kind::FLOAT
    } else {
        kind::INT
    }
}

/// The value of a one-element tensor attribute as an IR attribute.
fn scalar_tensor(t: &TensorProto) -> Option<Attr> {
    let dtype = tensor::dtype(t.data_type, "").ok()?;
    let (_, elements) = tensor::static_shape("", dtype, &t.dims).ok()?;
    if elements != 1 {
        return None;
    }
    match tensor::values(t, dtype, elements)? {
        Value::Ints(v) => v.first()?.as_constant().map(Attr::Int),
        Value::Floats(v) => v.first().copied().map(Attr::Float),
    }
}

/// The node's small attributes, as the IR keeps them.
pub(crate) fn small_attrs(node: &NodeProto) -> Attrs {
    let mut out = Attrs::new();
    for a in &node.attribute {
        let attr = match kind_of(a) {
            kind::FLOAT => Some(Attr::Float(f64::from(a.f))),
            kind::INT => Some(Attr::Int(a.i)),
            kind::STRING if a.s.len() <= MAX_STRING => std::str::from_utf8(&a.s)
                .ok()
                .map(|s| Attr::Str(s.to_owned())),
            kind::FLOATS if a.floats.len() <= MAX_LIST => Some(Attr::Floats(
                a.floats.iter().map(|&f| f64::from(f)).collect(),
            )),
            kind::INTS if a.ints.len() <= MAX_LIST => Some(Attr::Ints(a.ints.clone())),
            kind::TENSOR => a.t.as_ref().and_then(scalar_tensor),
            _ => None,
        };
        if let Some(attr) = attr {
            out.push((a.name.clone(), attr));
        }
    }
    out
}

/// Typed attribute lookups on one node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeAttrs<'a>(pub(crate) &'a NodeProto);

impl<'a> NodeAttrs<'a> {
    fn get(&self, name: &str) -> Option<&'a AttributeProto> {
        self.0.attribute.iter().find(|a| a.name == name)
    }

    /// An int attribute.
    pub(crate) fn int(&self, name: &str) -> Option<i64> {
        self.get(name)
            .filter(|a| kind_of(a) == kind::INT)
            .map(|a| a.i)
    }

    /// An int attribute or its default.
    pub(crate) fn int_or(&self, name: &str, default: i64) -> i64 {
        self.int(name).unwrap_or(default)
    }

    /// An int list attribute.
    pub(crate) fn ints(&self, name: &str) -> Option<&'a [i64]> {
        self.get(name)
            .filter(|a| kind_of(a) == kind::INTS)
            .map(|a| a.ints.as_slice())
    }

    /// A float list attribute.
    pub(crate) fn floats(&self, name: &str) -> Option<&'a [f32]> {
        self.get(name)
            .filter(|a| kind_of(a) == kind::FLOATS)
            .map(|a| a.floats.as_slice())
    }

    /// A string attribute (not UTF-8 counts as absent).
    pub(crate) fn string(&self, name: &str) -> Option<&'a str> {
        self.get(name)
            .filter(|a| kind_of(a) == kind::STRING)
            .and_then(|a| std::str::from_utf8(&a.s).ok())
    }

    /// A tensor attribute.
    pub(crate) fn tensor(&self, name: &str) -> Option<&'a TensorProto> {
        self.get(name).and_then(|a| a.t.as_ref())
    }

    /// A type attribute (`Optional`'s `type`).
    pub(crate) fn type_proto(&self, name: &str) -> Option<&'a crate::proto::TypeProto> {
        self.get(name).and_then(|a| a.tp.as_ref())
    }
}
