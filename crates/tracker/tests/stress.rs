//! Many threads hammer one tracker with random-sized reservations close to the limit: the
//! bytes in use never pass the limit (checked by every thread after each allocation and by
//! the high-water marks), refusals happen (the limit is really contended), and every counter
//! ends at zero.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use memplan_tracker::{MemoryTracker, Tag};

#[test]
fn the_limit_holds_under_contention() {
    const LIMIT: u64 = 10_000;
    const THREADS: u64 = 16;
    const ROUNDS: u64 = 20_000;
    let tracker = MemoryTracker::new(LIMIT);
    let refused = AtomicU64::new(0);
    let granted = AtomicU64::new(0);
    thread::scope(|s| {
        for id in 0..THREADS {
            let (tracker, refused, granted) = (&tracker, &refused, &granted);
            s.spawn(move || {
                // xorshift: deterministic per thread, no dependency.
                let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ (id + 1);
                let mut held = Vec::new();
                for _ in 0..ROUNDS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let tag = Tag::ALL[(x % Tag::ALL.len() as u64) as usize];
                    let bytes = 1 + (x >> 8) % 1500;
                    match tracker.reserve(tag, bytes) {
                        Ok(r) => {
                            granted.fetch_add(1, Ordering::Relaxed);
                            assert!(tracker.in_use() <= LIMIT);
                            held.push(r);
                        }
                        Err(_) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    // Up to nine held at once: even one thread alone passes the limit at times,
                    // so refusals do not depend on how the threads are scheduled.
                    if held.len() > 8 || (x >> 40).is_multiple_of(7) {
                        held.clear();
                    }
                }
            });
        }
    });
    let s = tracker.snapshot();
    assert_eq!(s.total.in_use, 0);
    for (tag, usage) in &s.tags {
        assert_eq!(usage.in_use, 0, "{tag:?}");
        assert!(usage.peak <= LIMIT);
    }
    assert!(s.total.peak <= LIMIT, "peak {}", s.total.peak);
    assert!(s.total.peak > LIMIT / 2, "the limit was not contended");
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "no allocation was refused"
    );
    assert_eq!(s.total.allocations, granted.load(Ordering::Relaxed));
}
