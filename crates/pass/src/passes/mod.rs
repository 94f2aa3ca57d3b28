//! Generic passes that later passes rely on.

pub mod all_reduce_reassociate;
pub mod dce;
pub mod flatten_call_graph;
pub mod inline;
pub mod print;
pub mod tuple_simplify;

#[cfg(test)]
pub(crate) mod testutil;

pub use all_reduce_reassociate::AllReduceReassociate;
pub use dce::{Dce, DceOptions};
pub use flatten_call_graph::FlattenCallGraph;
pub use inline::{CallInliner, InlineOptions};
pub use print::{PrintCallGraph, PrintLiveness, PrintPointsTo};
pub use tuple_simplify::{TupleSimplifier, TupleSimplifyOptions};

use crate::Registry;

/// Registers the generic passes.
pub fn register(r: &mut Registry) {
    r.add::<Dce>()
        .add::<AllReduceReassociate>()
        .add::<CallInliner>()
        .add::<FlattenCallGraph>()
        .add::<TupleSimplifier>()
        .add::<PrintPointsTo>()
        .add::<PrintCallGraph>()
        .add::<PrintLiveness>();
}
