//! The equivalence harness on XLA's own partitioning results (testdata/spmd_pairs, made by
//! scripts/fixtures/make_spmd_pairs.py): every `before` module (run on 1 device, shardings ignored)
//! agrees with its `after` module (run on `num_partitions` devices), and a partitioned module
//! with one collective replaced by a local stand-in of the same shape (a copy of its operand, or a concatenation or
//! slice of it) is caught.

mod common;

use std::path::PathBuf;

use tessera_hlo::{InstrId, Instruction, Module, Opcode};
use tessera_runtime::harness::{self, check_equivalence, CompareOptions};

use common::client;

fn pairs_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/spmd_pairs"
    ))
}

fn load(name: &str) -> Module {
    let path = pairs_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    tessera_hlo::text::parse_module(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every pair: (case name, before, after, number of devices).
fn pairs() -> Vec<(String, Module, Module, usize)> {
    let mut names: Vec<String> = std::fs::read_dir(pairs_dir())
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            n.strip_suffix(".before.hlo").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(
        names.len() >= 7,
        "expected the seven pairs, found {names:?}"
    );
    names
        .into_iter()
        .map(|n| {
            let before = load(&format!("{n}.before.hlo"));
            let after = load(&format!("{n}.after.hlo"));
            let devices = after.config.num_partitions as usize;
            assert!(devices > 1, "{n}: num_partitions={devices}");
            (n, before, after, devices)
        })
        .collect()
}

#[test]
fn xla_partitioned_pairs_are_equivalent() {
    for (name, before, after, devices) in pairs() {
        for seed in [1, 2] {
            let inputs = harness::random_inputs(&before, seed).unwrap();
            let report = check_equivalence(
                client(),
                &before,
                &after,
                devices,
                &inputs,
                CompareOptions::default(),
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(report.passed(), "{name} (seed {seed}):\n{report}");
            assert!(!report.outputs.is_empty());
            // The check compared real data: the outputs are not all zero.
            if seed == 1 {
                let expected = harness::run_original(client(), &before, &inputs).unwrap();
                assert!(
                    expected.iter().any(|a| a.data.iter().any(|&b| b != 0)),
                    "{name}: all-zero outputs prove nothing"
                );
            }
        }
    }
}

/// The collectives of a module's entry computation.
fn collectives(m: &Module) -> Vec<InstrId> {
    let e = m.entry().unwrap();
    m.comp(e)
        .instructions()
        .iter()
        .copied()
        .filter(|&i| {
            matches!(
                m.instr(i).opcode(),
                Opcode::AllReduce | Opcode::AllGather | Opcode::ReduceScatter | Opcode::AllToAll
            )
        })
        .collect()
}

/// Replaces collective `target` by a local stand-in of the same shape, keeping the root: a copy
/// of its operand when the shapes agree (all-reduce), else the operand concatenated with itself
/// along the gathered dimension (all-gather) or its leading slice (reduce-scatter).
fn replace_collective(m: &mut Module, target: InstrId) {
    let e = m.entry().unwrap();
    let root = m.comp(e).root().unwrap();
    let i = m.instr(target);
    let operand = i.operands()[0];
    let (op_dims, dims) = (
        m.instr(operand).shape.dims().to_vec(),
        i.shape.dims().to_vec(),
    );
    let (base, shape) = (format!("{}.mutant", i.name()), i.shape.clone());
    let name = m.unique_name(&base);
    let mut stand_in = if op_dims == dims {
        Instruction::new(name, Opcode::Copy, shape).with_operands(&[operand])
    } else {
        let d = (0..dims.len()).find(|&d| dims[d] != op_dims[d]).unwrap();
        if dims[d] > op_dims[d] {
            assert_eq!(dims[d] % op_dims[d], 0, "{base}: gathered dimension");
            let copies = vec![operand; (dims[d] / op_dims[d]) as usize];
            let mut c = Instruction::new(name, Opcode::Concatenate, shape).with_operands(&copies);
            c.attrs.dimensions = Some(vec![d as i64]);
            c
        } else {
            let mut s = Instruction::new(name, Opcode::Slice, shape).with_operands(&[operand]);
            s.attrs.slice = Some(
                dims.iter()
                    .map(|&n| tessera_hlo::attrs::SliceDim {
                        start: 0,
                        limit: n,
                        stride: 1,
                    })
                    .collect(),
            );
            s
        }
    };
    stand_in.metadata = None;
    let new = m.add_instruction(e, stand_in).unwrap();
    m.replace_all_uses_with(target, new).unwrap();
    m.set_root(e, if root == target { new } else { root });
    m.remove_instruction(target).unwrap();
}

#[test]
fn a_missing_collective_is_caught() {
    let mut mutated = 0;
    for (name, before, after, devices) in pairs() {
        // At most three per module keep the test fast (every mutant is compiled).
        for c in collectives(&after).into_iter().take(3) {
            let mut broken = after.clone();
            replace_collective(&mut broken, c);
            let inputs = harness::random_inputs(&before, 1).unwrap();
            let report = check_equivalence(
                client(),
                &before,
                &broken,
                devices,
                &inputs,
                CompareOptions::default(),
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                !report.passed(),
                "{name}: replacing {} by a copy went unnoticed:\n{report}",
                after.instr(c).name()
            );
            assert!(
                report.outputs.iter().any(|o| o.max_abs_error > 1e-3),
                "{name}:\n{report}"
            );
            mutated += 1;
        }
    }
    // All-reduces in matmul_rowcol, matmul_reduce_scatter and reduce_sum_sharded, an all-gather
    // in allgather_uneven, three of the twelve collectives of mlp_train_step.
    assert!(mutated >= 7, "only {mutated} collectives mutated");
}
