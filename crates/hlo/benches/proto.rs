//! `xla.HloModuleProto` encode and decode speed on big corpus modules.
//!
//! `cargo bench -p tessera-hlo --bench proto`; figures, and XLA's own time to read the same
//! bytes, are in docs/proto.md.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tessera_hlo::proto::{from_proto_bytes, to_proto_bytes};
use tessera_hlo::text::parse_module;

const FILES: &[&str] = &[
    "xla/tools/benchmarks/hlo/hlo_mixtral_8x7b_bf16_2x8.hlo",
    "xla/backends/cpu/benchmarks/hlo/gemma2_2b_keras_jax.hlo",
];

fn bench(c: &mut Criterion) {
    let Some(root) = tessera_corpus::root_or_skip("proto benches") else {
        return;
    };
    let mut modules = Vec::new();
    for rel in FILES {
        let text = std::fs::read_to_string(root.join(rel)).expect("corpus file");
        let name = rel.rsplit('/').next().unwrap().to_string();
        modules.push((name, parse_module(&text).expect("parses")));
    }
    let mut encode = c.benchmark_group("proto_encode");
    encode
        .sample_size(10)
        .measurement_time(Duration::from_secs(6));
    for (name, m) in &modules {
        encode.throughput(Throughput::Elements(m.instruction_count() as u64));
        encode.bench_with_input(BenchmarkId::from_parameter(name), m, |b, m| {
            b.iter(|| to_proto_bytes(m))
        });
    }
    encode.finish();
    let mut decode = c.benchmark_group("proto_decode");
    decode
        .sample_size(10)
        .measurement_time(Duration::from_secs(6));
    for (name, m) in &modules {
        let bytes = to_proto_bytes(m);
        decode.throughput(Throughput::Bytes(bytes.len() as u64));
        decode.bench_with_input(BenchmarkId::from_parameter(name), &bytes, |b, bytes| {
            b.iter(|| from_proto_bytes(bytes).expect("decodes"))
        });
    }
    decode.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
