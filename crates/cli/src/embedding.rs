//! `tessera embedding ...`: the host side of TPU embeddings (crate `tessera-embedding`).
//!
//! * `tessera embedding preprocess --config C.json --input BATCH.npz -o CSR.npz` turns a batch
//!   of sparse ids into per-device, per-SparseCore CSR buffers as jax-tpu-embedding lays them
//!   out, and prints one line of statistics per stack. `--repeat N` preprocesses N times and
//!   prints the median time of the preprocessing alone (no file I/O).
//! * `tessera embedding layout --config C.json` prints the stacks, their tables (rows in each
//!   shard, rotation) and features (sample offsets), and the configuration's warnings.
//!
//! * `tessera embedding lookup --config C.json --input BATCH.npz --tables DIR --devices N -o
//!   ACT.npz` looks the batch up on N PJRT CPU devices (tables from `DIR/<table>.npy`) and
//!   writes one `<feature>` array per feature.
//! * `tessera embedding step --config C.json --input BATCH.npz --gradients GRAD.npz --tables DIR
//!   --devices N [--steps K]` applies the activation gradients K times with each table's
//!   optimizer and writes the tables and slots back to DIR (a missing slot file starts at the
//!   slot's initial value; a feature without a gradient gets a zero one and the seed's warning).
//!
//! Formats: docs/embedding.md.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use tessera_embedding::device::{self, DeviceEmbedding, PreparedBatch};
use tessera_embedding::shard::{self, Matrix};
use tessera_embedding::{npz, preprocess, EmbeddingConfig, FeatureBatch, Layout};
use tessera_runtime::{Client, HostArray};

#[derive(Clone, Debug, clap::Subcommand)]
pub enum EmbeddingCommand {
    /// Preprocess a batch of sparse ids (BATCH.npz) into CSR buffers (CSR.npz).
    Preprocess(PreprocessArgs),
    /// Look a batch up on PJRT CPU devices (tables as .npy files in a directory).
    Lookup(DeviceArgs),
    /// Apply activation gradients to the tables and slots in a directory, in place.
    Step(DeviceArgs),
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

#[derive(Clone, Debug, clap::Args)]
pub struct DeviceArgs {
    /// The JSON configuration; `--devices` replaces its `global_device_count`.
    #[arg(long)]
    pub config: PathBuf,
    /// The batch (formats as for `preprocess`).
    #[arg(long)]
    pub input: PathBuf,
    /// `<table>.npy` per table and `<table>.<slot>.npy` per optimizer slot.
    #[arg(long)]
    pub tables: PathBuf,
    /// PJRT CPU devices to shard the tables over.
    #[arg(long, default_value_t = 1)]
    pub devices: u32,
    /// `step`: activation gradients, `<feature>` f32 [samples, dim] per feature.
    #[arg(long)]
    pub gradients: Option<PathBuf>,
    /// `step`: how many times to apply the gradients.
    #[arg(long, default_value_t = 1)]
    pub steps: u32,
    /// `lookup`: where to write the activations.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

fn load_config(path: &PathBuf) -> Result<(EmbeddingConfig, Layout)> {
    load_config_on(path, None)
}

fn load_config_on(path: &PathBuf, devices: Option<u32>) -> Result<(EmbeddingConfig, Layout)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut config = EmbeddingConfig::from_json(&text, &path.display().to_string())?;
    if let Some(n) = devices {
        config.global_device_count = n;
    }
    let layout = Layout::new(&mut config).with_context(|| format!("{}", path.display()))?;
    Ok((config, layout))
}

/// `lookup` and `step`: the tables on `--devices` devices, the batch prepared.
fn on_devices(args: &DeviceArgs) -> Result<(DeviceEmbedding, PreparedBatch, Vec<FeatureBatch>)> {
    if !(1..=256).contains(&args.devices) {
        anyhow::bail!("--devices must be between 1 and 256, got {}", args.devices);
    }
    let (config, layout) = load_config_on(&args.config, Some(args.devices))?;
    let bytes =
        std::fs::read(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    let input = args.input.display().to_string();
    let batches = npz::read_batch(&config, &bytes, &input)?;
    let ckpt = device::load_tables(&config, &args.tables)?;
    let client = Client::cpu(args.devices as usize).context("creating the PJRT CPU client")?;
    let dev = DeviceEmbedding::new(client, config, layout, &ckpt)?;
    let prepared = dev.prepare(&batches).map_err(|e| e.in_file(&input))?;
    Ok((dev, prepared, batches))
}

fn read_gradients(dev: &DeviceEmbedding, path: &PathBuf) -> Result<Vec<Option<Matrix>>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut arrays = tessera_runtime::npz::read(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let config = dev.config();
    let mut out = Vec::new();
    for f in &config.features {
        let dim = config.tables[f.table].embedding_dim as usize;
        let rows = f.sample_count() as usize;
        match arrays.shift_remove(&f.name) {
            None => out.push(None),
            Some(a) => {
                let n: i64 = a.dims.iter().product();
                if a.ty != tessera_hlo::ElementType::F32
                    || a.dims.last().copied() != Some(dim as i64)
                    || n != (rows * dim) as i64
                {
                    anyhow::bail!(
                        "{}: gradient '{}' must be f32 [{rows}, {dim}], found {}{:?}",
                        path.display(),
                        f.name,
                        a.ty,
                        a.dims
                    );
                }
                let data = a
                    .data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                out.push(Some(Matrix {
                    rows,
                    cols: dim,
                    data,
                }));
            }
        }
    }
    if let Some(name) = arrays.keys().next() {
        anyhow::bail!("{}: '{name}' is no feature's gradient", path.display());
    }
    Ok(out)
}

pub fn embedding(cmd: &EmbeddingCommand) -> Result<String> {
    match cmd {
        EmbeddingCommand::Lookup(args) => {
            let (mut dev, prepared, _) = on_devices(args)?;
            let acts = dev.lookup(&prepared)?;
            let mut out = String::new();
            for w in dev.layout().warnings.iter().chain(&prepared.warnings) {
                out.push_str(&format!("warning: {w}\n"));
            }
            let arrays: Vec<(String, HostArray)> = dev
                .config()
                .features
                .iter()
                .zip(&acts)
                .map(|(f, m)| {
                    let dims = f.output_shape.iter().map(|&d| d as i64).collect();
                    let data = m.data.iter().flat_map(|x| x.to_le_bytes()).collect();
                    HostArray::new(tessera_hlo::ElementType::F32, dims, data)
                        .map(|a| (f.name.clone(), a))
                })
                .collect::<std::result::Result<_, _>>()?;
            if let Some(o) = &args.output {
                let bytes =
                    tessera_runtime::npz::write(arrays.iter().map(|(n, a)| (n.as_str(), a)));
                std::fs::write(o, bytes).with_context(|| format!("writing {}", o.display()))?;
            }
            out.push_str(&format!(
                "lookup: {} features on {} devices\n",
                acts.len(),
                args.devices
            ));
            Ok(out)
        }
        EmbeddingCommand::Step(args) => {
            let grads_path = args
                .gradients
                .as_ref()
                .context("step needs --gradients GRAD.npz")?;
            let (mut dev, prepared, _) = on_devices(args)?;
            let grads = read_gradients(&dev, grads_path)?;
            let mut out = String::new();
            for w in dev.layout().warnings.iter().chain(&prepared.warnings) {
                out.push_str(&format!("warning: {w}\n"));
            }
            for k in 0..args.steps {
                for w in dev.apply_gradients(&prepared, &grads)? {
                    if k == 0 {
                        out.push_str(&format!("warning: {w}\n"));
                    }
                }
            }
            let ckpt = dev.checkpoint()?;
            shard::save_checkpoint(dev.config(), &ckpt, &args.tables)?;
            let t = dev.traffic(&prepared);
            out.push_str(&format!(
                "step: {} steps on {} devices; tables and slots written to {}; {} bytes moved per lookup, {} per update\n",
                args.steps,
                args.devices,
                args.tables.display(),
                t.lookup_bytes,
                t.update_bytes
            ));
            Ok(out)
        }
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
                let r = preprocess(&config, &layout, &batches)
                    .map_err(|e| e.in_file(&args.input.display().to_string()))?;
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
