//! Parse and print speed on the biggest corpus modules and the tuple- and metadata-heavy ones.
//!
//! `cargo bench -p tessera-hlo --bench text`; figures and XLA's own times on the same files are
//! in docs/BENCHMARKS.md.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tessera_hlo::text::{parse_module, print_module, PrintOptions};

const FILES: &[&str] = &[
    "xla/tools/benchmarks/hlo/hlo_mixtral_8x7b_bf16_2x8.hlo",
    "xla/backends/cpu/benchmarks/hlo/gemma3_1b_flax_call.hlo",
    "xla/tools/data/benchmarking/mobilenet_v2.hlo",
    // Tuple-heavy: large tuple shapes repeated on every operand (13 MB printed from 1.7 MB).
    "xla/tools/benchmarks/hlo/hlo_gemma4_2b_bf16.hlo",
    // Metadata-heavy.
    "xla/backends/cpu/benchmarks/huge_hlo/gemma3_4b_text_keras_jax_batch1_in8_out100.hlo",
];

fn bench(c: &mut Criterion) {
    let Some(root) = tessera_corpus::root_or_skip("text benches") else {
        return;
    };
    let mut parse = c.benchmark_group("parse");
    parse
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    let mut texts = Vec::new();
    for rel in FILES {
        let text = std::fs::read_to_string(root.join(rel)).expect("corpus file");
        let name = rel.rsplit('/').next().unwrap().to_string();
        parse.throughput(Throughput::Bytes(text.len() as u64));
        parse.bench_with_input(BenchmarkId::from_parameter(&name), &text, |b, t| {
            b.iter(|| parse_module(t).expect("parses"))
        });
        texts.push((name, text));
    }
    parse.finish();

    let mut print = c.benchmark_group("print");
    print
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    for (name, text) in &texts {
        let module = parse_module(text).expect("parses");
        let out = print_module(&module, &PrintOptions::default());
        print.throughput(Throughput::Bytes(out.len() as u64));
        print.bench_with_input(BenchmarkId::from_parameter(name), &module, |b, m| {
            b.iter(|| print_module(m, &PrintOptions::default()))
        });
    }
    print.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
