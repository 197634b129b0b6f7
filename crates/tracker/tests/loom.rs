//! Model check of the tracker's compare-and-swap loop with loom: every interleaving of the
//! threads below is explored, and in none does the bytes in use pass the limit or end
//! anywhere but zero. A naive load-check-add tracker is checked the same way, and loom finds
//! the interleaving where it overshoots (so the model can fail).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p memplan-tracker --test loom --release`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use memplan_tracker::{MemoryTracker, Tag};

/// Explores interleavings with at most `preemptions` forced thread switches (loom's bound;
/// the exhaustive search over three threads runs for hours).
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemptions);
    builder.check(f);
}

/// Two threads race for the last bytes: exactly one gets them, whatever the interleaving.
#[test]
fn cas_never_passes_the_limit_two_threads() {
    model(4, || {
        let tracker = Arc::new(MemoryTracker::new(100));
        let other = Arc::clone(&tracker);
        let th = thread::spawn(move || other.allocate(Tag::Weights, 60).is_ok());
        let mine = tracker.allocate(Tag::Activations, 60).is_ok();
        let theirs = th.join().unwrap();
        assert!(mine ^ theirs, "both or neither allocation succeeded");
        assert_eq!(tracker.in_use(), 60);
        assert_eq!(tracker.peak(), 60);
    });
}

/// Three threads reserve and release: the limit holds and every counter ends at zero.
#[test]
fn cas_never_passes_the_limit() {
    model(2, || {
        let tracker = Arc::new(MemoryTracker::new(100));
        let threads: Vec<_> = [
            (Tag::Weights, 60),
            (Tag::Activations, 60),
            (Tag::KvCache, 40),
        ]
        .into_iter()
        .map(|(tag, bytes)| {
            let t = Arc::clone(&tracker);
            thread::spawn(move || {
                if let Ok(r) = t.reserve(tag, bytes) {
                    assert!(t.in_use() <= 100);
                    drop(r);
                }
            })
        })
        .collect();
        for th in threads {
            th.join().unwrap();
        }
        let s = tracker.snapshot();
        assert!(s.total.peak <= 100, "peak {}", s.total.peak);
        assert_eq!(s.total.in_use, 0);
        assert!(s.tags.iter().all(|(_, u)| u.in_use == 0));
    });
}

/// What the tracker must not be: load, check, then add.
struct Naive {
    in_use: AtomicU64,
    peak: AtomicU64,
}

impl Naive {
    fn allocate(&self, bytes: u64, limit: u64) -> bool {
        let current = self.in_use.load(Ordering::Acquire);
        if current + bytes > limit {
            return false;
        }
        let now = self.in_use.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(now, Ordering::AcqRel);
        true
    }
}

#[test]
#[should_panic(expected = "passed the limit")]
fn load_check_add_can_pass_the_limit() {
    model(2, || {
        let naive = Arc::new(Naive {
            in_use: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        });
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let n = Arc::clone(&naive);
                thread::spawn(move || {
                    n.allocate(60, 100);
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert!(
            naive.peak.load(Ordering::Acquire) <= 100,
            "passed the limit"
        );
    });
}
