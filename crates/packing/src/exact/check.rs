//! The search's own validity check, run on every solution before it is returned.
//!
//! It reads only the problem and the offsets, never the search's state: offsets are aligned,
//! buffers that overlap in time occupy disjoint bytes, and every buffer ends at or below the
//! capacity when there is one. It sweeps over start times, so it costs `O(n log n)` plus the
//! number of overlapping pairs.

use crate::Problem;

/// Whether `offsets` is a valid solution of `problem` within `capacity`.
pub(super) fn is_valid(problem: &Problem, offsets: &[u64], capacity: Option<u64>) -> bool {
    let buffers = &problem.buffers;
    if offsets.len() != buffers.len() {
        return false;
    }
    let mut live: Vec<usize> = Vec::new();
    for (b, &offset) in buffers.iter().zip(offsets) {
        let Some(top) = offset.checked_add(b.size) else {
            return false;
        };
        if !offset.is_multiple_of(b.align.max(1)) || capacity.is_some_and(|c| top > c) {
            return false;
        }
    }
    let mut by_start: Vec<usize> = (0..buffers.len())
        .filter(|&i| buffers[i].size > 0 && buffers[i].start < buffers[i].end)
        .collect();
    by_start.sort_unstable_by_key(|&i| (buffers[i].start, i));
    for &i in &by_start {
        let b = &buffers[i];
        live.retain(|&j| buffers[j].end > b.start);
        for &j in &live {
            // Both tops were checked above, so the additions cannot overflow.
            let disjoint =
                offsets[i] + b.size <= offsets[j] || offsets[j] + buffers[j].size <= offsets[i];
            if !disjoint {
                return false;
            }
        }
        live.push(i);
    }
    true
}
