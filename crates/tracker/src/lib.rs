//! Memory tracking against a budget for memplan: estimates before allocation, a race-free
//! tracker, pre-flight checks and batch-size fitting.
