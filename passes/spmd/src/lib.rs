//! Sharding propagation (and later the SPMD partitioner).
//!
//! - [`propagation`]: the `sharding-propagation` pass (XLA's `ShardingPropagation`), which
//!   gives every instruction a sharding from the annotated ones. See
//!   docs/sharding-propagation.md.
//! - [`dims`]: how dots and convolutions map operand dimensions to output dimensions.
//! - [`gather_scatter`]: how gathers and scatters map dimensions between their operand,
//!   indices and output (updates), and how shardings move along those mappings.
//! - [`placement`]: where a reshard happens, moved back through layout-only chains where
//!   the chain's inputs are cheaper to move than its result.
//! - [`unreduced`]: jax's explicit-mode `unreduced` hints, taken out before both passes.
//!
//! The sharding algebra itself lives in `tessera_hlo::tiling` and `tessera_hlo::sharding_util`.

pub mod dims;
pub mod gather_scatter;
pub mod partition;
pub mod placement;
pub mod propagation;
pub mod unreduced;

pub use partition::{SpmdOptions, SpmdPartitioning, SpmdReport};
pub use placement::place_reshards;
pub use propagation::{
    propagate, PropagationOptions, PropagationReport, ShardingPropagation, Undecided,
};

use tessera_pass::Registry;

/// Registers this crate's passes: `sharding-propagation` and `spmd-partitioning`.
pub fn register(r: &mut Registry) {
    r.add::<ShardingPropagation>();
    r.add::<SpmdPartitioning>();
}
