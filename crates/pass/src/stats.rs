//! `tessera stats`: what a module holds, counted.

use std::collections::BTreeMap;
use std::fmt::Write;

use tessera_hlo::{Module, Opcode, Shape, ShardingKind};

/// Counts over a whole module.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModuleStats {
    pub name: String,
    pub computations: usize,
    pub instructions: usize,
    /// Instructions per opcode, in opcode order.
    pub per_opcode: BTreeMap<Opcode, usize>,
    /// Instructions with a `sharding=` attribute, per kind (`replicated`, `tiled`, ...).
    pub shardings: BTreeMap<&'static str, usize>,
    /// Per collective opcode: count and bytes of their results (array leaves).
    pub collectives: BTreeMap<Opcode, (usize, i64)>,
    /// Entry parameters: name, shape text, bytes (array leaves).
    pub parameters: Vec<(String, String, i64)>,
}

/// Bytes of every array leaf of a shape.
pub fn array_bytes(shape: &Shape) -> i64 {
    let mut total = 0;
    shape.for_each_subshape(|_, s| {
        if let Shape::Array(a) = s {
            total += a.byte_size();
        }
    });
    total
}

/// `f32[4,8]`, `(f32[4], s32[])`, `token[]`: short shape text without layouts.
pub fn short_shape(shape: &Shape) -> String {
    match shape {
        Shape::Array(a) => {
            let dims: Vec<String> = a
                .dims
                .iter()
                .enumerate()
                .map(|(k, &d)| {
                    if d == tessera_hlo::shape::UNBOUNDED_DIM {
                        "?".to_string()
                    } else if a.is_dynamic_dim(k) {
                        format!("<={d}")
                    } else {
                        d.to_string()
                    }
                })
                .collect();
            format!("{}[{}]", a.ty.name(), dims.join(","))
        }
        Shape::Tuple(e) => {
            let parts: Vec<String> = e.iter().map(short_shape).collect();
            format!("({})", parts.join(", "))
        }
        Shape::Token => "token[]".into(),
        Shape::Opaque => "opaque[]".into(),
        Shape::Buffer(b) => format!("b({})", short_shape(b)),
    }
}

fn sharding_kind(k: &ShardingKind) -> &'static str {
    match k {
        ShardingKind::Replicated => "replicated",
        ShardingKind::Manual => "manual",
        ShardingKind::Unknown => "unknown",
        ShardingKind::Maximal(_) => "maximal",
        ShardingKind::Tiled(_) => "tiled",
        ShardingKind::Tuple(_) => "tuple",
        ShardingKind::Unreduced => "unreduced",
        ShardingKind::Named(_) => "named",
    }
}

fn is_collective(op: Opcode) -> bool {
    op.is_collective()
        || matches!(
            op,
            Opcode::AllReduceDone | Opcode::AllGatherDone | Opcode::CollectivePermuteDone
        )
}

impl ModuleStats {
    pub fn collect(module: &Module) -> ModuleStats {
        let mut s = ModuleStats {
            name: module.name.clone(),
            computations: module.computations().len(),
            ..ModuleStats::default()
        };
        for &c in module.computations() {
            for &id in module.comp(c).instructions() {
                let i = module.instr(id);
                s.instructions += 1;
                *s.per_opcode.entry(i.opcode()).or_default() += 1;
                if let Some(sh) = &i.sharding {
                    *s.shardings.entry(sharding_kind(&sh.kind)).or_default() += 1;
                }
                // Count the start of async pairs once (the done has the same payload).
                if is_collective(i.opcode()) && !i.opcode().name().ends_with("-done") {
                    let e = s.collectives.entry(i.opcode()).or_default();
                    e.0 += 1;
                    e.1 += array_bytes(&i.shape);
                }
            }
        }
        if let Some(entry) = module.entry() {
            for p in module.comp(entry).parameters() {
                let i = module.instr(p);
                s.parameters.push((
                    i.name().to_string(),
                    short_shape(&i.shape),
                    array_bytes(&i.shape),
                ));
            }
        }
        s
    }

    /// The report `tessera stats` prints.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "module {}", self.name);
        let _ = writeln!(o, "computations: {}", self.computations);
        let _ = writeln!(o, "instructions: {}", self.instructions);
        let mut ops: Vec<(&Opcode, &usize)> = self.per_opcode.iter().collect();
        ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.name().cmp(b.0.name())));
        let _ = writeln!(o, "\ninstructions per opcode:");
        for (op, n) in ops {
            let _ = writeln!(o, "  {:<28} {n:>8}", op.name());
        }
        let total_sharded: usize = self.shardings.values().sum();
        let _ = writeln!(o, "\nshardings: {total_sharded}");
        for (k, n) in &self.shardings {
            let _ = writeln!(o, "  {k:<28} {n:>8}");
        }
        let (cn, cb) = self
            .collectives
            .values()
            .fold((0, 0), |(a, b), (n, x)| (a + n, b + x));
        let _ = writeln!(o, "\ncollectives: {cn} ({})", human_bytes(cb));
        for (op, (n, b)) in &self.collectives {
            let _ = writeln!(o, "  {:<28} {n:>8}  {:>12}", op.name(), human_bytes(*b));
        }
        let pb: i64 = self.parameters.iter().map(|p| p.2).sum();
        let _ = writeln!(
            o,
            "\nentry parameters: {} ({})",
            self.parameters.len(),
            human_bytes(pb)
        );
        for (name, shape, b) in &self.parameters {
            let _ = writeln!(o, "  {name:<28} {shape}  {}", human_bytes(*b));
        }
        o
    }
}

/// `1536 B`, `12.0 KiB`, `3.5 MiB`, `1.2 GiB` (binary units, exact bytes below 1 KiB).
pub fn human_bytes(b: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b.abs() < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v.abs() >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testutil::*;
    use tessera_hlo::Sharding;

    #[test]
    fn counts_opcodes_shardings_collectives_and_parameters() {
        let mut b = Builder::new("m");
        let c = b.comp("main");
        let p = b.param(c, 0, f32v(1024));
        let q = b.param(c, 1, tuple(&[f32s(), Shape::Token]));
        let ar = b.op(c, "ar", Opcode::AllReduce, f32v(1024), &[p]);
        let ag = b.op(c, "ag", Opcode::AllGather, f32v(2048), &[ar]);
        let n = b.op(c, "n", Opcode::Negate, f32v(2048), &[ag]);
        b.m.instr_mut(n).sharding = Some(Sharding::replicated());
        b.m.instr_mut(ag).sharding = Some(Sharding::iota_tiled(&[2]));
        let _ = q;
        b.m.set_entry(c);
        let s = ModuleStats::collect(&b.m);
        assert_eq!(s.instructions, 5);
        assert_eq!(s.per_opcode[&Opcode::Parameter], 2);
        assert_eq!(s.shardings["replicated"], 1);
        assert_eq!(s.shardings["tiled"], 1);
        assert_eq!(s.collectives[&Opcode::AllReduce], (1, 4096));
        assert_eq!(s.collectives[&Opcode::AllGather], (1, 8192));
        assert_eq!(
            s.parameters,
            [
                ("main.p0".to_string(), "f32[1024]".to_string(), 4096),
                ("main.p1".to_string(), "(f32[], token[])".to_string(), 4)
            ]
        );
        let text = s.render();
        assert!(text.contains("collectives: 2 (12.0 KiB)"), "{text}");
        assert!(text.contains("entry parameters: 2 (4.0 KiB)"), "{text}");
        assert!(
            text.contains("  parameter                           2"),
            "{text}"
        );
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
