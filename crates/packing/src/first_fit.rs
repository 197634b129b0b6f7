//! `first-fit-time`: buffers in order of start time (then size descending, then longer
//! lifetime, then id), each at the lowest aligned offset where it fits among the buffers
//! live when it starts.
//!
//! Because buffers arrive in start order, the placed buffers a new one overlaps are exactly
//! those still live at its start. They are kept in a vector sorted by offset (their byte
//! ranges are disjoint), and a heap retires them at their end time. Each placement walks the
//! live set from the bottom and stops at the first gap that fits, so the work per buffer is
//! at most the number of buffers live at once.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::problem::{Problem, ProblemError, Solution, align_up};

/// Places every buffer first-fit in start-time order. The problem must be valid.
pub(crate) fn first_fit_by_time(problem: &Problem) -> Result<Solution, ProblemError> {
    let mut order: Vec<(u64, u64, u64, u32)> = problem
        .buffers
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                b.start,
                !b.size,
                !(b.end - b.start),
                u32::try_from(i).unwrap_or(u32::MAX),
            )
        })
        .collect();
    order.sort_unstable();

    let mut offsets = vec![0u64; problem.len()];
    // Live buffers with bytes: (offset, end byte), sorted by offset, disjoint.
    let mut live: Vec<(u64, u64)> = Vec::new();
    // (end time, offset) of each live buffer, earliest end on top.
    let mut ends: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    for (start, _, _, i) in order {
        let Some(b) = problem.buffers.get(i as usize) else {
            continue;
        };
        while let Some(&Reverse((end, offset))) = ends.peek() {
            if end > start {
                break;
            }
            ends.pop();
            if let Ok(pos) = live.binary_search_by_key(&offset, |&(o, _)| o) {
                live.remove(pos);
            }
        }
        if b.size == 0 {
            continue;
        }
        let mut top = 0u64;
        let mut slot = None;
        for (pos, &(offset, end)) in live.iter().enumerate() {
            let candidate = align_up(top, b.align).ok_or(ProblemError::TooLarge)?;
            if candidate <= offset && offset - candidate >= b.size {
                slot = Some((pos, candidate));
                break;
            }
            top = end;
        }
        let (pos, offset) = match slot {
            Some(found) => found,
            None => (
                live.len(),
                align_up(top, b.align).ok_or(ProblemError::TooLarge)?,
            ),
        };
        let end = offset.checked_add(b.size).ok_or(ProblemError::TooLarge)?;
        live.insert(pos, (offset, end));
        ends.push(Reverse((b.end, offset)));
        if let Some(o) = offsets.get_mut(i as usize) {
            *o = offset;
        }
    }
    Ok(Solution { offsets })
}
