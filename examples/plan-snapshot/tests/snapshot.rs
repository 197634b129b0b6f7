//! The engine's CI: the decoder's plan at seq 128 as a reviewed snapshot; the statistics
//! checked apart, by bounds; and the change a review should see when a node is added.

use plan_snapshot::{decoder, review};

#[test]
fn decoder_plan() {
    let graph = decoder(64, false).unwrap();
    let r = review(&graph, 128).unwrap();
    insta::assert_snapshot!("decoder_seq128", r.placements());
}

/// The statistics churn with memplan's searches, so they are checked by bounds, not kept.
#[test]
fn decoder_statistics_within_bounds() {
    let graph = decoder(64, false).unwrap();
    let plan = plan_snapshot::plan(&graph, 128).unwrap();
    assert!(plan.arena_bytes >= plan.lower_bound_bytes);
    // Within 25% of the bound, and well under a buffer per tensor.
    assert!(
        plan.arena_bytes * 4 <= plan.lower_bound_bytes * 5,
        "{}",
        plan.arena_bytes
    );
    assert!(plan.arena_bytes * 2 <= plan.naive_bytes);
}

/// Adding a normalisation changes the review by its own lines and the offsets it moves:
/// no renumbering of the others.
#[test]
fn an_added_node_is_a_small_diff() {
    let before = review(&decoder(64, false).unwrap(), 128).unwrap();
    let after = review(&decoder(64, true).unwrap(), 128).unwrap();
    let old: Vec<&str> = before.placements().lines().collect();
    let new: Vec<&str> = after.placements().lines().collect();
    let added = new.iter().filter(|l| !old.contains(l)).count();
    let removed = old.iter().filter(|l| !new.contains(l)).count();
    assert!(
        new.iter().any(|l| l.trim_start().starts_with("norm ")),
        "{after}"
    );
    assert!(
        added <= 6 && removed <= 4,
        "+{added} -{removed}\n{before}\n{after}"
    );
}
