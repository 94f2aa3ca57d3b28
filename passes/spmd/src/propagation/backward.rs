//! Backward rules (XLA's `GetShardingFromUser`): the sharding an operand gets from its
//! users, per user opcode family.

use super::forward::dot_operand_sharding;
use super::*;

impl<'m> Propagator<'m> {
    pub(super) fn infer_from_users(&mut self, id: InstrId, level: u8) -> bool {
        let m = self.m;
        let i = m.instr(id);
        if level < 2 && i.opcode() == Opcode::Broadcast {
            return false;
        }
        // Manual shardings flow back into everything a manual value is computed from.
        let mut asked = SmallVec::new();
        if let Some(changed) = self.backward_manual(id, level, &mut asked) {
            return changed;
        }
        if !self.supports_partitioning(id, false, self.params_any) {
            return false;
        }
        let mc = self.spmd && level > 0;
        let barrier = is_shard_barrier(i);
        let mut improved = false;
        for &u in i.users() {
            // A random bit generator needs its state replicated.
            if m.instr(u).opcode() == Opcode::RngBitGenerator {
                let r = self.memo.intern(replicated_for(&i.shape));
                let changed = self.cur_sh(id) != Some(&r);
                self.put(id, Some(r));
                return changed;
            }
            let from_user = match asked.iter_mut().find(|(x, _)| *x == u) {
                Some((_, s)) => s.take(),
                None => self.sharding_from_user(id, u, level),
            };
            if let Some(mut s) = from_user {
                if manual::all_manual(&s) && !self.may_become_manual(id) {
                    continue;
                }
                // A ShardBarrierTo lets no sharding through backward: it becomes replicated
                // (and so does what feeds it).
                if barrier == Some(false) {
                    s = self.memo.intern(replicated_for(&i.shape));
                }
                if self.improve_sh(id, s, mc, false) {
                    improved = true;
                    // What the other users ask may depend on `id`'s own sharding (a tuple's
                    // other leaves, a dot of `id` with itself): ask again from now on.
                    asked.clear();
                }
            }
        }
        improved
    }

    /// XLA's `GetShardingFromUser`: the sharding `id` should have for `user` as it is sharded.
    pub(super) fn sharding_from_user(&self, id: InstrId, user: InstrId, level: u8) -> Option<Sh> {
        use Opcode::*;
        let m = self.m;
        let u = m.instr(user);
        if !can_propagate_at(u, level) {
            return None;
        }
        let us = self.cur_sh(user).filter(|s| s.is_spatially_partitioned())?;
        let intern = |s: Sharding| self.memo.intern(s);
        let i = m.instr(id);
        let (index, repeated) = self.operand_position(id, user)?;
        match u.opcode() {
            Broadcast => {
                if us.is_replicated() {
                    return Some(us.clone());
                }
                let bd = dims_attr(&u.attrs);
                let rep: Vec<usize> = (0..u.shape.rank())
                    .filter(|d| !bd.contains(&(*d as i64)))
                    .collect();
                let tiled = us.as_tiled().map(|t| t.tile_assignment.dims().to_vec());
                if !self.spmd
                    && tiled.is_some_and(|t| rep.iter().any(|&d| t.get(d).is_some_and(|&x| x > 1)))
                {
                    return None;
                }
                self.replicated_and_removed(us, &rep)
            }
            Concatenate => {
                if level == 0 {
                    return None;
                }
                self.concat_operand_from_user(id, user, index).map(intern)
            }
            Convolution => {
                let cd = u.attrs.conv_dims.as_deref()?;
                let dd = conv_dims(
                    cd,
                    u.attrs.window.as_deref(),
                    self.shape(u.operand(0)).dims(),
                    self.shape(u.operand(1)).dims(),
                    u.shape.dims(),
                    u.attrs.feature_group_count,
                    u.attrs.batch_group_count,
                );
                if !dd.conv_spatial.is_empty() {
                    return None;
                }
                let dims = self.dims_of(user)?;
                self.dot_operand_sharding(user, dims, index, self.spmd && level > 0)
            }
            DynamicSlice | DynamicUpdateSlice => {
                if level == 0 {
                    return None;
                }
                if us.is_replicated() {
                    return Some(us.clone());
                }
                if u.opcode() == DynamicUpdateSlice && index == 0 {
                    return Some(us.clone());
                }
                let operand = if u.opcode() == DynamicSlice {
                    u.operand(0)
                } else {
                    u.operand(1)
                };
                if operand != id {
                    return None;
                }
                Some(self.replicated_on(us, &self.sliced_dims(user, operand)))
            }
            ReduceWindow => {
                let n = u.operands().len() / 2;
                if index >= n {
                    return None;
                }
                if u.shape.is_tuple() {
                    return Some(intern(sub_sharding(us, &u.shape, index)));
                }
                Some(us.clone())
            }
            Reshape => Some(self.through_reshape(us, user, 1)),
            Pad => (index == 0).then(|| us.clone()),
            Slice => Some(us.clone()),
            Transpose => {
                let d = dims_attr(&u.attrs);
                let mut inv = vec![0usize; d.len()];
                for (k, &x) in d.iter().enumerate() {
                    *inv.get_mut(x as usize)? = k;
                }
                self.transposed(us, idx(inv))
            }
            Tuple => {
                if !repeated {
                    return Some(self.element_of(us, user, index));
                }
                // An operand used at several positions takes the most specific of them.
                let mut best = sub_sharding(us, &u.shape, index);
                for (k, &o) in u.operands().iter().enumerate().skip(index + 1) {
                    if o == id {
                        let alt = sub_sharding(us, &u.shape, k);
                        if alt.more_specific_than(&best) {
                            best = alt;
                        }
                    }
                }
                Some(intern(best))
            }
            GetTupleElement => {
                let (start, len) = leaf_range(&i.shape, u.attrs.tuple_index as usize);
                let ulv: Vec<Sharding> = match &us.kind {
                    ShardingKind::Tuple(e) => e.clone(),
                    _ => vec![us.to_sharding(); len],
                };
                // Without a sharding of its own, every other leaf is the user's sharding with
                // the data replicated (keeping manual subgroups), at that leaf's rank.
                let first = ulv.first()?;
                let mut leaves: Vec<Sharding> = match self.cur(id).map(|s| &s.kind) {
                    Some(ShardingKind::Tuple(e)) => e.clone(),
                    _ => {
                        let mut v = Vec::with_capacity(i.shape.leaf_count());
                        i.shape.for_each_subshape(|_, sub| {
                            if !sub.is_tuple() {
                                v.push(first.replicate_all_data_dims(Some(sub.rank())));
                            }
                        });
                        v
                    }
                };
                for (k, s) in ulv.into_iter().enumerate().take(len) {
                    *leaves.get_mut(start + k)? = s;
                }
                Some(intern(Sharding::tuple(leaves)))
            }
            Dot => {
                let dims = self.dims_of(user)?;
                self.dot_operand_sharding(user, dims, index, self.spmd && level > 0)
            }
            Reduce => {
                if i.shape.rank() == 0 {
                    return None;
                }
                let s = if u.shape.is_tuple() {
                    intern(sub_sharding(us, &u.shape, index))
                } else {
                    us.clone()
                };
                let mut s = if s.is_tile_maximal() {
                    s
                } else {
                    let rd = dims_attr(&u.attrs);
                    let rank = i.shape.rank();
                    let map = idx((0..rank).filter(|d| !rd.contains(&(*d as i64))));
                    self.inserted_dims(&s, rank, map)?
                };
                // What the reduce's other inputs are sharded as refines it when compatible.
                let n = u.operands().len() / 2;
                for &o in &u.operands()[..n] {
                    if o == id || s.is_manual() {
                        continue;
                    }
                    if let Some(os) = self.cur_sh(o).filter(|x| !x.is_manual() && !x.is_tuple()) {
                        let min = s.num_tiles() + 1;
                        s = self.memo.merge_if_compatible(os, min, &s).1;
                    }
                }
                Some(s)
            }
            Sort => {
                if us.is_tuple() {
                    return Some(intern(sub_sharding(us, &u.shape, index)));
                }
                Some(us.clone())
            }
            Reverse => {
                let dims: Vec<usize> = dims_attr(&u.attrs).iter().map(|&d| d as usize).collect();
                Some(intern(us.reverse_dims(&dims)))
            }
            Outfeed => {
                // The outfeed's sharding covers (its data, the token).
                if index != 0 {
                    return None;
                }
                match &us.kind {
                    ShardingKind::Tuple(e) => {
                        let data = &i.shape;
                        let n = data.leaf_count_nonempty();
                        if data.is_tuple() {
                            Some(intern(Sharding::tuple(e.get(..n)?.to_vec())))
                        } else {
                            e.first().cloned().map(intern)
                        }
                    }
                    _ => Some(self.spread_sh(&i.shape, us.clone())),
                }
            }
            Gather => self.gather_operand_from_output(id, user, index).map(intern),
            Scatter => self
                .scatter_operand_from_output(id, user, index)
                .map(intern),
            Call => {
                let callee = *u.called.first()?;
                if self.caller[callee.index()] != Some(user) {
                    return None;
                }
                let p = m.comp(callee).parameter(index)?;
                self.cur_sh(p).cloned()
            }
            Conditional => {
                if index == 0 {
                    return None;
                }
                let branch = *u.called.get(index - 1)?;
                if self.caller[branch.index()] != Some(user) {
                    return None;
                }
                let p = m.comp(branch).parameter(0)?;
                self.cur_sh(p).cloned()
            }
            _ => compatible_ignoring_type(&i.shape, &u.shape).then(|| us.clone()),
        }
    }

    /// The sharding a concatenate operand should have: the user's, or in non-SPMD mode with a
    /// tiled concatenate dimension, the slice of the tile assignment the operand's rows fall in.
    pub(super) fn concat_operand_from_user(
        &self,
        id: InstrId,
        user: InstrId,
        index: usize,
    ) -> Option<Sharding> {
        let u = self.m.instr(user);
        let us = self.cur(user)?;
        if us.is_replicated() || self.spmd {
            return Some(us.clone());
        }
        let t = us.as_tiled()?;
        let cdim = dims_attr(&u.attrs).first().copied()? as usize;
        let tdims = t.tile_assignment.dims();
        if tdims[cdim] == 1 {
            return Some(us.clone());
        }
        let start: i64 = u.operands()[..index]
            .iter()
            .map(|&o| self.shape(o).dims()[cdim])
            .sum();
        let tile = (u.shape.dims()[cdim] + tdims[cdim] - 1) / tdims[cdim];
        let first = start / tile;
        let last = (start + self.shape(id).dims()[cdim] + tile - 1) / tile;
        let mut dims: tessera_hlo::sharding::TileDims = tdims.iter().copied().collect();
        dims[cdim] = last - first;
        let n: i64 = dims.iter().product();
        let mut devices = Vec::with_capacity(n as usize);
        let mut idx: SmallVec<[i64; 4]> = SmallVec::from_elem(0, dims.len());
        for l in 0..n {
            let mut rest = l;
            for k in (0..dims.len()).rev() {
                idx[k] = rest % dims[k];
                rest /= dims[k];
            }
            idx[cdim] += first;
            devices.push(t.tile_assignment.device_at(&idx));
        }
        if n == 1 {
            return Some(Sharding::maximal(devices[0]));
        }
        let ta = tessera_hlo::TileAssignment::Explicit { dims, devices };
        Some(Sharding::subgroup(ta, &t.subgroup_types()))
    }

    /// XLA's `InferDotOperandSharding`: the output sharding with the other operand's
    /// non-contracting dimensions replicated, moved to operand `k`'s dimensions, merged with
    /// what the other operand's sharding says about the batch and contracting dimensions.
    pub(super) fn dot_operand_sharding(
        &self,
        user: InstrId,
        dims: u32,
        k: usize,
        mc: bool,
    ) -> Option<Sh> {
        let u = self.m.instr(user);
        let us = self.cur_sh(user)?;
        let (op, other) = (u.operand(k), u.operand(1 - k));
        let key = Op::DotOperand {
            dims,
            k,
            mc,
            out_rank: u.shape.rank(),
            op_rank: self.shape(op).rank(),
            other_rank: self.shape(other).rank(),
            other: self.cur_sh(other).filter(|_| self.sp(other)).cloned(),
        };
        self.memo.algebra(us, key, |us, key| {
            let Op::DotOperand {
                dims,
                k,
                mc,
                out_rank,
                op_rank,
                other_rank,
                other,
            } = key
            else {
                unreachable!()
            };
            let dd = self.memo.dot_dims(*dims);
            dot_operand_sharding(
                us,
                &dd,
                *k,
                *mc,
                *out_rank,
                *op_rank,
                *other_rank,
                other.as_deref(),
            )
        })
    }
}
