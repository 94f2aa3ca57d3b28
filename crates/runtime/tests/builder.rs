//! Collectives made by `tessera_hlo::Builder` run on the real plugin as they are built (channel
//! ids, flattened device ids, cached reduction computations): a per-device program built with
//! each collective helper equals, on 2, 4 and 8 devices, an unpartitioned original built with
//! the same builder.

mod common;

use tessera_hlo::attrs::ReplicaGroups;
use tessera_hlo::{Builder, ElementType, InstrId, Module, Opcode, Shape, Sharding, TileAssignment};
use tessera_runtime::{check_equivalence, CompareOptions, HostArray, HostValue};

use common::client;

const ROWS: i64 = 8;
const COLS: i64 = 8;

fn f32s(dims: &[i64]) -> Shape {
    Shape::array(ElementType::F32, dims)
}

fn tiled(dims: &[i64]) -> Sharding {
    Sharding::tiled(TileAssignment::iota(dims), false)
}

/// Inputs `x: f32[ROWS,COLS]` (rows tiled over the n devices) and `y: f32[ROWS]`
/// (replicated); the outputs and their shardings:
/// 0. x, gathered back (replicated);
/// 1. the sum of all of x (replicated);
/// 2. x resharded from rows to columns (tiled `[1,n]`);
/// 3. x's rows rolled down by one shard (tiled `[n,1]`);
/// 4. y cut into local pieces by partition id (tiled `[n]`);
/// 5. n * y (tiled `[n]`: each device reduce-scatters the n replicas of y).
fn shardings(n: i64) -> Vec<Sharding> {
    vec![
        Sharding::replicated(),
        Sharding::replicated(),
        tiled(&[1, n]),
        tiled(&[n, 1]),
        tiled(&[n]),
        tiled(&[n]),
    ]
}

fn params(b: &mut Builder<'_>, x_shape: Shape, y_shape: Shape) -> (InstrId, InstrId) {
    let x = b.parameter(0, x_shape, "x").unwrap();
    let y = b.parameter(1, y_shape, "y").unwrap();
    (x, y)
}

fn original(n: i64) -> Module {
    let mut m = Module::new("collectives");
    let e = m.add_computation("main").unwrap();
    m.set_entry(e);
    let mut b = Builder::new(&mut m, e);
    let (x, y) = params(&mut b, f32s(&[ROWS, COLS]), f32s(&[ROWS]));
    let gathered = b.unary(Opcode::Copy, x).unwrap();
    let zero = b.scalar(ElementType::F32, 0.0).unwrap();
    let add = b.reducer(ElementType::F32, Opcode::Add).unwrap();
    let total = b.reduce(x, zero, &[0, 1], add).unwrap();
    let columns = b.unary(Opcode::Copy, x).unwrap();
    let k = ROWS / n;
    let tail = b.slice(x, &[ROWS - k, 0], &[ROWS, COLS], &[1, 1]).unwrap();
    let head = b.slice(x, &[0, 0], &[ROWS - k, COLS], &[1, 1]).unwrap();
    let rolled = b.concatenate(&[tail, head], 0).unwrap();
    let local = b.unary(Opcode::Copy, y).unwrap();
    let nn = b.scalar(ElementType::F32, n as f64).unwrap();
    let nb = b.broadcast(nn, &[ROWS], &[]).unwrap();
    let scaled = b.binary(Opcode::Multiply, y, nb).unwrap();
    let root = b
        .tuple(&[gathered, total, columns, rolled, local, scaled])
        .unwrap();
    m.set_root(e, root);
    let c = m.comp(e);
    let (px, py) = (c.parameter(0).unwrap(), c.parameter(1).unwrap());
    m.instr_mut(px).sharding = Some(tiled(&[n, 1]));
    m.instr_mut(py).sharding = Some(Sharding::replicated());
    m.instr_mut(root).sharding = Some(Sharding::tuple(shardings(n)));
    m
}

fn partitioned(n: i64) -> Module {
    let mut m = Module::new("collectives_spmd");
    m.config.num_partitions = n;
    let e = m.add_computation("main").unwrap();
    m.set_entry(e);
    let mut b = Builder::new(&mut m, e);
    let k = ROWS / n;
    let (x, y) = params(&mut b, f32s(&[k, COLS]), f32s(&[ROWS]));
    let all = ReplicaGroups::iota(1, n);
    // 0: all-gather the row shards.
    let gathered = b.all_gather(x, 0, all.clone()).unwrap();
    // 1: local sum, then all-reduce.
    let zero = b.scalar(ElementType::F32, 0.0).unwrap();
    let add = b.reducer(ElementType::F32, Opcode::Add).unwrap();
    let partial = b.reduce(x, zero, &[0, 1], add).unwrap();
    let total = b.all_reduce(partial, Opcode::Add, all.clone()).unwrap();
    // 2: rows -> columns with one all-to-all: [k, COLS] -> [k, n, COLS/n] -> [n, k, COLS/n],
    // piece j (column block j) to device j; received pieces stack row blocks in device order.
    let c = COLS / n;
    let r = b.reshape(x, &[k, n, c]).unwrap();
    let t = b.transpose(r, &[1, 0, 2]).unwrap();
    let a2a = b.all_to_all(t, 0, all.clone()).unwrap();
    let columns = b.reshape(a2a, &[ROWS, c]).unwrap();
    // 3: each device's rows go to the next device.
    let pairs: Vec<(i64, i64)> = (0..n).map(|i| (i, (i + 1) % n)).collect();
    let rolled = b.collective_permute(x, &pairs).unwrap();
    // 4: local piece of a replicated value at partition-id * k.
    let pid = b.partition_id().unwrap();
    let pid = b.convert(pid, ElementType::S32).unwrap();
    let kk = b.scalar(ElementType::S32, k as f64).unwrap();
    let start = b.binary(Opcode::Multiply, pid, kk).unwrap();
    let local = b.dynamic_slice(y, &[start], &[k]).unwrap();
    // 5: reduce-scatter of the replicas of y.
    let scaled = b.reduce_scatter(y, 0, Opcode::Add, all).unwrap();
    let root = b
        .tuple(&[gathered, total, columns, rolled, local, scaled])
        .unwrap();
    m.set_root(e, root);
    tessera_hlo::verify::verify(&m, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    m
}

#[test]
fn built_collectives_run_on_2_4_and_8_devices() {
    let xs: Vec<f32> = (0..ROWS * COLS).map(|i| (i % 13) as f32 - 6.0).collect();
    let ys: Vec<f32> = (0..ROWS).map(|i| i as f32 * 0.5 - 1.0).collect();
    let inputs = vec![
        HostValue::Array(HostArray::f32(&[ROWS, COLS], &xs).unwrap()),
        HostValue::Array(HostArray::f32(&[ROWS], &ys).unwrap()),
    ];
    for n in [2, 4, 8] {
        let orig = original(n);
        let part = partitioned(n);
        // One reduction computation serves the reduce, the all-reduce and the reduce-scatter.
        assert_eq!(part.computations().len(), 2, "{}", part.to_text());
        let report = check_equivalence(
            client(),
            &orig,
            &part,
            n as usize,
            &inputs,
            CompareOptions::default(),
        )
        .unwrap();
        assert!(report.passed(), "{n} devices: {report}\n{}", part.to_text());
        assert_eq!(report.outputs.len(), 6);
    }
}

/// The same program with the rows sent two devices on instead of one is caught: the test can
/// fail.
#[test]
fn a_wrong_permutation_is_caught() {
    let n = 4;
    let mut part = partitioned(n);
    let cp = part
        .computations()
        .iter()
        .flat_map(|&c| part.comp(c).instructions().to_vec())
        .find(|&i| part.instr(i).opcode() == Opcode::CollectivePermute)
        .unwrap();
    part.instr_mut(cp).attrs.source_target_pairs = Some((0..n).map(|i| (i, (i + 2) % n)).collect());
    let xs: Vec<f32> = (0..ROWS * COLS).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..ROWS).map(|i| i as f32).collect();
    let inputs = vec![
        HostValue::Array(HostArray::f32(&[ROWS, COLS], &xs).unwrap()),
        HostValue::Array(HostArray::f32(&[ROWS], &ys).unwrap()),
    ];
    let report = check_equivalence(
        client(),
        &original(n),
        &part,
        n as usize,
        &inputs,
        CompareOptions::default(),
    )
    .unwrap();
    assert!(!report.passed());
    let failed: Vec<usize> = (0..6).filter(|&k| !report.outputs[k].passed()).collect();
    assert_eq!(failed, [3], "{report}");
}
