//! jax's explicit sharding mode marks a partial sum that is not reduced yet as `unreduced`:
//! `{unreduced}`, or a subgroup `last_tile_dims={unreduced}` (mixed with replicated ones). It
//! is a placement hint on a value whose meaning stays the global sum: the partitioner decides
//! where the reduction happens anyway (an all-reduce, or a reduce-scatter where the consumer
//! wants the value tiled, as XLA does at the `reshard` that ends the unreduced stretch).
//!
//! So before propagation and partitioning, [`lower_unreduced`] takes the hint out: a
//! `Sharding` custom-call that only says "unreduced" is bypassed (its consumers read its
//! operand, and propagation gives the producer the sharding its consumers want), and an
//! unreduced subgroup on any other instruction becomes a replicated one (the value whole on
//! every device of the group). Values are unchanged. On the entry's parameters and result an
//! unreduced sharding would make each device's piece a partial sum of what the caller passes
//! or receives; that is refused.

use tessera_hlo::sharding::SubgroupType;
use tessera_hlo::{InstrId, Module, Opcode, Sharding, ShardingKind};

/// Whether `s` (or a tuple element of it) is unreduced anywhere.
fn has_unreduced(s: &Sharding) -> bool {
    match &s.kind {
        ShardingKind::Unreduced => true,
        ShardingKind::Tuple(e) => e.iter().any(has_unreduced),
        ShardingKind::Tiled(t) => t.subgroup_types().contains(&SubgroupType::Unreduced),
        ShardingKind::Named(n) => !n.unreduced.is_empty(),
        _ => false,
    }
}

/// `s` (of a value of `shape`) with every unreduced part made replicated; a named sharding
/// is read as its tiled form first.
fn replicated_for_unreduced(s: &Sharding, shape: &tessera_hlo::Shape) -> Result<Sharding, String> {
    if s.has_named() {
        let tiled = s.to_tiled_for(shape).map_err(|e| e.to_string())?;
        return replicated_for_unreduced(&tiled, shape);
    }
    let mut out = match &s.kind {
        ShardingKind::Unreduced => Sharding::replicated(),
        ShardingKind::Tuple(e) => {
            let leaves: Vec<tessera_hlo::Shape> = match shape {
                tessera_hlo::Shape::Tuple(t) => t.clone(),
                other => vec![other.clone(); e.len()],
            };
            Sharding::tuple(
                e.iter()
                    .zip(&leaves)
                    .map(|(x, sh)| replicated_for_unreduced(x, sh))
                    .collect::<Result<Vec<_>, String>>()?,
            )
        }
        ShardingKind::Tiled(t) if has_unreduced(s) => {
            let types: Vec<SubgroupType> = t
                .subgroup_types()
                .into_iter()
                .map(|k| match k {
                    SubgroupType::Unreduced => SubgroupType::Replicated,
                    k => k,
                })
                .collect();
            Sharding::subgroup(t.tile_assignment.clone(), &types)
        }
        _ => s.clone(),
    };
    out.metadata = s.metadata.clone();
    Ok(out)
}

/// Whether `id` is a `Sharding` custom-call (jax's sharding constraint).
fn is_sharding_call(m: &Module, id: InstrId) -> bool {
    let i = m.instr(id);
    i.opcode() == Opcode::CustomCall
        && i.attrs
            .custom_call
            .as_ref()
            .is_some_and(|c| c.target == "Sharding")
}

/// Takes jax's `unreduced` hints out of `m` (see the module text). Returns how many
/// instructions changed; refuses an unreduced entry parameter or result, naming it.
pub fn lower_unreduced(m: &mut Module) -> Result<usize, String> {
    let entry = m.entry();
    let ends: Vec<InstrId> = entry
        .map(|e| {
            let c = m.comp(e);
            c.parameters().chain(c.root()).collect()
        })
        .unwrap_or_default();
    for &id in &ends {
        let i = m.instr(id);
        if i.sharding.as_ref().is_some_and(has_unreduced) {
            return Err(format!(
                "%{}: an unreduced entry {} (each device holding a partial sum of it) is not \
                 supported; reduce it inside the function (jax.sharding.reshard)",
                i.name(),
                if i.opcode() == Opcode::Parameter {
                    "parameter"
                } else {
                    "result"
                }
            ));
        }
    }
    let ids: Vec<InstrId> = m
        .computations()
        .iter()
        .flat_map(|&c| m.comp(c).instructions().to_vec())
        .collect();
    let mut changed = 0;
    for id in ids {
        let i = m.instr(id);
        let Some(s) = i.sharding.as_ref().filter(|s| has_unreduced(s)) else {
            continue;
        };
        let hint_only = is_sharding_call(m, id)
            && m.operands(id).len() == 1
            && m.comp(i.parent()).root().is_none_or(|r| r != id);
        if hint_only {
            let operand = m.operands(id)[0];
            // Where the hint's only consumer is the `reshard` that ends it (another Sharding
            // custom-call), the producer takes the reshard's sharding: the partial sums are
            // reduced straight into it (a reduce-scatter when it is tiled), as XLA does.
            let users = m.instr(id).users().to_vec();
            let target = match users.as_slice() {
                [u] if is_sharding_call(m, *u) => m.instr(*u).sharding.clone(),
                _ => None,
            };
            if m.instr(operand).sharding.is_none() {
                if let Some(t) = target.filter(|t| !has_unreduced(t)) {
                    m.instr_mut(operand).sharding = Some(t);
                }
            }
            m.replace_all_uses_with(id, operand)
                .map_err(|e| format!("%{}: {e}", m.instr(id).name()))?;
            m.remove_instruction(id)
                .map_err(|e| format!("%{}: {e}", m.instr(id).name()))?;
        } else {
            let lowered =
                replicated_for_unreduced(s, &i.shape).map_err(|e| format!("%{}: {e}", i.name()))?;
            m.instr_mut(id).sharding = Some(lowered);
        }
        changed += 1;
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::text::{parse_module, sharding_to_string};

    fn sharding_of(m: &Module, name: &str) -> Option<String> {
        let e = m.entry().unwrap();
        m.comp(e)
            .instructions()
            .iter()
            .map(|&i| m.instr(i))
            .find(|i| i.name() == name)
            .map(|i| {
                i.sharding
                    .as_ref()
                    .map(sharding_to_string)
                    .unwrap_or_default()
            })
    }

    #[test]
    fn hints_go_and_subgroups_replicate() {
        let mut m = parse_module(
            "HloModule u, num_partitions=8\n\nENTRY e {\n  \
             a = f32[8,16] parameter(0), sharding={devices=[2,4]<=[8]}\n  \
             b = f32[16,4] parameter(1), sharding={devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}\n  \
             d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
             h = f32[8,4] custom-call(d), custom_call_target=\"Sharding\", sharding={devices=[2,1,4]<=[8] last_tile_dims={unreduced}}\n  \
             r = f32[8,4] custom-call(h), custom_call_target=\"Sharding\", sharding={devices=[2,4]<=[8]}\n  \
             n = f32[8,4] negate(r), sharding={devices=[2,1,2,2]<=[8] last_tile_dims={unreduced, replicated}}\n  \
             ROOT t = f32[8,4] copy(n), sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}\n}\n",
        )
        .unwrap();
        assert_eq!(lower_unreduced(&mut m).unwrap(), 2);
        assert_eq!(sharding_of(&m, "h"), None, "the hint is gone");
        // The dot takes the reshard's sharding: its partial sums reduce straight into it.
        assert_eq!(
            sharding_of(&m, "d").as_deref(),
            Some("{devices=[2,4]<=[8]}")
        );
        assert_eq!(
            sharding_of(&m, "n").as_deref(),
            Some("{devices=[2,1,4]<=[8] last_tile_dim_replicate}")
        );
    }

    #[test]
    fn an_unreduced_entry_parameter_is_refused_by_name() {
        let mut m = parse_module(
            "HloModule u\n\nENTRY e {\n  \
             p = f32[4] parameter(0), sharding={unreduced}\n  ROOT n = f32[4] negate(p)\n}\n",
        )
        .unwrap();
        let e = lower_unreduced(&mut m).unwrap_err();
        assert!(e.starts_with("%p: an unreduced entry parameter"), "{e}");
    }
}
