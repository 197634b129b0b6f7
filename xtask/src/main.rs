//! `cargo xtask`: project tasks for memplan.

fn main() {}
