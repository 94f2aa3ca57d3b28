//! Gather and scatter: XLA's strategies (explicit batch, operand pass-through, index
//! pass-through, trivially sliced operand), merged into one layout per candidate and chosen by
//! the bytes each device moves.
//!
//! The dimension correspondences come from [`crate::gather_scatter`] (the ones sharding
//! propagation uses). A candidate is one tiling of the devices that every value agrees on:
//!
//! - **Layout** candidates (gather): an output tiling restricted to the output dimensions that
//!   some operand or indices dimension walks with (index pass-through: the indices' batch
//!   dimensions; operand pass-through: window dimensions sliced whole; explicit batch: the
//!   batching dimensions of both). The operand and the indices are resharded to that tiling
//!   projected on their dimensions and the local gather needs no communication. The tiling is
//!   taken from the result's sharding, from the indices' and from the operand's.
//! - **Trivially sliced operand**: the operand keeps its split on dimensions it is sliced to
//!   one element along (and indexed by), each device gathers from its piece with the indices
//!   moved by its piece's start, rows of other pieces are masked to zero and an all-reduce adds
//!   the pieces. For a scatter the same layout needs no collective at all: an update whose
//!   moved index leaves the piece is skipped by the scatter's own bounds rule.
//!
//! Every candidate's bytes (ORACLE.md's formulas, through the resharding planner) are summed
//! with the resharding of the result to its own sharding; the cheapest is emitted.

use super::*;
use crate::gather_scatter::{self, GatherScatter};
use crate::partition::spec::{ravel, DeviceTable};

/// A candidate layout of a gather or scatter.
struct Layout {
    /// Operand tiling (every operand of a variadic scatter).
    operand: Tiling,
    indices: Tiling,
    /// Gather: the result's tiling once local results are combined; scatter: unused.
    out: Tiling,
    /// Updates tiling (scatter only).
    updates: Option<Tiling>,
    /// Operand dimensions along which each device holds a piece of an indexed, one-element
    /// slice (the trivially sliced strategy).
    trivial: Vec<usize>,
    /// Operand dimensions that are implicit parallel dimensions split here: the index
    /// component of each is an iota along an indices dimension split the same way, so each
    /// device's indices point into its own piece once moved by the piece's start.
    parallel: Vec<usize>,
}

/// The tiling of a single-array value (`None` for tuples, maximal and manual values).
pub(super) fn tiling_of(t: &Tree) -> Option<&Tiling> {
    match t {
        Tree::Leaf(Spec::Tiled(t)) => Some(t),
        _ => None,
    }
}

impl Engine<'_> {
    /// Bytes each device receives to move an array of `dims` from `src` to `dst`.
    pub(super) fn move_bytes(
        &self,
        src: &Tiling,
        dst: &Tiling,
        dims: &[i64],
        ty: ElementType,
    ) -> i64 {
        if src == dst {
            return 0;
        }
        let (s, d) = (Spec::Tiled(src.clone()), Spec::Tiled(dst.clone()));
        plan::plan(&s, &d, dims, self.n)
            .map_or(i64::MAX / 4, |p| p.bytes(dims, ty.byte_size() as i64))
    }

    /// The gather `i` in common terms (a malformed one is an error naming it).
    fn gather_terms(&self, b: &Builder, i: &Instruction) -> Result<GatherScatter> {
        let dn = i.attrs.gather_dims.as_deref();
        let sizes = i.attrs.gather_slice_sizes.as_deref();
        let (Some(dn), Some(sizes)) = (dn, sizes) else {
            return Err(fail(format!(
                "%{}: a gather needs dimension numbers and slice_sizes",
                i.name()
            )));
        };
        let op = self.global(b.module(), i.operands()[0]);
        let idx = self.global(b.module(), i.operands()[1]);
        GatherScatter::gather(dn, sizes, op.dims(), idx.dims(), i.shape.rank())
            .map_err(|e| fail(format!("%{}: {e}", i.name())))
    }

    /// For each indices dimension, the operand dimension it walks with (explicit batching).
    fn indices_to_operand(g: &GatherScatter) -> Vec<Option<usize>> {
        (0..g.indices.len())
            .map(|d| {
                g.indices_batching
                    .iter()
                    .position(|&x| x == d)
                    .map(|k| g.operand_batching[k])
            })
            .collect()
    }

    /// For each output (updates) dimension, the operand dimension it walks with: window
    /// dimensions sliced whole and the batch dimensions of explicit batching.
    fn output_to_operand(g: &GatherScatter) -> Vec<Option<usize>> {
        let mut map = vec![None; g.output_rank];
        let pt = g.operand_passthrough();
        for (o, d) in pt.output.iter().zip(&pt.operand) {
            map[*o] = Some(*d);
        }
        let eb = g.explicit_batch();
        for (k, &d) in eb.indices.iter().enumerate() {
            if let Some(o) = g.output_dim_of_indices_dim(d) {
                map[o] = Some(eb.operand[k]);
            }
        }
        map
    }

    /// For each output dimension, the indices dimension it walks with (index pass-through).
    fn output_to_indices(g: &GatherScatter) -> Vec<Option<usize>> {
        let mut map = vec![None; g.output_rank];
        let io = g.indices_output();
        for (o, d) in io.output.iter().zip(&io.indices) {
            map[*o] = Some(*d);
        }
        map
    }

    /// For each operand dimension, the output dimension it walks with.
    fn operand_to_output(g: &GatherScatter) -> Vec<Option<usize>> {
        let mut map = vec![None; g.operand.len()];
        for (o, d) in Self::output_to_operand(g).iter().enumerate() {
            if let Some(d) = d {
                map[*d] = Some(o);
            }
        }
        map
    }

    /// The operand dimensions a device may keep a piece of in the trivially sliced strategy:
    /// indexed, sliced to one element, not a batching dimension.
    fn trivial_dims(g: &GatherScatter) -> Vec<usize> {
        (0..g.operand.len())
            .filter(|d| {
                g.slice_sizes[*d] == 1
                    && g.index_map.contains(d)
                    && !g.operand_batching.contains(d)
                    && g.operand[*d] > 1
            })
            .collect()
    }

    /// A layout from an output tiling: every dimension no operand or indices dimension walks
    /// with stops being split.
    fn layout_from_output(g: &GatherScatter, out: &Tiling) -> Layout {
        let to_op = Self::output_to_operand(g);
        let to_idx = Self::output_to_indices(g);
        let lone: Vec<usize> = (0..g.output_rank)
            .filter(|&o| to_op[o].is_none() && to_idx[o].is_none() && out.tiles[o] > 1)
            .collect();
        let base = if lone.is_empty() {
            out.clone()
        } else {
            out.replicate_dims(&lone)
        };
        let op_map = Self::operand_to_output(g);
        let idx_map: Vec<Option<usize>> = (0..g.indices.len())
            .map(|d| g.output_dim_of_indices_dim(d))
            .collect();
        Layout {
            operand: base.project(&op_map),
            indices: base.project(&idx_map),
            out: base,
            updates: None,
            trivial: Vec::new(),
            parallel: Vec::new(),
        }
    }

    /// The trivially sliced layout from an operand tiling (`None` when it splits no trivial
    /// dimension).
    fn layout_trivial(g: &GatherScatter, op: &Tiling) -> Option<Layout> {
        let trivial: Vec<usize> = Self::trivial_dims(g)
            .into_iter()
            .filter(|&d| op.tiles[d] > 1)
            .collect();
        if trivial.is_empty() {
            return None;
        }
        let op_map = Self::operand_to_output(g);
        let drop: Vec<usize> = (0..g.operand.len())
            .filter(|d| op.tiles[*d] > 1 && !trivial.contains(d) && op_map[*d].is_none())
            .collect();
        let t = if drop.is_empty() {
            op.clone()
        } else {
            op.replicate_dims(&drop)
        };
        let summed = t.replicate_dims(&trivial);
        Some(Layout {
            indices: summed.project(&Self::indices_to_operand(g)),
            out: summed.project(&Self::output_to_operand(g)),
            operand: t,
            updates: None,
            trivial,
            parallel: Vec::new(),
        })
    }

    /// The trivially sliced layout with the indices keeping their own split along their batch
    /// dimensions (XLA combines the trivially sliced operand with index pass-through): an
    /// embedding table split along its vocabulary and ids split along the batch gather
    /// locally, and the all-reduce adds only the pieces of one batch shard, instead of every
    /// device gathering for the whole batch. Possible when each group the all-reduce sums over
    /// (the operand's devices that differ only along the trivial dimensions) holds one piece
    /// of the indices; `None` otherwise, or when the indices are not split along a batch
    /// dimension.
    fn layout_trivial_with_indices(g: &GatherScatter, op: &Tiling, idx: &Tiling) -> Option<Layout> {
        let base = Self::layout_trivial(g, op)?;
        let to_out: Vec<Option<usize>> = (0..g.indices.len())
            .map(|d| g.output_dim_of_indices_dim(d))
            .collect();
        let off_batch: Vec<usize> = (0..g.indices.len())
            .filter(|&d| to_out[d].is_none() && idx.tiles[d] > 1)
            .collect();
        let indices = idx.replicate_dims(&off_batch);
        if indices.is_replicated() || indices.num_devices() != op.num_devices() {
            return None;
        }
        // The output's tiles: the indices' along the batch dimensions, the operand's along
        // the dimensions it passes through whole.
        let op_out = Self::operand_to_output(g);
        let mut tiles = base.out.tiles.clone();
        for (d, o) in to_out.iter().enumerate() {
            if let Some(o) = *o {
                if indices.tiles[d] > 1 {
                    if tiles[o] > 1 {
                        return None;
                    }
                    tiles[o] = indices.tiles[d];
                }
            }
        }
        let n = op.num_devices();
        let num_tiles: i64 = tiles.iter().product();
        if num_tiles <= 0 || n % num_tiles != 0 {
            return None;
        }
        let (op_idx, ix_idx) = (base.operand.tile_index_table(), indices.tile_index_table());
        let mut out_idx = DeviceTable::zeros(n as usize, tiles.len());
        let mut held = vec![0i64; num_tiles as usize];
        for dev in 0..n as usize {
            let row = out_idx.row_mut(dev);
            for (d, o) in op_out.iter().enumerate() {
                if let Some(o) = *o {
                    if base.operand.tiles[d] > 1 {
                        row[o] = op_idx[dev][d];
                    }
                }
            }
            for (d, o) in to_out.iter().enumerate() {
                if let Some(o) = *o {
                    if indices.tiles[d] > 1 {
                        row[o] = ix_idx[dev][d];
                    }
                }
            }
            held[ravel(row, &tiles) as usize] += 1;
        }
        let repl = n / num_tiles;
        if held.iter().any(|&h| h != repl) {
            return None;
        }
        // Every group summed by the all-reduce must hold one piece of the indices (and so one
        // tile of the output).
        for group in base.operand.groups(&base.trivial, false).iter() {
            let first = &ix_idx[group[0] as usize];
            if group.iter().any(|&m| &ix_idx[m as usize] != first) {
                return None;
            }
        }
        Some(Layout {
            out: Tiling::from_tile_index_table(tiles, repl, &out_idx),
            indices,
            ..base
        })
    }

    /// `g` with the implicit parallel dimensions of `indices` (index components that are
    /// iotas along an indices dimension of the operand dimension's size, XLA's
    /// `GetGatherScatterBatchParallelDims`) counted as batching dimensions, for the layout maps
    /// only, and the operand dimensions that are such. Only collapsed operand dimensions count,
    /// so the window dimensions keep their order.
    fn with_parallel(
        &self,
        b: &Builder,
        g: &GatherScatter,
        indices: InstrId,
    ) -> (GatherScatter, Vec<usize>) {
        let m = b.module();
        let caller = |c: CompId| -> Option<InstrId> {
            m.computations().iter().find_map(|&k| {
                m.comp(k)
                    .instructions()
                    .iter()
                    .copied()
                    .find(|&x| m.instr(x).called.contains(&c))
            })
        };
        let iotas = gather_scatter::index_component_iotas(
            m,
            indices,
            g.index_vector_dim,
            g.index_map.len(),
            &caller,
        );
        let mut gp = g.clone();
        let mut ops = Vec::new();
        if let Some(p) = g.implicit_parallel(&iotas) {
            for (&o, &d) in p.operand.iter().zip(&p.indices) {
                if g.collapsed.contains(&o) {
                    gp.operand_batching.push(o);
                    gp.indices_batching.push(d);
                    ops.push(o);
                }
            }
        }
        (gp, ops)
    }

    pub(super) fn gather(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let g = self.gather_terms(b, &i)?;
        let (op, idx) = (i.operands()[0], i.operands()[1]);
        let v_op = self.value(b.module(), op)?;
        let v_idx = self.value(b.module(), idx)?;
        let (Some(t_op), Some(t_idx), Some(t_own)) = (
            tiling_of(&v_op.tree),
            tiling_of(&v_idx.tree),
            tiling_of(&own),
        ) else {
            return self.default(b, id, own);
        };
        let (t_op, t_idx, t_own) = (t_op.clone(), t_idx.clone(), t_own.clone());
        let op_shape = self.global(b.module(), op);
        let idx_shape = self.global(b.module(), idx);
        let out_dims = i.shape.dims().to_vec();
        let out_ty = i.shape.element_type();

        let (gp, par) = self.with_parallel(b, &g, idx);
        let mut candidates = vec![Self::layout_from_output(&gp, &t_own)];
        let idx_map = Self::output_to_indices(&gp);
        candidates.push(Self::layout_from_output(&gp, &t_idx.project(&idx_map)));
        candidates.push(Self::layout_from_output(
            &gp,
            &t_op.project(&Self::output_to_operand(&gp)),
        ));
        if let Some(l) = Self::layout_trivial(&gp, &t_op) {
            candidates.push(l);
        }
        if let Some(l) = Self::layout_trivial_with_indices(&gp, &t_op, &t_idx) {
            candidates.push(l);
        }
        let mut best: Option<(i64, usize)> = None;
        for (k, l) in candidates.iter().enumerate() {
            let mut cost =
                self.move_bytes(&t_op, &l.operand, op_shape.dims(), op_shape.element_type())
                    + self.move_bytes(
                        &t_idx,
                        &l.indices,
                        idx_shape.dims(),
                        idx_shape.element_type(),
                    )
                    + self.move_bytes(&l.out, &t_own, &out_dims, out_ty);
            if !l.trivial.is_empty() {
                let local: i64 =
                    l.out.shard_dims(&out_dims).iter().product::<i64>() * out_ty.byte_size() as i64;
                let g: i64 = l.trivial.iter().map(|&d| l.operand.tiles[d]).product();
                cost += 2 * local * (g - 1) / g;
            }
            if best.is_none_or(|(c, _)| cost < c) {
                best = Some((cost, k));
            }
        }
        let mut l = candidates.swap_remove(best.expect("one candidate at least").1);
        l.parallel = par
            .into_iter()
            .filter(|&o| l.operand.tiles[o] > 1)
            .collect();
        let x_op = self.operand(b, id, 0, &Tree::Leaf(Spec::Tiled(l.operand.clone())))?;
        let mut x_idx = self.operand(b, id, 1, &Tree::Leaf(Spec::Tiled(l.indices.clone())))?;
        if !l.parallel.is_empty() {
            x_idx = self.move_indices(b, &g, x_idx, &l, &l.parallel, false)?.0;
        }
        let mut valid = None;
        if !l.trivial.is_empty() {
            let (moved, ok) = self.move_indices(b, &g, x_idx, &l, &l.trivial, true)?;
            x_idx = moved;
            valid = ok;
        }
        let local_op = l.operand.shard_dims(op_shape.dims());
        let mut sizes = g.slice_sizes.clone();
        for d in g.operand_passthrough().operand {
            sizes[d] = local_op[d];
        }
        let shape = local_shape(&i.shape, &Tree::Leaf(Spec::Tiled(l.out.clone())));
        let local_dims = shape.dims().to_vec();
        let mut out = self.clone_with(b, &i, &[x_op, x_idx], shape)?;
        b.module_mut().instr_mut(out).attrs.gather_slice_sizes = Some(sizes);
        if let Some(ok) = valid {
            let batch: Vec<i64> = (0..g.indices.len())
                .filter_map(|d| g.output_dim_of_indices_dim(d).map(|o| o as i64))
                .collect();
            let mask = b.broadcast(ok, &local_dims, &batch)?;
            let zero = b.scalar(out_ty, 0.0)?;
            let zeros = broadcast_scalar(b, zero, &local_dims)?;
            let masked = b.select(mask, out, zeros)?;
            let op = if out_ty == ElementType::Pred {
                Opcode::Or
            } else {
                Opcode::Add
            };
            let reducer = b.reducer(out_ty, op)?;
            let groups = l.operand.groups(&l.trivial, false);
            let gsize = groups[0].len() as i64;
            let bytes: i64 = local_dims.iter().product::<i64>() * out_ty.byte_size() as i64;
            self.report.collectives.push(CollectiveNote {
                original: i.name().to_string(),
                collective: "all-reduce",
                reason: "gather from pieces of a trivially sliced operand".to_string(),
                bytes: 2 * bytes * (gsize - 1) / gsize,
            });
            out = self.all_reduce(b, masked, reducer, &groups)?;
        }
        if Tree::Leaf(Spec::Tiled(l.out.clone())) != own {
            out = fence(b, out)?;
        }
        let v = Value {
            local: out,
            tree: Tree::Leaf(Spec::Tiled(l.out)),
        };
        let local = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, local, own);
        Ok(())
    }

    /// The indices `x` (local piece of the layout's indices tiling) moved into each device's
    /// piece of the operand along the layout's trivial dimensions; with `clamp` (gather), the
    /// index is first clamped as the gather would clamp it globally, and a predicate of the
    /// indices' batch shape says which rows the device holds.
    fn move_indices(
        &mut self,
        b: &mut Builder,
        g: &GatherScatter,
        x: InstrId,
        l: &Layout,
        moved_dims: &[usize],
        clamp: bool,
    ) -> Result<(InstrId, Option<InstrId>)> {
        let shape = b.module().instr(x).shape.clone();
        let ty = shape.element_type();
        let dims = shape.dims().to_vec();
        let comps = g.index_map.len();
        let implicit = g.index_vector_dim >= dims.len();
        let starts = l.operand.starts(&g.operand);
        let shard = l.operand.shard_dims(&g.operand);
        // Per device, per component: the piece's start (0 off the trivial dimensions).
        let mut offsets = Vec::with_capacity(starts.len() * comps);
        for s in &starts {
            for &o in &g.index_map {
                offsets.push(if moved_dims.contains(&o) { s[o] } else { 0 });
            }
        }
        let vec_of = |b: &mut Builder, this: &mut Self, per: &[i64]| -> Result<InstrId> {
            let bytes: Vec<u8> = per.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect();
            let lit =
                Literal::from_bytes(Shape::array(ElementType::S32, &[per.len() as i64]), bytes)
                    .expect("one s32 per entry");
            let c = b.constant(lit)?;
            let c = if ty == ElementType::S32 {
                c
            } else {
                b.convert(c, ty)?
            };
            let _ = this;
            if implicit {
                let r = b.reshape(c, &[])?;
                broadcast_scalar(b, r, &dims)
            } else {
                Ok(b.broadcast(c, &dims, &[g.index_vector_dim as i64])?)
            }
        };
        let mut idx = x;
        if clamp {
            let hi: Vec<i64> = g
                .index_map
                .iter()
                .map(|&o| g.operand[o] - g.slice_sizes[o])
                .collect();
            let hi = vec_of(b, self, &hi)?;
            let zero = b.scalar(ty, 0.0)?;
            let zeros = broadcast_scalar(b, zero, &dims)?;
            idx = b.op(
                Opcode::Clamp,
                &[zeros, idx, hi],
                Default::default(),
                &[],
                None,
            )?;
        }
        // The device's offsets: a [devices, components] table sliced at the partition id.
        let n = starts.len() as i64;
        let bytes: Vec<u8> = offsets
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect();
        let lit = Literal::from_bytes(Shape::array(ElementType::S32, &[n, comps as i64]), bytes)
            .expect("one s32 per device and component");
        let table = b.constant(lit)?;
        let pid = self.partition_id(b)?;
        let pid = if b.module().instr(pid).shape.element_type() == ElementType::S32 {
            pid
        } else {
            b.convert(pid, ElementType::S32)?
        };
        let zero_i = b.scalar(ElementType::S32, 0.0)?;
        let row = b.dynamic_slice(table, &[pid, zero_i], &[1, comps as i64])?;
        let row = b.reshape(row, &[comps as i64])?;
        let row = if ty == ElementType::S32 {
            row
        } else {
            b.convert(row, ty)?
        };
        let off = if implicit {
            let r = b.reshape(row, &[])?;
            broadcast_scalar(b, r, &dims)?
        } else {
            b.broadcast(row, &dims, &[g.index_vector_dim as i64])?
        };
        let moved = b.binary(Opcode::Subtract, idx, off)?;
        if !clamp {
            return Ok((moved, None));
        }
        // Rows this device holds: 0 <= moved < piece size on the trivial components (the
        // others are clamped already, so the bound below always holds for them).
        let upper: Vec<i64> = g
            .index_map
            .iter()
            .map(|&o| {
                if moved_dims.contains(&o) {
                    shard[o]
                } else {
                    g.operand[o] - g.slice_sizes[o] + 1
                }
            })
            .collect();
        let upper = vec_of(b, self, &upper)?;
        let zero = b.scalar(ty, 0.0)?;
        let zeros = broadcast_scalar(b, zero, &dims)?;
        let ge = b.compare(moved, zeros, ComparisonDirection::Ge)?;
        let lt = b.compare(moved, upper, ComparisonDirection::Lt)?;
        let ok = b.binary(Opcode::And, ge, lt)?;
        let ok = if implicit {
            ok
        } else {
            let t = b.scalar(ElementType::Pred, 1.0)?;
            let and = b.reducer(ElementType::Pred, Opcode::And)?;
            b.reduce(ok, t, &[g.index_vector_dim as i64], and)?
        };
        Ok((moved, Some(ok)))
    }

    /// Scatter (variadic too): the operands keep a layout of pass-through, batching and
    /// trivially sliced dimensions, the indices and updates follow it; no collective beyond
    /// the reshards, since an update outside a device's piece is skipped there.
    pub(super) fn scatter(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let ops = i.operands().to_vec();
        let k = (ops.len().saturating_sub(1)) / 2;
        if k == 0 || ops.len() != 2 * k + 1 {
            return Err(fail(format!(
                "%{}: a scatter takes N operands, the indices and N updates; found {} operands",
                i.name(),
                ops.len()
            )));
        }
        let Some(dn) = i.attrs.scatter_dims.as_deref() else {
            return Err(fail(format!(
                "%{}: a scatter needs dimension numbers",
                i.name()
            )));
        };
        let op_shape = self.global(b.module(), ops[0]);
        let idx_shape = self.global(b.module(), ops[k]);
        let upd_shape = self.global(b.module(), ops[k + 1]);
        let g = GatherScatter::scatter(dn, op_shape.dims(), idx_shape.dims(), upd_shape.dims())
            .map_err(|e| fail(format!("%{}: {e}", i.name())))?;
        let leaf_own = match &own {
            Tree::Leaf(_) => tiling_of(&own).cloned(),
            Tree::Tuple(e) => e.first().and_then(tiling_of).cloned(),
        };
        let mut trees = Vec::with_capacity(ops.len());
        for &o in &ops {
            trees.push(self.value(b.module(), o)?.tree);
        }
        let tilings: Option<Vec<Tiling>> = trees.iter().map(|t| tiling_of(t).cloned()).collect();
        let (Some(t_own), Some(tilings)) = (leaf_own, tilings) else {
            return self.default(b, id, own);
        };
        let (gp, par) = self.with_parallel(b, &g, ops[k]);
        let keep_dims = |t: &Tiling| -> Layout {
            let trivial: Vec<usize> = Self::trivial_dims(&gp)
                .into_iter()
                .filter(|&d| t.tiles[d] > 1)
                .collect();
            let op_map = Self::operand_to_output(&gp);
            let drop: Vec<usize> = (0..g.operand.len())
                .filter(|d| t.tiles[*d] > 1 && !trivial.contains(d) && op_map[*d].is_none())
                .collect();
            let t = if drop.is_empty() {
                t.clone()
            } else {
                t.replicate_dims(&drop)
            };
            let parallel = par.iter().copied().filter(|&o| t.tiles[o] > 1).collect();
            Layout {
                indices: t.project(&Self::indices_to_operand(&gp)),
                updates: Some(t.project(&Self::output_to_operand(&gp))),
                out: t.clone(),
                operand: t,
                trivial,
                parallel,
            }
        };
        // The indices' split carried onto the operand along the batching and parallel
        // dimensions (a replicated operand is then cut locally instead of the indices and
        // updates being gathered).
        let mut from_idx: Vec<Option<usize>> = vec![None; g.operand.len()];
        for (d, o) in Self::indices_to_operand(&gp).into_iter().enumerate() {
            if let Some(o) = o {
                from_idx[o] = Some(d);
            }
        }
        let candidates = [
            keep_dims(&t_own),
            keep_dims(&tilings[0]),
            keep_dims(&tilings[k].project(&from_idx)),
        ];
        let elem = |s: &Shape| s.element_type();
        let mut best: Option<(i64, usize)> = None;
        for (c, l) in candidates.iter().enumerate() {
            let mut cost = 0;
            for j in 0..k {
                let s = self.global(b.module(), ops[j]);
                cost += self.move_bytes(&tilings[j], &l.operand, s.dims(), elem(&s));
                cost += self.move_bytes(&l.operand, &t_own, s.dims(), elem(&s));
                let u = self.global(b.module(), ops[k + 1 + j]);
                let ut = l.updates.as_ref().expect("scatter layouts have updates");
                cost += self.move_bytes(&tilings[k + 1 + j], ut, u.dims(), elem(&u));
            }
            cost += self.move_bytes(&tilings[k], &l.indices, idx_shape.dims(), elem(&idx_shape));
            if best.is_none_or(|(b, _)| cost < b) {
                best = Some((cost, c));
            }
        }
        let (best_cost, best_k) = best.expect("three candidates");
        if k == 1 {
            if let Some(plan) = self.index_passthrough_plan(b, &i, &g, &tilings) {
                if plan.cost < best_cost {
                    return self.scatter_index_passthrough(b, id, own, &g, plan);
                }
            }
        }
        let l = &candidates[best_k];
        let leaf = Tree::Leaf(Spec::Tiled(l.operand.clone()));
        let upd = Tree::Leaf(Spec::Tiled(l.updates.clone().expect("updates")));
        let mut locals = Vec::with_capacity(ops.len());
        for j in 0..k {
            let x = self.operand(b, id, j, &leaf)?;
            locals.push(fence_dynamic_slice(b, x)?);
        }
        let mut x_idx = self.operand(b, id, k, &Tree::Leaf(Spec::Tiled(l.indices.clone())))?;
        if !l.trivial.is_empty() || !l.parallel.is_empty() {
            let moved: Vec<usize> = l.trivial.iter().chain(&l.parallel).copied().collect();
            x_idx = self.move_indices(b, &g, x_idx, l, &moved, false)?.0;
        }
        locals.push(x_idx);
        for j in 0..k {
            locals.push(self.operand(b, id, k + 1 + j, &upd)?);
        }
        let tree = match &i.shape {
            Shape::Tuple(e) => Tree::Tuple(vec![leaf.clone(); e.len()]),
            _ => leaf,
        };
        let mut out = self.clone_with(b, &i, &locals, local_shape(&i.shape, &tree))?;
        if tree != own {
            out = fence(b, out)?;
        }
        let v = Value { local: out, tree };
        let local = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, local, own);
        Ok(())
    }
}

/// XLA's index pass-through scatter: the updates (and indices) keep their split on the
/// scatter's batch dimensions, every device scatters its own updates into the operand, which
/// only one device of each reduction group holds (the others hold the combiner's identity),
/// and an all-reduce with the combiner adds the groups' results up.
struct IndexPassthrough {
    cost: i64,
    updates: Tiling,
    indices: Tiling,
    /// The updates dimensions split (the reduction groups differ along them).
    split: Vec<usize>,
    op: Opcode,
}

impl Engine<'_> {
    fn index_passthrough_plan(
        &self,
        b: &Builder,
        i: &Instruction,
        g: &GatherScatter,
        tilings: &[Tiling],
    ) -> Option<IndexPassthrough> {
        let ty = i.shape.element_type();
        let op = b.module().combiner_opcode(i.to_apply()?)?;
        combiner_identity(ty, op)?;
        let to_idx = Self::output_to_indices(g);
        let upd = &tilings[2];
        let split: Vec<usize> = (0..g.output_rank)
            .filter(|&o| to_idx[o].is_some() && upd.tiles[o] > 1)
            .collect();
        if split.is_empty() {
            return None;
        }
        let window: Vec<usize> = (0..g.output_rank)
            .filter(|o| to_idx[*o].is_none() && upd.tiles[*o] > 1)
            .collect();
        let updates = if window.is_empty() {
            upd.clone()
        } else {
            upd.replicate_dims(&window)
        };
        let idx_map: Vec<Option<usize>> = (0..g.indices.len())
            .map(|d| g.output_dim_of_indices_dim(d))
            .collect();
        let indices = updates.project(&idx_map);
        let shapes = [&g.operand, &g.indices];
        let upd_dims: Vec<i64> = operand_dims(b, i, 2);
        let rep = Tiling::replicated(g.operand.len(), self.n);
        let out: i64 = g.operand.iter().product::<i64>() * ty.byte_size() as i64;
        let gsize: i64 = split.iter().map(|&d| updates.tiles[d]).product();
        let idx_ty = b.module().instr(i.operands()[1]).shape.element_type();
        let cost = self.move_bytes(&tilings[0], &rep, shapes[0], ty)
            + self.move_bytes(&tilings[1], &indices, shapes[1], idx_ty)
            + self.move_bytes(&tilings[2], &updates, &upd_dims, ty)
            + 2 * out * (gsize - 1) / gsize;
        Some(IndexPassthrough {
            cost,
            updates,
            indices,
            split,
            op,
        })
    }

    fn scatter_index_passthrough(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
        g: &GatherScatter,
        p: IndexPassthrough,
    ) -> Result<()> {
        let i = b.module().instr(id).clone();
        let ty = i.shape.element_type();
        let rep = Tree::Leaf(Spec::replicated(g.operand.len(), self.n));
        let x = self.operand(b, id, 0, &rep)?;
        let x = fence_dynamic_slice(b, x)?;
        let mut idx = self.operand(b, id, 1, &Tree::Leaf(Spec::Tiled(p.indices.clone())))?;
        // Padded rows of uneven pieces hold updates nobody wrote: their indices become -1 (or
        // the largest value, unsigned), out of range, so the scatter skips them.
        let to_idx = Self::output_to_indices(g);
        let idx_split: Vec<usize> = p.split.iter().filter_map(|&o| to_idx[o]).collect();
        let idx_ty = b.module().instr(idx).shape.element_type();
        let oob = if idx_ty.is_unsigned_int() {
            2f64.powi(idx_ty.bit_width().min(52) as i32) - 1.0
        } else {
            -1.0
        };
        let oob = b.scalar(idx_ty, oob)?;
        idx = self.mask_padding(b, idx, &g.indices, &p.indices, &idx_split, oob)?;
        let upd = self.operand(b, id, 2, &Tree::Leaf(Spec::Tiled(p.updates.clone())))?;
        // One device per reduction group keeps the operand: the one holding the first tile
        // along every split dimension.
        let keeps: Vec<i64> = p
            .updates
            .tile_indices()
            .iter()
            .map(|t| i64::from(p.split.iter().all(|&d| t[d] == 0)))
            .collect();
        let keep = self.table(b, &keeps)?;
        let one = b.scalar(ElementType::S32, 1.0)?;
        let is = b.compare(keep, one, ComparisonDirection::Eq)?;
        let pred = broadcast_scalar(b, is, &g.operand)?;
        let identity = combiner_identity(ty, p.op).expect("checked by the plan");
        let fill = b.scalar(ty, identity)?;
        let fills = broadcast_scalar(b, fill, &g.operand)?;
        let masked = b.select(pred, x, fills)?;
        let local = self.clone_with(b, &i, &[masked, idx, upd], i.shape.clone())?;
        let groups = p.updates.groups(&p.split, false);
        let gsize = groups[0].len() as i64;
        let bytes: i64 = g.operand.iter().product::<i64>() * ty.byte_size() as i64;
        self.report.collectives.push(CollectiveNote {
            original: i.name().to_string(),
            collective: "all-reduce",
            reason: "scatter of split updates, combined with the scatter's combiner".to_string(),
            bytes: 2 * bytes * (gsize - 1) / gsize,
        });
        let reducer = i.to_apply().expect("checked by the plan");
        let mut out = self.all_reduce(b, local, reducer, &groups)?;
        if rep != own {
            out = fence(b, out)?;
        }
        let v = Value {
            local: out,
            tree: rep,
        };
        let local = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, local, own);
        Ok(())
    }
}

/// The global dimensions of operand `k` of `i`.
fn operand_dims(b: &Builder, i: &Instruction, k: usize) -> Vec<i64> {
    b.module().instr(i.operands()[k]).shape.dims().to_vec()
}

/// The identity of `op` on `ty` (`None` where it has none this code can write exactly).
fn combiner_identity(ty: ElementType, op: Opcode) -> Option<f64> {
    let bits = ty.bit_width();
    let int_range = |signed: bool| -> Option<(f64, f64)> {
        if bits > 32 {
            return None;
        }
        Some(if signed {
            (
                -(2f64.powi(bits as i32 - 1)),
                2f64.powi(bits as i32 - 1) - 1.0,
            )
        } else {
            (0.0, 2f64.powi(bits as i32) - 1.0)
        })
    };
    let (lo, hi) = if ty == ElementType::Pred {
        (0.0, 1.0)
    } else if ty.is_float() {
        (f64::NEG_INFINITY, f64::INFINITY)
    } else if ty.is_signed_int() {
        int_range(true)?
    } else if ty.is_unsigned_int() {
        int_range(false)?
    } else {
        return None;
    };
    match op {
        Opcode::Add | Opcode::Or => Some(0.0),
        Opcode::Multiply | Opcode::And => Some(1.0),
        Opcode::Maximum => Some(lo),
        Opcode::Minimum => Some(hi),
        _ => None,
    }
}

/// On the PJRT CPU plugin (xla-cpu-pjrt 0.0.1), a dynamic-slice fused with a gather or scatter
/// computed wrong values on 2 devices: a scatter into `dynamic-slice(pad(x), table[partition-id])`
/// (what resharding a replicated operand to a split one gives), and a `dynamic-slice` of a
/// gather's result (resharding the result). Both were found by the gather/scatter property test
/// and both run right with an optimization barrier between the two, which keeps them from being
/// fused. jax 0.12's XLA computes the one-device form of the scatter case right.
fn fence_dynamic_slice(b: &mut Builder, x: InstrId) -> Result<InstrId> {
    if b.module().instr(x).opcode() != Opcode::DynamicSlice {
        return Ok(x);
    }
    fence(b, x)
}

/// `opt-barrier(x)`: see [`fence_dynamic_slice`].
fn fence(b: &mut Builder, x: InstrId) -> Result<InstrId> {
    Ok(b.op(
        Opcode::OptimizationBarrier,
        &[x],
        Default::default(),
        &[],
        None,
    )?)
}
