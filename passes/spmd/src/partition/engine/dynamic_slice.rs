//! Dynamic-slice and dynamic-update-slice on split operands: the per-device offset arithmetic
//! (clamped starts, the first tile's offsets broadcast to every device) without the halo
//! exchange of the windowed handlers in `window.rs`; dimensions the slice cannot keep split are
//! gathered first and the result is resliced to the output's tiling.

use super::super::spec::ceil_div;

use super::*;

impl Engine<'_> {
    /// Dynamic-slice: split dimensions that the slice keeps whole stay split (the start
    /// clamps to 0 there, globally and locally); the others are gathered first, then sliced
    /// with the run-time starts, and the result is resliced to the output's tiling.
    pub(super) fn dynamic_slice(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let Some(sizes) = i.attrs.dynamic_slice_sizes.clone() else {
            return self.default(b, id, own);
        };
        let in_dims = self.global(b.module(), i.operands()[0]).dims().to_vec();
        let rank = t.rank();
        if sizes.len() != rank || in_dims.len() != rank || i.operands().len() != rank + 1 {
            return self.default(b, id, own);
        }
        let partial: Vec<usize> = (0..rank)
            .filter(|&d| t.tiles[d] > 1 && sizes[d] != in_dims[d])
            .collect();
        let target = t.replicate_dims(&partial);
        let x = self.operand(b, id, 0, &Tree::Leaf(Spec::Tiled(target.clone())))?;
        // The starts are clamped here as the global slice clamps them. Without it, the
        // plugin gave wrong numbers for this dynamic-slice followed by the reslice to the
        // output's tiling when a start was out of range (testdata's
        // dynamic-slice-reshard-split-dim.hlo, found by the halo property test); jaxlib
        // 0.12's XLA computes the same two-slice module right, so the cause is not pinned.
        let mut ops = vec![x];
        for k in 1..=rank {
            ops.push(self.clamped_start(b, id, k, in_dims[k - 1] - sizes[k - 1])?);
        }
        let local_sizes: Vec<i64> = (0..rank)
            .map(|d| {
                if target.tiles[d] > 1 {
                    ceil_div(in_dims[d], target.tiles[d])
                } else {
                    sizes[d]
                }
            })
            .collect();
        let mut c = i.clone();
        c.attrs.dynamic_slice_sizes = Some(local_sizes.clone());
        let mut shape = i.shape.clone();
        if let Some(a) = shape.as_array_mut() {
            a.dims = local_sizes.into_iter().collect();
        }
        let ds = self.clone_with(b, &c, &ops, shape)?;
        let v = Value {
            local: ds,
            tree: Tree::Leaf(Spec::Tiled(target)),
        };
        let out = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, out, own);
        Ok(())
    }

    /// Dynamic-update-slice: the operand keeps the output's tiling. When no split dimension is
    /// updated in part, the update takes the same tiling and the update is local. Otherwise
    /// the update is replicated along the dimensions it covers in part, and each device
    /// takes the part that lands in its shard: the update padded by a shard on both sides,
    /// dynamic-sliced at (shard start - clamped start), selected where it lands.
    /// `x` (an original broadcast of a scalar) made locally as the piece of tiling `t`, when
    /// the scalar is held by every device; `None` otherwise.
    fn local_broadcast_of_scalar(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        t: &Tiling,
    ) -> Result<Option<InstrId>> {
        let xi = b.module().instr(x).clone();
        let Some(&s) = xi.operands().first() else {
            return Ok(None);
        };
        if xi.opcode() != Opcode::Broadcast || b.module().instr(s).shape.rank() != 0 {
            return Ok(None);
        }
        let Some(v) = self.values.get(&s).cloned() else {
            return Ok(None);
        };
        let whole = matches!(&v.tree, Tree::Leaf(Spec::Tiled(st)) if st.num_devices() == self.n);
        if !whole {
            return Ok(None);
        }
        let local = t.shard_dims(xi.shape.dims());
        Ok(Some(broadcast_scalar(b, v.local, &local)?))
    }

    /// `x` (tiled like `t`) replicated along `dims` when it has one element along each of
    /// them, so that only the first tile along them holds it: an all-reduce of the first
    /// tile's piece masked to zero elsewhere, a piece where an all-gather would move one
    /// (mostly padding) per device. `None` when `x` is not so, or the all-gather is cheaper
    /// (two devices per group).
    fn first_tile_everywhere(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        t: &Tiling,
        dims: &[usize],
    ) -> Result<Option<InstrId>> {
        let v = self.value(b.module(), x)?;
        let global = self.global(b.module(), x);
        let fits = matches!(&v.tree, Tree::Leaf(Spec::Tiled(s)) if s == t)
            && self.view.is_none()
            && dims.iter().all(|&d| global.dims().get(d) == Some(&1));
        let group: i64 = dims.iter().map(|&d| t.tiles[d]).product();
        if !fits || group <= 2 {
            return Ok(None);
        }
        let first: Vec<i64> = t
            .tile_indices()
            .iter()
            .map(|ix| i64::from(dims.iter().all(|&d| ix[d] == 0)))
            .collect();
        let ty = global.element_type();
        let flag = self.table(b, &first)?;
        let one = b.scalar(ElementType::S32, 1.0)?;
        let is = b.compare(flag, one, ComparisonDirection::Eq)?;
        let local: Vec<i64> = b.module().instr(v.local).shape.dims().to_vec();
        let pred = broadcast_scalar(b, is, &local)?;
        let zero = b.scalar(ty, 0.0)?;
        let zeros = broadcast_scalar(b, zero, &local)?;
        let masked = b.select(pred, v.local, zeros)?;
        let op = if ty == ElementType::Pred {
            Opcode::Or
        } else {
            Opcode::Add
        };
        let reducer = b.reducer(ty, op)?;
        let groups = t.groups(dims, false);
        let out = self.all_reduce(b, masked, reducer, &groups)?;
        let bytes = 2 * b.module().instr(out).shape.byte_size(8) * (group - 1) / group;
        self.report.collectives.push(CollectiveNote {
            original: self.origin_name(b),
            collective: "all-reduce",
            reason: format!("the first tile's piece along dimensions {dims:?} to every tile"),
            bytes,
        });
        Ok(Some(out))
    }

    pub(super) fn dynamic_update_slice(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
    ) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let t = t.clone();
        let dims = i.shape.dims().to_vec();
        let upd = self.global(b.module(), i.operands()[1]).dims().to_vec();
        let rank = t.rank();
        if upd.len() != rank || i.operands().len() != rank + 2 || dims.contains(&0) {
            return self.default(b, id, own);
        }
        let partial: Vec<usize> = (0..rank).filter(|&d| upd[d] != dims[d]).collect();
        let split_partial: Vec<usize> = partial
            .iter()
            .copied()
            .filter(|&d| t.tiles[d] > 1)
            .collect();
        let x = self.operand(b, id, 0, &own)?;
        if split_partial.is_empty() {
            let u = self.operand(b, id, 1, &own)?;
            let mut ops = vec![x, u];
            for k in 2..rank + 2 {
                ops.push(self.scalar_operand(b, id, k)?);
            }
            let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &own))?;
            self.set(id, out, own);
            return Ok(());
        }
        let u_tiling = t.replicate_dims(&split_partial);
        // An update that is a broadcast of a scalar every device holds is rebuilt locally at
        // the size it is needed instead of being gathered.
        let mut u = match self.local_broadcast_of_scalar(b, i.operands()[1], &u_tiling)? {
            Some(x) => x,
            None => match self.first_tile_everywhere(b, i.operands()[1], &t, &split_partial)? {
                Some(x) => x,
                None => self.operand(b, id, 1, &Tree::Leaf(Spec::Tiled(u_tiling)))?,
            },
        };
        let ty = i.shape.element_type();
        let shard = t.shard_dims(&dims);
        let starts = t.starts(&dims);
        // Pad the update by a shard on both sides of every partly updated dimension.
        let zero = b.scalar(ty, 0.0)?;
        let mut pads = vec![PaddingDim::default(); rank];
        for &d in &partial {
            pads[d] = PaddingDim {
                low: shard[d],
                high: shard[d],
                interior: 0,
            };
        }
        u = b.pad(u, zero, &pads)?;
        let mut ds_starts = Vec::with_capacity(rank);
        let mut mask: Option<InstrId> = None;
        let mut clamped = Vec::new();
        for d in 0..rank {
            if !partial.contains(&d) {
                ds_starts.push(self.table(b, &[0])?);
                clamped.push(None);
                continue;
            }
            let c = self.clamped_start(b, id, d + 2, dims[d] - upd[d])?;
            let s: Vec<i64> = starts.iter().map(|s| s[d] + shard[d]).collect();
            let s = self.table(b, &s)?;
            ds_starts.push(b.binary(Opcode::Subtract, s, c)?);
            clamped.push(Some(c));
        }
        let piece = b.dynamic_slice(u, &ds_starts, &shard)?;
        for &d in &partial {
            let c = clamped[d].expect("set for partial dimensions");
            // Lands where start + position - c is in [0, upd[d]).
            let own_starts: Vec<i64> = starts.iter().map(|s| s[d]).collect();
            let iota = b.iota(Shape::array(ElementType::S32, &shard), d as i64)?;
            let base = self.table(b, &own_starts)?;
            let rel = b.binary(Opcode::Subtract, base, c)?;
            let relb = broadcast_scalar(b, rel, &shard)?;
            let g = b.binary(Opcode::Add, iota, relb)?;
            let zero = b.scalar(ElementType::S32, 0.0)?;
            let lim = b.scalar(ElementType::S32, upd[d] as f64)?;
            let zb = broadcast_scalar(b, zero, &shard)?;
            let lb = broadcast_scalar(b, lim, &shard)?;
            let ge = b.compare(g, zb, ComparisonDirection::Ge)?;
            let lt = b.compare(g, lb, ComparisonDirection::Lt)?;
            let m = b.binary(Opcode::And, ge, lt)?;
            mask = Some(match mask {
                None => m,
                Some(prev) => b.binary(Opcode::And, prev, m)?,
            });
        }
        let out = b.select(mask.expect("a partial dimension"), piece, x)?;
        self.name_result(b, out, i.name());
        self.set(id, out, own);
        Ok(())
    }

    /// Operand `k` of `id` (a start index), clamped to `[0, max]` as dynamic slices clamp,
    /// as s32.
    fn clamped_start(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        k: usize,
        max: i64,
    ) -> Result<InstrId> {
        let s = self.scalar_operand(b, id, k)?;
        let ty = b.module().instr(s).shape.element_type();
        let lo = b.scalar(ty, 0.0)?;
        let hi = b.scalar(ty, max as f64)?;
        let c = b.op(Opcode::Clamp, &[lo, s, hi], Default::default(), &[], None)?;
        if ty == ElementType::S32 {
            Ok(c)
        } else {
            Ok(b.convert(c, ElementType::S32)?)
        }
    }
}
