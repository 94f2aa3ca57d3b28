//! Host-side sharded I/O: splitting a global f32[2048,2048] (16 MiB) into per-device pieces and
//! assembling them back (with the replica comparison), for a tiling over 8 devices and a
//! partially replicated one.
//!
//! Run: `cargo bench -p tessera-runtime --bench sharded`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tessera_hlo::{Sharding, TileAssignment};
use tessera_runtime::{assemble, split, HostArray, HostValue};

fn sharded(c: &mut Criterion) {
    let dims = [2048i64, 2048];
    let n = (dims[0] * dims[1]) as usize;
    let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let global = HostValue::Array(HostArray::f32(&dims, &values).unwrap());
    let shape = tessera_hlo::Shape::array(tessera_hlo::ElementType::F32, &dims);
    let cases = [
        (
            "tiled_2x4",
            Sharding::tiled(TileAssignment::iota(&[2, 4]), false),
        ),
        (
            "rows4_repl2",
            Sharding::tiled(TileAssignment::iota(&[4, 1, 2]), true),
        ),
    ];
    let mut g = c.benchmark_group("sharded");
    g.throughput(Throughput::Bytes((n * 4) as u64));
    for (name, s) in &cases {
        g.bench_function(format!("split_{name}_f32_2048x2048"), |b| {
            b.iter(|| split(&global, &shape, s, 8).unwrap())
        });
        let pieces = split(&global, &shape, s, 8).unwrap();
        g.bench_function(format!("assemble_{name}_f32_2048x2048"), |b| {
            b.iter(|| assemble(&pieces, &shape, s).unwrap())
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
    targets = sharded
}
criterion_main!(benches);
