//! The sharding algebra the rules share: memoized transforms of interned shardings
//! (transpose, reshape, replicate or remove dimensions) and the plain helpers on
//! `Sharding`s (sub-tilings, moving tiles, merging an improvement).

use super::*;

impl<'m> Propagator<'m> {
    /// The number (see `Memo::dot_dims_id`) of the dimension maps of dot or convolution `id`,
    /// computed once per instruction; `None` without dimension numbers.
    pub(super) fn dims_of(&self, id: InstrId) -> Option<u32> {
        self.memo.instr_dot_dims(id.index(), || {
            let i = self.m.instr(id);
            let (l, r) = (*i.operands().first()?, *i.operands().get(1)?);
            match i.opcode() {
                Opcode::Dot => Some(dot_dims(
                    i.attrs.dot_dims.as_deref()?,
                    self.shape(l).rank(),
                    self.shape(r).rank(),
                )),
                Opcode::Convolution => Some(conv_dims(
                    i.attrs.conv_dims.as_deref()?,
                    i.attrs.window.as_deref(),
                    self.shape(l).dims(),
                    self.shape(r).dims(),
                    i.shape.dims(),
                    i.attrs.feature_group_count,
                    i.attrs.batch_group_count,
                )),
                _ => None,
            }
        })
    }

    /// `s.transpose(perm)`, normalized.
    pub(super) fn transposed(&self, s: &Sh, perm: SmallVec<[usize; 4]>) -> Option<Sh> {
        self.memo.algebra(s, Op::Transpose(perm), |s, op| {
            let Op::Transpose(perm) = op else {
                unreachable!()
            };
            s.transpose(perm).map(|t| t.normalized())
        })
    }

    /// `s.propagate_through_reshape(from, to)` across reshape `reshape`: from its operand to
    /// its result (`dir` 0) or back (1).
    pub(super) fn through_reshape(&self, s: &Sh, reshape: InstrId, dir: usize) -> Sh {
        let (a, b) = (
            self.shape(self.m.instr(reshape).operand(0)),
            self.shape(reshape),
        );
        let (from, to) = if dir == 0 {
            (a.dims(), b.dims())
        } else {
            (b.dims(), a.dims())
        };
        let key = Op::ThroughReshape(self.memo.reshape_id(reshape.index(), dir, from, to));
        self.memo
            .algebra(s, key, |s, _| Some(s.propagate_through_reshape(from, to)))
            .expect("reshape propagation always answers")
    }

    /// `s.replicate_on_dims(dims)`.
    pub(super) fn replicated_on(&self, s: &Sh, dims: &[usize]) -> Sh {
        let key = Op::ReplicateOnDims(idx(dims.iter().copied()));
        self.memo
            .algebra(s, key, |s, op| {
                let Op::ReplicateOnDims(dims) = op else {
                    unreachable!()
                };
                Some(s.replicate_on_dims(dims))
            })
            .expect("partial replication always answers")
    }

    /// `s.replicate_on_dims(dims).remove_dims(dims)`.
    pub(super) fn replicated_and_removed(&self, s: &Sh, dims: &[usize]) -> Option<Sh> {
        let key = Op::ReplicateAndRemove(idx(dims.iter().copied()));
        self.memo.algebra(s, key, |s, op| {
            let Op::ReplicateAndRemove(dims) = op else {
                unreachable!()
            };
            s.replicate_on_dims(dims).remove_dims(dims)
        })
    }

    /// `s.insert_dims(rank, map)`.
    pub(super) fn inserted_dims(
        &self,
        s: &Sh,
        rank: usize,
        map: SmallVec<[usize; 4]>,
    ) -> Option<Sh> {
        self.memo.algebra(s, Op::InsertDims(rank, map), |s, op| {
            let Op::InsertDims(rank, map) = op else {
                unreachable!()
            };
            s.insert_dims(*rank, map)
        })
    }

    /// [`spread`] on handles: `s` for every leaf of a tuple shape, `s` itself for an array.
    pub(super) fn spread_sh(&self, shape: &Shape, s: Sh) -> Sh {
        if shape.is_tuple() {
            self.memo.intern(spread(shape, s.to_sharding()))
        } else {
            s
        }
    }
}

/// XLA's `GetFirstTargetDimToMoveShardingTiles`: the first other dimension of `shape` whose
/// size the tiles of `source` times its own tiles divide (`source` must be tiled and not of
/// size 1).
pub(super) fn first_target_dim_to_move_tiles(
    shape: &Shape,
    s: &Sharding,
    source: usize,
) -> Option<usize> {
    let t = s.as_tiled()?;
    let dims = shape.dims();
    let tiles = t.tile_assignment.dims();
    if dims.len() < 2 || dims.get(source) == Some(&1) || tiles.get(source).is_none_or(|&n| n == 1) {
        return None;
    }
    (0..dims.len()).find(|&d| d != source && dims[d] % (tiles[source] * tiles[d]) == 0)
}

/// XLA's `IsSubTilingOrEqualSharding(shape, sub, of)`: every device's piece of `shape` under
/// `sub` lies inside its piece under `of` (manual shardings never are).
pub(super) fn is_sub_tiling(shape: &Shape, sub: &Sharding, of: &Sharding) -> bool {
    if sub.is_manual() || of.is_manual() {
        return false;
    }
    if of.is_tile_maximal() {
        return true;
    }
    if sub.is_tile_maximal() {
        return false;
    }
    let (Some(a), Some(b)) = (sub.as_tiled(), of.as_tiled()) else {
        return false;
    };
    if a.data_rank() != b.data_rank() || a.data_rank() != shape.rank() {
        return false;
    }
    let dims = shape.dims();
    a.tile_assignment.devices().into_iter().all(|d| {
        match (sub.device_bounds(dims, d), of.device_bounds(dims, d)) {
            (Some((s1, l1)), Some((s2, l2))) => {
                (0..dims.len()).all(|k| l1[k] <= s1[k] || (s1[k] >= s2[k] && l1[k] <= l2[k]))
            }
            _ => false,
        }
    })
}

pub(super) fn dims_attr(a: &Attrs) -> &[i64] {
    a.dimensions.as_deref().unwrap_or(&[])
}

/// A sharding that can stand on `shape`: tiled data rank equals the array rank, a tuple has
/// one leaf per leaf.
pub(super) fn fits(s: &Sharding, shape: &Shape) -> bool {
    match (&s.kind, shape) {
        (ShardingKind::Tuple(e), Shape::Tuple(_)) => e.len() == shape.leaf_count(),
        (ShardingKind::Tuple(_), _) => false,
        (_, Shape::Tuple(_)) => false,
        (ShardingKind::Tiled(t), _) => t.data_rank() == shape.rank(),
        _ => true,
    }
}

/// The sharding an array of rank `rank` sharded `old` takes when offered `new` (the array case
/// of `Propagator::improve` without aggressive resharding), or `None` when `new` is no
/// improvement.
pub(super) fn improved_array_sharding(
    old: &Sharding,
    new: Sharding,
    rank: usize,
    mc: bool,
) -> Option<Sharding> {
    let tiles = new.num_tiles();
    let mut new = new;
    if !merge_sharding(old, &mut new, mc) {
        return None;
    }
    if !old.is_tile_maximal() && new.num_tiles() == tiles {
        let (ot, nt) = (old.as_tiled()?, new.as_tiled()?);
        let mut diff = Vec::new();
        for d in 0..rank {
            let (a, b) = (ot.tile_assignment.dims()[d], nt.tile_assignment.dims()[d]);
            if a == b {
                continue;
            }
            if a != 1 {
                return None;
            }
            diff.push(d);
        }
        if !new.replicate_on_dims(&diff).same_as(old) {
            return None;
        }
    }
    (&new != old).then_some(new)
}

/// XLA's `FindCommonSharding`: the merge of all `shardings` when each refines the merge so
/// far, else the first one; `None` for none.
pub(super) fn common_sharding(shardings: &[Sharding]) -> Option<Sharding> {
    let first = shardings.first()?;
    let mut common = first.clone();
    for s in &shardings[1..] {
        let min = common.num_tiles();
        if !merge_if_compatible(s, min, &mut common) {
            return Some(first.clone());
        }
    }
    Some(common)
}
