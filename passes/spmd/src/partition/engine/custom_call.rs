//! Custom-calls: Sharding, SPMDFullToShardShape, SPMDShardToFullShape, and the rest through the default.

use super::*;

impl Engine<'_> {
    pub(super) fn custom_call(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let target = i
            .attrs
            .custom_call
            .as_ref()
            .map(|c| c.target.clone())
            .unwrap_or_default();
        match target.as_str() {
            "Sharding" if i.operands().len() == 1 => {
                let x = self.operand(b, id, 0, &own)?;
                self.set(id, x, own);
                Ok(())
            }
            "SPMDFullToShardShape" => {
                let op = i.operands()[0];
                let op_tree = tree_of(b.module(), op, n)?;
                let x = self.operand(b, id, 0, &op_tree)?;
                let have = b.module().instr(x).shape.clone();
                if !have.same_dimensions(&i.shape) {
                    return Err(fail(format!(
                        "%{}: the manual shape {} is not the piece {} of the operand's sharding",
                        i.name(),
                        tessera_hlo::text::shape_to_string(&i.shape),
                        tessera_hlo::text::shape_to_string(&have)
                    )));
                }
                let manual = manual_tree(&i.shape);
                self.set(id, x, manual);
                Ok(())
            }
            "SPMDShardToFullShape" if self.holds_group_value(b, i.operands()[0]) => {
                // Leaving a partially manual region: each device's piece of its group's value
                // is its piece of the full value.
                let op = i.operands()[0];
                let v = self.value(b.module(), op)?;
                let x = v.local;
                let real = self.real_device_count();
                let op_shape = self.global(b.module(), op);
                if let (Some((_, groups)), Tree::Leaf(f), Tree::Leaf(p)) = (
                    b.module()
                        .try_instr(op)
                        .map(|_| partial_manual::tree(b.module(), op, real))
                        .transpose()?
                        .flatten(),
                    &own,
                    &v.tree,
                ) {
                    Self::check_placement(f, i.shape.dims(), p, op_shape.dims(), &groups).map_err(
                        |e| {
                            fail(format!(
                                "%{}: the result's sharding does not place each device's piece \
                                 where the partially manual operand holds it: {e}",
                                i.name()
                            ))
                        },
                    )?;
                }
                let want = local_shape(&i.shape, &own);
                let have = b.module().instr(x).shape.clone();
                if !have.same_dimensions(&want) {
                    return Err(fail(format!(
                        "%{}: the manual subgroup's piece {} is not the piece {} of the result's \
                         sharding",
                        i.name(),
                        tessera_hlo::text::shape_to_string(&have),
                        tessera_hlo::text::shape_to_string(&want)
                    )));
                }
                self.set(id, x, own);
                Ok(())
            }
            "SPMDShardToFullShape" => {
                let x = self.operand(
                    b,
                    id,
                    0,
                    &manual_tree(&self.global(b.module(), i.operands()[0])),
                )?;
                let want = local_shape(&i.shape, &own);
                let have = b.module().instr(x).shape.clone();
                if !have.same_dimensions(&want) {
                    return Err(fail(format!(
                        "%{}: the manual piece {} is not the piece {} of the result's sharding",
                        i.name(),
                        tessera_hlo::text::shape_to_string(&have),
                        tessera_hlo::text::shape_to_string(&want)
                    )));
                }
                self.set(id, x, own);
                Ok(())
            }
            "TopK" => self.top_k(b, id, own),
            _ => self.default(b, id, own),
        }
    }

    /// Does `op`'s value live in a partially manual region (a tiling over fewer devices than
    /// the module has)?
    fn holds_group_value(&self, b: &Builder, op: InstrId) -> bool {
        fn small(t: &Tree, n: i64) -> bool {
            match t {
                Tree::Leaf(Spec::Tiled(t)) => t.num_devices() != n,
                Tree::Leaf(_) => false,
                Tree::Tuple(e) => e.iter().any(|x| small(x, n)),
            }
        }
        self.values.get(&op).is_some_and(|v| small(&v.tree, self.n))
            || b.module().try_instr(op).is_none()
    }

    /// `SPMDFullToShardShape` into a partially manual region: the operand, resharded to its
    /// own sharding, already holds on each device that device's piece of its manual group's
    /// value (the shapes must agree).
    pub(super) fn enter_partial_manual(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
        groups: &partial_manual::Groups,
    ) -> Result<()> {
        let n = self.real_device_count();
        let i = b.module().instr(id).clone();
        let op = i.operands()[0];
        let op_tree = tree_of(b.module(), op, n)?;
        let x = self.operand(b, id, 0, &op_tree)?;
        let have = b.module().instr(x).shape.clone();
        let want = local_shape(&i.shape, &own);
        if !have.same_dimensions(&want) {
            return Err(fail(format!(
                "%{}: the operand's piece {} is not the piece {} of the partially manual result",
                i.name(),
                tessera_hlo::text::shape_to_string(&have),
                tessera_hlo::text::shape_to_string(&want)
            )));
        }
        let full = self.global(b.module(), op);
        if let (Tree::Leaf(f), Tree::Leaf(p)) = (&op_tree, &own) {
            Self::check_placement(f, full.dims(), p, i.shape.dims(), groups).map_err(|e| {
                fail(format!(
                    "%{}: the operand's sharding does not place each device's piece where the \
                     partially manual result needs it: {e}",
                    i.name()
                ))
            })?;
        }
        self.set(id, x, own);
        Ok(())
    }
}
