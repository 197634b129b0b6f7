//! Exact and anytime search for hard packing instances (placeholder until it lands).
