//! One verdict per fixture: a test that loops over corpus files runs its check on each,
//! then fails naming every fixture it failed on, so one broken fixture does not hide the
//! rest (each failure's own message is printed as it happens).

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `check` on every `(name, item)`, then panics naming each one whose check panicked.
pub fn each<T>(items: impl IntoIterator<Item = (String, T)>, mut check: impl FnMut(String, T)) {
    let mut failed = Vec::new();
    let mut count = 0usize;
    for (name, item) in items {
        count += 1;
        let label = name.clone();
        if catch_unwind(AssertUnwindSafe(|| check(name, item))).is_err() {
            failed.push(label);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {count} fixtures failed: {}",
        failed.len(),
        failed.join(", ")
    );
}
