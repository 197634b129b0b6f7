//! The independent verifier: reads a problem and a solution, knows nothing of how the
//! solution was made, and lists everything wrong with it.
//!
//! It checks the offset count, each buffer on its own (a live interval that is not empty, a
//! power-of-two alignment, an aligned offset, `offset + size` within `u64` and within the
//! capacity), and every pair of conflicting buffers: live at a common time and sharing a
//! byte. Intervals are half-open, so buffers that only touch in time do not conflict, and a
//! zero-sized buffer conflicts with nothing.
//!
//! Conflicts are found by a sweep over time with the live buffers ordered by offset. While
//! no conflict has been seen, the live byte ranges are disjoint, so a new buffer conflicts
//! with some live one exactly when it conflicts with its neighbour below or above in offset
//! order: `O(n log n)` for a valid solution. At the first conflict the sweep restarts in a
//! mode that compares each new buffer with every live one, so an invalid solution still gets
//! every conflicting pair listed (up to [`MAX_LISTED`], the rest counted).

use std::collections::BTreeMap;
use std::fmt;

use super::problem::{BufferId, BufferRef, Problem, Solution};

/// The most violations a [`VerifyError`] lists; the rest are only counted.
pub const MAX_LISTED: usize = 10_000;

/// One thing wrong with a solution.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// The solution does not have one offset per buffer (nothing else is checked then).
    #[error("the solution has {found} offsets for {expected} buffers")]
    OffsetCount {
        /// The number of buffers.
        expected: usize,
        /// The number of offsets.
        found: usize,
    },
    /// A buffer whose live interval is empty.
    #[error("buffer {buffer} has an empty live interval [{start}, {end})")]
    EmptyInterval {
        /// The buffer.
        buffer: BufferRef,
        /// Its start.
        start: u64,
        /// Its end.
        end: u64,
    },
    /// A buffer whose alignment is not a power of two.
    #[error("buffer {buffer} has alignment {align}, which is not a power of two")]
    BadAlignment {
        /// The buffer.
        buffer: BufferRef,
        /// Its alignment.
        align: u64,
    },
    /// An offset that is not a multiple of the buffer's alignment.
    #[error(
        "buffer {buffer} is at offset {offset}, which is not a multiple of its alignment {align}"
    )]
    Misaligned {
        /// The buffer.
        buffer: BufferRef,
        /// Its offset.
        offset: u64,
        /// Its alignment.
        align: u64,
    },
    /// `offset + size` does not fit in a `u64`.
    #[error("buffer {buffer} at offset {offset} with size {size} ends past 2^64 - 1")]
    EndOverflow {
        /// The buffer.
        buffer: BufferRef,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
    },
    /// A buffer that ends above the capacity.
    #[error("buffer {buffer} ends at byte {end}, above the capacity {capacity}")]
    OverCapacity {
        /// The buffer.
        buffer: BufferRef,
        /// `offset + size`.
        end: u64,
        /// The problem's capacity.
        capacity: u64,
    },
    /// Two buffers live at a common time that share bytes.
    #[error(
        "buffers {first} and {second} are both live at time {time} and share bytes [{bytes_start}, {bytes_end})"
    )]
    Conflict {
        /// The buffer with the smaller id.
        first: BufferRef,
        /// The buffer with the larger id.
        second: BufferRef,
        /// The first time both are live.
        time: u64,
        /// The first shared byte.
        bytes_start: u64,
        /// One past the last shared byte.
        bytes_end: u64,
    },
}

/// Everything [`verify`] found wrong: per-buffer violations in id order, then conflicts
/// ordered by the pair of ids.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyError {
    /// The violations listed, at most [`MAX_LISTED`].
    pub violations: Vec<Violation>,
    /// How many more were found but not listed.
    pub unlisted: u64,
}

impl VerifyError {
    /// The number of violations found, listed or not.
    pub fn count(&self) -> u64 {
        self.violations.len() as u64 + self.unlisted
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.count();
        write!(
            f,
            "invalid solution ({count} violation{}):",
            if count == 1 { "" } else { "s" }
        )?;
        for v in &self.violations {
            write!(f, "\n  - {v}")?;
        }
        if self.unlisted > 0 {
            write!(f, "\n  - and {} more", self.unlisted)?;
        }
        Ok(())
    }
}

impl std::error::Error for VerifyError {}

/// Collects violations up to [`MAX_LISTED`].
#[derive(Default)]
struct Report {
    violations: Vec<Violation>,
    unlisted: u64,
}

impl Report {
    fn push(&mut self, v: impl FnOnce() -> Violation) {
        if self.violations.len() < MAX_LISTED {
            self.violations.push(v());
        } else {
            self.unlisted += 1;
        }
    }
}

/// Checks `solution` against `problem`, knowing nothing of how it was made; `Ok` exactly when
/// it is valid: one offset per buffer, each aligned, within `u64` and the capacity, and no two
/// buffers live at a common time (half-open intervals) sharing a byte. Lists every problem
/// found. Never panics.
pub fn verify(problem: &Problem, solution: &Solution) -> Result<(), VerifyError> {
    let mut report = Report::default();
    if solution.offsets.len() != problem.len() {
        report.push(|| Violation::OffsetCount {
            expected: problem.len(),
            found: solution.offsets.len(),
        });
        return finish(report);
    }
    let name = |id: BufferId| BufferRef::new(problem, id);

    // Buffers that take part in the conflict sweep: (start, end, offset, end byte, id).
    let mut placed: Vec<Placed> = Vec::new();
    for ((id, b), &offset) in problem.ids().zip(&problem.buffers).zip(&solution.offsets) {
        let interval_ok = b.end > b.start;
        if !interval_ok {
            report.push(|| Violation::EmptyInterval {
                buffer: name(id),
                start: b.start,
                end: b.end,
            });
        }
        if !b.align.is_power_of_two() {
            report.push(|| Violation::BadAlignment {
                buffer: name(id),
                align: b.align,
            });
        } else if offset % b.align != 0 {
            report.push(|| Violation::Misaligned {
                buffer: name(id),
                offset,
                align: b.align,
            });
        }
        let Some(end) = offset.checked_add(b.size) else {
            report.push(|| Violation::EndOverflow {
                buffer: name(id),
                offset,
                size: b.size,
            });
            continue;
        };
        if let Some(capacity) = problem.capacity
            && end > capacity
        {
            report.push(|| Violation::OverCapacity {
                buffer: name(id),
                end,
                capacity,
            });
        }
        if interval_ok && b.size > 0 {
            placed.push(Placed {
                start: b.start,
                end: b.end,
                offset,
                bytes_end: end,
                id: id.0,
            });
        }
    }

    let mut conflicts: Vec<(u32, u32, u64, u64, u64)> = Vec::new();
    let mut conflict_count = 0u64;
    if !sweep_finds_no_conflict(&mut placed) {
        sweep_all_conflicts(&placed, |a, b| {
            conflict_count += 1;
            if report.violations.len() + conflicts.len() < MAX_LISTED {
                let (first, second) = if a.id < b.id { (a, b) } else { (b, a) };
                conflicts.push((
                    first.id,
                    second.id,
                    first.start.max(second.start),
                    first.offset.max(second.offset),
                    first.bytes_end.min(second.bytes_end),
                ));
            }
        });
    }
    report.unlisted += conflict_count - conflicts.len() as u64;
    conflicts.sort_unstable();
    for (a, b, time, bytes_start, bytes_end) in conflicts {
        report.violations.push(Violation::Conflict {
            first: name(BufferId(a)),
            second: name(BufferId(b)),
            time,
            bytes_start,
            bytes_end,
        });
    }
    finish(report)
}

fn finish(report: Report) -> Result<(), VerifyError> {
    if report.violations.is_empty() && report.unlisted == 0 {
        Ok(())
    } else {
        Err(VerifyError {
            violations: report.violations,
            unlisted: report.unlisted,
        })
    }
}

/// A buffer with bytes and a non-empty interval, as the sweeps see it.
#[derive(Clone, Copy, Debug)]
struct Placed {
    start: u64,
    end: u64,
    offset: u64,
    bytes_end: u64,
    id: u32,
}

/// The fast sweep: sorts `placed` by start and returns whether no conflict exists.
fn sweep_finds_no_conflict(placed: &mut [Placed]) -> bool {
    placed.sort_unstable_by_key(|p| (p.start, p.id));
    let mut by_end: Vec<(u64, u64, u32)> = placed.iter().map(|p| (p.end, p.offset, p.id)).collect();
    by_end.sort_unstable();
    let mut ending = by_end.iter().peekable();
    // Live buffers keyed by (offset, id), valued by their end byte.
    let mut live: BTreeMap<(u64, u32), u64> = BTreeMap::new();
    for p in placed.iter() {
        while let Some(&&(end, offset, id)) = ending.peek() {
            if end > p.start {
                break;
            }
            live.remove(&(offset, id));
            ending.next();
        }
        if let Some((_, &below_end)) = live.range(..(p.offset, p.id)).next_back()
            && below_end > p.offset
        {
            return false;
        }
        if let Some((&(above, _), _)) = live.range((p.offset, p.id)..).next()
            && above < p.bytes_end
        {
            return false;
        }
        live.insert((p.offset, p.id), p.bytes_end);
    }
    true
}

/// The exhaustive sweep over `placed` (sorted by start): calls `found` once for every
/// conflicting pair, in `O(n log n + n·k)` for `k` buffers live at once.
fn sweep_all_conflicts(placed: &[Placed], mut found: impl FnMut(&Placed, &Placed)) {
    let mut by_end: Vec<(u64, usize)> =
        placed.iter().enumerate().map(|(i, p)| (p.end, i)).collect();
    by_end.sort_unstable();
    let mut ending = by_end.iter().peekable();
    let mut live: Vec<usize> = Vec::new();
    let mut position = vec![usize::MAX; placed.len()];
    for (i, p) in placed.iter().enumerate() {
        while let Some(&&(end, j)) = ending.peek() {
            if end > p.start {
                break;
            }
            ending.next();
            let Some(&pos) = position.get(j) else {
                continue;
            };
            live.swap_remove(pos);
            if let Some(&moved) = live.get(pos)
                && let Some(slot) = position.get_mut(moved)
            {
                *slot = pos;
            }
        }
        for &j in &live {
            if let Some(q) = placed.get(j)
                && q.offset < p.bytes_end
                && p.offset < q.bytes_end
            {
                found(q, p);
            }
        }
        if let Some(slot) = position.get_mut(i) {
            *slot = live.len();
        }
        live.push(i);
    }
}
