//! The equivalence harness on the real plugin, with modules built through the IR API: a
//! correct hand-partitioned module passes, and the same module with its all-reduce replaced by
//! a copy fails (wrong values and replicas that disagree).

mod common;

use tessera_hlo::attrs::ReplicaGroups;
use tessera_hlo::{
    CompId, ElementType, InstrId, Instruction, Literal, Module, Opcode, Shape, Sharding,
    TileAssignment,
};
use tessera_runtime::harness::{self, run_partitioned};
use tessera_runtime::{check_equivalence, CompareOptions, HostArray, HostValue};

use common::client;

fn f32s(dims: &[i64]) -> Shape {
    Shape::array(ElementType::F32, dims)
}

fn add_computation(m: &mut Module, name: &str) -> CompId {
    let c = m.add_computation(name).unwrap();
    let x = m
        .add_instruction(c, param(&format!("{name}.x"), 0, f32s(&[])))
        .unwrap();
    let y = m
        .add_instruction(c, param(&format!("{name}.y"), 1, f32s(&[])))
        .unwrap();
    let sum = m
        .add_instruction(
            c,
            Instruction::new(format!("{name}.sum"), Opcode::Add, f32s(&[])).with_operands(&[x, y]),
        )
        .unwrap();
    m.set_root(c, sum);
    c
}

fn param(name: &str, n: i64, shape: Shape) -> Instruction {
    let mut i = Instruction::new(name, Opcode::Parameter, shape);
    i.attrs.parameter_number = n;
    i
}

/// `(x + y, sum(x + y))` with x, y: f32[len]; with `shard = Some(pieces)` the per-device
/// program on 2 devices (an all-reduce makes the sum global), else the original with
/// shardings `devices=[2]` on x, y and the sum, `replicated` on the total.
fn sum_module(len: i64, piece: Option<i64>) -> (Module, InstrId) {
    let mut m = Module::new(if piece.is_some() { "sum_spmd" } else { "sum" });
    let add = add_computation(&mut m, "add");
    let e = m.add_computation("main").unwrap();
    m.set_entry(e);
    let n = piece.unwrap_or(len);
    let tiled = Sharding::tiled(TileAssignment::iota(&[2]), false);
    let mut x = param("x", 0, f32s(&[n]));
    let mut y = param("y", 1, f32s(&[n]));
    if piece.is_none() {
        x.sharding = Some(tiled.clone());
        y.sharding = Some(tiled.clone());
    }
    let x = m.add_instruction(e, x).unwrap();
    let y = m.add_instruction(e, y).unwrap();
    let s = m
        .add_instruction(
            e,
            Instruction::new("s", Opcode::Add, f32s(&[n])).with_operands(&[x, y]),
        )
        .unwrap();
    let mut zero = Instruction::new("zero", Opcode::Constant, f32s(&[]));
    zero.attrs.literal = Some(Box::new(Literal::f32(0.0)));
    let zero = m.add_instruction(e, zero).unwrap();
    let mut r = Instruction::new("total", Opcode::Reduce, f32s(&[]))
        .with_operands(&[s, zero])
        .with_called(&[add]);
    r.attrs.dimensions = Some(vec![0]);
    let mut total = m.add_instruction(e, r).unwrap();
    let mut collective = total;
    if piece.is_some() {
        let mut ar = Instruction::new("all-reduce", Opcode::AllReduce, f32s(&[]))
            .with_operands(&[total])
            .with_called(&[add]);
        ar.attrs.channel_id = Some(1);
        ar.attrs.replica_groups = Some(Box::new(ReplicaGroups::Explicit(vec![vec![0, 1]])));
        ar.attrs.use_global_device_ids = true;
        total = m.add_instruction(e, ar).unwrap();
        collective = total;
    }
    let mut root = Instruction::new(
        "root",
        Opcode::Tuple,
        Shape::tuple(vec![f32s(&[n]), f32s(&[])]),
    )
    .with_operands(&[s, total]);
    if piece.is_none() {
        root.sharding = Some(Sharding::tuple(vec![tiled, Sharding::replicated()]));
    }
    let root = m.add_instruction(e, root).unwrap();
    m.set_root(e, root);
    (m, collective)
}

fn inputs(len: i64) -> Vec<HostValue> {
    let x: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..len).map(|i| 1.0 - i as f32).collect();
    vec![
        HostValue::Array(HostArray::f32(&[len], &x).unwrap()),
        HostValue::Array(HostArray::f32(&[len], &y).unwrap()),
    ]
}

#[test]
fn hand_partitioned_sum_is_equivalent() {
    // Even (8 = 2 x 4) and uneven (5 -> padded tiles of 3) splits.
    for (len, piece) in [(8, 4), (5, 3)] {
        let (orig, _) = sum_module(len, None);
        let (part, _) = sum_module(len, Some(piece));
        let ins = inputs(len);
        let expected = harness::run_original(client(), &orig, &ins).unwrap();
        let x: Vec<f32> = (0..len).map(|i| 1.0 - i as f32 * 0.5).collect();
        assert_eq!(expected[0].to_f32().unwrap(), x);
        assert_eq!(expected[1].to_f32().unwrap(), vec![x.iter().sum::<f32>()]);
        let report =
            check_equivalence(client(), &orig, &part, 2, &ins, CompareOptions::default()).unwrap();
        assert!(report.passed(), "{report}");
        assert_eq!(report.outputs.len(), 2);
        assert_eq!(report.outputs[0].shape, format!("f32[{len}]"));
        assert_eq!(report.outputs[1].max_abs_error, 0.0);
    }
}

#[test]
fn pieces_follow_the_shardings_the_partitioned_module_carries() {
    // Propagation may give the root a sharding the original lacked (jax's outputs often have
    // none): the partitioned module's own root sharding says how its pieces lie.
    let (mut orig, _) = sum_module(8, None);
    let (mut part, _) = sum_module(8, Some(4));
    let root = |m: &Module| m.comp(m.entry().unwrap()).root().unwrap();
    let r = root(&orig);
    let chosen = orig.instr_mut(r).sharding.take();
    let r = root(&part);
    part.instr_mut(r).sharding = chosen;
    let report = check_equivalence(
        client(),
        &orig,
        &part,
        2,
        &inputs(8),
        CompareOptions::default(),
    )
    .unwrap();
    assert!(report.passed(), "{report}");
}

#[test]
fn sum_without_its_all_reduce_is_caught() {
    let (orig, _) = sum_module(8, None);
    let (mut part, ar) = sum_module(8, Some(4));
    // Replace the all-reduce by a copy of its operand: each device keeps its partial sum.
    let operand = part.instr(ar).operands()[0];
    let e = part.entry().unwrap();
    let root = part.comp(e).root().unwrap();
    let copy = part
        .add_instruction(
            e,
            Instruction::new("partial", Opcode::Copy, f32s(&[])).with_operands(&[operand]),
        )
        .unwrap();
    // Adding an instruction makes it the root; the tuple stays the root.
    part.set_root(e, root);
    part.replace_all_uses_with(ar, copy).unwrap();
    part.remove_instruction(ar).unwrap();
    let ins = inputs(8);
    let report =
        check_equivalence(client(), &orig, &part, 2, &ins, CompareOptions::default()).unwrap();
    assert!(!report.passed());
    assert!(report.outputs[0].passed(), "{report}");
    let total = &report.outputs[1];
    // x + y = 1 - i/2: device 0 sums i = 0..4 (1), device 1 sums i = 4..8 (-7); total -6.
    // Device 0's value is kept: off by 7.
    assert_eq!(total.replica_mismatch_count, 1);
    let m = &total.replica_mismatches[0];
    assert_eq!(m.leaf, vec![1]);
    assert_eq!((m.reference.0, m.other.0), (0, 1));
    assert_eq!(m.reference.1.as_f64(), 1.0);
    assert_eq!(m.other.1.as_f64(), -7.0);
    assert_eq!(total.mismatched, 1);
    assert!((total.max_abs_error - 7.0).abs() < 1e-6, "{report}");
    let text = report.to_string();
    assert!(text.contains("NOT equivalent on 2 devices"), "{text}");
    assert!(
        text.contains("device 0 has 1.0, device 1 has -7.0"),
        "{text}"
    );
}

#[test]
fn mismatched_parameter_shapes_are_refused() {
    let (orig, _) = sum_module(8, None);
    let (part, _) = sum_module(8, Some(3));
    let e = run_partitioned(client(), &orig, &part, 2, &inputs(8)).unwrap_err();
    assert!(e.to_string().contains("entry parameter 0"), "{e}");
}

#[test]
fn xla_partitions_the_sharded_original_to_the_same_values() {
    let (orig, _) = sum_module(5, None);
    let ins = inputs(5);
    let expected = harness::run_original(client(), &orig, &ins).unwrap();
    let got = harness::run_xla_partitioned(client(), &orig, 2, &ins).unwrap();
    assert_eq!(got.len(), 2);
    for (e, g) in expected.iter().zip(&got) {
        assert_eq!(g.mismatch_count, 0);
        assert_eq!(g.value, HostValue::Array(e.clone()));
    }
}

/// A two-operand all-reduce (which the plugin cannot compile as is, even from XLA's own proto)
/// runs after the harness splits it, with the same sums.
#[test]
fn multi_operand_all_reduce_is_split_for_the_plugin() {
    let text = "HloModule t\n\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n\nENTRY e {\n  a = f32[2]{0} parameter(0)\n  b = f32[1]{0} parameter(1)\n  ar = (f32[2]{0}, f32[1]{0}) all-reduce(a, b), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add\n  g0 = f32[2]{0} get-tuple-element(ar), index=0\n  g1 = f32[1]{0} get-tuple-element(ar), index=1\n  ROOT t = (f32[2]{0}, f32[1]{0}) tuple(g0, g1)\n}\n";
    let m = tessera_hlo::text::parse_module(text).unwrap();
    let prepared = harness::prepare_partitioned(&m, 2).unwrap();
    let e = prepared.entry().unwrap();
    let all_reduces: Vec<_> = prepared
        .comp(e)
        .instructions()
        .iter()
        .filter(|&&i| prepared.instr(i).opcode() == Opcode::AllReduce)
        .map(|&i| prepared.instr(i).operands().len())
        .collect();
    assert_eq!(all_reduces, vec![1, 1]);
    let args = vec![
        vec![
            HostArray::f32(&[2], &[1.0, 2.0]).unwrap(),
            HostArray::f32(&[1], &[5.0]).unwrap(),
        ],
        vec![
            HostArray::f32(&[2], &[10.0, 20.0]).unwrap(),
            HostArray::f32(&[1], &[7.0]).unwrap(),
        ],
    ];
    let outs =
        harness::run_module(client(), &prepared, &harness::per_device_options(2), &args).unwrap();
    for device in &outs {
        assert_eq!(device[0].to_f32().unwrap(), vec![11.0, 22.0]);
        assert_eq!(device[1].to_f32().unwrap(), vec![12.0]);
    }
}
