//! The SPMD partitioner on a real model: jax's 48-layer transformer training step as XLA's
//! own `spmd-partitioning` pass receives it (testdata/models/transformer48.after-propagation.hlo,
//! about 17k instructions, a 2x4 mesh), on 8 devices and, made by
//! [`tessera_benches::on_more_devices`] from the same module, on 64 and 512 (the same tiles,
//! each held by 8 or 64 times as many devices). Each iteration clones the parsed module and
//! runs the pass with its defaults (parse, print and verifier not counted).
//!
//! ```text
//! nice -n 10 cargo bench -p tessera-benches --bench spmd
//! ```
//!
//! XLA's pass on the same inputs: `scripts/bench/spmd_speed_vs_xla.sh`; figures in docs/BENCHMARKS.md.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use tessera_hlo::text::parse_module;
use tessera_pass::Pass;
use tessera_spmd::SpmdPartitioning;

fn bench(c: &mut Criterion) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/models/transformer48.after-propagation.hlo");
    let text = std::fs::read_to_string(&path).expect("the transformer48 fixture");
    let module = parse_module(&text).expect("parses");
    let mut g = c.benchmark_group("spmd-partitioning");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for factor in [1, 8, 64] {
        let mut m = module.clone();
        tessera_benches::on_more_devices(&mut m, factor).expect("widens");
        let devices = m.config.num_partitions;
        g.bench_function(format!("transformer48/{devices}"), |b| {
            b.iter_batched(
                || m.clone(),
                |mut m| SpmdPartitioning::default().run(&mut m).expect("partitions"),
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
