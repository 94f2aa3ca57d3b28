//! Where a reshard happens, between propagation and partitioning.
//!
//! Propagation gives a chain of layout-only ops (element-wise ops, copies, reshapes,
//! transposes, concatenates) the sharding its inputs arrive with, and the partitioner then
//! reshards once where the chain meets a differently sharded user (an output sharding, most
//! often). The same move can be made earlier: the user's sharding carried back through the
//! chain to its inputs, each input resharded on its own. Where the chain joins several inputs
//! (a concatenate) or only some of them need moving, the inputs together can be cheaper to
//! move than the joined value: jax's `concatenate([x.reshape(..).T, y]).reshape(..).T` with
//! an output split another way moved 10,240 bytes per device at the end, and 9,216 as two
//! reshards of its inputs (XLA's Shardy propagation splits the chain early there too).
//!
//! [`place_reshards`] compares, for every reshard the partitioner would make at an
//! element-wise user (or a tuple), the bytes of the reshard as it is (the resharding planner's
//! own plan) with the bytes of moving it back through the chain, recursively and per input,
//! and gives the chain the user's sharding where that moves strictly fewer bytes. Only
//! instructions with one user whose sharding the caller does not keep (annotations) change;
//! the values computed do not, only where they are split.

use tessera_hlo::sharding::ShardingKind;
use tessera_hlo::{InstrId, Module, Opcode, Sharding};

use crate::partition::plan;
use crate::partition::spec::Spec;

/// How deep a chain is followed back from a reshard.
const MAX_DEPTH: usize = 32;

/// Moves reshards of the entry computation back through layout-only chains where that moves
/// fewer bytes (see the module docs). `keep(id)`: the sharding of `id` stays as it is (the
/// frontend's annotations). `n`: the number of partitions. Returns how many reshards moved.
pub fn place_reshards(module: &mut Module, keep: &dyn Fn(InstrId) -> bool, n: i64) -> usize {
    let Some(entry) = module.entry() else {
        return 0;
    };
    if n < 2 {
        return 0;
    }
    let order: Vec<InstrId> = module.comp(entry).instructions().to_vec();
    let mut moved = 0;
    // From the root back: a reshard moved back becomes the next one up the chain.
    for &user in order.iter().rev() {
        let operands = module.operands(user).to_vec();
        for (i, &o) in operands.iter().enumerate() {
            let Some(want) = required(module, user, i) else {
                continue;
            };
            let (_, assign) = best(module, keep, o, &want, n, 0);
            if !assign.is_empty() {
                moved += 1;
                for (id, s) in assign {
                    module.instr_mut(id).sharding = Some(s);
                }
            }
        }
    }
    moved
}

/// The sharding `user` needs its operand `i` in: an element-wise user or a copy wants its
/// own, a tuple its element's (a named sharding, jax's Shardy mode, as its tiled equivalent).
/// `None` for other users, and for shardings this does not move (manual, maximal,
/// unreduced).
fn required(module: &Module, user: InstrId, i: usize) -> Option<Sharding> {
    let u = module.instr(user);
    let o = module.instr(module.operands(user)[i]);
    let s = u.sharding.as_ref()?;
    let want = match module.opcode(user) {
        op if op.is_elementwise() || op == Opcode::Copy => {
            if u.shape.dims() != o.shape.dims() || !u.shape.is_array() {
                return None;
            }
            s.clone()
        }
        Opcode::Tuple => {
            // Flattened leaves: only where every operand is an array.
            let ShardingKind::Tuple(leaves) = &s.kind else {
                return None;
            };
            if module
                .operands(user)
                .iter()
                .any(|&x| !module.instr(x).shape.is_array())
            {
                return None;
            }
            leaves.get(i)?.clone()
        }
        _ => return None,
    };
    let want = want.to_tiled_for(&o.shape).ok()?;
    movable(&want).then_some(want)
}

/// Replicated or tiled without a manual subgroup, named ones read as tiled.
fn movable(s: &Sharding) -> bool {
    match &s.kind {
        ShardingKind::Replicated => true,
        ShardingKind::Tiled(_) => !s.is_manual_subgroup(),
        ShardingKind::Named(n) => n
            .to_tiled(None)
            .is_ok_and(|t| !t.has_named() && movable(&t)),
        _ => false,
    }
}

/// Bytes each device receives to move `id`'s value from its sharding to `to`.
fn reshard_bytes(module: &Module, id: InstrId, to: &Sharding, n: i64) -> Option<i64> {
    let i = module.instr(id);
    let dims = i.shape.dims();
    let elem = i.shape.element_type().byte_size() as i64;
    let from = i.sharding.clone().unwrap_or_else(Sharding::replicated);
    let src = Spec::from_sharding(&from, dims.len(), n).ok()?;
    let dst = Spec::from_sharding(to, dims.len(), n).ok()?;
    if src == dst {
        return Some(0);
    }
    plan::plan(&src, &dst, dims, n)
        .ok()
        .map(|p| p.bytes(dims, elem))
}

/// The fewest bytes that give `id`'s value the sharding `to`: resharding it, or (where `id`
/// is a layout-only op that may change) giving it `to` and its operands what that needs,
/// recursively. With the shardings to set (empty: reshard `id` itself).
fn best(
    module: &Module,
    keep: &dyn Fn(InstrId) -> bool,
    id: InstrId,
    to: &Sharding,
    n: i64,
    depth: usize,
) -> (i64, Vec<(InstrId, Sharding)>) {
    let Some(here) = reshard_bytes(module, id, to, n) else {
        return (i64::MAX / 4, Vec::new());
    };
    let i = module.instr(id);
    if here == 0
        || depth >= MAX_DEPTH
        || keep(id)
        || module.users(id).len() != 1
        || !i.shape.is_array()
        || !i.sharding.as_ref().is_some_and(movable)
    {
        return (here, Vec::new());
    }
    let Some(wants) = operand_shardings(module, id, to) else {
        return (here, Vec::new());
    };
    let mut total = 0i64;
    let mut assign = vec![(id, to.clone())];
    for (o, want) in module.operands(id).iter().zip(wants) {
        let (b, a) = best(module, keep, *o, &want, n, depth + 1);
        total = total.saturating_add(b);
        if total >= here {
            return (here, Vec::new());
        }
        assign.extend(a);
    }
    (total, assign)
}

/// The operand shardings under which `id` computes its value sharded as `to` without moving
/// data, for the layout-only ops; `None` for the others and where `to` does not carry back
/// exactly.
fn operand_shardings(module: &Module, id: InstrId, to: &Sharding) -> Option<Vec<Sharding>> {
    let i = module.instr(id);
    let dims = i.shape.dims();
    let operands = module.operands(id);
    let same = |k: usize| vec![to.clone(); k];
    let out = match module.opcode(id) {
        op if op.is_elementwise() || op == Opcode::Copy => {
            if operands
                .iter()
                .any(|&o| module.instr(o).shape.dims() != dims)
            {
                return None;
            }
            same(operands.len())
        }
        // A broadcast of a scalar is made in any sharding where it is used.
        Opcode::Broadcast if module.instr(operands[0]).shape.rank() == 0 => Vec::new(),
        Opcode::Transpose => {
            let perm = i.attrs.dimensions.as_ref()?;
            let mut inverse = vec![0usize; perm.len()];
            for (k, &p) in perm.iter().enumerate() {
                *inverse.get_mut(usize::try_from(p).ok()?)? = k;
            }
            vec![to.transpose(&inverse)?]
        }
        Opcode::Reshape => {
            let from = module.instr(operands[0]).shape.dims();
            let back = to.reshape_through(dims, from)?;
            // Only where the operand's sharding reshapes into `to` exactly.
            if !back.reshape_through(from, dims)?.same_as(to) {
                return None;
            }
            vec![back]
        }
        Opcode::Concatenate => {
            let d = *i.attrs.dimensions.as_ref()?.first()? as usize;
            if let ShardingKind::Tiled(t) = &to.kind {
                if t.tile_assignment.dims().get(d).copied().unwrap_or(1) != 1 {
                    return None;
                }
            }
            same(operands.len())
        }
        _ => return None,
    };
    out.iter().all(movable).then_some(out)
}
