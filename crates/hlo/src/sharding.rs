//! HloSharding: how an array (or each element of a tuple) is laid out over devices.
//!
//! Text forms: `{replicated}`, `{manual}`, `{unknown}`, `{maximal device=3}`,
//! `{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}`, `{devices=[2,2]<=[4]}`,
//! `{devices=[2,2,2]<=[2,4]T(1,0) last_tile_dims={manual}}`, tuples `{{replicated}, {manual}}`,
//! each optionally followed by `shard_as N` / `shard_like N` and `metadata={...}`.

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
