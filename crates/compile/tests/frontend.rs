//! A frontend's round trip: a module built through `tessera_hlo::Builder` (never parsed),
//! compiled for 4 devices, executed through `tessera-runtime`, and its outputs checked against
//! values computed here on the host.

use tessera_compile::{compile, verify_on_devices, CompileOptions, VerifyOptions};
use tessera_hlo::attrs::DotDimensionNumbers;
use tessera_hlo::{Attrs, Builder, ElementType, Module, Opcode, Shape, Sharding};
use tessera_runtime::harness::run_partitioned;
use tessera_runtime::{Client, HostArray, HostValue};

const B: usize = 16;
const K: usize = 8;
const N: usize = 12;

/// `(relu(x @ w), sum(relu(x @ w)))` with x split by rows and w by columns over 4 devices.
fn frontend_module() -> Module {
    let mut m = Module::new("frontend_step");
    let entry = m.add_computation("main").unwrap();
    m.set_entry(entry);
    m.config.num_partitions = 4;
    let f32 = ElementType::F32;
    let (x, w, root) = {
        let mut b = Builder::new(&mut m, entry);
        let x = b
            .parameter(0, Shape::array(f32, &[B as i64, K as i64]), "x")
            .unwrap();
        let w = b
            .parameter(1, Shape::array(f32, &[K as i64, N as i64]), "w")
            .unwrap();
        let dot = Attrs {
            dot_dims: Some(Box::new(DotDimensionNumbers {
                lhs_contracting_dimensions: vec![1],
                rhs_contracting_dimensions: vec![0],
                ..Default::default()
            })),
            ..Default::default()
        };
        let xw = b.op(Opcode::Dot, &[x, w], dot, &[], None).unwrap();
        let zero = b.scalar(f32, 0.0).unwrap();
        let zeros = b.broadcast(zero, &[B as i64, N as i64], &[]).unwrap();
        let y = b.binary(Opcode::Maximum, xw, zeros).unwrap();
        let add = b.reducer(f32, Opcode::Add).unwrap();
        let s = b.reduce(y, zero, &[0, 1], add).unwrap();
        let root = b.tuple(&[y, s]).unwrap();
        (x, w, root)
    };
    m.set_root(entry, root);
    m.instr_mut(x).sharding = Some(Sharding::iota_tiled(&[4, 1]));
    m.instr_mut(w).sharding = Some(Sharding::iota_tiled(&[1, 4]));
    m
}

#[test]
fn builder_module_compiles_runs_and_gives_the_host_values() {
    let original = frontend_module();
    let compiled = compile(original.clone(), &CompileOptions::new(4)).unwrap();
    assert_eq!(compiled.report.num_partitions, 4);
    assert!(
        compiled.report.collective_bytes() > 0,
        "{}",
        compiled.report.render()
    );

    let xs: Vec<f32> = (0..B * K).map(|i| ((i % 7) as f32 - 3.0) * 0.25).collect();
    let ws: Vec<f32> = (0..K * N).map(|i| ((i % 5) as f32 - 2.0) * 0.5).collect();
    let inputs = vec![
        HostValue::Array(HostArray::f32(&[B as i64, K as i64], &xs).unwrap()),
        HostValue::Array(HostArray::f32(&[K as i64, N as i64], &ws).unwrap()),
    ];
    let client = Client::cpu(4).unwrap();
    let outs = run_partitioned(&client, &compiled.sharded, &compiled.module, 4, &inputs).unwrap();
    assert_eq!(outs.len(), 2);
    let mut y = vec![0f32; B * N];
    for r in 0..B {
        for c in 0..N {
            let v: f32 = (0..K).map(|k| xs[r * K + k] * ws[k * N + c]).sum();
            y[r * N + c] = v.max(0.0);
        }
    }
    let total: f32 = y.iter().sum();
    let got = |k: usize| -> Vec<f32> {
        let a = outs[k].value.as_array().unwrap();
        assert_eq!(outs[k].mismatch_count, 0, "replicas of output {k} disagree");
        a.data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let gy = got(0);
    assert_eq!(gy.len(), B * N);
    for (i, (a, e)) in gy.iter().zip(&y).enumerate() {
        assert!(
            (a - e).abs() <= 1e-5 * e.abs().max(1.0),
            "y[{i}]: {a} != {e}"
        );
    }
    let gs = got(1);
    assert!(
        (gs[0] - total).abs() <= 1e-4 * total.abs().max(1.0),
        "{} != {total}",
        gs[0]
    );

    // The same through the library's verification (the original on 1 device).
    let v = verify_on_devices(&client, &original, &compiled, &VerifyOptions::default()).unwrap();
    assert!(v.passed(), "{v}");
}
