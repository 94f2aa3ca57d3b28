//! The partitioner's working form of an array's sharding.
//!
//! [`Spec`] reads a [`Sharding`] once, for one array rank and device count, into the form every
//! resharding decision needs: tiles per data dimension, one replication factor (all replicated
//! subgroup dimensions folded together), and the explicit device list, in row-major order over
//! `tiles ++ [repl]`. Within a replication group the devices are sorted, so two specs that place
//! the same data on the same devices compare equal however the sharding was spelled (iota or
//! explicit, one replicated subgroup dimension or several, `{replicated}` or a one-tile tiling).
//!
//! The per-device facts (which tile a device holds, where that tile starts, the groups of
//! devices that differ along some tile dimensions) are answered here from the device list; the
//! sharding algebra on [`Sharding`] itself stays in `tessera_hlo` (`sharding_util` transforms
//! shardings, `tiling` is the tile geometry).

use std::cell::RefCell;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use hashbrown::HashTable;
use tessera_hlo::fxhash::FxHasher;
use tessera_hlo::sharding::SubgroupType;
use tessera_hlo::{Sharding, ShardingKind, TileAssignment};

/// How one array value lies on the devices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Spec {
    /// Tiled, partially replicated or fully replicated over all `n` devices.
    Tiled(Tiling),
    /// The whole value on one device; the others hold a value of the same shape that nobody reads.
    Maximal(i64),
    /// Every device holds its own value of the local shape (a manual region).
    Manual,
}

/// A tiling over all devices: `tiles[i]` pieces along data dimension `i`, each piece held by
/// `repl` devices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tiling {
    pub tiles: Vec<i64>,
    pub repl: i64,
    /// Row-major over `tiles ++ [repl]`; each replication group (a run of `repl`) sorted.
    pub devices: Devices,
}

/// A device list shared between the tilings that hold it, with its hash computed once: specs
/// are cloned, compared and used as memo keys for every instruction, and a list of 512
/// devices copied or hashed each time was most of the partitioner's cost on large meshes.
#[derive(Clone)]
pub struct Devices {
    ids: Arc<[i64]>,
    hash: u64,
}

impl Devices {
    pub fn to_vec(&self) -> Vec<i64> {
        self.ids.to_vec()
    }
}

/// The most device ids the table of shared lists keeps (32 MiB).
const SHARED_IDS: usize = 1 << 22;

/// Shared device lists by their hash.
type SharedLists = HashTable<(u64, Arc<[i64]>)>;

impl From<Vec<i64>> for Devices {
    /// Equal lists made on the same thread share one allocation (up to [`Memo::LIMIT`]
    /// distinct lists and [`SHARED_IDS`] ids in all): specs are compared for every operand of
    /// every instruction, and two lists that share it compare equal without a walk over 512
    /// devices.
    fn from(ids: Vec<i64>) -> Devices {
        thread_local! {
            static SHARED: RefCell<(SharedLists, usize)> =
                const { RefCell::new((HashTable::new(), 0)) };
        }
        let hash = fx(ids.as_slice());
        SHARED.with(|t| {
            let (table, held) = &mut *t.borrow_mut();
            if let Some((_, known)) = table.find(hash, |(h, known)| *h == hash && **known == *ids) {
                return Devices {
                    ids: known.clone(),
                    hash,
                };
            }
            if table.len() >= Memo::LIMIT || *held + ids.len() > SHARED_IDS {
                table.clear();
                *held = 0;
            }
            *held += ids.len();
            let ids: Arc<[i64]> = ids.into();
            table.insert_unique(hash, (hash, ids.clone()), |(h, _)| *h);
            Devices { ids, hash }
        })
    }
}

impl std::ops::Deref for Devices {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        &self.ids
    }
}

impl PartialEq for Devices {
    fn eq(&self, other: &Devices) -> bool {
        Arc::ptr_eq(&self.ids, &other.ids) || (self.hash == other.hash && self.ids == other.ids)
    }
}

impl Eq for Devices {}

impl PartialEq<Vec<i64>> for Devices {
    fn eq(&self, other: &Vec<i64>) -> bool {
        *self.ids == **other
    }
}

impl Hash for Devices {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.ids.fmt(f)
    }
}

/// One row of `width` numbers per device, by device id, in one allocation: the per-device
/// tables (tile indices, piece starts, slice offsets) are asked for on every candidate of every
/// distinct dot, and a vector per device was most of their cost on large meshes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DeviceTable {
    rows: usize,
    width: usize,
    data: Vec<i64>,
}

impl DeviceTable {
    /// `n` rows of `width` zeros.
    pub fn zeros(n: usize, width: usize) -> DeviceTable {
        DeviceTable {
            rows: n,
            width,
            data: vec![0; n * width],
        }
    }

    /// The number of devices (rows).
    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Every row, by device id.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[i64]> + '_ {
        (0..self.rows).map(|d| &self[d])
    }

    pub fn row_mut(&mut self, dev: usize) -> &mut [i64] {
        &mut self.data[dev * self.width..(dev + 1) * self.width]
    }

    /// Per-device vectors (for callers that edit rows one by one).
    pub fn to_rows(&self) -> Vec<Vec<i64>> {
        self.iter().map(<[i64]>::to_vec).collect()
    }
}

impl std::ops::Index<usize> for DeviceTable {
    type Output = [i64];
    fn index(&self, dev: usize) -> &[i64] {
        &self.data[dev * self.width..(dev + 1) * self.width]
    }
}

impl std::fmt::Debug for DeviceTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Device groups (of a collective), shared.
pub type Groups = Arc<Vec<Vec<i64>>>;

/// Why a sharding cannot be read for an array.
pub type SpecError = String;

impl Tiling {
    /// Every device holds the whole array.
    pub fn replicated(rank: usize, n: i64) -> Tiling {
        thread_local! {
            // `0..n` for the last `n` asked: every unsharded value of a module is replicated
            // over the same devices.
            static IOTA: RefCell<Option<Devices>> = const { RefCell::new(None) };
        }
        let devices = IOTA.with(|c| {
            let mut c = c.borrow_mut();
            match &*c {
                Some(d) if d.len() as i64 == n => d.clone(),
                _ => {
                    let d: Devices = (0..n).collect::<Vec<i64>>().into();
                    *c = Some(d.clone());
                    d
                }
            }
        });
        Tiling {
            tiles: vec![1; rank],
            repl: n,
            devices,
        }
    }

    /// Builds a tiling from its parts, sorting each replication group.
    pub fn new(tiles: Vec<i64>, repl: i64, devices: impl Into<Devices>) -> Tiling {
        let mut devices = devices.into();
        if repl > 1 && devices.chunks(repl as usize).any(|g| !g.is_sorted()) {
            let mut ids = devices.to_vec();
            for g in ids.chunks_mut(repl as usize) {
                g.sort_unstable();
            }
            devices = ids.into();
        }
        Tiling {
            tiles,
            repl,
            devices,
        }
    }

    /// The same devices in the same replication groups, split as `tiles` (as many tiles in
    /// all): no walk over the devices.
    pub fn retiled(&self, tiles: Vec<i64>) -> Tiling {
        debug_assert_eq!(tiles.iter().product::<i64>(), self.num_tiles());
        Tiling {
            tiles,
            repl: self.repl,
            devices: self.devices.clone(),
        }
    }

    /// The tiling in which device `d` holds the tile `idx[d]` (one entry per device id; each
    /// tile held by `repl` devices).
    pub fn from_tile_indices(tiles: Vec<i64>, repl: i64, idx: &[Vec<i64>]) -> Tiling {
        Tiling::from_tile_index_rows(tiles, repl, idx.iter().map(Vec::as_slice))
    }

    /// [`Tiling::from_tile_indices`] from a flat table.
    pub fn from_tile_index_table(tiles: Vec<i64>, repl: i64, idx: &DeviceTable) -> Tiling {
        Tiling::from_tile_index_rows(tiles, repl, idx.iter())
    }

    fn from_tile_index_rows<'a>(
        tiles: Vec<i64>,
        repl: i64,
        rows: impl ExactSizeIterator<Item = &'a [i64]>,
    ) -> Tiling {
        let mut devices = vec![-1; rows.len()];
        let mut seen = vec![0i64; tiles.iter().product::<i64>() as usize];
        for (d, i) in rows.enumerate() {
            let t = ravel(i, &tiles) as usize;
            devices[t * repl as usize + seen[t] as usize] = d as i64;
            seen[t] += 1;
        }
        // Each replication group was filled in increasing device order: already sorted.
        Tiling {
            tiles,
            repl,
            devices: devices.into(),
        }
    }

    pub fn rank(&self) -> usize {
        self.tiles.len()
    }

    pub fn num_devices(&self) -> i64 {
        self.devices.len() as i64
    }

    pub fn num_tiles(&self) -> i64 {
        self.tiles.iter().product()
    }

    pub fn is_replicated(&self) -> bool {
        self.tiles.iter().all(|&t| t == 1)
    }

    /// `pos[d]`: the row-major position of device `d` in [`Tiling::devices`].
    pub fn positions(&self) -> Vec<usize> {
        let mut pos = vec![usize::MAX; self.devices.len()];
        for (p, &d) in self.devices.iter().enumerate() {
            pos[d as usize] = p;
        }
        pos
    }

    /// The tile index (one entry per data dimension) held at row-major position `pos`.
    pub fn tile_index_at(&self, pos: usize) -> Vec<i64> {
        let mut rest = pos as i64 / self.repl;
        let mut idx = vec![0; self.tiles.len()];
        for i in (0..self.tiles.len()).rev() {
            idx[i] = rest % self.tiles[i];
            rest /= self.tiles[i];
        }
        idx
    }

    /// Tile index of every device, by device id.
    pub fn tile_indices(&self) -> Vec<Vec<i64>> {
        self.tile_index_table().to_rows()
    }

    /// Tile index of every device, by device id, as one flat table.
    pub fn tile_index_table(&self) -> DeviceTable {
        let mut out = DeviceTable::zeros(self.devices.len(), self.rank());
        let mut idx = vec![0i64; self.rank()];
        let repl = self.repl.max(1) as usize;
        let mut left = repl;
        for &d in self.devices.iter() {
            if left == 0 {
                step(&mut idx, &self.tiles);
                left = repl;
            }
            left -= 1;
            for (o, &i) in out.row_mut(d as usize).iter_mut().zip(&idx) {
                *o = i;
            }
        }
        out
    }

    /// The padded shape of one piece of an array of `dims`: `ceil(dims[i] / tiles[i])`.
    pub fn shard_dims(&self, dims: &[i64]) -> Vec<i64> {
        dims.iter()
            .zip(&self.tiles)
            .map(|(&d, &t)| ceil_div(d, t))
            .collect()
    }

    /// Where the piece of each device starts in the global array (unclamped: a padded tile at
    /// the end may start at or past the end), by device id.
    pub fn starts(&self, dims: &[i64]) -> Vec<Vec<i64>> {
        self.start_table(dims).to_rows()
    }

    /// [`Tiling::starts`] as one flat table.
    pub fn start_table(&self, dims: &[i64]) -> DeviceTable {
        let shard = self.shard_dims(dims);
        let mut t = self.tile_index_table();
        for d in 0..t.len() {
            for (i, s) in t.row_mut(d).iter_mut().zip(&shard) {
                *i *= s;
            }
        }
        t
    }

    /// Groups of devices that differ only in their tile index along the data dimensions
    /// `along` (and, if `with_repl`, in their place in the replication group), each ordered by
    /// row-major position along `along`; the groups are ordered by the other dimensions.
    /// With `with_repl` false, each group is taken at one replication position (so a group
    /// holds one device per tile), and there are `repl` times as many groups.
    /// Shared: a collective's groups on a large mesh are long, and the same few are asked for
    /// again and again.
    pub fn groups(&self, along: &[usize], with_repl: bool) -> Groups {
        MEMO.with(|m| {
            let key = (self, along, with_repl);
            let h = fx(&key);
            let mut m = m.borrow_mut();
            if let Some(e) = m
                .groups
                .find(h, |e| (&e.key.0, e.key.1.as_slice(), e.key.2) == key)
            {
                return e.value.clone();
            }
            let out: Groups = Arc::new(self.groups_uncached(along, with_repl));
            Memo::insert(
                &mut m.groups,
                h,
                (self.clone(), along.to_vec(), with_repl),
                out.clone(),
            );
            out
        })
    }

    fn groups_uncached(&self, along: &[usize], with_repl: bool) -> Vec<Vec<i64>> {
        let r = self.tiles.len();
        let mut dims: Vec<i64> = self.tiles.clone();
        dims.push(self.repl);
        let mut inner: Vec<usize> = along.to_vec();
        if with_repl {
            inner.push(r);
        }
        let outer: Vec<usize> = (0..=r).filter(|d| !inner.contains(d)).collect();
        let outer_dims: Vec<i64> = outer.iter().map(|&d| dims[d]).collect();
        let inner_dims: Vec<i64> = inner.iter().map(|&d| dims[d]).collect();
        let n_outer: i64 = outer_dims.iter().product();
        let n_inner: i64 = inner_dims.iter().product();
        // Row-major strides over `tiles ++ [repl]`: each member's position is its group's
        // base plus its offset inside the group.
        let strides = row_major_strides(&dims);
        let offsets = |along: &[usize], extent: &[i64], count: i64| -> Vec<usize> {
            let mut idx = vec![0i64; along.len()];
            (0..count)
                .map(|k| {
                    unravel_into(k, extent, &mut idx);
                    along
                        .iter()
                        .zip(&idx)
                        .map(|(&d, &i)| (i * strides[d]) as usize)
                        .sum()
                })
                .collect()
        };
        let bases = offsets(&outer, &outer_dims, n_outer);
        let members = offsets(&inner, &inner_dims, n_inner);
        bases
            .iter()
            .map(|&b| members.iter().map(|&m| self.devices[b + m]).collect())
            .collect()
    }

    /// The same tiling with the data dimensions `dims` no longer split: their tiles join the
    /// replication groups (what a grouped all-gather along them produces).
    pub fn replicate_dims(&self, dims: &[usize]) -> Tiling {
        MEMO.with(|m| {
            let key = (self, dims);
            let h = fx(&key);
            let mut m = m.borrow_mut();
            if let Some(e) = m
                .replicate
                .find(h, |e| (&e.key.0, e.key.1.as_slice()) == key)
            {
                return e.value.clone();
            }
            let out = self.replicate_dims_uncached(dims);
            Memo::insert(
                &mut m.replicate,
                h,
                (self.clone(), dims.to_vec()),
                out.clone(),
            );
            out
        })
    }

    fn replicate_dims_uncached(&self, dims: &[usize]) -> Tiling {
        let r = self.tiles.len();
        let dropped: Vec<usize> = (0..r).filter(|d| dims.contains(d)).collect();
        let mut tiles = self.tiles.clone();
        let mut extra = 1;
        for &d in &dropped {
            extra *= tiles[d];
            tiles[d] = 1;
        }
        let repl = self.repl * extra;
        let mut new_dims = tiles.clone();
        new_dims.push(repl);
        let mut devices = vec![0; self.devices.len()];
        let is_dropped: Vec<bool> = (0..r).map(|d| dims.contains(&d)).collect();
        let mut old = vec![0i64; r];
        let mut idx = vec![0i64; r + 1];
        let old_repl = self.repl.max(1) as usize;
        for (p, &dev) in self.devices.iter().enumerate() {
            if p > 0 && p % old_repl == 0 {
                step(&mut old, &self.tiles);
            }
            let j = p as i64 % self.repl;
            let mut rep = 0;
            for &d in &dropped {
                rep = rep * self.tiles[d] + old[d];
            }
            rep = rep * self.repl + j;
            for i in 0..r {
                idx[i] = if is_dropped[i] { 0 } else { old[i] };
            }
            idx[r] = rep;
            devices[ravel(&idx, &new_dims) as usize] = dev;
        }
        Tiling::new(tiles, repl, devices)
    }

    /// The tiling of another array whose dimension `i` is this array's dimension `map[i]`
    /// (`None`: a dimension of its own, not split). This array's dimensions that no entry
    /// names stop being split first (their tiles join the replication groups).
    pub fn project(&self, map: &[Option<usize>]) -> Tiling {
        MEMO.with(|m| {
            let key = (self, map);
            let h = fx(&key);
            if let Some(e) = m
                .borrow()
                .project
                .find(h, |e| (&e.key.0, e.key.1.as_slice()) == key)
            {
                return e.value.clone();
            }
            // Not borrowed across the call: projecting may replicate dimensions first.
            let out = self.project_uncached(map);
            Memo::insert(
                &mut m.borrow_mut().project,
                h,
                (self.clone(), map.to_vec()),
                out.clone(),
            );
            out
        })
    }

    fn project_uncached(&self, map: &[Option<usize>]) -> Tiling {
        let r = self.tiles.len();
        let unnamed: Vec<usize> = (0..r).filter(|d| !map.contains(&Some(*d))).collect();
        let base = if unnamed.iter().any(|&d| self.tiles[d] > 1) {
            self.replicate_dims(&unnamed)
        } else {
            self.clone()
        };
        let tiles: Vec<i64> = map.iter().map(|m| m.map_or(1, |d| base.tiles[d])).collect();
        let mut old_dims = base.tiles.clone();
        old_dims.push(base.repl);
        let mut new_dims = tiles.clone();
        new_dims.push(base.repl);
        // Walk the new row-major order, keeping the old position up to date: the new index
        // along dimension i moves the old position by the stride of `map[i]` (the old
        // dimensions no entry names have one tile). A dimension named twice keeps the last
        // entry's index, as an assignment per entry would.
        let old_strides = row_major_strides(&old_dims);
        let mut strides: Vec<i64> = vec![0; new_dims.len()];
        for (i, m) in map.iter().enumerate() {
            if let Some(d) = *m {
                for j in (0..i).filter(|&j| map[j] == Some(d)) {
                    strides[j] = 0;
                }
                strides[i] = old_strides[d];
            }
        }
        strides[map.len()] = old_strides[r];
        let mut devices = Vec::with_capacity(base.devices.len());
        let mut idx = vec![0i64; new_dims.len()];
        let mut pos = 0i64;
        for _ in 0..base.devices.len() {
            devices.push(base.devices[pos as usize]);
            for i in (0..idx.len()).rev() {
                idx[i] += 1;
                pos += strides[i];
                if idx[i] < new_dims[i] {
                    break;
                }
                pos -= strides[i] * new_dims[i];
                idx[i] = 0;
            }
        }
        Tiling::new(tiles, base.repl, devices)
    }

    /// As a [`Sharding`]: iota when the devices are `0..n` in order, explicit otherwise.
    pub fn to_sharding(&self) -> Sharding {
        if self.is_replicated() {
            return Sharding::replicated();
        }
        let mut dims: Vec<i64> = self.tiles.clone();
        let replicate_last = self.repl > 1;
        if replicate_last {
            dims.push(self.repl);
        }
        let iota = self.devices.iter().enumerate().all(|(i, &d)| i as i64 == d);
        let ta = if iota {
            TileAssignment::iota(&dims)
        } else {
            TileAssignment::Explicit {
                dims: dims.iter().copied().collect(),
                devices: self.devices.to_vec(),
            }
            .canonical()
        };
        Sharding::tiled(ta, replicate_last)
    }
}

impl Spec {
    pub fn replicated(rank: usize, n: i64) -> Spec {
        Spec::Tiled(Tiling::replicated(rank, n))
    }

    /// Reads `s` for an array of rank `rank` on `n` devices.
    pub fn from_sharding(s: &Sharding, rank: usize, n: i64) -> Result<Spec, SpecError> {
        MEMO.with(|m| {
            let key = (s, rank, n);
            let h = fx(&key);
            if let Some(e) = m
                .borrow()
                .read
                .find(h, |e| (&e.key.0, e.key.1, e.key.2) == key)
            {
                return Ok(e.value.clone());
            }
            let out = Spec::from_sharding_uncached(s, rank, n)?;
            Memo::insert(
                &mut m.borrow_mut().read,
                h,
                (s.clone(), rank, n),
                out.clone(),
            );
            Ok(out)
        })
    }

    fn from_sharding_uncached(s: &Sharding, rank: usize, n: i64) -> Result<Spec, SpecError> {
        match &s.kind {
            ShardingKind::Replicated | ShardingKind::Unknown => Ok(Spec::replicated(rank, n)),
            ShardingKind::Manual => Ok(Spec::Manual),
            ShardingKind::Maximal(d) => {
                if *d < 0 || *d >= n {
                    return Err(format!("maximal device {d} is not one of the {n} devices"));
                }
                Ok(Spec::Maximal(*d))
            }
            ShardingKind::Named(named) => {
                let t = named.to_tiled(Some(rank))?;
                Spec::from_sharding(&t, rank, n)
            }
            ShardingKind::Tuple(_) => Err("a tuple sharding on an array".to_string()),
            ShardingKind::Unreduced => {
                Err("an {unreduced} sharding (partial sums) is not supported".to_string())
            }
            ShardingKind::Tiled(t) => {
                if t.data_rank() != rank {
                    return Err(format!(
                        "a tiling of {} data dimensions on an array of rank {rank}",
                        t.data_rank()
                    ));
                }
                let types = t.subgroup_types();
                if types.contains(&SubgroupType::Manual) {
                    return Err(
                        "a partially manual sharding (last_tile_dims={manual}) is read \
                         only inside a region entered through SPMDFullToShardShape"
                            .to_string(),
                    );
                }
                if types.iter().any(|&ty| ty != SubgroupType::Replicated) {
                    return Err(format!(
                        "subgroup types {types:?}: only replicated subgroups are read here"
                    ));
                }
                let ta = &t.tile_assignment;
                if ta.num_devices() != n {
                    return Err(format!(
                        "the tile assignment has {} devices, the module {n}",
                        ta.num_devices()
                    ));
                }
                let devices = ta.devices();
                let mut seen = vec![false; n as usize];
                for &d in &devices {
                    if d < 0 || d >= n || std::mem::replace(&mut seen[d as usize], true) {
                        return Err(format!(
                            "device {d} is out of range or listed twice in the tile assignment"
                        ));
                    }
                }
                let tiles = t.data_tile_dims().to_vec();
                let repl = t.replication_factor();
                Ok(Spec::Tiled(Tiling::new(tiles, repl, devices)))
            }
        }
    }

    pub fn to_sharding(&self) -> Sharding {
        match self {
            Spec::Tiled(t) => t.to_sharding(),
            Spec::Maximal(d) => Sharding::maximal(*d),
            Spec::Manual => Sharding::manual(),
        }
    }

    pub fn as_tiling(&self) -> Option<&Tiling> {
        match self {
            Spec::Tiled(t) => Some(t),
            _ => None,
        }
    }

    /// The shape each device holds of an array of `dims`.
    pub fn shard_dims(&self, dims: &[i64]) -> Vec<i64> {
        match self {
            Spec::Tiled(t) => t.shard_dims(dims),
            Spec::Maximal(_) | Spec::Manual => dims.to_vec(),
        }
    }
}

/// Answers already computed on this thread: a large module reads the same few shardings and
/// projects the same few tilings thousands of times, and each answer costs a walk over every
/// device. The functions are pure, so a remembered answer is the answer; each table is
/// emptied when it reaches [`Memo::LIMIT`] entries, which bounds the memory.
#[derive(Default)]
pub(super) struct Memo {
    replicate: MemoTable<(Tiling, Vec<usize>), Tiling>,
    project: MemoTable<(Tiling, Vec<Option<usize>>), Tiling>,
    read: MemoTable<(Sharding, usize, i64), Spec>,
    groups: MemoTable<(Tiling, Vec<usize>, bool), Groups>,
}

/// Remembered answers keyed by `K`.
pub(super) type MemoTable<K, V> = HashTable<Entry<K, V>>;

/// One remembered answer: its key's hash ([`fx`]), the key and the answer.
pub(super) struct Entry<K, V> {
    hash: u64,
    pub key: K,
    pub value: V,
}

impl Memo {
    /// Entries per table before it is emptied.
    pub(super) const LIMIT: usize = 1024;

    /// Remembers `value` for `key` (whose [`fx`] is `hash`).
    pub(super) fn insert<K, V>(table: &mut MemoTable<K, V>, hash: u64, key: K, value: V) {
        if table.len() >= Self::LIMIT {
            table.clear();
        }
        table.insert_unique(hash, Entry { hash, key, value }, |e| e.hash);
    }
}

thread_local! {
    static MEMO: RefCell<Memo> = RefCell::new(Memo::default());
}

/// The Fx hash of a memo key.
pub(super) fn fx<T: Hash + ?Sized>(key: &T) -> u64 {
    let mut h = FxHasher::default();
    key.hash(&mut h);
    h.finish()
}

pub fn ceil_div(a: i64, b: i64) -> i64 {
    if b <= 1 {
        a
    } else {
        (a + b - 1) / b
    }
}

pub(crate) fn unravel(mut linear: i64, dims: &[i64]) -> Vec<i64> {
    let mut idx = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        if dims[i] > 0 {
            idx[i] = linear % dims[i];
            linear /= dims[i];
        }
    }
    idx
}

/// Row-major strides of an array of `dims`.
pub(crate) fn row_major_strides(dims: &[i64]) -> Vec<i64> {
    let mut strides = vec![0i64; dims.len()];
    let mut s = 1;
    for i in (0..dims.len()).rev() {
        strides[i] = s;
        s *= dims[i];
    }
    strides
}

/// [`unravel`] into `out` (as long as `dims`).
pub(crate) fn unravel_into(mut linear: i64, dims: &[i64], out: &mut [i64]) {
    for i in (0..dims.len()).rev() {
        out[i] = 0;
        if dims[i] > 0 {
            out[i] = linear % dims[i];
            linear /= dims[i];
        }
    }
}

/// Advances the row-major index `idx` over `dims` by one (wrapping to zeros after the last).
pub(crate) fn step(idx: &mut [i64], dims: &[i64]) {
    for i in (0..idx.len()).rev() {
        idx[i] += 1;
        if idx[i] < dims[i] {
            return;
        }
        idx[i] = 0;
    }
}

pub(crate) fn ravel(idx: &[i64], dims: &[i64]) -> i64 {
    let mut l = 0;
    for (i, d) in idx.iter().zip(dims) {
        l = l * d + i;
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::text::parse_sharding;

    fn spec(text: &str, rank: usize, n: i64) -> Spec {
        let s = parse_sharding(text).unwrap();
        Spec::from_sharding(&s, rank, n).unwrap()
    }

    #[test]
    fn spellings_of_the_same_placement_are_equal() {
        assert_eq!(
            spec("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", 2, 4),
            spec("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", 2, 4)
        );
        assert_eq!(
            spec("{devices=[2,1,2]1,0,3,2 last_tile_dim_replicate}", 2, 4),
            spec("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", 2, 4)
        );
        assert_eq!(
            spec("{replicated}", 2, 4),
            spec("{devices=[1,1,4]<=[4] last_tile_dim_replicate}", 2, 4)
        );
        assert_eq!(
            spec("{devices=[2,2]<=[2,2]T(1,0)}", 2, 4),
            spec("{devices=[2,2]0,2,1,3}", 2, 4)
        );
        assert_ne!(
            spec("{devices=[2,2]<=[4]}", 2, 4),
            spec("{devices=[2,2]0,2,1,3}", 2, 4)
        );
    }

    #[test]
    fn bad_shardings_are_refused() {
        let s = parse_sharding("{devices=[2,2]<=[4]}").unwrap();
        assert!(Spec::from_sharding(&s, 3, 4)
            .unwrap_err()
            .contains("rank 3"));
        assert!(Spec::from_sharding(&s, 2, 8)
            .unwrap_err()
            .contains("4 devices"));
        let s = parse_sharding("{maximal device=9}").unwrap();
        assert!(Spec::from_sharding(&s, 2, 8).is_err());
    }

    #[test]
    fn tables_and_projections_agree_with_each_devices_tile() {
        // Random tilings of 8 and 16 devices: the flat table holds each device's tile, a
        // projection gives each device the tile its source dimensions name, and equal device
        // lists share their allocation.
        use crate::partition::plan::tests::{random_spec, Gen};
        // (200 cases make fewer distinct lists than the shared table holds, so it is never
        // emptied in between.)
        let mut g = Gen::new(5);
        for _ in 0..200 {
            let n = [8i64, 16][g.next(2) as usize];
            let rank = 1 + g.next(3) as usize;
            let Spec::Tiled(t) = random_spec(&mut g, rank, n) else {
                continue;
            };
            let table = t.tile_index_table();
            let pos = t.positions();
            for d in 0..n as usize {
                assert_eq!(table[d], t.tile_index_at(pos[d])[..], "{t:?} device {d}");
            }
            // Every dimension named once, in a random order, with a new unsplit one.
            let mut map: Vec<Option<usize>> = (0..rank).map(Some).collect();
            for i in (1..map.len()).rev() {
                map.swap(i, g.next(i as u64 + 1) as usize);
            }
            map.insert(g.next(rank as u64 + 1) as usize, None);
            let p = t.project(&map);
            let want: Vec<Vec<i64>> = table
                .iter()
                .map(|ix| map.iter().map(|m| m.map_or(0, |d| ix[d])).collect())
                .collect();
            assert_eq!(p.tile_indices(), want, "{t:?} projected by {map:?}");
            let again = Tiling::new(t.tiles.clone(), t.repl, t.devices.to_vec());
            assert!(Arc::ptr_eq(&again.devices.ids, &t.devices.ids));
        }
    }

    #[test]
    fn groups_and_replicate_dims() {
        let Spec::Tiled(t) = spec("{devices=[2,2]0,2,1,3}", 2, 4) else {
            panic!()
        };
        // Along dim 0: devices that share the dim-1 index.
        assert_eq!(*t.groups(&[0], false), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(*t.groups(&[1], false), vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(*t.groups(&[0, 1], false), vec![vec![0, 2, 1, 3]]);
        let r = t.replicate_dims(&[1]);
        assert_eq!(r.tiles, vec![2, 1]);
        assert_eq!(r.repl, 2);
        assert_eq!(r.devices, vec![0, 2, 1, 3]);
        assert_eq!(
            Spec::Tiled(r),
            spec("{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}", 2, 4)
        );
        assert_eq!(
            t.starts(&[5, 4]),
            vec![vec![0, 0], vec![3, 0], vec![0, 2], vec![3, 2]]
        );
        let back = Spec::from_sharding(&t.to_sharding(), 2, 4).unwrap();
        assert_eq!(back, Spec::Tiled(t));
    }
}
