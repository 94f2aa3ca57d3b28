//! The default verdict in both directions, over generated reductions, dots and convolutions
//! (f32 and bf16, reductions up to 2^20 elements, split 2 to 16 ways), each compiled by
//! Tessera and run on PJRT CPU devices:
//! - every correct partition is *equivalent*, however the split reorders its sums;
//! - every corrupted one is *NOT equivalent*: one all-reduce made a no-op; a wrong device
//!   order (two devices' pieces swapped by a collective-permute, on the output or on the first
//!   operand); one element perturbed by twice the computation's own rounding error, measured.
//!
//! The counts are printed (`cargo test -p tessera-compile --test verdict_property --
//! --nocapture`) and asserted: zero false alarms, zero misses.

use std::sync::OnceLock;

use tessera_compile::{compile, parse_input, verify_on_devices, CompileOptions, Compiled};
use tessera_compile::{Verification, VerifyOptions};
use tessera_hlo::{ElementType, InstrId, Instruction, Literal, Module, Opcode, Shape};
use tessera_runtime::{Client, Outcome};

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| Client::cpu(16).unwrap_or_else(|e| panic!("PJRT CPU client: {e}")))
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Reduce,
    Dot,
    Conv,
}

/// One generated case: `a`-way split of a kept dimension (the output's), `b`-way split of the
/// reduced one; `len` elements summed per output element.
#[derive(Clone, Copy, Debug)]
struct Case {
    kind: Kind,
    ty: &'static str,
    a: i64,
    b: i64,
    len: i64,
}

/// The module text of `c`, with shardings on its parameters and root.
fn module_text(c: &Case) -> String {
    let (t, a, b, d) = (c.ty, c.a, c.b, c.a * c.b);
    // The first operand tiled [a, b] (kept dim over a, reduced dim over b); the output tiled
    // over a and replicated over b.
    let lhs = format!("{{devices=[{a},{b}]<=[{d}]}}");
    let out = if a == 1 {
        "{replicated}".to_string()
    } else {
        format!("{{devices=[{a},1,{b}]<=[{d}] last_tile_dim_replicate}}")
    };
    let add = format!(
        "add {{\n  x = {t}[] parameter(0)\n  y = {t}[] parameter(1)\n  ROOT s = {t}[] add(x, y)\n}}\n\n"
    );
    match c.kind {
        Kind::Reduce => {
            let out1 = if a == 1 {
                "{replicated}".to_string()
            } else {
                format!("{{devices=[{a},{b}]<=[{d}] last_tile_dim_replicate}}")
            };
            format!(
                "HloModule reduce, num_partitions={d}\n\n{add}ENTRY e {{\n  \
                 p = {t}[4,{len}] parameter(0), sharding={lhs}\n  z = {t}[] constant(0)\n  \
                 ROOT r = {t}[4] reduce(p, z), dimensions={{1}}, to_apply=add, sharding={out1}\n}}\n",
                len = c.len
            )
        }
        Kind::Dot => {
            // rhs tiled over b on K, replicated over a: device i*b+j holds K piece j.
            let rhs = if a == 1 {
                format!("{{devices=[{b},1]<=[{d}]}}")
            } else {
                format!("{{devices=[{b},1,{a}]<=[{a},{b}]T(1,0) last_tile_dim_replicate}}")
            };
            format!(
                "HloModule dot, num_partitions={d}\n\nENTRY e {{\n  \
                 x = {t}[4,{len}] parameter(0), sharding={lhs}\n  \
                 y = {t}[{len},6] parameter(1), sharding={rhs}\n  \
                 ROOT r = {t}[4,6] dot(x, y), lhs_contracting_dims={{1}}, \
                 rhs_contracting_dims={{0}}, sharding={out}\n}}\n",
                len = c.len
            )
        }
        Kind::Conv => {
            // lhs [batch 4, width 8, features len/3]: batch over a, features over b; the
            // kernel [3, features, 5] over b on its input features.
            let f = c.len / 3;
            let lhs3 = format!("{{devices=[{a},1,{b}]<=[{d}]}}");
            let rhs = if a == 1 {
                format!("{{devices=[1,{b},1]<=[{d}]}}")
            } else {
                format!("{{devices=[1,{b},1,{a}]<=[{a},{b}]T(1,0) last_tile_dim_replicate}}")
            };
            let out3 = if a == 1 {
                "{replicated}".to_string()
            } else {
                format!("{{devices=[{a},1,1,{b}]<=[{d}] last_tile_dim_replicate}}")
            };
            format!(
                "HloModule conv, num_partitions={d}\n\nENTRY e {{\n  \
                 x = {t}[4,8,{f}] parameter(0), sharding={lhs3}\n  \
                 k = {t}[3,{f},5] parameter(1), sharding={rhs}\n  \
                 ROOT r = {t}[4,8,5] convolution(x, k), window={{size=3 pad=1_1}}, \
                 dim_labels=b0f_0io->b0f, sharding={out3}\n}}\n"
            )
        }
    }
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for kind in [Kind::Reduce, Kind::Dot, Kind::Conv] {
        for ty in ["f32", "bf16"] {
            // (a, b, elements per reduction): 2, 4 and 16 ways, and 8 ways over 2^20.
            let splits: [(i64, i64, i64); 4] = match kind {
                Kind::Conv => [
                    (1, 2, 3 * 512),
                    (2, 4, 3 * 1024),
                    (1, 16, 3 * 2048),
                    (2, 8, 3 * 4096),
                ],
                _ => [(1, 2, 4096), (2, 4, 65536), (1, 16, 16384), (2, 8, 1 << 20)],
            };
            for (a, b, len) in splits {
                out.push(Case {
                    kind,
                    ty,
                    a,
                    b,
                    len,
                });
            }
        }
    }
    out
}

fn verify(original: &Module, compiled: &Compiled) -> Verification {
    verify_on_devices(
        client(),
        original,
        compiled,
        &VerifyOptions {
            seed: 11,
            ..VerifyOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn entry_root(m: &Module) -> InstrId {
    m.comp(m.entry().unwrap()).root().unwrap()
}

/// Every all-reduce of the entry made a no-op (its operand used instead); false when there is
/// none.
fn drop_all_reduces(m: &mut Module) -> bool {
    let entry = m.entry().unwrap();
    let ids: Vec<InstrId> = m
        .comp(entry)
        .instructions()
        .iter()
        .copied()
        .filter(|&i| m.instr(i).opcode() == Opcode::AllReduce)
        .collect();
    for &ar in &ids {
        let operand = m.operands(ar)[0];
        m.replace_all_uses_with(ar, operand).unwrap();
    }
    !ids.is_empty()
}

/// `x` swapped between devices 0 and `other` by a collective-permute, its uses rewired.
fn swap_devices(m: &mut Module, x: InstrId, other: i64, n: i64) {
    let entry = m.entry().unwrap();
    let shape = m.instr(x).shape.clone();
    let mut cp = Instruction::new("swapped", Opcode::CollectivePermute, shape).with_operands(&[x]);
    let pairs = (0..n)
        .map(|d| {
            let to = if d == 0 {
                other
            } else if d == other {
                0
            } else {
                d
            };
            (d, to)
        })
        .collect();
    cp.attrs.source_target_pairs = Some(pairs);
    cp.attrs.channel_id = Some(1_000_000);
    let root = entry_root(m) == x;
    let cp = m.add_instruction(entry, cp).unwrap();
    if root {
        m.set_root(entry, cp);
    } else {
        let users: Vec<InstrId> = m
            .comp(entry)
            .instructions()
            .iter()
            .copied()
            .filter(|&u| u != cp && m.operands(u).contains(&x))
            .collect();
        let edits: Vec<(InstrId, usize, InstrId)> = users
            .iter()
            .flat_map(|&u| {
                m.operands(u)
                    .iter()
                    .enumerate()
                    .filter(|&(_, &o)| o == x)
                    .map(move |(k, _)| (u, k, cp))
                    .collect::<Vec<_>>()
            })
            .collect();
        m.replace_operands(&edits).unwrap();
    }
}

/// The root plus `delta` at its first element (on every device's piece).
fn perturb(m: &mut Module, delta: f64) {
    let entry = m.entry().unwrap();
    let root = entry_root(m);
    let shape = m.instr(root).shape.clone();
    let a = shape.as_array().unwrap().clone();
    let count: i64 = a.dims.iter().product();
    let w = a.ty.byte_size();
    let mut bytes = vec![0u8; count as usize * w];
    match a.ty {
        ElementType::F32 => bytes[..4].copy_from_slice(&(delta as f32).to_le_bytes()),
        ElementType::BF16 => {
            let bits = ((delta as f32).to_bits() >> 16) as u16;
            // Rounded up so that the perturbation is not below delta.
            bytes[..2].copy_from_slice(&(bits + 1).to_le_bytes());
        }
        t => panic!("{t:?}"),
    }
    let mut c = Instruction::new("delta", Opcode::Constant, shape.clone());
    c.attrs.literal = Some(Box::new(
        Literal::from_bytes(Shape::Array(a), bytes).unwrap(),
    ));
    let c = m.add_instruction(entry, c).unwrap();
    let sum = m
        .add_instruction(
            entry,
            Instruction::new("perturbed", Opcode::Add, shape).with_operands(&[root, c]),
        )
        .unwrap();
    m.set_root(entry, sum);
}

#[test]
fn the_default_verdict_has_no_false_alarms_and_no_misses() {
    let (mut correct, mut corrupted, mut not_applicable, mut native_alarms) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    for case in cases() {
        let text = module_text(&case);
        let original = parse_input(text.as_bytes(), "case.hlo").unwrap_or_else(|e| panic!("{e}"));
        let n = case.a * case.b;
        let compiled = compile(original.clone(), &CompileOptions::new(n))
            .unwrap_or_else(|e| panic!("{case:?}: {e}"));
        let v = verify(&original, &compiled);
        correct += 1;
        if v.outcome() != Outcome::Equivalent {
            failures.push(format!("false alarm on {case:?}:\n{v}"));
            continue;
        }
        // What the old verdict (each element within its type's tolerance) would have said.
        native_alarms += v.outputs[0]
            .native
            .is_some_and(|n| n.outside_type_tolerance > 0) as usize;
        let own = v.outputs[0].bound.map(|b| b.own).unwrap_or(0.0);
        let scale = v.outputs[0].bound.map(|b| b.scale).unwrap_or(1.0);
        let mut check = |what: &str, broken: Compiled| {
            corrupted += 1;
            let v = verify(&original, &broken);
            if v.outcome() != Outcome::NotEquivalent {
                failures.push(format!("missed {what} on {case:?}:\n{v}"));
            }
        };

        let mut dropped = compiled.clone();
        if drop_all_reduces(&mut dropped.module) {
            check("a dropped all-reduce", dropped);
        } else {
            not_applicable += 1;
        }

        let mut swapped = compiled.clone();
        if case.a > 1 {
            // Devices 0 and n-1 hold different pieces of the output.
            let root = entry_root(&swapped.module);
            swap_devices(&mut swapped.module, root, n - 1, n);
            check("the output's device order", swapped);
        } else if !matches!(case.kind, Kind::Reduce) {
            // Devices 0 and 1 hold different pieces of the contracted dimension.
            let c = swapped.module.comp(swapped.module.entry().unwrap());
            let x = c.parameter(0).unwrap();
            swap_devices(&mut swapped.module, x, 1, n);
            check("the first operand's device order", swapped);
        } else {
            // A full reduction sums the pieces in any device order: no wrong order exists.
            not_applicable += 1;
        }

        let mut nudged = compiled.clone();
        // Twice the computation's own error (what f32/bf16 rounding did to the reference),
        // and at least one unit of the type at the output's scale.
        let ulp = if case.ty == "bf16" {
            2f64.powi(-8)
        } else {
            2f64.powi(-24)
        };
        perturb(&mut nudged.module, 2.0 * own + ulp * scale.max(1e-30));
        check("one element perturbed", nudged);
    }
    println!(
        "verdict property: {correct} correct partitions ({native_alarms} of them outside their \
         type's per-element tolerance as given), {corrupted} corrupted ones, {not_applicable} \
         corruptions not applicable; {} failures",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
