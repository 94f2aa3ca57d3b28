//! Rematerialization pass time (the pass alone: the module is parsed and scheduled once, each
//! iteration runs the pass on a fresh copy, the copy is not timed).
//!
//! - `transformer48/{search}/b{block}/{pct}`: jax's 48-layer transformer training step
//!   (testdata/models/transformer48_1dev.hlo, default schedule) at 90/70/50% of its peak. The
//!   faithful search only at 90% (at 70% and 50% one run takes 25-40 s; the figures for those
//!   come from `cargo run --release -p tessera-remat --example remat_eval -- transformer`).
//! - `chain/{n}`, `ladder/{n}`: the fast search on the generated families at 50% of the peak
//!   (chains with single instructions, ladders with blocks of two); the sizes up to 100k are
//!   in the example's `scaling` table.
//!
//! `cargo bench -p tessera-remat --bench remat`; figures in docs/BENCHMARKS.md.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use tessera_hlo::analysis::shape_size;
use tessera_hlo::Module;
use tessera_remat::{
    gen, peak_memory, schedule_module, RematOptions, Rematerialization, SchedulerKind, SearchKind,
};

fn peak(m: &Module) -> i64 {
    peak_memory(m, m.schedule.as_ref().unwrap(), &shape_size)
        .unwrap()
        .peak_bytes
}

fn bench_pass(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    m: &Module,
    opts: RematOptions,
) {
    c.bench_with_input(id, m, |b, m| {
        b.iter_batched(
            || m.clone(),
            |mut copy| {
                Rematerialization::new(opts.clone())
                    .run_with_summary(&mut copy)
                    .expect("the pass runs");
                copy
            },
            BatchSize::LargeInput,
        )
    });
}

fn transformer(c: &mut Criterion) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/models/transformer48_1dev.hlo");
    let text = std::fs::read_to_string(path).expect("the fixture");
    let mut m = tessera_hlo::text::parse_module(&text).expect("parses");
    schedule_module(&mut m, SchedulerKind::Default, &shape_size).expect("schedules");
    let p = peak(&m);
    let mut g = c.benchmark_group("transformer48");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    for (search, block, pcts) in [
        (SearchKind::Fast, 1, &[90, 70, 50][..]),
        (SearchKind::Faithful, 1, &[90][..]),
        (SearchKind::Fast, 4, &[90, 70, 50][..]),
    ] {
        for &pct in pcts {
            let name = match search {
                SearchKind::Auto => "auto",
                SearchKind::Fast => "fast",
                SearchKind::Faithful => "faithful",
            };
            bench_pass(
                &mut g,
                BenchmarkId::new(format!("{name}/b{block}"), pct),
                &m,
                RematOptions {
                    memory_limit: Some(p * pct / 100),
                    search,
                    block_size_limit: block,
                    ..RematOptions::default()
                },
            );
        }
    }
    g.finish();
}

fn families(c: &mut Criterion) {
    let mut g = c.benchmark_group("generated");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    for n in [1000, 3000, 10000] {
        for (family, m, block) in [
            ("chain", gen::chain(n, 64), 1),
            ("ladder", gen::ladder(n, 64, 4, 1), 2),
        ] {
            let opts = RematOptions {
                memory_limit: Some(peak(&m) / 2),
                block_size_limit: block,
                ..RematOptions::default()
            };
            bench_pass(&mut g, BenchmarkId::new(family, n), &m, opts);
        }
    }
    g.finish();
}

criterion_group!(benches, transformer, families);
criterion_main!(benches);
