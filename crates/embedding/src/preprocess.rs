//! Host preprocessing: a batch of sparse ids per feature -> per-device, per-SparseCore CSR
//! buffers, as jax-tpu-embedding's `preprocess_sparse_dense_matmul_input` lays them out.
//!
//! For every stack, device `d` and SparseCore `c` of that device (a "task"):
//! 1. **COO with gains.** Each feature of the stack gives the task rows
//!    `[(d * nsc + c) * n, (d * nsc + c + 1) * n)` of its batch (`n` = batch / (devices x nsc)).
//!    A row becomes the sample `row - start + c * samples_per_core + row_offset / (devices x nsc)`;
//!    each id becomes `col` (rotation and stacking offset, see [`crate::layout`]) with gain
//!    `weight / divisor` (sum: 1; mean: the row's weight sum or id count; sqrtn: the square root
//!    of the row's sum of squared weights or of its id count).
//! 2. **Sort** by (target SparseCore `col % num_shards`, row in the shard `col / num_shards`,
//!    sample), one 64-bit key per id.
//! 3. **Merge duplicates**: equal (col, sample) pairs become one entry with the gains summed.
//! 4. **Limits**: per target SparseCore (a *partition*) count ids and unique ids; over
//!    `max_ids_per_partition` / `max_unique_ids_per_partition` either drop (ids after the limit,
//!    and every later id of a unique id that came after it) or fail.
//! 5. **CSR**: core `c` owns `coo_buffer_size_per_device / nsc` slots of the device's buffers;
//!    partition `p` is written after the previous one rounded up to 8, padding is `i32::MAX` ids
//!    and samples and NaN gains; `row_pointers[c * max(num_shards, 8) + p]` is the end of
//!    partition `p` relative to the core's first slot. With minibatching enabled the pointers are
//!    device-global and cores follow each other, each holding its minibatches in order.
//! 6. **Minibatching** (when enabled and a partition of any stack is over its limits after
//!    step 4, which then drops nothing): every entry goes to bucket
//!    `HighwayHash(col) % 64` ([`minibatching_bucket`]); ids and unique ids are counted per
//!    (partition, bucket), dropped per bucket when dropping is on, and the counts of every
//!    (stack, device, core, partition) choose where the 64 buckets are cut into minibatches:
//!    bottom-up, two neighbouring bucket ranges stay together while their sum is within the
//!    limit. One cut for all stacks; statistics stay those of step 4.
//!
//! Statistics per stack: the largest ids and unique ids per partition seen by any core of each
//! device (counted before dropping), the buffer each core needs, and the dropped id count.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::config::{Combiner, EmbeddingConfig};
use crate::error::{EmbeddingError, Result};
use crate::layout::Layout;

/// Padding of ids and sample ids in the CSR buffers.
pub const PADDING_ID: i32 = i32::MAX;
/// jax-tpu-embedding's minibatching bucket count: buffers are sized for this many minibatches.
pub const MAX_MINIBATCHING_BUCKETS: usize = 64;
/// Sample ids per device must fit the 26 data bits of the sort key (jax-tpu-embedding's limit).
pub const MAX_SAMPLES_PER_DEVICE: u64 = (1 << 26) - 1;

/// One feature's batch: `rows` samples, sample `r` holding ids `values[row_splits[r]..row_splits[r+1]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureBatch {
    pub values: Vec<i32>,
    pub row_splits: Vec<usize>,
    /// One weight per id, or none (every weight 1).
    pub weights: Option<Vec<f32>>,
}

impl FeatureBatch {
    /// Dense ids `[rows, cols]`, row-major.
    pub fn dense(
        rows: usize,
        cols: usize,
        values: Vec<i32>,
        weights: Option<Vec<f32>>,
    ) -> FeatureBatch {
        FeatureBatch {
            values,
            row_splits: (0..=rows).map(|r| r * cols).collect(),
            weights,
        }
    }

    /// Ragged ids with TF/numpy row splits (`rows + 1` entries, from 0 to `values.len()`).
    /// Splits are checked by [`preprocess`].
    pub fn ragged(
        values: Vec<i32>,
        row_splits: Vec<usize>,
        weights: Option<Vec<f32>>,
    ) -> FeatureBatch {
        FeatureBatch {
            values,
            row_splits,
            weights,
        }
    }

    /// A sparse COO batch: `indices[k] = (row, position)` of `values[k]`, dense shape
    /// `[rows, _]`. Entries are taken row by row (stable in their given order within a row).
    pub fn sparse_coo(
        rows: usize,
        indices: &[(i64, i64)],
        values: &[i32],
        weights: Option<&[f32]>,
    ) -> std::result::Result<FeatureBatch, String> {
        if indices.len() != values.len() {
            return Err(format!(
                "{} indices for {} values",
                indices.len(),
                values.len()
            ));
        }
        if let Some(w) = weights {
            if w.len() != values.len() {
                return Err(format!("{} weights for {} values", w.len(), values.len()));
            }
        }
        let mut counts = vec![0usize; rows + 1];
        for (k, &(r, _)) in indices.iter().enumerate() {
            if r < 0 || r as u64 >= rows as u64 {
                return Err(format!(
                    "index {k}: row {r} is outside the dense shape's {rows} rows"
                ));
            }
            counts[r as usize + 1] += 1;
        }
        for r in 0..rows {
            counts[r + 1] += counts[r];
        }
        let row_splits = counts.clone();
        let mut next = counts;
        let mut out_values = vec![0i32; values.len()];
        let mut out_weights = weights.map(|_| vec![0f32; values.len()]);
        for (k, &(r, _)) in indices.iter().enumerate() {
            let slot = next[r as usize];
            next[r as usize] += 1;
            out_values[slot] = values[k];
            if let (Some(ow), Some(w)) = (out_weights.as_mut(), weights) {
                ow[slot] = w[k];
            }
        }
        Ok(FeatureBatch {
            values: out_values,
            row_splits,
            weights: out_weights,
        })
    }

    pub fn rows(&self) -> usize {
        self.row_splits.len().saturating_sub(1)
    }
}

/// Statistics of one stack (flattened over devices, as jax-tpu-embedding returns them).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StackStats {
    /// `[devices * num_shards]`: most ids any core of the device sends to each partition.
    pub max_ids_per_partition: Vec<i32>,
    /// `[devices * num_shards]`: most unique ids any core of the device sends to each partition.
    pub max_unique_ids_per_partition: Vec<i32>,
    /// `[devices * nsc]`: COO slots each core needs (partitions rounded up to 8).
    pub required_buffer_sizes: Vec<i32>,
    pub dropped_id_count: u64,
}

/// The CSR buffers of one stack for all devices (each buffer flattened: device-major).
#[derive(Clone, Debug, PartialEq)]
pub struct StackCsr {
    pub name: String,
    pub row_pointers: Vec<i32>,
    pub embedding_ids: Vec<i32>,
    pub sample_ids: Vec<i32>,
    pub gains: Vec<f32>,
    pub row_pointers_size_per_device: usize,
    pub coo_buffer_size_per_device: usize,
    pub stats: StackStats,
}

/// One decoded CSR entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CsrEntry {
    pub device: u32,
    pub core: u32,
    pub partition: u32,
    /// Row in the target shard.
    pub id: i32,
    /// Sample index within the core.
    pub sample: i32,
    pub gain: f32,
}

/// The result of preprocessing one batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Preprocessed {
    /// One entry per stack, in the layout's stack order.
    pub stacks: Vec<StackCsr>,
    pub num_minibatches: u32,
    pub global_device_count: u32,
    pub num_sc_per_device: u32,
    pub enable_minibatching: bool,
    pub warnings: Vec<String>,
}

impl Preprocessed {
    /// Every entry of a stack's buffers, in buffer order.
    pub fn decode(&self, stack: &StackCsr) -> std::result::Result<Vec<CsrEntry>, String> {
        decode(
            stack,
            self.global_device_count,
            self.num_sc_per_device,
            self.enable_minibatching,
            self.num_minibatches,
        )
    }
}

/// Reads entries back out of CSR buffers laid out as [`preprocess`] (and jax-tpu-embedding)
/// writes them. Pointers that run backwards or past the buffers are an error.
pub fn decode(
    s: &StackCsr,
    devices: u32,
    nsc: u32,
    minibatching: bool,
    num_minibatches: u32,
) -> std::result::Result<Vec<CsrEntry>, String> {
    let num_shards = (devices * nsc) as usize;
    let per_bucket = num_shards.max(8);
    let per_sc = s.coo_buffer_size_per_device / nsc as usize;
    let mut out = Vec::new();
    for d in 0..devices as usize {
        let rp = &s.row_pointers
            [d * s.row_pointers_size_per_device..(d + 1) * s.row_pointers_size_per_device];
        let coo = d * s.coo_buffer_size_per_device;
        let mut global_end = 0usize;
        for c in 0..nsc as usize {
            let segments = if minibatching {
                num_minibatches as usize
            } else {
                1
            };
            let base = if minibatching { 0 } else { c * per_sc };
            let mut end = if minibatching { global_end } else { 0 };
            for m in 0..segments {
                let row = (c * segments + m) * per_bucket;
                for p in 0..num_shards {
                    let start = end.div_ceil(8) * 8;
                    let e = *rp.get(row + p).ok_or("row pointers too short")?;
                    let e = usize::try_from(e).map_err(|_| format!("negative row pointer {e}"))?;
                    if e < end || (e > start && base + e > s.coo_buffer_size_per_device) {
                        return Err(format!(
                            "device {d} core {c} partition {p}: row pointer {e} after {end}"
                        ));
                    }
                    for i in start..e.max(start) {
                        let at = coo + base + i;
                        out.push(CsrEntry {
                            device: d as u32,
                            core: c as u32,
                            partition: p as u32,
                            id: s.embedding_ids[at],
                            sample: s.sample_ids[at],
                            gain: s.gains[at],
                        });
                    }
                    end = e.max(end);
                }
            }
            global_end = end;
        }
    }
    Ok(out)
}

struct Plan<'a> {
    config: &'a EmbeddingConfig,
    layout: &'a Layout,
    batches: &'a [FeatureBatch],
    num_shards: u32,
    bits: u32,
    has_weights: Vec<bool>,
    /// Per stack: samples per device and per core.
    samples_per_core: Vec<u32>,
}

/// What one (stack, device, core) task found.
struct CoreResult {
    cols: Vec<u32>,
    rows: Vec<u32>,
    gains: Vec<f32>,
    /// Kept entries per partition (prefix offsets into cols, `num_shards + 1`).
    part_start: Vec<u32>,
    ids: Vec<u32>,
    unique: Vec<u32>,
    dropped: u64,
    /// How many ids each collected entry merges (duplicates of a sample's id); only collected
    /// without direct writing, for minibatch dropping.
    mult: Vec<u32>,
}

/// Preprocesses one batch (`batches[i]` is the batch of `config.features[i]`).
pub fn preprocess(
    config: &EmbeddingConfig,
    layout: &Layout,
    batches: &[FeatureBatch],
) -> Result<Preprocessed> {
    let num_shards = layout.num_shards();
    let devices = layout.global_device_count;
    let nsc = layout.num_sc_per_device;
    if batches.len() != config.features.len() {
        return Err(EmbeddingError::Input {
            feature: "*".into(),
            message: format!(
                "{} batches for {} features",
                batches.len(),
                config.features.len()
            ),
        });
    }
    for (f, b) in config.features.iter().zip(batches) {
        check_batch(config, f, b, devices * nsc)?;
    }
    let mut has_weights = Vec::new();
    let mut samples_per_core = Vec::new();
    for s in &layout.stacks {
        let weighted: Vec<bool> = s
            .features
            .iter()
            .map(|&f| batches[f].weights.is_some())
            .collect();
        has_weights.push(weighted.iter().any(|&w| w));
        let per_device: u64 = s
            .features
            .iter()
            .map(|&f| batches[f].rows() as u64 / devices as u64)
            .sum();
        if per_device > MAX_SAMPLES_PER_DEVICE {
            return Err(EmbeddingError::Input {
                feature: s.name.clone(),
                message: format!(
                    "The total local batch size for device (including stacked tables) exceeds the maximum limit supported by the SparseCore CooFormat sorting key ({MAX_SAMPLES_PER_DEVICE})."
                ),
            });
        }
        samples_per_core.push((per_device / nsc as u64) as u32);
    }
    let plan = Plan {
        config,
        layout,
        batches,
        num_shards,
        bits: num_shards.trailing_zeros(),
        has_weights,
        samples_per_core,
    };

    // The buffers, allocated up front; without minibatching every task writes its core's part.
    let mut csrs = Vec::new();
    for si in 0..layout.stacks.len() {
        csrs.push(alloc_stack(&plan, si)?);
    }
    let per_task = (devices * nsc) as usize;
    let mut outs: Vec<Mutex<Option<CoreOut>>> = Vec::new();
    if !config.enable_minibatching {
        for csr in csrs.iter_mut() {
            let per_bucket = csr.row_pointers_size_per_device / nsc as usize;
            let per_sc = csr.coo_buffer_size_per_device / nsc as usize;
            let parts = csr
                .row_pointers
                .chunks_mut(per_bucket)
                .zip(csr.embedding_ids.chunks_mut(per_sc))
                .zip(csr.sample_ids.chunks_mut(per_sc))
                .zip(csr.gains.chunks_mut(per_sc));
            for (((row_pointers, ids), samples), gains) in parts.take(per_task) {
                outs.push(Mutex::new(Some(CoreOut {
                    row_pointers,
                    ids,
                    samples,
                    gains,
                })));
            }
        }
    }

    // Run every (stack, device, core) task on a few threads; results land in task order.
    let tasks = layout.stacks.len() * devices as usize * nsc as usize;
    let results: Vec<Mutex<Option<Result<CoreResult>>>> =
        (0..tasks).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(tasks)
        .max(1);
    let work = || {
        let mut scratch = Scratch::default();
        loop {
            let t = next.fetch_add(1, Ordering::Relaxed);
            if t >= tasks {
                break;
            }
            let stack = t / (devices * nsc) as usize;
            let device = (t / nsc as usize) % devices as usize;
            let core = t % nsc as usize;
            let direct = outs
                .get(t)
                .and_then(|m| m.lock().ok().and_then(|mut o| o.take()));
            let r = run_task(
                &plan,
                stack,
                device as u32,
                core as u32,
                &mut scratch,
                direct,
            );
            if let Ok(mut slot) = results[t].lock() {
                *slot = Some(r);
            }
        }
    };
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }
    drop(outs);
    let mut core_results = Vec::with_capacity(tasks);
    for m in results {
        match m.into_inner().ok().flatten() {
            Some(r) => core_results.push(r?),
            None => {
                return Err(EmbeddingError::Input {
                    feature: "*".into(),
                    message: "a preprocessing task did not finish".into(),
                })
            }
        }
    }

    let mut warnings = Vec::new();
    // Minibatching: when any partition of any stack is over its limits, every stack is split
    // into the same minibatches of hash buckets.
    let split = if config.enable_minibatching && minibatching_required(&plan, &core_results) {
        Some(split_into_minibatches(
            &plan,
            &core_results,
            per_task,
            &mut warnings,
        )?)
    } else {
        None
    };
    let num_minibatches = split.as_ref().map_or(1, |m| m.count);
    let mut stacks = Vec::new();
    let mut results = core_results.into_iter();
    for (si, csr) in csrs.into_iter().enumerate() {
        let cores: Vec<CoreResult> = results.by_ref().take(per_task).collect();
        let bucketed = split.as_ref().map(|m| {
            (
                &m.tasks[si * per_task..(si + 1) * per_task],
                &m.minibatch_of,
            )
        });
        stacks.push(finish_stack(
            &plan,
            si,
            &cores,
            bucketed,
            csr,
            &mut warnings,
        )?);
    }
    Ok(Preprocessed {
        stacks,
        num_minibatches,
        global_device_count: devices,
        num_sc_per_device: nsc,
        enable_minibatching: config.enable_minibatching,
        warnings,
    })
}

fn check_batch(
    config: &EmbeddingConfig,
    f: &crate::config::FeatureConfig,
    b: &FeatureBatch,
    shards: u32,
) -> Result<()> {
    let err = |message: String| EmbeddingError::Input {
        feature: f.name.clone(),
        message,
    };
    let rows = b.rows();
    if b.row_splits.is_empty() || b.row_splits[0] != 0 {
        return Err(err("row splits must start at 0".into()));
    }
    if let Some(w) = b.row_splits.windows(2).position(|w| w[1] < w[0]) {
        return Err(err(format!("row splits decrease at row {w}")));
    }
    if *b.row_splits.last().unwrap_or(&0) != b.values.len() {
        return Err(err(format!(
            "row splits end at {} but there are {} ids",
            b.row_splits.last().unwrap_or(&0),
            b.values.len()
        )));
    }
    if rows != f.input_shape[0] as usize {
        return Err(err(format!(
            "batch has {rows} samples, input_shape says {}",
            f.input_shape[0]
        )));
    }
    if !rows.is_multiple_of(shards as usize) || rows == 0 {
        return Err(err(format!(
            "batch size {rows} must be a positive multiple of global_device_count * num_sc_per_device = {shards}"
        )));
    }
    if let Some(w) = &b.weights {
        if w.len() != b.values.len() {
            return Err(err(format!(
                "{} weights for {} ids",
                w.len(),
                b.values.len()
            )));
        }
        if let Some(k) = w.iter().position(|x| !x.is_finite()) {
            return Err(err(format!("weight {k} is {}", w[k])));
        }
    }
    let vocab = config.tables[f.table].vocabulary_size as i64;
    if let Some(k) = b.values.iter().position(|&v| v < 0 || v as i64 >= vocab) {
        let row = b.row_splits.partition_point(|&s| s <= k) - 1;
        return Err(err(format!(
            "id {} (sample {row}) is outside table '{}' of {vocab} rows",
            b.values[k], config.tables[f.table].name
        )));
    }
    Ok(())
}

/// One core's part of a stack's CSR buffers, written directly by its task (no minibatching).
struct CoreOut<'a> {
    row_pointers: &'a mut [i32],
    ids: &'a mut [i32],
    samples: &'a mut [i32],
    gains: &'a mut [f32],
}

/// Writes a core's entries partition by partition, aligning each partition to 8 with padding.
struct Writer<'a> {
    out: CoreOut<'a>,
    at: usize,
    part: usize,
    last_written: bool,
}

impl Writer<'_> {
    fn close_until(&mut self, p: usize) {
        while self.part < p {
            self.out.row_pointers[self.part] = self.at as i32;
            let aligned = (self.at.div_ceil(8) * 8).min(self.out.ids.len());
            self.out.ids[self.at..aligned].fill(PADDING_ID);
            self.out.samples[self.at..aligned].fill(PADDING_ID);
            self.out.gains[self.at..aligned].fill(f32::NAN);
            self.at = aligned;
            self.part += 1;
        }
    }
    /// False when the core's slots are full (the entry is dropped).
    fn push(&mut self, p: usize, id: i32, sample: i32, gain: f32) -> bool {
        self.close_until(p);
        self.last_written = self.at < self.out.ids.len();
        if self.last_written {
            self.out.ids[self.at] = id;
            self.out.samples[self.at] = sample;
            self.out.gains[self.at] = gain;
            self.at += 1;
        }
        self.last_written
    }
    fn merge(&mut self, gain: f32) {
        if self.last_written {
            self.out.gains[self.at - 1] += gain;
        }
    }
    fn finish(&mut self, shards: usize) {
        self.close_until(shards);
        let last = self.at as i32;
        for x in self.out.row_pointers.iter_mut().skip(shards) {
            *x = last;
        }
    }
}

/// Buffers a worker reuses from task to task (fresh memory costs page faults).
#[derive(Default)]
struct Scratch {
    /// Keys per target partition, in extraction order.
    parts: Vec<Vec<u64>>,
    radix: Vec<u64>,
    rows_of: Vec<u32>,
    gains_of: Vec<f32>,
}

fn run_task(
    plan: &Plan,
    stack: usize,
    device: u32,
    core: u32,
    scratch: &mut Scratch,
    direct: Option<CoreOut<'_>>,
) -> Result<CoreResult> {
    let layout = plan.layout;
    let s = &layout.stacks[stack];
    let nsc = layout.num_sc_per_device;
    let devices = layout.global_device_count;
    let mask = plan.num_shards - 1;
    let bits = plan.bits;
    let per_core = plan.samples_per_core[stack];
    let weighted = plan.has_weights[stack];
    // Each feature keeps its own table's combiner, also in a stack of tables with different
    // ones (TF mode stacks them together): a `sum` table is never averaged.
    let combiner_of = |f: usize| plan.config.tables[plan.config.features[f].table].combiner;
    let all_sum = s.features.iter().all(|&f| combiner_of(f) == Combiner::Sum);

    // 1. COO with gains, as sort keys: [partition][row in the shard: lbits][sample or index:
    // 26 bits]. Ids arrive in increasing sample (and index) order, so a stable sort on the
    // partition and row bits alone orders the keys by (partition, row, sample).
    let lbits = 32 - (layout.rows_per_shard(stack).max(1) - 1).leading_zeros();
    let key_of = |col: u32| (((col & mask) as u64) << lbits | (col >> bits) as u64) << 26;
    let total: usize = s
        .features
        .iter()
        .map(|&f| {
            let b = &plan.batches[f];
            let n = b.rows() / (devices * nsc) as usize;
            let start = (device * nsc + core) as usize * n;
            b.row_splits[start + n] - b.row_splits[start]
        })
        .sum();
    let Scratch {
        parts,
        radix,
        rows_of,
        gains_of,
    } = scratch;
    parts.resize_with(plan.num_shards as usize, Vec::new);
    for p in parts.iter_mut() {
        p.clear();
    }
    rows_of.clear();
    gains_of.clear();
    // Unweighted stacks derive the gain from the sample: one per sample of this core.
    let mut row_gain: Vec<f32> = Vec::new();
    if weighted {
        rows_of.reserve(total);
        gains_of.reserve(total);
    } else if !all_sum {
        row_gain = vec![1.0; per_core as usize];
    }
    for &fi in &s.features {
        let combiner = combiner_of(fi);
        let b = &plan.batches[fi];
        let fl = &layout.features[fi];
        let n = b.rows() / (devices * nsc) as usize;
        let start = (device * nsc + core) as usize * n;
        let row_offset = core * per_core + fl.row_offset / (devices * nsc);
        let (shift, offset) = (fl.col_shift, fl.col_offset);
        for r in start..start + n {
            let sample = (r - start) as u32 + row_offset;
            let (a, z) = (b.row_splits[r], b.row_splits[r + 1]);
            let ids = &b.values[a..z];
            match &b.weights {
                Some(w) if weighted => {
                    let w = &w[a..z];
                    let divisor = match combiner {
                        Combiner::Sum => 1.0f32,
                        Combiner::Mean => w.iter().fold(0.0f32, |acc, &x| acc + x),
                        Combiner::Sqrtn => w
                            .iter()
                            .fold(0.0f32, |acc, &x| {
                                (acc as f64 + (x as f64) * (x as f64)) as f32
                            })
                            .sqrt(),
                    };
                    for (&id, &wt) in ids.iter().zip(w) {
                        let col = col_id(id as u32, shift, offset, mask);
                        parts[(col & mask) as usize].push(key_of(col) | rows_of.len() as u64);
                        rows_of.push(sample);
                        gains_of.push(wt / divisor);
                    }
                }
                _ if weighted => {
                    // A feature without weights in a stack with weights: weights of 1.
                    let k = ids.len() as f32;
                    let divisor = match combiner {
                        Combiner::Sum => 1.0f32,
                        Combiner::Mean => k,
                        Combiner::Sqrtn => k.sqrt(),
                    };
                    for &id in ids {
                        let col = col_id(id as u32, shift, offset, mask);
                        parts[(col & mask) as usize].push(key_of(col) | rows_of.len() as u64);
                        rows_of.push(sample);
                        gains_of.push(1.0 / divisor);
                    }
                }
                _ => {
                    let local = (sample % per_core) as usize;
                    match combiner {
                        Combiner::Sum => {}
                        Combiner::Mean => row_gain[local] = 1.0 / ids.len() as f32,
                        Combiner::Sqrtn => row_gain[local] = 1.0 / (ids.len() as f32).sqrt(),
                    }
                    for &id in ids {
                        let col = col_id(id as u32, shift, offset, mask);
                        parts[(col & mask) as usize].push(key_of(col) | sample as u64);
                    }
                }
            }
        }
    }

    // 2. Sort.
    for part in parts.iter_mut() {
        radix_sort_slice(part, radix, 26, 26 + lbits);
    }

    // 3 + 4. Merge duplicates, count, drop.
    let shards = plan.num_shards as usize;
    let collect = if direct.is_some() { 0 } else { total };
    let mut writer = direct.map(|out| Writer {
        out,
        at: 0,
        part: 0,
        last_written: false,
    });
    let mut out = CoreResult {
        cols: Vec::with_capacity(collect),
        rows: Vec::with_capacity(collect),
        gains: Vec::with_capacity(collect),
        part_start: vec![0; shards + 1],
        ids: vec![0; shards],
        unique: vec![0; shards],
        dropped: 0,
        mult: Vec::with_capacity(collect),
    };
    let dropping = plan.config.allow_id_dropping && !plan.config.enable_minibatching;
    let (max_ids, max_unique) = (s.max_ids_per_partition, s.max_unique_ids_per_partition);
    let mut kept_ids = vec![0u32; shards];
    let mut kept_unique = vec![0u32; shards];
    let (mut prev_col, mut prev_row) = (u32::MAX, u32::MAX);
    let (mut last_col, mut last_row) = (u32::MAX, u32::MAX);
    let mut dropping_col = false;
    for &key in parts.iter().flatten() {
        let col =
            ((((key >> 26) & ((1 << lbits) - 1)) as u32) << bits) | (key >> (26 + lbits)) as u32;
        let data = (key & ((1 << 26) - 1)) as u32;
        let (row, gain) = if weighted {
            (rows_of[data as usize], gains_of[data as usize])
        } else if all_sum {
            (data, 1.0)
        } else {
            (data, row_gain[(data % per_core) as usize])
        };
        if row == last_row && col == last_col {
            match writer.as_mut() {
                Some(w) => w.merge(gain),
                None => {
                    if let Some(g) = out.gains.last_mut() {
                        *g += gain;
                    }
                    if let Some(m) = out.mult.last_mut() {
                        *m += 1;
                    }
                }
            }
            continue;
        }
        if dropping && row == prev_row && col == prev_col {
            out.dropped += 1;
            continue;
        }
        let p = (col & mask) as usize;
        let new_col = col != prev_col;
        out.ids[p] += 1;
        if new_col {
            out.unique[p] += 1;
        }
        let keep = if dropping {
            let over_ids = kept_ids[p] + 1 > max_ids;
            if new_col {
                dropping_col = kept_unique[p] + 1 > max_unique;
            }
            kept_ids[p] += 1;
            if new_col {
                kept_unique[p] += 1;
            }
            !(over_ids || dropping_col)
        } else {
            true
        };
        if keep {
            match writer.as_mut() {
                Some(w) => {
                    if !w.push(p, (col >> bits) as i32, (row % per_core) as i32, gain) {
                        out.dropped += 1;
                    }
                }
                None => {
                    out.cols.push(col);
                    out.rows.push(row);
                    out.gains.push(gain);
                    out.mult.push(1);
                    out.part_start[p + 1] = out.cols.len() as u32;
                }
            }
            last_col = col;
            last_row = row;
        } else {
            out.dropped += 1;
        }
        prev_col = col;
        prev_row = row;
    }
    if let Some(w) = writer.as_mut() {
        w.finish(shards);
    }
    // Partitions without entries end where the previous one ended.
    for p in 1..=shards {
        out.part_start[p] = out.part_start[p].max(out.part_start[p - 1]);
    }
    Ok(out)
}

/// `((id + shift) % num_shards) + (id / num_shards) * num_shards + offset` for a power-of-two
/// `num_shards` (`mask = num_shards - 1`).
#[inline]
fn col_id(id: u32, shift: u32, offset: u32, mask: u32) -> u32 {
    (id.wrapping_add(shift) & mask) + (id & !mask) + offset
}

/// Stable LSD radix sort of `keys` by their bits `[lo, hi)`, at most 11 bits per pass, skipping
/// digits where all keys agree.
fn radix_sort_slice(keys: &mut [u64], scratch: &mut Vec<u64>, lo: u32, hi: u32) {
    if keys.len() < 64 {
        let m = if hi >= 64 { !0 } else { (1u64 << hi) - 1 };
        keys.sort_by_key(|k| (k & m) >> lo);
        return;
    }
    let (mut or, mut and) = (0u64, !0u64);
    for &k in keys.iter() {
        or |= k;
        and &= k;
    }
    let varying = or ^ and;
    scratch.clear();
    scratch.resize(keys.len(), 0);
    let mut in_scratch = false;
    let passes = (hi - lo).div_ceil(11).max(1);
    let width = (hi - lo).div_ceil(passes).max(1);
    let mut shift = lo;
    while shift < hi {
        let w = width.min(hi - shift);
        let mask = (1u64 << w) - 1;
        if (varying >> shift) & mask == 0 {
            shift += w;
            continue;
        }
        let mut counts = vec![0usize; 1 << w];
        let src: &[u64] = if in_scratch { scratch } else { keys };
        for &k in src {
            counts[((k >> shift) & mask) as usize] += 1;
        }
        let mut sum = 0;
        for c in counts.iter_mut() {
            let n = *c;
            *c = sum;
            sum += n;
        }
        let (src, dst): (&[u64], &mut [u64]) = if in_scratch {
            (&scratch[..], &mut keys[..])
        } else {
            (&keys[..], &mut scratch[..])
        };
        for &k in src {
            let b = ((k >> shift) & mask) as usize;
            dst[counts[b]] = k;
            counts[b] += 1;
        }
        in_scratch = !in_scratch;
        shift += w;
    }
    if in_scratch {
        keys.copy_from_slice(scratch);
    }
}

/// A stack's buffers, zeroed: slots between partitions get the padding as they are written;
/// slots after a core's last partition are never read and stay 0 (jax-tpu-embedding leaves them
/// uninitialized), which leaves their pages untouched.
fn alloc_stack(plan: &Plan, si: usize) -> Result<StackCsr> {
    let layout = plan.layout;
    let s = &layout.stacks[si];
    let devices = layout.global_device_count as usize;
    let nsc = layout.num_sc_per_device as usize;
    let shards = plan.num_shards as usize;
    let buckets = if plan.config.enable_minibatching {
        MAX_MINIBATCHING_BUCKETS
    } else {
        1
    };
    let rp_size = shards.max(8) * buckets * nsc;
    let max_ids_rounded = (s.max_ids_per_partition as usize).div_ceil(8) * 8;
    let coo_size = max_ids_rounded
        .checked_mul(nsc * shards * buckets)
        .filter(|&n| n < i32::MAX as usize)
        .ok_or_else(|| {
            EmbeddingError::Limit(format!(
                "Computed Coo Buffer Size for table {} is out of the valid range (0, INT_MAX).",
                s.name
            ))
        })?;
    Ok(StackCsr {
        name: s.name.clone(),
        row_pointers: vec![0; devices * rp_size],
        embedding_ids: vec![0; devices * coo_size],
        sample_ids: vec![0; devices * coo_size],
        gains: vec![0.0; devices * coo_size],
        row_pointers_size_per_device: rp_size,
        coo_buffer_size_per_device: coo_size,
        stats: StackStats::default(),
    })
}

/// jax-tpu-embedding's bucketing hash key ("arbitrarily chosen, forever-unchanging").
const BUCKET_HASH_KEY: [u64; 4] = [
    0x4451e30f87db9609,
    0xca7358a1fd2737f8,
    0x4b2c991fcee4fdea,
    0x0b2658e18326f6ba,
];

/// The minibatching bucket of a column: HighwayHash-64 of its 4 little-endian bytes, mod 64.
pub fn minibatching_bucket(col: u32) -> usize {
    use highway::{HighwayHash, HighwayHasher, Key};
    let mut h = HighwayHasher::new(Key(BUCKET_HASH_KEY));
    h.append(&col.to_le_bytes());
    (h.finalize64() % MAX_MINIBATCHING_BUCKETS as u64) as usize
}

/// Adds to `split` (bit `b` set: a minibatch starts at bucket `b`) the boundaries one
/// partition's per-bucket counts need: neighbouring bucket ranges are joined bottom-up (pairs,
/// then pairs of pairs, ...) while their sum stays within `limit`; a pair over it is split there
/// and carries the larger side upwards.
fn add_split(counts: &mut [u32; MAX_MINIBATCHING_BUCKETS], limit: u32, split: &mut u64) {
    let mut size = 2;
    while size <= MAX_MINIBATCHING_BUCKETS {
        for i in (0..MAX_MINIBATCHING_BUCKETS).step_by(size) {
            let (left, right) = (counts[i], counts[i + size / 2]);
            if left + right > limit {
                *split |= 1 << (i + size / 2);
                counts[i] = left.max(right);
            } else {
                counts[i] = left + right;
            }
        }
        size *= 2;
    }
}

/// Whether the first pass (no buckets, nothing dropped) saw a partition over its limits.
fn minibatching_required(plan: &Plan, results: &[CoreResult]) -> bool {
    let per_task = (plan.layout.global_device_count * plan.layout.num_sc_per_device) as usize;
    results.iter().enumerate().any(|(t, r)| {
        let s = &plan.layout.stacks[t / per_task];
        r.ids.iter().any(|&n| n > s.max_ids_per_partition)
            || r.unique.iter().any(|&n| n > s.max_unique_ids_per_partition)
    })
}

/// One task's entries after bucketing: `(minibatch, partition, index)` of the kept entries,
/// ordered by minibatch, partition, bucket, row.
struct Bucketed {
    kept: Vec<(u32, u32, u32)>,
    dropped: u64,
}

struct Minibatches {
    /// Per task of every stack (stack-major, as the tasks run).
    tasks: Vec<Bucketed>,
    minibatch_of: [u32; MAX_MINIBATCHING_BUCKETS],
    count: u32,
}

/// The second pass of minibatching: every entry goes to the hash bucket of its column; ids
/// and unique ids are counted per (partition, bucket) and, with dropping, limited per bucket;
/// the counts of every (stack, device, core, partition) decide where the 64 buckets are split
/// into minibatches (one split for all stacks).
fn split_into_minibatches(
    plan: &Plan,
    results: &[CoreResult],
    per_task: usize,
    warnings: &mut Vec<String>,
) -> Result<Minibatches> {
    const B: usize = MAX_MINIBATCHING_BUCKETS;
    let shards = plan.num_shards as usize;
    let mask = plan.num_shards - 1;
    let dropping = plan.config.allow_id_dropping;
    let mut split = 0u64;
    let mut tasks = Vec::with_capacity(results.len());
    let mut ids = vec![[0u32; B]; shards];
    let mut unique = vec![[0u32; B]; shards];
    let mut kept_ids = vec![[0u32; B]; shards];
    let mut kept_unique = vec![[0u32; B]; shards];
    for (si, cores) in results.chunks(per_task.max(1)).enumerate() {
        let s = &plan.layout.stacks[si];
        let (max_ids, max_unique) = (s.max_ids_per_partition, s.max_unique_ids_per_partition);
        let (mut observed_ids, mut observed_unique) = (0u32, 0u32);
        for r in cores {
            for a in [&mut ids, &mut unique, &mut kept_ids, &mut kept_unique] {
                a.iter_mut().for_each(|x| *x = [0; B]);
            }
            // (bucket, index) in (bucket, partition, row) order: the entries are already in
            // (partition, row) order and merged.
            let mut order: Vec<(u32, u32)> = r
                .cols
                .iter()
                .enumerate()
                .map(|(k, &col)| (minibatching_bucket(col) as u32, k as u32))
                .collect();
            order.sort_by_key(|&(b, _)| b);
            let mut kept = Vec::with_capacity(order.len());
            let mut dropped = 0u64;
            let (mut prev_col, mut prev_bucket) = (u32::MAX, u32::MAX);
            let mut dropping_col = false;
            for &(b, k) in &order {
                let col = r.cols[k as usize];
                let (p, bu) = ((col & mask) as usize, b as usize);
                let new_col = col != prev_col || b != prev_bucket;
                ids[p][bu] += 1;
                if new_col {
                    unique[p][bu] += 1;
                    if dropping {
                        dropping_col = kept_unique[p][bu] + 1 > max_unique;
                    }
                }
                if dropping && (kept_ids[p][bu] + 1 > max_ids || dropping_col) {
                    dropped += r.mult[k as usize] as u64;
                } else {
                    kept.push((b, p as u32, k));
                    if dropping {
                        kept_ids[p][bu] += 1;
                        if new_col {
                            kept_unique[p][bu] += 1;
                        }
                    }
                }
                prev_col = col;
                prev_bucket = b;
            }
            for p in 0..shards {
                observed_ids = observed_ids.max(ids[p].iter().copied().max().unwrap_or(0));
                observed_unique = observed_unique.max(unique[p].iter().copied().max().unwrap_or(0));
                add_split(&mut ids[p], max_ids, &mut split);
                add_split(&mut unique[p], max_unique, &mut split);
            }
            tasks.push(Bucketed { kept, dropped });
        }
        check_limits(plan, si, observed_ids, observed_unique, warnings)?;
    }
    let mut minibatch_of = [0u32; B];
    for b in 1..B {
        minibatch_of[b] = minibatch_of[b - 1] + ((split >> b) & 1) as u32;
    }
    // Within a minibatch, entries go by partition, then bucket, then row.
    for t in tasks.iter_mut() {
        for e in t.kept.iter_mut() {
            e.0 = minibatch_of[e.0 as usize];
        }
        t.kept.sort_by_key(|&(m, p, _)| (m, p));
    }
    Ok(Minibatches {
        tasks,
        minibatch_of,
        count: split.count_ones() + 1,
    })
}

/// jax-tpu-embedding's limit check of a stack: over the limit is a warning when ids may be
/// dropped, an error otherwise.
fn check_limits(
    plan: &Plan,
    si: usize,
    observed_ids: u32,
    observed_unique: u32,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let s = &plan.layout.stacks[si];
    let checks = [
        ("ids", observed_ids, s.max_ids_per_partition),
        (
            "unique ids",
            observed_unique,
            s.max_unique_ids_per_partition,
        ),
    ];
    for (what, observed, limit) in checks {
        if observed <= limit {
            continue;
        }
        let field = what.replace(' ', "_");
        if plan.config.allow_id_dropping {
            warnings.push(format!(
                "Allowing ID dropping for table: {} observed max {what} per partition: {observed} is greater than the set max {what} per partition: {limit}",
                s.name
            ));
        } else {
            return Err(EmbeddingError::Limit(format!(
                "Observed max {what} per partition: {observed} for table: {} is greater than the set max {what} per partition: {limit}. Use `allow_id_dropping` or increase the `max_{field}_per_partition`. You could also try to reduce the batch size.",
                s.name
            )));
        }
    }
    Ok(())
}

/// Statistics and limits of a stack; with minibatching, its buffers from the tasks' results
/// (`bucketed`: the entries' minibatches when the batch was split).
fn finish_stack(
    plan: &Plan,
    si: usize,
    cores: &[CoreResult],
    bucketed: Option<(&[Bucketed], &[u32; MAX_MINIBATCHING_BUCKETS])>,
    mut csr: StackCsr,
    warnings: &mut Vec<String>,
) -> Result<StackCsr> {
    let layout = plan.layout;
    let devices = layout.global_device_count as usize;
    let nsc = layout.num_sc_per_device as usize;
    let shards = plan.num_shards as usize;
    let minibatching = plan.config.enable_minibatching;
    let per_bucket = shards.max(8);
    let rp_size = csr.row_pointers_size_per_device;
    let coo_size = csr.coo_buffer_size_per_device;
    // Statistics and limits.
    csr.stats = StackStats {
        max_ids_per_partition: vec![0; devices * shards],
        max_unique_ids_per_partition: vec![0; devices * shards],
        required_buffer_sizes: vec![0; devices * nsc],
        dropped_id_count: 0,
    };
    let (mut observed_ids, mut observed_unique) = (0u32, 0u32);
    for (t, r) in cores.iter().enumerate() {
        let (d, c) = (t / nsc, t % nsc);
        for p in 0..shards {
            let m = &mut csr.stats.max_ids_per_partition[d * shards + p];
            *m = (*m).max(r.ids[p] as i32);
            let u = &mut csr.stats.max_unique_ids_per_partition[d * shards + p];
            *u = (*u).max(r.unique[p] as i32);
            csr.stats.required_buffer_sizes[d * nsc + c] += (r.ids[p].div_ceil(8) * 8) as i32;
        }
        observed_ids = observed_ids.max(r.ids.iter().copied().max().unwrap_or(0));
        observed_unique = observed_unique.max(r.unique.iter().copied().max().unwrap_or(0));
        csr.stats.dropped_id_count += r.dropped;
    }
    if !minibatching {
        check_limits(plan, si, observed_ids, observed_unique, warnings)?;
        return Ok(csr);
    }
    let bits = plan.bits;
    let per_core = plan.samples_per_core[si];
    let num_minibatches = bucketed.map_or(1, |(_, m)| m[MAX_MINIBATCHING_BUCKETS - 1] as usize + 1);
    // The minibatching layout: per device one run of slots, core after core, each core's
    // minibatches in order and each minibatch's partitions in order, every partition starting
    // 8-aligned; `row_pointers[(c * num_minibatches + m) * max(num_shards, 8) + p]` is where
    // partition `p` of minibatch `m` of core `c` ends, as a device-global slot index.
    for d in 0..devices {
        let mut at = 0usize;
        let ids = &mut csr.embedding_ids[d * coo_size..(d + 1) * coo_size];
        let samples = &mut csr.sample_ids[d * coo_size..(d + 1) * coo_size];
        let gains = &mut csr.gains[d * coo_size..(d + 1) * coo_size];
        let rp = &mut csr.row_pointers[d * rp_size..(d + 1) * rp_size];
        for c in 0..nsc {
            let r = &cores[d * nsc + c];
            // (minibatch, partition, index) of the kept entries, in buffer order.
            let whole: Vec<(u32, u32, u32)>;
            let entries: &[(u32, u32, u32)] = match bucketed {
                Some((tasks, _)) => {
                    let t = &tasks[d * nsc + c];
                    csr.stats.dropped_id_count += t.dropped;
                    &t.kept
                }
                None => {
                    whole = (0..shards)
                        .flat_map(|p| {
                            (r.part_start[p]..r.part_start[p + 1]).map(move |k| (0, p as u32, k))
                        })
                        .collect();
                    &whole
                }
            };
            let mut next = 0usize;
            for m in 0..num_minibatches {
                let row = (c * num_minibatches + m) * per_bucket;
                for p in 0..shards {
                    let begin = next;
                    while next < entries.len()
                        && entries[next].0 as usize == m
                        && entries[next].1 as usize == p
                    {
                        next += 1;
                    }
                    let group = &entries[begin..next];
                    let n = group.len().min(coo_size - at);
                    for (slot, &(_, _, k)) in group[..n].iter().enumerate() {
                        let k = k as usize;
                        ids[at + slot] = (r.cols[k] >> bits) as i32;
                        samples[at + slot] = (r.rows[k] % per_core) as i32;
                        gains[at + slot] = r.gains[k];
                    }
                    csr.stats.dropped_id_count += group[n..]
                        .iter()
                        .map(|&(_, _, k)| r.mult[k as usize] as u64)
                        .sum::<u64>();
                    at += n;
                    rp[row + p] = at as i32;
                    let aligned = (at.div_ceil(8) * 8).min(coo_size);
                    ids[at..aligned].fill(PADDING_ID);
                    samples[at..aligned].fill(PADDING_ID);
                    gains[at..aligned].fill(f32::NAN);
                    at = aligned;
                }
                for x in &mut rp[row + shards..row + per_bucket] {
                    *x = at as i32;
                }
            }
        }
        // Pointers of the unused minibatches repeat the last end.
        for x in &mut rp[nsc * num_minibatches * per_bucket..] {
            *x = at as i32;
        }
    }
    Ok(csr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets of a few columns; jax-tpu-embedding 0.2.0 put columns 46, 2, 58 (buckets 2, 13,
    /// 15) in its first minibatch, in that order, and 32, 52 (buckets 16, 20) in its second
    /// (1 device, 2 SparseCores, limits 4: scripts/oracles/embedding_oracle.py's split cases check
    /// the rest).
    #[test]
    fn bucketing_hash_matches_jax_tpu_embedding() {
        let got: Vec<usize> = [46, 2, 58, 41, 19, 32, 52, 0, 127]
            .iter()
            .map(|&c| minibatching_bucket(c))
            .collect();
        assert_eq!(got, [2, 13, 15, 8, 11, 16, 20, 7, 0]);
    }

    /// Bottom-up cuts: pairs within the limit join, a pair over it is cut and carries its
    /// larger side up.
    #[test]
    fn split_cuts_where_neighbours_overflow() {
        let mut counts = [0u32; MAX_MINIBATCHING_BUCKETS];
        counts[..8].copy_from_slice(&[2, 5, 1, 6, 3, 4, 2, 0]);
        let mut split = 0;
        add_split(&mut counts, 7, &mut split);
        // {2,5} {1,6} {3,4} {2,0} join; {7,7} and {7,2} are cut at 2 and 6; {14 -> 7, 9 -> 7}
        // is cut at 4; everything after bucket 8 is empty and joins the last range.
        assert_eq!(split, (1 << 2) | (1 << 6) | (1 << 4));
        let mut none = [1u32; MAX_MINIBATCHING_BUCKETS];
        let mut split = 0;
        add_split(&mut none, 64, &mut split);
        assert_eq!(split, 0);
    }

    /// The radix sort is a stable sort on bits [lo, hi).
    #[test]
    fn radix_sort_is_a_stable_sort_on_the_key_bits() {
        let mut state = 7u64;
        for (n, bits) in [(10, 7), (5000, 21), (70000, 9), (3000, 3), (2000, 32)] {
            let mut keys: Vec<u64> = (0..n as u64)
                .map(|i| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let hi = (state >> 20) & ((1u64 << bits) - 1);
                    (hi << 26) | i
                })
                .collect();
            let mut want = keys.clone();
            want.sort_by_key(|k| k >> 26);
            radix_sort_slice(&mut keys, &mut Vec::new(), 26, 26 + bits);
            assert_eq!(keys, want, "n={n} bits={bits}");
        }
    }
}
