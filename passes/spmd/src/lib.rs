//! Sharding propagation (and later the SPMD partitioner).

use tessera_pass::Registry;

/// Registers this crate's passes.
pub fn register(_r: &mut Registry) {}
