//! Dot through the simple strategies (aligned batch / non-contracting dims, sharded contracting dims, otherwise one operand resharded).

use super::*;

impl Engine<'_> {
    pub(super) fn dot(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Some(dn) = i.attrs.dot_dims.clone() else {
            return self.default(b, id, own);
        };
        if i.operands().len() != 2 || !i.attrs.sparsity.is_empty() {
            return self.default(b, id, own);
        }
        let (lhs, rhs) = (i.operands()[0], i.operands()[1]);
        let lrank = b.module().instr(lhs).shape.rank();
        let rrank = b.module().instr(rhs).shape.rank();
        let lb: Vec<usize> = dn
            .lhs_batch_dimensions
            .iter()
            .map(|&d| d as usize)
            .collect();
        let rb: Vec<usize> = dn
            .rhs_batch_dimensions
            .iter()
            .map(|&d| d as usize)
            .collect();
        let lc: Vec<usize> = dn
            .lhs_contracting_dimensions
            .iter()
            .map(|&d| d as usize)
            .collect();
        let rc: Vec<usize> = dn
            .rhs_contracting_dimensions
            .iter()
            .map(|&d| d as usize)
            .collect();
        let lfree: Vec<usize> = (0..lrank)
            .filter(|d| !lb.contains(d) && !lc.contains(d))
            .collect();
        let rfree: Vec<usize> = (0..rrank)
            .filter(|d| !rb.contains(d) && !rc.contains(d))
            .collect();
        let nb = lb.len();
        let mut lmap = vec![None; lrank];
        let mut rmap = vec![None; rrank];
        for (k, (&l, &r)) in lb.iter().zip(&rb).enumerate() {
            lmap[l] = Some(k);
            rmap[r] = Some(k);
        }
        for (m, &l) in lfree.iter().enumerate() {
            lmap[l] = Some(nb + m);
        }
        for (m, &r) in rfree.iter().enumerate() {
            rmap[r] = Some(nb + lfree.len() + m);
        }
        // An operand split on contracting dimensions keeps its split; the other is brought to
        // the same contracting (and batch) split; local dot, then a sum over the devices that
        // hold different contracting pieces. The result keeps the first operand's batch and
        // free-dimension split.
        let lv = self.value(b.module(), lhs)?;
        let rv = self.value(b.module(), rhs)?;
        for (mine, other, mc, oc, mb, ob, first_is_lhs) in [
            (&lv, rhs, &lc, &rc, &lb, &rb, true),
            (&rv, lhs, &rc, &lc, &rb, &lb, false),
        ] {
            let Tree::Leaf(Spec::Tiled(s)) = &mine.tree else {
                continue;
            };
            let split: Vec<usize> = mc.iter().copied().filter(|&d| s.tiles[d] > 1).collect();
            if split.is_empty() {
                continue;
            }
            let orank = b.module().instr(other).shape.rank();
            let mut omap = vec![None; orank];
            for (k, &d) in oc.iter().enumerate() {
                omap[d] = Some(mc[k]);
            }
            for (k, &d) in ob.iter().enumerate() {
                omap[d] = Some(mb[k]);
            }
            let s = s.clone();
            let o_t = s.project(&omap);
            // Output dimension -> this operand's dimension (batch, then lhs free, rhs free).
            let mut out_map: Vec<Option<usize>> = mb.iter().map(|&d| Some(d)).collect();
            out_map.extend(lfree.iter().map(|&d| first_is_lhs.then_some(d)));
            out_map.extend(rfree.iter().map(|&d| (!first_is_lhs).then_some(d)));
            let out_spec = Tree::Leaf(Spec::Tiled(s.replicate_dims(&split).project(&out_map)));
            let (mine_id, other_k) = if first_is_lhs { (lhs, 1) } else { (rhs, 0) };
            let mine_dims = self.global(b.module(), mine_id).dims().to_vec();
            let other_dims = self.global(b.module(), other).dims().to_vec();
            let ty = b.module().instr(mine_id).shape.element_type();
            let oty = b.module().instr(other).shape.element_type();
            let o_local = self.operand(b, id, other_k, &Tree::Leaf(Spec::Tiled(o_t.clone())))?;
            // Padding may hold anything (NaN too): zero it on both sides.
            let z = built(b.scalar(ty, 0.0))?;
            let m_local = self.mask_padding(b, mine.local, &mine_dims, &s, &split, z)?;
            let oz = built(b.scalar(oty, 0.0))?;
            let o_local = self.mask_padding(b, o_local, &other_dims, &o_t, oc, oz)?;
            let (l, r) = if first_is_lhs {
                (m_local, o_local)
            } else {
                (o_local, m_local)
            };
            let partial_shape = local_shape(&i.shape, &out_spec);
            let d = self.clone_with(b, &i, &[l, r], partial_shape)?;
            let groups = s.groups(&split, false);
            let out_ty = i.shape.element_type();
            let reducer = built(b.reducer(out_ty, Opcode::Add))?;
            let real = self.real_groups(&groups);
            let sum = self.creator.all_reduce(b, d, reducer, &real)?;
            let g = groups[0].len() as i64;
            let out_bytes = b
                .module()
                .instr(sum)
                .shape
                .as_array()
                .map_or(0, |a| a.byte_size());
            self.report.collectives.push(CollectiveNote {
                original: i.name().to_string(),
                collective: "all-reduce",
                reason: "partial sums of a dot over split contracting dimensions".to_string(),
                bytes: 2 * out_bytes * (g - 1) / g,
            });
            let v = Value {
                local: sum,
                tree: out_spec,
            };
            let out = self.reshard(b, &v, &i.shape, &own)?;
            self.set(id, out, own);
            return Ok(());
        }
        // Otherwise each operand is resharded to match the output's split.
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let lt = Tree::Leaf(Spec::Tiled(t.project(&lmap)));
        let rt = Tree::Leaf(Spec::Tiled(t.project(&rmap)));
        let l = self.operand(b, id, 0, &lt)?;
        let r = self.operand(b, id, 1, &rt)?;
        let out = self.clone_with(b, &i, &[l, r], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }
}
