//! The search's own validity check, run on every solution before it is returned.
//!
//! It reads only the problem and the offsets, never the search's state: offsets are aligned,
//! buffers that overlap in time occupy disjoint bytes, and every buffer ends at or below the
//! capacity when there is one. It sweeps over start times, so it costs `O(n log n)` plus the
//! number of overlapping pairs.

use crate::{BufferId, Problem};

/// Whether `offsets` (indexed by [`BufferId`]) is a valid solution of `problem` within
/// `capacity`.
pub(super) fn is_valid(problem: &Problem, offsets: &[u64], capacity: Option<u64>) -> bool {
    if offsets.len() != problem.len() {
        return false;
    }
    for (b, &offset) in problem.buffers.iter().zip(offsets) {
        let Some(top) = offset.checked_add(b.size) else {
            return false;
        };
        if !offset.is_multiple_of(b.align.max(1)) || capacity.is_some_and(|c| top > c) {
            return false;
        }
    }
    let offset = |i: BufferId| offsets[i.index()];
    let mut by_start: Vec<BufferId> = problem
        .ids()
        .filter(|&i| {
            let b = problem.buffer(i);
            b.size > 0 && b.start < b.end
        })
        .collect();
    by_start.sort_unstable_by_key(|&i| (problem.buffer(i).start, i));
    let mut live: Vec<BufferId> = Vec::new();
    for &i in &by_start {
        let b = problem.buffer(i);
        live.retain(|&j| problem.buffer(j).end > b.start);
        for &j in &live {
            // Both tops were checked above, so the additions cannot overflow.
            let disjoint =
                offset(i) + b.size <= offset(j) || offset(j) + problem.buffer(j).size <= offset(i);
            if !disjoint {
                return false;
            }
        }
        live.push(i);
    }
    true
}
