//! `tessera summary`: a few lines that say what a module is.

use std::collections::BTreeMap;
use std::fmt::Write;

use tessera_hlo::verify::shape_str;
use tessera_hlo::{Module, Opcode, Shape};

/// Module name, computations, instruction counts (top opcodes), entry parameters with their
/// shapes, bytes and shardings, and how many instructions carry a sharding or are collectives.
pub fn summarize(m: &Module) -> String {
    let mut out = String::new();
    let mut per_op: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut total, mut sharded, mut collectives) = (0usize, 0usize, 0usize);
    for &c in m.computations() {
        for &i in m.comp(c).instructions() {
            let ins = m.instr(i);
            total += 1;
            *per_op.entry(ins.opcode().name()).or_default() += 1;
            sharded += ins.sharding.is_some() as usize;
            collectives += ins.opcode().is_collective() as usize;
        }
    }
    let _ = writeln!(
        out,
        "module {}: {} computations, {} instructions",
        m.name,
        m.computations().len(),
        total
    );
    let _ = writeln!(
        out,
        "replicas {}, partitions {}, scheduled {}",
        m.config.replica_count,
        m.config.num_partitions,
        m.schedule.is_some()
    );
    let _ = writeln!(
        out,
        "instructions with a sharding: {sharded}; collectives: {collectives}"
    );
    let mut ops: Vec<(&str, usize)> = per_op.into_iter().collect();
    ops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let top: Vec<String> = ops
        .iter()
        .take(10)
        .map(|(o, n)| format!("{o} {n}"))
        .collect();
    let _ = writeln!(out, "top opcodes: {}", top.join(", "));
    if let Some(entry) = m.entry() {
        let comp = m.comp(entry);
        let _ = writeln!(
            out,
            "entry {} with {} parameters:",
            comp.name(),
            comp.num_parameters()
        );
        let mut bytes = 0i64;
        for p in comp.parameters() {
            let ins = m.instr(p);
            let size: i64 = leaf_bytes(&ins.shape);
            bytes += size;
            let sharding = if ins.sharding.is_some() {
                " (sharded)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {:>3} {} {} {} bytes{}",
                ins.attrs.parameter_number,
                ins.name(),
                shape_str(&ins.shape),
                size,
                sharding
            );
        }
        let _ = writeln!(out, "parameter bytes in all: {bytes}");
        if let Some(root) = comp.root() {
            let r = m.instr(root);
            let kind = if r.opcode() == Opcode::Tuple {
                "tuple root"
            } else {
                "root"
            };
            let _ = writeln!(out, "{kind} {}: {}", r.name(), shape_str(&r.shape));
        }
    }
    out
}

fn leaf_bytes(shape: &Shape) -> i64 {
    match shape {
        Shape::Tuple(e) => e.iter().map(leaf_bytes).sum(),
        s => s.byte_size(8),
    }
}
