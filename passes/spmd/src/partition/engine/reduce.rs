//! Reduce: local partial reductions, the identity in padding, all-reduce over sharded reduced dims.

use super::*;

impl Engine<'_> {
    /// Local reduce of the piece (padding set to the init value), then an all-reduce over the
    /// devices that split a reduced dimension.
    pub(super) fn reduce(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
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
}
