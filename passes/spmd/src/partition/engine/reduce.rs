//! Reduce: local partial reductions, the identity in padding, all-reduce over sharded reduced dims.

use super::*;

impl Engine<'_> {
    /// Every input is brought to the first input's tiling and reduced locally (padding set to
    /// each input's init value); over split reduced dimensions the partial results are then
    /// combined among the devices that split them: one array by an all-reduce with the
    /// reduce's own computation; several (argmax and the like), which an all-reduce cannot
    /// combine with a tuple reducer, by giving each a trailing dimension, all-gathering along
    /// it and reducing once more over it (XLA builds the same gather as an all-reduce of
    /// dynamic-update-slices). The result is then resharded to the reduce's sharding.
    pub(super) fn reduce(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let k = i.operands().len() / 2;
        let outs: Vec<Shape> = match &i.shape {
            Shape::Tuple(e) => e.clone(),
            s => vec![s.clone()],
        };
        if k == 0 || i.operands().len() != 2 * k || outs.len() != k {
            return self.default(b, id, own);
        }
        let first = i.operands()[0];
        let Tree::Leaf(Spec::Tiled(s)) = self.value(b.module(), first)?.tree else {
            return self.default(b, id, own);
        };
        let reducer = i
            .to_apply()
            .ok_or_else(|| fail(format!("%{}: no to_apply", i.name())))?;
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
        let kept_local: Vec<i64> = s
            .shard_dims(&dims)
            .iter()
            .enumerate()
            .filter(|(d, _)| !reduced.contains(d))
            .map(|(_, &x)| x)
            .collect();
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
        let local_shape = if i.shape.is_tuple() {
            Shape::tuple(local_outs.clone())
        } else {
            local_outs[0].clone()
        };
        let mut r = self.clone_with(b, &i, &ops, local_shape.clone())?;
        let split: Vec<usize> = reduced
            .iter()
            .copied()
            .filter(|&d| s.tiles[d] > 1)
            .collect();
        if !split.is_empty() {
            let groups = s.groups(&split, false);
            let g = groups[0].len() as i64;
            if !i.shape.is_tuple() {
                r = self.all_reduce(b, r, reducer, &groups)?;
                let bytes = 2 * array_bytes(b, r) * (g - 1) / g;
                self.note(i.name(), "all-reduce", "a reduce", bytes);
            } else {
                let last = kept_local.len() as i64;
                let mut with_one = kept_local.clone();
                with_one.push(1);
                let mut gathered = Vec::with_capacity(2 * k);
                for j in 0..k {
                    let e = b.get_tuple_element(r, j as i64)?;
                    let e = b.reshape(e, &with_one)?;
                    let a = self.all_gather(b, e, last, &groups)?;
                    let bytes = array_bytes(b, a) * (g - 1) / g;
                    self.note(i.name(), "all-gather", "a variadic reduce", bytes);
                    gathered.push(a);
                }
                gathered.extend_from_slice(&inits);
                let mut attrs = i.attrs.clone();
                attrs.dimensions = Some(vec![last]);
                r = b.op(
                    Opcode::Reduce,
                    &gathered,
                    attrs,
                    &[reducer],
                    Some(&local_shape),
                )?;
            }
        }
        let kept: Vec<Option<usize>> = (0..dims.len())
            .filter(|d| !reduced.contains(d))
            .map(Some)
            .collect();
        let leaf = Tree::Leaf(Spec::Tiled(s.replicate_dims(&split).project(&kept)));
        let tree = if i.shape.is_tuple() {
            Tree::Tuple(vec![leaf; k])
        } else {
            leaf
        };
        let v = Value { local: r, tree };
        let out = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, out, own);
        Ok(())
    }

    /// Records a collective a reduce emitted for its partial results.
    fn note(&mut self, original: &str, collective: &'static str, what: &str, bytes: i64) {
        self.report.collectives.push(CollectiveNote {
            original: original.to_string(),
            collective,
            reason: format!("partial results of {what} over split dimensions"),
            bytes,
        });
    }
}

/// The bytes of array instruction `x` (0 for anything else).
fn array_bytes(b: &Builder, x: InstrId) -> i64 {
    b.module()
        .instr(x)
        .shape
        .as_array()
        .map_or(0, |a| a.byte_size())
}
