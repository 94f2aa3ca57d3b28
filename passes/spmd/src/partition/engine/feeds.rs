//! Host transfers (infeed, outfeed) and cross-replica all-reduces.
//!
//! A partitioned infeed reads, on each device, that device's piece of the value (the host
//! feeds every device its own piece, as XLA's partitioner expects); a partitioned outfeed
//! writes each device's piece. Three forms, as XLA builds them:
//! - every device holds a piece of one size: the feed itself, with the piece's shape;
//! - the whole feed sharded to one device (`{maximal device=k}`): a conditional on
//!   `partition-id == k` whose true branch is the feed; elsewhere an infeed's value is zeros
//!   and its token comes from `after-all`, an outfeed writes nothing;
//! - pieces of several sizes (uneven tiles; for an infeed also leaves on single devices): a
//!   conditional with one branch per distinct piece shape, chosen by a table of partition ids.
//!   An infeed branch reads its own piece (a leaf held by another single device is an empty
//!   tuple there) and pads it with zeros to the padded piece every device holds; an outfeed
//!   branch slices the padding off before writing.
//!
//! An outfeed's sharding may carry one more leaf than its data, for the token it returns (XLA
//! accepts it so, and manual regions that chain outfeeds through their tokens write it): that
//! leaf is dropped.

use super::*;

/// The one device every leaf of `s` names (`{maximal device=k}`, or a tuple of those all
/// naming `k`).
fn unique_device(s: Option<&Sharding>) -> Option<i64> {
    match &s?.kind {
        ShardingKind::Maximal(d) => Some(*d),
        ShardingKind::Tuple(l) if !l.is_empty() => {
            let d = unique_device(Some(&l[0]))?;
            l.iter()
                .all(|x| unique_device(Some(x)) == Some(d))
                .then_some(d)
        }
        _ => None,
    }
}

/// The sharding of an outfeed's data: a tuple sharding with one leaf more than the data has
/// leaves loses the last (the returned token's).
fn outfeed_data_sharding(s: Option<&Sharding>, data: &Shape) -> Option<Sharding> {
    let s = s?;
    if let ShardingKind::Tuple(l) = &s.kind {
        let need = data.leaf_count();
        if l.len() == need + 1 {
            return Some(if data.is_tuple() {
                Sharding::tuple(l[..need].to_vec())
            } else {
                l[0].clone()
            });
        }
    }
    Some(s.clone())
}

/// The piece of `shape` (laid out by `tree`) each of `n` devices holds without padding; a
/// leaf held whole by another single device is absent there (an empty tuple, as XLA writes
/// it). Layouts are kept.
fn pieces(shape: &Shape, tree: &Tree, n: i64) -> Vec<Shape> {
    match (shape, tree) {
        (Shape::Tuple(e), Tree::Tuple(t)) => {
            let per: Vec<Vec<Shape>> = e.iter().zip(t).map(|(s, t)| pieces(s, t, n)).collect();
            (0..n as usize)
                .map(|d| Shape::tuple(per.iter().map(|p| p[d].clone()).collect()))
                .collect()
        }
        (Shape::Array(a), Tree::Leaf(Spec::Tiled(t))) if !t.is_replicated() => {
            let shard = t.shard_dims(&a.dims);
            t.starts(&a.dims)
                .iter()
                .map(|start| {
                    let mut out = a.clone();
                    out.dims = a
                        .dims
                        .iter()
                        .zip(&shard)
                        .zip(start)
                        .map(|((&size, &s), &o)| (size - o).clamp(0, s))
                        .collect();
                    Shape::Array(out)
                })
                .collect()
        }
        (Shape::Array(_), Tree::Leaf(Spec::Maximal(k))) => (0..n)
            .map(|d| {
                if d == *k {
                    shape.clone()
                } else {
                    Shape::tuple(Vec::new())
                }
            })
            .collect(),
        _ => vec![shape.clone(); n as usize],
    }
}

/// The distinct shapes of `pieces` in order of first appearance, and each device's index
/// among them.
fn distinct(pieces: Vec<Shape>) -> (Vec<Shape>, Vec<i64>) {
    let mut shapes: Vec<Shape> = Vec::new();
    let mut index = Vec::with_capacity(pieces.len());
    for p in pieces {
        let k = match shapes.iter().position(|s| *s == p) {
            Some(k) => k,
            None => {
                shapes.push(p);
                shapes.len() - 1
            }
        };
        index.push(k as i64);
    }
    (shapes, index)
}

fn has_leaf(t: &Tree, f: &dyn Fn(&Spec) -> bool) -> bool {
    match t {
        Tree::Leaf(s) => f(s),
        Tree::Tuple(e) => e.iter().any(|x| has_leaf(x, f)),
    }
}

/// Zeros of `shape` (tokens from `after-all`).
fn zeros(b: &mut Builder, shape: &Shape) -> Result<InstrId> {
    match shape {
        Shape::Array(a) => {
            let z = b.scalar(a.ty, 0.0)?;
            broadcast_scalar(b, z, &a.dims)
        }
        Shape::Tuple(e) => {
            let mut parts = Vec::with_capacity(e.len());
            for s in e {
                parts.push(zeros(b, s)?);
            }
            Ok(b.tuple(&parts)?)
        }
        _ => Ok(b.op(Opcode::AfterAll, &[], Default::default(), &[], None)?),
    }
}

/// `x`, of shape `piece`, padded at the end of each dimension to `padded` with zeros; an
/// absent leaf (an empty tuple where `padded` has an array) becomes zeros.
fn pad_to(b: &mut Builder, x: InstrId, piece: &Shape, padded: &Shape) -> Result<InstrId> {
    match (piece, padded) {
        (Shape::Tuple(p), _)
            if p.is_empty() && !matches!(padded, Shape::Tuple(q) if q.is_empty()) =>
        {
            zeros(b, padded)
        }
        (Shape::Tuple(p), Shape::Tuple(q)) => {
            let mut parts = Vec::with_capacity(p.len());
            for (k, (ps, qs)) in p.iter().zip(q).enumerate() {
                let g = b.get_tuple_element(x, k as i64)?;
                parts.push(pad_to(b, g, ps, qs)?);
            }
            Ok(b.tuple(&parts)?)
        }
        (Shape::Array(p), Shape::Array(q)) if p.dims != q.dims => {
            let zero = b.scalar(p.ty, 0.0)?;
            let pads: Vec<PaddingDim> = p
                .dims
                .iter()
                .zip(&q.dims)
                .map(|(&have, &want)| PaddingDim {
                    low: 0,
                    high: want - have,
                    interior: 0,
                })
                .collect();
            Ok(b.pad(x, zero, &pads)?)
        }
        _ => Ok(x),
    }
}

/// `x` with the padding sliced off each leaf, to `piece`.
fn slice_to(b: &mut Builder, x: InstrId, piece: &Shape) -> Result<InstrId> {
    let have = b.module().instr(x).shape.clone();
    match (&have, piece) {
        (Shape::Tuple(_), Shape::Tuple(p)) => {
            let mut parts = Vec::with_capacity(p.len());
            for (k, ps) in p.iter().enumerate() {
                let g = b.get_tuple_element(x, k as i64)?;
                parts.push(slice_to(b, g, ps)?);
            }
            Ok(b.tuple(&parts)?)
        }
        (Shape::Array(h), Shape::Array(p)) if h.dims != p.dims => {
            let rank = p.dims.len();
            Ok(b.slice(x, &vec![0; rank], &p.dims, &vec![1; rank])?)
        }
        _ => Ok(x),
    }
}

impl Engine<'_> {
    /// Refuses a feed with a manual leaf beside non-manual ones, and the conditional forms
    /// inside a partially manual region (their branch index is a real partition id).
    fn feed_check(&self, name: &str, tree: &Tree, conditional: bool) -> Result<()> {
        if has_leaf(tree, &|s| *s == Spec::Manual) {
            return Err(fail(format!(
                "%{name}: an infeed or outfeed with some leaves manual and others not is not \
                 supported (all manual, or none)"
            )));
        }
        if conditional && self.view.is_some() {
            return Err(fail(format!(
                "%{name}: an infeed or outfeed on one device or with pieces of unequal size \
                 inside a partially manual region is not supported"
            )));
        }
        Ok(())
    }

    /// A conditional (built whole, its shape `shape`) choosing among `branches` by `sel`, each
    /// taking `operand`.
    fn feed_conditional(
        &mut self,
        b: &mut Builder,
        sel: InstrId,
        operand: InstrId,
        branches: &[CompId],
        shape: Shape,
        predicated: bool,
    ) -> Result<InstrId> {
        let mut ops = vec![sel];
        ops.extend(std::iter::repeat_n(operand, branches.len()));
        let mut c = Instruction::new("conditional", Opcode::Conditional, shape)
            .with_operands(&ops)
            .with_called(branches);
        c.predicated_conditional = predicated;
        Ok(b.add(c)?)
    }

    /// A new computation named after `base` whose parameter has `param` shape; `body` builds
    /// its root from the parameter. The builder is back in its computation afterwards.
    fn feed_branch(
        &mut self,
        b: &mut Builder,
        base: &str,
        param: Shape,
        body: &mut dyn FnMut(&mut Builder, InstrId) -> Result<InstrId>,
    ) -> Result<CompId> {
        let c = self.new_computation(b, base)?;
        let outer = b.computation();
        // Placed just before the computation that calls it, so that branches print in order.
        let m = b.module_mut();
        let mut order = m.computations().to_vec();
        order.retain(|&x| x != c);
        let at = order.iter().position(|&x| x == outer).unwrap_or(0);
        order.insert(at, c);
        m.set_computation_order(order);
        b.set_computation(c);
        let built_root = Ok(b.parameter(0, param, "feed_param")?).and_then(|p| body(b, p));
        if let Ok(root) = built_root {
            b.module_mut().set_root(c, root);
        }
        b.set_computation(outer);
        built_root.map(|_| c)
    }

    /// `conditional(partition-id == k, ops, ops)`, as XLA runs an instruction on one device:
    /// the true branch runs `on_k` on the operands, the false branch returns zeros of
    /// `shape` (for a token, `after-all`).
    fn on_one_device(
        &mut self,
        b: &mut Builder,
        name: &str,
        k: i64,
        ops: &[InstrId],
        shape: &Shape,
        on_k: &mut dyn FnMut(&mut Builder, &[InstrId]) -> Result<InstrId>,
    ) -> Result<InstrId> {
        let operand = b.tuple(ops)?;
        let param = b.module().instr(operand).shape.clone();
        let pid = self.partition_id(b)?;
        let dev = b.scalar(ElementType::U32, k as f64)?;
        let pred = b.compare(pid, dev, ComparisonDirection::Eq)?;
        let arity = ops.len();
        let on = self.feed_branch(
            b,
            &format!("{name}.on_device"),
            param.clone(),
            &mut |b, p| {
                let mut parts = Vec::with_capacity(arity);
                for j in 0..arity {
                    parts.push(b.get_tuple_element(p, j as i64)?);
                }
                on_k(b, &parts)
            },
        )?;
        let off = self.feed_branch(b, &format!("{name}.off_device"), param, &mut |b, _| {
            zeros(b, shape)
        })?;
        self.feed_conditional(b, pred, operand, &[on, off], shape.clone(), true)
    }

    /// The s32 branch index of each device (`index` by device id): the partition id itself
    /// when every device has its own branch, else a table.
    fn feed_branch_index(&mut self, b: &mut Builder, index: &[i64]) -> Result<InstrId> {
        if index.iter().enumerate().all(|(d, &k)| k == d as i64) {
            let pid = self.partition_id(b)?;
            return Ok(b.convert(pid, ElementType::S32)?);
        }
        self.table(b, index)
    }

    /// `infeed(token)`: each device reads its own piece of the data.
    pub(super) fn infeed(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        if tree_is_manual(&own) {
            return self.manual(b, id, own);
        }
        let (Shape::Tuple(parts), Tree::Tuple(trees)) = (&i.shape, &own) else {
            return Err(fail(format!(
                "%{}: an infeed's shape is a tuple of its data and a token",
                i.name()
            )));
        };
        let (data, data_tree) = (&parts[0], &trees[0]);
        let token = self.value(b.module(), i.operands()[0])?.local;
        let local = local_shape(&i.shape, &own);
        let padded = local.tuple_elements()[0].clone();
        let (shapes, index) = distinct(pieces(data, data_tree, n));
        let one_device = unique_device(i.sharding.as_ref()).filter(|_| n > 1);
        self.feed_check(
            i.name(),
            data_tree,
            shapes.len() > 1 || one_device.is_some(),
        )?;
        if let Some(k) = one_device {
            let shape = i.shape.clone();
            let out = self.on_one_device(b, i.name(), k, &[token], &shape, &mut |b, ops| {
                clone_of(b, &i, ops, shape.clone())
            })?;
            self.set(id, out, own);
            return Ok(());
        }
        if shapes.len() == 1 && shapes[0] == padded {
            let out = self.clone_with(b, &i, &[token], local)?;
            self.set(id, out, own);
            return Ok(());
        }
        // One branch per distinct piece: read it, pad it to the padded piece.
        let sel = self.feed_branch_index(b, &index)?;
        let mut branches = Vec::with_capacity(shapes.len());
        for (k, piece) in shapes.iter().enumerate() {
            let read_shape = Shape::tuple(vec![piece.clone(), Shape::Token]);
            let c = self.feed_branch(
                b,
                &format!("{}.branch_{k}", i.name()),
                Shape::Token,
                &mut |b, p| {
                    let read = clone_of(b, &i, &[p], read_shape.clone())?;
                    if *piece == padded {
                        return Ok(read);
                    }
                    let d = b.get_tuple_element(read, 0)?;
                    let d = pad_to(b, d, piece, &padded)?;
                    let t = b.get_tuple_element(read, 1)?;
                    Ok(b.tuple(&[d, t])?)
                },
            )?;
            branches.push(c);
        }
        let out = self.feed_conditional(b, sel, token, &branches, local, false)?;
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
        let sharding = outfeed_data_sharding(i.sharding.as_ref(), &data_shape);
        let tree = tree_for(sharding.as_ref(), &data_shape, n)
            .map_err(|e| fail(format!("%{}: {e}", i.name())))?;
        if tree_is_manual(&tree) {
            return self.manual(b, id, own);
        }
        let declared = i
            .attrs
            .outfeed_shape
            .as_deref()
            .cloned()
            .unwrap_or_else(|| data_shape.clone());
        let padded = local_shape(&declared, &tree);
        let (shapes, index) = distinct(pieces(&declared, &tree, n));
        let one_device = unique_device(i.sharding.as_ref()).filter(|_| n > 1);
        self.feed_check(i.name(), &tree, shapes.len() > 1 || one_device.is_some())?;
        let token = self.value(b.module(), i.operands()[1])?.local;
        if let Some(k) = one_device {
            let x = self.operand(b, id, 0, &maximal_tree(&data_shape, k))?;
            let out =
                self.on_one_device(b, i.name(), k, &[x, token], &i.shape, &mut |b, ops| {
                    clone_of(b, &i, ops, i.shape.clone())
                })?;
            self.set(id, out, own);
            return Ok(());
        }
        if has_leaf(&tree, &|s| matches!(s, Spec::Maximal(_))) {
            return Err(fail(format!(
                "%{}: an outfeed with some leaves on single devices and others not is not \
                 supported (XLA does not handle it either)",
                i.name()
            )));
        }
        let x = self.operand(b, id, 0, &tree)?;
        if shapes.len() == 1 && shapes[0] == padded {
            let out = self.clone_with(b, &i, &[x, token], i.shape.clone())?;
            b.module_mut().instr_mut(out).attrs.outfeed_shape = Some(Box::new(padded));
            self.set(id, out, own);
            return Ok(());
        }
        // One branch per distinct piece: slice the padding off, write the piece.
        let sel = self.feed_branch_index(b, &index)?;
        let operand = b.tuple(&[x, token])?;
        let param = b.module().instr(operand).shape.clone();
        let mut branches = Vec::with_capacity(shapes.len());
        for (k, piece) in shapes.iter().enumerate() {
            let c = self.feed_branch(
                b,
                &format!("{}.branch_{k}", i.name()),
                param.clone(),
                &mut |b, p| {
                    let d = b.get_tuple_element(p, 0)?;
                    let t = b.get_tuple_element(p, 1)?;
                    let d = slice_to(b, d, piece)?;
                    let w = clone_of(b, &i, &[d, t], i.shape.clone())?;
                    b.module_mut().instr_mut(w).attrs.outfeed_shape = Some(Box::new(piece.clone()));
                    Ok(w)
                },
            )?;
            branches.push(c);
        }
        let out = self.feed_conditional(b, sel, operand, &branches, i.shape.clone(), false)?;
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
