//! Device smoke test (filled in below).
fn main() {}
