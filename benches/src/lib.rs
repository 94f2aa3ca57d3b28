//! Generated inputs for the workspace's scaling benchmark (`benches/scaling.rs`) and the
//! cost regression tests (`tests/linear.rs`): module families whose size is one number, so
//! that the time of parse and of every pass can be fitted against it
//! ([`tessera_remat::gen::growth_exponent`]).
//!
//! - [`call_chain`]: computation `c_i` calls `c_{i-1}`, the entry calls the last: the input
//!   that made `inline` quadratic (the seed of `../shared/robustness/gencalls.py`).
//! - [`flat_calls`]: the entry calls `n` computations once each; every callee returns a tuple
//!   whose element the entry reads with a get-tuple-element, so inlining leaves `n`
//!   get-tuple-element(tuple) pairs for `tuple-simplify` and dead halves for `dce`.
//! - [`remat_chain`]: a call chain in which every level keeps a value live across its call,
//!   so rematerialization under a low limit recomputes something at every level (the input
//!   that overflowed the stack when the pass walked into callees by recursion).
//! - [`wide`]: one computation of about `n` instructions with the same tuple, get-tuple-element
//!   and dead-value patterns, for passes whose cost grows with one computation's size.
//!
//! Every family is valid HLO over `f32[4]`, runs on PJRT, and has a 2-way tiled sharding on
//! the entry parameter so that `sharding-propagation` has something to carry (except
//! [`remat_chain`]); those modules say `num_partitions=2`, so that `spmd-partitioning` takes
//! them too.
//!
//! [`on_more_devices`] makes the device-count variants of a real sharded module for the
//! partitioner's benchmark (`benches/spmd.rs`).

use std::fmt::Write;

use tessera_hlo::sharding::SubgroupType;
use tessera_hlo::{Module, Sharding, ShardingKind, TileAssignment};

const PARAM: &str = "f32[4] parameter(0), sharding={devices=[2]<=[2]}";

/// `depth` computations `%c0` .. `%c{depth-1}` in one call chain, after the `header` line:
/// `%c0` negates its parameter `%x`, each other `%cI` holds `level(I)` (which calls
/// `%c{I-1}`), and the entry passes its parameter (`%p = PARAM`) to the last.
fn chain(header: &str, depth: usize, level: impl Fn(usize) -> String, param: &str) -> String {
    let mut s = format!(
        "{header}\n\n%c0 (x: f32[4]) -> f32[4] {{\n  %x = f32[4] parameter(0)\n  ROOT %r = f32[4] negate(%x)\n}}\n\n"
    );
    for i in 1..depth {
        let _ = write!(
            s,
            "%c{i} (x: f32[4]) -> f32[4] {{\n  %x = f32[4] parameter(0)\n{}}}\n\n",
            level(i)
        );
    }
    let _ = write!(
        s,
        "ENTRY %main (p: f32[4]) -> f32[4] {{\n  %p = {param}\n  ROOT %c = f32[4] call(%p), to_apply=%c{}\n}}\n",
        depth.max(1) - 1
    );
    s
}

/// `depth` computations in one call chain (`3 depth + 2` instructions).
pub fn call_chain(depth: usize) -> String {
    let level = |i: usize| {
        format!(
            "  %y = f32[4] call(%x), to_apply=%c{}\n  ROOT %r = f32[4] add(%y, %x)\n",
            i - 1
        )
    };
    chain(
        "HloModule call_chain, num_partitions=2",
        depth,
        level,
        PARAM,
    )
}

/// `depth` computations in one call chain, each holding `%n = negate(x)` across its call to
/// the level below and adding it to the call's result afterwards (`4 depth`
/// instructions). The module is scheduled in text order (a memory scheduler would move the
/// negate after the call by itself). The entry parameter is unsharded: this family is for
/// the walks over the call graph (scheduling, liveness, rematerialization).
pub fn remat_chain(depth: usize) -> String {
    let level = |i: usize| {
        format!(
            "  %n = f32[4] negate(%x)\n  %y = f32[4] call(%x), to_apply=%c{}\n  ROOT %r = f32[4] add(%y, %n)\n",
            i - 1
        )
    };
    chain(
        "HloModule remat_chain, is_scheduled=true",
        depth,
        level,
        "f32[4] parameter(0)",
    )
}

/// `n` computations, each called once from the entry (`6 n + 1` instructions).
pub fn flat_calls(n: usize) -> String {
    let mut s = String::from("HloModule flat_calls, num_partitions=2\n\n");
    for i in 0..n {
        let _ = write!(
            s,
            "%f{i} (x: f32[4]) -> (f32[4], f32[4]) {{\n  %x = f32[4] parameter(0)\n  %n = f32[4] negate(%x)\n  %e = f32[4] exponential(%x)\n  ROOT %t = (f32[4], f32[4]) tuple(%n, %e)\n}}\n\n"
        );
    }
    let _ = writeln!(s, "ENTRY %main (p: f32[4]) -> f32[4] {{\n  %p = {PARAM}");
    let mut acc = "p".to_string();
    for i in 0..n {
        let _ = writeln!(
            s,
            "  %c{i} = (f32[4], f32[4]) call(%{acc}), to_apply=%f{i}\n  %g{i} = f32[4] get-tuple-element(%c{i}), index=0\n  %a{i} = f32[4] add(%g{i}, %p)"
        );
        acc = format!("a{i}");
    }
    let _ = writeln!(s, "  ROOT %out = f32[4] copy(%{acc})\n}}");
    s
}

/// One computation of about `n` instructions (blocks of five: a tuple, a get-tuple-element
/// of it, a negate, a dead exponential, an add).
pub fn wide(n: usize) -> String {
    let mut s =
        String::from("HloModule wide, num_partitions=2\n\nENTRY %main (p: f32[4]) -> f32[4] {\n");
    let _ = writeln!(s, "  %p = {PARAM}");
    let mut acc = "p".to_string();
    for i in 0..n.div_ceil(5) {
        let _ = writeln!(
            s,
            "  %t{i} = (f32[4], f32[4]) tuple(%{acc}, %p)\n  %g{i} = f32[4] get-tuple-element(%t{i}), index=0\n  %n{i} = f32[4] negate(%g{i})\n  %d{i} = f32[4] exponential(%n{i})\n  %a{i} = f32[4] add(%n{i}, %p)"
        );
        acc = format!("a{i}");
    }
    let _ = writeln!(s, "  ROOT %out = f32[4] copy(%{acc})\n}}");
    s
}

/// Every pass the `tessera` binary registers: the one registry, kept in `tessera-compile`.
pub use tessera_compile::registry;

/// `m` (sharded for `m.config.num_partitions` devices) on `factor` times as many devices,
/// every piece held by `factor` times as many devices: old device `d` becomes devices
/// `d * factor .. (d + 1) * factor`, each tiled sharding gets (or widens) a replicated last
/// tile dimension, and `num_partitions` is multiplied. The per-device shapes and the tiles
/// stay as they were, so a partitioner does the same work on larger device groups: what its
/// cost does with the device count alone. A maximal sharding's device `d` becomes
/// `d * factor`; replicated and manual shardings are kept; named ones and subgroups other
/// than replicated are refused (an error naming the instruction).
pub fn on_more_devices(m: &mut Module, factor: i64) -> Result<(), String> {
    if factor < 1 {
        return Err(format!("factor {factor}: expected at least 1"));
    }
    fn widen(s: &mut Sharding, factor: i64) -> Result<(), String> {
        match &mut s.kind {
            ShardingKind::Replicated | ShardingKind::Manual | ShardingKind::Unknown => Ok(()),
            ShardingKind::Maximal(d) => {
                *d *= factor;
                Ok(())
            }
            ShardingKind::Tuple(leaves) => leaves.iter_mut().try_for_each(|l| widen(l, factor)),
            ShardingKind::Tiled(t) => {
                if !t.last_tile_dims.is_empty() && t.last_tile_dims != [SubgroupType::Replicated] {
                    return Err(format!("subgroups {:?} are not widened", t.last_tile_dims));
                }
                let old = &t.tile_assignment;
                let mut dims: Vec<i64> = old.dims().to_vec();
                let old_devices = old.devices();
                // Row-major over `dims ++ [factor]`: each old device followed by its copies.
                let devices: Vec<i64> = old_devices
                    .iter()
                    .flat_map(|&d| (0..factor).map(move |r| d * factor + r))
                    .collect();
                let replicated_last =
                    t.replicate_on_last_tile_dim || t.last_tile_dims == [SubgroupType::Replicated];
                if replicated_last {
                    *dims.last_mut().expect("a replicated tile dimension") *= factor;
                } else {
                    dims.push(factor);
                }
                t.tile_assignment = TileAssignment::Explicit {
                    dims: dims.iter().copied().collect(),
                    devices,
                }
                .canonical();
                t.replicate_on_last_tile_dim = true;
                t.last_tile_dims.clear();
                Ok(())
            }
            other => Err(format!("{other:?} shardings are not widened")),
        }
    }
    let comps: Vec<_> = m.computations().to_vec();
    for c in comps {
        let ids = m.comp(c).instructions().to_vec();
        for id in ids {
            if let Some(s) = m.instr_mut(id).sharding.as_mut() {
                widen(s, factor).map_err(|e| format!("%{}: {e}", m.instr(id).name()))?;
            }
        }
    }
    m.config.num_partitions *= factor;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::text::{parse_module, print_module, PrintOptions};

    #[test]
    fn widening_keeps_tiles_and_replicates_each_piece_more() {
        let text = "HloModule m, num_partitions=8\n\nENTRY %e (p: f32[8,4]) -> f32[8,4] {\n  \
            %p = f32[8,4] parameter(0), sharding={devices=[2,4]<=[8]}\n  \
            %a = f32[8,4] negate(%p), sharding={devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}\n  \
            %b = f32[8,4] abs(%a), sharding={maximal device=3}\n  \
            ROOT %c = f32[8,4] copy(%b), sharding={replicated}\n}\n";
        let mut m = parse_module(text).unwrap();
        on_more_devices(&mut m, 8).unwrap();
        let out = print_module(&m, &PrintOptions::default());
        assert!(out.contains("num_partitions=64"), "{out}");
        assert!(
            out.contains("sharding={devices=[2,4,8]<=[64] last_tile_dim_replicate}"),
            "{out}"
        );
        assert!(
            out.contains("sharding={devices=[4,1,16]<=[2,4,8]T(1,0,2) last_tile_dim_replicate}"),
            "{out}"
        );
        assert!(out.contains("sharding={maximal device=24}"), "{out}");
        assert!(out.contains("sharding={replicated}"), "{out}");
        assert!(on_more_devices(&mut m, 0).is_err());
    }
}
