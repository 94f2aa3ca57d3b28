//! The sharding algebra: every transformation of a sharding, shared by sharding propagation
//! and the SPMD partitioner, with the semantics of XLA's `hlo_sharding_util` (partial
//! replication on dimensions, transposes, transposes that collapse dimensions, reshape through
//! dimension splits and merges, merging two partially replicated shardings, "more specific
//! than"). What a sharding means for a shape (each device's piece) is in [`crate::tiling`].
//!
//! Shardings made here are *normalized* the way XLA's `HloSharding::Subgroup` constructor
//! normalizes them (size-1 subgroup dimensions dropped, subgroup dimensions of one type merged,
//! manual before replicated, a tiling with one data tile and only replicated subgroups is
//! `{replicated}`), and their tile assignment is in *canonical spelling*: the iota form
//! `<=[..]T(..)` with the fewest reshape dimensions whenever the devices follow one, an explicit
//! list otherwise. Two normalized shardings mean the same thing iff they are `==` (ignoring
//! metadata). Device lists are materialised only for small loops over the tiles (merge,
//! reverse, the canonical spelling); the tile count is the device count, which is small.
//!
//! Built on [`crate::tiling`]'s geometry.

use smallvec::SmallVec;

use crate::sharding::{Sharding, ShardingKind, SubgroupType, TileAssignment, TiledSharding};

type Dims = crate::sharding::TileDims;

impl TileAssignment {
    /// The canonical spelling of the same devices: an iota with merged reshape dimensions and
    /// no identity transpose when the devices follow one, else the explicit list. An iota is
    /// brought to its normal form without listing its devices.
    pub fn canonical(&self) -> TileAssignment {
        let n = self.num_devices();
        if n <= 1 {
            return TileAssignment::iota(self.dims());
        }
        if let TileAssignment::Iota {
            dims,
            reshape_dims,
            transpose_perm,
        } = self
        {
            if let Some((reshape_dims, transpose_perm)) =
                crate::tiling::iota_normal_form(n, reshape_dims, transpose_perm)
            {
                return TileAssignment::Iota {
                    dims: dims.clone(),
                    reshape_dims,
                    transpose_perm,
                };
            }
        }
        self.canonical_from_devices()
    }

    /// [`canonical`](Self::canonical) by reading the device list (the only way for an explicit
    /// list).
    fn canonical_from_devices(&self) -> TileAssignment {
        let dims: Dims = self.dims().iter().copied().collect();
        let n = self.num_devices();
        if n <= 1 {
            return TileAssignment::iota(&dims);
        }
        let devices = self.devices();
        match iota_of(&devices) {
            Some((reshape, perm)) => {
                if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
                    TileAssignment::iota(&dims)
                } else {
                    TileAssignment::Iota {
                        dims,
                        reshape_dims: reshape.into_iter().collect(),
                        transpose_perm: perm.into_iter().collect(),
                    }
                }
            }
            None => TileAssignment::Explicit { dims, devices },
        }
    }
}

/// Finds `(reshape_dims, transpose_perm)` with `devices == iota(reshape_dims).transpose(perm)`
/// flattened, merging every pair of dimensions that can be merged. Reads the list as a
/// mixed-radix number whose digits each step one device stride.
fn iota_of(devices: &[i64]) -> Option<(Dims, Dims)> {
    let n = devices.len();
    if devices[0] != 0 {
        return None;
    }
    // Digits from the minor end of the position: (radix, stride in device ids).
    let mut digits: Vec<(i64, i64)> = Vec::new();
    let mut p = 1usize;
    while p < n {
        let s = devices[p];
        if s <= 0 {
            return None;
        }
        let mut r = 1usize;
        while r * p < n && devices[r * p] == r as i64 * s {
            r += 1;
        }
        if !(n / p).is_multiple_of(r) {
            return None;
        }
        digits.push((r as i64, s));
        p *= r;
    }
    // Every position must follow the digits.
    for (l, &d) in devices.iter().enumerate() {
        let mut rest = l as i64;
        let mut v = 0;
        for &(r, s) in &digits {
            v += (rest % r) * s;
            rest /= r;
        }
        if v != d {
            return None;
        }
    }
    // The strides must be those of an iota over some dims: sorted ascending, each the product
    // of the radices below it.
    let mut by_stride: Vec<usize> = (0..digits.len()).collect();
    by_stride.sort_by_key(|&k| digits[k].1);
    let mut expect = 1;
    for &k in &by_stride {
        if digits[k].1 != expect {
            return None;
        }
        expect *= digits[k].0;
    }
    // reshape dims: major (largest stride) first.
    let reshape: Dims = by_stride.iter().rev().map(|&k| digits[k].0).collect();
    let pos_in_reshape = |k: usize| -> i64 {
        (by_stride.len() - 1 - by_stride.iter().position(|&x| x == k).unwrap()) as i64
    };
    // The transposed array's dims are the digits, major first.
    let perm: Dims = (0..digits.len()).rev().map(pos_in_reshape).collect();
    Some((reshape, perm))
}

fn types_of(t: &TiledSharding) -> Vec<SubgroupType> {
    t.subgroup_types()
}

impl Sharding {
    /// A tiled sharding from a tile assignment whose trailing `types.len()` dimensions are
    /// subgroups of those types, normalized as XLA's `HloSharding::Subgroup`.
    pub fn subgroup(ta: TileAssignment, types: &[SubgroupType]) -> Sharding {
        let dims: Dims = ta.dims().iter().copied().collect();
        let r = dims.len() - types.len();
        let data_tiles: i64 = dims[..r].iter().product();
        // Group subgroup dims by type (manual first, replicated last), dropping size-1 dims.
        let order = [
            SubgroupType::Manual,
            SubgroupType::Maximal,
            SubgroupType::Unreduced,
            SubgroupType::Replicated,
        ];
        let mut perm: Vec<usize> = (0..r).collect();
        let mut new_dims: Dims = dims[..r].iter().copied().collect();
        let mut new_types: Vec<SubgroupType> = Vec::new();
        for ty in order {
            let mut prod = 1;
            let mut any = false;
            for (k, t) in types.iter().enumerate() {
                if *t == ty {
                    perm.push(r + k);
                    prod *= dims[r + k];
                    any = true;
                }
            }
            if any && prod > 1 {
                new_dims.push(prod);
                new_types.push(ty);
            }
        }
        if data_tiles == 1 && !new_types.is_empty() && new_types.iter().all(|t| *t == new_types[0])
        {
            match new_types[0] {
                SubgroupType::Replicated => return Sharding::replicated(),
                SubgroupType::Manual => return Sharding::manual(),
                _ => {}
            }
        }
        if new_dims.is_empty() {
            // A one-device tiling of a scalar (what dropping the last dimension of
            // `{devices=[1]0}` leaves): the text has no spelling for an empty tile
            // assignment, and one tile is the whole value, so it is replicated.
            return Sharding::replicated();
        }
        if data_tiles == 1 && new_types.is_empty() && ta.num_devices() > 1 {
            // Unreachable for valid inputs: all devices must sit somewhere.
            return Sharding::replicated();
        }
        let identity = perm.iter().enumerate().all(|(i, &p)| p == i);
        let moved = if identity { ta } else { ta.transpose(&perm) };
        let ta = moved
            .reshape(&new_dims)
            .expect("subgroup merge keeps the device count")
            .canonical();
        let replicate_last = new_types == [SubgroupType::Replicated];
        Sharding::new(ShardingKind::Tiled(TiledSharding {
            tile_assignment: ta,
            replicate_on_last_tile_dim: replicate_last,
            last_tile_dims: if replicate_last {
                Vec::new()
            } else {
                new_types
            },
        }))
    }

    /// This sharding normalized and canonically spelled (see the module docs); metadata and
    /// shard groups are kept.
    pub fn normalized(&self) -> Sharding {
        let mut out = match &self.kind {
            ShardingKind::Tiled(t) => Sharding::subgroup(t.tile_assignment.clone(), &types_of(t)),
            ShardingKind::Tuple(e) => Sharding::tuple(e.iter().map(Sharding::normalized).collect()),
            _ => Sharding::new(self.kind.clone()),
        };
        out.metadata = self.metadata.clone();
        out.shard_group = self.shard_group;
        out
    }

    /// True if the two mean the same layout (metadata ignored).
    pub fn same_as(&self, other: &Sharding) -> bool {
        self.normalized().kind == other.normalized().kind
    }

    /// XLA's `IsTileMaximal`: replicated or on one device (a tuple: every leaf is). Manual,
    /// unknown and unreduced shardings are not tile-maximal in XLA (its `maximal_` flag is set
    /// only for replicated and single-device shardings).
    #[inline]
    pub fn is_tile_maximal(&self) -> bool {
        match &self.kind {
            ShardingKind::Tuple(e) => e.iter().all(Sharding::is_tile_maximal),
            ShardingKind::Replicated | ShardingKind::Maximal(_) => true,
            ShardingKind::Named(n) => n.is_replicated() || n.is_single_device(),
            _ => false,
        }
    }

    /// Number of data tiles (1 for tile-maximal shardings).
    #[inline]
    pub fn num_tiles(&self) -> i64 {
        match &self.kind {
            ShardingKind::Tiled(t) => t.data_tile_dims().iter().product(),
            _ => 1,
        }
    }

    /// XLA's `IsSpatiallyPartitioned`: not tile-maximal, or replicated (a tuple: any leaf is).
    /// As in XLA this holds for manual shardings too: they may reach an instruction that has
    /// no sharding yet.
    #[inline]
    pub fn is_spatially_partitioned(&self) -> bool {
        match &self.kind {
            ShardingKind::Tuple(e) => e.iter().any(Sharding::is_spatially_partitioned),
            _ => !self.is_tile_maximal() || self.is_replicated(),
        }
    }

    /// True for a tiled sharding with a replicated subgroup.
    #[inline]
    pub fn has_partial_replication(&self) -> bool {
        self.as_tiled().is_some_and(|t| {
            t.replicate_on_last_tile_dim || t.last_tile_dims.contains(&SubgroupType::Replicated)
        })
    }

    /// True for a tiled sharding with a manual subgroup.
    #[inline]
    pub fn is_manual_subgroup(&self) -> bool {
        self.as_tiled()
            .is_some_and(|t| t.last_tile_dims.contains(&SubgroupType::Manual))
    }

    /// Index (in the tile assignment) of the manual subgroup dimension.
    pub fn subgroup_manual_dim(&self) -> Option<usize> {
        let t = self.as_tiled()?;
        let r = t.data_rank();
        t.subgroup_types()
            .iter()
            .position(|s| *s == SubgroupType::Manual)
            .map(|k| r + k)
    }

    /// Number of data dimensions of a tiled sharding.
    pub fn tiled_data_rank(&self) -> usize {
        self.as_tiled().map_or(0, TiledSharding::data_rank)
    }

    /// XLA's `IsShardingMoreSpecific(self, other)`: a manual sharding over a tile-maximal one;
    /// else (neither manual) more data tiles than a tiled `other`, any tiling over a maximal
    /// `other`, anything but replication over a replicated `other`; tuples: no leaf worse and
    /// one better.
    pub fn more_specific_than(&self, other: &Sharding) -> bool {
        match (&self.kind, &other.kind) {
            (ShardingKind::Tuple(a), ShardingKind::Tuple(b)) => {
                if a.len() != b.len() {
                    return false;
                }
                let mut better = false;
                for (x, y) in a.iter().zip(b) {
                    if y.more_specific_than(x) {
                        return false;
                    }
                    better |= x.more_specific_than(y);
                }
                better
            }
            (ShardingKind::Tuple(_), _) | (_, ShardingKind::Tuple(_)) => false,
            _ => {
                if self.is_manual() && other.is_tile_maximal() {
                    return true;
                }
                if self.is_manual() || other.is_manual() {
                    return false;
                }
                if !other.is_tile_maximal() {
                    self.num_tiles() > other.num_tiles()
                } else if other.is_replicated() {
                    !self.is_replicated()
                } else {
                    !self.is_tile_maximal()
                }
            }
        }
    }

    /// XLA's `IsShardingStrictlyBetter(self, other)`: a manual sharding replaces a
    /// tile-maximal one whatever else holds (tuples: some leaf does so and no leaf the other
    /// way round).
    pub fn strictly_better_than(&self, other: &Sharding) -> bool {
        fn mask(a: &Sharding, b: &Sharding) -> u8 {
            match (&a.kind, &b.kind) {
                (ShardingKind::Tuple(x), ShardingKind::Tuple(y)) => {
                    x.iter().zip(y).fold(0, |m, (p, q)| m | mask(p, q))
                }
                (ShardingKind::Tuple(_), _) | (_, ShardingKind::Tuple(_)) => 0,
                _ => {
                    let mut m = 0;
                    if a.is_manual() && b.is_tile_maximal() {
                        m |= 1;
                    }
                    if b.is_manual() && a.is_tile_maximal() {
                        m |= 2;
                    }
                    m
                }
            }
        }
        if self.is_tuple() != other.is_tuple() {
            return false;
        }
        mask(self, other) == 1
    }

    /// XLA's `PartiallyReplicateTiledShardingOnDims`: the tiles of data dimensions `dims` move
    /// into a replicated subgroup (ahead of manual subgroups).
    pub fn replicate_on_dims(&self, dims: &[usize]) -> Sharding {
        let Some(t) = self.as_tiled() else {
            return self.clone();
        };
        let r = t.data_rank();
        let tdims = t.tile_assignment.dims();
        let valid: SmallVec<[usize; 4]> = dims.iter().copied().filter(|&d| d < r).collect();
        let group: i64 = valid.iter().map(|&d| tdims[d]).product();
        if group == 1 {
            return self.clone();
        }
        let types = t.subgroup_types();
        if group == self.num_tiles() && types.is_empty() {
            return with_meta(Sharding::replicated(), self);
        }
        // Kept data dims, then the replicated ones, then the subgroup dims.
        let mut perm: Vec<usize> = (0..r).filter(|d| !valid.contains(d)).collect();
        perm.extend(valid.iter().copied());
        perm.extend(r..tdims.len());
        let moved = t.tile_assignment.transpose(&perm);
        let mut new_dims: Dims = (0..r)
            .map(|d| if valid.contains(&d) { 1 } else { tdims[d] })
            .collect();
        new_dims.push(group);
        new_dims.extend(tdims[r..].iter().copied());
        let ta = moved.reshape(&new_dims).expect("same device count");
        let mut new_types = vec![SubgroupType::Replicated];
        new_types.extend(types);
        with_meta(Sharding::subgroup(ta, &new_types), self)
    }

    /// Replicates every data dimension except `keep`.
    pub fn replicate_all_except(&self, keep: &[usize]) -> Sharding {
        let r = self.tiled_data_rank();
        let dims: Vec<usize> = (0..r).filter(|d| !keep.contains(d)).collect();
        self.replicate_on_dims(&dims)
    }

    /// XLA's `ReplicateAllDataDims`: replicated, keeping manual subgroups (reshaped to
    /// `data_rank` data dimensions when given).
    pub fn replicate_all_data_dims(&self, data_rank: Option<usize>) -> Sharding {
        if self.is_manual() {
            return self.clone();
        }
        if self.is_manual_subgroup() {
            let p = self.replicate_all_except(&[]);
            if let (Some(rank), Some(t)) = (data_rank, p.as_tiled()) {
                let sub = &t.tile_assignment.dims()[t.data_rank()..];
                let mut dims: Dims = SmallVec::from_elem(1, rank);
                dims.extend(sub.iter().copied());
                let ta = t.tile_assignment.reshape(&dims).expect("same devices");
                return with_meta(Sharding::subgroup(ta, &t.subgroup_types()), self);
            }
            return p;
        }
        with_meta(Sharding::replicated(), self)
    }

    /// XLA's `RemoveShapeDimensions`: drops data dimensions `dims` (which must have one tile).
    pub fn remove_dims(&self, dims: &[usize]) -> Option<Sharding> {
        let t = match self.as_tiled() {
            Some(t) if !dims.is_empty() => t,
            _ => return Some(self.clone()),
        };
        let tdims = t.tile_assignment.dims();
        if dims.iter().any(|&d| d >= t.data_rank() || tdims[d] != 1) {
            return None;
        }
        let new_dims: Dims = (0..tdims.len())
            .filter(|d| !dims.contains(d))
            .map(|d| tdims[d])
            .collect();
        let ta = t.tile_assignment.reshape(&new_dims)?;
        Some(with_meta(Sharding::subgroup(ta, &t.subgroup_types()), self))
    }

    /// A sharding of rank `out_rank` whose dimension `map[i]` gets the tiles of data dimension
    /// `i` (other dimensions one tile); subgroups are kept. Used for broadcast (forward) and
    /// for reduce/gather back-mapping. `map` must be increasing.
    pub fn insert_dims(&self, out_rank: usize, map: &[usize]) -> Option<Sharding> {
        let Some(t) = self.as_tiled() else {
            return Some(self.clone());
        };
        if map.len() != t.data_rank() || map.windows(2).any(|w| w[0] >= w[1]) {
            return None;
        }
        let tdims = t.tile_assignment.dims();
        let mut dims: Dims = SmallVec::from_elem(1, out_rank);
        for (i, &o) in map.iter().enumerate() {
            *dims.get_mut(o)? = tdims[i];
        }
        dims.extend(tdims[t.data_rank()..].iter().copied());
        let ta = t.tile_assignment.reshape(&dims)?;
        Some(with_meta(Sharding::subgroup(ta, &t.subgroup_types()), self))
    }

    /// The sharding of `transpose(x, perm)` given x's sharding: data tile dimensions permute,
    /// subgroup dimensions stay last.
    pub fn transpose(&self, perm: &[usize]) -> Option<Sharding> {
        let t = match &self.kind {
            ShardingKind::Tiled(t) => t,
            ShardingKind::Tuple(_) => return None,
            _ => return Some(self.clone()),
        };
        if perm.len() != t.data_rank() {
            return None;
        }
        let mut full: Vec<usize> = perm.to_vec();
        full.extend(t.data_rank()..t.tile_assignment.rank());
        let mut out = self.clone();
        if let ShardingKind::Tiled(nt) = &mut out.kind {
            nt.tile_assignment = t.tile_assignment.transpose(&full);
        }
        Some(out)
    }

    /// XLA's `TransposeShardingWithCollapsedDims`: data dimension `i` of this sharding becomes
    /// target dimension `src_to_tgt[i]` (-1: dropped, must have one tile); target dimensions
    /// with `tgt_to_src[j] == -1` are new, with one tile. Subgroups stay last.
    pub fn transpose_collapsed(&self, src_to_tgt: &[i64], tgt_to_src: &[i64]) -> Option<Sharding> {
        let Some(t) = self.as_tiled() else {
            return Some(self.clone());
        };
        let r = t.data_rank();
        if src_to_tgt.len() != r {
            return None;
        }
        let tdims = t.tile_assignment.dims();
        // Source data dims in target order, then dropped ones (one tile each), then subgroups.
        let mut perm: Vec<usize> = Vec::with_capacity(tdims.len());
        for &s in tgt_to_src {
            if s >= 0 {
                perm.push(s as usize);
            }
        }
        for (i, &tg) in src_to_tgt.iter().enumerate() {
            if tg < 0 {
                if tdims[i] > 1 {
                    return None;
                }
                perm.push(i);
            }
        }
        if perm.len() != r {
            return None;
        }
        perm.extend(r..tdims.len());
        let moved = t.tile_assignment.transpose(&perm);
        let mut dims: Dims = tgt_to_src
            .iter()
            .map(|&s| if s >= 0 { tdims[s as usize] } else { 1 })
            .collect();
        dims.extend(tdims[r..].iter().copied());
        let ta = moved.reshape(&dims)?;
        Some(with_meta(Sharding::subgroup(ta, &t.subgroup_types()), self))
    }

    /// The sharding of `reverse(x, dims)`: the tile order flips along `dims`.
    pub fn reverse_dims(&self, dims: &[usize]) -> Sharding {
        let Some(t) = self.as_tiled() else {
            return self.clone();
        };
        let ta = &t.tile_assignment;
        let tdims: Dims = ta.dims().iter().copied().collect();
        if !dims.iter().any(|&d| d < t.data_rank() && tdims[d] > 1) {
            return self.clone();
        }
        let n = ta.num_devices();
        let mut devices = Vec::with_capacity(n as usize);
        let mut idx: Dims = SmallVec::from_elem(0, tdims.len());
        for l in 0..n {
            let mut rest = l;
            for i in (0..tdims.len()).rev() {
                idx[i] = rest % tdims[i];
                rest /= tdims[i];
            }
            for &d in dims {
                if d < t.data_rank() {
                    idx[d] = tdims[d] - 1 - idx[d];
                }
            }
            devices.push(ta.device_at(&idx));
        }
        let ta = TileAssignment::Explicit {
            dims: tdims,
            devices,
        };
        with_meta(Sharding::subgroup(ta, &t.subgroup_types()), self)
    }

    /// XLA's `ReshapeSharding`: the sharding of `reshape(x)` from `from` to `to` given x's.
    /// Source and target dimensions are walked major to minor: unsharded source dimensions are
    /// multiplied together and absorb whole target dimensions, equal sizes keep their tiles, a
    /// target dimension of size 1 gets none, a sharded source dimension of size 1 goes into the
    /// replication, and a sharded dimension of another size gives the target dimension
    /// `gcd(tiles, target size)` of its tiles and carries the rest on (so `[6,4] -> [4,6]` under
    /// `[6,1]` gives `[2,1,3]` partially replicated). The walk stops at the first pair it cannot
    /// match; tiles not placed by then become replication. `None` when no data tiling survives
    /// or a sharded dimension does not divide evenly.
    pub fn reshape_through(&self, from: &[i64], to: &[i64]) -> Option<Sharding> {
        let t = match &self.kind {
            ShardingKind::Tiled(t) => t,
            ShardingKind::Tuple(_) => return None,
            _ => return Some(self.clone()),
        };
        if t.data_rank() != from.len() {
            return None;
        }
        // Stacks with the most major dimension on top; `index` is the source dimension the
        // last pop took (pushes back step it down again).
        let mut src: Vec<i64> = from.iter().rev().copied().collect();
        let mut parts: Vec<i64> = t.data_tile_dims().iter().rev().copied().collect();
        let mut tgt: Vec<i64> = to.iter().rev().copied().collect();
        let mut index = -1i64;
        let mut out: Dims = SmallVec::new();
        let mut fold_into_last = false;
        let mut to_replicate: Vec<usize> = Vec::new();
        let emit = |out: &mut Dims, fold: &mut bool, n: i64| {
            if *fold {
                *out.last_mut().expect("folding needs a dimension") *= n;
            } else {
                out.push(n);
            }
            *fold = false;
        };
        while !src.is_empty() && !tgt.is_empty() && parts.iter().product::<i64>() != 1 {
            // Unsharded source dimensions absorb whole target dimensions.
            let mut unsharded = 1;
            while parts.last() == Some(&1) {
                unsharded *= src.pop().unwrap();
                parts.pop();
                index += 1;
            }
            while let Some(&t_size) = tgt.last() {
                if t_size <= 1 || unsharded % t_size != 0 {
                    break;
                }
                unsharded /= t_size;
                tgt.pop();
                emit(&mut out, &mut fold_into_last, 1);
            }
            if unsharded != 1 {
                src.push(unsharded);
                parts.push(1);
                index -= 1;
            }
            let (Some(s_size), Some(t_size)) = (src.pop(), tgt.pop()) else {
                break;
            };
            let s_parts = parts.pop().unwrap();
            index += 1;
            if s_size == t_size {
                emit(&mut out, &mut fold_into_last, s_parts);
            } else if t_size == 1 {
                emit(&mut out, &mut fold_into_last, 1);
                src.push(s_size);
                parts.push(s_parts);
                index -= 1;
            } else if s_size == 1 {
                tgt.push(t_size);
                if s_parts > 1 {
                    to_replicate.push(index as usize);
                }
            } else if s_parts == 1 {
                // An unsharded remainder merges with the next unsharded dimension (the target
                // dimension is consumed, as in XLA); with a sharded one next, stop.
                match parts.last() {
                    Some(1) => *src.last_mut().unwrap() *= s_size,
                    _ => break,
                }
            } else if s_size % s_parts != 0 {
                return None;
            } else {
                let g = gcd(s_parts, t_size);
                if g == 1 {
                    break;
                }
                src.push(s_size / g);
                parts.push(s_parts / g);
                index -= 1;
                tgt.push(t_size / g);
                emit(&mut out, &mut fold_into_last, g);
                fold_into_last = true;
            }
        }
        if out.iter().product::<i64>() == 1 {
            return None;
        }
        out.resize(to.len().max(out.len()), 1);
        let base = if to_replicate.is_empty() {
            self.clone()
        } else {
            self.replicate_on_dims(&to_replicate)
        };
        let bt = base.as_tiled()?;
        let r = bt.data_rank();
        let bdims = bt.tile_assignment.dims();
        let mut types = bt.subgroup_types();
        let repl = types.iter().position(|x| *x == SubgroupType::Replicated);
        for (k, &d) in bdims[r..].iter().enumerate() {
            out.push(if repl == Some(k) { 1 } else { d });
        }
        let total = bt.tile_assignment.num_devices();
        let placed: i64 = out.iter().product();
        debug_assert_eq!(total % placed, 0);
        let rest = total / placed;
        if rest > 1 {
            match repl {
                Some(k) => out[to.len() + k] = rest,
                None => {
                    out.push(rest);
                    types.push(SubgroupType::Replicated);
                }
            }
        }
        let ta = bt.tile_assignment.reshape(&out)?;
        Some(with_meta(Sharding::subgroup(ta, &types), self))
    }

    /// XLA's `PropagateShardingThroughReshape`: the sharding of `reshape(x)` given x's. Tries
    /// [`reshape_through`](Sharding::reshape_through) on the tiles of runs of consecutive source
    /// dimensions (longest first, left to right, the tiles outside a run counted as
    /// replication) and merges every run that fits into the result; replicated when none does.
    /// A manual subgroup is set aside and put back around the reshape.
    pub fn propagate_through_reshape(&self, from: &[i64], to: &[i64]) -> Sharding {
        let t = match &self.kind {
            ShardingKind::Tiled(t) => t,
            _ => return self.clone(),
        };
        if let Some(md) = self.subgroup_manual_dim() {
            return self.with_manual_set_aside(md, to.len(), |inner| {
                inner.propagate_through_reshape(from, to)
            });
        }
        let ta = &t.tile_assignment;
        let tdims = ta.dims();
        let mut result = Sharding::replicated();
        let mut start = 0;
        while start < from.len() {
            let mut found = false;
            for end in (start + 1..=from.len()).rev() {
                let run: Dims = (0..from.len())
                    .map(|i| {
                        if (start..end).contains(&i) {
                            tdims[i]
                        } else {
                            1
                        }
                    })
                    .collect();
                let run_sharding = Sharding::tiled(TileAssignment::iota(&run), false);
                let Some(reshaped) = run_sharding.reshape_through(from, to) else {
                    continue;
                };
                // The run's tiles first, then the others (as replication).
                let mut perm: Vec<usize> = (start..end).collect();
                perm.extend(0..start);
                perm.extend(end..tdims.len());
                let mut dims: Dims = reshaped
                    .as_tiled()
                    .map(|r| r.tile_assignment.dims().iter().copied().collect())
                    .unwrap_or_default();
                let replicas = ta.num_devices() / dims.iter().product::<i64>();
                if dims.len() == to.len() {
                    dims.push(replicas);
                } else {
                    *dims.last_mut().unwrap() *= replicas;
                }
                let Some(moved) = ta.transpose(&perm).reshape(&dims) else {
                    continue;
                };
                let candidate = Sharding::subgroup(moved, &[SubgroupType::Replicated]);
                let min = result.num_tiles() + 1;
                if merge_if_compatible(&candidate, min, &mut result) {
                    start = end;
                    found = true;
                    break;
                }
            }
            if !found {
                start += 1;
            }
        }
        with_meta(result, self)
    }

    /// Applies `f` to this sharding with its manual subgroup dimension `md` taken out (each
    /// manual group seen as one device set), then puts the manual dimension back as the first
    /// subgroup dimension of `f`'s result, whose data rank is `out_rank` (XLA's
    /// `GroupShardingOnDims` / `UngroupSharding` for a manual subgroup).
    pub fn with_manual_set_aside(
        &self,
        md: usize,
        out_rank: usize,
        f: impl FnOnce(&Sharding) -> Sharding,
    ) -> Sharding {
        let t = self.as_tiled().expect("a manual subgroup is tiled");
        let ta = &t.tile_assignment;
        let dims = ta.dims();
        let groups = dims[md];
        // Inner assignment over positions 0..n within a manual group.
        let inner_dims: Dims = (0..dims.len())
            .filter(|&d| d != md)
            .map(|d| dims[d])
            .collect();
        let mut inner_types = t.subgroup_types();
        inner_types.retain(|x| *x != SubgroupType::Manual);
        let inner = Sharding::subgroup(TileAssignment::iota(&inner_dims), &inner_types);
        let res = f(&inner);
        let Some(rt) = res.as_tiled() else {
            // Replicated inside each group: manual-only subgroups.
            let mut d: Dims = SmallVec::from_elem(1, out_rank);
            let n = ta.num_devices() / groups;
            d.push(groups);
            d.push(n);
            let moved = {
                let mut perm: Vec<usize> = vec![md];
                perm.extend((0..dims.len()).filter(|&x| x != md));
                ta.transpose(&perm)
            };
            let out = moved.reshape(&d).expect("same device count");
            return with_meta(
                Sharding::subgroup(out, &[SubgroupType::Manual, SubgroupType::Replicated]),
                self,
            );
        };
        let rdims = rt.tile_assignment.dims();
        let rr = rt.data_rank();
        let mut out_dims: Dims = rdims[..rr].iter().copied().collect();
        out_dims.push(groups);
        out_dims.extend(rdims[rr..].iter().copied());
        let mut types = vec![SubgroupType::Manual];
        types.extend(rt.subgroup_types());
        // Device at (data idx, g, subgroup idx) = original device at (g, inner position).
        let inner_pos = rt.tile_assignment.devices();
        let mut devices = Vec::with_capacity(ta.num_devices() as usize);
        let n_inner = inner_pos.len();
        let data_count: usize = rdims[..rr].iter().product::<i64>() as usize;
        let sub_count = n_inner / data_count;
        let orig = ta.devices();
        // Original linear index of (g, inner linear position p).
        let orig_linear = |g: i64, p: i64| -> usize {
            let mut rest = p;
            let mut idx = vec![0i64; dims.len()];
            for d in (0..dims.len()).rev() {
                if d == md {
                    continue;
                }
                idx[d] = rest % dims[d];
                rest /= dims[d];
            }
            idx[md] = g;
            idx.iter().zip(dims).fold(0i64, |acc, (&i, &n)| acc * n + i) as usize
        };
        for di in 0..data_count {
            for g in 0..groups {
                for si in 0..sub_count {
                    let p = inner_pos[di * sub_count + si];
                    devices.push(orig[orig_linear(g, p)]);
                }
            }
        }
        let out = TileAssignment::Explicit {
            dims: out_dims,
            devices,
        };
        with_meta(Sharding::subgroup(out, &types), self)
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn with_meta(mut s: Sharding, from: &Sharding) -> Sharding {
    s.metadata = from.metadata.clone();
    s
}

/// XLA's `MergeShardingIfCompatible(to_merge, minimum_tiles, dst)`: when `dst` is partially
/// replicated and `to_merge` tiles data dimensions compatibly (each dimension tiled by one of
/// them, or equally by both) with device groups that intersect consistently, `dst` becomes the
/// combination, which must have at least `minimum_tiles` tiles. Returns whether it merged.
pub fn merge_if_compatible(to_merge: &Sharding, minimum_tiles: i64, dst: &mut Sharding) -> bool {
    let Some(tm) = to_merge.as_tiled() else {
        return false;
    };
    if dst.is_tile_maximal() {
        *dst = to_merge.clone();
        return true;
    }
    if !dst.has_partial_replication() {
        return false;
    }
    let Some(td) = dst.as_tiled() else {
        return false;
    };
    let rank = tm.data_rank();
    if td.data_rank() != rank {
        return false;
    }
    let (mt, dt) = (tm.tile_assignment.dims(), td.tile_assignment.dims());
    let num_devices = tm.tile_assignment.num_devices();
    if td.tile_assignment.num_devices() != num_devices {
        return false;
    }
    let mut merged: Dims = SmallVec::new();
    for i in 0..rank {
        let (d, m) = (dt[i], mt[i]);
        merged.push(if d == 1 || d == m {
            m
        } else if m == 1 {
            d
        } else {
            return false;
        });
    }
    let num_tiles: i64 = merged.iter().product();
    if num_devices % num_tiles != 0 || num_tiles < minimum_tiles {
        return false;
    }
    let m_man = to_merge.subgroup_manual_dim();
    let d_man = dst.subgroup_manual_dim();
    if let Some(mm) = m_man {
        let Some(dm) = d_man else {
            return false;
        };
        if mt[mm] != dt[dm] {
            return false;
        }
        merged.push(mt[mm]);
    }
    let replication = num_devices / merged.iter().product::<i64>();
    merged.push(replication);
    // Replication groups: data tile index (and manual index) -> sorted devices.
    let group_of = |idx: &[i64], dims: &[i64], man: Option<usize>| -> usize {
        let mut g = 0i64;
        for i in 0..rank {
            g = g * dims[i] + idx[i];
        }
        if let Some(m) = man {
            g = g * dims[m] + idx[m];
        }
        g as usize
    };
    // Each group's devices, sorted (a group is small: the replication of one tile).
    let groups = |ta: &TileAssignment, man: Option<usize>| {
        let dims = ta.dims();
        let count = dims[..rank].iter().product::<i64>() * man.map_or(1, |m| dims[m]);
        let mut g: Vec<SmallVec<[i64; 8]>> = vec![SmallVec::new(); count as usize];
        let mut idx: Dims = SmallVec::from_elem(0, dims.len());
        for device in ta.devices() {
            g[group_of(&idx, dims, man)].push(device);
            for i in (0..dims.len()).rev() {
                idx[i] += 1;
                if idx[i] < dims[i] {
                    break;
                }
                idx[i] = 0;
            }
        }
        for x in &mut g {
            x.sort_unstable();
        }
        g
    };
    let mut mg = groups(&tm.tile_assignment, m_man);
    let mut dg = groups(&td.tile_assignment, d_man);
    let total: i64 = merged.iter().product();
    let mut devices = Vec::with_capacity(total as usize);
    let mut idx: Dims = SmallVec::from_elem(0, merged.len());
    let mut mi: Dims = SmallVec::from_elem(0, mt.len());
    let mut di: Dims = SmallVec::from_elem(0, dt.len());
    for l in 0..total {
        let mut rest = l;
        for i in (0..merged.len()).rev() {
            idx[i] = rest % merged[i];
            rest /= merged[i];
        }
        for i in 0..rank {
            mi[i] = if mt[i] == 1 { 0 } else { idx[i] };
            di[i] = if dt[i] == 1 { 0 } else { idx[i] };
        }
        if let (Some(mm), Some(dm)) = (m_man, d_man) {
            mi[mm] = idx[rank];
            di[dm] = idx[rank];
        }
        let a = group_of(&mi, mt, m_man);
        let b = group_of(&di, dt, d_man);
        let (Some(&sa), Some(&sb)) = (mg[a].first(), dg[b].first()) else {
            return false;
        };
        let dev = if sa < sb { sb } else { sa };
        let (Ok(pa), Ok(pb)) = (mg[a].binary_search(&dev), dg[b].binary_search(&dev)) else {
            return false;
        };
        mg[a].remove(pa);
        dg[b].remove(pb);
        devices.push(dev);
    }
    let mut types = Vec::new();
    if m_man.is_some() {
        types.push(SubgroupType::Manual);
    }
    types.push(SubgroupType::Replicated);
    let mut metadata = std::mem::take(&mut dst.metadata);
    for md in &to_merge.metadata {
        if !metadata.contains(md) {
            metadata.push(md.clone());
        }
    }
    let mut out = Sharding::subgroup(
        TileAssignment::Explicit {
            dims: merged,
            devices,
        },
        &types,
    );
    out.metadata = metadata;
    *dst = out;
    true
}

/// XLA's `MergeSharding(old, to_merge, may_combine_partial_sharding)`: whether `to_merge`
/// (possibly combined with `old` into a finer sharding) should replace `old`. Tuples merge leaf
/// by leaf; a leaf that does not improve keeps `old`'s sharding.
pub fn merge_sharding(old: &Sharding, to_merge: &mut Sharding, may_combine: bool) -> bool {
    if let (ShardingKind::Tuple(o), ShardingKind::Tuple(n)) = (&old.kind, &mut to_merge.kind) {
        if o.len() != n.len() {
            return false;
        }
        let mut changed = false;
        for (oe, ne) in o.iter().zip(n.iter_mut()) {
            if merge_sharding(oe, ne, may_combine) {
                changed = true;
            } else {
                *ne = oe.clone();
            }
        }
        return changed;
    }
    if !may_combine
        || !old.has_partial_replication()
        || !to_merge.has_partial_replication()
        || old.as_tiled().map(|t| t.tile_assignment.num_devices())
            != to_merge.as_tiled().map(|t| t.tile_assignment.num_devices())
    {
        return to_merge.more_specific_than(old);
    }
    let min = old.num_tiles().max(to_merge.num_tiles()) + 1;
    if merge_if_compatible(old, min, to_merge) {
        return true;
    }
    to_merge.more_specific_than(old)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// True if every device's piece under `fine` lies inside its piece under `coarse`.
    fn refines(fine: &Sharding, coarse: &Sharding, dims: &[i64], num_devices: i64) -> bool {
        (0..num_devices).all(|d| {
            match (fine.device_bounds(dims, d), coarse.device_bounds(dims, d)) {
                (Some((s1, l1)), Some((s2, l2))) => {
                    (0..dims.len()).all(|i| l1[i] <= s1[i] || (s1[i] >= s2[i] && l1[i] <= l2[i]))
                }
                (None, _) => true,
                (Some(_), None) => false,
            }
        })
    }
    use crate::text::{parse_sharding, sharding_to_string};
    use proptest::prelude::*;

    fn s(text: &str) -> Sharding {
        parse_sharding(text).unwrap()
    }

    fn show(x: &Sharding) -> String {
        sharding_to_string(x)
    }

    #[test]
    fn canonical_spelling_finds_iotas() {
        assert_eq!(
            show(&s("{devices=[2,2]0,1,2,3}").normalized()),
            "{devices=[2,2]<=[4]}"
        );
        assert_eq!(
            show(&s("{devices=[2,2]0,2,1,3}").normalized()),
            "{devices=[2,2]<=[2,2]T(1,0)}"
        );
        assert_eq!(
            show(&s("{devices=[4,2]0,4,1,5,2,6,3,7}").normalized()),
            "{devices=[4,2]<=[2,4]T(1,0)}"
        );
        assert_eq!(
            show(&s("{devices=[2,2]0,3,1,2}").normalized()),
            "{devices=[2,2]0,3,1,2}"
        );
        // Size-1 replication dims go away; one tile with replication is replicated.
        assert_eq!(
            show(&s("{devices=[2,1]0,1 last_tile_dim_replicate}").normalized()),
            "{devices=[2]<=[2]}"
        );
        assert_eq!(
            show(&s("{devices=[1,4]<=[4] last_tile_dim_replicate}").normalized()),
            "{replicated}"
        );
        assert_eq!(
            show(&s("{devices=[1,1,2,2]<=[4] last_tile_dims={manual, replicated}}").normalized()),
            "{devices=[1,1,2,2]<=[4] last_tile_dims={manual, replicated}}"
        );
    }

    #[test]
    fn partial_replication_on_dims_like_xla() {
        let x = s("{devices=[2,2]<=[4]}");
        assert_eq!(
            show(&x.replicate_on_dims(&[0])),
            "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"
        );
        assert_eq!(
            show(&x.replicate_on_dims(&[1])),
            "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"
        );
        assert_eq!(show(&x.replicate_on_dims(&[0, 1])), "{replicated}");
        let m = s("{devices=[2,2,2]<=[8] last_tile_dims={manual}}");
        assert_eq!(
            show(&m.replicate_on_dims(&[0])),
            "{devices=[1,2,2,2]<=[2,4]T(1,0) last_tile_dims={manual, replicated}}"
        );
    }

    #[test]
    fn transpose_with_collapsed_dims() {
        // dot lhs [m,k] sharded [2,2] with k replicated -> output [m,n].
        let lhs = s("{devices=[2,2]<=[4]}").replicate_on_dims(&[1]);
        let out = lhs.transpose_collapsed(&[0, -1], &[0, -1]).unwrap();
        assert_eq!(show(&out), "{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
        // Operand dim to output dim 1: [a,b] -> [b', a] where b' new.
        let x = s("{devices=[4,1]<=[4]}");
        let out = x.transpose_collapsed(&[1, -1], &[-1, 0]).unwrap();
        assert_eq!(show(&out), "{devices=[1,4]<=[4]}");
        // A sharded dimension cannot be dropped.
        assert!(s("{devices=[1,4]<=[4]}")
            .transpose_collapsed(&[0, -1], &[0])
            .is_none());
    }

    #[test]
    fn reshape_through_splits_and_merges() {
        let x = s("{devices=[4,1]<=[4]}");
        // [8,6] -> [48] keeps the major sharding; [8,6] -> [2,4,6] splits 4 tiles over 2x2.
        assert_eq!(
            show(&x.reshape_through(&[8, 6], &[48]).unwrap()),
            "{devices=[4]<=[4]}"
        );
        assert_eq!(
            show(&x.reshape_through(&[8, 6], &[2, 4, 6]).unwrap()),
            "{devices=[2,2,1]<=[4]}"
        );
        // A minor sharded dim cannot merge into a bigger major partner.
        assert!(s("{devices=[1,4]<=[4]}")
            .reshape_through(&[8, 6], &[48])
            .is_none());
        // A sharded size-1 dim that disappears goes into the replication.
        let y = s("{devices=[2,2]<=[4]}");
        assert_eq!(
            show(&y.reshape_through(&[2, 8], &[2, 8, 1]).unwrap()),
            "{devices=[2,2,1]<=[4]}"
        );
        let z = s("{devices=[2,1,2]<=[4]}");
        assert_eq!(
            show(&z.reshape_through(&[2, 1, 8], &[2, 8]).unwrap()),
            "{devices=[2,2]<=[4]}"
        );
    }

    #[test]
    fn reshape_through_gcd_and_runs() {
        // A sharded dimension hands the target dimension gcd(tiles, size) tiles and carries the
        // rest; what is left over is replication.
        assert_eq!(
            show(
                &s("{devices=[6,1]<=[6]}")
                    .reshape_through(&[6, 4], &[4, 6])
                    .unwrap()
            ),
            "{devices=[2,1,3]<=[6] last_tile_dim_replicate}"
        );
        // The whole shape does not fit [4,6] -> [6,4] under [2,2]; the run of dimension 0 does.
        let x = s("{devices=[2,2]<=[4]}");
        assert_eq!(
            show(&x.propagate_through_reshape(&[4, 6], &[6, 4])),
            "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"
        );
        assert_eq!(
            show(&x.propagate_through_reshape(&[4, 6], &[4, 2, 3])),
            "{devices=[2,2,1]<=[4]}"
        );
        // Nothing fits: replicated.
        assert!(s("{devices=[1,4]<=[4]}")
            .propagate_through_reshape(&[8, 6], &[48])
            .is_replicated());
        // A manual subgroup is set aside and put back.
        assert_eq!(
            show(
                &s("{devices=[2,1,2]<=[4] last_tile_dims={manual}}")
                    .propagate_through_reshape(&[4, 6], &[2, 2, 6])
            ),
            "{devices=[2,1,1,2]<=[4] last_tile_dims={manual}}"
        );
    }

    #[test]
    fn merge_partial_shardings() {
        let a = s("{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
        let mut b = s("{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}");
        assert!(merge_sharding(&a, &mut b, true));
        assert_eq!(show(&b), "{devices=[2,2]<=[4]}");
        // Incompatible device groups do not merge.
        let c = s("{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
        let mut d = s("{devices=[1,2,2]<=[4] last_tile_dim_replicate}");
        assert!(!merge_sharding(&c, &mut d, true));
        // Without combining, only more tiles win.
        let mut e = s("{devices=[2,2]<=[4]}");
        assert!(merge_sharding(&a, &mut e, false));
        let mut f = s("{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
        assert!(!merge_sharding(&e, &mut f, false));
    }

    #[test]
    fn more_specific() {
        let r = Sharding::replicated();
        let t = s("{devices=[2]<=[2]}");
        let m = Sharding::maximal(0);
        assert!(t.more_specific_than(&r) && !r.more_specific_than(&t));
        assert!(m.more_specific_than(&r) && t.more_specific_than(&m));
        // As in XLA, a manual sharding is more specific than a tile-maximal one, not than a
        // tiled one.
        assert!(Sharding::manual().more_specific_than(&r));
        assert!(!Sharding::manual().more_specific_than(&t));
        assert!(!r.more_specific_than(&Sharding::manual()));
        assert!(Sharding::manual().strictly_better_than(&r));
        assert!(!Sharding::manual().strictly_better_than(&t));
        let tm = Sharding::tuple(vec![Sharding::manual(), r.clone()]);
        let tr = Sharding::tuple(vec![r.clone(), r.clone()]);
        assert!(tm.strictly_better_than(&tr) && !tr.strictly_better_than(&tm));
    }

    /// The linear indices (row-major in `dims`) of the elements device `dev` holds.
    fn piece(s: &Sharding, dims: &[i64], dev: i64) -> std::collections::BTreeSet<i64> {
        let mut out = std::collections::BTreeSet::new();
        let Some((st, li)) = s.device_bounds(dims, dev) else {
            return out;
        };
        let total: i64 = dims.iter().product();
        'elems: for l in 0..total {
            let mut rest = l;
            for i in (0..dims.len()).rev() {
                let x = rest % dims[i];
                rest /= dims[i];
                if x < st[i] || x >= li[i] {
                    continue 'elems;
                }
            }
            out.insert(l);
        }
        out
    }

    /// A shape of rank 1..=3 and a reshape of it: the same elements, refactored.
    fn arb_reshape() -> impl Strategy<Value = (Vec<i64>, Vec<i64>)> {
        let factors = prop::sample::select(vec![1i64, 2, 3, 4, 6]);
        (prop::collection::vec(factors, 1..4), 0usize..64).prop_map(|(from, pick)| {
            let total: i64 = from.iter().product();
            // Ordered factorizations of `total` into at most 3 factors.
            let mut options: Vec<Vec<i64>> = Vec::new();
            for a in 1..=total {
                if total % a != 0 {
                    continue;
                }
                options.push(vec![a, total / a]);
                for b in 1..=total / a {
                    if (total / a) % b == 0 {
                        options.push(vec![a, b, total / a / b]);
                    }
                }
            }
            options.push(vec![total]);
            let to = options[pick % options.len()].clone();
            (from, to)
        })
    }

    /// A factorization of `n` into at most 5 factors (size-1 factors included), chosen by
    /// `seed`.
    fn factorize(n: i64, mut seed: u64) -> Vec<i64> {
        let mut out = Vec::new();
        let mut rest = n;
        while out.len() < 4 {
            let divs: Vec<i64> = (1..=rest).filter(|k| rest % k == 0).collect();
            let d = divs[(seed % divs.len() as u64) as usize];
            seed /= divs.len() as u64 + 1;
            out.push(d);
            rest /= d;
            if rest == 1 && seed.is_multiple_of(3) {
                break;
            }
        }
        out.push(rest);
        out
    }

    /// A permutation of `0..r` chosen by `seed`.
    fn shuffle(r: usize, mut seed: u64) -> Vec<usize> {
        let mut v: Vec<usize> = (0..r).collect();
        for k in (1..r).rev() {
            v.swap(k, (seed % (k as u64 + 1)) as usize);
            seed /= k as u64 + 1;
        }
        v
    }

    /// An iota tile assignment over `reshape` transposed by a permutation chosen by `seed`,
    /// viewed with tile dimensions factorized by `seed`.
    fn arb_iota(reshape: &[i64], seed: u64) -> TileAssignment {
        let n: i64 = reshape.iter().product();
        let perm: SmallVec<[i64; 4]> = shuffle(reshape.len(), seed)
            .into_iter()
            .map(|p| p as i64)
            .collect();
        TileAssignment::Iota {
            dims: factorize(n, seed / 7).into_iter().collect(),
            reshape_dims: reshape.iter().copied().collect(),
            transpose_perm: perm,
        }
    }

    proptest! {
        /// Propagating a sharding through a reshape never asks a device for data it does not
        /// hold: under the target sharding each device's piece (as element indices) contains
        /// its piece under the source sharding. Tiles divide their dimensions; devices are in
        /// a shuffled order; a replicated subgroup is optional.
        #[test]
        fn reshape_keeps_device_pieces((from, to) in arb_reshape(), seed in 0u64..10_000, repl in 1i64..3) {
            // Tiles: a divisor of each dimension, chosen by the seed.
            let tiles: Vec<i64> = from.iter().enumerate().map(|(i, &d)| {
                let divs: Vec<i64> = (1..=d).filter(|k| d % k == 0).collect();
                divs[((seed >> (3 * i)) as usize) % divs.len()]
            }).collect();
            let mut tdims = tiles.clone();
            if repl > 1 { tdims.push(repl); }
            let n: i64 = tdims.iter().product();
            let mut devices: Vec<i64> = (0..n).collect();
            let mut x = seed;
            for k in (1..devices.len()).rev() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                devices.swap(k, (x >> 33) as usize % (k + 1));
            }
            let ta = TileAssignment::Explicit { dims: tdims.iter().copied().collect(), devices };
            let s = Sharding::tiled(ta, repl > 1);
            let t = s.propagate_through_reshape(&from, &to);
            for dev in 0..n {
                let before = piece(&s, &from, dev);
                let after = piece(&t, &to, dev);
                prop_assert!(before.is_subset(&after),
                    "{} {:?} -> {:?} gives {}: device {} loses data", show(&s), from, to, show(&t), dev);
            }
            // Going through the reshape and back only ever coarsens.
            let back = t.propagate_through_reshape(&to, &from);
            for dev in 0..n {
                prop_assert!(piece(&s, &from, dev).is_subset(&piece(&back, &from, dev)));
            }
        }

        /// Reversing the same dimensions twice gives the sharding back, and a reversed
        /// sharding's device pieces are the mirrored pieces.
        #[test]
        fn reverse_mirrors_pieces(a in 1i64..5, b in 1i64..5, ta in 1i64..3, tb in 1i64..3, d in 0usize..2) {
            let dims = [a * ta, b * tb];
            let s = Sharding::tiled(TileAssignment::iota(&[ta, tb]), false);
            let r = s.reverse_dims(&[d]);
            prop_assert_eq!(r.reverse_dims(&[d]).normalized(), s.normalized());
            for dev in 0..ta * tb {
                let (st, li) = s.device_bounds(&dims, dev).unwrap();
                let (rst, rli) = r.device_bounds(&dims, dev).unwrap();
                prop_assert_eq!((rst[d], rli[d]), (dims[d] - li[d], dims[d] - st[d]));
                prop_assert_eq!((rst[1 - d], rli[1 - d]), (st[1 - d], li[1 - d]));
            }
        }

        /// The normal form of an iota, found without listing devices, is the canonical spelling
        /// found by reading its device list.
        #[test]
        fn iota_normal_form_is_the_canonical_spelling(reshape in prop::collection::vec(1i64..5, 1..5), seed in 0u64..1_000_000) {
            let t = arb_iota(&reshape, seed);
            let c = t.canonical();
            prop_assert_eq!(&c, &t.canonical_from_devices());
            prop_assert_eq!(c.devices(), t.devices());
        }

        /// Transposing an iota without listing devices moves the same devices as transposing the
        /// explicit list, and the result (an iota whenever one exists) is canonically spelled.
        #[test]
        fn iota_transpose_moves_the_devices(reshape in prop::collection::vec(1i64..5, 1..5), seed in 0u64..1_000_000, pseed in 0u64..1000) {
            let t = arb_iota(&reshape, seed);
            let perm = shuffle(t.rank(), pseed);
            let explicit = TileAssignment::Explicit { dims: t.dims().iter().copied().collect(), devices: t.devices() };
            let by_list = explicit.transpose(&perm);
            let symbolic = t.transpose(&perm);
            prop_assert_eq!(symbolic.dims(), by_list.dims());
            prop_assert_eq!(symbolic.devices(), by_list.devices());
            if matches!(symbolic, TileAssignment::Iota { .. }) {
                prop_assert_eq!(&symbolic, &by_list.canonical_from_devices());
            }
            // The device list of an iota, by odometer and one by one.
            let one_by_one: Vec<i64> = (0..t.num_devices()).map(|l| t.device_at_linear(l)).collect();
            prop_assert_eq!(t.devices(), one_by_one);
        }

        /// The canonical spelling lists the same devices.
        #[test]
        fn canonical_keeps_devices(a in 1i64..4, b in 1i64..4, c in 1i64..3, rot in 0usize..3) {
            let t = TileAssignment::iota(&[a, b, c]);
            let perm: Vec<usize> = (0..3).map(|i| (i + rot) % 3).collect();
            let tt = t.transpose(&perm);
            let explicit = TileAssignment::Explicit { dims: tt.dims().iter().copied().collect(), devices: tt.devices() };
            let canon = explicit.canonical();
            let is_iota = matches!(canon, TileAssignment::Iota { .. });
            prop_assert!(is_iota);
            prop_assert_eq!(canon.devices(), tt.devices());
            prop_assert_eq!(canon.canonical(), canon.clone());
        }

        /// Partial replication keeps each device's piece a superset of its piece before.
        #[test]
        fn replicate_on_dims_coarsens(a in 1i64..4, b in 1i64..4, d in 0usize..2) {
            let x = Sharding::tiled(TileAssignment::iota(&[a, b]), false);
            let dims = [a * 3, b * 2];
            let y = x.replicate_on_dims(&[d]);
            let n = a * b;
            prop_assert!(refines(&x, &y, &dims, n));
            prop_assert_eq!(y.num_tiles(), if d == 0 { b } else { a });
        }

        /// A sharding reshaped through a split and back gives each device the same piece.
        #[test]
        fn reshape_split_round_trip(t0 in 1i64..4, t1 in 1i64..3, k in 1i64..3) {
            let from = [t0 * 2 * k, t1 * 2];
            let to = [t0, 2 * k, t1 * 2];
            let x = Sharding::tiled(TileAssignment::iota(&[t0, t1]), false);
            if t0 * t1 > 1 {
                let y = x.reshape_through(&from, &to).unwrap();
                let back = y.reshape_through(&to, &from).unwrap();
                for dev in 0..t0 * t1 {
                    prop_assert_eq!(back.device_bounds(&from, dev), x.device_bounds(&from, dev));
                }
            }
        }
    }
}
