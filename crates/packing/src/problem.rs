//! The packing problem and its solution, independent of any graph.
//!
//! A [`Problem`] is a list of buffers, each with a size, an alignment and a live interval.
//! Intervals are half-open, `[start, end)`: a buffer is live at every time `t` with
//! `start <= t < end`, so a buffer that ends at `t` and one that starts at `t` do not
//! conflict and may share bytes. This is the convention everywhere in memplan.
//!
//! A [`Solution`] gives each buffer a byte offset. It is valid when every offset is a multiple
//! of the buffer's alignment, buffers whose intervals intersect occupy disjoint byte ranges,
//! and (when the problem has a capacity) every buffer ends at or below the capacity.
//! [`crate::verify`] checks exactly that and nothing else.
//!
//! [`Problem::validate`] states what the engine accepts: non-empty intervals, power-of-two
//! alignments, at most `u32::MAX` buffers, and a total of sizes plus worst-case alignment
//! padding that fits in a `u64`. Under that last condition no placement the heuristics make
//! can overflow, because each buffer sits at most its own padding above some other buffer.

use std::fmt;

/// Rounds `value` up to a multiple of `align` (a power of two); `None` on overflow.
pub fn align_up(value: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    Some(value.checked_add(mask)? & !mask)
}

/// Index of a buffer in its [`Problem`], in input order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BufferId(pub u32);

impl BufferId {
    /// The position of this buffer in [`Problem::buffers`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for BufferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "buf{}", self.0)
    }
}

/// One buffer to place: `size` bytes, live over `[start, end)`, at an offset that is a
/// multiple of `align`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    /// The buffer's name as the user knows it (a CSV id, a tensor name).
    pub name: String,
    /// First time step at which the buffer is live.
    pub start: u64,
    /// First time step at which the buffer is no longer live (`end > start`).
    pub end: u64,
    /// Size in bytes. Zero-sized buffers are allowed and conflict with nothing.
    pub size: u64,
    /// Required offset alignment in bytes: a power of two, 1 for none.
    pub align: u64,
}

impl Buffer {
    /// A buffer with alignment 1, named after nothing in particular.
    pub fn new(name: impl Into<String>, start: u64, end: u64, size: u64) -> Buffer {
        Buffer {
            name: name.into(),
            start,
            end,
            size,
            align: 1,
        }
    }

    /// Whether the live intervals of `self` and `other` intersect (half-open: touching
    /// intervals do not).
    pub fn overlaps_in_time(&self, other: &Buffer) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// A buffer as error messages name it: its id and its user-facing name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BufferRef {
    /// The buffer's position in the problem.
    pub id: BufferId,
    /// The buffer's name.
    pub name: String,
}

impl BufferRef {
    /// The reference to buffer `id` of `problem`.
    pub fn new(problem: &Problem, id: BufferId) -> BufferRef {
        BufferRef {
            id,
            name: problem.buffer(id).name.clone(),
        }
    }
}

impl fmt::Display for BufferRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?})", self.id, self.name)
    }
}

/// Why a [`Problem`] is not one the engine accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProblemError {
    /// More buffers than a [`BufferId`] can number.
    #[error("{count} buffers is more than the {} a problem may hold", u32::MAX)]
    TooManyBuffers {
        /// How many buffers the problem has.
        count: usize,
    },
    /// A live interval with `end <= start`.
    #[error("buffer {buffer} has an empty live interval [{start}, {end})")]
    EmptyInterval {
        /// The buffer.
        buffer: BufferRef,
        /// Its start.
        start: u64,
        /// Its end.
        end: u64,
    },
    /// An alignment that is not a power of two.
    #[error("buffer {buffer} has alignment {align}, which is not a power of two")]
    BadAlignment {
        /// The buffer.
        buffer: BufferRef,
        /// Its alignment.
        align: u64,
    },
    /// The sizes plus worst-case padding do not fit in a `u64`.
    #[error("the buffers' sizes plus alignment padding add up to more than 2^64 - 1 bytes")]
    TooLarge,
}

/// A packing problem: buffers and an optional capacity (the largest arena allowed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Problem {
    /// The buffers, indexed by [`BufferId`].
    pub buffers: Vec<Buffer>,
    /// When set, every buffer must end at or below this many bytes.
    pub capacity: Option<u64>,
}

impl Problem {
    /// A problem with these buffers and no capacity.
    pub fn new(buffers: Vec<Buffer>) -> Problem {
        Problem {
            buffers,
            capacity: None,
        }
    }

    /// The number of buffers.
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// Whether there are no buffers.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// The buffer with this id.
    pub fn buffer(&self, id: BufferId) -> &Buffer {
        &self.buffers[id.index()]
    }

    /// Checks that the engine accepts this problem (see the module docs); the first problem
    /// found, in buffer order.
    pub fn validate(&self) -> Result<(), ProblemError> {
        if u32::try_from(self.buffers.len()).is_err() {
            return Err(ProblemError::TooManyBuffers {
                count: self.buffers.len(),
            });
        }
        let mut total: u64 = 0;
        for (id, b) in self.ids().zip(&self.buffers) {
            if b.end <= b.start {
                let buffer = BufferRef::new(self, id);
                return Err(ProblemError::EmptyInterval {
                    buffer,
                    start: b.start,
                    end: b.end,
                });
            }
            if !b.align.is_power_of_two() {
                let buffer = BufferRef::new(self, id);
                return Err(ProblemError::BadAlignment {
                    buffer,
                    align: b.align,
                });
            }
            total = total
                .checked_add(b.size)
                .and_then(|t| t.checked_add(b.align - 1))
                .ok_or(ProblemError::TooLarge)?;
        }
        Ok(())
    }

    /// Every buffer id, in input order.
    /// Ids past `u32::MAX` are not produced ([`Problem::validate`] rejects such problems).
    pub fn ids(&self) -> impl ExactSizeIterator<Item = BufferId> + '_ {
        let count = u32::try_from(self.buffers.len()).unwrap_or(u32::MAX);
        (0..count).map(BufferId)
    }
}

/// Offsets for every buffer of a problem, indexed by [`BufferId`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Solution {
    /// `offsets[i]` is the first byte of buffer `i`.
    pub offsets: Vec<u64>,
}

impl Solution {
    /// The arena size this solution needs: the largest `offset + size`, 0 when empty.
    /// Saturates on overflow (the verifier reports such a solution as invalid).
    pub fn arena_size(&self, problem: &Problem) -> u64 {
        self.offsets
            .iter()
            .zip(&problem.buffers)
            .map(|(&o, b)| o.saturating_add(b.size))
            .max()
            .unwrap_or(0)
    }
}
