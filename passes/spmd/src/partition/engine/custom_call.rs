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
                        i.name,
                        tessera_hlo::text::shape_to_string(&i.shape),
                        tessera_hlo::text::shape_to_string(&have)
                    )));
                }
                let manual = manual_tree(&i.shape);
                self.set(id, x, manual);
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
                        i.name,
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
}
