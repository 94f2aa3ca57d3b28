//! Dispatch overhead (one execute of a tiny module, per call) and
//! host<->device copy bandwidth on the PJRT CPU plugin.
//!
//! Run: `cargo bench -p tessera-runtime --bench dispatch`
//! (short measurement windows: the whole run takes about a minute).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tessera_runtime::{
    Client, CompileOptions, CompileRequest, ExecuteConfig, ExecuteOptions, Program, Runtime,
};

const ADD: &str = "func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = stablehlo.add %a, %b : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}";

fn dispatch(c: &mut Criterion) {
    let client = Client::cpu(1).expect("PJRT CPU plugin (run scripts/install-pjrt.sh)");
    let dev = &client.devices()[0];
    let exe = client
        .compile(&Program::mlir(ADD), &CompileOptions::default())
        .unwrap();
    let a = client.buffer_from_host(&[1f32; 4], &[4], dev).unwrap();
    let b = client.buffer_from_host(&[2f32; 4], &[4], dev).unwrap();
    let opts = ExecuteOptions::default();
    let mut g = c.benchmark_group("dispatch");
    g.bench_function("pjrt_execute_add_f32x4", |bench| {
        bench.iter(|| exe.execute(&[vec![&a, &b]], &opts).unwrap())
    });

    // The same add, partitioned over 8 devices (one launch, 8 argument lists).
    let client8 = Client::cpu(8).unwrap();
    let manual = ADD
        .replace(
            "%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32>",
            "%a: tensor<4xf32> {mhlo.sharding = \"{manual}\"}, %b: tensor<4xf32> {mhlo.sharding = \"{manual}\"}) -> (tensor<4xf32> {mhlo.sharding = \"{manual}\"})",
        );
    let exe8 = client8
        .compile(&Program::mlir(manual), &CompileOptions::partitioned(8))
        .unwrap();
    let bufs: Vec<(_, _)> = client8
        .devices()
        .iter()
        .map(|d| {
            (
                client8.buffer_from_host(&[1f32; 4], &[4], d).unwrap(),
                client8.buffer_from_host(&[2f32; 4], &[4], d).unwrap(),
            )
        })
        .collect();
    let lists: Vec<Vec<_>> = bufs.iter().map(|(a, b)| vec![a, b]).collect();
    g.bench_function("pjrt_execute_add_f32x4_8_devices", |bench| {
        bench.iter(|| exe8.execute(&lists, &opts).unwrap())
    });

    let rt = Runtime::new(client.clone());
    let h = rt
        .compile(&CompileRequest::new(
            Program::mlir(ADD),
            CompileOptions::default(),
        ))
        .unwrap();
    let x = rt.upload(0, &[1f32; 4], &[4]).unwrap();
    let y = rt.upload(0, &[2f32; 4], &[4]).unwrap();
    let cfg = ExecuteConfig {
        explode_tuple: true,
        ..ExecuteConfig::default()
    };
    g.bench_function("runtime_execute_add_f32x4", |bench| {
        bench.iter(|| {
            let out = rt.execute(h, &[vec![x, y]], cfg).unwrap();
            rt.release(out[0][0]).unwrap();
        })
    });
    g.bench_function("runtime_compile_cache_hit", |bench| {
        let req = CompileRequest::new(Program::mlir(ADD), CompileOptions::default());
        bench.iter(|| {
            let h2 = rt.compile(&req).unwrap();
            rt.release_executable(h2).unwrap();
        })
    });
    g.finish();
}

fn transfers(c: &mut Criterion) {
    let client = Client::cpu(1).expect("PJRT CPU plugin (run scripts/install-pjrt.sh)");
    let dev = &client.devices()[0];
    let mut g = c.benchmark_group("transfer");
    for bytes in [4usize << 10, 256 << 10, 4 << 20, 64 << 20] {
        let n = bytes / 4;
        let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_with_input(
            BenchmarkId::new("host_to_device", bytes),
            &host,
            |bench, h| bench.iter(|| client.buffer_from_host(h, &[n as i64], dev).unwrap()),
        );
        let buf = client.buffer_from_host(&host, &[n as i64], dev).unwrap();
        g.bench_with_input(
            BenchmarkId::new("device_to_host", bytes),
            &buf,
            |bench, b| bench.iter(|| b.to_host_bytes().unwrap()),
        );
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = dispatch, transfers
}
criterion_main!(benches);
