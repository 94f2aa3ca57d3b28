//! `tessera-embedding`: the host side of TPU embeddings (seed 004, `tpu_embedding_v3.py`, and its
//! successor jax-tpu-embedding).
//!
//! - [`config`]: tables, features, optimizers with their slot variables, validation, JSON.
//! - [`layout`]: padding, stacking ("tf" and "jax" rules), rotation, row and sample offsets.
//! - [`shard`]: stack/shard and unshard/unstack of table and slot values; checkpoints.
//! - [`preprocess`]: sparse id batches -> per-device, per-SparseCore CSR buffers + statistics.
//! - [`device`]: lookups and optimizer updates as HLO on PJRT devices, tables resident there.
//! - [`npz`]: batches and CSR buffers as `.npz` files (the CLI's formats).
//!
//! Entry points: [`EmbeddingConfig::from_json`], [`Layout::new`], [`preprocess::preprocess`].
//! The layout and a worked example are in docs/embedding.md.

pub mod config;
pub mod device;
pub mod error;
pub mod layout;
pub mod npz;
pub mod preprocess;
pub mod shard;

pub use config::{
    Combiner, EmbeddingConfig, FeatureConfig, Initializer, Optimizer, StackingMode, TableConfig,
};
pub use error::{EmbeddingError, Result};
pub use layout::{Layout, Stack};
pub use preprocess::{decode, preprocess, CsrEntry, FeatureBatch, Preprocessed, StackCsr};
