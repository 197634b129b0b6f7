//! The memplan graph IR.
