//! Padding, stacking and mod-sharding of tables over SparseCores.
//!
//! Every table is padded to a multiple of `8 * num_shards` rows (`num_shards` = devices x
//! SparseCores per device) and of 8 columns. Tables with the same stacking key are stacked: in a
//! stack, table `k` starts at row `row_offset_in_shard` of every shard and its shards are rotated
//! by `shard_rotation`. An id `i` of that table lives on shard `(i + rotation) % num_shards`, at
//! row `i / num_shards + row_offset_in_shard`; preprocessing encodes this as
//! `col = ((i + col_shift) % num_shards) + (i / num_shards) * num_shards + col_offset` with
//! `col_offset = row_offset_in_shard * num_shards`, so that `col % num_shards` is the shard and
//! `col / num_shards` the row inside it. Features of a stack are stacked along the batch: a
//! feature's samples start at its `row_offset` (the samples of the stack's earlier features).

use crate::config::{Combiner, EmbeddingConfig, StackingMode};
use crate::error::{EmbeddingError, Result};

fn round_up(x: u64, m: u64) -> u64 {
    x.div_ceil(m) * m
}

/// Where one table sits in its stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInStack {
    pub stack: usize,
    pub padded_vocab_size: u32,
    pub padded_embedding_dim: u32,
    /// First row of this table in every shard of the stack.
    pub row_offset_in_shard: u32,
    /// Shard `s` of the table is stored in shard `(s + shard_rotation) % num_shards`.
    pub shard_rotation: u32,
}

/// How one feature's ids and samples map into its stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureInStack {
    pub stack: usize,
    /// First sample of this feature in the stack's (global) batch.
    pub row_offset: u32,
    /// `row_offset_in_shard * num_shards` of its table.
    pub col_offset: u32,
    /// The table's shard rotation.
    pub col_shift: u32,
}

/// A stacked table.
#[derive(Clone, Debug, PartialEq)]
pub struct Stack {
    pub name: String,
    /// Indices into the config's tables, in stacking order.
    pub tables: Vec<usize>,
    /// Indices into the config's features, in order of their row offsets.
    pub features: Vec<usize>,
    pub vocab_size: u32,
    pub embedding_dim: u32,
    /// The first table's combiner. Preprocessing applies each feature's own table's combiner,
    /// so a TF-mode stack may hold tables with different ones.
    pub combiner: Combiner,
    pub total_sample_count: u64,
    pub max_ids_per_partition: u32,
    pub max_unique_ids_per_partition: u32,
}

/// The layout of all tables and features.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub global_device_count: u32,
    pub num_sc_per_device: u32,
    pub tables: Vec<TableInStack>,
    pub features: Vec<FeatureInStack>,
    pub stacks: Vec<Stack>,
    /// Warnings in the seed's words (padding, stacking limits ...), in the order they arose.
    pub warnings: Vec<String>,
}

impl Layout {
    pub fn num_shards(&self) -> u32 {
        self.global_device_count * self.num_sc_per_device
    }
    /// Rows of one shard of a stack.
    pub fn rows_per_shard(&self, stack: usize) -> u32 {
        self.stacks[stack].vocab_size / self.num_shards()
    }
    pub fn stack_index(&self, name: &str) -> Option<usize> {
        self.stacks.iter().position(|s| s.name == name)
    }

    /// Validates `config` (filling in defaults) and computes its layout.
    pub fn new(config: &mut EmbeddingConfig) -> Result<Layout> {
        let mut warnings = config.validate()?;
        let num_shards = config.global_device_count * config.num_sc_per_device;
        let align = 8 * num_shards as u64;
        // Tables in order of first use by a feature (how both TF and jax collect them).
        let mut order: Vec<usize> = Vec::new();
        for f in &config.features {
            if !order.contains(&f.table) {
                order.push(f.table);
            }
        }
        let padded_dim = |t: usize| round_up(config.tables[t].embedding_dim as u64, 8) as u32;
        let padded_vocab = |t: usize| -> Result<u32> {
            u32::try_from(round_up(config.tables[t].vocabulary_size as u64, align)).map_err(|_| {
                EmbeddingError::Stacking(format!(
                    "table '{}': padded vocabulary does not fit in 32 bits",
                    config.tables[t].name
                ))
            })
        };
        for &t in &order {
            let table = &config.tables[t];
            let v = table.vocabulary_size as u64;
            let extra_rows = round_up(v, align) - v;
            let extra_cols = padded_dim(t) - table.embedding_dim;
            if extra_rows != 0 {
                if v < align {
                    warnings.push(format!(
                        "!!! Adding {extra_rows} extra rows to a small table {}!!! Table had {v} rows before padding and {} rows after padding.",
                        table.name,
                        v + extra_rows
                    ));
                } else {
                    warnings.push(format!(
                        "Adding {extra_rows} extra rows to table {} to get {} rows.",
                        table.name,
                        v + extra_rows
                    ));
                }
            }
            if extra_cols != 0 {
                warnings.push(format!(
                    "Adding {extra_cols} extra columns to table {} to get {} columns.",
                    table.name,
                    padded_dim(t)
                ));
            }
        }

        // Groups of tables, each in stacking order.
        let mut groups: Vec<(Vec<u32>, Vec<usize>)> = Vec::new();
        for &t in &order {
            let table = &config.tables[t];
            let mut key = vec![padded_dim(t)];
            key.extend(table.optimizer.key());
            match table.quantization {
                None => key.push(0),
                Some(q) => key.extend([
                    1,
                    q.min_value.to_bits(),
                    q.max_value.to_bits(),
                    q.num_buckets,
                ]),
            }
            if config.stacking == StackingMode::Jax {
                key.push(table.combiner as u32);
            }
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, g)) => g.push(t),
                None => groups.push((key, vec![t])),
            }
        }
        let mut groups: Vec<Vec<usize>> = groups.into_iter().map(|(_, g)| g).collect();
        if config.stacking == StackingMode::Jax {
            groups = split_by_activation_memory(config, &groups, num_shards);
        }

        let mut tables = vec![
            TableInStack {
                stack: 0,
                padded_vocab_size: 0,
                padded_embedding_dim: 0,
                row_offset_in_shard: 0,
                shard_rotation: 0,
            };
            config.tables.len()
        ];
        let mut features = vec![
            FeatureInStack {
                stack: 0,
                row_offset: 0,
                col_offset: 0,
                col_shift: 0,
            };
            config.features.len()
        ];
        let mut stacks: Vec<Stack> = Vec::new();
        for group in groups {
            let names: Vec<&str> = group
                .iter()
                .map(|&t| config.tables[t].name.as_str())
                .collect();
            let joined = names.join("_");
            let name = match config.stacking {
                StackingMode::Jax if config.use_short_stack_names && joined.len() > 50 => {
                    let cut: String = joined.chars().take(50).collect();
                    format!("{cut}...{}", &sha256_hex(joined.as_bytes())[..12])
                }
                _ => joined,
            };
            if stacks.iter().any(|s| s.name == name) {
                return Err(EmbeddingError::Stacking(format!("{name} already exists!")));
            }
            let s = stacks.len();
            let rotation = match config.stacking {
                StackingMode::Tf => config.num_sc_per_device,
                StackingMode::Jax => config.rotation.unwrap_or(config.num_sc_per_device),
            };
            let dim = group.iter().map(|&t| padded_dim(t)).max().unwrap_or(8);
            let mut row_offset_in_shard = 0u64;
            let mut vocab = 0u64;
            for (index, &t) in group.iter().enumerate() {
                let pv = padded_vocab(t)?;
                tables[t] = TableInStack {
                    stack: s,
                    padded_vocab_size: pv,
                    padded_embedding_dim: dim,
                    row_offset_in_shard: row_offset_in_shard as u32,
                    shard_rotation: ((rotation as u64 * index as u64) % num_shards as u64) as u32,
                };
                row_offset_in_shard += pv as u64 / num_shards as u64;
                vocab += pv as u64;
            }
            let vocab_size = u32::try_from(vocab).map_err(|_| {
                EmbeddingError::Stacking(format!(
                    "stack '{name}': {vocab} rows do not fit in 32 bits"
                ))
            })?;
            let mut stack_features = Vec::new();
            let mut samples = 0u64;
            for (fi, f) in config.features.iter().enumerate() {
                if group.contains(&f.table) {
                    let ts = &tables[f.table];
                    features[fi] = FeatureInStack {
                        stack: s,
                        row_offset: u32::try_from(samples).map_err(|_| {
                            EmbeddingError::Stacking(format!(
                                "stack '{name}': more than 2^32 samples"
                            ))
                        })?,
                        col_offset: ts.row_offset_in_shard * num_shards,
                        col_shift: ts.shard_rotation,
                    };
                    samples += f.sample_count();
                    stack_features.push(fi);
                }
            }
            let first = &config.tables[group[0]];
            let (max_ids, max_unique) = match config.stacking {
                StackingMode::Jax if group.len() > 1 => {
                    warnings.push(format!(
                        "Stacking multiple tables together: {names:?}. The `max_ids_per_partition` and `max_unique_ids_per_partition` from individual tables will be ignored. Instead, default limits (max_ids={}, max_unique_ids={}) will be used for the stack.",
                        config.default_max_ids_per_partition, config.default_max_unique_ids_per_partition
                    ));
                    (
                        config.default_max_ids_per_partition,
                        config.default_max_unique_ids_per_partition,
                    )
                }
                StackingMode::Jax => (
                    first.max_ids_per_partition,
                    first.max_unique_ids_per_partition,
                ),
                // The seed leaves limits to its C++ stacking; a TF stack takes its tables' largest.
                StackingMode::Tf => (
                    group
                        .iter()
                        .map(|&t| config.tables[t].max_ids_per_partition)
                        .max()
                        .unwrap_or(256),
                    group
                        .iter()
                        .map(|&t| config.tables[t].max_unique_ids_per_partition)
                        .max()
                        .unwrap_or(256),
                ),
            };
            stacks.push(Stack {
                name,
                tables: group.clone(),
                features: stack_features,
                vocab_size,
                embedding_dim: dim,
                combiner: first.combiner,
                total_sample_count: samples,
                max_ids_per_partition: max_ids,
                max_unique_ids_per_partition: max_unique,
            });
        }
        Ok(Layout {
            global_device_count: config.global_device_count,
            num_sc_per_device: config.num_sc_per_device,
            tables,
            features,
            stacks,
            warnings,
        })
    }
}

/// jax-tpu-embedding's first-fit split of each group so that no stack's activations (padded dim
/// x samples per SparseCore x 4 bytes, summed over its tables) exceed the limit.
fn split_by_activation_memory(
    config: &EmbeddingConfig,
    groups: &[Vec<usize>],
    num_shards: u32,
) -> Vec<Vec<usize>> {
    let mut samples = vec![0u64; config.tables.len()];
    for f in &config.features {
        samples[f.table] += f.sample_count() / num_shards as u64;
    }
    let bytes = |t: usize| round_up(config.tables[t].embedding_dim as u64, 8) * samples[t] * 4;
    let mut out = Vec::new();
    for group in groups {
        let mut split: Vec<Vec<usize>> = Vec::new();
        for &t in group {
            match split.iter_mut().find(|g| {
                g.iter().map(|&u| bytes(u)).sum::<u64>() + bytes(t)
                    <= config.activation_mem_bytes_limit
            }) {
                Some(g) => g.push(t),
                None => split.push(vec![t]),
            }
        }
        out.extend(split);
    }
    out
}

/// The lowercase hex SHA-256 of `data` (jax-tpu-embedding's short stack names end in its first
/// 12 digits).
fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod sha256_tests {
    #[test]
    fn known_digests() {
        assert_eq!(
            super::sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            super::sha256_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }
}
