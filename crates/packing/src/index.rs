//! Typed `u32` ids and the vectors they index, for the engine's internals.
//!
//! The engine depends on no other memplan crate, so it keeps this small copy of the idea
//! behind `memplan_ir::IndexVec`: a vector that only its own id type can index. The exact
//! search numbers buffers twice, by [`BufferId`] in the [`crate::Problem`] and by a local id
//! among the buffers it searches; indexing one table with the other id is a type error.

use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

use crate::BufferId;

/// An id that converts to and from a `usize` position.
pub(crate) trait Idx: Copy {
    /// The id at position `i`. Callers keep `i` below `u32::MAX`: every table of the engine
    /// is indexed by a validated [`crate::Problem`], which has at most that many buffers.
    fn from_index(i: usize) -> Self;
    /// This id's position.
    fn to_index(self) -> usize;
}

impl Idx for BufferId {
    fn from_index(i: usize) -> Self {
        BufferId(u32::try_from(i).expect("a problem has at most u32::MAX buffers"))
    }
    fn to_index(self) -> usize {
        self.index()
    }
}

/// A vector indexed by the id type `I`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct IndexVec<I, T> {
    raw: Vec<T>,
    _id: PhantomData<fn(I) -> I>,
}

impl<I: Idx, T> IndexVec<I, T> {
    /// `n` copies of `value`.
    pub(crate) fn from_elem(value: T, n: usize) -> Self
    where
        T: Clone,
    {
        vec![value; n].into()
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }

    /// Entries in id order.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.raw.iter()
    }

    /// `(id, entry)` pairs in id order.
    pub(crate) fn iter_enumerated(&self) -> impl ExactSizeIterator<Item = (I, &T)> {
        self.raw
            .iter()
            .enumerate()
            .map(|(i, t)| (I::from_index(i), t))
    }

    /// Every id, in order.
    pub(crate) fn ids(&self) -> impl ExactSizeIterator<Item = I> + use<I, T> {
        (0..self.raw.len()).map(I::from_index)
    }

    /// The entries as a plain vector, in id order.
    pub(crate) fn into_raw(self) -> Vec<T> {
        self.raw
    }
}

impl<I, T> From<Vec<T>> for IndexVec<I, T> {
    fn from(raw: Vec<T>) -> Self {
        IndexVec {
            raw,
            _id: PhantomData,
        }
    }
}

impl<I, T> FromIterator<T> for IndexVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        iter.into_iter().collect::<Vec<T>>().into()
    }
}

impl<I, T: std::fmt::Debug> std::fmt::Debug for IndexVec<I, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.raw.fmt(f)
    }
}

impl<I: Idx, T> Index<I> for IndexVec<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        &self.raw[id.to_index()]
    }
}

impl<I: Idx, T> IndexMut<I> for IndexVec<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.raw[id.to_index()]
    }
}
