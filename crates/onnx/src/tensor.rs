//! Initializer and constant tensors: element types, dims and small values.
//!
//! Invariants: a shape made here has no negative dim and its element and byte counts fit in
//! `u64` (checked, never wrapped). Values are read only for tensors of at most
//! [`MAX_VALUE_ELEMENTS`] elements whose data is present and of exactly the declared length;
//! nothing is ever allocated from a declared dim, only from data already decoded.

use memplan_ir::{DType, Expr, Shape};

use crate::error::OnnxError;
use crate::proto::TensorProto;
use crate::value::Value;

/// The most elements a tensor may have for its values to be tracked (shape targets, axes,
/// slice bounds, scales): the corpus keeps the values of int constants up to this size.
pub(crate) const MAX_VALUE_ELEMENTS: u64 = 1024;

/// The memplan dtype of an ONNX `TensorProto.DataType` code.
pub(crate) fn dtype(code: i32, tensor: &str) -> Result<DType, OnnxError> {
    Ok(match code {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        8 => DType::String,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        14 => DType::C64,
        15 => DType::C128,
        16 => DType::BF16,
        17 => DType::F8E4M3,
        18 => DType::F8E4M3Fnuz,
        19 => DType::F8E5M2,
        20 => DType::F8E5M2Fnuz,
        21 => DType::U4,
        22 => DType::I4,
        23 => DType::F4E2M1,
        24 => DType::F8E8M0,
        25 => DType::U2,
        26 => DType::I2,
        _ => {
            return Err(OnnxError::DType {
                tensor: tensor.to_owned(),
                code,
            });
        }
    })
}

/// A constant shape from ONNX dims, checking that no dim is negative and that the element and
/// byte counts do not overflow. Returns the shape and its element count.
pub(crate) fn static_shape(
    tensor: &str,
    dtype: DType,
    dims: &[i64],
) -> Result<(Shape, u64), OnnxError> {
    let mut elements: u64 = 1;
    let mut shape = Shape::new();
    for (dim, &d) in dims.iter().enumerate() {
        let v = u64::try_from(d).map_err(|_| OnnxError::Dim {
            tensor: tensor.to_owned(),
            dim,
            reason: format!("negative size {d}"),
        })?;
        elements = elements.checked_mul(v).ok_or_else(|| OnnxError::Dim {
            tensor: tensor.to_owned(),
            dim,
            reason: "the element count overflows".into(),
        })?;
        shape.push(Expr::constant(d));
    }
    if dtype.bits().is_some() && dtype.bytes_for(elements).is_none() {
        return Err(OnnxError::Dim {
            tensor: tensor.to_owned(),
            dim: dims.len().saturating_sub(1),
            reason: "the byte count overflows".into(),
        });
    }
    Ok((shape, elements))
}

/// Little-endian fixed-size chunks of `raw`, or `None` unless it holds exactly `n` of them.
fn raw_chunks<const N: usize>(raw: &[u8], n: usize) -> Option<impl Iterator<Item = [u8; N]> + '_> {
    if raw.len() != n.checked_mul(N)? {
        return None;
    }
    Some(
        raw.chunks_exact(N)
            .filter_map(|c| <[u8; N]>::try_from(c).ok()),
    )
}

/// The values of a small tensor with data: integers (and bools) as constants, floats as `f64`.
/// `None` when the tensor is too large, stores its data externally or has none.
pub(crate) fn values(t: &TensorProto, dtype: DType, elements: u64) -> Option<Value> {
    if elements > MAX_VALUE_ELEMENTS || t.data_location == 1 {
        return None;
    }
    let n = usize::try_from(elements).ok()?;
    let ints = |v: Vec<i64>| {
        (v.len() == n).then(|| Value::Ints(v.into_iter().map(Expr::constant).collect()))
    };
    let raw = t.raw_data.as_slice();
    let has_raw = !raw.is_empty() || (n == 0 && t.int64_data.is_empty() && t.int32_data.is_empty());
    match dtype {
        DType::I64 if has_raw => ints(raw_chunks::<8>(raw, n)?.map(i64::from_le_bytes).collect()),
        DType::I64 => ints(t.int64_data.clone()),
        DType::U64 if has_raw => ints(
            raw_chunks::<8>(raw, n)?
                .map(|b| i64::try_from(u64::from_le_bytes(b)).ok())
                .collect::<Option<_>>()?,
        ),
        DType::U64 => ints(
            t.uint64_data
                .iter()
                .map(|&v| i64::try_from(v).ok())
                .collect::<Option<_>>()?,
        ),
        DType::I32 if has_raw => ints(
            raw_chunks::<4>(raw, n)?
                .map(|b| i64::from(i32::from_le_bytes(b)))
                .collect(),
        ),
        DType::U32 if has_raw => ints(
            raw_chunks::<4>(raw, n)?
                .map(|b| i64::from(u32::from_le_bytes(b)))
                .collect(),
        ),
        DType::U32 => ints(
            t.uint64_data
                .iter()
                .map(|&v| i64::try_from(v).ok())
                .collect::<Option<_>>()?,
        ),
        DType::I16 if has_raw => ints(
            raw_chunks::<2>(raw, n)?
                .map(|b| i64::from(i16::from_le_bytes(b)))
                .collect(),
        ),
        DType::U16 if has_raw => ints(
            raw_chunks::<2>(raw, n)?
                .map(|b| i64::from(u16::from_le_bytes(b)))
                .collect(),
        ),
        DType::I8 if has_raw => ints(
            raw.iter()
                .map(|&b| i64::from(i8::from_le_bytes([b])))
                .collect(),
        ),
        DType::U8 | DType::Bool if has_raw => ints(raw.iter().map(|&b| i64::from(b)).collect()),
        DType::I32 | DType::I16 | DType::U16 | DType::I8 | DType::U8 | DType::Bool => {
            ints(t.int32_data.iter().map(|&v| i64::from(v)).collect())
        }
        DType::F32 if has_raw => {
            let v: Vec<f64> = raw_chunks::<4>(raw, n)?
                .map(|b| f64::from(f32::from_le_bytes(b)))
                .collect();
            Some(Value::Floats(v))
        }
        DType::F32 => (t.float_data.len() == n)
            .then(|| Value::Floats(t.float_data.iter().map(|&v| f64::from(v)).collect())),
        DType::F64 if has_raw => Some(Value::Floats(
            raw_chunks::<8>(raw, n)?.map(f64::from_le_bytes).collect(),
        )),
        DType::F64 => (t.double_data.len() == n).then(|| Value::Floats(t.double_data.clone())),
        _ => None,
    }
}

/// The fewest bytes a tensor needs for [`uniform`] to look at it: below this no plan moves
/// by more than rounding.
pub(crate) const MIN_UNIFORM_BYTES: u64 = 1024;

/// The one value every element of `t` holds, as text (a float as Rust prints an `f64`, an
/// integer), when its data is present (not external), of exactly the declared length, at
/// least [`MIN_UNIFORM_BYTES`] long, and every element is the same bits. Reads stop at the
/// first element that differs.
pub(crate) fn uniform(t: &TensorProto, dtype: DType, elements: u64) -> Option<String> {
    if t.data_location == 1 || elements < 2 {
        return None;
    }
    let width = usize::try_from(dtype.bits()?).ok()?;
    if width % 8 != 0 || dtype.bytes_for(elements)? < MIN_UNIFORM_BYTES {
        return None;
    }
    let width = width / 8;
    let n = usize::try_from(elements).ok()?;
    let raw = t.raw_data.as_slice();
    if !raw.is_empty() {
        if raw.len() != n.checked_mul(width)? {
            return None;
        }
        let first = raw.get(..width)?;
        if !raw.chunks_exact(width).all(|c| c == first) {
            return None;
        }
        return raw_text(first, dtype);
    }
    fn same<T: PartialEq + Copy>(v: &[T], n: usize) -> Option<T> {
        let first = *v.first()?;
        (v.len() == n && v.iter().all(|x| *x == first)).then_some(first)
    }
    match dtype {
        DType::F32 => same(&t.float_data, n).map(|v| f64::from(v).to_string()),
        DType::F64 => same(&t.double_data, n).map(|v| v.to_string()),
        DType::I64 => same(&t.int64_data, n).map(|v| v.to_string()),
        DType::I32 | DType::I16 | DType::U16 | DType::I8 | DType::U8 | DType::Bool => {
            same(&t.int32_data, n).map(|v| v.to_string())
        }
        _ => None,
    }
}

/// One little-endian element as text.
fn raw_text(b: &[u8], dtype: DType) -> Option<String> {
    let half = |bits: u16| {
        // IEEE binary16: 1 sign, 5 exponent, 10 fraction bits.
        let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
        let exp = i32::from((bits >> 10) & 0x1f);
        let frac = f64::from(bits & 0x3ff);
        sign * match exp {
            0 => frac * 2f64.powi(-24),
            31 if frac == 0.0 => f64::INFINITY,
            31 => f64::NAN,
            _ => (1.0 + frac / 1024.0) * 2f64.powi(exp - 15),
        }
    };
    Some(match dtype {
        DType::F32 => f64::from(f32::from_le_bytes(b.try_into().ok()?)).to_string(),
        DType::F64 => f64::from_le_bytes(b.try_into().ok()?).to_string(),
        DType::F16 => half(u16::from_le_bytes(b.try_into().ok()?)).to_string(),
        DType::BF16 => {
            let bits = u32::from(u16::from_le_bytes(b.try_into().ok()?)) << 16;
            f64::from(f32::from_bits(bits)).to_string()
        }
        DType::I64 => i64::from_le_bytes(b.try_into().ok()?).to_string(),
        DType::U64 => u64::from_le_bytes(b.try_into().ok()?).to_string(),
        DType::I32 => i32::from_le_bytes(b.try_into().ok()?).to_string(),
        DType::U32 => u32::from_le_bytes(b.try_into().ok()?).to_string(),
        DType::I16 => i16::from_le_bytes(b.try_into().ok()?).to_string(),
        DType::U16 => u16::from_le_bytes(b.try_into().ok()?).to_string(),
        DType::I8 => i8::from_le_bytes(b.try_into().ok()?).to_string(),
        DType::U8 | DType::Bool => b.first()?.to_string(),
        _ => return None,
    })
}
