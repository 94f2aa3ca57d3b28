//! Host transfers (infeed, outfeed) and cross-replica all-reduces.
//!
//! A partitioned infeed reads, on each device, that device's piece of the value (the host
//! feeds every device its own piece, as XLA's partitioner expects); a partitioned outfeed
//! writes each device's piece. Only tilings whose pieces all have the same size are taken:
//! XLA handles uneven ones with a conditional per device that pads its smaller piece, which
//! is not built here (a typed error names the instruction).

use super::*;

impl Engine<'_> {
    /// Refuses a tree with a leaf that is not an evenly tiled (or replicated) array.
    fn even_pieces(&self, name: &str, shape: &Shape, tree: &Tree) -> Result<()> {
        match (shape, tree) {
            (Shape::Tuple(e), Tree::Tuple(t)) => {
                for (s, t) in e.iter().zip(t) {
                    self.even_pieces(name, s, t)?;
                }
                Ok(())
            }
            (Shape::Array(a), Tree::Leaf(Spec::Tiled(t))) => {
                if a.dims.iter().zip(&t.tiles).all(|(&d, &k)| d % k == 0) {
                    Ok(())
                } else {
                    Err(fail(format!(
                        "%{name}: {} does not split evenly by {}: an infeed or outfeed needs \
                         pieces of one size on every device",
                        tessera_hlo::text::shape_to_string(shape),
                        spec_text(&Spec::Tiled(t.clone()))
                    )))
                }
            }
            (Shape::Array(_), Tree::Leaf(s)) => Err(fail(format!(
                "%{name}: an infeed or outfeed sharded {} is not supported (tiled or \
                 replicated only)",
                spec_text(s)
            ))),
            _ => Ok(()),
        }
    }

    /// `infeed(token)`: each device reads its own piece of the data.
    pub(super) fn infeed(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        if tree_is_manual(&own) {
            return self.manual(b, id, own);
        }
        self.even_pieces(i.name(), &i.shape, &own)?;
        let token = self.value(b.module(), i.operands()[0])?.local;
        let out = self.clone_with(b, &i, &[token], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    /// `outfeed(data, token)`: the data is resharded to the outfeed's sharding and each device
    /// writes its piece (`outfeed_shape` becomes the piece's shape, layouts kept).
    pub(super) fn outfeed(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let data = i.operands()[0];
        let data_shape = self.global(b.module(), data);
        let tree = tree_for(i.sharding.as_ref(), &data_shape, n)
            .map_err(|e| fail(format!("%{}: {e}", i.name())))?;
        if tree_is_manual(&tree) {
            return self.manual(b, id, own);
        }
        self.even_pieces(i.name(), &data_shape, &tree)?;
        let x = self.operand(b, id, 0, &tree)?;
        let token = self.value(b.module(), i.operands()[1])?.local;
        let out = self.clone_with(b, &i, &[x, token], i.shape.clone())?;
        let declared = i
            .attrs
            .outfeed_shape
            .as_deref()
            .cloned()
            .unwrap_or_else(|| data_shape.clone());
        let piece = local_shape(&declared, &tree);
        b.module_mut().instr_mut(out).attrs.outfeed_shape = Some(Box::new(piece));
        self.set(id, out, own);
        Ok(())
    }

    /// An all-reduce without a channel id combines the replicas of one partition: on tiled
    /// values each device's piece is combined with the same piece of the other replicas,
    /// which is the piece of the combined value. Anything else takes the default.
    pub(super) fn cross_replica_all_reduce(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
    ) -> Result<()> {
        let i = b.module().instr(id).clone();
        if i.attrs.channel_id.is_some() || i.operands().len() != 1 || !i.shape.is_array() {
            return self.default(b, id, own);
        }
        let x = self.operand(b, id, 0, &own)?;
        let out = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }
}
