//! Typed view descriptors: which elements of which region a tensor is, as `[T]`.
//!
//! A [`ViewDesc`] is plain data (region, element offset, length, and, when made by
//! [`crate::Layout::view`], where it is in the layout's one buffer); backends turn it into a
//! host slice or a device view. Making one checks the three things that could make such a
//! view wrong: the element type, a whole number of elements, and the alignment of the
//! offset. Each mismatch is a [`ViewError`], never a panic.

use std::fmt;
use std::marker::PhantomData;

use memplan_ir::{AnyEntity, DType, GraphError, Names, TensorId};

use crate::element::Element;
use crate::layout::{Region, Slot};

/// Why a tensor cannot be viewed (or borrowed) as asked.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ViewError {
    /// The plan gives the tensor no bytes (a weight-free or zero-size tensor, or one that is
    /// not in the graph).
    NotPlaced(TensorId),
    /// The tensor is bound by the caller (see [`crate::Placement::Caller`]) and no buffer is
    /// bound to it yet.
    Unbound(TensorId),
    /// The tensor's bytes are one run per row of a Concat's output (a strided Concat part),
    /// not one range: no flat view of it exists.
    Strided(TensorId),
    /// The requested element type is not the stored one.
    DTypeMismatch {
        /// The tensor.
        tensor: TensorId,
        /// The dtype stored.
        stored: DType,
        /// The dtype asked for.
        requested: DType,
    },
    /// The tensor's bytes are not a whole number of elements.
    SizeMismatch {
        /// The tensor.
        tensor: TensorId,
        /// Its bytes.
        bytes: u64,
        /// The element size.
        element: u64,
    },
    /// The view holds a different number of elements than the caller expects.
    LengthMismatch {
        /// The tensor.
        tensor: TensorId,
        /// Its element count.
        len: usize,
        /// The count asked for.
        requested: usize,
    },
    /// The tensor's offset is not aligned for the element type.
    Misaligned {
        /// The tensor.
        tensor: TensorId,
        /// Its offset in the region.
        offset: u64,
        /// The alignment needed.
        align: u64,
    },
    /// Two borrows asked for together overlap, and at least one of them is mutable.
    Overlap {
        /// One tensor.
        first: TensorId,
        /// The other.
        second: TensorId,
    },
    /// The data given has the wrong length.
    DataLength {
        /// The tensor.
        tensor: TensorId,
        /// Elements needed.
        expected: usize,
        /// Elements given.
        actual: usize,
    },
    /// A size does not fit in this machine's `usize`.
    TooLarge(TensorId),
}

impl GraphError for ViewError {
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |t: TensorId| names.name(t);
        match self {
            ViewError::NotPlaced(t) => write!(f, "tensor {} has no bytes in this layout", n(*t)),
            ViewError::Unbound(t) => write!(
                f,
                "tensor {} is bound by the caller, and no buffer is bound to it",
                n(*t)
            ),
            ViewError::Strided(t) => write!(
                f,
                "tensor {} is a strided Concat part: its bytes are one run per row, not a range",
                n(*t)
            ),
            ViewError::DTypeMismatch {
                tensor,
                stored,
                requested,
            } => write!(f, "tensor {} holds {stored}, not {requested}", n(*tensor)),
            ViewError::SizeMismatch {
                tensor,
                bytes,
                element,
            } => write!(
                f,
                "tensor {} has {bytes} bytes, not a multiple of the {element}-byte element",
                n(*tensor)
            ),
            ViewError::LengthMismatch {
                tensor,
                len,
                requested,
            } => write!(
                f,
                "tensor {} has {len} elements, not {requested}",
                n(*tensor)
            ),
            ViewError::Misaligned {
                tensor,
                offset,
                align,
            } => write!(
                f,
                "tensor {} at offset {offset} is not aligned to {align} bytes",
                n(*tensor)
            ),
            ViewError::Overlap { first, second } => write!(
                f,
                "tensors {} and {} share bytes; they cannot be borrowed together mutably",
                n(*first),
                n(*second)
            ),
            ViewError::DataLength {
                tensor,
                expected,
                actual,
            } => write!(
                f,
                "tensor {} needs {expected} elements of data, got {actual}",
                n(*tensor)
            ),
            ViewError::TooLarge(t) => write!(
                f,
                "tensor {} is too large for this machine's address space",
                n(*t)
            ),
        }
    }

    fn entities(&self) -> Vec<AnyEntity> {
        match self {
            ViewError::NotPlaced(t)
            | ViewError::Unbound(t)
            | ViewError::Strided(t)
            | ViewError::TooLarge(t)
            | ViewError::DTypeMismatch { tensor: t, .. }
            | ViewError::SizeMismatch { tensor: t, .. }
            | ViewError::LengthMismatch { tensor: t, .. }
            | ViewError::Misaligned { tensor: t, .. }
            | ViewError::DataLength { tensor: t, .. } => vec![AnyEntity::Tensor(*t)],
            ViewError::Overlap { first, second } => {
                vec![AnyEntity::Tensor(*first), AnyEntity::Tensor(*second)]
            }
        }
    }
}

/// The message with ids (`t3`); [`GraphError::with_graph`] names the tensors.
impl fmt::Display for ViewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_with(Names::ids(), f)
    }
}

impl std::error::Error for ViewError {}

/// Tensor `tensor` as `len` elements of `T` from element `elem_offset` of `region`.
#[derive(Debug)]
pub struct ViewDesc<T> {
    tensor: TensorId,
    region: Region,
    elem_offset: usize,
    len: usize,
    /// The region's start in the one buffer, in elements, when known.
    region_start: Option<usize>,
    _marker: PhantomData<fn() -> T>,
}

impl<T> Clone for ViewDesc<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for ViewDesc<T> {}

impl<T: Element> ViewDesc<T> {
    /// The view of `slot` as `[T]`, checked, as a view of its region alone
    /// ([`ViewDesc::buffer_range`] is `None`; [`crate::Layout::view`] makes one that knows
    /// the region's place in the one buffer).
    pub fn new(slot: &Slot) -> Result<ViewDesc<T>, ViewError> {
        let tensor = slot.tensor;
        if slot.rows > 1 {
            return Err(ViewError::Strided(tensor));
        }
        if slot.dtype != T::DTYPE {
            return Err(ViewError::DTypeMismatch {
                tensor,
                stored: slot.dtype,
                requested: T::DTYPE,
            });
        }
        let size = size_of::<T>() as u64;
        let align = align_of::<T>() as u64;
        if !slot.bytes.is_multiple_of(size) {
            return Err(ViewError::SizeMismatch {
                tensor,
                bytes: slot.bytes,
                element: size,
            });
        }
        if !slot.offset.is_multiple_of(align) || !slot.offset.is_multiple_of(size) {
            return Err(ViewError::Misaligned {
                tensor,
                offset: slot.offset,
                align: align.max(size),
            });
        }
        let elem_offset =
            usize::try_from(slot.offset / size).map_err(|_| ViewError::TooLarge(tensor))?;
        let len = usize::try_from(slot.bytes / size).map_err(|_| ViewError::TooLarge(tensor))?;
        Ok(ViewDesc {
            tensor,
            region: slot.region,
            elem_offset,
            len,
            region_start: None,
            _marker: PhantomData,
        })
    }

    /// The same view, its region starting `start` bytes into the one buffer (a multiple of
    /// the buffer alignment, so of `T`'s size).
    pub(crate) fn in_buffer(mut self, start: u64) -> Result<ViewDesc<T>, ViewError> {
        let size = size_of::<T>() as u64;
        let elems = usize::try_from(start / size).map_err(|_| ViewError::TooLarge(self.tensor))?;
        if !start.is_multiple_of(size) || elems.checked_add(self.elem_offset).is_none() {
            return Err(ViewError::TooLarge(self.tensor));
        }
        self.region_start = Some(elems);
        Ok(self)
    }
}

impl<T> ViewDesc<T> {
    /// The tensor.
    pub fn tensor(&self) -> TensorId {
        self.tensor
    }
    /// The region it lives in.
    pub fn region(&self) -> Region {
        self.region
    }
    /// Its first element, counted in `T` from the region's start.
    pub fn elem_offset(&self) -> usize {
        self.elem_offset
    }
    /// Its element count.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it has no elements (never, for a placed tensor).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Its elements as a range of element indices in the region.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.elem_offset..self.elem_offset.saturating_add(self.len)
    }
    /// Its elements as a range of element indices from the first byte of the layout's one
    /// buffer (see [`crate::Layout::buffer_bytes`]); `None` for a descriptor made from a
    /// slot alone.
    pub fn buffer_range(&self) -> Option<std::ops::Range<usize>> {
        let start = self.region_start?.checked_add(self.elem_offset)?;
        Some(start..start.checked_add(self.len)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;
    use memplan_planner::AliasKind;

    fn slot(dtype: DType, offset: u64, bytes: u64) -> Slot {
        Slot {
            tensor: TensorId(3),
            region: Region::Arena,
            offset,
            bytes,
            dtype,
            alias_of: None,
            alias: None,
            root: TensorId(3),
            rows: 1,
            stride: bytes,
        }
    }

    #[test]
    fn typed_view_has_element_offset_and_length() {
        let v = ViewDesc::<f32>::new(&slot(DType::F32, 128, 64)).unwrap();
        assert_eq!((v.elem_offset(), v.len(), v.range()), (32, 16, 32..48));
        assert_eq!(v.region(), Region::Arena);
        let h = ViewDesc::<f16>::new(&slot(DType::F16, 2, 6)).unwrap();
        assert_eq!((h.elem_offset(), h.len()), (1, 3));
    }

    #[test]
    fn dtype_mismatch_is_an_error() {
        assert_eq!(
            ViewDesc::<f16>::new(&slot(DType::F32, 0, 64)).unwrap_err(),
            ViewError::DTypeMismatch {
                tensor: TensorId(3),
                stored: DType::F32,
                requested: DType::F16
            }
        );
        // Same size, other type: still a mismatch.
        assert!(matches!(
            ViewDesc::<u32>::new(&slot(DType::F32, 0, 64)),
            Err(ViewError::DTypeMismatch { .. })
        ));
    }

    #[test]
    fn size_and_alignment_mismatch_are_errors() {
        assert_eq!(
            ViewDesc::<f32>::new(&slot(DType::F32, 0, 6)).unwrap_err(),
            ViewError::SizeMismatch {
                tensor: TensorId(3),
                bytes: 6,
                element: 4
            }
        );
        // A view (a Slice, say) may start on a byte that is no f32 boundary.
        let mut s = slot(DType::F32, 6, 8);
        s.alias = Some(AliasKind::View);
        assert_eq!(
            ViewDesc::<f32>::new(&s).unwrap_err(),
            ViewError::Misaligned {
                tensor: TensorId(3),
                offset: 6,
                align: 4
            }
        );
    }
}
