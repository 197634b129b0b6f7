//! The verifier on hand-made solutions: it accepts valid ones, and names every buffer of
//! every violation in invalid ones.

use memplan_packing::{Buffer, BufferId, Problem, Solution, Violation, verify};
use proptest::prelude::*;

fn problem(buffers: &[(&str, u64, u64, u64)]) -> Problem {
    Problem::new(
        buffers
            .iter()
            .map(|&(_, s, e, size)| Buffer::new(s, e, size))
            .collect(),
    )
    .with_names(buffers.iter().map(|b| b.0))
}

fn offsets(offsets: &[u64]) -> Solution {
    Solution {
        offsets: offsets.to_vec(),
    }
}

fn conflicts(violations: &[Violation]) -> Vec<(u32, u32)> {
    violations
        .iter()
        .filter_map(|v| match v {
            Violation::Conflict { first, second, .. } => Some((first.id.0, second.id.0)),
            _ => None,
        })
        .collect()
}

#[test]
fn touching_intervals_do_not_conflict() {
    let p = problem(&[("a", 0, 5, 8), ("b", 5, 9, 8)]);
    assert_eq!(verify(&p, &offsets(&[0, 0])), Ok(()));
}

#[test]
fn overlapping_intervals_sharing_bytes_conflict_and_are_named() {
    let p = problem(&[("a", 0, 5, 8), ("b", 4, 9, 8)]);
    let err = verify(&p, &offsets(&[0, 4])).expect_err("conflict");
    assert_eq!(err.violations.len(), 1);
    let Violation::Conflict {
        first,
        second,
        time,
        bytes_start,
        bytes_end,
    } = &err.violations[0]
    else {
        panic!("expected a conflict, got {err}");
    };
    assert_eq!((first.id, second.id), (BufferId(0), BufferId(1)));
    assert_eq!(
        (first.name.as_deref(), second.name.as_deref()),
        (Some("a"), Some("b"))
    );
    assert_eq!((*time, *bytes_start, *bytes_end), (4, 4, 8));
    let text = err.to_string();
    assert!(
        text.contains("buf0 (\"a\")") && text.contains("buf1 (\"b\")"),
        "{text}"
    );
}

#[test]
fn adjacent_bytes_do_not_conflict() {
    let p = problem(&[("a", 0, 5, 8), ("b", 0, 5, 8)]);
    assert_eq!(verify(&p, &offsets(&[0, 8])), Ok(()));
    assert!(verify(&p, &offsets(&[0, 7])).is_err());
}

#[test]
fn zero_sized_buffers_conflict_with_nothing() {
    let p = problem(&[("a", 0, 5, 8), ("z", 0, 5, 0)]);
    assert_eq!(verify(&p, &offsets(&[0, 4])), Ok(()));
}

#[test]
fn every_conflicting_pair_is_listed() {
    // Four buffers all at offset 0 and live together: six pairs. A fifth, disjoint in time,
    // conflicts with nothing.
    let p = problem(&[
        ("a", 0, 9, 4),
        ("b", 1, 9, 4),
        ("c", 2, 9, 4),
        ("d", 3, 9, 4),
        ("e", 9, 10, 4),
    ]);
    let err = verify(&p, &offsets(&[0, 0, 0, 0, 0])).expect_err("conflicts");
    assert_eq!(
        conflicts(&err.violations),
        vec![(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    );
}

#[test]
fn a_big_buffer_below_others_conflicts_with_each() {
    // `big` covers everything from below; the others are disjoint from each other.
    let p = problem(&[
        ("big", 0, 9, 100),
        ("x", 0, 9, 10),
        ("y", 0, 9, 10),
        ("z", 0, 9, 10),
    ]);
    let err = verify(&p, &offsets(&[0, 10, 30, 50])).expect_err("conflicts");
    assert_eq!(conflicts(&err.violations), vec![(0, 1), (0, 2), (0, 3)]);
}

#[test]
fn misalignment_is_named() {
    let p = Problem::new(vec![Buffer {
        align: 8,
        ..Buffer::new(0, 1, 4)
    }])
    .with_names(["w"]);
    let err = verify(&p, &offsets(&[4])).expect_err("misaligned");
    assert!(
        matches!(&err.violations[..], [Violation::Misaligned { buffer, offset: 4, align: 8 }] if buffer.name.as_deref() == Some("w"))
    );
    assert_eq!(verify(&p, &offsets(&[16])), Ok(()));
}

#[test]
fn capacity_overflow_is_named() {
    let mut p = problem(&[("a", 0, 1, 8), ("b", 0, 1, 8)]);
    p.capacity = Some(12);
    let err = verify(&p, &offsets(&[0, 8])).expect_err("over capacity");
    assert!(
        matches!(&err.violations[..], [Violation::OverCapacity { buffer, end: 16, capacity: 12 }] if buffer.id == BufferId(1))
    );
}

#[test]
fn offset_count_end_overflow_and_bad_problems_are_reported() {
    let p = problem(&[("a", 0, 1, 8)]);
    let err = verify(&p, &offsets(&[])).expect_err("count");
    assert_eq!(
        err.violations,
        vec![Violation::OffsetCount {
            expected: 1,
            found: 0
        }]
    );
    let err = verify(&p, &offsets(&[u64::MAX])).expect_err("overflow");
    assert!(matches!(
        &err.violations[..],
        [Violation::EndOverflow { .. }]
    ));
    let bad = Problem::new(vec![
        Buffer::new(3, 3, 1),
        Buffer {
            align: 6,
            ..Buffer::new(0, 1, 1)
        },
    ]);
    let err = verify(&bad, &offsets(&[0, 0])).expect_err("bad problem");
    assert!(matches!(
        &err.violations[..],
        [
            Violation::EmptyInterval { .. },
            Violation::BadAlignment { .. }
        ]
    ));
}

/// Every conflicting pair by brute force.
fn brute_force_conflicts(p: &Problem, s: &Solution) -> Vec<(u32, u32)> {
    let mut pairs = Vec::new();
    for i in 0..p.len() {
        for j in i + 1..p.len() {
            let (a, b) = (&p.buffers[i], &p.buffers[j]);
            let (oa, ob) = (s.offsets[i], s.offsets[j]);
            if a.overlaps_in_time(b)
                && a.size > 0
                && b.size > 0
                && oa < ob + b.size
                && ob < oa + a.size
            {
                pairs.push((i as u32, j as u32));
            }
        }
    }
    pairs
}

proptest! {
    #[test]
    fn conflicts_match_brute_force(
        buffers in proptest::collection::vec((0u64..10, 1u64..6, 0u64..6, 0u64..20), 0..25)
    ) {
        let p = Problem::new(
            buffers.iter().map(|&(s, l, size, _)| Buffer::new(s, s + l, size)).collect(),
        );
        let s = Solution { offsets: buffers.iter().map(|b| b.3).collect() };
        let expected = brute_force_conflicts(&p, &s);
        match verify(&p, &s) {
            Ok(()) => prop_assert!(expected.is_empty()),
            Err(e) => prop_assert_eq!(conflicts(&e.violations), expected),
        }
    }
}
