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

/// What [`named_to_tiled`] replaced, for [`restore_named`].
#[derive(Default)]
pub(super) struct NamedSwaps {
    /// (instruction, its named sharding, the tiled equivalent put in its place).
    swapped: Vec<(InstrId, Sharding, Sharding)>,
    /// Every instruction's sharding as the pass received it (tiled equivalents in place),
    /// indexed by instruction; empty when the module had no named sharding.
    before: Vec<Option<Sharding>>,
    /// The distinct named array shardings of the input (metadata dropped) with their rank and
    /// tiled equivalent.
    candidates: Vec<(usize, Sharding, Sharding)>,
}

/// Replaces every named (mesh) sharding by its tiled equivalent (XLA's `V3ToV2Sharding`).
/// A named sharding that does not fit its instruction's shape is an error naming the
/// instruction.
pub(super) fn named_to_tiled(module: &mut Module) -> Result<NamedSwaps> {
    let mut sw = NamedSwaps::default();
    for &c in module.computations() {
        for &id in module.comp(c).instructions() {
            let i = module.instr(id);
            let Some(s) = i.sharding.as_ref().filter(|s| s.has_named()) else {
                continue;
            };
            let fail = |e: String| {
                PassError::Failed(format!(
                    "sharding-propagation: %{}: named sharding: {e}",
                    i.name()
                ))
            };
            let t = s.to_tiled_for(&i.shape).map_err(fail)?;
            let leaves: Vec<&Sharding> = match &s.kind {
                ShardingKind::Tuple(e) => e.iter().collect(),
                _ => vec![s],
            };
            let shapes = leaf_shapes(&i.shape);
            for (k, leaf) in leaves.into_iter().enumerate() {
                let (Some(n), Some(shape)) = (leaf.as_named(), shapes.get(k).or(shapes.first()))
                else {
                    continue;
                };
                if !shape.is_array() || n.dims.len() != shape.rank() {
                    continue;
                }
                let named = Sharding::named(n.clone());
                if sw.candidates.iter().all(|(_, _, x)| *x != named) {
                    let tiled = n.to_tiled(Some(shape.rank())).map_err(fail)?.normalized();
                    sw.candidates.push((shape.rank(), tiled, named));
                }
            }
            sw.swapped.push((id, s.clone(), t));
        }
    }
    if sw.swapped.is_empty() {
        return Ok(sw);
    }
    for (id, _, t) in &sw.swapped {
        module.instr_mut(*id).sharding = Some(t.clone());
    }
    sw.before = (0..module.instr_capacity())
        .map(|k| {
            module
                .try_instr(InstrId::new(k))
                .and_then(|i| i.sharding.clone())
        })
        .collect();
    Ok(sw)
}

/// Gives back the named spelling: to every instruction whose sharding is still the tiled
/// equivalent [`named_to_tiled`] put there (metadata the pass gave it is kept), and, for a
/// sharding the pass made, to every array leaf that means the same as one of the input's
/// named shardings of the same rank (XLA's pass hands a named sharding on unchanged to the
/// users it reaches, e.g. through element-wise instructions).
pub(super) fn restore_named(module: &mut Module, sw: &NamedSwaps) {
    if sw.swapped.is_empty() {
        return;
    }
    let mut restored = vec![false; sw.before.len()];
    for (id, original, tiled) in &sw.swapped {
        let Some(now) = module.try_instr(*id).and_then(|i| i.sharding.as_ref()) else {
            continue;
        };
        if same_layout(now, tiled) {
            let mut back = original.clone();
            copy_metadata(&mut back, now);
            module.instr_mut(*id).sharding = Some(back);
            restored[id.index()] = true;
        }
    }
    for k in 0..module.instr_capacity() {
        let id = InstrId::new(k);
        let Some(i) = module.try_instr(id) else {
            continue;
        };
        let before = sw.before.get(k).cloned().flatten();
        let (Some(now), false) = (i.sharding.as_ref(), restored.get(k) == Some(&true)) else {
            continue;
        };
        if Some(now) == before.as_ref() {
            continue;
        }
        let shapes = leaf_shapes(&i.shape);
        let back = |leaf: &Sharding, shape: Option<&&Shape>| -> Option<Sharding> {
            let shape = shape.filter(|s| s.is_array())?;
            let n = leaf.normalized();
            let (_, _, named) = sw
                .candidates
                .iter()
                .find(|(r, t, _)| *r == shape.rank() && t.kind == n.kind)?;
            let mut out = named.clone();
            out.metadata = leaf.metadata.clone();
            Some(out)
        };
        let mapped = match &now.kind {
            ShardingKind::Tuple(e) => {
                let mut changed = false;
                let elems: Vec<Sharding> = e
                    .iter()
                    .enumerate()
                    .map(|(j, x)| match back(x, shapes.get(j)) {
                        Some(y) => {
                            changed = true;
                            y
                        }
                        None => x.clone(),
                    })
                    .collect();
                changed.then(|| {
                    let mut t = Sharding::tuple(elems);
                    t.metadata = now.metadata.clone();
                    t
                })
            }
            _ if now.shard_group.is_none() && shapes.len() == 1 => back(now, shapes.first()),
            _ => None,
        };
        if let Some(m) = mapped {
            module.instr_mut(id).sharding = Some(m);
        }
    }
}

/// The array (non-tuple) leaves of `shape`, in pre-order.
fn leaf_shapes(shape: &Shape) -> Vec<&Shape> {
    fn walk<'s>(s: &'s Shape, out: &mut Vec<&'s Shape>) {
        match s {
            Shape::Tuple(e) => e.iter().for_each(|x| walk(x, out)),
            _ => out.push(s),
        }
    }
    let mut v = Vec::new();
    walk(shape, &mut v);
    v
}

fn same_layout(a: &Sharding, b: &Sharding) -> bool {
    match (&a.kind, &b.kind) {
        (ShardingKind::Tuple(x), ShardingKind::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_layout(p, q))
        }
        (x, y) => x == y && a.shard_group == b.shard_group,
    }
}

fn copy_metadata(to: &mut Sharding, from: &Sharding) {
    to.metadata = from.metadata.clone();
    if let (ShardingKind::Tuple(x), ShardingKind::Tuple(y)) = (&mut to.kind, &from.kind) {
        for (p, q) in x.iter_mut().zip(y) {
            copy_metadata(p, q);
        }
    }
}

/// The `op_name` that marks a sharding given only to keep CSE from merging broadcasts.
pub(super) const CSE_PREVENTION_NAME: &str = "_sharding_propagation_cse_prevention";

/// True for a sharding a CSE-prevention run made (its only metadata is the marker).
pub(super) fn is_cse_prevention(s: &Sharding) -> bool {
    s.metadata.len() == 1 && s.metadata[0].op_name == CSE_PREVENTION_NAME
}

/// The instructions a CSE-prevention run shards: broadcasts of scalars, the usual CSE victims
/// that would otherwise tie unrelated layers together.
pub(super) fn is_cse_target(m: &Module, i: &Instruction) -> bool {
    i.opcode() == Opcode::Broadcast
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
        .filter(|&id| module.instr(id).opcode() == Opcode::While)
        .collect();
    for w in whiles {
        let Some(body) = module.instr(w).while_body() else {
            continue;
        };
        let conflict = |i: &Instruction, dev: i64, chan: &str, want: i64| {
            PassError::Failed(format!(
                "Instruction: {} is on device: {dev}, which conflicts with device: {want} of channel instruction: {chan}",
                i.name()
            ))
        };
        let mut others: std::collections::BTreeMap<i64, InstrId> = Default::default();
        let mut unique: Option<(i64, InstrId)> = None;
        for &id in module.comp(body).instructions() {
            let i = module.instr(id);
            let Some(dev) = i.sharding.as_ref().and_then(unique_device) else {
                continue;
            };
            let is_channel = (matches!(i.opcode(), Opcode::Send | Opcode::Recv)
                && !i.attrs.is_host_transfer)
                || (matches!(i.opcode(), Opcode::AllReduce | Opcode::ReduceScatter)
                    && i.attrs.channel_id.is_some());
            if let Some((d, chan)) = unique {
                if d != dev {
                    return Err(conflict(i, dev, module.instr(chan).name(), d));
                }
            } else if is_channel {
                unique = Some((dev, id));
                for (&od, &oi) in &others {
                    if od != dev {
                        return Err(conflict(module.instr(oi), od, i.name(), dev));
                    }
                }
            } else {
                others.insert(dev, id);
            }
        }
        let Some((dev, chan)) = unique else {
            continue;
        };
        let chan_name = module.instr(chan).name().to_string();
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
        let comp = i.parent();
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
