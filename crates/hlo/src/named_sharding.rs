//! Named (mesh) shardings: validation, the predicates XLA asks of them, and the equivalent
//! tiled sharding.
//!
//! The types live in [`crate::sharding`] ([`NamedSharding`], [`Mesh`], [`AxisRef`], ...). The
//! rules follow XLA's `NamedSharding`, `Mesh` and `AxisRef` (`xla/hlo/ir/named_sharding.cc`,
//! `mesh_and_axis.cc`) and what jaxlib 0.12 accepts: where XLA's constructors abort the
//! process on a malformed sharding (overlapping axes, unsorted replicated axes, mergeable
//! neighbours, a sub-axis that does not divide its axis, duplicate axis names, a device list
//! that is not a permutation), [`NamedSharding::validate`] returns an error naming the axis.
//!
//! [`NamedSharding::to_tiled`] is XLA's `HloSharding::V3ToV2Sharding`: the same layout as a
//! tiled sharding (`devices=[...]`, subgroups for manual, unreduced and replicated axes),
//! normalized and canonically spelled as [`Sharding::subgroup`] makes them. The sharding
//! algebra (`tiling`, `sharding_util`) and the passes work on tiled shardings; they convert a
//! named one first, as XLA's own queries on a named `HloSharding` do.

use crate::shape::Shape;
use crate::sharding::{
    AxisRef, DimSharding, Mesh, MeshAxis, MeshDevices, NamedSharding, ReductionOp, Sharding,
    ShardingKind, SubAxis, SubgroupType, TileAssignment, TileDims,
};

impl AxisRef {
    /// The whole axis `axis`.
    pub fn full(axis: usize) -> AxisRef {
        AxisRef { axis, sub: None }
    }

    /// The sub-axis `(pre_size)size` of axis `axis`.
    pub fn sub_axis(axis: usize, pre_size: i64, size: i64) -> AxisRef {
        AxisRef {
            axis,
            sub: Some(SubAxis { pre_size, size }),
        }
    }

    /// The product of the sizes of the parts of the axis before (major to) this one.
    pub fn pre_size(&self) -> i64 {
        self.sub.map_or(1, |s| s.pre_size)
    }

    /// The number of devices along this axis or sub-axis.
    pub fn size(&self, mesh: &Mesh) -> i64 {
        match self.sub {
            Some(s) => s.size,
            None => mesh.axes.get(self.axis).map_or(1, |a| a.size),
        }
    }

    /// XLA's `CanMerge`: both are sub-axes of one axis and `other` follows `self` directly.
    fn can_merge(&self, other: &AxisRef) -> bool {
        match (self.sub, other.sub) {
            (Some(a), Some(b)) => self.axis == other.axis && a.pre_size * a.size == b.pre_size,
            _ => false,
        }
    }

    /// XLA's `CanCoexistWithoutOverlap`.
    fn coexists_with(&self, other: &AxisRef) -> bool {
        if self.axis != other.axis {
            return true;
        }
        let (Some(a), Some(b)) = (self.sub, other.sub) else {
            return false;
        };
        let (a_end, b_end) = (a.pre_size * a.size, b.pre_size * b.size);
        if a_end > b.pre_size && b_end > a.pre_size {
            return false;
        }
        let max_pre = a.pre_size.max(b.pre_size);
        let min_end = a_end.min(b_end);
        min_end != 0 && max_pre % min_end == 0
    }

    /// XLA's axis order for replicated/unreduced/manual lists: axis, then pre-size, then size.
    fn sort_key(&self, mesh: &Mesh) -> (usize, i64, i64) {
        (self.axis, self.pre_size(), self.size(mesh))
    }

    /// `'x'` or `'x':(2)2`, with the mesh's name for the axis.
    pub fn describe(&self, mesh: &Mesh) -> String {
        let name = mesh
            .axes
            .get(self.axis)
            .map_or_else(|| format!("#{}", self.axis), |a| format!("'{}'", a.name));
        match self.sub {
            Some(s) => format!("{name}:({}){}", s.pre_size, s.size),
            None => name,
        }
    }
}

impl Mesh {
    /// A mesh of the given axes over devices `0..n` in row-major order.
    pub fn iota(axes: &[(&str, i64)]) -> Mesh {
        Mesh {
            axes: axes
                .iter()
                .map(|&(name, size)| MeshAxis {
                    name: name.to_string(),
                    size,
                })
                .collect(),
            devices: MeshDevices::Iota,
        }
    }

    /// The mesh of one device and no axes (`single_device[device_id=N]`).
    pub fn single_device(device: i64) -> Mesh {
        Mesh {
            axes: Vec::new(),
            devices: MeshDevices::Explicit(vec![device]),
        }
    }

    /// The device of a single-device mesh.
    pub fn single_device_id(&self) -> Option<i64> {
        match (&self.devices, self.axes.is_empty()) {
            (MeshDevices::Explicit(d), true) if d.len() == 1 => Some(d[0]),
            _ => None,
        }
    }

    pub fn is_single_device(&self) -> bool {
        self.single_device_id().is_some()
    }

    /// The number of devices: the product of the axis sizes (1 for a single device, 0 for the
    /// empty mesh).
    pub fn num_devices(&self) -> i64 {
        if self.axes.is_empty() {
            return i64::from(self.is_single_device());
        }
        self.axes.iter().map(|a| a.size).product()
    }

    pub fn axis_index(&self, name: &str) -> Option<usize> {
        self.axes.iter().position(|a| a.name == name)
    }

    fn sizes(&self) -> TileDims {
        self.axes.iter().map(|a| a.size).collect()
    }

    /// Every device in row-major order over the axes.
    pub fn device_list(&self) -> Vec<i64> {
        match &self.devices {
            MeshDevices::Explicit(d) => d.clone(),
            MeshDevices::Iota => (0..self.num_devices()).collect(),
            MeshDevices::Transposed {
                reshape_dims,
                transpose_perm,
            } => TileAssignment::Iota {
                dims: self.sizes(),
                reshape_dims: reshape_dims.clone(),
                transpose_perm: transpose_perm.clone(),
            }
            .devices(),
        }
    }

    /// The canonical device order of an iota over `reshape_dims` transposed by
    /// `transpose_perm`, for a mesh of these axes: the plain iota, or the transposed iota with
    /// the fewest dimensions (as XLA's `IotaTileAssignment` canonicalizes it). The caller has
    /// checked that `reshape_dims` hold as many devices as the axes and that the perm is one.
    pub fn canonical_iota(
        sizes: &[i64],
        reshape_dims: &[i64],
        transpose_perm: &[i64],
    ) -> MeshDevices {
        let ta = TileAssignment::Iota {
            dims: sizes.iter().copied().collect(),
            reshape_dims: reshape_dims.iter().copied().collect(),
            transpose_perm: transpose_perm.iter().copied().collect(),
        }
        .canonical();
        match ta {
            TileAssignment::Iota {
                reshape_dims,
                transpose_perm,
                ..
            } if !transpose_perm.is_empty() => MeshDevices::Transposed {
                reshape_dims,
                transpose_perm,
            },
            TileAssignment::Iota { .. } => MeshDevices::Iota,
            // `canonical` spells every iota as one; kept for completeness.
            TileAssignment::Explicit { devices, .. } => MeshDevices::Explicit(devices),
        }
    }

    /// XLA's `Mesh` checks: unique axis names, positive sizes, and a device order that is a
    /// permutation of `0..n` given in its canonical spelling.
    pub fn validate(&self) -> Result<(), String> {
        for (k, a) in self.axes.iter().enumerate() {
            if a.size < 1 {
                return Err(format!(
                    "mesh axis '{}' has size {}; sizes must be positive",
                    a.name, a.size
                ));
            }
            if self.axes[..k].iter().any(|b| b.name == a.name) {
                return Err(format!("the mesh has two axes named '{}'", a.name));
            }
        }
        let n = self
            .axes
            .iter()
            .try_fold(1i64, |p, a| p.checked_mul(a.size))
            .ok_or("the mesh has too many devices")?;
        match &self.devices {
            MeshDevices::Iota => Ok(()),
            MeshDevices::Explicit(d) if self.axes.is_empty() => {
                if d.len() != 1 {
                    return Err(format!(
                        "a mesh without axes lists {} devices (a single-device mesh has one)",
                        d.len()
                    ));
                }
                if d[0] < 0 {
                    return Err(format!("device {} is negative", d[0]));
                }
                Ok(())
            }
            MeshDevices::Explicit(d) => {
                if d.len() as i64 != n {
                    return Err(format!(
                        "the mesh has {n} devices but device_ids lists {}",
                        d.len()
                    ));
                }
                let mut seen = vec![false; d.len()];
                for &x in d {
                    if x < 0 || x >= n || std::mem::replace(&mut seen[x as usize], true) {
                        return Err(format!(
                            "device_ids must be a permutation of 0..{n}; {x} is not allowed there"
                        ));
                    }
                }
                if d.iter().enumerate().all(|(i, &x)| x == i as i64) {
                    return Err(
                        "device_ids lists the plain order 0,1,2,...: leave device_ids out".into(),
                    );
                }
                Ok(())
            }
            MeshDevices::Transposed {
                reshape_dims,
                transpose_perm,
            } => {
                if self.axes.is_empty() {
                    return Err("a mesh without axes has no device_ids iota".into());
                }
                if reshape_dims.iter().any(|&r| r < 1) || reshape_dims.iter().product::<i64>() != n
                {
                    return Err(format!(
                        "the device_ids iota {reshape_dims:?} does not hold the mesh's {n} devices"
                    ));
                }
                let k = reshape_dims.len();
                let mut seen = vec![false; k];
                if transpose_perm.len() != k
                    || transpose_perm.iter().any(|&p| {
                        p < 0 || p as usize >= k || std::mem::replace(&mut seen[p as usize], true)
                    })
                {
                    return Err(format!(
                        "the device_ids transpose {transpose_perm:?} is not a permutation of {k} dimensions"
                    ));
                }
                if Mesh::canonical_iota(&self.sizes(), reshape_dims, transpose_perm) != self.devices
                {
                    return Err(
                        "the device_ids iota is not in its canonical spelling (fewest dimensions, no identity transpose)"
                            .into(),
                    );
                }
                Ok(())
            }
        }
    }
}

impl NamedSharding {
    /// The fully replicated sharding on `mesh` (`{mesh[...], replicated}`).
    pub fn replicated_on(mesh: Mesh) -> NamedSharding {
        NamedSharding {
            mesh,
            dims: Vec::new(),
            replicated: Vec::new(),
            unreduced: Vec::new(),
            reduction: ReductionOp::Sum,
            manual: Vec::new(),
        }
    }

    /// Every axis of the mesh, whole, in order.
    pub fn all_axes(mesh: &Mesh) -> Vec<AxisRef> {
        (0..mesh.axes.len()).map(AxisRef::full).collect()
    }

    fn all_dims_empty(&self) -> bool {
        self.dims.iter().all(|d| d.axes.is_empty())
    }

    /// XLA's `ContainsAllMeshAxesInOrder` (axes of size 1 ignored on both sides).
    fn covers_mesh(&self, axes: &[AxisRef]) -> bool {
        let big = |r: &&AxisRef| r.size(&self.mesh) != 1 || r.sub.is_some();
        let have: Vec<&AxisRef> = axes.iter().filter(big).collect();
        let all = NamedSharding::all_axes(&self.mesh);
        let want: Vec<&AxisRef> = all.iter().filter(big).collect();
        have == want
    }

    /// `axes` is exactly every axis of the mesh, whole, in order.
    pub fn is_every_axis(&self, axes: &[AxisRef]) -> bool {
        axes.len() == self.mesh.axes.len()
            && axes
                .iter()
                .enumerate()
                .all(|(i, r)| r.axis == i && r.sub.is_none())
    }

    /// XLA's `IsMaximal`: the whole value on the one device of a single-device mesh.
    pub fn is_single_device(&self) -> bool {
        self.mesh.is_single_device()
    }

    /// XLA's `IsReplicated`: no dimension is split and nothing is unreduced or manual.
    pub fn is_replicated(&self) -> bool {
        !self.is_single_device()
            && self.all_dims_empty()
            && self.unreduced.is_empty()
            && self.manual.is_empty()
    }

    /// XLA's `IsManual`: manual over the whole mesh and nothing else.
    pub fn is_manual(&self) -> bool {
        !self.is_single_device()
            && self.all_dims_empty()
            && self.replicated.is_empty()
            && self.unreduced.is_empty()
            && !self.manual.is_empty()
            && self.covers_mesh(&self.manual)
    }

    /// XLA's `IsUnreduced`: unreduced over the whole mesh and nothing else.
    pub fn is_unreduced(&self) -> bool {
        !self.is_single_device()
            && self.all_dims_empty()
            && self.replicated.is_empty()
            && self.manual.is_empty()
            && !self.unreduced.is_empty()
            && self.covers_mesh(&self.unreduced)
    }

    /// The number of devices of the mesh.
    pub fn num_devices(&self) -> i64 {
        self.mesh.num_devices()
    }

    fn all_refs(&self) -> impl Iterator<Item = &AxisRef> {
        self.dims
            .iter()
            .flat_map(|d| d.axes.iter())
            .chain(&self.replicated)
            .chain(&self.unreduced)
            .chain(&self.manual)
    }

    /// Checks the invariants listed on [`NamedSharding`] (XLA's `VerifyNamedSharding` and the
    /// checks of the `Mesh` and `AxisRef` constructors).
    pub fn validate(&self) -> Result<(), String> {
        let mesh = &self.mesh;
        mesh.validate()?;
        if mesh.is_single_device()
            && !(self.dims.is_empty()
                && self.replicated.is_empty()
                && self.unreduced.is_empty()
                && self.manual.is_empty())
        {
            return Err("a single-device sharding takes no dimensions or axes".into());
        }
        if self.unreduced.is_empty() && self.reduction != ReductionOp::Sum {
            return Err("a reduction other than sum needs unreduced axes".into());
        }
        let mut seen: Vec<&AxisRef> = Vec::new();
        for r in self.all_refs() {
            let Some(axis) = mesh.axes.get(r.axis) else {
                return Err(format!(
                    "axis #{} does not exist: the mesh has {} axes",
                    r.axis,
                    mesh.axes.len()
                ));
            };
            if let Some(s) = r.sub {
                if s.pre_size < 1 || s.size < 2 {
                    return Err(format!(
                        "sub-axis {} needs a pre-size of at least 1 and a size of at least 2",
                        r.describe(mesh)
                    ));
                }
                let end = s.pre_size.checked_mul(s.size).unwrap_or(0);
                if end == 0 || axis.size % end != 0 {
                    return Err(format!(
                        "sub-axis {}: pre-size times size ({}) must divide the axis size {}",
                        r.describe(mesh),
                        s.pre_size.saturating_mul(s.size),
                        axis.size
                    ));
                }
                if s.size >= axis.size {
                    return Err(format!(
                        "sub-axis {} must be smaller than its axis (size {})",
                        r.describe(mesh),
                        axis.size
                    ));
                }
            }
            if let Some(o) = seen.iter().find(|o| !r.coexists_with(o)) {
                return Err(format!(
                    "axes {} and {} overlap (or cannot be used together)",
                    o.describe(mesh),
                    r.describe(mesh)
                ));
            }
            seen.push(r);
        }
        for d in &self.dims {
            if let Some(w) = d.axes.windows(2).find(|w| w[0].can_merge(&w[1])) {
                return Err(format!(
                    "neighbouring axes {} and {} of a dimension should be written as one",
                    w[0].describe(mesh),
                    w[1].describe(mesh)
                ));
            }
        }
        for (what, list) in [
            ("replicated", &self.replicated),
            ("unreduced", &self.unreduced),
            ("manual", &self.manual),
        ] {
            if let Some(w) = list
                .windows(2)
                .find(|w| w[0].sort_key(mesh) > w[1].sort_key(mesh))
            {
                return Err(format!(
                    "{what} axes must be sorted by mesh axis and pre-size: {} comes after {}",
                    w[1].describe(mesh),
                    w[0].describe(mesh)
                ));
            }
            if let Some(w) = list.windows(2).find(|w| w[0].can_merge(&w[1])) {
                return Err(format!(
                    "neighbouring {what} axes {} and {} should be written as one",
                    w[0].describe(mesh),
                    w[1].describe(mesh)
                ));
            }
        }
        Ok(())
    }

    /// XLA's `V3ToV2Sharding`: the same layout as a tiled (or replicated, manual, unreduced,
    /// maximal) sharding, normalized and canonically spelled. `rank` is the rank of the array
    /// when known: the forms without a dimension list (`[]`, `manual`, ...) then get that many
    /// unsplit data dimensions; a dimension list of another length is an error. Metadata is not
    /// copied (see [`Sharding::to_tiled_for`]).
    pub fn to_tiled(&self, rank: Option<usize>) -> Result<Sharding, String> {
        self.validate()?;
        if let Some(d) = self.mesh.single_device_id() {
            return Ok(Sharding::maximal(d));
        }
        if self.is_replicated() {
            return Ok(Sharding::replicated());
        }
        if self.is_manual() {
            return Ok(Sharding::manual());
        }
        if self.is_unreduced() {
            return Ok(Sharding::new(ShardingKind::Unreduced));
        }
        if let (Some(r), false) = (rank, self.dims.is_empty()) {
            if r != self.dims.len() {
                return Err(format!(
                    "the sharding has {} dimension(s) but the array has rank {r}",
                    self.dims.len()
                ));
            }
        }
        let mesh = &self.mesh;
        if mesh.num_devices() <= 1 {
            return Ok(Sharding::replicated());
        }
        // Split every axis at the boundaries of the sub-axes used on it (XLA's
        // `GetOrderedAxisRefs`): the mesh seen as an array of parts, major to minor.
        let mut parts: Vec<(usize, i64, i64)> = Vec::new();
        for (k, a) in mesh.axes.iter().enumerate() {
            let mut cuts = vec![1, a.size];
            for r in self.all_refs().filter(|r| r.axis == k) {
                if let Some(s) = r.sub {
                    cuts.push(s.pre_size);
                    cuts.push(s.pre_size * s.size);
                }
            }
            cuts.sort_unstable();
            cuts.dedup();
            for w in cuts.windows(2) {
                parts.push((k, w[0], w[1] / w[0]));
            }
        }
        let part_of = |r: &AxisRef| {
            parts
                .iter()
                .position(|&(k, pre, _)| k == r.axis && pre == r.pre_size())
        };
        let mut order: Vec<usize> = Vec::new();
        let mut tile_dims: Vec<i64> = Vec::new();
        let mut types: Vec<SubgroupType> = Vec::new();
        let take = |refs: &[AxisRef], order: &mut Vec<usize>| -> i64 {
            let mut size = 1;
            for r in refs {
                size *= r.size(mesh);
                // References to axes of size 1 have no part (they hold one device).
                if let Some(p) = part_of(r) {
                    order.push(p);
                }
            }
            size
        };
        if self.dims.is_empty() {
            tile_dims.resize(rank.unwrap_or(0), 1);
        } else {
            for d in &self.dims {
                tile_dims.push(take(&d.axes, &mut order));
            }
        }
        for (list, ty) in [
            (&self.manual, SubgroupType::Manual),
            (&self.unreduced, SubgroupType::Unreduced),
        ] {
            if !list.is_empty() {
                tile_dims.push(take(list, &mut order));
                types.push(ty);
            }
        }
        // Everything else (explicitly replicated or unused) replicates, in mesh order.
        let mut replicated = 1;
        for (p, part) in parts.iter().enumerate() {
            if !order.contains(&p) {
                order.push(p);
                replicated *= part.2;
            }
        }
        if replicated > 1 {
            tile_dims.push(replicated);
            types.push(SubgroupType::Replicated);
        }
        let part_dims: TileDims = parts.iter().map(|p| p.2).collect();
        let over_parts = TileAssignment::Explicit {
            dims: part_dims,
            devices: mesh.device_list(),
        };
        let moved = over_parts.transpose(&order);
        let mut devices = moved.devices();
        if types.last() == Some(&SubgroupType::Replicated) {
            // As XLA's `PartialTile`: the members of each replication group in ascending order.
            for g in devices.chunks_mut(replicated as usize) {
                g.sort_unstable();
            }
        }
        let ta = TileAssignment::Explicit {
            dims: tile_dims.iter().copied().collect(),
            devices,
        };
        let mut out = Sharding::subgroup(ta, &types);
        if let ShardingKind::Tiled(t) = &out.kind {
            if t.data_tile_dims().iter().product::<i64>() == 1
                && t.subgroup_types() == [SubgroupType::Unreduced]
            {
                out = Sharding::new(ShardingKind::Unreduced);
            }
        }
        Ok(out)
    }
}

impl DimSharding {
    /// A closed dimension split over `axes`.
    pub fn closed(axes: Vec<AxisRef>) -> DimSharding {
        DimSharding { axes, closed: true }
    }
}

impl Sharding {
    /// A named sharding without metadata.
    pub fn named(n: NamedSharding) -> Sharding {
        Sharding::new(ShardingKind::Named(Box::new(n)))
    }

    pub fn as_named(&self) -> Option<&NamedSharding> {
        match &self.kind {
            ShardingKind::Named(n) => Some(n),
            _ => None,
        }
    }

    /// True if this sharding or a tuple element of it is named.
    pub fn has_named(&self) -> bool {
        match &self.kind {
            ShardingKind::Named(_) => true,
            ShardingKind::Tuple(e) => e.iter().any(Sharding::has_named),
            _ => false,
        }
    }

    /// This sharding with every named leaf replaced by its tiled equivalent
    /// ([`NamedSharding::to_tiled`], for the rank of its leaf of `shape`), metadata kept; other
    /// shardings are returned as they are.
    pub fn to_tiled_for(&self, shape: &Shape) -> Result<Sharding, String> {
        match &self.kind {
            ShardingKind::Named(n) => {
                let rank = shape.is_array().then(|| shape.rank());
                let mut t = n.to_tiled(rank)?;
                t.metadata = self.metadata.clone();
                Ok(t)
            }
            ShardingKind::Tuple(e) => {
                let mut leaves: Vec<&Shape> = Vec::new();
                shape.for_each_leaf(&mut leaves);
                let same = leaves.len() == e.len();
                let elems = e
                    .iter()
                    .enumerate()
                    .map(|(k, x)| match (same, x.as_named()) {
                        (true, _) => x.to_tiled_for(leaves[k]),
                        (false, Some(n)) => n.to_tiled(None).map(|mut t| {
                            t.metadata = x.metadata.clone();
                            t
                        }),
                        (false, None) => Ok(x.clone()),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let mut out = Sharding::tuple(elems);
                out.metadata = self.metadata.clone();
                out.shard_group = self.shard_group;
                Ok(out)
            }
            _ => Ok(self.clone()),
        }
    }
}

trait Leaves {
    fn for_each_leaf<'s>(&'s self, out: &mut Vec<&'s Shape>);
}

impl Leaves for Shape {
    fn for_each_leaf<'s>(&'s self, out: &mut Vec<&'s Shape>) {
        match self {
            Shape::Tuple(e) => e.iter().for_each(|x| x.for_each_leaf(out)),
            _ => out.push(self),
        }
    }
}
