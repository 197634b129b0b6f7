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

use std::borrow::Cow;
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
///
/// A buffer has no name: the engine never needs one, so a million buffers cost 32 bytes
/// each and copying one allocates nothing. Names, where a caller has them, live beside the
/// buffers in the [`Problem`] ([`Problem::with_names`]) and are looked up only for reports
/// and errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
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
    /// A buffer with alignment 1.
    pub fn new(start: u64, end: u64, size: u64) -> Buffer {
        Buffer {
            start,
            end,
            size,
            align: 1,
        }
    }

    /// This buffer with alignment `align` (a power of two).
    pub fn with_align(mut self, align: u64) -> Buffer {
        self.align = align;
        self
    }

    /// Whether the live intervals of `self` and `other` intersect (half-open: touching
    /// intervals do not).
    pub fn overlaps_in_time(&self, other: &Buffer) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// A buffer as an error or a report names it: its id and its name, when it has one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BufferRef {
    /// The buffer's position in the problem.
    pub id: BufferId,
    /// The buffer's name ([`Problem::with_names`]), if it has one.
    pub name: Option<String>,
}

impl BufferRef {
    /// The reference to buffer `id` of `problem`.
    pub fn new(problem: &Problem, id: BufferId) -> BufferRef {
        BufferRef {
            id,
            name: problem.has_name(id).then(|| problem.name(id).into_owned()),
        }
    }
}

impl fmt::Display for BufferRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{} ({name:?})", self.id),
            None => write!(f, "{}", self.id),
        }
    }
}

/// Why a [`Problem`] is not one the engine accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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

/// A packing problem: buffers, an optional capacity (the largest arena allowed), and
/// optional names for the buffers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Problem {
    /// The buffers, indexed by [`BufferId`].
    pub buffers: Vec<Buffer>,
    /// When set, every buffer must end at or below this many bytes.
    pub capacity: Option<u64>,
    /// Names by [`BufferId`]; a buffer past the end of this list has none.
    names: Names,
}

/// Buffer names stored end to end in one string: one allocation for all of them.
#[derive(Clone, Debug, Default)]
struct Names {
    text: String,
    /// `ends[i]` is the end of name `i` in `text`; it starts where name `i - 1` ends.
    ends: Vec<usize>,
    /// Known to be pairwise distinct (they were read as ids that a reader checked); a hint
    /// that spares [`crate::csv::write`] its check, not part of the value.
    distinct: bool,
}

impl PartialEq for Names {
    fn eq(&self, other: &Names) -> bool {
        self.text == other.text && self.ends == other.ends
    }
}

impl Eq for Names {}

impl Names {
    fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = i.checked_sub(1).map_or(0, |j| self.ends[j]);
        self.text.get(start..end)
    }
}

impl Problem {
    /// A problem with these buffers, no capacity and no names.
    pub fn new(buffers: Vec<Buffer>) -> Problem {
        Problem {
            buffers,
            capacity: None,
            names: Names::default(),
        }
    }

    /// This problem with the `i`-th of `names` as the name of buffer `i`, replacing any
    /// names it had. Buffers past the end of `names` have none; names past the last buffer
    /// are kept but never looked up. The names are stored end to end in one string.
    #[must_use]
    pub fn with_names<S: AsRef<str>>(mut self, names: impl IntoIterator<Item = S>) -> Problem {
        let mut text = String::new();
        let mut ends = Vec::new();
        for name in names {
            text.push_str(name.as_ref());
            ends.push(text.len());
        }
        self.names = Names {
            text,
            ends,
            distinct: false,
        };
        self
    }

    /// Records that every buffer has a name and that no two are equal (checked by the
    /// caller, as the CSV reader does).
    pub(crate) fn assume_distinct_names(&mut self) {
        self.names.distinct = self.names.ends.len() >= self.buffers.len();
    }

    /// Whether every buffer is known to have a name of its own, distinct from the others.
    pub(crate) fn names_known_distinct(&self) -> bool {
        self.names.distinct && self.names.ends.len() >= self.buffers.len()
    }

    /// Whether no buffer has a name of its own.
    pub(crate) fn unnamed(&self) -> bool {
        self.names.ends.is_empty()
    }

    /// The name of buffer `id`: the one given by [`Problem::with_names`], or `buf{id}` when
    /// it has none.
    pub fn name(&self, id: BufferId) -> Cow<'_, str> {
        match self.names.get(id.index()) {
            Some(name) => Cow::Borrowed(name),
            None => Cow::Owned(id.to_string()),
        }
    }

    /// Whether buffer `id` has a name of its own (not the `buf{id}` fallback).
    pub fn has_name(&self, id: BufferId) -> bool {
        id.index() < self.names.ends.len()
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

    /// Checks that the engine accepts this problem (non-empty intervals, power-of-two
    /// alignments, at most `u32::MAX` buffers, sizes that sum within `u64`); the first problem
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
