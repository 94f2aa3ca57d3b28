//! A ranking-model-sized training step on PJRT CPU devices: 20 tables (vocabularies 20,000 to
//! 100,000, dims 16/32/64; Adagrad on 14, SGD on 2, Adam on 2, FTRL on 2), one feature per table
//! with 4 ids per sample (a skewed id distribution), batch 4,096, 4 devices x 1 SparseCore, "tf"
//! stacking. The phases are timed apart, as the profile of a step:
//!
//! - `prepare`: host preprocessing to CSR and grouping for the exchange;
//! - `lookup`: the lookup program (upload of the exchange buffers, run, download);
//! - `update`: the update program (upload of the gradients, run; tables stay on the devices);
//! - `step`: all three.
//!
//! Run: `nice -n 10 cargo bench -p tessera-embedding --bench device_step`. It prints the bytes
//! the exchanges move per step. `TESSERA_EMBEDDING_STEP_DEVICES` changes the device count.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tessera_embedding::device::DeviceEmbedding;
use tessera_embedding::shard::{Checkpoint, Matrix};
use tessera_embedding::{EmbeddingConfig, FeatureBatch, Layout};
use tessera_runtime::Client;

const TABLES: usize = 20;
const BATCH: usize = 4096;
const IDS: usize = 4;

fn setup() -> (
    EmbeddingConfig,
    Layout,
    Checkpoint,
    Vec<FeatureBatch>,
    Vec<Option<Matrix>>,
) {
    let devices: u32 = std::env::var("TESSERA_EMBEDDING_STEP_DEVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let vocab = |t: usize| [100_000u32, 20_000, 50_000, 100_000, 30_000][t % 5];
    let dim = |t: usize| [16u32, 32, 64, 16][t % 4];
    let optimizer = |t: usize| match t {
        0 | 1 => r#"{"type":"sgd","learning_rate":0.1}"#,
        2 | 3 => r#"{"type":"adam","learning_rate":0.01}"#,
        4 | 5 => r#"{"type":"ftrl","learning_rate":0.1}"#,
        _ => r#"{"type":"adagrad","learning_rate":0.1}"#,
    };
    let tables: Vec<String> = (0..TABLES)
        .map(|t| {
            format!(
                r#"{{"name":"t{t}","vocabulary_size":{},"embedding_dim":{},"combiner":"mean","optimizer":{},"max_ids_per_partition":65536,"max_unique_ids_per_partition":65536}}"#,
                vocab(t),
                dim(t),
                optimizer(t)
            )
        })
        .collect();
    let features: Vec<String> = (0..TABLES)
        .map(|t| {
            format!(
                r#"{{"name":"f{t}","table":"t{t}","input_shape":[{BATCH},{IDS}],"output_shape":[{BATCH},{}]}}"#,
                dim(t)
            )
        })
        .collect();
    let json = format!(
        r#"{{"tables":[{}],"features":[{}],"global_device_count":{devices},"num_sc_per_device":1}}"#,
        tables.join(","),
        features.join(",")
    );
    let mut config = EmbeddingConfig::from_json(&json, "bench").unwrap();
    let layout = Layout::new(&mut config).unwrap();
    let mut state = 2026u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    let ckpt = Checkpoint::filled(&config, || (next() % 2000) as f32 / 1000.0 - 1.0);
    // Skewed ids: half from the first 1% of the vocabulary.
    let batches: Vec<FeatureBatch> = config
        .features
        .iter()
        .map(|f| {
            let v = config.tables[f.table].vocabulary_size as u64;
            let ids = (0..BATCH * IDS)
                .map(|_| {
                    let hot = next() % 2 == 0;
                    (next() % if hot { v / 100 } else { v }) as i32
                })
                .collect();
            FeatureBatch::dense(BATCH, IDS, ids, None)
        })
        .collect();
    let grads = config
        .features
        .iter()
        .map(|f| {
            let d = config.tables[f.table].embedding_dim as usize;
            let mut m = Matrix::new(BATCH, d, 0.0);
            m.data
                .iter_mut()
                .for_each(|x| *x = (next() % 2000) as f32 / 1e6);
            Some(m)
        })
        .collect();
    (config, layout, ckpt, batches, grads)
}

fn bench(c: &mut Criterion) {
    let (config, layout, ckpt, batches, grads) = setup();
    let n = layout.global_device_count as usize;
    let stacks = layout.stacks.len();
    let client = Client::cpu(n).expect("the PJRT CPU plugin (scripts/install-pjrt.sh)");
    let mut dev = DeviceEmbedding::new(client, config, layout, &ckpt).unwrap();
    let prepared = dev.prepare(&batches).unwrap();
    // Compile both programs outside the measurements.
    dev.lookup(&prepared).unwrap();
    dev.apply_gradients(&prepared, &grads).unwrap();
    let t = dev.traffic(&prepared);
    let entries: usize = prepared.exchanges.iter().map(|e| e.entries).sum();
    let caps: Vec<usize> = prepared.exchanges.iter().map(|e| e.capacity).collect();
    println!(
        "{n} devices, {stacks} stacks, {entries} CSR entries, capacities {caps:?}: \
         exchanges move {} bytes per lookup and {} per update ({} per step)",
        t.lookup_bytes,
        t.update_bytes,
        t.lookup_bytes + t.update_bytes
    );
    // The profile: where a lookup and an update spend their time (5 runs each, medians).
    let mut phases = Vec::new();
    for _ in 0..5 {
        dev.lookup(&prepared).unwrap();
        let l = dev.lookup_timings;
        dev.apply_gradients(&prepared, &grads).unwrap();
        phases.push((l, dev.update_timings));
    }
    let median = |f: &dyn Fn(
        &(
            tessera_embedding::device::Timings,
            tessera_embedding::device::Timings,
        ),
    ) -> Duration| {
        let mut v: Vec<Duration> = phases.iter().map(f).collect();
        v.sort();
        v[v.len() / 2]
    };
    println!(
        "lookup: upload {:?}, execute {:?}, download {:?}; update: upload {:?}, execute {:?}",
        median(&|p| p.0.upload),
        median(&|p| p.0.execute),
        median(&|p| p.0.download),
        median(&|p| p.1.upload),
        median(&|p| p.1.execute)
    );
    let mut g = c.benchmark_group("embedding_step");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));
    g.bench_function("prepare", |b| b.iter(|| dev.prepare(&batches).unwrap()));
    g.bench_function("lookup", |b| b.iter(|| dev.lookup(&prepared).unwrap()));
    g.bench_function("update", |b| {
        b.iter(|| dev.apply_gradients(&prepared, &grads).unwrap())
    });
    g.bench_function("step", |b| {
        b.iter(|| {
            let p = dev.prepare(&batches).unwrap();
            dev.lookup(&p).unwrap();
            dev.apply_gradients(&p, &grads).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
