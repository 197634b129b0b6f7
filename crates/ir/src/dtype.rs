//! Element types and their storage sizes.
//!
//! Sizes are in bits so that packed 4-bit and 2-bit types are exact: a tensor of `n` elements
//! takes `ceil(n * bits / 8)` bytes. `bool` takes one byte per element, as in ONNX.

use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum DType {
    /// IEEE 754 binary64.
    F64,
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16.
    BF16,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits.
    F8E4M3,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits.
    F8E5M2,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits, no infinities, no negative zero
    /// (ONNX `FLOAT8E4M3FNUZ`).
    F8E4M3Fnuz,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits, no infinities, no negative zero
    /// (ONNX `FLOAT8E5M2FNUZ`).
    F8E5M2Fnuz,
    /// 8-bit exponent-only float, a power-of-two scale (ONNX `FLOAT8E8M0`).
    F8E8M0,
    /// 4-bit float, 2 exponent bits, 1 mantissa bit, two per byte (ONNX `FLOAT4E2M1`).
    F4E2M1,
    /// Signed 64-bit integer.
    I64,
    /// Signed 32-bit integer.
    I32,
    /// Signed 16-bit integer.
    I16,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 64-bit integer.
    U64,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 8-bit integer.
    U8,
    /// Boolean, one byte per element.
    Bool,
    /// Signed 4-bit integer, two per byte.
    I4,
    /// Unsigned 4-bit integer, two per byte.
    U4,
    /// Signed 2-bit integer, four per byte.
    I2,
    /// Unsigned 2-bit integer, four per byte.
    U2,
    /// Complex of two binary32.
    C64,
    /// Complex of two binary64.
    C128,
    /// Variable-length string: no fixed storage size. Tensors of this type cannot be placed.
    String,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 26] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F8E4M3,
        DType::F8E5M2,
        DType::F8E4M3Fnuz,
        DType::F8E5M2Fnuz,
        DType::F8E8M0,
        DType::F4E2M1,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U64,
        DType::U32,
        DType::U16,
        DType::U8,
        DType::Bool,
        DType::I4,
        DType::U4,
        DType::I2,
        DType::U2,
        DType::C64,
        DType::C128,
        DType::String,
    ];

    /// Storage bits per element; `None` for [`DType::String`].
    pub fn bits(self) -> Option<u32> {
        Some(match self {
            DType::C128 => 128,
            DType::F64 | DType::I64 | DType::U64 | DType::C64 => 64,
            DType::F32 | DType::I32 | DType::U32 => 32,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 16,
            DType::F8E4M3
            | DType::F8E5M2
            | DType::F8E4M3Fnuz
            | DType::F8E5M2Fnuz
            | DType::F8E8M0
            | DType::I8
            | DType::U8
            | DType::Bool => 8,
            DType::I4 | DType::U4 | DType::F4E2M1 => 4,
            DType::I2 | DType::U2 => 2,
            DType::String => return None,
        })
    }

    /// Bytes taken by `elements` elements: `ceil(elements * bits / 8)`; `None` on overflow
    /// or for [`DType::String`].
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        let bits = u64::from(self.bits()?);
        let total_bits = elements.checked_mul(bits)?;
        Some(total_bits.div_ceil(8))
    }

    /// The natural alignment of one element in bytes (1 for sub-byte types).
    pub fn element_align(self) -> u64 {
        match self {
            DType::C64 => 4,
            DType::C128 => 8,
            other => u64::from(other.bits().unwrap_or(8)).div_ceil(8).max(1),
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F64
                | DType::F32
                | DType::F16
                | DType::BF16
                | DType::F8E4M3
                | DType::F8E5M2
                | DType::F8E4M3Fnuz
                | DType::F8E5M2Fnuz
                | DType::F8E8M0
                | DType::F4E2M1
        )
    }

    /// The name used in the JSON format (`f32`, `bf16`, `i4`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E4M3Fnuz => "f8e4m3fnuz",
            DType::F8E5M2Fnuz => "f8e5m2fnuz",
            DType::F8E8M0 => "f8e8m0",
            DType::F4E2M1 => "f4e2m1",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U64 => "u64",
            DType::U32 => "u32",
            DType::U16 => "u16",
            DType::U8 => "u8",
            DType::Bool => "bool",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::I2 => "i2",
            DType::U2 => "u2",
            DType::C64 => "c64",
            DType::C128 => "c128",
            DType::String => "string",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dtype name that memplan does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown dtype `{0}` (expected one of f64 f32 f16 bf16 f8e4m3 f8e5m2 f8e4m3fnuz f8e5m2fnuz f8e8m0 f4e2m1 i64 i32 i16 i8 u64 u32 u16 u8 bool i4 u4 i2 u2 c64 c128 string)"
)]
#[non_exhaustive]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;
    fn from_str(s: &str) -> Result<DType, UnknownDType> {
        let alias = match s {
            "float64" | "double" => Some(DType::F64),
            "float32" | "float" => Some(DType::F32),
            "float16" | "half" => Some(DType::F16),
            "bfloat16" => Some(DType::BF16),
            "f8e4m3fn" | "float8e4m3fn" => Some(DType::F8E4M3),
            "float8e5m2" => Some(DType::F8E5M2),
            "float8e4m3fnuz" => Some(DType::F8E4M3Fnuz),
            "float8e5m2fnuz" => Some(DType::F8E5M2Fnuz),
            "float8e8m0" => Some(DType::F8E8M0),
            "float4e2m1" => Some(DType::F4E2M1),
            "int64" => Some(DType::I64),
            "int32" => Some(DType::I32),
            "int16" => Some(DType::I16),
            "int8" => Some(DType::I8),
            "uint8" => Some(DType::U8),
            "int4" => Some(DType::I4),
            "uint4" => Some(DType::U4),
            "int2" => Some(DType::I2),
            "uint2" => Some(DType::U2),
            _ => None,
        };
        alias
            .or_else(|| DType::ALL.into_iter().find(|d| d.name() == s))
            .ok_or_else(|| UnknownDType(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_types_round_up() {
        assert_eq!(DType::I4.bytes_for(3), Some(2));
        assert_eq!(DType::U4.bytes_for(4), Some(2));
        assert_eq!(DType::I4.bytes_for(0), Some(0));
        assert_eq!(DType::Bool.bytes_for(5), Some(5));
        assert_eq!(DType::BF16.bytes_for(7), Some(14));
        assert_eq!(DType::F4E2M1.bytes_for(5), Some(3));
        assert_eq!(DType::I2.bytes_for(5), Some(2));
        assert_eq!(DType::U2.bytes_for(8), Some(2));
        assert_eq!(DType::U2.bytes_for(9), Some(3));
        assert_eq!(DType::F8E8M0.bytes_for(3), Some(3));
        assert_eq!(DType::F8E4M3Fnuz.bytes_for(3), Some(3));
        assert_eq!(DType::I2.element_align(), 1);
    }

    #[test]
    fn overflow_is_none() {
        assert_eq!(DType::F64.bytes_for(u64::MAX / 4), None);
        assert_eq!(DType::String.bytes_for(1), None);
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>(), Ok(d));
        }
        assert!("f31".parse::<DType>().is_err());
    }
}
