//! Random numbers. `rng` (XLA's stateful `RngUniform`/`RngNormal`) is drawn where it lands:
//! each device draws its own piece of a tiled result, as XLA's partitioner does (measured
//! with jaxlib 0.12.0.1 on 8 CPU devices: a sharded `lax.rng_uniform` becomes a per-device
//! `rng` of the local shape, and the devices' pieces differ). The numbers are then not the
//! ones one device would draw for the whole array (those differ on every run anyway: the op
//! is stateful), but every piece has the requested distribution and no bytes move. Devices
//! that hold the same piece (replication) must agree: each group takes its first member's
//! draw. `rng-bit-generator` is a pure function of its state: every device computes it whole
//! and keeps its piece, so a sharded result equals the unsharded one (as in XLA).

use super::*;

impl Engine<'_> {
    pub(super) fn rng(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let t = match &own {
            // A replicated result: drawn on one device and sent (the default).
            Tree::Leaf(Spec::Tiled(t))
                if self.view.is_none() && i.shape.is_array() && !t.is_replicated() =>
            {
                t.clone()
            }
            _ => return self.default(b, id, own),
        };
        let mut ops = Vec::with_capacity(i.operands().len());
        for k in 0..i.operands().len() {
            let shape = self.global(b.module(), i.operands()[k]);
            ops.push(self.operand(b, id, k, &replicated_tree(&shape, n))?);
        }
        let mut out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &own))?;
        if t.repl > 1 {
            // Each replication group keeps its first member's draw: the others are masked
            // to zero and the group sums.
            let groups = t.groups(&[], true);
            let mut first = vec![0i64; n as usize];
            for g in groups.iter() {
                first[g[0] as usize] = 1;
            }
            let ty = i.shape.element_type();
            let flag = self.table(b, &first)?;
            let one = b.scalar(ElementType::S32, 1.0)?;
            let is = b.compare(flag, one, ComparisonDirection::Eq)?;
            let dims: Vec<i64> = b.module().instr(out).shape.dims().to_vec();
            let pred = broadcast_scalar(b, is, &dims)?;
            let zero = b.scalar(ty, 0.0)?;
            let zeros = broadcast_scalar(b, zero, &dims)?;
            let masked = b.select(pred, out, zeros)?;
            let reducer = b.reducer(ty, Opcode::Add)?;
            out = self.all_reduce(b, masked, reducer, &groups)?;
            let g = groups.first().map_or(1, |g| g.len() as i64);
            let bytes = 2 * b.module().instr(out).shape.byte_size(8) * (g - 1) / g.max(1);
            self.report.collectives.push(CollectiveNote {
                original: i.name().to_string(),
                collective: "all-reduce",
                reason: "replicas of a random piece take one member's draw".to_string(),
                bytes,
            });
        }
        self.set(id, out, own);
        Ok(())
    }
}
