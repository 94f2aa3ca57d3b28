//! Sort and the TopK custom-call along a dimension that must be whole on each device, and the
//! ops that work on trailing dimensions with leading batch dimensions (fft, cholesky,
//! triangular-solve).
//!
//! A sort needs its dimension whole. When the operand splits it, the split is moved onto
//! another dimension if the planner can do that cheaper than gathering the sort dimension
//! (an all-to-all, XLA's "sort after an all-to-all"); otherwise the sort dimension is
//! gathered. Either way the sort is local and the result is resharded to its own sharding.

use super::indexed::tiling_of as tiling_leaf;
use super::*;

impl Engine<'_> {
    /// The tiling `t` with dimension `d`'s split moved to dimension `e` (not split in `t`).
    fn move_split(t: &Tiling, d: usize, e: usize) -> Tiling {
        let mut tiles = t.tiles.clone();
        tiles[e] = tiles[d];
        tiles[d] = 1;
        let idx: Vec<Vec<i64>> = t
            .tile_indices()
            .into_iter()
            .map(|mut i| {
                i[e] = i[d];
                i[d] = 0;
                i
            })
            .collect();
        Tiling::from_tile_indices(tiles, t.repl, &idx)
    }

    /// The cheapest tiling of an array of `dims` (held as `have`, wanted as `own` afterwards)
    /// with the dimensions `whole` not split: the split moved to a free dimension, or dropped.
    fn unsplit_cheapest(
        &self,
        have: &Tiling,
        own: &Tiling,
        whole: &[usize],
        dims: &[i64],
        ty: ElementType,
    ) -> Tiling {
        let split: Vec<usize> = whole
            .iter()
            .copied()
            .filter(|&d| have.tiles[d] > 1)
            .collect();
        if split.is_empty() {
            return have.clone();
        }
        let mut cands = vec![have.replicate_dims(&split)];
        if split.len() == 1 {
            let d = split[0];
            for (e, &size) in dims.iter().enumerate() {
                if !whole.contains(&e) && have.tiles[e] == 1 && size >= have.tiles[d] {
                    cands.push(Self::move_split(have, d, e));
                }
            }
        }
        let mut best: Option<(i64, Tiling)> = None;
        for c in cands {
            let cost = self.move_bytes(have, &c, dims, ty) + self.move_bytes(&c, own, dims, ty);
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, c));
            }
        }
        best.expect("one candidate").1
    }

    /// Ops whose operands and results all have one rank and must be whole along `whole`:
    /// every operand and result takes one tiling with those dimensions unsplit, the op runs
    /// locally, the result is resharded. Anything else takes the default.
    pub(super) fn along_whole_dims(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
        whole: &[usize],
    ) -> Result<()> {
        let i = b.module().instr(id).clone();
        let first = i.operands()[0];
        let shape = self.global(b.module(), first);
        let v = self.value(b.module(), first)?;
        let own_leaf = match &own {
            Tree::Leaf(_) => tiling_leaf(&own),
            Tree::Tuple(e) => e.first().and_then(tiling_leaf),
        };
        let (Some(have), Some(want)) = (tiling_leaf(&v.tree), own_leaf) else {
            // Everything on one device (operands and results): that device computes it as it is.
            if let Some(dev) = maximal_device(&own) {
                let all_there = i.operands().iter().all(|&o| {
                    self.values
                        .get(&o)
                        .is_some_and(|x| maximal_device(&x.tree) == Some(dev))
                });
                if all_there {
                    let ops: Vec<InstrId> =
                        i.operands().iter().map(|o| self.values[o].local).collect();
                    let out = self.clone_with(b, &i, &ops, i.shape.clone())?;
                    self.set(id, out, own);
                    return Ok(());
                }
            }
            return self.default(b, id, own);
        };
        let rank = shape.rank();
        let same_rank = i
            .operands()
            .iter()
            .all(|&o| self.global(b.module(), o).rank() == rank)
            && leaves_of(&i.shape).iter().all(|s| s.rank() == rank);
        if !same_rank || whole.iter().any(|&d| d >= rank) {
            return self.default(b, id, own);
        }
        let t = self.unsplit_cheapest(have, want, whole, shape.dims(), shape.element_type());
        let leaf = Tree::Leaf(Spec::Tiled(t));
        let mut ops = Vec::with_capacity(i.operands().len());
        for k in 0..i.operands().len() {
            ops.push(self.operand(b, id, k, &leaf)?);
        }
        let tree = match &i.shape {
            Shape::Tuple(e) => Tree::Tuple(vec![leaf.clone(); e.len()]),
            _ => leaf,
        };
        let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &tree))?;
        let v = Value { local: out, tree };
        let local = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, local, own);
        Ok(())
    }

    pub(super) fn sort(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let d = i
            .attrs
            .dimensions
            .as_deref()
            .and_then(|d| d.first().copied())
            .ok_or_else(|| fail(format!("%{}: a sort needs dimensions={{d}}", i.name())))?;
        if self.sort_top_k(b, id, &own, d as usize)? {
            return Ok(());
        }
        self.along_whole_dims(b, id, own, &[d as usize])
    }

    /// A sort of values and their positions (an iota along the sort dimension) whose results
    /// are only read through slices of their first k positions is a top-k (XLA's
    /// `PartitionSortInTopK`). Along a split sort dimension each device sorts its own piece
    /// (the positions are global already), keeps its first k, the candidates are
    /// all-gathered along the sort dimension only, and a second stable sort orders them. The
    /// sort's value is that result padded with zeros to the full dimension: the slices never
    /// read past k. `false` (nothing emitted) when the pattern does not hold.
    fn sort_top_k(&mut self, b: &mut Builder, id: InstrId, own: &Tree, d: usize) -> Result<bool> {
        let i = b.module().instr(id).clone();
        let m = b.module();
        let [vals, pos] = i.operands() else {
            return Ok(false);
        };
        let (vals, pos) = (*vals, *pos);
        let Some(cmp) = i.to_apply() else {
            return Ok(false);
        };
        let pos_instr = m.instr(pos);
        if pos_instr.opcode() != Opcode::Iota
            || pos_instr.attrs.iota_dimension != d as i64
            || pos_instr.shape.element_type() != ElementType::S32
        {
            return Ok(false);
        }
        let xs = self.global(m, vals);
        let n = xs.dims()[d];
        // Every user a get-tuple-element read only by slices [0:k] of the sort dimension
        // that keep the other dimensions whole.
        let mut k = 0;
        let users = m.users(id).to_vec();
        if users.is_empty() {
            return Ok(false);
        }
        for u in users {
            let ui = m.instr(u);
            if ui.opcode() != Opcode::GetTupleElement || m.users(u).is_empty() {
                return Ok(false);
            }
            for &s in m.users(u) {
                let si = m.instr(s);
                let Some(dims) = si
                    .attrs
                    .slice
                    .as_deref()
                    .filter(|_| si.opcode() == Opcode::Slice)
                else {
                    return Ok(false);
                };
                for (e, sd) in dims.iter().enumerate() {
                    let whole = sd.start == 0 && sd.stride == 1 && sd.limit == xs.dims()[e];
                    if e == d {
                        if sd.start != 0 || sd.stride != 1 {
                            return Ok(false);
                        }
                        k = k.max(sd.limit);
                    } else if !whole {
                        return Ok(false);
                    }
                }
            }
        }
        let v = self.value(b.module(), vals)?;
        let Some(t) = tiling_leaf(&v.tree).cloned() else {
            return Ok(false);
        };
        let pieces = t.tiles[d];
        if pieces <= 1 || n % pieces != 0 || k < 1 || k > n / pieces || k * pieces >= n {
            return Ok(false);
        }
        let leaf = Tree::Leaf(Spec::Tiled(t.clone()));
        let lv = self.operand(b, id, 0, &leaf)?;
        let lp = self.operand(b, id, 1, &leaf)?;
        let tree = Tree::Tuple(vec![leaf.clone(), leaf]);
        let first = self.clone_with(b, &i, &[lv, lp], local_shape(&i.shape, &tree))?;
        let mut local = t.shard_dims(xs.dims());
        let zeros = vec![0i64; local.len()];
        let ones = vec![1i64; local.len()];
        local[d] = k;
        let mut cand = xs.dims().to_vec();
        cand[d] = k * pieces;
        let whole = t.replicate_dims(&[d]);
        let types = [xs.element_type(), ElementType::S32];
        let mut gathered = Vec::with_capacity(2);
        for (e, ty) in types.iter().enumerate() {
            let g = b.get_tuple_element(first, e as i64)?;
            let top = b.slice(g, &zeros, &local, &ones)?;
            let part = Value {
                local: top,
                tree: Tree::Leaf(Spec::Tiled(t.clone())),
            };
            let to = Tree::Leaf(Spec::Tiled(whole.clone()));
            gathered.push(self.reshard(b, &part, &Shape::array(*ty, &cand), &to)?);
        }
        let sorted = stable_sort(b, &gathered, d, cmp)?;
        let padding = PaddingDim {
            high: n - k * pieces,
            ..PaddingDim::default()
        };
        let mut parts = Vec::with_capacity(2);
        for (e, ty) in types.iter().enumerate() {
            let g = b.get_tuple_element(sorted, e as i64)?;
            let zero = b.scalar(*ty, 0.0)?;
            parts.push(b.pad_dim(g, zero, d, padding)?);
        }
        self.set_top_k_pair(b, id, &parts, whole, own)?;
        Ok(true)
    }

    /// The (values, positions) pair of a two-stage top-k, each held as `whole`, as the value
    /// of `id` resharded to `own`.
    fn set_top_k_pair(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        parts: &[InstrId],
        whole: Tiling,
        own: &Tree,
    ) -> Result<()> {
        let tuple = b.tuple(parts)?;
        let leaf = Tree::Leaf(Spec::Tiled(whole));
        let v = Value {
            local: tuple,
            tree: Tree::Tuple(vec![leaf.clone(), leaf]),
        };
        let shape = b.module().instr(id).shape.clone();
        let local = self.reshard(b, &v, &shape, own)?;
        self.set(id, local, own.clone());
        Ok(())
    }

    /// The `topk` instruction and the `TopK` custom-call: the last dimension whole, or, for a
    /// custom-call whose operand splits that dimension evenly in pieces of at least k, XLA's
    /// two-stage top-k ([`Engine::top_k_split`]).
    pub(super) fn top_k(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let rank = self
            .global(b.module(), b.module().instr(id).operands()[0])
            .rank();
        if rank == 0 {
            return self.default(b, id, own);
        }
        if self.top_k_split(b, id, &own)? {
            return Ok(());
        }
        self.along_whole_dims(b, id, own, &[rank - 1])
    }

    /// Top-k along a split last dimension: each device takes the top k of its own piece (its
    /// positions moved by the piece's start), the k candidates of every piece are all-gathered
    /// along that dimension only, and a stable sort of values and positions with the TopK's
    /// comparator puts the best first; the first k are the result. The candidates keep the
    /// pieces' order and each piece's own order, so ties resolve as in one stable sort of the
    /// whole row. `false` (nothing emitted) when the shape does not fit: a custom-call with a
    /// four-parameter comparator, an even split of the last dimension, k at most a piece.
    fn top_k_split(&mut self, b: &mut Builder, id: InstrId, own: &Tree) -> Result<bool> {
        let i = b.module().instr(id).clone();
        if i.opcode() != Opcode::CustomCall || i.operands().len() != 1 {
            return Ok(false);
        }
        let Some(cmp) = i.called.first().copied().or(i.to_apply()) else {
            return Ok(false);
        };
        if b.module().comp(cmp).num_parameters() != 4 {
            return Ok(false);
        }
        let [vals, idxs] = i.shape.tuple_elements() else {
            return Ok(false);
        };
        let (vals, idxs) = (vals.clone(), idxs.clone());
        let x = i.operands()[0];
        let xs = self.global(b.module(), x);
        let rank = xs.rank();
        let d = rank - 1;
        let n = xs.dims()[d];
        let k = vals.dims().get(d).copied().unwrap_or(0);
        let v = self.value(b.module(), x)?;
        let Some(t) = tiling_leaf(&v.tree).cloned() else {
            return Ok(false);
        };
        let pieces = t.tiles[d];
        if pieces <= 1
            || n % pieces != 0
            || k < 1
            || k > n / pieces
            || idxs.element_type() != ElementType::S32
            || vals.rank() != rank
            || vals.element_type() != xs.element_type()
        {
            return Ok(false);
        }
        let local_x = self.operand(b, id, 0, &Tree::Leaf(Spec::Tiled(t.clone())))?;
        let mut local = t.shard_dims(xs.dims());
        local[d] = k;
        let ty = vals.element_type();
        let shape = Shape::tuple(vec![
            Shape::array(ty, &local),
            Shape::array(ElementType::S32, &local),
        ]);
        let first = self.clone_with(b, &i, &[local_x], shape)?;
        let lv = b.get_tuple_element(first, 0)?;
        let li = b.get_tuple_element(first, 1)?;
        // Positions in the piece become positions in the row.
        let starts: Vec<i64> = t.starts(xs.dims()).iter().map(|s| s[d]).collect();
        let start = self.table(b, &starts)?;
        let start = broadcast_scalar(b, start, &local)?;
        let li = b.binary(Opcode::Add, li, start)?;
        // The k candidates of every piece, side by side on every device of the row.
        let mut cand = xs.dims().to_vec();
        cand[d] = k * pieces;
        let whole = t.replicate_dims(&[d]);
        // Only the values read (every user takes element 0): the positions stay home and the
        // second sort orders the values with placeholder positions (equal values are equal
        // whatever order ties take).
        let values_only = {
            let m = b.module();
            let users = m.users(id);
            !users.is_empty()
                && users.iter().all(|&u| {
                    let ui = m.instr(u);
                    ui.opcode() == Opcode::GetTupleElement && ui.attrs.tuple_index == 0
                })
        };
        let mut gathered = Vec::with_capacity(2);
        for (local, ty) in [(lv, ty), (li, ElementType::S32)] {
            if values_only && ty == ElementType::S32 && !gathered.is_empty() {
                let shape = Shape::array(ElementType::S32, &whole.shard_dims(&cand));
                gathered.push(b.iota(shape, d as i64)?);
                continue;
            }
            let part = Value {
                local,
                tree: Tree::Leaf(Spec::Tiled(t.clone())),
            };
            let to = Tree::Leaf(Spec::Tiled(whole.clone()));
            gathered.push(self.reshard(b, &part, &Shape::array(ty, &cand), &to)?);
        }
        let sorted = stable_sort(b, &gathered, d, cmp)?;
        let mut out_local = whole.shard_dims(vals.dims());
        out_local[d] = k;
        let zeros = vec![0i64; rank];
        let ones = vec![1i64; rank];
        let mut parts = Vec::with_capacity(2);
        for e in 0..2 {
            let g = b.get_tuple_element(sorted, e)?;
            parts.push(b.slice(g, &zeros, &out_local, &ones)?);
        }
        self.set_top_k_pair(b, id, &parts, whole, own)?;
        Ok(true)
    }

    /// fft (the trailing `fft_length` dimensions), cholesky (the trailing two),
    /// triangular-solve (the trailing two of both operands): batch dimensions stay split.
    pub(super) fn batched_linear(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let rank = i.shape.rank();
        let trailing = match i.opcode() {
            Opcode::Fft => i.attrs.fft_length.as_ref().map_or(rank, |l| l.len()),
            _ => 2,
        };
        if trailing > rank {
            return self.default(b, id, own);
        }
        let whole: Vec<usize> = (rank - trailing..rank).collect();
        // rfft/irfft change the last size: only batch dimensions stay split, as for the others.
        self.along_whole_dims(b, id, own, &whole)
    }
}

/// `sort(xs), dimensions={d}, is_stable=true, to_apply=cmp`: the second stage of a top-k.
fn stable_sort(b: &mut Builder, xs: &[InstrId], d: usize, cmp: CompId) -> Result<InstrId> {
    let a = tessera_hlo::attrs::Attrs {
        dimensions: Some(vec![d as i64]),
        is_stable: true,
        ..Default::default()
    };
    Ok(b.op(Opcode::Sort, xs, a, &[cmp], None)?)
}

/// The device of a value held whole by one device (every leaf on the same one).
fn maximal_device(t: &Tree) -> Option<i64> {
    match t {
        Tree::Leaf(Spec::Maximal(d)) => Some(*d),
        Tree::Tuple(e) => {
            let first = maximal_device(e.first()?)?;
            e.iter()
                .all(|x| maximal_device(x) == Some(first))
                .then_some(first)
        }
        _ => None,
    }
}

fn leaves_of(s: &Shape) -> Vec<&Shape> {
    match s {
        Shape::Tuple(e) => e.iter().flat_map(leaves_of).collect(),
        _ => vec![s],
    }
}
