//! Element-wise and shape ops: element-wise, broadcast, transpose, reshape, slice, iota.

use super::*;

impl Engine<'_> {
    pub(super) fn elementwise(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let Tree::Leaf(spec) = &own else {
            return self.default(b, id, own);
        };
        if i.opcode() == Opcode::BitcastConvert {
            let in_rank = self.global(b.module(), i.operands()[0]).rank();
            if in_rank != i.shape.rank() {
                return self.bitcast_convert_resized(b, id, own, in_rank);
            }
        }
        let mut ops = Vec::with_capacity(i.operands().len());
        for k in 0..i.operands().len() {
            let shape = self.global(b.module(), i.operands()[k]);
            let target = if shape.rank() == i.shape.rank() {
                own.clone()
            } else {
                Tree::Leaf(Spec::replicated(shape.rank(), n))
            };
            ops.push(self.operand(b, id, k, &target)?);
        }
        let _ = spec;
        let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    /// A bitcast-convert between widths adds (narrowing) or drops (widening) the minor
    /// dimension that holds the parts of one wide element. That dimension is never split; the
    /// others keep their tiles on both sides, so each device converts its own shard.
    fn bitcast_convert_resized(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
        in_rank: usize,
    ) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let out_rank = t.rank();
        let (work, map): (Tiling, Vec<Option<usize>>) = if in_rank == out_rank + 1 {
            (t.clone(), (0..out_rank).map(Some).chain([None]).collect())
        } else {
            let last = out_rank - 1;
            let work = if t.tiles[last] > 1 {
                t.replicate_dims(&[last])
            } else {
                t.clone()
            };
            (work, (0..last).map(Some).collect())
        };
        let target = Tree::Leaf(Spec::Tiled(work.project(&map)));
        let x = self.operand(b, id, 0, &target)?;
        let tree = Tree::Leaf(Spec::Tiled(work));
        let out = self.clone_with(b, &i, &[x], local_shape(&i.shape, &tree))?;
        if tree == own {
            self.set(id, out, own);
        } else {
            let v = Value { local: out, tree };
            let local = self.reshard(b, &v, &i.shape, &own)?;
            self.set(id, local, own);
        }
        Ok(())
    }

    pub(super) fn broadcast(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let map: Vec<Option<usize>> = i
            .attrs
            .dimensions
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|&d| Some(d as usize))
            .collect();
        let target = Tree::Leaf(Spec::Tiled(t.project(&map)));
        let x = self.operand(b, id, 0, &target)?;
        let out = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    pub(super) fn transpose(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let perm = i.attrs.dimensions.clone().unwrap_or_default();
        // Operand dimension perm[k] is output dimension k.
        let mut map = vec![None; perm.len()];
        for (k, &p) in perm.iter().enumerate() {
            map[p as usize] = Some(k);
        }
        let target = Tree::Leaf(Spec::Tiled(t.project(&map)));
        let x = self.operand(b, id, 0, &target)?;
        let out = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    /// A reshape is local when, in each group of dimensions it merges or splits, only the
    /// most major dimension is split, evenly on both sides; otherwise the default.
    pub(super) fn reshape(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let op_shape = self.global(b.module(), i.operands()[0]);
        let (from, to) = (op_shape.dims().to_vec(), i.shape.dims().to_vec());
        let Some(op_tiles) = reshape_operand_tiles(&from, &to, &t.tiles) else {
            return self.default(b, id, own);
        };
        let target = Tree::Leaf(Spec::Tiled(t.retiled(op_tiles)));
        let x = self.operand(b, id, 0, &target)?;
        let out = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    /// A slice is local when every split dimension keeps its start at 0, stride 1 and the
    /// same piece size (only the padded end is cut); unsplit dimensions slice locally.
    pub(super) fn slice(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let Some(sl) = i.attrs.slice.clone() else {
            return self.default(b, id, own);
        };
        let in_dims = self.global(b.module(), i.operands()[0]).dims().to_vec();
        let out_dims = i.shape.dims().to_vec();
        let out_shard = t.shard_dims(&out_dims);
        let in_shard = t.shard_dims(&in_dims);
        let local = (0..out_dims.len()).all(|d| {
            t.tiles[d] == 1
                || (sl[d].start == 0 && sl[d].stride == 1 && in_shard[d] == out_shard[d])
        });
        if !local {
            return self.windowed_slice(b, id, own);
        }
        let x = self.operand(b, id, 0, &own)?;
        let starts: Vec<i64> = (0..out_dims.len())
            .map(|d| if t.tiles[d] == 1 { sl[d].start } else { 0 })
            .collect();
        let limits: Vec<i64> = (0..out_dims.len())
            .map(|d| {
                if t.tiles[d] == 1 {
                    sl[d].limit
                } else {
                    out_shard[d]
                }
            })
            .collect();
        let strides: Vec<i64> = (0..out_dims.len())
            .map(|d| if t.tiles[d] == 1 { sl[d].stride } else { 1 })
            .collect();
        let out = if (0..out_dims.len())
            .all(|d| starts[d] == 0 && strides[d] == 1 && limits[d] == in_shard[d])
        {
            x
        } else {
            let c = b.slice(x, &starts, &limits, &strides)?;
            self.name_later(b.module(), c, i.name().to_string());
            c
        };
        self.set(id, out, own);
        Ok(())
    }

    /// A local iota plus the offset of the device's piece along the iota dimension.
    pub(super) fn iota(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let d = i.attrs.iota_dimension as usize;
        let ty = i.shape.element_type();
        if !(ty.is_float() || (ty.is_integral() && ty != ElementType::Pred)) || d >= t.rank() {
            return self.default(b, id, own);
        }
        let local = local_shape(&i.shape, &own);
        let out = self.clone_with(b, &i, &[], local.clone())?;
        let out = if t.tiles[d] > 1 {
            let starts: Vec<i64> = t.starts(i.shape.dims()).iter().map(|s| s[d]).collect();
            let off = self.table(b, &starts)?;
            let off = if ty == ElementType::S32 {
                off
            } else {
                b.convert(off, ty)?
            };
            let offs = broadcast_scalar(b, off, local.dims())?;
            b.binary(Opcode::Add, out, offs)?
        } else {
            out
        };
        self.set(id, out, own);
        Ok(())
    }

    /// Emits a [`Step::AllToAll`]: the split dimensions' pieces (padded to a multiple) are cut
    /// into a leading axis of the group size, the all-to-all exchanges along it, and the
    /// received axis (which member sent each piece) is unfolded in front of the concat
    /// dimensions and merged into them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit_all_to_all(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        split: &[(usize, i64)],
        concat: &[(usize, i64)],
        groups: &[Vec<i64>],
        dims: &[i64],
        ty: ElementType,
    ) -> Result<InstrId> {
        let rank = dims.len();
        let mut local: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
        let mut x = x;
        let mut pads = vec![PaddingDim::default(); rank];
        for &(d, g) in split {
            let c = crate::partition::spec::ceil_div(local[d], g);
            pads[d].high = c * g - local[d];
            local[d] = c * g;
        }
        if pads.iter().any(|p| p.high > 0) {
            let zero = b.scalar(ty, 0.0)?;
            x = b.pad(x, zero, &pads)?;
        }
        // [.., g*c, ..] -> [.., g, c, ..]; the g axes to the front, merged into one.
        let mut expanded = Vec::with_capacity(rank + split.len());
        let mut g_axes = Vec::new();
        let mut rest_axes = Vec::new();
        let mut rest = Vec::with_capacity(rank);
        for (d, &l) in local.iter().enumerate() {
            match split.iter().find(|&&(s, _)| s == d) {
                Some(&(_, g)) => {
                    g_axes.push(expanded.len() as i64);
                    expanded.push(g);
                    rest_axes.push(expanded.len() as i64);
                    expanded.push(l / g);
                    rest.push(l / g);
                }
                None => {
                    rest_axes.push(expanded.len() as i64);
                    expanded.push(l);
                    rest.push(l);
                }
            }
        }
        let group: i64 = split.iter().map(|&(_, g)| g).product();
        let mut x = b.reshape(x, &expanded)?;
        let mut perm = g_axes.clone();
        perm.extend(&rest_axes);
        if perm.iter().enumerate().any(|(i, &p)| i as i64 != p) {
            x = b.transpose(x, &perm)?;
        }
        let mut front = vec![group];
        front.extend(&rest);
        let x = b.reshape(x, &front)?;
        let a = self.all_to_all(b, x, 0, groups)?;
        // Axis 0 is the sender's place over the concat minor parts: unfold it and put each
        // part before its dimension.
        let mut unfolded: Vec<i64> = concat.iter().map(|&(_, f)| f).collect();
        unfolded.extend(&rest);
        let a = b.reshape(a, &unfolded)?;
        let k = concat.len();
        let mut perm = Vec::with_capacity(rank + k);
        let mut merged = Vec::with_capacity(rank);
        for (d, &l) in rest.iter().enumerate() {
            match concat.iter().position(|&(c, _)| c == d) {
                Some(j) => {
                    perm.push(j as i64);
                    merged.push(concat[j].1 * l);
                }
                None => merged.push(l),
            }
            perm.push((k + d) as i64);
        }
        let t = b.transpose(a, &perm)?;
        let m = b.reshape(t, &merged)?;
        let along: Vec<usize> = concat.iter().map(|&(c, _)| c).collect();
        self.trim(b, m, dims, &along)
    }
}

/// The operand tiles for a reshape from `from` to `to` whose output is tiled by `tiles`, when
/// the reshape stays local (see [`Engine::reshape`]).
fn reshape_operand_tiles(from: &[i64], to: &[i64], tiles: &[i64]) -> Option<Vec<i64>> {
    if tiles.iter().all(|&t| t == 1) {
        return Some(vec![1; from.len()]);
    }
    let groups = tessera_hlo::tiling::reshape_groups(from, to)?;
    let mut out = vec![1; from.len()];
    let mut covered = vec![false; to.len()];
    for (ins, outs) in &groups {
        for &o in outs {
            covered[o] = true;
        }
        // The first non-trivial dimension on each side is the major one.
        let Some(&o0) = outs.iter().find(|&&o| to[o] > 1) else {
            if outs.iter().any(|&o| tiles[o] > 1) {
                return None;
            }
            continue;
        };
        if outs.iter().any(|&o| o != o0 && tiles[o] > 1) {
            return None;
        }
        let t = tiles[o0];
        if t == 1 {
            continue;
        }
        let i0 = *ins.iter().find(|&&i| from[i] > 1)?;
        if to[o0] % t != 0 || from[i0] % t != 0 {
            return None;
        }
        out[i0] = t;
    }
    if (0..to.len()).any(|o| !covered[o] && tiles[o] > 1) {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_tiles_follow_the_major_dimension() {
        assert_eq!(
            reshape_operand_tiles(&[8, 6], &[48], &[4]),
            Some(vec![4, 1])
        );
        assert_eq!(
            reshape_operand_tiles(&[48], &[8, 6], &[4, 1]),
            Some(vec![4])
        );
        assert_eq!(reshape_operand_tiles(&[48], &[8, 6], &[1, 2]), None);
        assert_eq!(reshape_operand_tiles(&[6, 4], &[6, 2, 2], &[2, 1, 2]), None);
        assert_eq!(
            reshape_operand_tiles(&[6, 4], &[6, 2, 2], &[2, 2, 1]),
            Some(vec![2, 2])
        );
        assert_eq!(
            reshape_operand_tiles(&[10], &[2, 5], &[2, 1]),
            Some(vec![2])
        );
        assert_eq!(reshape_operand_tiles(&[10], &[5, 2], &[2, 1]), None);
    }
}
