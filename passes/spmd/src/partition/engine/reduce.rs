//! Reduce: local partial reductions, the identity in padding, all-reduce over sharded reduced dims.

use super::*;

impl Engine<'_> {
    /// Local reduce of the piece (padding set to the init value), then an all-reduce over the
    /// devices that split a reduced dimension.
    pub(super) fn reduce(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        if i.shape.is_tuple() {
            return self.variadic_reduce(b, id, own);
        }
        if i.operands().len() != 2 || !i.shape.is_array() {
            return self.default(b, id, own);
        }
        let op = i.operands()[0];
        let op_shape = self.global(b.module(), op);
        let v = self.value(b.module(), op)?;
        let Tree::Leaf(Spec::Tiled(s)) = &v.tree else {
            return self.default(b, id, own);
        };
        let s = s.clone();
        let reducer = i
            .to_apply()
            .ok_or_else(|| fail(format!("%{}: no to_apply", i.name)))?;
        let reduced: Vec<usize> = i
            .attrs
            .dimensions
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|&d| d as usize)
            .collect();
        let init = self.operand(b, id, 1, &Tree::Leaf(Spec::replicated(0, n)))?;
        let dims = op_shape.dims().to_vec();
        let x = self.mask_padding(b, v.local, &dims, &s, &reduced, init)?;
        let local_shape_out = {
            let keep: Vec<i64> = s
                .shard_dims(&dims)
                .iter()
                .enumerate()
                .filter(|(d, _)| !reduced.contains(d))
                .map(|(_, &x)| x)
                .collect();
            let mut sh = i.shape.clone();
            if let Some(a) = sh.as_array_mut() {
                a.dims = keep.into_iter().collect();
            }
            sh
        };
        let mut r = self.clone_with(b, &i, &[x, init], local_shape_out)?;
        let split: Vec<usize> = reduced
            .iter()
            .copied()
            .filter(|&d| s.tiles[d] > 1)
            .collect();
        if !split.is_empty() {
            let groups = s.groups(&split, false);
            let before = self.report.collectives.len();
            r = self.creator.all_reduce(b, r, reducer, &groups)?;
            let out_bytes = b
                .module()
                .instr(r)
                .shape
                .as_array()
                .map_or(0, |a| a.byte_size());
            let g = groups[0].len() as i64;
            self.report.collectives.insert(
                before,
                CollectiveNote {
                    original: i.name.clone(),
                    collective: "all-reduce",
                    reason: "partial results of a reduce over split dimensions".to_string(),
                    bytes: 2 * out_bytes * (g - 1) / g,
                },
            );
        }
        let kept: Vec<Option<usize>> = (0..dims.len())
            .filter(|d| !reduced.contains(d))
            .map(Some)
            .collect();
        let partial = Tree::Leaf(Spec::Tiled(s.replicate_dims(&split).project(&kept)));
        let v = Value {
            local: r,
            tree: partial,
        };
        let out = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, out, own);
        Ok(())
    }

    /// A reduce of several arrays at once (argmax and the like): every input is brought to
    /// the first input's tiling and reduced locally (padding set to each input's init).
    /// Partial results over split reduced dimensions cannot be all-reduced with a tuple
    /// reducer, so each is given a trailing dimension, all-gathered along it within the
    /// devices that split a reduced dimension, and reduced once more over it (XLA does the
    /// same with an all-reduce of dynamic-update-slices).
    pub(super) fn variadic_reduce(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
    ) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let k = i.operands().len() / 2;
        let first = i.operands()[0];
        let Tree::Leaf(Spec::Tiled(s)) = self.value(b.module(), first)?.tree else {
            return self.default(b, id, own);
        };
        let reducer = i
            .to_apply()
            .ok_or_else(|| fail(format!("%{}: no to_apply", i.name)))?;
        let reduced: Vec<usize> = i
            .attrs
            .dimensions
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|&d| d as usize)
            .collect();
        let dims = self.global(b.module(), first).dims().to_vec();
        let scalar = Tree::Leaf(Spec::replicated(0, n));
        let mut inits = Vec::with_capacity(k);
        for j in 0..k {
            inits.push(self.operand(b, id, k + j, &scalar)?);
        }
        let mut ops = Vec::with_capacity(2 * k);
        for (j, &init) in inits.iter().enumerate() {
            let x = self.operand(b, id, j, &Tree::Leaf(Spec::Tiled(s.clone())))?;
            ops.push(self.mask_padding(b, x, &dims, &s, &reduced, init)?);
        }
        ops.extend_from_slice(&inits);
        let shard = s.shard_dims(&dims);
        let kept_local: Vec<i64> = shard
            .iter()
            .enumerate()
            .filter(|(d, _)| !reduced.contains(d))
            .map(|(_, &x)| x)
            .collect();
        let Shape::Tuple(outs) = &i.shape else {
            return self.default(b, id, own);
        };
        let local_outs: Vec<Shape> = outs
            .iter()
            .map(|o| {
                let mut o = o.clone();
                if let Some(a) = o.as_array_mut() {
                    a.dims = kept_local.iter().copied().collect();
                }
                o
            })
            .collect();
        let mut r = self.clone_with(b, &i, &ops, Shape::tuple(local_outs.clone()))?;
        let split: Vec<usize> = reduced
            .iter()
            .copied()
            .filter(|&d| s.tiles[d] > 1)
            .collect();
        if !split.is_empty() {
            let groups = s.groups(&split, false);
            let g = groups[0].len() as i64;
            let last = kept_local.len() as i64;
            let mut with_one = kept_local.clone();
            with_one.push(1);
            let mut gathered = Vec::with_capacity(k);
            for j in 0..k {
                let e = built(b.get_tuple_element(r, j as i64))?;
                let e = built(b.reshape(e, &with_one))?;
                let a = self.creator.all_gather(b, e, last, &groups)?;
                let out_bytes = b
                    .module()
                    .instr(a)
                    .shape
                    .as_array()
                    .map_or(0, |a| a.byte_size());
                self.report.collectives.push(CollectiveNote {
                    original: i.name.clone(),
                    collective: "all-gather",
                    reason: "partial results of a variadic reduce over split dimensions"
                        .to_string(),
                    bytes: out_bytes * (g - 1) / g,
                });
                gathered.push(a);
            }
            gathered.extend_from_slice(&inits);
            let mut attrs = i.attrs.clone();
            attrs.dimensions = Some(vec![last]);
            r = built(b.op(
                Opcode::Reduce,
                &gathered,
                attrs,
                &[reducer],
                Some(&Shape::tuple(local_outs)),
            ))?;
        }
        let kept: Vec<Option<usize>> = (0..dims.len())
            .filter(|d| !reduced.contains(d))
            .map(Some)
            .collect();
        let leaf = Tree::Leaf(Spec::Tiled(s.replicate_dims(&split).project(&kept)));
        let v = Value {
            local: r,
            tree: Tree::Tuple(vec![leaf; k]),
        };
        let out = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, out, own);
        Ok(())
    }
}
