//! Typed `u32` ids and the index vectors they key.
//!
//! Every entity of a graph lives in an [`IndexVec`] and is named by its id. Indexing a tensor
//! table with a [`NodeId`] is a type error. Ids print in the text format's own spelling
//! (`t12`, `n3`, `s0`), so debug output and messages read like the IR.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// An id that converts to and from a `usize` index.
pub trait Idx: Copy + Eq + Ord + fmt::Debug {
    /// The id for index `i`. Panics if `i` does not fit in `u32` (an [`IndexVec`] never
    /// grows past that: `push` checks).
    fn new(i: usize) -> Self;
    /// This id's index.
    fn index(self) -> usize;
}

macro_rules! define_id {
    ($(#[$attr:meta])* $name:ident, $prefix:literal) => {
        $(#[$attr])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);

        impl $name {
            /// The id for index `i` (the same as [`Idx::new`], callable without the trait
            /// in scope). Panics if `i` does not fit in `u32`.
            pub fn new(i: usize) -> Self {
                $name(u32::try_from(i).expect("id index fits in u32"))
            }
            /// This id's index (the same as [`Idx::index`], callable without the trait in
            /// scope).
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl Idx for $name {
            fn new(i: usize) -> Self {
                $name::new(i)
            }
            fn index(self) -> usize {
                $name::index(self)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

define_id!(
    /// A tensor of a [`crate::Graph`].
    TensorId,
    "t"
);
define_id!(
    /// A node of a [`crate::Graph`].
    NodeId,
    "n"
);
define_id!(
    /// A shape symbol of a [`crate::Graph`] (`batch`, `seq`).
    SymbolId,
    "s"
);

/// A vector indexed by a typed id.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IndexVec<I: Idx, T> {
    raw: Vec<T>,
    _marker: PhantomData<fn(&I)>,
}

impl<I: Idx, T> IndexVec<I, T> {
    /// An empty vector.
    pub fn new() -> Self {
        IndexVec {
            raw: Vec::new(),
            _marker: PhantomData,
        }
    }

    /// `n` copies of `value`.
    pub fn from_elem(value: T, n: usize) -> Self
    where
        T: Clone,
    {
        IndexVec {
            raw: vec![value; n],
            _marker: PhantomData,
        }
    }

    /// `n` copies of `value`, in the memory the vector already has: cleared and refilled,
    /// not reallocated (for analyses run many times over one graph).
    pub fn reset(&mut self, value: T, n: usize)
    where
        T: Clone,
    {
        self.raw.clear();
        self.raw.resize(n, value);
    }

    /// A copy of `other`, in the memory the vector already has.
    pub fn copy_from(&mut self, other: &IndexVec<I, T>)
    where
        T: Clone,
    {
        self.raw.clone_from(&other.raw);
    }

    /// Appends `value` and returns its id. Panics past `u32::MAX` entries.
    pub fn push(&mut self, value: T) -> I {
        let id = I::new(self.raw.len());
        self.raw.push(value);
        id
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The entry for `id`, if it exists.
    pub fn get(&self, id: I) -> Option<&T> {
        self.raw.get(id.index())
    }

    /// The entry for `id` to change, if it is in range.
    pub fn get_mut(&mut self, id: I) -> Option<&mut T> {
        self.raw.get_mut(id.index())
    }

    /// Entries in id order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.raw.iter()
    }

    /// `(id, entry)` pairs in id order.
    pub fn iter_enumerated(&self) -> impl DoubleEndedIterator<Item = (I, &T)> + ExactSizeIterator {
        self.raw.iter().enumerate().map(|(i, t)| (I::new(i), t))
    }

    /// Every id in order.
    pub fn ids(&self) -> impl DoubleEndedIterator<Item = I> + ExactSizeIterator + use<I, T> {
        (0..self.raw.len()).map(I::new)
    }

    /// The entries as a mutable slice, in id order.
    pub fn raw_mut(&mut self) -> &mut [T] {
        &mut self.raw
    }

    /// The entries as a slice, in id order.
    pub fn as_slice(&self) -> &[T] {
        &self.raw
    }
}

impl<I: Idx, T> Default for IndexVec<I, T> {
    fn default() -> Self {
        IndexVec::new()
    }
}

impl<I: Idx, T: fmt::Debug> fmt::Debug for IndexVec<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter_enumerated()).finish()
    }
}

impl<I: Idx, T> Index<I> for IndexVec<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        &self.raw[id.index()]
    }
}

impl<I: Idx, T> IndexMut<I> for IndexVec<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.raw[id.index()]
    }
}

impl<I: Idx, T> FromIterator<T> for IndexVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        IndexVec {
            raw: iter.into_iter().collect(),
            _marker: PhantomData,
        }
    }
}

impl<'a, I: Idx, T> IntoIterator for &'a IndexVec<I, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.raw.iter()
    }
}
