//! Preprocessing throughput on the issue's batches: 100 features x 16,000 samples x 16 ids
//! (dense) and the same with 0-32 ids per sample (ragged), 4 devices x 4 SparseCores, jax
//! stacking (4 stacks of 25 tables), vocabularies of 1,000,000, sum combiner.
//!
//! Run: `cargo bench -p tessera-embedding --bench preprocess`. With
//! `TESSERA_EMBEDDING_BENCH_DIR=$PWD/target/embedding-bench` (an absolute path) it reads `config.json`, `dense.npz` and
//! `ragged.npz` written by scripts/bench/embedding_bench.py (the batches jax-tpu-embedding is timed
//! on); otherwise it makes batches of the same shape itself. `TESSERA_EMBEDDING_BENCH_SAMPLES`
//! shrinks the batch (default 16000).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tessera_embedding::{npz, preprocess, EmbeddingConfig, FeatureBatch, Layout};

const FEATURES: usize = 100;

fn generated(samples: usize) -> (EmbeddingConfig, Vec<(&'static str, Vec<FeatureBatch>)>) {
    let tables: Vec<String> = (0..FEATURES)
        .map(|i| {
            format!(
                r#"{{"name": "t{i}", "vocabulary_size": 1000000, "embedding_dim": 16, "combiner": "sum",
                   "optimizer": {{"type": "sgd", "learning_rate": 0.5}},
                   "max_ids_per_partition": 40000, "max_unique_ids_per_partition": 40000}}"#
            )
        })
        .collect();
    let features: Vec<String> = (0..FEATURES)
        .map(|i| {
            format!(r#"{{"name": "f{i}", "table": "t{i}", "input_shape": [{samples}, 16], "output_shape": [{samples}, 16]}}"#)
        })
        .collect();
    let json = format!(
        r#"{{"tables": [{}], "features": [{}], "global_device_count": 4, "num_sc_per_device": 4,
            "stacking": "jax", "default_max_ids_per_partition": 40000,
            "default_max_unique_ids_per_partition": 40000, "allow_id_dropping": true}}"#,
        tables.join(","),
        features.join(",")
    );
    let config = EmbeddingConfig::from_json(&json, "bench").unwrap();
    let mut state = 2026u64;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let dense = (0..FEATURES)
        .map(|_| {
            FeatureBatch::dense(
                samples,
                16,
                (0..samples * 16).map(|_| next(1_000_000) as i32).collect(),
                None,
            )
        })
        .collect();
    let ragged = (0..FEATURES)
        .map(|_| {
            let mut splits = vec![0usize];
            for _ in 0..samples {
                splits.push(splits.last().unwrap() + next(33) as usize);
            }
            let n = *splits.last().unwrap();
            FeatureBatch::ragged(
                (0..n).map(|_| next(1_000_000) as i32).collect(),
                splits,
                None,
            )
        })
        .collect();
    (config, vec![("dense", dense), ("ragged", ragged)])
}

fn from_dir(dir: &str) -> (EmbeddingConfig, Vec<(&'static str, Vec<FeatureBatch>)>) {
    let path = format!("{dir}/config.json");
    let config =
        EmbeddingConfig::from_json(&std::fs::read_to_string(&path).unwrap(), &path).unwrap();
    let batches = ["dense", "ragged"]
        .into_iter()
        .map(|name| {
            let p = format!("{dir}/{name}.npz");
            (
                name,
                npz::read_batch(&config, &std::fs::read(&p).unwrap(), &p).unwrap(),
            )
        })
        .collect();
    (config, batches)
}

fn bench(c: &mut Criterion) {
    let (mut config, batches) = match std::env::var("TESSERA_EMBEDDING_BENCH_DIR") {
        Ok(dir) => from_dir(&dir),
        Err(_) => {
            let samples = std::env::var("TESSERA_EMBEDDING_BENCH_SAMPLES")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(16000);
            generated(samples)
        }
    };
    let layout = Layout::new(&mut config).unwrap();
    let mut g = c.benchmark_group("embedding_preprocess");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    for (name, b) in &batches {
        let ids: usize = b.iter().map(|f| f.values.len()).sum();
        g.throughput(Throughput::Elements(ids as u64));
        g.bench_function(format!("{name}_100x16000x16"), |bench| {
            bench.iter(|| preprocess(&config, &layout, b).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
