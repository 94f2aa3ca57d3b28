//! `tessera embedding ...`: the host side of TPU embeddings (crate `tessera-embedding`).
//!
//! * `tessera embedding preprocess --config C.json --input BATCH.npz -o CSR.npz` turns a batch
//!   of sparse ids into per-device, per-SparseCore CSR buffers as jax-tpu-embedding lays them
//!   out, and prints one line of statistics per stack. `--repeat N` preprocesses N times and
//!   prints the median time of the preprocessing alone (no file I/O).
//! * `tessera embedding layout --config C.json` prints the stacks, their tables (rows in each
//!   shard, rotation) and features (sample offsets), and the configuration's warnings.
//!
//! Formats: docs/embedding.md.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use tessera_embedding::{npz, preprocess, EmbeddingConfig, Layout};

#[derive(Clone, Debug, clap::Subcommand)]
pub enum EmbeddingCommand {
    /// Preprocess a batch of sparse ids (BATCH.npz) into CSR buffers (CSR.npz).
    Preprocess(PreprocessArgs),
    /// Print how the configuration's tables are padded, stacked and sharded.
    Layout {
        /// The JSON configuration.
        #[arg(long)]
        config: PathBuf,
    },
}

#[derive(Clone, Debug, clap::Args)]
pub struct PreprocessArgs {
    /// The JSON configuration (tables, features, devices, SparseCores, stacking).
    #[arg(long)]
    pub config: PathBuf,
    /// The batch: per feature `<feature>` (dense), `<feature>.values` + `<feature>.row_splits`
    /// (ragged) or `.indices` + `.values` + `.dense_shape` (sparse), optional `.weights`.
    #[arg(long)]
    pub input: PathBuf,
    /// Where to write the CSR buffers and statistics.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Preprocess this many times and report the median time (preprocessing only).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
}

fn load_config(path: &PathBuf) -> Result<(EmbeddingConfig, Layout)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut config = EmbeddingConfig::from_json(&text, &path.display().to_string())?;
    let layout = Layout::new(&mut config).with_context(|| format!("{}", path.display()))?;
    Ok((config, layout))
}

pub fn embedding(cmd: &EmbeddingCommand) -> Result<String> {
    match cmd {
        EmbeddingCommand::Layout { config } => {
            let (config, layout) = load_config(config)?;
            let mut out = String::new();
            for w in &layout.warnings {
                out.push_str(&format!("warning: {w}\n"));
            }
            for (si, s) in layout.stacks.iter().enumerate() {
                out.push_str(&format!(
                    "stack {}: {} rows x {} cols ({} per shard, {} shards), combiner {}, limits {}/{}\n",
                    s.name,
                    s.vocab_size,
                    s.embedding_dim,
                    layout.rows_per_shard(si),
                    layout.num_shards(),
                    s.combiner.name(),
                    s.max_ids_per_partition,
                    s.max_unique_ids_per_partition
                ));
                for &t in &s.tables {
                    let tl = &layout.tables[t];
                    out.push_str(&format!(
                        "  table {}: {} -> {} rows, dim {} -> {}, rows {}.. of each shard, rotation {}\n",
                        config.tables[t].name,
                        config.tables[t].vocabulary_size,
                        tl.padded_vocab_size,
                        config.tables[t].embedding_dim,
                        tl.padded_embedding_dim,
                        tl.row_offset_in_shard,
                        tl.shard_rotation
                    ));
                }
                for &f in &s.features {
                    let fl = &layout.features[f];
                    out.push_str(&format!(
                        "  feature {}: samples from {}, col_offset {}, col_shift {}\n",
                        config.features[f].name, fl.row_offset, fl.col_offset, fl.col_shift
                    ));
                }
            }
            Ok(out)
        }
        EmbeddingCommand::Preprocess(args) => {
            let (config, layout) = load_config(&args.config)?;
            let bytes = std::fs::read(&args.input)
                .with_context(|| format!("reading {}", args.input.display()))?;
            let batches = npz::read_batch(&config, &bytes, &args.input.display().to_string())?;
            let mut times = Vec::new();
            let mut result = None;
            for _ in 0..args.repeat.max(1) {
                let t = Instant::now();
                let r = preprocess(&config, &layout, &batches)?;
                times.push(t.elapsed().as_secs_f64());
                result = Some(r);
            }
            let result = result.context("no preprocessing run")?;
            if let Some(o) = &args.output {
                std::fs::write(o, npz::write_csr(&result))
                    .with_context(|| format!("writing {}", o.display()))?;
            }
            let mut out = String::new();
            for w in layout.warnings.iter().chain(&result.warnings) {
                out.push_str(&format!("warning: {w}\n"));
            }
            let ids: usize = batches.iter().map(|b| b.values.len()).sum();
            for s in &result.stacks {
                out.push_str(&format!(
                    "{}: max ids per partition {}, max unique ids per partition {}, max required buffer {}, dropped {}\n",
                    s.name,
                    s.stats.max_ids_per_partition.iter().max().unwrap_or(&0),
                    s.stats.max_unique_ids_per_partition.iter().max().unwrap_or(&0),
                    s.stats.required_buffer_sizes.iter().max().unwrap_or(&0),
                    s.stats.dropped_id_count
                ));
            }
            if args.repeat > 1 {
                times.sort_by(f64::total_cmp);
                let median = times[times.len() / 2];
                out.push_str(&format!(
                    "preprocess: {ids} ids, median {:.2} ms over {} runs, {:.1} M ids/s\n",
                    median * 1e3,
                    times.len(),
                    ids as f64 / median / 1e6
                ));
            }
            Ok(out)
        }
    }
}
