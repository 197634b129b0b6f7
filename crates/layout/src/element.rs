//! Element types that typed views can hold.
//!
//! An [`Element`] is a plain-old-data Rust type with a memplan [`DType`] of the same size:
//! a view of a tensor as `[T]` is allowed only when `T::DTYPE` is the tensor's dtype. `bool`
//! is left out on purpose: a byte other than 0 or 1 is not a valid Rust `bool`, and arena
//! bytes can hold anything; read `bool` tensors as raw bytes instead.

use half::{bf16, f16};
use memplan_ir::DType;

/// A Rust type that stores one element of a memplan dtype.
pub trait Element: bytemuck::Pod + Send + Sync + 'static {
    /// The dtype whose elements this type holds.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t {
            const DTYPE: DType = DType::$d;
        })*
    };
}

/// `bytes` as elements of `T` (a split borrow's bytes, say): `None` when they are not a
/// whole number of `T`s or do not start on `T`'s alignment.
pub fn as_elements<T: Element>(bytes: &[u8]) -> Option<&[T]> {
    bytemuck::try_cast_slice(bytes).ok()
}

/// `bytes` as elements of `T`, mutably (see [`as_elements`]).
pub fn as_elements_mut<T: Element>(bytes: &mut [u8]) -> Option<&mut [T]> {
    bytemuck::try_cast_slice_mut(bytes).ok()
}

element!(
    f64 => F64,
    f32 => F32,
    f16 => F16,
    bf16 => BF16,
    i64 => I64,
    i32 => I32,
    i16 => I16,
    i8 => I8,
    u64 => U64,
    u32 => U32,
    u16 => U16,
    u8 => U8,
);

#[cfg(test)]
mod tests {
    use super::*;

    fn check<T: Element>() {
        let bits = T::DTYPE.bits().map(u64::from);
        assert_eq!(bits, Some(8 * size_of::<T>() as u64), "{}", T::DTYPE);
    }

    #[test]
    fn bytes_as_elements() {
        let mut raw = [0u64; 4];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut raw);
        assert_eq!(as_elements::<f32>(bytes).map(<[f32]>::len), Some(8));
        assert!(as_elements::<f32>(&bytes[1..5]).is_none(), "misaligned");
        assert!(as_elements::<f32>(&bytes[..6]).is_none(), "not whole");
        as_elements_mut::<u16>(bytes).unwrap()[1] = 0xABCD;
        assert_eq!(as_elements::<u16>(bytes).unwrap()[1], 0xABCD);
    }

    #[test]
    fn sizes_match_dtypes() {
        check::<f64>();
        check::<f32>();
        check::<f16>();
        check::<bf16>();
        check::<i64>();
        check::<i32>();
        check::<i16>();
        check::<i8>();
        check::<u64>();
        check::<u32>();
        check::<u16>();
        check::<u8>();
    }
}
