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
        self.along_whole_dims(b, id, own, &[d as usize])
    }

    /// The `topk` instruction and the `TopK` custom-call: the last dimension whole.
    pub(super) fn top_k(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let rank = self
            .global(b.module(), b.module().instr(id).operands()[0])
            .rank();
        if rank == 0 {
            return self.default(b, id, own);
        }
        self.along_whole_dims(b, id, own, &[rank - 1])
    }

    /// fft (the trailing `fft_length` dimensions), cholesky (the trailing two),
    /// triangular-solve (the trailing two of both operands): batch dimensions stay split.
    pub(super) fn batched_linear(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let rank = i.shape.rank();
        let trailing = match i.opcode {
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

fn leaves_of(s: &Shape) -> Vec<&Shape> {
    match s {
        Shape::Tuple(e) => e.iter().flat_map(leaves_of).collect(),
        _ => vec![s],
    }
}
