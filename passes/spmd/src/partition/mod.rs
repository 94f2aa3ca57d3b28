//! The SPMD partitioner (`spmd-partitioning`).
pub mod plan;
pub mod spec;
