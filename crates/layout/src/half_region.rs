//! Conversion of `f32` host data into the half region's formats, and back.
//!
//! Weights usually arrive as `f32`. A layout with [`crate::LayoutOptions::half_weights`]
//! stores them as `f16` or `bf16`; these functions round to nearest even (the `half` crate's
//! conversion), keep infinities and NaNs, and turn `f32` values beyond the `f16` range into
//! infinities, as a GPU's conversion instruction would.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::layout::HalfFormat;

/// `f32` values converted to one of the half formats.
#[derive(Clone, Debug, PartialEq)]
pub enum HalfData {
    /// binary16 values.
    F16(Vec<f16>),
    /// bfloat16 values.
    BF16(Vec<bf16>),
}

impl HalfData {
    /// `src` converted to `format`.
    pub fn from_f32(src: &[f32], format: HalfFormat) -> HalfData {
        match format {
            HalfFormat::F16 => {
                let mut out = vec![f16::ZERO; src.len()];
                out.convert_from_f32_slice(src);
                HalfData::F16(out)
            }
            HalfFormat::BF16 => {
                let mut out = vec![bf16::ZERO; src.len()];
                out.convert_from_f32_slice(src);
                HalfData::BF16(out)
            }
        }
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            HalfData::F16(v) => v.len(),
            HalfData::BF16(v) => v.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values' bytes in this machine's native byte order, two per value (what a copy to
    /// a device of the same byte order stores; see [`HalfData::to_le_bytes`] for a fixed
    /// order).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            HalfData::F16(v) => bytemuck::cast_slice(v),
            HalfData::BF16(v) => bytemuck::cast_slice(v),
        }
    }

    /// The values as little-endian bytes, two per value, on any machine.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            HalfData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HalfData::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// The values widened back to `f32` (exact).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            HalfData::F16(v) => v.to_f32_vec(),
            HalfData::BF16(v) => v.to_f32_vec(),
        }
    }
}

/// Writes `src` converted to `f16` into `dst`; both must have the same length (checked by
/// the caller, which knows the tensor).
pub(crate) fn f32_into_f16(dst: &mut [f16], src: &[f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f16::from_f32(s);
    }
}

/// Writes `src` converted to `bf16` into `dst`, pairwise.
pub(crate) fn f32_into_bf16(dst: &mut [bf16], src: &[f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = bf16::from_f32(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trip_within_precision() {
        let src = [0.0f32, 1.0, -2.5, 0.1, 65504.0, 1.0e6, f32::INFINITY];
        let h = HalfData::from_f32(&src, HalfFormat::F16);
        assert_eq!(h.len(), src.len());
        assert_eq!(h.as_bytes().len(), 2 * src.len());
        let back = h.to_f32();
        assert_eq!(&back[..3], &[0.0, 1.0, -2.5]);
        assert!((back[3] - 0.1).abs() < 1e-4);
        assert_eq!(back[4], 65504.0);
        assert_eq!(
            back[5],
            f32::INFINITY,
            "beyond f16's range becomes infinity"
        );
        assert_eq!(back[6], f32::INFINITY);
        // 1.0 in binary16 is 0x3C00: little-endian on any machine, native order as stored.
        assert_eq!(&h.to_le_bytes()[2..4], &[0x00, 0x3C]);
        assert_eq!(&h.as_bytes()[2..4], &0x3C00u16.to_ne_bytes());
        let b = HalfData::from_f32(&[1.0], HalfFormat::BF16);
        assert_eq!(b.to_le_bytes(), vec![0x80, 0x3F]);
    }

    #[test]
    fn bf16_keeps_range_and_nan() {
        let src = [1.0e30f32, f32::NAN, -1.0];
        let back = HalfData::from_f32(&src, HalfFormat::BF16).to_f32();
        assert!((back[0] / 1.0e30 - 1.0).abs() < 1e-2);
        assert!(back[1].is_nan());
        assert_eq!(back[2], -1.0);
    }

    #[test]
    fn in_place_conversion_matches() {
        let src = [0.5f32, 3.0, -7.25];
        let mut d16 = [f16::ZERO; 3];
        f32_into_f16(&mut d16, &src);
        let mut db = [bf16::ZERO; 3];
        f32_into_bf16(&mut db, &src);
        assert_eq!(
            HalfData::F16(d16.to_vec()),
            HalfData::from_f32(&src, HalfFormat::F16)
        );
        assert_eq!(
            HalfData::BF16(db.to_vec()),
            HalfData::from_f32(&src, HalfFormat::BF16)
        );
    }
}
