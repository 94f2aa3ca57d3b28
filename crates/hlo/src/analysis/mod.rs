//! Analyses over a [`crate::Module`]: def-use, instruction orders, the call graph, tuple
//! points-to with logical buffers and their aliases, buffer sizes, and liveness with peak memory
//! along a schedule.
//!
//! Every analysis is a snapshot: it reads the module once and keeps dense side tables indexed by
//! [`crate::InstrId`] / [`crate::CompId`]. After the module changes, run it again.
//! See docs/analysis.md for the semantics and where they differ from XLA.

pub mod buffer_size;
pub mod call_graph;
pub mod def_use;
pub mod liveness;
pub mod order;
pub mod points_to;

/// Builders for small hand-made modules, shared by the unit tests of this crate and of passes.
pub mod testutil;

pub use buffer_size::{shape_size, BufferSizeFn};
pub use call_graph::{CallContext, CallGraph, CallSite};
pub use def_use::{DefUse, Use};
pub use liveness::{LiveRange, Liveness};
pub use order::{computation_post_order, post_order, post_orders, reverse_post_order, PostOrders};
pub use points_to::{BufferAlias, BufferId, LogicalBuffer, PointsToSet, ShapeIndex, TuplePointsTo};
