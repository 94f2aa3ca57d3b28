//! Tuples, get-tuple-element, optimization barriers, and control flow: while, conditional, call.

use super::*;

impl Engine<'_> {
    pub(super) fn tuple(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let mut locals = Vec::new();
        let mut trees = Vec::new();
        for &op in i.operands() {
            let v = self.value(b.module(), op)?;
            locals.push(v.local);
            trees.push(v.tree);
        }
        let t = b.tuple(&locals)?;
        self.name_later(b.module(), t, i.name().to_string());
        let v = Value {
            local: t,
            tree: Tree::Tuple(trees),
        };
        let out = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, out, own);
        Ok(())
    }

    pub(super) fn get_tuple_element(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
    ) -> Result<()> {
        let i = b.module().instr(id).clone();
        let v = self.value(b.module(), i.operands()[0])?;
        let k = i.attrs.tuple_index as usize;
        let Tree::Tuple(elems) = &v.tree else {
            return Err(fail(format!("%{}: operand is not a tuple", i.name())));
        };
        let sub = elems
            .get(k)
            .cloned()
            .ok_or_else(|| fail(format!("%{}: tuple index {k} out of range", i.name())))?;
        // A get-tuple-element without a sharding of its own (XLA's dumps print them as the
        // `%x#k` shorthand, which drops their sharding) keeps the element's.
        let own = if i.sharding.is_none() {
            sub.clone()
        } else {
            own
        };
        let g = b.get_tuple_element(v.local, k as i64)?;
        self.name_later(b.module(), g, i.name().to_string());
        let ev = Value {
            local: g,
            tree: sub,
        };
        let out = self.reshard(b, &ev, &i.shape, &own)?;
        self.set(id, out, own);
        Ok(())
    }

    pub(super) fn barrier(&mut self, b: &mut Builder, id: InstrId) -> Result<()> {
        let i = b.module().instr(id).clone();
        let v = self.value(b.module(), i.operands()[0])?;
        let shape = local_shape(&i.shape, &v.tree);
        let out = self.clone_with(b, &i, &[v.local], shape)?;
        self.set(id, out, v.tree);
        Ok(())
    }

    pub(super) fn while_loop(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let (cond, body) = match (i.while_condition(), i.while_body()) {
            (Some(c), Some(bd)) => (c, bd),
            _ => {
                return Err(fail(format!(
                    "%{}: a while without condition or body",
                    i.name()
                )))
            }
        };
        let x = self.operand(b, id, 0, &own)?;
        let pred = Tree::Leaf(Spec::replicated(0, n));
        self.computation(b, cond, std::slice::from_ref(&own), &pred)?;
        self.computation(b, body, std::slice::from_ref(&own), &own)?;
        let out = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    /// The parameter trees of a called computation: its own annotations, else its operands'.
    pub(super) fn callee_params(
        &mut self,
        b: &Builder,
        comp: CompId,
        operands: &[InstrId],
    ) -> Result<Vec<Tree>> {
        let n = self.n;
        let mut out = Vec::new();
        for (k, &op) in operands.iter().enumerate() {
            let p = b.module().comp(comp).parameter(k);
            let t = match p {
                Some(p) if b.module().instr(p).sharding.is_some() => {
                    // Inside a partially manual region the callee's parameters carry the
                    // region's sharding, read in its view.
                    let real = self.real_device_count();
                    match partial_manual::tree(b.module(), p, real)? {
                        Some((t, _)) if self.view.is_some() => t,
                        _ => tree_of(b.module(), p, n)?,
                    }
                }
                _ => self.value(b.module(), op)?.tree,
            };
            out.push(t);
        }
        Ok(out)
    }

    pub(super) fn conditional(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let sel = self.operand(b, id, 0, &Tree::Leaf(Spec::replicated(0, n)))?;
        let mut ops = vec![sel];
        for (k, &branch) in i.called.iter().enumerate() {
            let operand = i.operands()[k + 1];
            let params = self.callee_params(b, branch, &[operand])?;
            ops.push(self.operand(b, id, k + 1, &params[0])?);
            self.computation(b, branch, &params, &own)?;
        }
        let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    pub(super) fn call(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let callee = i.called[0];
        let params = self.callee_params(b, callee, i.operands())?;
        let mut ops = Vec::new();
        for (k, p) in params.iter().enumerate() {
            ops.push(self.operand(b, id, k, p)?);
        }
        self.computation(b, callee, &params, &own)?;
        let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }
}
