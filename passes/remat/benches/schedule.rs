//! Scheduling time on big corpus modules: each scheduler over the whole module, the best-of-all
//! default, and measuring the peak along a schedule.
//!
//! `cargo bench -p tessera-remat --bench schedule`; figures in docs/BENCHMARKS.md.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tessera_hlo::analysis::shape_size;
use tessera_hlo::text::parse_module;
use tessera_remat::schedule::compute_schedule;
use tessera_remat::{peak_memory, SchedulerKind};

const FILES: &[&str] = &[
    "xla/tools/benchmarks/hlo/hlo_mixtral_8x7b_bf16_2x8.hlo",
    "xla/backends/cpu/benchmarks/hlo/gemma2_2b_keras_jax.hlo",
];

fn bench(c: &mut Criterion) {
    let Some(root) = tessera_corpus::root_or_skip("schedule benches") else {
        return;
    };
    let mut g = c.benchmark_group("schedule");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for rel in FILES {
        let text = std::fs::read_to_string(root.join(rel)).expect("corpus file");
        let module = parse_module(&text).expect("parses");
        let name = rel.rsplit('/').next().unwrap().trim_end_matches(".hlo");
        for kind in SchedulerKind::ALL {
            g.bench_with_input(BenchmarkId::new(kind.name(), name), &module, |b, m| {
                b.iter(|| compute_schedule(m, kind, &shape_size).expect("schedules"))
            });
        }
        let (schedule, _) = compute_schedule(&module, SchedulerKind::Default, &shape_size).unwrap();
        g.bench_with_input(BenchmarkId::new("peak-memory", name), &module, |b, m| {
            b.iter(|| peak_memory(m, &schedule, &shape_size).expect("measures"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
