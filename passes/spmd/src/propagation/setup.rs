//! The work around the fixed point, after XLA's `ShardingPropagation::Run`: shardings an
//! earlier CSE-prevention run left behind, sharding metadata, device checks of while loops that
//! hold channel instructions, and at the end the removal of shard barriers and the restoration
//! and evenness rules for entry parameters and outputs.

use tessera_hlo::sharding::ShardingKind;
use tessera_hlo::{InstrId, Instruction, Module, Opcode, Shape, Sharding};
use tessera_pass::{PassError, Result};

use super::{
    expand, has_unknown, is_shard_barrier, leaf_range, remove_with_edges, Flags, Propagator, Sh,
};

/// The `op_name` that marks a sharding given only to keep CSE from merging broadcasts.
pub(super) const CSE_PREVENTION_NAME: &str = "_sharding_propagation_cse_prevention";

/// True for a sharding a CSE-prevention run made (its only metadata is the marker).
pub(super) fn is_cse_prevention(s: &Sharding) -> bool {
    s.metadata.len() == 1 && s.metadata[0].op_name == CSE_PREVENTION_NAME
}

/// The instructions a CSE-prevention run shards: broadcasts of scalars, the usual CSE victims
/// that would otherwise tie unrelated layers together.
pub(super) fn is_cse_target(m: &Module, i: &Instruction) -> bool {
    i.opcode == Opcode::Broadcast
        && i.operands()
            .first()
            .is_some_and(|&o| m.instr(o).shape.is_array() && m.instr(o).shape.rank() == 0)
}

/// `s` marked as a CSE-prevention sharding (its metadata replaced by the marker).
pub(super) fn mark_cse_prevention(s: &Sharding) -> Sharding {
    let marker = tessera_hlo::metadata::OpMetadata {
        op_name: CSE_PREVENTION_NAME.to_string(),
        ..Default::default()
    };
    let mut out = s.clone();
    set_metadata(&mut out, &[marker]);
    out
}

fn set_metadata(s: &mut Sharding, md: &[tessera_hlo::metadata::OpMetadata]) {
    if let ShardingKind::Tuple(e) = &mut s.kind {
        e.iter_mut().for_each(|x| set_metadata(x, md));
    } else {
        s.metadata = md.to_vec();
    }
}

/// Clears the shardings an earlier CSE-prevention run left (a full run decides them anew).
pub(super) fn remove_cse_prevention(module: &mut Module) -> bool {
    let mut ids = Vec::new();
    for &c in module.computations() {
        for &id in module.comp(c).instructions() {
            if module
                .instr(id)
                .sharding
                .as_ref()
                .is_some_and(is_cse_prevention)
            {
                ids.push(id);
            }
        }
    }
    for &id in &ids {
        module.instr_mut(id).sharding = None;
    }
    !ids.is_empty()
}

/// XLA's `AssignShardingMetadata` (with `propagate_metadata`): every sharding without metadata
/// takes its instruction's `metadata={...}`, so that it travels with the sharding.
pub(super) fn assign_sharding_metadata(module: &mut Module) -> bool {
    let mut changed = false;
    let comps = module.computations().to_vec();
    for c in comps {
        let ids = module.comp(c).instructions().to_vec();
        for id in ids {
            let i = module.instr(id);
            let Some(md) = i.metadata.clone().filter(|m| !m.is_empty()) else {
                continue;
            };
            let Some(mut s) = i.sharding.clone() else {
                continue;
            };
            if add_metadata_where_missing(&mut s, &md) {
                module.instr_mut(id).sharding = Some(s);
                changed = true;
            }
        }
    }
    changed
}

fn add_metadata_where_missing(s: &mut Sharding, md: &tessera_hlo::metadata::OpMetadata) -> bool {
    match &mut s.kind {
        ShardingKind::Tuple(e) => {
            let mut changed = false;
            for x in e.iter_mut() {
                changed |= add_metadata_where_missing(x, md);
            }
            changed
        }
        _ if s.metadata.is_empty() => {
            s.metadata.push(md.clone());
            true
        }
        _ => false,
    }
}

/// The one device a sharding places the whole value on (`{maximal device=D}`, or a tuple whose
/// leaves all are on D).
pub(super) fn unique_device(s: &Sharding) -> Option<i64> {
    match &s.kind {
        ShardingKind::Maximal(d) => Some(*d),
        ShardingKind::Tuple(e) if !e.is_empty() => {
            let d = unique_device(&e[0])?;
            e.iter().all(|x| unique_device(x) == Some(d)).then_some(d)
        }
        _ => None,
    }
}

/// XLA's `CheckAndUpdateDeviceAssignmentsInWhileBody`, for every while of the module: a loop
/// body holding a channel instruction (a send/recv that is not a host transfer, or an
/// all-reduce/reduce-scatter with a channel id) pinned to device D must not pin anything else,
/// the while included, to another device; the body root is then pinned to D too, so that the
/// whole loop stays on D. A conflict is an error naming both instructions.
pub(super) fn check_while_devices(module: &mut Module) -> Result<bool> {
    let mut changed = false;
    let whiles: Vec<InstrId> = module
        .computations()
        .iter()
        .flat_map(|&c| module.comp(c).instructions().to_vec())
        .filter(|&id| module.instr(id).opcode == Opcode::While)
        .collect();
    for w in whiles {
        let Some(body) = module.instr(w).while_body() else {
            continue;
        };
        let conflict = |i: &Instruction, dev: i64, chan: &str, want: i64| {
            PassError::Failed(format!(
                "Instruction: {} is on device: {dev}, which conflicts with device: {want} of channel instruction: {chan}",
                i.name
            ))
        };
        let mut others: std::collections::BTreeMap<i64, InstrId> = Default::default();
        let mut unique: Option<(i64, InstrId)> = None;
        for &id in module.comp(body).instructions() {
            let i = module.instr(id);
            let Some(dev) = i.sharding.as_ref().and_then(unique_device) else {
                continue;
            };
            let is_channel = (matches!(i.opcode, Opcode::Send | Opcode::Recv)
                && !i.attrs.is_host_transfer)
                || (matches!(i.opcode, Opcode::AllReduce | Opcode::ReduceScatter)
                    && i.attrs.channel_id.is_some());
            if let Some((d, chan)) = unique {
                if d != dev {
                    return Err(conflict(i, dev, &module.instr(chan).name, d));
                }
            } else if is_channel {
                unique = Some((dev, id));
                for (&od, &oi) in &others {
                    if od != dev {
                        return Err(conflict(module.instr(oi), od, &i.name, dev));
                    }
                }
            } else {
                others.insert(dev, id);
            }
        }
        let Some((dev, chan)) = unique else {
            continue;
        };
        let chan_name = module.instr(chan).name.clone();
        let wi = module.instr(w);
        if let Some(wd) = wi.sharding.as_ref().and_then(unique_device) {
            if wd != dev {
                return Err(conflict(wi, wd, &chan_name, dev));
            }
        }
        let Some(root) = module.comp(body).root() else {
            continue;
        };
        let ri = module.instr(root);
        match ri.sharding.as_ref().and_then(unique_device) {
            None => {
                let s = Sharding::maximal(dev);
                let s = if ri.shape.is_tuple() {
                    Sharding::tuple(vec![s; ri.shape.leaf_count()])
                } else {
                    s
                };
                module.instr_mut(root).sharding = Some(s);
                changed = true;
            }
            Some(rd) if rd != dev => return Err(conflict(ri, rd, &chan_name, dev)),
            Some(_) => {}
        }
    }
    Ok(changed)
}

/// Removes the `ShardBarrierFrom` / `ShardBarrierTo` custom-calls once propagation is done
/// (their users read their operand instead), as XLA's pass does.
pub(super) fn remove_shard_barriers(module: &mut Module) -> Result<bool> {
    let barriers: Vec<InstrId> = module
        .computations()
        .iter()
        .flat_map(|&c| module.comp(c).instructions().to_vec())
        .filter(|&id| is_shard_barrier(module.instr(id)).is_some())
        .collect();
    for &id in &barriers {
        let i = module.instr(id);
        let Some(&op) = i.operands().first() else {
            continue;
        };
        let comp = i.parent;
        module.replace_all_uses_with(id, op)?;
        if let Some(s) = module.schedule.as_mut() {
            if let Some(seq) = s.sequences.get_mut(&comp) {
                seq.retain(|&x| x != id);
            }
        }
        remove_with_edges(module, id)?;
    }
    Ok(!barriers.is_empty())
}

/// XLA's test for entry parameters and outputs: every tiled data dimension splits evenly (a
/// propagated sharding that does not is replaced by `{replicated}` there). Tuple, replicated
/// and manual shardings pass.
pub(super) fn evenly_partitions(shape: &Shape, s: &Sharding) -> bool {
    let ShardingKind::Tiled(t) = &s.kind else {
        return true;
    };
    if !shape.is_array() {
        return true;
    }
    let tiles = t.tile_assignment.dims();
    shape
        .dims()
        .iter()
        .enumerate()
        .all(|(k, &d)| tiles.get(k).is_none_or(|&n| n <= 0 || d % n == 0))
}

/// The leaves of a (tuple) sharding as stored in the pass's table.
fn leaves(s: &Sharding) -> Vec<Sharding> {
    match &s.kind {
        ShardingKind::Tuple(e) => e.clone(),
        _ => vec![s.clone()],
    }
}

impl Propagator<'_> {
    /// After the fixed point, XLA's rules for the entry's interface: output elements and
    /// parameters whose flag is off get back what they had (or lose what they were given), and
    /// a propagated sharding that does not split an allowed parameter or output evenly becomes
    /// `{replicated}`.
    pub(super) fn restore_entry_interface(&mut self, flags: &Flags) {
        let m = self.m;
        if let Some(root) = self.entry_root.filter(|_| self.allow_output) {
            let shape = &m.instr(root).shape;
            let saved = self.original[root.index()]
                .as_ref()
                .map(|s| expand(shape, s));
            let mut cur = self.sh[root.index()].as_ref().map(Sh::to_sharding);
            if let (true, Some(saved), Some(ShardingKind::Tuple(now))) =
                (shape.is_tuple(), saved, cur.as_mut().map(|s| &mut s.kind))
            {
                let saved = leaves(&saved);
                if saved.len() == flags.output.len() && now.len() == saved.len() {
                    for (k, old) in saved.into_iter().enumerate() {
                        if !flags.output[k] && !has_unknown(&old) {
                            now[k] = old;
                        }
                    }
                }
            }
            self.put(root, self.memo.intern_opt(cur));
            self.replicate_uneven(root, &flags.output);
        }
        if !self.params_any {
            return;
        }
        let entry = self.entry;
        let params: Vec<InstrId> = (0..m.comp(entry).num_parameters())
            .filter_map(|k| m.comp(entry).parameter(k))
            .collect();
        if flags.params.len() == params.len() {
            for (k, &p) in params.iter().enumerate() {
                if !flags.params[k] {
                    let shape = &m.instr(p).shape;
                    self.put(
                        p,
                        self.memo.intern_opt(
                            self.original[p.index()]
                                .as_ref()
                                .filter(|s| !has_unknown(s))
                                .map(|s| expand(shape, s)),
                        ),
                    );
                }
            }
            for (k, &p) in params.iter().enumerate() {
                if flags.params[k] {
                    self.replicate_uneven(p, &[true]);
                }
            }
        } else if params.len() == 1 && m.instr(params[0]).shape.is_tuple() {
            let p = params[0];
            let shape = &m.instr(p).shape;
            if shape.tuple_elements().len() != flags.params.len() {
                return;
            }
            let mut cur = self.sh[p.index()].as_ref().map(Sh::to_sharding);
            if let (Some(saved), Some(ShardingKind::Tuple(now))) = (
                self.original[p.index()].as_ref().map(|s| expand(shape, s)),
                cur.as_mut().map(|s| &mut s.kind),
            ) {
                let saved = leaves(&saved);
                for (e, &allowed) in flags.params.iter().enumerate() {
                    let (start, len) = leaf_range(shape, e);
                    for k in start..start + len {
                        if let (false, Some(old), Some(slot)) =
                            (allowed, saved.get(k), now.get_mut(k))
                        {
                            if !has_unknown(old) {
                                *slot = old.clone();
                            }
                        }
                    }
                }
            }
            self.put(p, self.memo.intern_opt(cur));
            self.replicate_uneven(p, &flags.params);
        }
    }

    /// Replaces the sharding of `id` (or of each tuple element whose flag is set, when there is
    /// one flag per element) by `{replicated}` where it does not split the shape evenly.
    fn replicate_uneven(&mut self, id: InstrId, flags: &[bool]) {
        let shape = &self.m.instr(id).shape;
        let Some(mut s) = self.sh[id.index()].as_ref().map(Sh::to_sharding) else {
            return;
        };
        if !shape.is_tuple() {
            if !evenly_partitions(shape, &s) {
                self.set(id, Sharding::replicated());
            }
            return;
        }
        if flags.len() != shape.tuple_elements().len() {
            return;
        }
        let ShardingKind::Tuple(now) = &mut s.kind else {
            return;
        };
        for (e, elem) in shape.tuple_elements().iter().enumerate() {
            if !flags[e] || !elem.is_array() {
                continue;
            }
            let (start, _) = leaf_range(shape, e);
            if let Some(slot) = now.get_mut(start) {
                if !evenly_partitions(elem, slot) {
                    *slot = Sharding::replicated();
                }
            }
        }
        self.set(id, s);
    }
}
