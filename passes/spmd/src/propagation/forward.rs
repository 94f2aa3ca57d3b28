//! Forward rules (XLA's `InferShardingFromOperands`): the sharding an instruction gets
//! from its operands, per opcode family (element-wise, tuples, reduces, dots, convolutions,
//! dynamic slices).

use super::*;

impl<'m> Propagator<'m> {
    /// The operand with the most specific sharding (XLA's `PickRepresentativeOperand`).
    pub(super) fn representative(&self, id: InstrId) -> Option<InstrId> {
        use Opcode::*;
        let i = self.m.instr(id);
        match i.opcode() {
            Map | Pad | Power | OptimizationBarrier | Reverse | Slice | ShiftLeft
            | ShiftRightArithmetic | ShiftRightLogical => {
                let op = *i.operands().first()?;
                self.cur(op).is_some().then_some(op)
            }
            CustomCall => {
                if is_passthrough_custom_call(i, self.m) {
                    i.operands().first().copied()
                } else {
                    None
                }
            }
            op if op.is_elementwise()
                || matches!(
                    op,
                    Concatenate
                        | Sort
                        | While
                        | AllGather
                        | AllReduce
                        | ReduceScatter
                        | AllToAll
                        | CollectivePermute
                ) =>
            {
                let mut best: Option<InstrId> = None;
                for &o in i.operands() {
                    let Some(s) = self.cur(o) else { continue };
                    if best.is_none_or(|b| s.more_specific_than(self.cur(b).unwrap())) {
                        best = Some(o);
                    }
                }
                best
            }
            _ => None,
        }
    }

    pub(super) fn infer_from_operands(&mut self, id: InstrId, level: u8) -> bool {
        use Opcode::*;
        let m = self.m;
        let i = m.instr(id);
        if !can_propagate_at(i, level) {
            return false;
        }
        // Manual shardings flow into everything computed from a manual value.
        if let Some(changed) = self.forward_manual(id, level) {
            return changed;
        }
        let mc = self.spmd && level > 0;
        if !self.supports_partitioning(id, self.allow_output, false) {
            return self.forward_unpartitionable(id, mc);
        }
        let aggressive = self.non_root_users_is_one(id);
        match i.opcode() {
            GetTupleElement => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                let s = sub_sharding(
                    self.cur(op).unwrap(),
                    self.shape(op),
                    i.attrs.tuple_index as usize,
                );
                let s = self.memo.intern(s);
                if s.is_manual() {
                    let changed = self.cur_sh(id) != Some(&s);
                    self.put(id, Some(s));
                    return changed;
                }
                self.improve_sh(id, s, mc, aggressive)
            }
            Tuple => self.forward_tuple(id),
            Reduce => self.forward_reduce(id, mc, aggressive),
            Broadcast => {
                if level < 3 {
                    return false;
                }
                let op = i.operand(0);
                let Some(s) = self
                    .cur_sh(op)
                    .filter(|s| s.is_spatially_partitioned() && !s.is_replicated())
                else {
                    return false;
                };
                let map = idx(dims_attr(&i.attrs).iter().map(|&d| d as usize));
                let Some(new) = self.inserted_dims(s, i.shape.rank(), map) else {
                    return false;
                };
                self.improve_sh(id, new, mc, aggressive)
            }
            Concatenate => self.forward_concatenate(id, level, mc, aggressive),
            Convolution => self.forward_convolution(id, mc),
            Dot => {
                let Some(dims) = self.dims_of(id) else {
                    return false;
                };
                self.forward_dot(id, dims, mc)
            }
            Transpose => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                let perm = idx(dims_attr(&i.attrs).iter().map(|&d| d as usize));
                let Some(s) = self.transposed(self.cur_sh(op).unwrap(), perm) else {
                    return false;
                };
                self.improve_sh(id, s, mc, aggressive)
            }
            ReduceWindow => {
                if let Some(w) = i.attrs.window.as_deref() {
                    if w.dims
                        .iter()
                        .any(|d| d.base_dilation > 1 || d.window_dilation > 1)
                    {
                        return false;
                    }
                }
                let n = i.operands().len() / 2;
                let mut changed = false;
                for k in 0..n {
                    let op = i.operand(k);
                    if !self.sp(op) {
                        continue;
                    }
                    let s = spread(&i.shape, self.cur(op).unwrap().clone());
                    changed |= self.improve(id, s, mc, aggressive);
                }
                changed
            }
            SelectAndScatter => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                if let Some(w) = i.attrs.window.as_deref() {
                    if w.dims.iter().any(|d| d.base_dilation > 1) {
                        return false;
                    }
                }
                let s = self.cur_sh(op).unwrap().clone();
                self.improve_sh(id, s, mc, aggressive)
            }
            Reshape => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                let new = self.through_reshape(self.cur_sh(op).unwrap(), id, 0);
                self.improve_sh(id, new, mc, aggressive)
            }
            Reverse => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                let dims: Vec<usize> = dims_attr(&i.attrs).iter().map(|&d| d as usize).collect();
                let s = self.cur(op).unwrap().reverse_dims(&dims);
                self.improve(id, s, mc, aggressive)
            }
            Parameter => self.forward_parameter(id, mc),
            Sort => self.forward_sort(id, mc, aggressive),
            DynamicSlice | DynamicUpdateSlice => self.forward_dynamic_slice(id, level, mc),
            Gather => self.forward_gather(id, mc),
            Scatter => self.forward_scatter(id, mc),
            While => {
                let Some(mut s) = self.cur_sh(i.operand(0)).cloned() else {
                    return false;
                };
                if let Some(old) = self.cur_sh(id) {
                    // What the merge leaves in the candidate counts, merged or not.
                    s = self.memo.merge_sharding(old, &s, mc).1;
                }
                self.improve_sh(id, s, mc, false)
            }
            CustomCall => self.forward_custom_call(id, mc, aggressive),
            Conditional | Call => false,
            _ => self.forward_default(id, mc, aggressive),
        }
    }

    /// An unpartitionable array op next to a replicated operand is replicated too.
    fn forward_unpartitionable(&mut self, id: InstrId, mc: bool) -> bool {
        let m = self.m;
        let i = m.instr(id);
        if i.shape.is_tuple() || i.operands().is_empty() || self.is_root(id) || i.has_side_effect()
        {
            return false;
        }
        for &op in i.operands() {
            if let Some(s) = self.cur_sh(op) {
                if s.is_tile_maximal() && !matches!(s.kind, ShardingKind::Maximal(_)) {
                    let s = s.clone();
                    return self.improve_sh(id, s, mc, false);
                }
            }
        }
        false
    }

    /// A concatenate takes its representative operand's sharding; at level 0 only when no
    /// operand is split along the concatenated dimension.
    fn forward_concatenate(&mut self, id: InstrId, level: u8, mc: bool, aggressive: bool) -> bool {
        let m = self.m;
        let i = m.instr(id);
        let Some(op) = self.representative(id).filter(|&o| self.sp(o)) else {
            return false;
        };
        if level == 0 {
            let cdim = dims_attr(&i.attrs).first().copied().unwrap_or(0) as usize;
            for &o in i.operands() {
                if !self.concat_operand_passes(o) {
                    return false;
                }
                let t = self.cur(o).and_then(Sharding::as_tiled);
                if t.is_some_and(|t| t.tile_assignment.dims().get(cdim).is_some_and(|&d| d > 1)) {
                    return false;
                }
            }
        }
        let s = self.cur_sh(op).unwrap().clone();
        self.improve_sh(id, s, mc, aggressive)
    }

    /// A parameter of a called computation takes the sharding of the caller's operand.
    fn forward_parameter(&mut self, id: InstrId, mc: bool) -> bool {
        use Opcode::*;
        let m = self.m;
        let i = m.instr(id);
        let Some(c) = self.caller[i.parent().index()] else {
            return false;
        };
        let ci = m.instr(c);
        let op = match ci.opcode() {
            Conditional => {
                let Some(b) = ci.called.iter().position(|&x| x == i.parent()) else {
                    return false;
                };
                ci.operands().get(b + 1).copied()
            }
            Call => ci
                .operands()
                .get(i.attrs.parameter_number as usize)
                .copied(),
            _ => None,
        };
        let Some(s) = op.and_then(|o| self.cur_sh(o)).cloned() else {
            return false;
        };
        self.improve_sh(id, s, mc, false)
    }

    /// A sort takes its representative operand's sharding, spread over its outputs.
    fn forward_sort(&mut self, id: InstrId, mc: bool, aggressive: bool) -> bool {
        let m = self.m;
        let i = m.instr(id);
        let Some(op) = self.representative(id).filter(|&o| self.sp(o)) else {
            return false;
        };
        let s = self.cur(op).unwrap().clone();
        let sort_dim = dims_attr(&i.attrs).first().copied().unwrap_or(0) as usize;
        // Sharded along the sort dimension: only when the partitioner can move those
        // tiles to another dimension (XLA's GetFirstTargetDimToMoveShardingTiles).
        if s.as_tiled().is_some_and(|t| {
            t.tile_assignment
                .dims()
                .get(sort_dim)
                .is_some_and(|&d| d != 1)
        }) && first_target_dim_to_move_tiles(self.shape(op), &s, sort_dim).is_none()
        {
            return false;
        }
        self.improve(id, spread(&i.shape, s), mc, aggressive)
    }

    /// Custom calls: shard barriers and pass-through targets.
    fn forward_custom_call(&mut self, id: InstrId, mc: bool, aggressive: bool) -> bool {
        let m = self.m;
        let i = m.instr(id);
        // Nothing flows forward through a ShardBarrierFrom; a ShardBarrierTo takes its
        // operand's sharding (as the barrier partitioners say).
        if is_shard_barrier(i) == Some(true) {
            return false;
        }
        let op = if is_shard_barrier(i) == Some(false) {
            Some(i.operand(0))
        } else {
            self.representative(id)
        };
        let Some(op) = op.filter(|&o| self.sp(o)) else {
            return false;
        };
        let s = self.cur_sh(op).unwrap().clone();
        self.improve_sh(id, s, mc, aggressive)
    }

    /// Every other opcode: element-wise ops (and rng) when manual-aware, else the
    /// representative operand's sharding.
    fn forward_default(&mut self, id: InstrId, mc: bool, aggressive: bool) -> bool {
        use Opcode::*;
        let m = self.m;
        let i = m.instr(id);
        if (i.opcode().is_elementwise() || i.opcode() == Rng) && mc {
            let mut changed = false;
            let single = i.operands().len() == 1;
            for &op in i.operands() {
                if !self.sp(op) {
                    continue;
                }
                let s = self.cur_sh(op).unwrap().clone();
                if i.opcode() == Rng {
                    let s = s.replicate_all_data_dims(Some(i.shape.rank()));
                    changed |= self.improve(id, s, mc, aggressive);
                    continue;
                }
                changed |= self.improve_sh(id, s, mc, single && aggressive);
            }
            return changed;
        }
        let Some(op) = self.representative(id).filter(|&o| self.sp(o)) else {
            return false;
        };
        let s = self.cur_sh(op).unwrap().clone();
        self.improve_sh(id, s, mc, aggressive)
    }

    /// XLA's `AggressiveConcatOperandShardingCanPassThrough`.
    pub(super) fn concat_operand_passes(&self, o: InstrId) -> bool {
        let i = self.m.instr(o);
        self.sp(o)
            && self.cur(o).is_some_and(|s| s.num_tiles() > 1)
            && i.opcode() == Opcode::Reshape
            && matches!(
                self.m.instr(i.operand(0)).opcode(),
                Opcode::Parameter | Opcode::GetTupleElement
            )
    }

    pub(super) fn forward_tuple(&mut self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        if !i.operands().iter().any(|&o| self.sp(o)) {
            return false;
        }
        let had = self.cur(id).is_some();
        let mut leaves: Vec<Sharding> = match self.cur(id).map(|s| &s.kind) {
            Some(ShardingKind::Tuple(e)) => e.clone(),
            _ => vec![Sharding::replicated(); i.shape.leaf_count()],
        };
        let mut k = 0;
        for &o in i.operands() {
            let oshape = self.shape(o);
            let n = oshape.leaf_count();
            if let Some(s) = self.cur(o) {
                let olv: Vec<Sharding> = match &s.kind {
                    // An outfeed's value is its token: the last leaf of its sharding.
                    ShardingKind::Tuple(e) if self.m.instr(o).opcode() == Opcode::Outfeed => {
                        e.last().cloned().into_iter().collect()
                    }
                    ShardingKind::Tuple(e) => e.clone(),
                    _ => vec![s.clone(); n],
                };
                for (j, os) in olv.into_iter().enumerate().take(n) {
                    if let Some(slot) = leaves.get_mut(k + j) {
                        if !had || os.more_specific_than(slot) {
                            *slot = os;
                        }
                    }
                }
            }
            k += n;
        }
        let new = self.memo.intern(Sharding::tuple(leaves));
        if self.cur_sh(id) != Some(&new) {
            self.put(id, Some(new));
            return true;
        }
        false
    }

    pub(super) fn forward_reduce(&mut self, id: InstrId, mc: bool, aggressive: bool) -> bool {
        let i = self.m.instr(id);
        let n = i.operands().len() / 2;
        let rdims: Vec<usize> = dims_attr(&i.attrs).iter().map(|&d| d as usize).collect();
        let mut changed = false;
        for k in 0..n {
            let op = i.operand(k);
            if !self.sp(op) {
                continue;
            }
            let s = self.cur_sh(op).unwrap().clone();
            let tiles_reduced = s.as_tiled().is_some_and(|t| {
                rdims
                    .iter()
                    .any(|&d| t.tile_assignment.dims().get(d).is_some_and(|&x| x > 1))
            });
            if s.is_replicated() || (!self.spmd && tiles_reduced) {
                changed |= self.improve(
                    id,
                    spread(&i.shape, s.replicate_all_data_dims(None)),
                    mc,
                    aggressive,
                );
                continue;
            }
            // Replicated after replicating the reduced dimensions: stays replicated (removing
            // dimensions of a replicated sharding keeps it).
            let Some(new) = self.replicated_and_removed(&s, &rdims) else {
                continue;
            };
            let new = self.spread_sh(&i.shape, new);
            changed |= self.improve_sh(id, new, mc, aggressive);
        }
        changed
    }

    /// XLA's `InferDotShardingFromOperands`: each operand's sharding with its contracting
    /// dimensions replicated, moved to the output dimensions. When both improve the output, the
    /// one whose tiling the next sharded user (through a chain of single users) refines goes
    /// first, else the larger operand; the other then merges in.
    pub(super) fn forward_dot(&mut self, id: InstrId, dims: u32, mc: bool) -> bool {
        let i = self.m.instr(id);
        let (l, r) = (i.operand(0), i.operand(1));
        let from = |p: &Self, k: usize, op: InstrId| -> Option<Sh> {
            if !p.sp(op) {
                return None;
            }
            let s = p.dot_from_operand(id, dims, k)?;
            p.improved(id, s, mc, false)
        };
        let (a, b) = (from(self, 0, l), from(self, 1, r));
        let (first, second) = match (a, b) {
            (None, None) => return false,
            (Some(s), None) | (None, Some(s)) => {
                self.put(id, Some(s));
                return true;
            }
            (Some(a), Some(b)) => {
                let shape = self.shape(id);
                let by_lookahead = self.lookahead_user_sharding(id).and_then(|la| {
                    match (is_sub_tiling(shape, &la, &a), is_sub_tiling(shape, &la, &b)) {
                        (true, false) => Some(false),
                        (false, true) => Some(true),
                        _ => None,
                    }
                });
                let swap = by_lookahead
                    .unwrap_or_else(|| self.shape(l).byte_size(8) < self.shape(r).byte_size(8));
                if swap {
                    (b, a)
                } else {
                    (a, b)
                }
            }
        };
        self.put(id, Some(first));
        self.improve_sh(id, second, mc, false);
        true
    }

    /// XLA's `LookaheadUserSharding`: following `id`'s single user, and its single user, and
    /// so on up to the first one with a sharding, the sharding that user asks of `id`.
    pub(super) fn lookahead_user_sharding(&mut self, id: InstrId) -> Option<Sh> {
        let m = self.m;
        if m.instr(id).users().len() != 1 {
            return None;
        }
        let mut chain = vec![id, m.instr(id).users()[0]];
        while self.cur(*chain.last().unwrap()).is_none() {
            let users = m.instr(*chain.last().unwrap()).users();
            if users.len() != 1 {
                return None;
            }
            chain.push(users[0]);
        }
        let mut result = None;
        for k in (1..chain.len()).rev() {
            result = self.sharding_from_user(chain[k - 1], chain[k], 3);
            match &result {
                Some(s) if k != 1 => self.put(chain[k - 1], Some(s.clone())),
                _ => break,
            }
        }
        // The chain's middle had no sharding: it gets none back.
        for &c in &chain[1..chain.len() - 1] {
            self.put(c, None);
        }
        result
    }

    pub(super) fn dot_from_operand(&self, id: InstrId, dims: u32, k: usize) -> Option<Sh> {
        let i = self.m.instr(id);
        let op = i.operand(k);
        let s = self.cur_sh(op)?;
        if s.is_tile_maximal() {
            return Some(s.clone());
        }
        let key = Op::DotFromOperand {
            dims,
            k,
            out_rank: i.shape.rank(),
            op_rank: self.shape(op).rank(),
        };
        self.memo.algebra(s, key, |s, op| {
            let Op::DotFromOperand {
                dims,
                k,
                out_rank,
                op_rank,
            } = op
            else {
                unreachable!()
            };
            let dd = self.memo.dot_dims(*dims);
            dot_from_operand_sharding(s, &dd, *k, *out_rank, *op_rank)
        })
    }
}

/// The sharding operand `k` (of rank `op_rank`, sharded `s`) gives the output (of rank
/// `out_rank`) of a dot with dimensions `dd`: contracting dimensions and the other operand's
/// non-contracting ones replicated, the rest moved to their output dimensions.
pub(super) fn dot_from_operand_sharding(
    s: &Sharding,
    dd: &DotDims,
    k: usize,
    out_rank: usize,
    op_rank: usize,
) -> Option<Sharding> {
    let mut contracting: Vec<usize> = dd
        .contracting
        .iter()
        .map(|d| d.operand(k) as usize)
        .collect();
    for d in dd.non_contracting(1 - k) {
        if d.operand(k) >= 0 {
            contracting.push(d.operand(k) as usize);
        }
    }
    let rep = s.replicate_on_dims(&contracting);
    let mut out_to_op = vec![-1i64; out_rank];
    let mut op_to_out = vec![-1i64; op_rank];
    for d in dd.batch.iter().chain(dd.non_contracting(k)) {
        let (o, x) = (d.out, d.operand(k));
        if o >= 0 && x >= 0 {
            out_to_op[o as usize] = x;
            op_to_out[x as usize] = o;
        }
    }
    rep.transpose_collapsed(&op_to_out, &out_to_op)
}

/// XLA's `InferDotOperandSharding` on shardings: the output sharding `us` (rank `out_rank`) with
/// the other operand's non-contracting dimensions replicated, moved to operand `k`'s dimensions
/// (rank `op_rank`), merged with what the other operand's sharding `os` (rank `other_rank`, when
/// spatially partitioned) says about the batch and contracting dimensions.
#[allow(clippy::too_many_arguments)]
pub(super) fn dot_operand_sharding(
    us: &Sharding,
    dd: &DotDims,
    k: usize,
    mc: bool,
    out_rank: usize,
    op_rank: usize,
    other_rank: usize,
    os: Option<&Sharding>,
) -> Option<Sharding> {
    let mut out_rep: Vec<usize> = Vec::new();
    let mut other_rep: Vec<usize> = Vec::new();
    for d in dd.non_contracting(1 - k) {
        if d.out >= 0 {
            out_rep.push(d.out as usize);
        }
        if d.operand(1 - k) >= 0 {
            other_rep.push(d.operand(1 - k) as usize);
        }
    }
    for d in &dd.contracting {
        if d.out >= 0 {
            out_rep.push(d.out as usize);
        }
    }
    for d in dd.non_contracting(k) {
        if d.operand(1 - k) >= 0 {
            other_rep.push(d.operand(1 - k) as usize);
        }
    }
    let out_r = us.replicate_on_dims(&out_rep);
    let mut out_to_op = vec![-1i64; out_rank];
    let mut op_to_out = vec![-1i64; op_rank];
    for d in dd.batch.iter().chain(dd.non_contracting(k)) {
        if d.out >= 0 && d.operand(k) >= 0 {
            out_to_op[d.out as usize] = d.operand(k);
            op_to_out[d.operand(k) as usize] = d.out;
        }
    }
    let mut s = out_r.transpose_collapsed(&out_to_op, &op_to_out)?;
    if let Some(os) = os {
        let os = os.replicate_on_dims(&other_rep);
        let mut other_to_op = vec![-1i64; other_rank];
        let mut op_to_other = vec![-1i64; op_rank];
        for d in dd.batch.iter().chain(&dd.contracting) {
            let (x, y) = (d.operand(1 - k), d.operand(k));
            if x >= 0 && y >= 0 {
                other_to_op[x as usize] = y;
                op_to_other[y as usize] = x;
            }
        }
        if let Some(mut from_other) = os.transpose_collapsed(&other_to_op, &op_to_other) {
            if merge_sharding(&s, &mut from_other, mc) {
                s = from_other;
            }
        }
    }
    Some(s)
}

impl Propagator<'_> {
    pub(super) fn forward_convolution(&mut self, id: InstrId, mc: bool) -> bool {
        let i = self.m.instr(id);
        let (l, r) = (i.operand(0), i.operand(1));
        let Some(cd) = i.attrs.conv_dims.as_deref() else {
            return false;
        };
        let dd = conv_dims(
            cd,
            i.attrs.window.as_deref(),
            self.shape(l).dims(),
            self.shape(r).dims(),
            i.shape.dims(),
            i.attrs.feature_group_count,
            i.attrs.batch_group_count,
        );
        let parts = |op: InstrId, k: usize| -> i64 {
            match self.cur(op).and_then(Sharding::as_tiled) {
                Some(t) => dd
                    .conv_spatial
                    .iter()
                    .map(|d| t.tile_assignment.dims()[d.operand(k) as usize])
                    .product(),
                None => 1,
            }
        };
        if dd.conv_spatial.is_empty()
            || (parts(l, 0) == 1
                && parts(r, 1) == 1
                && i.attrs.batch_group_count == 1
                && i.attrs.feature_group_count == 1)
        {
            let Some(dims) = self.dims_of(id) else {
                return false;
            };
            return self.forward_dot(id, dims, mc);
        }
        if !self.sp(l) {
            return false;
        }
        let ls = self.cur(l).unwrap().clone();
        if ls.is_tile_maximal() {
            return self.improve(id, ls, mc, false);
        }
        if self.conv_kernel_small(id) {
            let t = ls.as_tiled().unwrap();
            if t.tile_assignment.dims()[cd.input_feature_dimension as usize] > 1 {
                return false;
            }
            // Output dimension j is lhs dimension perm[j].
            let mut perm = vec![0usize; i.shape.rank()];
            perm[cd.output_batch_dimension as usize] = cd.input_batch_dimension as usize;
            perm[cd.output_feature_dimension as usize] = cd.input_feature_dimension as usize;
            for (k, &o) in cd.output_spatial_dimensions.iter().enumerate() {
                perm[o as usize] = cd.input_spatial_dimensions[k] as usize;
            }
            let Some(s) = ls.transpose(&perm) else {
                return false;
            };
            return self.improve(id, s.normalized(), mc, false);
        }
        // A large kernel (a backward convolution, say): only the batch tiling is kept.
        let s = ls.replicate_all_except(&[cd.input_batch_dimension as usize]);
        let Some(s) = s.transpose_collapsed(&self.conv_lhs_to_out(id), &self.conv_out_to_lhs(id))
        else {
            return false;
        };
        self.improve(id, s, mc, false)
    }

    /// Output dimension of each lhs dimension of convolution `id` (batch, feature, spatial).
    pub(super) fn conv_lhs_to_out(&self, id: InstrId) -> Vec<i64> {
        let i = self.m.instr(id);
        let cd = i.attrs.conv_dims.as_deref().unwrap();
        let mut v = vec![-1i64; self.shape(i.operand(0)).rank()];
        v[cd.input_batch_dimension as usize] = cd.output_batch_dimension;
        v[cd.input_feature_dimension as usize] = cd.output_feature_dimension;
        for (k, &d) in cd.input_spatial_dimensions.iter().enumerate() {
            v[d as usize] = cd.output_spatial_dimensions[k];
        }
        v
    }

    /// Lhs dimension of each output dimension of convolution `id`.
    pub(super) fn conv_out_to_lhs(&self, id: InstrId) -> Vec<i64> {
        let l2o = self.conv_lhs_to_out(id);
        let mut v = vec![-1i64; self.shape(id).rank()];
        for (l, &o) in l2o.iter().enumerate() {
            if o >= 0 {
                v[o as usize] = l as i64;
            }
        }
        v
    }

    /// XLA's `IsConvolutionKernelSmall`.
    pub(super) fn conv_kernel_small(&self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        let cd = i.attrs.conv_dims.as_deref().unwrap();
        let rhs = self.shape(i.operand(1)).dims();
        let out = i.shape.dims();
        let (mut kp, mut op) = (1i64, 1i64);
        for k in 0..cd.input_spatial_dimensions.len() {
            let kd = rhs[cd.kernel_spatial_dimensions[k] as usize];
            let od = out[cd.output_spatial_dimensions[k] as usize];
            kp *= kd;
            op *= od;
            if kd >= od && (k < 2 || kd > 3 || kp >= op) {
                return false;
            }
        }
        true
    }

    /// XLA's `InferDynamicUpdateSliceShardingFromOperand1/0`: a dynamic-slice (or the update
    /// of a dynamic-update-slice) passes its operand's sharding on with the sliced dimensions
    /// replicated; a dynamic-update-slice also takes its base operand's sharding.
    pub(super) fn forward_dynamic_slice(&mut self, id: InstrId, _level: u8, mc: bool) -> bool {
        let i = self.m.instr(id);
        let op = if i.opcode() == Opcode::DynamicSlice {
            i.operand(0)
        } else {
            i.operand(1)
        };
        let aggressive = self.non_root_users_is_one(id);
        let mut changed = false;
        if self.sp(op) {
            let s = self.replicated_on(self.cur_sh(op).unwrap(), &self.sliced_dims(id, op));
            changed |= self.improve_sh(id, s, mc, aggressive);
        }
        if i.opcode() == Opcode::DynamicUpdateSlice && self.sp(i.operand(0)) {
            let s = self.cur_sh(i.operand(0)).unwrap().clone();
            changed |= self.improve_sh(id, s, mc, false);
        }
        changed
    }

    /// The dimensions where (dynamic-)slice `id` and `op` differ in size.
    pub(super) fn sliced_dims(&self, id: InstrId, op: InstrId) -> Vec<usize> {
        let (a, b) = (self.shape(id).dims(), self.shape(op).dims());
        (0..a.len()).filter(|&d| b.get(d) != Some(&a[d])).collect()
    }
}
