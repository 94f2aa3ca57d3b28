//! Sharding propagation on a real model: jax's 48-layer transformer training step on a 2x4 mesh
//! (testdata/models/transformer48.before-propagation.hlo, about 17k instructions, the module
//! XLA's own `sharding-propagation` pass received). Each iteration clones the parsed module and
//! runs the pass with XLA's defaults, so the figure is the pass alone (no parse, no verifier).
//!
//! `cargo bench -p tessera-spmd --bench propagation`; figures and XLA's time on the same module
//! in docs/BENCHMARKS.md.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use tessera_hlo::text::parse_module;
use tessera_spmd::{propagate, PropagationOptions};

fn model(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/models")
        .join(name)
}

fn bench(c: &mut Criterion) {
    let path = model("transformer48.before-propagation.hlo");
    let text = std::fs::read_to_string(&path).expect("the transformer48 fixture");
    let module = parse_module(&text).expect("parses");
    let options = PropagationOptions::default();
    let mut g = c.benchmark_group("sharding-propagation");
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    g.bench_function("transformer48", |b| {
        b.iter_batched(
            || module.clone(),
            |mut m| propagate(&mut m, &options).expect("propagates"),
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
