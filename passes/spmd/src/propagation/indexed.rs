//! Gather and scatter in both directions: XLA's gather/scatter cases of
//! `InferShardingFromOperands` and `GetShardingFromUser`, over the dimension maps of
//! `crate::gather_scatter`.

use super::*;

impl<'m> Propagator<'m> {
    //
    // XLA's Gather/Scatter cases of InferShardingFromOperands and GetShardingFromUser; the
    // dimension mappings and the sharding algebra are in `crate::gather_scatter`.

    /// The gather `id` in common terms (`None` when its dimension numbers do not fit its
    /// shapes; the verifier reports those).
    pub(super) fn gather_of(&self, id: InstrId) -> Option<GatherScatter> {
        let i = self.m.instr(id);
        let dn = i.attrs.gather_dims.as_deref()?;
        let slice_sizes = i.attrs.gather_slice_sizes.as_deref()?;
        let (&op, &idx) = (i.operands().first()?, i.operands().get(1)?);
        GatherScatter::gather(
            dn,
            slice_sizes,
            self.shape(op).dims(),
            self.shape(idx).dims(),
            i.shape.rank(),
        )
        .ok()
    }

    /// The scatter `id` in common terms, with its number of operands (and of updates).
    pub(super) fn scatter_of(&self, id: InstrId) -> Option<(GatherScatter, usize)> {
        let i = self.m.instr(id);
        let dn = i.attrs.scatter_dims.as_deref()?;
        let ops = i.operands();
        let n = ops.len().checked_sub(1)? / 2;
        if n == 0 || ops.len() != 2 * n + 1 {
            return None;
        }
        let g = GatherScatter::scatter(
            dn,
            self.shape(ops[0]).dims(),
            self.shape(ops[n]).dims(),
            self.shape(ops[n + 1]).dims(),
        )
        .ok()?;
        Some((g, n))
    }

    /// For each index component of `indices`, the indices dimension it is an iota along.
    pub(super) fn gs_iotas(&self, g: &GatherScatter, indices: InstrId) -> Vec<Option<usize>> {
        let caller = |c: CompId| self.caller[c.index()];
        gs::index_component_iotas(
            self.m,
            indices,
            g.index_vector_dim,
            g.index_map.len(),
            &caller,
        )
    }

    /// XLA's gather case of `InferShardingFromOperands`: explicit batching dimensions, index
    /// pass-through, then (SPMD) the implicit parallel dimensions and operand pass-through of
    /// the operand's other dimensions.
    pub(super) fn forward_gather(&mut self, id: InstrId, mc: bool) -> bool {
        let Some(g) = self.gather_of(id) else {
            return false;
        };
        let i = self.m.instr(id);
        let (op, idx) = (i.operand(0), i.operand(1));
        let mut changed = false;
        if !g.operand_batching.is_empty() {
            changed |= self.gather_parallel_forward(id, &g, &g.explicit_batch(), mc);
        }
        if self.sp(idx) {
            if let Some(s) = gs::output_from_indices(&g, self.cur(idx).unwrap()) {
                changed |= self.improve(id, s, mc, false);
            }
        }
        if self.spmd {
            let implicit = g.implicit_parallel(&self.gs_iotas(&g, idx));
            if let Some(p) = &implicit {
                changed |= self.gather_parallel_forward(id, &g, p, mc);
            }
            if self.sp(op) {
                let s = self.cur(op).unwrap();
                let filtered = match &implicit {
                    Some(p) => s.replicate_on_dims(&p.operand),
                    None => s.clone(),
                };
                if let Some(s) = gs::output_from_operand_passthrough(&g, &filtered) {
                    changed |= self.improve(id, s, mc, false);
                }
            }
        }
        changed
    }

    /// XLA's `InferGatherParallelShardingFromOperands`: the operand's and the indices' tiles on
    /// the parallel dimensions `p`, moved to the output.
    pub(super) fn gather_parallel_forward(
        &mut self,
        id: InstrId,
        g: &GatherScatter,
        p: &DimMap,
        mc: bool,
    ) -> bool {
        let i = self.m.instr(id);
        let (op, idx) = (i.operand(0), i.operand(1));
        let mut changed = false;
        for (x, dims) in [(op, &p.operand), (idx, &p.indices)] {
            if !self.sp(x) {
                continue;
            }
            let s = self.cur(x).unwrap();
            if let Some(s) = gs::propagate_along_dims(s, dims, &p.output, g.output_rank) {
                changed |= self.improve(id, s, mc, false);
            }
        }
        changed
    }

    /// XLA's scatter case of `InferShardingFromOperands`: explicit batching dimensions, then
    /// (SPMD) each operand's sharding on its output, the implicit parallel dimensions, and each
    /// update's window dimensions passed through to its output. Outside SPMD mode a scatter is
    /// replicated.
    pub(super) fn forward_scatter(&mut self, id: InstrId, mc: bool) -> bool {
        let Some((g, n)) = self.scatter_of(id) else {
            return false;
        };
        let ops: SmallVec<[InstrId; 3]> = self.m.instr(id).operands().iter().copied().collect();
        let idx = ops[n];
        let mut changed = false;
        if !g.operand_batching.is_empty() {
            changed |= self.scatter_parallel_forward(id, &g, &g.explicit_batch(), n, mc);
        }
        if !self.spmd {
            for k in 0..n {
                changed |= self.improve_leaf(id, k, Sharding::replicated(), mc);
            }
            return changed;
        }
        for (k, &op) in ops[..n].iter().enumerate() {
            if self.sp(op) {
                let s = self.cur(op).unwrap().clone();
                changed |= self.improve_leaf(id, k, s, mc);
            }
        }
        if !self.sp(idx) && !ops[n + 1..].iter().any(|&u| self.sp(u)) {
            return changed;
        }
        if let Some(p) = g.implicit_parallel(&self.gs_iotas(&g, idx)) {
            changed |= self.scatter_parallel_forward(id, &g, &p, n, mc);
        }
        for (k, &upd) in ops[n + 1..].iter().enumerate() {
            if !self.sp(upd) {
                continue;
            }
            if let Some(s) = gs::operand_from_output_passthrough(&g, self.cur(upd).unwrap()) {
                changed |= self.improve_leaf(id, k, s, mc);
            }
        }
        changed
    }

    /// XLA's `InferScatterParallelShardingFromOperands`: the tiles of the operands, the indices
    /// and the updates on the parallel dimensions `p`, moved to the output's operand dimensions.
    pub(super) fn scatter_parallel_forward(
        &mut self,
        id: InstrId,
        g: &GatherScatter,
        p: &DimMap,
        n: usize,
        mc: bool,
    ) -> bool {
        let ops: SmallVec<[InstrId; 3]> = self.m.instr(id).operands().iter().copied().collect();
        let rank = g.operand.len();
        let mut changed = false;
        for (k, &op) in ops[..n].iter().enumerate() {
            if !self.sp(op) {
                continue;
            }
            let s = gs::propagate_along_dims(self.cur(op).unwrap(), &p.operand, &p.operand, rank);
            if let Some(s) = s {
                changed |= self.improve_leaf(id, k, s, mc);
            }
        }
        if self.sp(ops[n]) {
            let s =
                gs::propagate_along_dims(self.cur(ops[n]).unwrap(), &p.indices, &p.operand, rank);
            if let Some(s) = s {
                for k in 0..n {
                    changed |= self.improve_leaf(id, k, s.clone(), mc);
                }
            }
        }
        for (k, &upd) in ops[n + 1..].iter().enumerate() {
            if !self.sp(upd) {
                continue;
            }
            let s = gs::propagate_along_dims(self.cur(upd).unwrap(), &p.output, &p.operand, rank);
            if let Some(s) = s {
                changed |= self.improve_leaf(id, k, s, mc);
            }
        }
        changed
    }

    /// XLA's `MaybeImproveInstructionSubSharding`: `improve` on element `k` of a tuple-shaped
    /// instruction (the whole instruction when it is an array); the other elements start
    /// replicated when the instruction had no sharding.
    pub(super) fn improve_leaf(&mut self, id: InstrId, k: usize, new: Sharding, mc: bool) -> bool {
        let shape = self.shape(id);
        if !shape.is_tuple() {
            return self.improve(id, new, mc, false);
        }
        let Some(elem) = shape.tuple_elements().get(k) else {
            return false;
        };
        let (start, len) = leaf_range(shape, k);
        if len != 1 || !new.is_spatially_partitioned() || !fits(&new, elem) {
            return false;
        }
        let mut leaves = match self.cur(id).map(|s| &s.kind) {
            Some(ShardingKind::Tuple(e)) if e.len() == shape.leaf_count() => e.clone(),
            Some(_) => return false,
            None => {
                let mut leaves = vec![Sharding::replicated(); shape.leaf_count()];
                leaves[start] = new;
                self.set(id, Sharding::tuple(leaves));
                return true;
            }
        };
        let Some(better) = improved_array_sharding(&leaves[start], new, elem.rank(), mc) else {
            return false;
        };
        leaves[start] = better;
        self.set(id, Sharding::tuple(leaves));
        true
    }

    /// XLA's gather case of `GetShardingFromUser`: the indices from the output's batch
    /// dimensions; in SPMD mode the operand from the output's parallel and pass-through
    /// dimensions.
    pub(super) fn gather_operand_from_output(
        &self,
        id: InstrId,
        user: InstrId,
        _index: usize,
    ) -> Option<Sharding> {
        let g = self.gather_of(user)?;
        let u = self.m.instr(user);
        let us = self.cur(user)?;
        if u.operand(1) == id {
            return gs::indices_from_output(&g, us);
        }
        if !self.spmd {
            return None;
        }
        let p = g.parallel(&self.gs_iotas(&g, u.operand(1)));
        gs::gather_operand_from_output(&g, us, &p)
    }

    /// XLA's scatter case of `GetShardingFromUser`: an operand takes its output's sharding; the
    /// indices the common sharding of what the sharded updates say about them; an update what
    /// its output says (parallel and pass-through dimensions, SPMD only) merged with what the
    /// indices say, or only the latter.
    pub(super) fn scatter_operand_from_output(
        &self,
        id: InstrId,
        user: InstrId,
        _index: usize,
    ) -> Option<Sharding> {
        let (g, n) = self.scatter_of(user)?;
        let u = self.m.instr(user);
        let us = self.cur(user)?;
        let ops = u.operands();
        let element = |k: usize| -> Sharding {
            if u.shape.is_tuple() {
                sub_sharding(us, &u.shape, k)
            } else {
                us.clone()
            }
        };
        if let Some(k) = ops[..n].iter().position(|&o| o == id) {
            return Some(element(k));
        }
        let idx = ops[n];
        if idx == id {
            let from_updates: Vec<Sharding> = ops[n + 1..]
                .iter()
                .filter(|&&upd| self.sp(upd))
                .filter_map(|&upd| gs::indices_from_output(&g, self.cur(upd).unwrap()))
                .collect();
            return common_sharding(&from_updates);
        }
        let k = ops[n + 1..].iter().position(|&o| o == id)?;
        let from_indices = if self.sp(idx) {
            gs::output_from_indices(&g, self.cur(idx).unwrap())
        } else {
            Some(Sharding::replicated())
        };
        if self.spmd {
            let p = g.parallel(&self.gs_iotas(&g, idx));
            if let Some(mut from_output) = gs::scatter_update_from_output(&g, &element(k), &p) {
                if let Some(fi) = &from_indices {
                    let min = from_output.num_tiles() + 1;
                    merge_if_compatible(fi, min, &mut from_output);
                }
                if !from_output.is_tile_maximal() {
                    return Some(from_output);
                }
            }
        }
        from_indices.filter(|s| !s.is_tile_maximal())
    }
}
