//! HloSharding: how an array (or each element of a tuple) is laid out over devices.
//!
//! Text forms: `{replicated}`, `{manual}`, `{unknown}`, `{maximal device=3}`,
//! `{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}`, `{devices=[2,2]<=[4]}`,
//! `{devices=[2,2,2]<=[2,4]T(1,0) last_tile_dims={manual}}`, tuples `{{replicated}, {manual}}`,
//! each optionally followed by `shard_as N` / `shard_like N` and `metadata={...}`.
//!
//! Named (mesh) shardings, XLA's `NamedSharding`: `{mesh['x'=2,'y'=4], [{'x'}, {}],
//! replicated={'y'}}`, `{single_device[device_id=3]}`; see [`NamedSharding`] and
//! `crate::named_sharding` (validation, XLA's predicates, the equivalent tiled sharding).

use smallvec::SmallVec;

use crate::metadata::OpMetadata;

/// The tile dimensions of a tile assignment (data dimensions plus subgroup dimensions): inline
/// up to 8, so a rank-5 array with two subgroup dimensions never allocates.
pub type TileDims = SmallVec<[i64; 8]>;

/// Which devices hold which tile: a `dims`-shaped array of device ids.
#[derive(Debug, PartialEq, Eq, Hash)]
pub enum TileAssignment {
    /// `devices=[2,2]0,2,1,3`: the ids listed in row-major order.
    Explicit { dims: TileDims, devices: Vec<i64> },
    /// `devices=[2,2]<=[2,2]T(1,0)`: iota over `reshape_dims` (product = device count), transposed
    /// by `transpose_perm` (empty = identity), then reshaped to `dims`.
    Iota {
        dims: TileDims,
        reshape_dims: SmallVec<[i64; 4]>,
        transpose_perm: SmallVec<[i64; 4]>,
    },
}

/// Copies the dimension lists as slices (`SmallVec`'s own `Clone` goes element by element;
/// shardings are cloned often enough in sharding propagation for that to show).
impl Clone for TileAssignment {
    fn clone(&self) -> Self {
        match self {
            TileAssignment::Explicit { dims, devices } => TileAssignment::Explicit {
                dims: SmallVec::from_slice(dims),
                devices: devices.clone(),
            },
            TileAssignment::Iota {
                dims,
                reshape_dims,
                transpose_perm,
            } => TileAssignment::Iota {
                dims: SmallVec::from_slice(dims),
                reshape_dims: SmallVec::from_slice(reshape_dims),
                transpose_perm: SmallVec::from_slice(transpose_perm),
            },
        }
    }
}

impl TileAssignment {
    #[inline]
    pub fn dims(&self) -> &[i64] {
        match self {
            TileAssignment::Explicit { dims, .. } | TileAssignment::Iota { dims, .. } => dims,
        }
    }

    #[inline]
    pub fn num_devices(&self) -> i64 {
        self.dims().iter().product()
    }
}

/// `xla.OpSharding.Type` values that may stand in `last_tile_dims={...}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubgroupType {
    Replicated,
    Manual,
    Maximal,
    Unreduced,
}

/// `shard_as N` (shard exactly like the others of group N) or `shard_like N` (hint).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShardGroup {
    pub id: i64,
    pub shard_as: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TiledSharding {
    pub tile_assignment: TileAssignment,
    /// `last_tile_dim_replicate`: the last tile dimension replicates instead of tiling.
    pub replicate_on_last_tile_dim: bool,
    /// `last_tile_dims={manual, replicated}`: the types of the trailing subgroup dimensions.
    pub last_tile_dims: Vec<SubgroupType>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ShardingKind {
    Replicated,
    Manual,
    Unknown,
    /// `{maximal device=N}`: the whole value on one device.
    Maximal(i64),
    Tiled(TiledSharding),
    /// One sharding per leaf of a tuple shape, flattened in pre-order as XLA stores them.
    Tuple(Vec<Sharding>),
    /// `{unreduced}` (partial sums not yet reduced).
    Unreduced,
    /// A named (mesh) sharding, XLA's `NamedSharding`: a device mesh with named axes and,
    /// per data dimension, the mesh axes it is split over. Boxed: it is rare and large.
    Named(Box<NamedSharding>),
}

/// XLA's `NamedSharding`: how an array lies on a mesh of devices with named axes.
///
/// Invariants (checked by `NamedSharding::validate`, which the text parser, the proto reader
/// and the verifier run): every axis reference names an axis of the mesh and a valid sub-axis
/// of it; no two references overlap; the axes of one dimension hold no two neighbours that
/// merge into one sub-axis; `replicated`, `unreduced` and `manual` are sorted by axis, then
/// pre-size, then size, and hold no mergeable neighbours; a single-device mesh has no
/// dimensions; `reduction` is [`ReductionOp::Sum`] unless `unreduced` is non-empty.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NamedSharding {
    pub mesh: Mesh,
    /// One entry per data dimension (`[{'x'}, {}]`); empty for the forms without a dimension
    /// list (`replicated`, `unreduced`, `manual`, a single device).
    pub dims: Vec<DimSharding>,
    /// Axes the value is explicitly replicated over (`replicated={'y'}`).
    pub replicated: Vec<AxisRef>,
    /// Axes over which devices hold partial results not yet reduced (`unreduced={'y'}`).
    pub unreduced: Vec<AxisRef>,
    /// The reduction the unreduced axes still need (`unreduced=max{'y'}`); sum by default.
    pub reduction: ReductionOp,
    /// Axes the program is manually partitioned over (`manual={'x'}`).
    pub manual: Vec<AxisRef>,
}

/// The mesh of a named sharding: named axes (major to minor) and the device at each point.
/// A mesh without axes is the empty mesh (no devices) or, with one explicit device, the
/// single-device mesh XLA prints `single_device[device_id=N]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mesh {
    pub axes: Vec<MeshAxis>,
    pub devices: MeshDevices,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MeshAxis {
    pub name: String,
    pub size: i64,
}

/// The device order of a mesh, in its canonical spelling (as XLA's `TileAssignment`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MeshDevices {
    /// Devices `0..n` in row-major order over the axes (nothing printed).
    Iota,
    /// `device_ids=([2,4]T(1,0))`: an iota over `reshape_dims` transposed by `transpose_perm`,
    /// never equal to the plain iota and with no mergeable dimensions.
    Transposed {
        reshape_dims: SmallVec<[i64; 4]>,
        transpose_perm: SmallVec<[i64; 4]>,
    },
    /// `device_ids=(1,0,3,2)`: every device in row-major order over the axes; for the
    /// single-device mesh, its one device.
    Explicit(Vec<i64>),
}

/// A reference to a mesh axis: the whole axis, or the sub-axis `'x':(pre_size)size` (the
/// part of size `size` after the `pre_size` major part of the axis).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AxisRef {
    /// Index into [`Mesh::axes`].
    pub axis: usize,
    pub sub: Option<SubAxis>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubAxis {
    pub pre_size: i64,
    pub size: i64,
}

/// The axes one data dimension is split over, major first; an open dimension (`{'x', ?}`,
/// `{?}`) may be split further by propagation, a closed one may not.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DimSharding {
    pub axes: Vec<AxisRef>,
    pub closed: bool,
}

/// The reduction pending on unreduced axes (`xla.NamedShardingProto.ReductionOpProto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ReductionOp {
    #[default]
    Sum,
    Max,
    Min,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sharding {
    pub kind: ShardingKind,
    pub metadata: Vec<OpMetadata>,
    pub shard_group: Option<ShardGroup>,
}

impl Sharding {
    pub fn new(kind: ShardingKind) -> Sharding {
        Sharding {
            kind,
            metadata: Vec::new(),
            shard_group: None,
        }
    }

    pub fn replicated() -> Sharding {
        Sharding::new(ShardingKind::Replicated)
    }

    pub fn manual() -> Sharding {
        Sharding::new(ShardingKind::Manual)
    }

    pub fn maximal(device: i64) -> Sharding {
        Sharding::new(ShardingKind::Maximal(device))
    }

    pub fn tuple(elements: Vec<Sharding>) -> Sharding {
        Sharding::new(ShardingKind::Tuple(elements))
    }

    /// An iota-tiled sharding `devices=[dims]<=[product]`.
    pub fn iota_tiled(dims: &[i64]) -> Sharding {
        let n: i64 = dims.iter().product();
        Sharding::new(ShardingKind::Tiled(TiledSharding {
            tile_assignment: TileAssignment::Iota {
                dims: dims.iter().copied().collect(),
                reshape_dims: SmallVec::from_slice(&[n]),
                transpose_perm: SmallVec::new(),
            },
            replicate_on_last_tile_dim: false,
            last_tile_dims: Vec::new(),
        }))
    }

    #[inline]
    pub fn is_tuple(&self) -> bool {
        matches!(self.kind, ShardingKind::Tuple(_))
    }

    #[inline]
    pub fn is_replicated(&self) -> bool {
        matches!(self.kind, ShardingKind::Replicated)
    }

    #[inline]
    pub fn is_manual(&self) -> bool {
        matches!(self.kind, ShardingKind::Manual)
    }
}
