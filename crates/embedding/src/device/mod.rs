//! The device side of TPU embeddings (issue 20): stacked, mod-sharded tables and their optimizer
//! slots resident on PJRT devices, lookups and optimizer updates as HLO programs
//! ([`program`]) fed with the CSR entries of [`crate::preprocess`] grouped by device
//! ([`exchange`]).
//!
//! ```text
//! let mut dev = DeviceEmbedding::new(client, config, layout, &checkpoint)?;
//! let batch = dev.prepare(&feature_batches)?;        // host: preprocess + exchange buffers
//! let activations = dev.lookup(&batch)?;             // one [samples, dim] per feature
//! dev.apply_gradients(&batch, &gradients)?;          // tables and slots updated in place
//! dev.checkpoint()?.save(...)                        // per-table .npy files
//! ```
//!
//! Tables and slots stay on the devices between steps (runtime buffer handles); an update
//! donates the old buffers to the new values. Nothing is copied back until [`checkpoint`].
//!
//! [`checkpoint`]: DeviceEmbedding::checkpoint

pub mod exchange;
pub mod program;

use tessera_hlo::Module;
use tessera_runtime::harness::{per_device_options, prepare_partitioned};
use tessera_runtime::{
    BufferHandle, Client, CompileRequest, ExecutableHandle, ExecuteConfig, Program, Runtime,
};

use crate::config::{EmbeddingConfig, Optimizer, QuantizationConfig};
use crate::error::{EmbeddingError, Result};
use crate::layout::Layout;
use crate::preprocess::{preprocess, FeatureBatch};
pub use crate::shard::load_tables;
use crate::shard::{shard_checkpoint, unshard_checkpoint, Checkpoint, Matrix};

pub use exchange::{pack, Exchange};
pub use program::{lookup_module, update_module, update_parameter_count, FeatureSlot, StackShape};

fn device_err(at: impl Into<String>, e: impl std::fmt::Display) -> EmbeddingError {
    EmbeddingError::Device {
        at: at.into(),
        message: e.to_string(),
    }
}

/// The seed's warning for a feature whose gradient is missing (`apply_gradients` then sends a
/// zero gradient for it).
pub fn no_gradient_warning(feature: &str) -> String {
    format!(
        "No gradient passed for feature {feature}, sending zero gradient. This may not be \
         correct behavior for certain optimizers like Adam."
    )
}

/// A batch preprocessed and grouped for the exchange, one [`Exchange`] per stack.
#[derive(Clone, Debug)]
pub struct PreparedBatch {
    pub exchanges: Vec<Exchange>,
    pub num_minibatches: u32,
    pub warnings: Vec<String>,
}

/// Bytes the collectives of one step move, summed over the devices (all-to-all: each device
/// sends `out * (g - 1) / g` bytes, `out` its output bytes, `g` the devices).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub lookup_bytes: u64,
    pub update_bytes: u64,
}

/// Where the last [`DeviceEmbedding::lookup`] or [`DeviceEmbedding::apply_gradients`] spent its
/// time (wall clock): compiling (first use of a capacity only), uploading the exchange buffers
/// and gradients, running the program, downloading the activations.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    pub compile: std::time::Duration,
    pub upload: std::time::Duration,
    pub execute: std::time::Duration,
    pub download: std::time::Duration,
}

struct StackState {
    optimizer: Optimizer,
    quantization: Option<QuantizationConfig>,
    /// Per device.
    table: Vec<BufferHandle>,
    /// `[slot][device]`.
    slots: Vec<Vec<BufferHandle>>,
    row_dim: Vec<BufferHandle>,
}

/// Tables and slots resident on `global_device_count` PJRT devices, with lookup and update.
pub struct DeviceEmbedding {
    rt: Runtime,
    config: EmbeddingConfig,
    layout: Layout,
    stacks: Vec<StackState>,
    /// Compiled programs by the exchange capacity of each stack.
    lookup_programs: Vec<(Vec<usize>, ExecutableHandle)>,
    update_programs: Vec<(Vec<usize>, ExecutableHandle)>,
    /// Of the last lookup and the last update.
    pub lookup_timings: Timings,
    pub update_timings: Timings,
}

impl DeviceEmbedding {
    /// Stacks and shards `checkpoint` (unstacked tables and slots) and uploads each device's
    /// part. `client` needs at least `global_device_count` devices.
    pub fn new(
        client: Client,
        config: EmbeddingConfig,
        layout: Layout,
        checkpoint: &Checkpoint,
    ) -> Result<DeviceEmbedding> {
        let n = layout.global_device_count as usize;
        if client.devices().len() < n {
            return Err(device_err(
                "devices",
                format!(
                    "the configuration needs {n} devices, the PJRT client has {}",
                    client.devices().len()
                ),
            ));
        }
        let (tables, slots) = shard_checkpoint(&config, &layout, checkpoint, f32::NAN)?;
        let rt = Runtime::new(client);
        let mut stacks = Vec::new();
        for (si, stack) in layout.stacks.iter().enumerate() {
            let t0 = &config.tables[stack.tables[0]];
            let num_slots = t0.optimizer.slots().len();
            let mut st = StackState {
                optimizer: t0.optimizer,
                quantization: t0.quantization,
                table: Vec::new(),
                slots: vec![Vec::new(); num_slots],
                row_dim: Vec::new(),
            };
            for d in 0..n {
                st.table
                    .push(upload_part(&rt, &layout, si, &tables[si], d)?);
                for (k, slot) in slots.iter().enumerate().take(num_slots) {
                    st.slots[k].push(upload_part(&rt, &layout, si, &slot[si], d)?);
                }
                let dims = row_dims(&config, &layout, si, d as u32);
                let h = rt
                    .upload(d, &dims, &[dims.len() as i64])
                    .map_err(|e| device_err(format!("stack '{}'", stack.name), e))?;
                st.row_dim.push(h);
            }
            stacks.push(st);
        }
        Ok(DeviceEmbedding {
            rt,
            config,
            layout,
            stacks,
            lookup_programs: Vec::new(),
            update_programs: Vec::new(),
            lookup_timings: Timings::default(),
            update_timings: Timings::default(),
        })
    }

    pub fn config(&self) -> &EmbeddingConfig {
        &self.config
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Programs compiled so far (a lookup and an update per set of exchange capacities).
    pub fn compilations(&self) -> u64 {
        self.rt.compilations()
    }

    /// Preprocesses `batches` (one per feature) and groups the entries for the exchange.
    pub fn prepare(&self, batches: &[FeatureBatch]) -> Result<PreparedBatch> {
        let p = preprocess(&self.config, &self.layout, batches)?;
        let mut exchanges = Vec::new();
        for (si, s) in p.stacks.iter().enumerate() {
            let entries = p
                .decode(s)
                .map_err(|m| device_err(format!("stack '{}'", s.name), m))?;
            exchanges.push(pack(&self.layout, si, &entries)?);
        }
        Ok(PreparedBatch {
            exchanges,
            num_minibatches: p.num_minibatches,
            warnings: p.warnings,
        })
    }

    /// The shape of stack `si`'s programs for an exchange capacity.
    pub fn stack_shape(&self, si: usize, capacity: usize) -> StackShape {
        let l = &self.layout;
        let ns = l.num_shards() as u64;
        let stack = &l.stacks[si];
        let mut features: Vec<(u32, FeatureSlot)> = stack
            .features
            .iter()
            .map(|&f| {
                let fl = &l.features[f];
                let count = self.config.features[f].sample_count() / ns;
                let start = fl.row_offset as u64 / ns;
                (
                    fl.row_offset,
                    FeatureSlot {
                        start: start as i64,
                        count: count as i64,
                        dim: self.config.tables[self.config.features[f].table].embedding_dim as i64,
                    },
                )
            })
            .collect();
        features.sort_by_key(|f| f.0);
        StackShape {
            devices: l.global_device_count as i64,
            nsc: l.num_sc_per_device as i64,
            rows: (l.rows_per_shard(si) * l.num_sc_per_device) as i64,
            dim: stack.embedding_dim as i64,
            samples_per_core: (stack.total_sample_count / ns) as i64,
            capacity: capacity as i64,
            features: features.into_iter().map(|f| f.1).collect(),
        }
    }

    /// The stack's features in the order of its programs' outputs and gradient parameters.
    fn stack_features(&self, si: usize) -> Vec<usize> {
        let mut fs = self.layout.stacks[si].features.clone();
        fs.sort_by_key(|&f| self.layout.features[f].row_offset);
        fs
    }

    fn compile(&self, m: &Module, aliases: &[(usize, usize)]) -> Result<ExecutableHandle> {
        let n = self.layout.global_device_count as usize;
        let at = || format!("program {}", m.name);
        let prepared = prepare_partitioned(m, n).map_err(|e| device_err(at(), e))?;
        let program = Program::HloProto(tessera_hlo::proto::to_proto_bytes(&prepared));
        let req = CompileRequest::new(program, per_device_options(n)).with_aliases(aliases);
        self.rt.compile(&req).map_err(|e| device_err(at(), e))
    }

    fn upload_exchange(&self, si: usize, ex: &Exchange) -> Result<Vec<[BufferHandle; 3]>> {
        let n = self.layout.global_device_count as usize;
        let dims = [n as i64, ex.capacity as i64];
        let at = || format!("stack '{}'", self.layout.stacks[si].name);
        let mut out = Vec::new();
        for d in 0..n {
            let r = self.rt.upload(d, &ex.rows[d], &dims);
            let g = self.rt.upload(d, &ex.gains[d], &dims);
            let s = self.rt.upload(d, &ex.samples[d], &dims);
            out.push([
                r.map_err(|e| device_err(at(), e))?,
                g.map_err(|e| device_err(at(), e))?,
                s.map_err(|e| device_err(at(), e))?,
            ]);
        }
        Ok(out)
    }

    fn release(&self, hs: impl IntoIterator<Item = BufferHandle>) {
        for h in hs {
            // A handle the runtime already dropped (donated) needs nothing more.
            let _ = self.rt.release(h);
        }
    }

    /// The batch's exchanges at the capacities of a compiled program that holds them all (the
    /// smallest such), or at their own capacities and no program yet.
    fn fit(
        compiled: &[(Vec<usize>, ExecutableHandle)],
        batch: &PreparedBatch,
    ) -> (Vec<Exchange>, Option<ExecutableHandle>) {
        let need: Vec<usize> = batch.exchanges.iter().map(|e| e.capacity).collect();
        let best = compiled
            .iter()
            .filter(|(k, _)| k.iter().zip(&need).all(|(a, b)| a >= b))
            .min_by_key(|(k, _)| k.iter().sum::<usize>());
        match best {
            Some((k, exe)) => (
                batch
                    .exchanges
                    .iter()
                    .zip(k)
                    .map(|(e, &c)| e.widened(c))
                    .collect(),
                Some(*exe),
            ),
            // A new program holds every capacity seen so far as well, so that batches keep
            // fitting it.
            None => (
                batch
                    .exchanges
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        let seen = compiled.iter().map(|(k, _)| k[i]).max().unwrap_or(0);
                        e.widened(seen)
                    })
                    .collect(),
                None,
            ),
        }
    }

    /// Looks up the activations of a prepared batch: one `[sample_count, dim]` matrix per
    /// feature of the configuration, in its order. One program runs every stack.
    pub fn lookup(&mut self, batch: &PreparedBatch) -> Result<Vec<Matrix>> {
        self.check_batch(batch)?;
        let n = self.layout.global_device_count as usize;
        let mut timings = Timings::default();
        let clock = std::time::Instant::now();
        let (exs, exe) = Self::fit(&self.lookup_programs, batch);
        let exe = match exe {
            Some(e) => e,
            None => {
                let stacks: Vec<_> = exs
                    .iter()
                    .enumerate()
                    .map(|(si, ex)| {
                        (
                            self.stack_shape(si, ex.capacity),
                            self.stacks[si].quantization,
                        )
                    })
                    .collect();
                let m = lookup_module(&stacks).map_err(|e| device_err("lookup program", e))?;
                let e = self.compile(&m, &[])?;
                self.lookup_programs
                    .push((exs.iter().map(|x| x.capacity).collect(), e));
                e
            }
        };
        timings.compile = clock.elapsed();
        let clock = std::time::Instant::now();
        let mut uploaded = Vec::new();
        let mut args: Vec<Vec<BufferHandle>> = vec![Vec::new(); n];
        for (si, ex) in exs.iter().enumerate() {
            let bufs = self.upload_exchange(si, ex)?;
            for (d, list) in args.iter_mut().enumerate() {
                list.push(self.stacks[si].table[d]);
                list.extend(bufs[d]);
            }
            uploaded.extend(bufs.into_iter().flatten());
        }
        let config = ExecuteConfig {
            explode_tuple: true,
            ..Default::default()
        };
        timings.upload = clock.elapsed();
        let clock = std::time::Instant::now();
        let res = self.rt.execute(exe, &args, config);
        timings.execute = clock.elapsed();
        let clock = std::time::Instant::now();
        self.release(uploaded);
        let res = res.map_err(|e| device_err("lookup", e))?;
        let mut out: Vec<Matrix> = self
            .config
            .features
            .iter()
            .map(|f| {
                let dim = self.config.tables[f.table].embedding_dim as usize;
                Matrix::new(f.sample_count() as usize, dim, 0.0)
            })
            .collect();
        let order: Vec<usize> = (0..self.stacks.len())
            .flat_map(|si| self.stack_features(si))
            .collect();
        for (d, outs) in res.iter().enumerate() {
            for (j, &f) in order.iter().enumerate() {
                let vals: Vec<f32> = self
                    .rt
                    .download(outs[j])
                    .map_err(|e| device_err("lookup", e))?;
                let m = &mut out[f];
                let per_device = m.data.len() / n;
                m.data[d * per_device..(d + 1) * per_device].copy_from_slice(&vals);
            }
            self.release(outs.iter().copied());
        }
        timings.download = clock.elapsed();
        self.lookup_timings = timings;
        Ok(out)
    }

    fn check_batch(&self, batch: &PreparedBatch) -> Result<()> {
        if batch.exchanges.len() != self.stacks.len() {
            return Err(device_err(
                "batch",
                format!(
                    "prepared for {} stacks, the layout has {}",
                    batch.exchanges.len(),
                    self.stacks.len()
                ),
            ));
        }
        Ok(())
    }

    /// Applies one step of each table's optimizer with the activation gradients `gradients`
    /// (one per feature, `[sample_count, dim]`; `None`: a zero gradient and the seed's warning).
    /// Returns the warnings. One program updates every stack; the old table and slot buffers
    /// are donated to the new values.
    pub fn apply_gradients(
        &mut self,
        batch: &PreparedBatch,
        gradients: &[Option<Matrix>],
    ) -> Result<Vec<String>> {
        self.check_batch(batch)?;
        if gradients.len() != self.config.features.len() {
            return Err(device_err(
                "gradients",
                format!(
                    "{} gradients for {} features",
                    gradients.len(),
                    self.config.features.len()
                ),
            ));
        }
        let mut warnings = Vec::new();
        for (f, g) in gradients.iter().enumerate() {
            let fc = &self.config.features[f];
            let dim = self.config.tables[fc.table].embedding_dim as usize;
            match g {
                None => warnings.push(no_gradient_warning(&fc.name)),
                Some(m)
                    if m.rows != fc.sample_count() as usize
                        || m.cols != dim
                        || m.data.len() != m.rows * m.cols =>
                {
                    return Err(EmbeddingError::Shape {
                        at: format!("gradient of feature '{}'", fc.name),
                        message: format!(
                            "expected [{}, {dim}], found [{}, {}]",
                            fc.sample_count(),
                            m.rows,
                            m.cols
                        ),
                    })
                }
                Some(_) => {}
            }
        }
        let n = self.layout.global_device_count as usize;
        let mut timings = Timings::default();
        let clock = std::time::Instant::now();
        let (exs, exe) = Self::fit(&self.update_programs, batch);
        let exe = match exe {
            Some(e) => e,
            None => {
                let stacks: Vec<_> = exs
                    .iter()
                    .enumerate()
                    .map(|(si, ex)| (self.stack_shape(si, ex.capacity), self.stacks[si].optimizer))
                    .collect();
                let m = update_module(&stacks).map_err(|e| device_err("update program", e))?;
                let mut aliases = Vec::new();
                let (mut p, mut o) = (0, 0);
                for (shape, opt) in &stacks {
                    for i in 0..=opt.slots().len() {
                        aliases.push((o + i, p + i));
                    }
                    o += 1 + opt.slots().len();
                    p += update_parameter_count(shape, opt);
                }
                let e = self.compile(&m, &aliases)?;
                self.update_programs
                    .push((exs.iter().map(|x| x.capacity).collect(), e));
                e
            }
        };
        timings.compile = clock.elapsed();
        let clock = std::time::Instant::now();
        let mut args: Vec<Vec<BufferHandle>> = vec![Vec::new(); n];
        for (si, ex) in exs.iter().enumerate() {
            let bufs = self.upload_exchange(si, ex)?;
            let features = self.stack_features(si);
            for (d, a) in args.iter_mut().enumerate() {
                let st = &self.stacks[si];
                a.push(st.table[d]);
                a.extend(st.slots.iter().map(|s| s[d]));
                a.extend(bufs[d]);
                // The row dims stay resident: the run releases one reference of each input.
                self.rt
                    .retain(st.row_dim[d])
                    .map_err(|e| device_err("update", e))?;
                a.push(st.row_dim[d]);
                for &f in &features {
                    let fc = &self.config.features[f];
                    let dim = self.config.tables[fc.table].embedding_dim as usize;
                    let rows = fc.sample_count() as usize / n;
                    let part: Vec<f32> = match &gradients[f] {
                        Some(m) => m.data[d * rows * dim..(d + 1) * rows * dim].to_vec(),
                        None => vec![0.0; rows * dim],
                    };
                    let h = self
                        .rt
                        .upload(d, &part, &[rows as i64, dim as i64])
                        .map_err(|e| device_err("update", e))?;
                    a.push(h);
                }
            }
        }
        let config = ExecuteConfig {
            explode_tuple: true,
            release_inputs: true,
            ..Default::default()
        };
        timings.upload = clock.elapsed();
        let clock = std::time::Instant::now();
        let res = self
            .rt
            .execute(exe, &args, config)
            .map_err(|e| device_err("update", e))?;
        timings.execute = clock.elapsed();
        self.update_timings = timings;
        for (d, outs) in res.into_iter().enumerate() {
            let mut o = 0;
            for st in &mut self.stacks {
                st.table[d] = outs[o];
                for k in 0..st.slots.len() {
                    st.slots[k][d] = outs[o + 1 + k];
                }
                o += 1 + st.slots.len();
            }
        }
        Ok(warnings)
    }

    /// Downloads the tables and slots and unstacks them (what [`crate::shard::save_checkpoint`]
    /// writes as one `.npy` per table and slot).
    pub fn checkpoint(&self) -> Result<Checkpoint> {
        let n = self.layout.global_device_count as usize;
        let max_slots = self.stacks.iter().map(|s| s.slots.len()).max().unwrap_or(0);
        let mut tables = Vec::new();
        let mut slots: Vec<Vec<Matrix>> = vec![Vec::new(); max_slots];
        for (si, st) in self.stacks.iter().enumerate() {
            let stack = &self.layout.stacks[si];
            let dim = stack.embedding_dim as usize;
            let gather = |hs: &[BufferHandle]| -> Result<Matrix> {
                let mut data = Vec::new();
                for &h in hs.iter().take(n) {
                    let v: Vec<f32> = self
                        .rt
                        .download(h)
                        .map_err(|e| device_err(format!("stack '{}'", stack.name), e))?;
                    data.extend(v);
                }
                Ok(Matrix {
                    rows: data.len() / dim.max(1),
                    cols: dim,
                    data,
                })
            };
            tables.push(gather(&st.table)?);
            for (k, slot) in slots.iter_mut().enumerate() {
                match st.slots.get(k) {
                    Some(hs) => slot.push(gather(hs)?),
                    // A stack whose optimizer has fewer slots: never read by unstacking.
                    None => slot.push(Matrix::new(stack.vocab_size as usize, dim, 0.0)),
                }
            }
        }
        unshard_checkpoint(&self.config, &self.layout, &tables, &slots)
    }

    /// Bytes the exchanges of `batch` move in one lookup and one update.
    pub fn traffic(&self, batch: &PreparedBatch) -> Traffic {
        let n = self.layout.global_device_count as u64;
        let mut t = Traffic::default();
        if n == 1 {
            return t;
        }
        for (si, ex) in batch.exchanges.iter().enumerate() {
            let dim = self.layout.stacks[si].embedding_dim as u64;
            let slots = n * ex.capacity as u64;
            let moved = |bytes: u64| n * bytes * (n - 1) / n;
            // Lookup: row ids and gains out, rows back.
            t.lookup_bytes += moved(slots * 4) * 2 + moved(slots * dim * 4);
            // Update: row ids and scaled gradients out.
            t.update_bytes += moved(slots * 4) + moved(slots * dim * 4);
        }
        t
    }
}

impl Drop for DeviceEmbedding {
    fn drop(&mut self) {
        for st in &self.stacks {
            let hs = st
                .table
                .iter()
                .chain(st.slots.iter().flatten())
                .chain(&st.row_dim)
                .copied()
                .collect::<Vec<_>>();
            self.release(hs);
        }
    }
}

fn upload_part(
    rt: &Runtime,
    layout: &Layout,
    stack: usize,
    m: &Matrix,
    device: usize,
) -> Result<BufferHandle> {
    let part = crate::shard::device_shard(layout, stack, m, device as u32);
    rt.upload(device, &part.data, &[part.rows as i64, part.cols as i64])
        .map_err(|e| device_err(format!("stack '{}'", layout.stacks[stack].name), e))
}

/// Per local row of `device`'s part of stack `si`: the real dim of the table that holds it, or
/// 0 when the row is padding (its id is past the vocabulary).
pub fn row_dims(config: &EmbeddingConfig, layout: &Layout, si: usize, device: u32) -> Vec<i32> {
    let ns = layout.num_shards();
    let nsc = layout.num_sc_per_device;
    let rps = layout.rows_per_shard(si);
    let mut out = vec![0i32; (rps * nsc) as usize];
    for c in 0..nsc {
        let shard = device * nsc + c;
        for &t in &layout.stacks[si].tables {
            let tl = &layout.tables[t];
            let tc = &config.tables[t];
            let rows = tl.padded_vocab_size / ns;
            for j in 0..rows {
                let id = j as u64 * ns as u64 + ((shard + ns - tl.shard_rotation % ns) % ns) as u64;
                if id < tc.vocabulary_size as u64 {
                    out[(c * rps + tl.row_offset_in_shard + j) as usize] = tc.embedding_dim as i32;
                }
            }
        }
    }
    out
}
