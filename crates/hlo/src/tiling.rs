//! Tilings: what a sharding means for a given shape and set of devices (the geometry; the
//! transformations of shardings are in [`crate::sharding_util`], the one sharding algebra).
//!
//! A tiled sharding splits an array into a grid of tiles; `tile_assignment` says which device
//! holds which tile. Trailing tile dimensions may be *subgroup* dimensions
//! (`last_tile_dim_replicate` or `last_tile_dims={...}`): devices that differ only in those hold
//! the same tile (replicated) or their own part of a manual region. Dimensions of the data that
//! do not divide evenly get `ceil(size / tiles)` per tile, the last tiles padded, as the SPMD
//! partitioner expects.
//!
//! Here: tile assignments (iota and explicit device orders, their reshape, transpose and normal
//! form), each device's piece of an array (tile shapes, offsets, [`Sharding::device_bounds`]),
//! groups of devices along tile dimensions, and how the dimensions of a reshape group
//! ([`reshape_groups`]).
//!
//! The functions here never materialise a device list for an iota tile assignment unless the
//! result needs one (e.g. a transpose that an iota form cannot express).

use smallvec::SmallVec;

use crate::sharding::{Sharding, ShardingKind, SubgroupType, TileAssignment, TiledSharding};

type Dims = crate::sharding::TileDims;

/// Row-major strides of `dims`.
fn strides(dims: &[i64]) -> Dims {
    let mut s: Dims = SmallVec::from_elem(1, dims.len());
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// The multi-index of row-major position `linear` in `dims`.
fn unravel(mut linear: i64, dims: &[i64]) -> Dims {
    let mut idx: Dims = SmallVec::from_elem(0, dims.len());
    for i in (0..dims.len()).rev() {
        if dims[i] > 0 {
            idx[i] = linear % dims[i];
            linear /= dims[i];
        }
    }
    idx
}

fn ravel(idx: &[i64], dims: &[i64]) -> i64 {
    idx.iter().zip(strides(dims)).map(|(i, s)| i * s).sum()
}

/// Short lists of iota reshape dimensions or permutation entries.
type Small = SmallVec<[i64; 4]>;

/// The normal form of the iota `iota(reshape).transpose(perm)` over `n` devices: reshape
/// dimensions of size 1 dropped, and every two reshape dimensions that stay next to each other
/// (in order) after the transpose merged into one. The result is `([n], [])` when no transpose
/// is left. This is the spelling with the fewest reshape dimensions; two iotas list the same
/// devices iff their normal forms are equal. `None` when `reshape` and `perm` do not describe an
/// iota over `n` devices.
pub(crate) fn iota_normal_form(n: i64, reshape: &[i64], perm: &[i64]) -> Option<(Small, Small)> {
    let r = reshape.len();
    if reshape.iter().any(|&d| d < 1) || crate::shape::checked_product(reshape) != Some(n) {
        return None;
    }
    if !perm.is_empty() {
        if perm.len() != r {
            return None;
        }
        let mut seen: SmallVec<[bool; 8]> = SmallVec::from_elem(false, r);
        for &p in perm {
            if p < 0 || p as usize >= r || seen[p as usize] {
                return None;
            }
            seen[p as usize] = true;
        }
    }
    // The reshape dimensions in transposed order, size-1 ones left out.
    let order: SmallVec<[usize; 8]> = if perm.is_empty() {
        (0..r).filter(|&k| reshape[k] > 1).collect()
    } else {
        perm.iter()
            .map(|&p| p as usize)
            .filter(|&k| reshape[k] > 1)
            .collect()
    };
    // Runs of the transposed order that are consecutive reshape dimensions once size-1
    // dimensions are skipped: each run becomes one dimension.
    let mut next_kept: SmallVec<[usize; 8]> = SmallVec::from_elem(usize::MAX, r);
    let mut last = usize::MAX;
    for k in (0..r).rev() {
        next_kept[k] = last;
        if reshape[k] > 1 {
            last = k;
        }
    }
    // (first reshape dim of the run, product) in transposed order.
    let mut runs: SmallVec<[(usize, i64); 8]> = SmallVec::new();
    let mut prev = usize::MAX;
    for &k in &order {
        match runs.last_mut() {
            Some(run) if next_kept[prev] == k => run.1 *= reshape[k],
            _ => runs.push((k, reshape[k])),
        }
        prev = k;
    }
    if runs.len() <= 1 {
        return Some((SmallVec::from_slice(&[n]), SmallVec::new()));
    }
    // Reshape dimensions: the runs in reshape order; perm: where each run went.
    let mut by_start: SmallVec<[usize; 8]> = (0..runs.len()).collect();
    by_start.sort_unstable_by_key(|&j| runs[j].0);
    let new_reshape: Small = by_start.iter().map(|&j| runs[j].1).collect();
    let mut new_perm: Small = SmallVec::from_elem(0, runs.len());
    for (pos, &j) in by_start.iter().enumerate() {
        new_perm[j] = pos as i64;
    }
    Some((new_reshape, new_perm))
}

impl TileAssignment {
    /// An iota assignment `[dims]<=[n]` (devices 0..n in row-major order).
    pub fn iota(dims: &[i64]) -> TileAssignment {
        let n: i64 = dims.iter().product();
        TileAssignment::Iota {
            dims: dims.iter().copied().collect(),
            reshape_dims: SmallVec::from_slice(&[n]),
            transpose_perm: SmallVec::new(),
        }
    }

    #[inline]
    pub fn rank(&self) -> usize {
        self.dims().len()
    }

    /// The device at row-major position `linear` of the assignment.
    pub fn device_at_linear(&self, linear: i64) -> i64 {
        match self {
            TileAssignment::Explicit { devices, .. } => devices[linear as usize],
            TileAssignment::Iota {
                reshape_dims,
                transpose_perm,
                ..
            } => {
                if transpose_perm.is_empty() {
                    return linear;
                }
                // Digits of `linear` in the transposed dimensions (minor first), each weighted
                // by the iota stride of the reshape dimension it came from.
                let mut rest = linear;
                let mut device = 0;
                for &p in transpose_perm.iter().rev() {
                    let p = p as usize;
                    let size = reshape_dims[p];
                    let stride: i64 = reshape_dims[p + 1..].iter().product();
                    device += (rest % size) * stride;
                    rest /= size;
                }
                device
            }
        }
    }

    /// The device holding the tile at multi-index `index`.
    pub fn device_at(&self, index: &[i64]) -> i64 {
        self.device_at_linear(ravel(index, self.dims()))
    }

    /// Every device id in row-major order of the assignment.
    pub fn devices(&self) -> Vec<i64> {
        match self {
            TileAssignment::Explicit { devices, .. } => devices.clone(),
            TileAssignment::Iota {
                reshape_dims,
                transpose_perm,
                ..
            } => {
                let n = self.num_devices();
                if transpose_perm.is_empty()
                    || reshape_dims.iter().product::<i64>() != n
                    || transpose_perm.len() != reshape_dims.len()
                {
                    return (0..n).map(|l| self.device_at_linear(l)).collect();
                }
                // Walk the transposed array in row-major order with an odometer, adding the
                // reshape stride of each digit that moves.
                let t = transpose_perm.len();
                let sizes: Small = transpose_perm
                    .iter()
                    .map(|&p| reshape_dims[p as usize])
                    .collect();
                let steps: Small = transpose_perm
                    .iter()
                    .map(|&p| reshape_dims[p as usize + 1..].iter().product())
                    .collect();
                let mut idx: Small = SmallVec::from_elem(0, t);
                let mut out = Vec::with_capacity(n as usize);
                let mut device = 0;
                for _ in 0..n {
                    out.push(device);
                    for k in (0..t).rev() {
                        idx[k] += 1;
                        device += steps[k];
                        if idx[k] < sizes[k] {
                            break;
                        }
                        device -= steps[k] * sizes[k];
                        idx[k] = 0;
                    }
                }
                out
            }
        }
    }

    /// The tile multi-index of every device: `result[d]` is the index where device `d` stands
    /// (`None` for ids that do not appear). Device ids must be below `num_device_ids`.
    pub fn index_of_devices(&self, num_device_ids: usize) -> Vec<Option<Dims>> {
        let mut out = vec![None; num_device_ids];
        for (l, d) in self.devices().into_iter().enumerate() {
            let d = d as usize;
            if d < out.len() {
                out[d] = Some(unravel(l as i64, self.dims()));
            }
        }
        out
    }

    /// The same devices viewed with other dimensions of equal product.
    pub fn reshape(&self, new_dims: &[i64]) -> Option<TileAssignment> {
        if new_dims.iter().product::<i64>() != self.num_devices() {
            return None;
        }
        Some(match self {
            TileAssignment::Explicit { devices, .. } => TileAssignment::Explicit {
                dims: new_dims.iter().copied().collect(),
                devices: devices.clone(),
            },
            TileAssignment::Iota {
                reshape_dims,
                transpose_perm,
                ..
            } => TileAssignment::Iota {
                dims: new_dims.iter().copied().collect(),
                reshape_dims: reshape_dims.clone(),
                transpose_perm: transpose_perm.clone(),
            },
        })
    }

    /// The assignment with its dimensions permuted: new dimension `i` is old dimension
    /// `perm[i]`. An iota stays an iota (in normal form) whenever the transposed devices follow
    /// one, which is always the case when every tile dimension is a product of whole iota
    /// dimensions or splits one evenly; otherwise the device list is written out.
    pub fn transpose(&self, perm: &[usize]) -> TileAssignment {
        let dims = self.dims();
        let new_dims: Dims = perm.iter().map(|&p| dims[p]).collect();
        if let TileAssignment::Iota {
            reshape_dims,
            transpose_perm,
            ..
        } = self
        {
            if let Some(t) =
                iota_transpose(self.num_devices(), dims, reshape_dims, transpose_perm, perm)
            {
                let (reshape_dims, transpose_perm) = t;
                return TileAssignment::Iota {
                    dims: new_dims,
                    reshape_dims,
                    transpose_perm,
                };
            }
        }
        let old_strides = strides(dims);
        let n = self.num_devices();
        let all = self.devices();
        let mut devices = Vec::with_capacity(n as usize);
        for l in 0..n {
            let idx = unravel(l, &new_dims);
            let old: i64 = perm
                .iter()
                .enumerate()
                .map(|(i, &p)| idx[i] * old_strides[p])
                .sum();
            devices.push(all[old as usize]);
        }
        TileAssignment::Explicit {
            dims: new_dims,
            devices,
        }
    }

    /// True if both assign the same device to every tile (whatever their spelling).
    pub fn same_devices(&self, other: &TileAssignment) -> bool {
        self.dims() == other.dims() && self.devices() == other.devices()
    }
}

/// The normal form of `iota(reshape).transpose(iperm)` viewed as `dims` and then transposed by
/// `perm`, without listing devices: the iota's transposed dimensions and `dims` are both cut
/// into common factors ("atoms", each inside one iota dimension and one tile dimension), the
/// atoms are reordered by `perm`, and the result is brought to normal form. `None` when the two
/// factorizations have no common refinement (e.g. `[2,3]` against `[3,2]`) or the iota is
/// malformed.
fn iota_transpose(
    n: i64,
    dims: &[i64],
    reshape: &[i64],
    iperm: &[i64],
    perm: &[usize],
) -> Option<(Small, Small)> {
    let (r, p) = iota_normal_form(n, reshape, iperm)?;
    if perm.len() != dims.len() || dims.iter().product::<i64>() != n {
        return None;
    }
    if n == 1 {
        return Some((r, p));
    }
    // Transposed iota dims (major first): reshape dim p[t] has size r[p[t]].
    let t_dims: Small = if p.is_empty() {
        r.clone()
    } else {
        p.iter().map(|&k| r[k as usize]).collect()
    };
    let t_src = |t: usize| -> usize {
        if p.is_empty() {
            t
        } else {
            p[t] as usize
        }
    };
    // Atoms in array order: (size, transposed iota dim, tile dim).
    let mut atoms: SmallVec<[(i64, usize, usize); 8]> = SmallVec::new();
    let (mut i, mut j) = (0usize, 0usize);
    let (mut rt, mut rd) = (t_dims.first().copied().unwrap_or(1), 0i64);
    while j < dims.len() {
        if rd == 0 {
            rd = dims[j];
        }
        if rd == 1 {
            j += 1;
            rd = 0;
            continue;
        }
        if i >= t_dims.len() {
            return None;
        }
        if rt == rd {
            atoms.push((rt, i, j));
            i += 1;
            j += 1;
            rt = t_dims.get(i).copied().unwrap_or(1);
            rd = 0;
        } else if rd % rt == 0 {
            atoms.push((rt, i, j));
            rd /= rt;
            i += 1;
            rt = t_dims.get(i).copied().unwrap_or(1);
        } else if rt % rd == 0 {
            atoms.push((rd, i, j));
            rt /= rd;
            j += 1;
            rd = 0;
        } else {
            return None;
        }
    }
    if i != t_dims.len() {
        return None;
    }
    // New reshape dims: every reshape dim cut into its atoms, major first. Atoms of one
    // transposed dim are consecutive, and that dim is one reshape dim.
    let mut atom_reshape_index: SmallVec<[usize; 8]> = SmallVec::from_elem(0, atoms.len());
    let mut new_reshape: Small = SmallVec::new();
    for k in 0..r.len() {
        for (a, &(size, t, _)) in atoms.iter().enumerate() {
            if t_src(t) == k {
                atom_reshape_index[a] = new_reshape.len();
                new_reshape.push(size);
            }
        }
    }
    // New order of the atoms: tile dim perm[0]'s atoms, then perm[1]'s, ...
    let mut new_perm: Small = SmallVec::new();
    for &d in perm {
        for (a, &(_, _, j)) in atoms.iter().enumerate() {
            if j == d {
                new_perm.push(atom_reshape_index[a] as i64);
            }
        }
    }
    if new_reshape.is_empty() {
        return Some((SmallVec::from_slice(&[n]), SmallVec::new()));
    }
    iota_normal_form(n, &new_reshape, &new_perm)
}

impl TiledSharding {
    /// Number of trailing subgroup (replicated/manual/...) dimensions of the tile assignment.
    #[inline]
    pub fn num_subgroup_dims(&self) -> usize {
        if self.replicate_on_last_tile_dim {
            1
        } else {
            self.last_tile_dims.len()
        }
    }

    /// Tile dimensions that split the data (the assignment's rank minus subgroup dimensions).
    #[inline]
    pub fn data_rank(&self) -> usize {
        self.tile_assignment
            .rank()
            .saturating_sub(self.num_subgroup_dims())
    }

    /// Tiles per data dimension.
    #[inline]
    pub fn data_tile_dims(&self) -> &[i64] {
        &self.tile_assignment.dims()[..self.data_rank()]
    }

    /// The type of each subgroup dimension.
    pub fn subgroup_types(&self) -> Vec<SubgroupType> {
        if self.replicate_on_last_tile_dim {
            vec![SubgroupType::Replicated]
        } else {
            self.last_tile_dims.clone()
        }
    }

    /// How many devices hold each tile (product of replicated subgroup dimensions).
    pub fn replication_factor(&self) -> i64 {
        let dims = self.tile_assignment.dims();
        let r = self.data_rank();
        self.subgroup_types()
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == SubgroupType::Replicated)
            .map(|(i, _)| dims[r + i])
            .product()
    }
}

/// Per-dimension size of one tile of `dims` split `tiles` ways: `ceil(dim / tiles)`.
pub fn tile_shape(dims: &[i64], tiles: &[i64]) -> Dims {
    dims.iter()
        .zip(tiles)
        .map(|(&d, &t)| if t <= 0 { d } else { (d + t - 1) / t })
        .collect()
}

/// Offset and (clamped) limit of tile `index` of `dims` split by `tiles`; uneven tiles at the
/// end are short (or empty), as the partitioner pads them.
pub fn tile_bounds(dims: &[i64], tiles: &[i64], index: &[i64]) -> (Dims, Dims) {
    let ts = tile_shape(dims, tiles);
    let start: Dims = index
        .iter()
        .zip(&ts)
        .zip(dims)
        .map(|((&i, &t), &d)| (i * t).min(d))
        .collect();
    let limit: Dims = start
        .iter()
        .zip(&ts)
        .zip(dims)
        .map(|((&s, &t), &d)| (s + t).min(d))
        .collect();
    (start, limit)
}

impl Sharding {
    /// Tiled sharding helper: `{devices=[dims]<=[n]}` with `replicate_last` marking the last
    /// dimension as replication.
    pub fn tiled(tile_assignment: TileAssignment, replicate_last: bool) -> Sharding {
        Sharding::new(ShardingKind::Tiled(TiledSharding {
            tile_assignment,
            replicate_on_last_tile_dim: replicate_last,
            last_tile_dims: Vec::new(),
        }))
    }

    #[inline]
    pub fn as_tiled(&self) -> Option<&TiledSharding> {
        match &self.kind {
            ShardingKind::Tiled(t) => Some(t),
            _ => None,
        }
    }

    /// True if every device holds the whole value (replicated, or tiled with one tile).
    pub fn is_fully_replicated(&self) -> bool {
        match &self.kind {
            ShardingKind::Replicated => true,
            ShardingKind::Tiled(t) => {
                t.data_tile_dims().iter().all(|&d| d == 1)
                    && t.subgroup_types()
                        .iter()
                        .all(|s| *s == SubgroupType::Replicated)
            }
            ShardingKind::Tuple(e) => e.iter().all(Sharding::is_fully_replicated),
            ShardingKind::Named(n) => n.to_tiled(None).is_ok_and(|t| t.is_fully_replicated()),
            _ => false,
        }
    }

    /// The number of tiles per data dimension for an array of rank `rank` (all ones when not
    /// tiled); `None` when a tiled sharding's data rank differs from `rank`.
    pub fn tiles_per_dim(&self, rank: usize) -> Option<Dims> {
        match &self.kind {
            ShardingKind::Tiled(t) if t.data_rank() == rank => {
                Some(t.data_tile_dims().iter().copied().collect())
            }
            ShardingKind::Tiled(_) => None,
            ShardingKind::Named(n) => n.to_tiled(Some(rank)).ok()?.tiles_per_dim(rank),
            _ => Some(SmallVec::from_elem(1, rank)),
        }
    }

    /// The shape of the piece each device holds (the padded tile for uneven dimensions).
    pub fn shard_shape(&self, dims: &[i64]) -> Option<Dims> {
        let tiles = self.tiles_per_dim(dims.len())?;
        Some(tile_shape(dims, &tiles))
    }

    /// Where device `device`'s piece starts and ends in the full array (limits clamped to the
    /// array; a padded tile may be shorter or empty). `None` if the device holds no tile.
    pub fn device_bounds(&self, dims: &[i64], device: i64) -> Option<(Dims, Dims)> {
        match &self.kind {
            ShardingKind::Replicated
            | ShardingKind::Manual
            | ShardingKind::Unknown
            | ShardingKind::Unreduced => Some((
                SmallVec::from_elem(0, dims.len()),
                dims.iter().copied().collect(),
            )),
            ShardingKind::Maximal(d) => (*d == device).then(|| {
                (
                    SmallVec::from_elem(0, dims.len()),
                    dims.iter().copied().collect(),
                )
            }),
            ShardingKind::Tiled(t) => {
                if t.data_rank() != dims.len() {
                    return None;
                }
                let ta = &t.tile_assignment;
                let linear = (0..ta.num_devices()).find(|&l| ta.device_at_linear(l) == device)?;
                let idx = unravel(linear, ta.dims());
                Some(tile_bounds(dims, t.data_tile_dims(), &idx[..t.data_rank()]))
            }
            ShardingKind::Tuple(_) => None,
            ShardingKind::Named(n) => n
                .to_tiled(Some(dims.len()))
                .ok()?
                .device_bounds(dims, device),
        }
    }

    /// Groups of devices that differ only along the tile dimensions `along` (for a collective
    /// over those dimensions), each group ordered by its position along them. Groups are
    /// ordered by the remaining dimensions.
    pub fn device_groups(&self, along: &[usize]) -> Option<Vec<Vec<i64>>> {
        let t = self.as_tiled()?;
        let ta = &t.tile_assignment;
        let dims = ta.dims();
        if along.iter().any(|&a| a >= dims.len()) {
            return None;
        }
        let others: Vec<usize> = (0..dims.len()).filter(|d| !along.contains(d)).collect();
        let group_dims: Dims = along.iter().map(|&a| dims[a]).collect();
        let outer_dims: Dims = others.iter().map(|&o| dims[o]).collect();
        let n_groups: i64 = outer_dims.iter().product();
        let group_size: i64 = group_dims.iter().product();
        let mut groups = Vec::with_capacity(n_groups as usize);
        for g in 0..n_groups {
            let outer = unravel(g, &outer_dims);
            let mut group = Vec::with_capacity(group_size as usize);
            for k in 0..group_size {
                let inner = unravel(k, &group_dims);
                let mut idx: Dims = SmallVec::from_elem(0, dims.len());
                for (i, &o) in others.iter().enumerate() {
                    idx[o] = outer[i];
                }
                for (i, &a) in along.iter().enumerate() {
                    idx[a] = inner[i];
                }
                group.push(ta.device_at(&idx));
            }
            groups.push(group);
        }
        Some(groups)
    }
}

/// How the dimensions of a reshape from `from` to `to` group: each group is (source dims,
/// target dims) with equal element counts, the smallest such groups in order.
pub fn reshape_groups(from: &[i64], to: &[i64]) -> Option<Vec<(Vec<usize>, Vec<usize>)>> {
    if from.iter().product::<i64>() != to.iter().product::<i64>() {
        return None;
    }
    let mut groups = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < from.len() || j < to.len() {
        let (mut gi, mut gj) = (Vec::new(), Vec::new());
        let (mut pi, mut pj) = (1i64, 1i64);
        loop {
            if (pi <= pj || j >= to.len())
                && i < from.len()
                && (pi < pj || gi.is_empty() || j >= to.len())
            {
                pi *= from[i];
                gi.push(i);
                i += 1;
            } else if j < to.len() && (pj < pi || gj.is_empty()) {
                pj *= to[j];
                gj.push(j);
                j += 1;
            } else {
                break;
            }
            if pi == pj && !gi.is_empty() && !gj.is_empty() {
                // Absorb trailing size-1 dims into this group so groups stay minimal but total.
                break;
            }
        }
        if pi != pj {
            return None;
        }
        groups.push((gi, gj));
    }
    Some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn iota_t(dims: &[i64], reshape: &[i64], perm: &[i64]) -> TileAssignment {
        TileAssignment::Iota {
            dims: dims.iter().copied().collect(),
            reshape_dims: reshape.iter().copied().collect(),
            transpose_perm: perm.iter().copied().collect(),
        }
    }

    #[test]
    fn iota_with_transpose_lists_devices_like_xla() {
        // [2,4]<=[4,2]T(1,0): iota(8).reshape(4,2).T = [[0,2,4,6],[1,3,5,7]].
        let t = iota_t(&[2, 4], &[4, 2], &[1, 0]);
        assert_eq!(t.devices(), vec![0, 2, 4, 6, 1, 3, 5, 7]);
        // [1,4,2]<=[2,4]T(1,0) (the example's parameter): [[0,4],[1,5],[2,6],[3,7]].
        let t = iota_t(&[1, 4, 2], &[2, 4], &[1, 0]);
        assert_eq!(t.devices(), vec![0, 4, 1, 5, 2, 6, 3, 7]);
    }

    #[test]
    fn transpose_keeps_iota_form_when_it_can() {
        let t = TileAssignment::iota(&[4, 2]);
        let tt = t.transpose(&[1, 0]);
        assert!(matches!(tt, TileAssignment::Iota { .. }));
        assert_eq!(tt.devices(), vec![0, 2, 4, 6, 1, 3, 5, 7]);
        // Back again gives the plain iota.
        assert!(tt.transpose(&[1, 0]).same_devices(&t));
        assert_eq!(tt.transpose(&[1, 0]), t);
    }

    #[test]
    fn transpose_stays_iota_through_split_dimensions() {
        // [2,4]<=[8] seen as [2,2,2], middle and first swapped: XLA's [2,2,2]<=[2,2,2]T(1,0,2).
        let t = TileAssignment::iota(&[2, 2, 2]).transpose(&[1, 0, 2]);
        assert_eq!(t, iota_t(&[2, 2, 2], &[2, 2, 2], &[1, 0, 2]));
        assert_eq!(t.devices(), vec![0, 1, 4, 5, 2, 3, 6, 7]);
        // Tile dimensions that split the iota's dimensions: [4,2]<=[2,4]T(1,0) viewed as
        // [2,2,2] and rotated back is the plain iota.
        let t = iota_t(&[4, 2], &[2, 4], &[1, 0])
            .reshape(&[2, 2, 2])
            .unwrap();
        let tt = t.transpose(&[2, 0, 1]);
        assert_eq!(tt, TileAssignment::iota(&[2, 2, 2]));
        let tt = t.transpose(&[1, 0, 2]);
        assert_eq!(tt, iota_t(&[2, 2, 2], &[2, 2, 2], &[2, 1, 0]));
        assert_eq!(tt.devices(), vec![0, 4, 2, 6, 1, 5, 3, 7]);
        // Transposed iota dims [3,2] against tile dims [2,3] have no common cut, and the
        // transposed devices follow no iota: the list is written out.
        let t = iota_t(&[2, 3], &[2, 3], &[1, 0]);
        assert_eq!(t.devices(), vec![0, 3, 1, 4, 2, 5]);
        let tt = t.transpose(&[1, 0]);
        assert!(matches!(tt, TileAssignment::Explicit { .. }));
        assert_eq!(tt.devices(), vec![0, 4, 3, 2, 1, 5]);
    }

    #[test]
    fn uneven_tiles_are_padded_at_the_end() {
        let s = Sharding::tiled(TileAssignment::iota(&[4]), false);
        assert_eq!(s.shard_shape(&[10]).unwrap().as_slice(), &[3]);
        let b: Vec<_> = (0..4).map(|d| s.device_bounds(&[10], d).unwrap()).collect();
        let pieces: Vec<(i64, i64)> = b.iter().map(|(s, l)| (s[0], l[0])).collect();
        assert_eq!(pieces, vec![(0, 3), (3, 6), (6, 9), (9, 10)]);
    }

    #[test]
    fn device_groups_along_a_dimension() {
        // devices=[2,4]<=[8]: groups along dim 1 are the rows, along dim 0 the columns.
        let s = Sharding::tiled(TileAssignment::iota(&[2, 4]), false);
        assert_eq!(
            s.device_groups(&[1]).unwrap(),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
        );
        assert_eq!(
            s.device_groups(&[0]).unwrap(),
            vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
        );
    }

    #[test]
    fn reshape_groups_are_minimal() {
        let g = reshape_groups(&[2, 3, 4], &[6, 2, 2]).unwrap();
        assert_eq!(g, vec![(vec![0, 1], vec![0]), (vec![2], vec![1, 2])]);
        assert!(reshape_groups(&[2, 3], &[5]).is_none());
    }

    fn arb_dims() -> impl Strategy<Value = Vec<i64>> {
        prop::collection::vec(1i64..5, 1..4)
    }

    proptest! {
        /// Every element of the array is in exactly `replication` device pieces.
        #[test]
        fn tiles_cover_the_array_exactly(dims in arb_dims(), seed in 0u64..1000, repl in 1i64..3) {
            let tiles: Vec<i64> = dims.iter().enumerate().map(|(i, &d)| 1 + ((seed >> (2 * i)) as i64 % d.max(1))).collect();
            let mut tdims = tiles.clone();
            if repl > 1 { tdims.push(repl); }
            let n: i64 = tdims.iter().product();
            let s = Sharding::tiled(TileAssignment::iota(&tdims), repl > 1);
            let total: i64 = dims.iter().product();
            let mut count = vec![0i64; total as usize];
            for d in 0..n {
                let (st, li) = s.device_bounds(&dims, d).unwrap();
                let shard = s.shard_shape(&dims).unwrap();
                for i in 0..dims.len() { prop_assert!(li[i] - st[i] <= shard[i]); }
                for l in 0..total {
                    let idx = unravel(l, &dims);
                    if (0..dims.len()).all(|i| idx[i] >= st[i] && idx[i] < li[i]) { count[l as usize] += 1; }
                }
            }
            prop_assert!(count.iter().all(|&c| c == repl));
        }

        /// Tile arithmetic on one uneven dimension: tiles are `ceil(d / t)` long, laid end to end
        /// from 0, the last non-empty one clamped at `d`, the rest empty at `d`.
        #[test]
        fn uneven_tile_offsets(d in 1i64..60, t in 1i64..12) {
            let size = tile_shape(&[d], &[t])[0];
            prop_assert_eq!(size, (d + t - 1) / t);
            let mut next = 0;
            let mut nonempty = 0;
            for i in 0..t {
                let (start, limit) = tile_bounds(&[d], &[t], &[i]);
                prop_assert_eq!(start[0], next.min(d));
                prop_assert!(limit[0] - start[0] <= size);
                prop_assert!(limit[0] <= d);
                if limit[0] > start[0] {
                    nonempty += 1;
                    // Only the last non-empty tile may be short.
                    if limit[0] - start[0] < size {
                        prop_assert_eq!(limit[0], d);
                    }
                }
                next = limit[0];
            }
            prop_assert_eq!(next, d);
            prop_assert_eq!(nonempty, (d + size - 1) / size);
        }

        /// A sharding's device pieces under `transpose(perm)` are the original pieces with their
        /// dimensions permuted, partial replication included, and transposing back restores it.
        #[test]
        fn sharding_transpose_moves_pieces(dims in arb_dims(), seed in 0u64..1000, rot in 0usize..3, repl in 1i64..3) {
            let r = dims.len();
            let tiles: Vec<i64> = dims.iter().enumerate().map(|(i, &d)| 1 + ((seed >> (2 * i)) as i64 % d)).collect();
            let mut tdims = tiles.clone();
            if repl > 1 { tdims.push(repl); }
            let s = Sharding::tiled(TileAssignment::iota(&tdims), repl > 1);
            let perm: Vec<usize> = (0..r).map(|i| (i + rot) % r).collect();
            let mut inv = vec![0; r];
            for (i, &p) in perm.iter().enumerate() { inv[p] = i; }
            let t = s.transpose(&perm).unwrap();
            let tshape: Vec<i64> = perm.iter().map(|&p| dims[p]).collect();
            let n: i64 = tdims.iter().product();
            for dev in 0..n {
                let (st, li) = s.device_bounds(&dims, dev).unwrap();
                let (tst, tli) = t.device_bounds(&tshape, dev).unwrap();
                for (j, &p) in perm.iter().enumerate() {
                    prop_assert_eq!((tst[j], tli[j]), (st[p], li[p]));
                }
            }
            let back = t.transpose(&inv).unwrap();
            for dev in 0..n {
                prop_assert_eq!(back.device_bounds(&dims, dev), s.device_bounds(&dims, dev));
            }
        }

        /// Transposing a tile assignment and back is the identity on devices.
        #[test]
        fn transpose_round_trip(dims in arb_dims(), rot in 0usize..3) {
            let r = dims.len();
            let perm: Vec<usize> = (0..r).map(|i| (i + rot) % r).collect();
            let mut inv = vec![0; r];
            for (i, &p) in perm.iter().enumerate() { inv[p] = i; }
            let t = TileAssignment::iota(&dims);
            let back = t.transpose(&perm).transpose(&inv);
            prop_assert!(back.same_devices(&t));
            // A transposed iota still lists every device once.
            let mut devs = t.transpose(&perm).devices();
            devs.sort();
            prop_assert_eq!(devs, (0..dims.iter().product::<i64>()).collect::<Vec<_>>());
        }

        /// A sharding kept through reshape and reshaped back gives the same device pieces.
        #[test]
        fn reshape_round_trip(a in 1i64..4, b in 1i64..4, c in 1i64..4, tiles in 1i64..3) {
            let from = [a * tiles, b, c];
            let to = [a * tiles * b, c];
            let s = Sharding::tiled(TileAssignment::iota(&[tiles, 1, 1]), false);
            let back = s
                .propagate_through_reshape(&from, &to)
                .propagate_through_reshape(&to, &from);
            for d in 0..tiles {
                prop_assert_eq!(back.device_bounds(&from, d), s.device_bounds(&from, d));
            }
        }
    }
}
