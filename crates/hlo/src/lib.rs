//! The HLO IR of Tessera: element types, shapes, layouts, literals, shardings, instructions,
//! computations and modules, with the text format, `xla.HloModuleProto` and the verifier.
//!
//! Start with [`Module`]: it owns every computation and instruction in arenas indexed by
//! [`CompId`] and [`InstrId`], and its mutation API keeps operands, users and control edges
//! consistent.

pub mod analysis;
mod attr_table;
pub mod attrs;
pub mod builder;
pub mod fxhash;
pub mod instruction;
pub mod literal;
pub mod metadata;
pub mod module;
pub mod module_diff;
pub mod named_sharding;
mod names;
pub mod opcode;
pub mod proto;
pub mod rare;
pub mod replica_groups;
pub mod resource;
pub mod rng;
pub mod shape;
pub mod sharding;
pub mod sharding_util;
pub mod text;
pub mod tiling;
pub mod types;
pub mod verify;

pub use attrs::{Attrs, RareAttrs};
pub use builder::{BuildError, Builder};
pub use instruction::{CompId, InstrId, Instruction, RareInstrFields};
pub use literal::{Literal, LiteralData};
pub use module::{
    Computation, DebugAttributes, DebugLogMode, Module, ModuleConfig, MutationError, OriginalArray,
    RecoveryEntry, Schedule,
};
pub use opcode::Opcode;
pub use shape::{ArrayShape, Layout, LayoutExtras, Shape};
pub use sharding::{NamedSharding, Sharding, ShardingKind, TileAssignment};
pub use types::ElementType;
