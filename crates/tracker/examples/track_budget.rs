//! Track allocations against a budget at run time, from several threads: reservations are
//! released when dropped, the limit is never passed, and a snapshot gives the high-water
//! mark of each kind of memory.
//!
//! `cargo run -p memplan-tracker --example track_budget`

use std::thread;

use memplan_tracker::{HumanBytes, MemoryTracker, Tag, parse_size};

fn main() {
    let budget = parse_size("64MiB").unwrap_or(64 << 20);
    let tracker = MemoryTracker::new(budget);
    // Weights stay for the whole run.
    let weights = match tracker.reserve(Tag::Weights, 24 << 20) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    thread::scope(|s| {
        for worker in 0..4u64 {
            let tracker = &tracker;
            s.spawn(move || {
                for step in 0..100u64 {
                    let bytes = (1 + (worker * 7 + step) % 8) << 20;
                    // A refused reservation is an answer, not an error: wait or shrink.
                    if let Ok(activations) = tracker.reserve(Tag::Activations, bytes) {
                        let _scratch = tracker.reserve(Tag::Workspace, 1 << 20);
                        drop(activations);
                    }
                }
            });
        }
    });
    drop(weights);
    let snapshot = tracker.snapshot();
    println!(
        "budget {}, peak {}, in use now {}",
        HumanBytes(budget),
        HumanBytes(snapshot.total.peak),
        HumanBytes(snapshot.total.in_use)
    );
    for (tag, usage) in &snapshot.tags {
        println!("  {:<12} peak {}", tag.name(), HumanBytes(usage.peak));
    }
}
