//! Manual shardings and partially specified annotations.
//!
//! - A value computed from a manual value is manual (forward), and a value used by a manual
//!   instruction is manual (backward), as in XLA's `InferShardingFromOperands` /
//!   `InferShardingFromUsers`; `SPMDShardToFullShape` (which leaves a manual region) never
//!   takes the manual sharding of its operand, and `SPMDFullToShardShape` (which enters one)
//!   never gives it to its operand.
//! - A constant takes a manual sharding from a user only when every user is manual: a constant
//!   shared by a manual region and the code around it stays automatic (XLA splits such
//!   constants with a separate pass, `HloConstantSplitter`, before propagation).
//! - A `Sharding` annotation with `unspecified_dims=[..]` fixes its other dimensions and lets
//!   propagation tile the unspecified ones: its sharding merges with its operand's
//!   (forward) or a user's (backward) sharding restricted to those dimensions. When the
//!   annotation feeds an `SPMDFullToShardShape` / `SPMDShardToFullShape` with the same
//!   unspecified dimensions, the automatic and the manual side are refined together (XLA's
//!   `InferUnspecifiedDimsFromOperand` / `InferUnspecifiedDimsFromUsers`).

use tessera_hlo::sharding::{ShardingKind, SubgroupType, TiledSharding};
use tessera_hlo::sharding_util::merge_if_compatible;
use tessera_hlo::{InstrId, Opcode, Sharding};

use smallvec::SmallVec;

use super::{is_custom_call, parse_unspecified_dims, spread, Propagator, Sh};

/// XLA's `IsManual` (a tuple: every leaf).
pub(super) fn all_manual(s: &Sharding) -> bool {
    match &s.kind {
        ShardingKind::Tuple(e) => !e.is_empty() && e.iter().all(all_manual),
        k => matches!(k, ShardingKind::Manual),
    }
}

/// XLA's `IsTileMaximal` (a tuple: every leaf).
pub(super) fn all_tile_maximal(s: &Sharding) -> bool {
    match &s.kind {
        ShardingKind::Tuple(e) => e.iter().all(all_tile_maximal),
        _ => s.is_tile_maximal(),
    }
}

impl Propagator<'_> {
    /// The manual part of inferring from operands: `Some(changed)` when it decides.
    pub(super) fn forward_manual(&mut self, id: InstrId, level: u8) -> Option<bool> {
        let i = self.m.instr(id);
        if self.cur(id).is_some_and(all_manual) {
            return Some(false);
        }
        let correlated_tuple = matches!(
            i.opcode(),
            Opcode::Reduce | Opcode::Sort | Opcode::ReduceWindow
        ) || (i.opcode() == Opcode::CustomCall && i.shape.is_tuple());
        if !(self.cur(id).is_none_or(all_tile_maximal) && (i.shape.is_array() || correlated_tuple))
        {
            return None;
        }
        for &op in i.operands() {
            if !self.cur(op).is_some_and(all_manual) {
                continue;
            }
            if is_custom_call(i, "SPMDShardToFullShape") {
                return Some(false);
            }
            if level == 0 && matches!(i.opcode(), Opcode::Concatenate | Opcode::DynamicSlice) {
                return Some(false);
            }
            self.set(id, spread(&i.shape, Sharding::manual()));
            return Some(true);
        }
        None
    }

    /// The manual part of inferring from users: `Some(changed)` when it decides. The user
    /// shardings it computes on the way are left in `asked` (user, what it asks of `id`), for
    /// the caller to reuse.
    pub(super) fn backward_manual(
        &mut self,
        id: InstrId,
        level: u8,
        asked: &mut SmallVec<[(InstrId, Option<Sh>); 4]>,
    ) -> Option<bool> {
        let m = self.m;
        let i = m.instr(id);
        if self.cur(id).is_some_and(all_manual) {
            return Some(false);
        }
        if !self.cur(id).is_none_or(all_tile_maximal) || !self.may_become_manual(id) {
            return None;
        }
        for &u in i.users() {
            let Some(us) = self.cur(u) else { continue };
            if is_custom_call(m.instr(u), "SPMDFullToShardShape") {
                continue;
            }
            if i.shape.is_array() && all_manual(us) {
                self.set(id, Sharding::manual());
                return Some(true);
            }
            let from_user = self.sharding_from_user(id, u, level);
            if let Some(s) = from_user.as_ref().filter(|s| all_manual(s)) {
                self.put(id, Some(s.clone()));
                return Some(true);
            }
            asked.push((u, from_user));
        }
        None
    }

    /// False for a constant that is used outside a manual region too: every use of a constant
    /// (every operand position, in a tuple user the element there) must be manual for the
    /// constant to become manual.
    pub(super) fn may_become_manual(&self, id: InstrId) -> bool {
        let m = self.m;
        let i = m.instr(id);
        if i.opcode() != Opcode::Constant {
            return true;
        }
        i.users().iter().all(|&u| {
            let ui = m.instr(u);
            let Some(us) = self.cur(u) else {
                return false;
            };
            ui.operands()
                .iter()
                .enumerate()
                .filter(|(_, &o)| o == id)
                .all(|(k, _)| {
                    if ui.opcode() == Opcode::Tuple {
                        all_manual(&super::sub_sharding(us, &ui.shape, k))
                    } else {
                        all_manual(us)
                    }
                })
        })
    }

    /// The manual conversion (`SPMDFullToShardShape` / `SPMDShardToFullShape`) that is the only
    /// user of partial annotation `id`, when it names the same unspecified dimensions.
    /// `Err(())` when it is the only user but names other dimensions: then nothing refines.
    fn conversion_after(&self, id: InstrId, dims: &[usize]) -> Result<Option<InstrId>, ()> {
        let users = self.m.instr(id).users();
        if users.len() != 1 {
            return Ok(None);
        }
        let u = self.m.instr(users[0]);
        if !(is_custom_call(u, "SPMDFullToShardShape") || is_custom_call(u, "SPMDShardToFullShape"))
        {
            return Ok(None);
        }
        match parse_unspecified_dims(u) {
            Ok(d) if d == dims => Ok(Some(users[0])),
            _ => Err(()),
        }
    }

    /// Refines the unspecified dimensions of partial annotation `id` from its operand. Returns
    /// the changed conversion op too (for the caller's caches).
    pub(super) fn unspecified_from_operand(
        &mut self,
        id: InstrId,
        dims: &[usize],
    ) -> Option<Option<InstrId>> {
        let op = *self.m.instr(id).operands().first()?;
        let os = self.cur(op)?.clone();
        if !matches!(os.kind, ShardingKind::Tiled(_)) {
            return None;
        }
        let conv = self.conversion_after(id, dims).ok()?;
        self.refine_with(id, conv, &os, dims, true).then_some(conv)
    }

    /// Refines the unspecified dimensions of partial annotation `id` (and of the conversion op
    /// after it) from the users. Returns the conversion op, if any, when something changed.
    pub(super) fn unspecified_from_users(
        &mut self,
        id: InstrId,
        dims: &[usize],
        level: u8,
    ) -> Option<Option<InstrId>> {
        let conv = self.conversion_after(id, dims).ok()?;
        let from = conv.unwrap_or(id);
        let mut changed = false;
        for &u in self.m.instr(from).users() {
            if !self
                .cur(u)
                .is_some_and(|s| matches!(s.kind, ShardingKind::Tiled(_)))
            {
                continue;
            }
            let Some(us) = self.sharding_from_user(from, u, level) else {
                continue;
            };
            if us.is_tile_maximal() || us.is_tuple() {
                continue;
            }
            changed |= self.refine_with(id, conv, &us, dims, false);
        }
        changed.then_some(conv)
    }

    /// Merges `to_merge` (restricted to `dims`) into annotation `id`, or into the automatic and
    /// manual shardings around conversion `conv`. `from_operand`: `to_merge` is the sharding
    /// before the annotation (else: what a user wants after the annotation or conversion).
    fn refine_with(
        &mut self,
        id: InstrId,
        conv: Option<InstrId>,
        to_merge: &Sharding,
        dims: &[usize],
        from_operand: bool,
    ) -> bool {
        let Some(conv) = conv else {
            let partial = to_merge.replicate_all_except(dims);
            let Some(mut s) = self.cur(id).cloned() else {
                return false;
            };
            let min = s.num_tiles() + 1;
            if !merge_if_compatible(&partial, min, &mut s) {
                return false;
            }
            self.set(id, s);
            return true;
        };
        let (Some(a), Some(c)) = (self.cur(id).cloned(), self.cur(conv).cloned()) else {
            return false;
        };
        let to_shard = is_custom_call(self.m.instr(conv), "SPMDFullToShardShape");
        // Which side is automatic: before SPMDFullToShardShape, after SPMDShardToFullShape.
        let (mut auto, mut manual, auto_is_annotation) = if to_shard {
            (a, c, true)
        } else {
            (c, a, false)
        };
        // `to_merge` is on the automatic side when it comes from the operand of an annotation
        // that enters a manual region, or from a user of one that leaves it.
        let from_auto = from_operand == to_shard;
        let ok = if from_auto {
            refine_from_auto(to_merge, dims, &mut auto, &mut manual)
        } else {
            refine_from_manual(to_merge, dims, &mut auto, &mut manual)
        };
        if !ok {
            return false;
        }
        let (new_a, new_c) = if auto_is_annotation {
            (auto, manual)
        } else {
            (manual, auto)
        };
        self.set(id, new_a);
        self.set(conv, new_c);
        true
    }
}

/// A tiled sharding whose last tile dimension replicates, kept exactly as given (size-1
/// dimensions stay: they line up with the other side's data dimensions).
fn partial_tile(t: &TiledSharding) -> Sharding {
    Sharding::new(ShardingKind::Tiled(TiledSharding {
        tile_assignment: t.tile_assignment.clone(),
        replicate_on_last_tile_dim: true,
        last_tile_dims: Vec::new(),
    }))
}

/// XLA's `RefineManualAutoShardingFromAuto`: `to_merge` (an automatic sharding, restricted to
/// `dims`) refines the automatic annotation and, treating the manual subgroup as one more data
/// dimension, the partially manual one. The manual sharding must be `[data.., manual,
/// replicated]`.
fn refine_from_auto(
    to_merge: &Sharding,
    dims: &[usize],
    auto: &mut Sharding,
    manual: &mut Sharding,
) -> bool {
    if !manual.is_manual_subgroup()
        || auto.is_manual_subgroup()
        || !manual.has_partial_replication()
        || manual.as_tiled().map_or(0, |t| t.subgroup_types().len()) != 2
    {
        return false;
    }
    let partial = to_merge.replicate_all_except(dims);
    let Some(pt) = partial.as_tiled() else {
        return false;
    };
    let min = auto.num_tiles() + 1;
    if !merge_if_compatible(&partial, min, auto) {
        return false;
    }
    // The automatic sharding with a size-1 "manual" data dimension before its replication.
    let data_rank = pt.data_rank();
    let mut dims_m: Vec<i64> = pt.tile_assignment.dims().to_vec();
    dims_m.insert(data_rank, 1);
    let Some(ta) = pt.tile_assignment.reshape(&dims_m) else {
        return false;
    };
    let partial_for_manual = Sharding::new(ShardingKind::Tiled(TiledSharding {
        tile_assignment: ta,
        replicate_on_last_tile_dim: true,
        last_tile_dims: Vec::new(),
    }));
    // The manual sharding with its manual dimension as a data dimension, replication last.
    let mt = manual.as_tiled().expect("a manual subgroup is tiled");
    let types = mt.subgroup_types();
    let mut ta = mt.tile_assignment.clone();
    if types.last() != Some(&SubgroupType::Replicated) {
        let r = ta.rank();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 1, mt.data_rank());
        ta = ta.transpose(&perm);
    }
    let mut tmp = partial_tile(&TiledSharding {
        tile_assignment: ta,
        replicate_on_last_tile_dim: true,
        last_tile_dims: Vec::new(),
    });
    let min = tmp.num_tiles() + 1;
    if !merge_if_compatible(&partial_for_manual, min, &mut tmp) {
        return false;
    }
    let mut new_types = vec![SubgroupType::Manual];
    if tmp.has_partial_replication() {
        new_types.push(SubgroupType::Replicated);
    }
    let Some(t) = tmp.as_tiled() else {
        return false;
    };
    *manual = Sharding::subgroup(t.tile_assignment.clone(), &new_types);
    true
}

/// XLA's `RefineManualAutoShardingFromManual`: `to_merge` (a partially manual sharding,
/// restricted to `dims`) refines the manual annotation, and with its manual subgroup read as
/// replication, the automatic one.
fn refine_from_manual(
    to_merge: &Sharding,
    dims: &[usize],
    auto: &mut Sharding,
    manual: &mut Sharding,
) -> bool {
    if !to_merge.is_manual_subgroup()
        || !manual.is_manual_subgroup()
        || !manual.has_partial_replication()
        || auto.is_manual_subgroup()
        || manual.as_tiled().map_or(0, |t| t.subgroup_types().len()) != 2
    {
        return false;
    }
    let partial = to_merge.replicate_all_except(dims);
    let Some(pt) = partial.as_tiled() else {
        return false;
    };
    let min = manual.num_tiles() + 1;
    if !merge_if_compatible(&partial, min, manual) {
        return false;
    }
    let all_replicated = vec![SubgroupType::Replicated; pt.subgroup_types().len()];
    let for_auto = Sharding::subgroup(pt.tile_assignment.clone(), &all_replicated);
    let min = auto.num_tiles() + 1;
    merge_if_compatible(&for_auto, min, auto)
}

impl Propagator<'_> {
    /// XLA's `InferUnspecifiedDimsFromOperand` for partial annotation `id` (see `manual.rs`);
    /// clears the caches around what changed.
    pub(super) fn refine_unspecified_from_operand(&mut self, id: InstrId, dims: &[usize]) -> bool {
        let Some(conv) = self.unspecified_from_operand(id, dims) else {
            return false;
        };
        self.clear_cache(id, conv);
        true
    }

    /// XLA's `InferUnspecifiedDimsFromUsers` for partial annotation `id` (see `manual.rs`);
    /// clears the caches around what changed and marks the annotation (and its conversion op)
    /// done.
    pub(super) fn refine_unspecified_from_users(
        &mut self,
        id: InstrId,
        dims: &[usize],
        level: u8,
    ) -> bool {
        let Some(conv) = self.unspecified_from_users(id, dims, level) else {
            return false;
        };
        self.clear_cache(id, conv);
        self.done_bwd[id.index()] = true;
        if let Some(c) = conv {
            self.done_bwd[c.index()] = true;
        }
        true
    }
}
