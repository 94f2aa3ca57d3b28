//! Sharded I/O: splitting global host arrays into per-device shards by a
//! [`tessera_hlo::Sharding`], and assembling per-device results back.
//!
//! What each device holds, for an array of dimensions `dims` on devices `0..n`:
//!
//! | sharding | device `d` holds |
//! |---|---|
//! | `replicated` | the whole array |
//! | `maximal device=k` | device `k`: the whole array; every other device: zeros of the same shape (the partitioner only reads the owner's copy) |
//! | tiled `devices=[t0,..,tr-1(,subgroups)]` | the tile at its position, of the padded tile shape `ceil(dims[i] / t[i])`; elements past the end of the array are zeros, as XLA's SPMD partitioner expects |
//! | `last_tile_dim_replicate` / `last_tile_dims={replicated}` | devices that differ only in the replicated subgroup dimensions hold the same tile |
//! | `manual` | its own piece: the global array has one extra leading dimension of size `n`, and device `d` holds `global[d]` |
//! | `last_tile_dims={manual}` | as tiled, and the global array has one extra leading dimension (the product of the manual subgroup dimensions), indexed row-major by the device's manual coordinates |
//! | tuple | one sharding per leaf of a tuple shape (pre-order); a non-tuple sharding on a tuple applies to every leaf |
//!
//! `unknown`, `unreduced` and `last_tile_dims={unreduced|maximal}` have no host meaning here and
//! are refused with [`ShardError::Unsupported`].
//!
//! Assembly is the inverse: every device's valid region (its tile without the padding) is copied
//! into the global array. Devices that should hold the same elements (the replicas of a tile, or
//! every device of a replicated value) are compared element by element; disagreements are
//! reported with the devices, the element's global index and both values, never silently
//! resolved (the first device of each replica group, in tile-assignment order, wins).

use tessera_hlo::sharding::SubgroupType;
use tessera_hlo::tiling::{tile_bounds, tile_shape};
use tessera_hlo::{ElementType as HloElementType, Shape, Sharding, ShardingKind};

use crate::host::{decode, strides, unravel, HostArray, HostValue, Scalar};

/// Errors of splitting and assembling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("{place}: sharding {what} is not supported for host I/O")]
    Unsupported { place: String, what: String },
    #[error("{place}: {message}")]
    Invalid { place: String, message: String },
    #[error("{place}: expected {expected}, got {found}")]
    Mismatch {
        place: String,
        expected: String,
        found: String,
    },
}

/// How one device's piece maps onto the global array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub device: i64,
    /// Index into the leading manual dimension of the global array, when there is one.
    pub manual_index: Option<i64>,
    /// Start and (clamped) limit of the valid region in the global array's data dimensions.
    pub start: Vec<i64>,
    pub limit: Vec<i64>,
    /// Which replica group the device belongs to (devices of one group hold the same data).
    pub group: usize,
    /// False for the non-owners of a maximal sharding: they hold zeros, not data.
    pub holds_data: bool,
}

/// The layout of one array leaf over the devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardLayout {
    pub ty: HloElementType,
    /// Dimensions of the global array (with the leading manual dimension, if any).
    pub global_dims: Vec<i64>,
    /// Dimensions each device holds.
    pub shard_dims: Vec<i64>,
    /// Size of the leading manual dimension of the global array, if any.
    pub manual_dim: Option<i64>,
    /// One entry per device, indexed by device id.
    pub placements: Vec<Placement>,
}

/// A disagreement between two devices that should hold the same element.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaMismatch {
    /// Tuple index path of the leaf (empty for an array).
    pub leaf: Vec<usize>,
    /// Global index of the element.
    pub index: Vec<i64>,
    /// The device whose value was kept, and its value.
    pub reference: (i64, Scalar),
    /// The disagreeing device and its value.
    pub other: (i64, Scalar),
}

impl std::fmt::Display for ReplicaMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.leaf.is_empty() {
            write!(f, "leaf {:?} ", self.leaf)?;
        }
        write!(
            f,
            "element {:?}: device {} has {}, device {} has {}",
            self.index, self.reference.0, self.reference.1, self.other.0, self.other.1
        )
    }
}

/// The result of assembling: the global value and the replica disagreements found.
#[derive(Clone, Debug, PartialEq)]
pub struct Assembled {
    pub value: HostValue,
    /// The first disagreements (at most `MAX_REPORTED` per leaf), in device then element order.
    pub mismatches: Vec<ReplicaMismatch>,
    /// How many elements disagreed in total (all leaves, all device pairs).
    pub mismatch_count: u64,
}

/// Disagreements recorded per leaf; the rest are only counted.
pub const MAX_REPORTED: usize = 16;

fn place(leaf: &[usize]) -> String {
    if leaf.is_empty() {
        "array".to_string()
    } else {
        let p: Vec<String> = leaf.iter().map(usize::to_string).collect();
        format!("tuple element {{{}}}", p.join(","))
    }
}

fn dims_string(ty: HloElementType, dims: &[i64]) -> String {
    let d: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("{ty}[{}]", d.join(","))
}

/// The sharding of every array leaf of `shape`, in pre-order: a tuple sharding lists them; any
/// other sharding applies to every leaf.
pub fn leaf_shardings(shape: &Shape, sharding: &Sharding) -> Result<Vec<Sharding>, ShardError> {
    let n = shape.leaf_count();
    match &sharding.kind {
        ShardingKind::Tuple(e) if shape.is_tuple() => {
            if e.len() != n {
                return Err(ShardError::Mismatch {
                    place: "tuple sharding".into(),
                    expected: format!("{n} leaf shardings"),
                    found: format!("{}", e.len()),
                });
            }
            Ok(e.clone())
        }
        ShardingKind::Tuple(e) if e.len() == 1 => Ok(e.clone()),
        ShardingKind::Tuple(e) => Err(ShardError::Mismatch {
            place: "array".into(),
            expected: "a non-tuple sharding".into(),
            found: format!("a tuple sharding of {} elements", e.len()),
        }),
        _ => Ok(vec![sharding.clone(); n]),
    }
}

/// Tuple index paths of the leaves of `shape`, pre-order.
pub fn leaf_paths(shape: &Shape) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    shape.for_each_subshape(|idx, s| {
        if !s.is_tuple() {
            out.push(idx.to_vec());
        }
    });
    out
}

/// How an array `ty[data_dims]` lies on devices `0..num_devices` under an array `sharding`.
///
/// `data_dims` are the dimensions of the array the program sees (the one the sharding
/// describes). For manual shardings the returned `global_dims` carry the extra leading
/// dimension of the host-side global array. `leaf` only names the place in errors.
pub fn layout(
    ty: HloElementType,
    data_dims: &[i64],
    sharding: &Sharding,
    num_devices: usize,
    leaf: &[usize],
) -> Result<ShardLayout, ShardError> {
    let n = num_devices as i64;
    let whole = |device: i64, group: usize, holds_data: bool| Placement {
        device,
        manual_index: None,
        start: vec![0; data_dims.len()],
        limit: data_dims.to_vec(),
        group,
        holds_data,
    };
    let unsupported = |what: &str| ShardError::Unsupported {
        place: place(leaf),
        what: what.to_string(),
    };
    match &sharding.kind {
        ShardingKind::Replicated => Ok(ShardLayout {
            ty,
            global_dims: data_dims.to_vec(),
            shard_dims: data_dims.to_vec(),
            manual_dim: None,
            placements: (0..n).map(|d| whole(d, 0, true)).collect(),
        }),
        ShardingKind::Maximal(k) => {
            if *k < 0 || *k >= n {
                return Err(ShardError::Invalid {
                    place: place(leaf),
                    message: format!("maximal device {k} is not one of the {n} devices"),
                });
            }
            Ok(ShardLayout {
                ty,
                global_dims: data_dims.to_vec(),
                shard_dims: data_dims.to_vec(),
                manual_dim: None,
                placements: (0..n).map(|d| whole(d, d as usize, d == *k)).collect(),
            })
        }
        ShardingKind::Manual => {
            let mut global = vec![n];
            global.extend_from_slice(data_dims);
            Ok(ShardLayout {
                ty,
                global_dims: global,
                shard_dims: data_dims.to_vec(),
                manual_dim: Some(n),
                placements: (0..n)
                    .map(|d| Placement {
                        manual_index: Some(d),
                        ..whole(d, d as usize, true)
                    })
                    .collect(),
            })
        }
        ShardingKind::Unknown => Err(unsupported("{unknown}")),
        ShardingKind::Unreduced => Err(unsupported("{unreduced}")),
        ShardingKind::Tuple(_) => Err(ShardError::Mismatch {
            place: place(leaf),
            expected: "an array sharding".into(),
            found: "a tuple sharding".into(),
        }),
        // The same layout as its tiled equivalent (XLA's `V3ToV2Sharding`).
        ShardingKind::Named(nm) => {
            let t = nm
                .to_tiled(Some(data_dims.len()))
                .map_err(|message| ShardError::Invalid {
                    place: place(leaf),
                    message,
                })?;
            layout(ty, data_dims, &t, num_devices, leaf)
        }
        ShardingKind::Tiled(t) => {
            let ta = &t.tile_assignment;
            let r = t.data_rank();
            if r != data_dims.len() {
                return Err(ShardError::Mismatch {
                    place: place(leaf),
                    expected: format!(
                        "a sharding with {} data tile dimensions for {}",
                        data_dims.len(),
                        dims_string(ty, data_dims)
                    ),
                    found: format!("{r} (tile assignment {:?})", ta.dims()),
                });
            }
            if t.num_subgroup_dims() > ta.rank() {
                return Err(ShardError::Invalid {
                    place: place(leaf),
                    message: "more subgroup dimensions than tile dimensions".into(),
                });
            }
            let types = t.subgroup_types();
            if let Some(bad) = types
                .iter()
                .find(|s| !matches!(s, SubgroupType::Replicated | SubgroupType::Manual))
            {
                return Err(unsupported(&format!("last_tile_dims with {bad:?}")));
            }
            if ta.num_devices() != n {
                return Err(ShardError::Mismatch {
                    place: place(leaf),
                    expected: format!("a tile assignment over {n} devices"),
                    found: format!("{} devices ({:?})", ta.num_devices(), ta.dims()),
                });
            }
            let tdims = ta.dims().to_vec();
            let manual_axes: Vec<usize> = types
                .iter()
                .enumerate()
                .filter(|(_, s)| **s == SubgroupType::Manual)
                .map(|(i, _)| r + i)
                .collect();
            let manual_size: i64 = manual_axes.iter().map(|&a| tdims[a]).product();
            let tiles = t.data_tile_dims();
            let shard = tile_shape(data_dims, tiles).to_vec();
            let mut placements: Vec<Option<Placement>> = vec![None; num_devices];
            // Replica groups: devices with the same data tile and manual coordinates.
            let mut group_keys: Vec<(Vec<i64>, i64)> = Vec::new();
            for l in 0..ta.num_devices() {
                let device = ta.device_at_linear(l);
                let idx = unravel(l as usize, &tdims);
                let mi = manual_axes
                    .iter()
                    .fold(0i64, |acc, &a| acc * tdims[a] + idx[a]);
                let (start, limit) = tile_bounds(data_dims, tiles, &idx[..r]);
                let key = (idx[..r].to_vec(), mi);
                let group = match group_keys.iter().position(|k| *k == key) {
                    Some(g) => g,
                    None => {
                        group_keys.push(key);
                        group_keys.len() - 1
                    }
                };
                let slot = usize::try_from(device)
                    .ok()
                    .and_then(|d| placements.get_mut(d))
                    .ok_or_else(|| ShardError::Invalid {
                        place: place(leaf),
                        message: format!("device {device} is not one of the {n} devices"),
                    })?;
                if slot.is_some() {
                    return Err(ShardError::Invalid {
                        place: place(leaf),
                        message: format!("device {device} appears twice in the tile assignment"),
                    });
                }
                *slot = Some(Placement {
                    device,
                    manual_index: (!manual_axes.is_empty()).then_some(mi),
                    start: start.to_vec(),
                    limit: limit.to_vec(),
                    group,
                    holds_data: true,
                });
            }
            let placements: Vec<Placement> = placements
                .into_iter()
                .map(|p| p.expect("n distinct devices below n fill every slot"))
                .collect();
            let (global_dims, manual_dim) = if manual_axes.is_empty() {
                (data_dims.to_vec(), None)
            } else {
                let mut g = vec![manual_size];
                g.extend_from_slice(data_dims);
                (g, Some(manual_size))
            };
            Ok(ShardLayout {
                ty,
                global_dims,
                shard_dims: shard,
                manual_dim,
                placements,
            })
        }
    }
}

/// Copies the box `extent` starting at `src_start` in `src` (dims `src_dims`) to `dst_start` in
/// `dst` (dims `dst_dims`); `w` bytes per element.
#[allow(clippy::too_many_arguments)]
fn copy_box(
    src: &[u8],
    src_dims: &[i64],
    src_start: &[i64],
    dst: &mut [u8],
    dst_dims: &[i64],
    dst_start: &[i64],
    extent: &[i64],
    w: usize,
) {
    if extent.iter().any(|&e| e <= 0) {
        return;
    }
    let rank = extent.len();
    if rank == 0 {
        dst[..w].copy_from_slice(&src[..w]);
        return;
    }
    let ss = strides(src_dims);
    let ds = strides(dst_dims);
    let row = extent[rank - 1] as usize * w;
    let outer = &extent[..rank - 1];
    let rows: usize = outer.iter().map(|&e| e as usize).product();
    for r in 0..rows {
        let idx = unravel(r, outer);
        let mut so = src_start[rank - 1] as usize;
        let mut d_o = dst_start[rank - 1] as usize;
        for i in 0..rank - 1 {
            so += (src_start[i] + idx[i]) as usize * ss[i];
            d_o += (dst_start[i] + idx[i]) as usize * ds[i];
        }
        dst[d_o * w..d_o * w + row].copy_from_slice(&src[so * w..so * w + row]);
    }
}

impl ShardLayout {
    /// Cuts `global` into one piece per device (index = device id).
    pub fn split(&self, global: &HostArray, leaf: &[usize]) -> Result<Vec<HostArray>, ShardError> {
        if global.ty != self.ty || global.dims != self.global_dims {
            return Err(ShardError::Mismatch {
                place: place(leaf),
                expected: dims_string(self.ty, &self.global_dims),
                found: global.shape_string(),
            });
        }
        let w = self.ty.byte_size();
        let data_dims = &self.global_dims[self.manual_dim.map_or(0, |_| 1)..];
        let per_manual = data_dims.iter().product::<i64>() as usize * w;
        Ok(self
            .placements
            .iter()
            .map(|p| {
                let mut out = HostArray::zeros(self.ty, &self.shard_dims);
                if p.holds_data {
                    let src = match p.manual_index {
                        Some(m) => &global.data[m as usize * per_manual..][..per_manual],
                        None => &global.data[..],
                    };
                    let extent: Vec<i64> =
                        p.limit.iter().zip(&p.start).map(|(l, s)| l - s).collect();
                    copy_box(
                        src,
                        data_dims,
                        &p.start,
                        &mut out.data,
                        &self.shard_dims,
                        &vec![0; extent.len()],
                        &extent,
                        w,
                    );
                }
                out
            })
            .collect())
    }

    /// Puts per-device pieces (index = device id) back together, comparing replicas.
    pub fn assemble(
        &self,
        pieces: &[&HostArray],
        leaf: &[usize],
        mismatches: &mut Vec<ReplicaMismatch>,
        mismatch_count: &mut u64,
    ) -> Result<HostArray, ShardError> {
        if pieces.len() != self.placements.len() {
            return Err(ShardError::Mismatch {
                place: place(leaf),
                expected: format!("{} per-device pieces", self.placements.len()),
                found: pieces.len().to_string(),
            });
        }
        for (d, p) in pieces.iter().enumerate() {
            if p.ty != self.ty || p.dims != self.shard_dims {
                return Err(ShardError::Mismatch {
                    place: format!("{} on device {d}", place(leaf)),
                    expected: dims_string(self.ty, &self.shard_dims),
                    found: p.shape_string(),
                });
            }
        }
        let w = self.ty.byte_size();
        let data_dims = &self.global_dims[self.manual_dim.map_or(0, |_| 1)..];
        let per_manual = data_dims.iter().product::<i64>() as usize * w;
        let mut global = HostArray::zeros(self.ty, &self.global_dims);
        // The first device of each group (in tile-assignment order = placement order by device
        // id here) is the reference the others are compared with.
        let mut reference: Vec<Option<usize>> = Vec::new();
        let leaf_reported_before = mismatches.len();
        for (d, p) in self.placements.iter().enumerate() {
            if !p.holds_data {
                continue;
            }
            if reference.len() <= p.group {
                reference.resize(p.group + 1, None);
            }
            let extent: Vec<i64> = p.limit.iter().zip(&p.start).map(|(l, s)| l - s).collect();
            match reference[p.group] {
                None => {
                    reference[p.group] = Some(d);
                    let dst = match p.manual_index {
                        Some(m) => &mut global.data[m as usize * per_manual..][..per_manual],
                        None => &mut global.data[..],
                    };
                    copy_box(
                        &pieces[d].data,
                        &self.shard_dims,
                        &vec![0; extent.len()],
                        dst,
                        data_dims,
                        &p.start,
                        &extent,
                        w,
                    );
                }
                Some(r) => {
                    // Same group: same tile, same shard coordinates; compare the valid region
                    // row by row, element by element only inside rows whose bytes differ.
                    if extent.iter().any(|&e| e <= 0) {
                        continue;
                    }
                    let rank = extent.len();
                    let ss = strides(&self.shard_dims);
                    let (outer, row) = match rank {
                        0 => (&extent[..0], 1usize),
                        _ => (&extent[..rank - 1], extent[rank - 1] as usize),
                    };
                    let rows: usize = outer.iter().map(|&e| e as usize).product();
                    for ri in 0..rows {
                        let oidx = unravel(ri, outer);
                        let base: usize = oidx.iter().zip(&ss).map(|(&i, s)| i as usize * s).sum();
                        let ra = &pieces[r].data[base * w..(base + row) * w];
                        let rb = &pieces[d].data[base * w..(base + row) * w];
                        if ra == rb {
                            continue;
                        }
                        for j in 0..row {
                            let (a, b) = (&ra[j * w..(j + 1) * w], &rb[j * w..(j + 1) * w]);
                            if a == b {
                                continue;
                            }
                            let (va, vb) = (decode(self.ty, a), decode(self.ty, b));
                            if same_value(va, vb) {
                                continue;
                            }
                            *mismatch_count += 1;
                            if mismatches.len() - leaf_reported_before < MAX_REPORTED {
                                let mut index: Vec<i64> = p.manual_index.into_iter().collect();
                                index.extend(oidx.iter().zip(&p.start).map(|(i, s)| i + s));
                                if rank > 0 {
                                    index.push(p.start[rank - 1] + j as i64);
                                }
                                mismatches.push(ReplicaMismatch {
                                    leaf: leaf.to_vec(),
                                    index,
                                    reference: (self.placements[r].device, va),
                                    other: (p.device, vb),
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(global)
    }
}

/// Replicas agree when their bytes do, or when they are equal numbers (`0.0 == -0.0`) or both
/// NaN (any payload).
fn same_value(a: Scalar, b: Scalar) -> bool {
    match (a, b) {
        (Scalar::Float(x), Scalar::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Scalar::Complex(a, b), Scalar::Complex(c, d)) => {
            (a == c || (a.is_nan() && c.is_nan())) && (b == d || (b.is_nan() && d.is_nan()))
        }
        _ => a == b,
    }
}

/// The shape each device holds for a value of `shape` under `sharding` (the shape of the
/// partitioned program's parameter or result). For a manual sharding, `shape` is the
/// per-device shape already and comes back unchanged.
pub fn shard_shape(
    shape: &Shape,
    sharding: &Sharding,
    num_devices: usize,
) -> Result<Shape, ShardError> {
    let shardings = leaf_shardings(shape, sharding)?;
    let paths = leaf_paths(shape);
    let mut out = shape.clone();
    out.clear_layouts();
    for (path, s) in paths.iter().zip(&shardings) {
        let sub = out
            .subshape_mut(path)
            .expect("leaf paths come from the shape");
        if let Shape::Array(a) = sub {
            let l = layout(a.ty, &a.dims, s, num_devices, path)?;
            *sub = Shape::array(a.ty, &l.shard_dims);
        }
    }
    Ok(out)
}

/// Splits a global value of `shape` into one value per device (index = device id).
///
/// For a leaf with a manual sharding (or manual subgroups), the global array carries the extra
/// leading dimension described in the module docs, and `shape` describes it *without* that
/// dimension (the shape the program sees).
pub fn split(
    value: &HostValue,
    shape: &Shape,
    sharding: &Sharding,
    num_devices: usize,
) -> Result<Vec<HostValue>, ShardError> {
    let shardings = leaf_shardings(shape, sharding)?;
    let paths = leaf_paths(shape);
    let leaves = value.leaves();
    if leaves.len() != paths.len() {
        return Err(ShardError::Mismatch {
            place: "value".into(),
            expected: format!("{} arrays", paths.len()),
            found: leaves.len().to_string(),
        });
    }
    let mut per_device: Vec<Vec<HostArray>> = vec![Vec::new(); num_devices];
    for ((path, s), global) in paths.iter().zip(&shardings).zip(leaves) {
        let a = shape
            .subshape(path)
            .and_then(Shape::as_array)
            .ok_or_else(|| ShardError::Unsupported {
                place: place(path),
                what: "on a token or opaque value".into(),
            })?;
        let l = layout(a.ty, &a.dims, s, num_devices, path)?;
        for (d, piece) in l.split(global, path)?.into_iter().enumerate() {
            per_device[d].push(piece);
        }
    }
    let mut dev_shape = shard_shape(shape, sharding, num_devices)?;
    dev_shape.clear_layouts();
    per_device
        .into_iter()
        .map(|leaves| {
            HostValue::from_leaves(&dev_shape, leaves).map_err(|e| ShardError::Invalid {
                place: "value".into(),
                message: e.to_string(),
            })
        })
        .collect()
}

/// Assembles per-device values (index = device id) of a value of `shape` under `sharding`.
pub fn assemble(
    pieces: &[HostValue],
    shape: &Shape,
    sharding: &Sharding,
) -> Result<Assembled, ShardError> {
    let shardings = leaf_shardings(shape, sharding)?;
    let paths = leaf_paths(shape);
    let per_device: Vec<Vec<&HostArray>> = pieces.iter().map(HostValue::leaves).collect();
    for (d, l) in per_device.iter().enumerate() {
        if l.len() != paths.len() {
            return Err(ShardError::Mismatch {
                place: format!("value on device {d}"),
                expected: format!("{} arrays", paths.len()),
                found: l.len().to_string(),
            });
        }
    }
    let mut mismatches = Vec::new();
    let mut count = 0u64;
    let mut leaves = Vec::with_capacity(paths.len());
    for (i, (path, s)) in paths.iter().zip(&shardings).enumerate() {
        let a = shape
            .subshape(path)
            .and_then(Shape::as_array)
            .ok_or_else(|| ShardError::Unsupported {
                place: place(path),
                what: "on a token or opaque value".into(),
            })?;
        let l = layout(a.ty, &a.dims, s, pieces.len(), path)?;
        let mine: Vec<&HostArray> = per_device.iter().map(|p| p[i]).collect();
        leaves.push(l.assemble(&mine, path, &mut mismatches, &mut count)?);
    }
    let mut global_shape = shape.clone();
    global_shape.clear_layouts();
    for (path, leaf) in paths.iter().zip(&leaves) {
        if let Some(sub) = global_shape.subshape_mut(path) {
            *sub = leaf.shape();
        }
    }
    let value = HostValue::from_leaves(&global_shape, leaves).map_err(|e| ShardError::Invalid {
        place: "value".into(),
        message: e.to_string(),
    })?;
    Ok(Assembled {
        value,
        mismatches,
        mismatch_count: count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::sharding::TiledSharding;
    use tessera_hlo::TileAssignment;

    fn iota_f32(dims: &[i64]) -> HostArray {
        let n: i64 = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
        HostArray::f32(dims, &v).unwrap()
    }

    fn f32s(a: &HostValue) -> Vec<f32> {
        a.as_array().unwrap().to_f32().unwrap()
    }

    fn tiled(dims: &[i64], replicate_last: bool) -> Sharding {
        Sharding::tiled(TileAssignment::iota(dims), replicate_last)
    }

    fn round_trip(global: &HostArray, s: &Sharding, n: usize) -> Vec<HostValue> {
        let shape = global.shape();
        let v = HostValue::Array(global.clone());
        let pieces = split(
            &v,
            &Shape::array(global.ty, &data_dims_of(global, s, n)),
            s,
            n,
        )
        .unwrap();
        let back = assemble(
            &pieces,
            &Shape::array(global.ty, &data_dims_of(global, s, n)),
            s,
        )
        .unwrap();
        assert_eq!(back.value, v, "round trip of {shape:?} under {s:?}");
        assert_eq!(back.mismatch_count, 0);
        pieces
    }

    /// The program-visible dims: without the manual leading dimension.
    fn data_dims_of(global: &HostArray, s: &Sharding, n: usize) -> Vec<i64> {
        let manual = match &s.kind {
            ShardingKind::Manual => true,
            ShardingKind::Tiled(t) => t.subgroup_types().contains(&SubgroupType::Manual),
            _ => false,
        };
        let _ = n;
        if manual {
            global.dims[1..].to_vec()
        } else {
            global.dims.clone()
        }
    }

    #[test]
    fn uneven_tiles_are_padded_with_zeros() {
        // f32[5] over 2 devices: tiles of 3; device 1 holds [3, 4, 0].
        let g = iota_f32(&[5]);
        let p = round_trip(&g, &tiled(&[2], false), 2);
        assert_eq!(f32s(&p[0]), vec![0.0, 1.0, 2.0]);
        assert_eq!(f32s(&p[1]), vec![3.0, 4.0, 0.0]);
        // f32[10] over 4: tiles of 3, the last device holds one element and two zeros.
        let g = iota_f32(&[10]);
        let p = round_trip(&g, &tiled(&[4], false), 4);
        assert_eq!(f32s(&p[3]), vec![9.0, 0.0, 0.0]);
        // f32[2] over 4: ceil = 1; devices 2 and 3 hold only padding.
        let p = round_trip(&iota_f32(&[2]), &tiled(&[4], false), 4);
        assert_eq!(f32s(&p[2]), vec![0.0]);
        assert_eq!(f32s(&p[3]), vec![0.0]);
    }

    #[test]
    fn two_dim_tiling_with_transposed_iota() {
        // f32[4,6] on devices=[2,2]<=[2,2]T(1,0): device at (i,j) is 2*j+i.
        let s = Sharding::tiled(
            TileAssignment::Iota {
                dims: [2, 2].into_iter().collect(),
                reshape_dims: [2, 2].into_iter().collect(),
                transpose_perm: [1, 0].into_iter().collect(),
            },
            false,
        );
        let p = round_trip(&iota_f32(&[4, 6]), &s, 4);
        // Device 1 holds tile (1,0): rows 2..4, cols 0..3.
        assert_eq!(f32s(&p[1]), vec![12.0, 13.0, 14.0, 18.0, 19.0, 20.0]);
        // Device 2 holds tile (0,1): rows 0..2, cols 3..6.
        assert_eq!(f32s(&p[2]), vec![3.0, 4.0, 5.0, 9.0, 10.0, 11.0]);
    }

    #[test]
    fn named_shardings_lay_out_as_their_tiled_equivalent() {
        // f32[4,6] on mesh x=2,y=2 with [{'y'}, {'x'}]: rows over y, columns over x; device
        // (x,y) = 2x+y holds rows 2y.., columns 3x.. (the same as devices=[2,2]<=[2,2]T(1,0)).
        let s = tessera_hlo::text::parse_sharding("{mesh['x'=2,'y'=2], [{'y'}, {'x'}]}").unwrap();
        let p = round_trip(&iota_f32(&[4, 6]), &s, 4);
        // Device 1 (x=0, y=1): rows 2..4, cols 0..3.
        assert_eq!(f32s(&p[1]), vec![12.0, 13.0, 14.0, 18.0, 19.0, 20.0]);
        // Device 2 (x=1, y=0): rows 0..2, cols 3..6.
        assert_eq!(f32s(&p[2]), vec![3.0, 4.0, 5.0, 9.0, 10.0, 11.0]);
        // Replicated over y, rows over x, explicit device order: device 3 is mesh point (0,0).
        let s = tessera_hlo::text::parse_sharding(
            "{mesh['x'=2,'y'=2], device_ids=(3,2,1,0), [{'x'}, {}]}",
        )
        .unwrap();
        let p = round_trip(&iota_f32(&[4, 2]), &s, 4);
        assert_eq!(f32s(&p[3]), vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(f32s(&p[2]), vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(f32s(&p[0]), vec![4.0, 5.0, 6.0, 7.0]);
        // A dimension list that does not fit the array is an error, not a panic.
        let s = tessera_hlo::text::parse_sharding("{mesh['x'=2], [{'x'}, {}]}").unwrap();
        let shape = Shape::array(HloElementType::F32, &[4]);
        let v = HostValue::Array(iota_f32(&[4]));
        assert!(split(&v, &shape, &s, 2).is_err());
    }

    #[test]
    fn partial_replication_gives_equal_pieces() {
        // f32[4,2] devices=[2,1,2]<=[4] last_tile_dim_replicate: {0,1} rows 0..2, {2,3} rows 2..4.
        let p = round_trip(&iota_f32(&[4, 2]), &tiled(&[2, 1, 2], true), 4);
        assert_eq!(f32s(&p[0]), f32s(&p[1]));
        assert_eq!(f32s(&p[2]), vec![4.0, 5.0, 6.0, 7.0]);
        assert_eq!(f32s(&p[3]), f32s(&p[2]));
        // The same through last_tile_dims={replicated}.
        let s = Sharding::new(ShardingKind::Tiled(TiledSharding {
            tile_assignment: TileAssignment::iota(&[2, 1, 2]),
            replicate_on_last_tile_dim: false,
            last_tile_dims: vec![SubgroupType::Replicated],
        }));
        let q = round_trip(&iota_f32(&[4, 2]), &s, 4);
        assert_eq!(p, q);
    }

    #[test]
    fn replicated_maximal_and_manual() {
        let g = iota_f32(&[3]);
        let p = round_trip(&g, &Sharding::replicated(), 3);
        assert!(p.iter().all(|x| f32s(x) == vec![0.0, 1.0, 2.0]));
        let p = round_trip(&g, &Sharding::maximal(1), 3);
        assert_eq!(f32s(&p[0]), vec![0.0; 3]);
        assert_eq!(f32s(&p[1]), vec![0.0, 1.0, 2.0]);
        // Manual: the global array has a leading device dimension.
        let p = round_trip(&iota_f32(&[2, 3]), &Sharding::manual(), 2);
        assert_eq!(f32s(&p[1]), vec![3.0, 4.0, 5.0]);
        let e = layout(HloElementType::F32, &[3], &Sharding::maximal(5), 3, &[]).unwrap_err();
        assert!(e.to_string().contains("maximal device 5"), "{e}");
    }

    #[test]
    fn manual_subgroups_add_a_leading_dimension() {
        // f32[4] devices=[2,2]<=[4] last_tile_dims={manual}: manual groups {0,2} and {1,3}?
        // Device at (i, m) = 2*i + m: tile i of manual region m.
        let s = Sharding::new(ShardingKind::Tiled(TiledSharding {
            tile_assignment: TileAssignment::iota(&[2, 2]),
            replicate_on_last_tile_dim: false,
            last_tile_dims: vec![SubgroupType::Manual],
        }));
        let p = round_trip(&iota_f32(&[2, 4]), &s, 4);
        assert_eq!(f32s(&p[0]), vec![0.0, 1.0]); // m=0, tile 0
        assert_eq!(f32s(&p[1]), vec![4.0, 5.0]); // m=1, tile 0
        assert_eq!(f32s(&p[2]), vec![2.0, 3.0]); // m=0, tile 1
        assert_eq!(f32s(&p[3]), vec![6.0, 7.0]); // m=1, tile 1
    }

    #[test]
    fn tuples_take_one_sharding_per_leaf() {
        let shape = Shape::tuple(vec![
            Shape::array(HloElementType::F32, &[4]),
            Shape::tuple(vec![Shape::array(HloElementType::S32, &[2])]),
        ]);
        let v = HostValue::Tuple(vec![
            HostValue::Array(iota_f32(&[4])),
            HostValue::Tuple(vec![HostValue::Array(
                HostArray::s32(&[2], &[7, 8]).unwrap(),
            )]),
        ]);
        let s = Sharding::tuple(vec![tiled(&[2], false), Sharding::replicated()]);
        let p = split(&v, &shape, &s, 2).unwrap();
        let leaves = p[1].leaves();
        assert_eq!(leaves[0].to_f32().unwrap(), vec![2.0, 3.0]);
        assert_eq!(leaves[1].dims, vec![2]);
        let back = assemble(&p, &shape, &s).unwrap();
        assert_eq!(back.value, v);
        // A single sharding on a tuple applies to every leaf.
        let p = split(&v, &shape, &Sharding::replicated(), 2).unwrap();
        assert_eq!(p[0], v);
        // Wrong leaf count.
        let bad = Sharding::tuple(vec![Sharding::replicated()]);
        assert!(split(&v, &shape, &bad, 2).is_err());
    }

    #[test]
    fn replica_disagreements_are_reported() {
        let s = tiled(&[2, 1, 2], true);
        let shape = Shape::array(HloElementType::F32, &[4, 2]);
        let mut p = split(&HostValue::Array(iota_f32(&[4, 2])), &shape, &s, 4).unwrap();
        // Device 3 (replica of device 2, rows 2..4) gets a wrong value at local (1, 0).
        if let HostValue::Array(a) = &mut p[3] {
            a.data[8..12].copy_from_slice(&99f32.to_le_bytes());
        }
        let r = assemble(&p, &shape, &s).unwrap();
        assert_eq!(r.mismatch_count, 1);
        let m = &r.mismatches[0];
        assert_eq!(m.index, vec![3, 0]);
        assert_eq!(m.reference, (2, Scalar::Float(6.0)));
        assert_eq!(m.other, (3, Scalar::Float(99.0)));
        assert_eq!(
            m.to_string(),
            "element [3, 0]: device 2 has 6.0, device 3 has 99.0"
        );
        // The reference's value is kept.
        assert_eq!(f32s(&r.value)[6], 6.0);
        // Replicated: every device compared with device 0; padding is never compared.
        let shape = Shape::array(HloElementType::F32, &[3]);
        let mut p = split(
            &HostValue::Array(iota_f32(&[3])),
            &shape,
            &Sharding::replicated(),
            3,
        )
        .unwrap();
        if let HostValue::Array(a) = &mut p[2] {
            a.data[0..4].copy_from_slice(&(-1f32).to_le_bytes());
        }
        let r = assemble(&p, &shape, &Sharding::replicated()).unwrap();
        assert_eq!(r.mismatch_count, 1);
        assert_eq!(r.mismatches[0].other.0, 2);
    }

    #[test]
    fn padding_is_ignored_on_assembly() {
        let s = tiled(&[2], false);
        let shape = Shape::array(HloElementType::F32, &[3]);
        let mut p = split(&HostValue::Array(iota_f32(&[3])), &shape, &s, 2).unwrap();
        if let HostValue::Array(a) = &mut p[1] {
            a.data[4..8].copy_from_slice(&123f32.to_le_bytes()); // the padding element
        }
        let r = assemble(&p, &shape, &s).unwrap();
        assert_eq!(f32s(&r.value), vec![0.0, 1.0, 2.0]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let shape = Shape::array(HloElementType::F32, &[4]);
        let v = HostValue::Array(iota_f32(&[4]));
        // Data rank mismatch.
        assert!(split(&v, &shape, &tiled(&[2, 2], false), 4).is_err());
        // Assignment over 4 devices used with 2.
        let e = split(&v, &shape, &tiled(&[4], false), 2).unwrap_err();
        assert!(e.to_string().contains("over 2 devices"), "{e}");
        // Duplicate device in an explicit assignment.
        let dup = Sharding::tiled(
            TileAssignment::Explicit {
                dims: [2].into_iter().collect(),
                devices: vec![1, 1],
            },
            false,
        );
        assert!(split(&v, &shape, &dup, 2)
            .unwrap_err()
            .to_string()
            .contains("twice"));
        // Wrong global shape.
        let w = HostValue::Array(iota_f32(&[5]));
        assert!(split(&w, &shape, &tiled(&[2], false), 2).is_err());
        // Unknown is not a host layout.
        assert!(matches!(
            split(&v, &shape, &Sharding::new(ShardingKind::Unknown), 2),
            Err(ShardError::Unsupported { .. })
        ));
        // Wrong piece shape on assembly.
        let pieces = vec![
            HostValue::Array(iota_f32(&[2])),
            HostValue::Array(iota_f32(&[3])),
        ];
        let e = assemble(&pieces, &shape, &tiled(&[2], false)).unwrap_err();
        assert!(e.to_string().contains("device 1"), "{e}");
    }

    #[test]
    fn every_element_type_round_trips() {
        for &ty in HloElementType::ALL.iter().filter(|t| t.is_array_type()) {
            let w = ty.byte_size();
            let data: Vec<u8> = (0..(5 * 3 * w)).map(|i| (i * 7 + 1) as u8).collect();
            let g = HostArray::new(ty, vec![5, 3], data).unwrap();
            round_trip(&g, &tiled(&[2, 2], false), 4);
            round_trip(&g, &tiled(&[3, 1, 2], true), 6);
        }
    }

    use proptest::prelude::*;

    proptest! {
        /// Any tiling (uneven sizes, a permuted device order, partial replication): every
        /// device's piece holds the global elements of its tile and zeros past the array's end,
        /// and assembling the pieces gives the global array back with no disagreements.
        #[test]
        fn split_assemble_round_trip(
            dims in prop::collection::vec(1i64..7, 1..4),
            tiles_seed in prop::collection::vec(1i64..4, 3),
            repl in 1i64..3,
            rot in 0usize..8,
        ) {
            let tiles: Vec<i64> = dims.iter().zip(&tiles_seed).map(|(_, &t)| t).collect();
            let mut tdims = tiles.clone();
            if repl > 1 { tdims.push(repl); }
            let n: i64 = tdims.iter().product();
            let devices: Vec<i64> = (0..n).map(|i| (i + rot as i64) % n).collect();
            let s = Sharding::tiled(
                TileAssignment::Explicit { dims: tdims.iter().copied().collect(), devices: devices.clone() },
                repl > 1,
            );
            let g = iota_f32(&dims);
            let shape = g.shape();
            let pieces = split(&HostValue::Array(g.clone()), &shape, &s, n as usize).unwrap();
            let shard = tile_shape(&dims, &tiles);
            for (pos, &d) in devices.iter().enumerate() {
                let tile_idx = unravel(pos, &tdims);
                let piece = pieces[d as usize].as_array().unwrap();
                prop_assert_eq!(&piece.dims[..], &shard[..]);
                for k in 0..piece.element_count() {
                    let local = unravel(k, &shard);
                    let global: Vec<i64> = (0..dims.len()).map(|i| tile_idx[i] * shard[i] + local[i]).collect();
                    let inside = global.iter().zip(&dims).all(|(g, d)| g < d);
                    let want = if inside { g.get_at(&global) } else { Scalar::Float(0.0) };
                    prop_assert_eq!(piece.get(k), want);
                }
            }
            let back = assemble(&pieces, &shape, &s).unwrap();
            prop_assert_eq!(back.value, HostValue::Array(g));
            prop_assert_eq!(back.mismatch_count, 0);
        }
    }
}
