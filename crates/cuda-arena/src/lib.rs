//! Turns a memplan plan into memory: per-tensor layout and typed views, a host arena that
//! executes plans, and (feature `cuda`) one device allocation per plan.
