//! Partially manual regions (jax's shard_map over some mesh axes; XLA's ManualSubgroup).
//!
//! A sharding with a manual subgroup dimension (`last_tile_dims={manual}`) splits the devices
//! into `M` manual groups of `G = N / M` devices. Inside the region every group holds its own
//! value (of the region's shape) and partitions it over its `G` devices by the sharding's data
//! tiles (and replicated subgroups). So each instruction of the region is partitioned exactly
//! like an ordinary instruction on `G` devices, with local device ids `0..G` that stand for
//! device `groups[k][l]` in group `k`: the engine runs the instruction's handler in that
//! *view* (`Engine::n = G`), and maps what it emits back to real devices: every collective
//! group of local ids becomes one group per manual group, and per-device tables are laid out
//! by real partition id.
//!
//! Collectives written inside the region (a psum over the manual axis) are kept as written;
//! they must combine devices that hold the same local piece in different manual groups.

use super::*;
use tessera_hlo::sharding::SubgroupType;

/// Real devices of each manual group, indexed by local device id.
pub(super) type Groups = Vec<Vec<i64>>;

/// Reads a sharding with a manual subgroup dimension: the tiling of one group's value over
/// its local devices, and the groups. `None` when `s` has no manual subgroup.
pub(super) fn read(
    s: &Sharding,
    rank: usize,
    n: i64,
) -> std::result::Result<Option<(Tiling, Groups)>, String> {
    let ShardingKind::Tiled(t) = &s.kind else {
        return Ok(None);
    };
    let types = t.subgroup_types();
    if !types.contains(&SubgroupType::Manual) {
        return Ok(None);
    }
    if types
        .iter()
        .any(|&ty| ty != SubgroupType::Manual && ty != SubgroupType::Replicated)
    {
        return Err(format!(
            "subgroup types {types:?}: only manual and replicated are read"
        ));
    }
    if t.data_rank() != rank {
        return Err(format!(
            "a tiling of {} data dimensions on an array of rank {rank}",
            t.data_rank()
        ));
    }
    let ta = &t.tile_assignment;
    if ta.num_devices() != n {
        return Err(format!(
            "the tile assignment has {} devices, the module {n}",
            ta.num_devices()
        ));
    }
    let all: Vec<i64> = ta.dims().to_vec();
    let devices = ta.devices();
    let is_manual: Vec<bool> = (0..all.len())
        .map(|d| d >= rank && types[d - rank] == SubgroupType::Manual)
        .collect();
    let manual_dims: Vec<i64> = (0..all.len())
        .filter(|&d| is_manual[d])
        .map(|d| all[d])
        .collect();
    let local_dims: Vec<i64> = (0..all.len())
        .filter(|&d| !is_manual[d])
        .map(|d| all[d])
        .collect();
    let m: i64 = manual_dims.iter().product();
    let g = n / m;
    let mut groups = vec![vec![-1i64; g as usize]; m as usize];
    for (p, &dev) in devices.iter().enumerate() {
        let idx = super::super::spec::unravel(p as i64, &all);
        let mi: Vec<i64> = (0..all.len())
            .filter(|&d| is_manual[d])
            .map(|d| idx[d])
            .collect();
        let li: Vec<i64> = (0..all.len())
            .filter(|&d| !is_manual[d])
            .map(|d| idx[d])
            .collect();
        let k = super::super::spec::ravel(&mi, &manual_dims) as usize;
        let l = super::super::spec::ravel(&li, &local_dims) as usize;
        groups[k][l] = dev;
    }
    let tiles = t.data_tile_dims().to_vec();
    let repl = g / tiles.iter().product::<i64>().max(1);
    Ok(Some((
        Tiling::new(tiles, repl, (0..g).collect::<Vec<i64>>()),
        groups,
    )))
}

/// The tree of instruction `id` when its sharding has manual subgroups (every array leaf must
/// then agree on the groups; other leaves are replicated within the group).
pub(super) fn tree(m: &Module, id: InstrId, n: i64) -> Result<Option<(Tree, Groups)>> {
    let i = m.instr(id);
    let Some(s) = i.sharding.as_ref() else {
        return Ok(None);
    };
    let leaves: Vec<Sharding> = match &s.kind {
        ShardingKind::Tuple(l) => l.clone(),
        _ => vec![s.clone(); i.shape.leaf_count()],
    };
    let mut found: Option<Groups> = None;
    let mut k = 0;
    let name = i.name().to_string();
    let mut err = None;
    let t = walk(&i.shape, &leaves, &mut k, n, &mut found, &mut err);
    if let Some(e) = err {
        return Err(fail(format!("%{name}: {e}")));
    }
    Ok(found.map(|g| (t, g)))
}

fn walk(
    shape: &Shape,
    leaves: &[Sharding],
    k: &mut usize,
    n: i64,
    found: &mut Option<Groups>,
    err: &mut Option<String>,
) -> Tree {
    match shape {
        Shape::Tuple(e) => Tree::Tuple(
            e.iter()
                .map(|s| walk(s, leaves, k, n, found, err))
                .collect(),
        ),
        _ => {
            let rank = shape.rank();
            let s = leaves.get(*k).cloned();
            *k += 1;
            let read = s.map(|s| read(&s, rank, n)).transpose();
            match read {
                Ok(Some(Some((t, g)))) => {
                    if found.as_ref().is_some_and(|f| *f != g) {
                        *err = Some("tuple elements with different manual subgroups".to_string());
                    }
                    *found = Some(g);
                    Tree::Leaf(Spec::Tiled(t))
                }
                Ok(_) => Tree::Leaf(Spec::replicated(rank, n)),
                Err(e) => {
                    *err = Some(e);
                    Tree::Leaf(Spec::replicated(rank, n))
                }
            }
        }
    }
}

impl Engine<'_> {
    /// `groups` of local device ids as groups of real ones: one copy per manual group.
    pub(super) fn real_groups(&self, groups: &[Vec<i64>]) -> Vec<Vec<i64>> {
        match &self.view {
            None => groups.to_vec(),
            Some(v) => v
                .iter()
                .flat_map(|real| {
                    groups
                        .iter()
                        .map(move |g| g.iter().map(|&l| real[l as usize]).collect())
                })
                .collect(),
        }
    }

    /// Source-target pairs of local ids as pairs of real ones, in every manual group.
    pub(super) fn real_pairs(&self, pairs: &[(i64, i64)]) -> Vec<(i64, i64)> {
        match &self.view {
            None => pairs.to_vec(),
            Some(v) => v
                .iter()
                .flat_map(|real| {
                    pairs
                        .iter()
                        .map(move |&(s, t)| (real[s as usize], real[t as usize]))
                })
                .collect(),
        }
    }

    /// A per-device table of local ids laid out by real partition id.
    pub(super) fn real_table(&self, values: &[i64]) -> Vec<i64> {
        match &self.view {
            None => values.to_vec(),
            // A table already laid out by real partition id stays as it is.
            Some(v) if v.first().is_none_or(|g| g.len() != values.len()) => values.to_vec(),
            Some(v) => {
                let n: usize = v.iter().map(Vec::len).sum();
                let mut out = vec![0; n];
                for real in v {
                    for (l, &d) in real.iter().enumerate() {
                        out[d as usize] = values[l];
                    }
                }
                out
            }
        }
    }

    /// Partitions `id` in the view of its manual subgroups.
    pub(super) fn in_view(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
        groups: Groups,
        params: &[Tree],
    ) -> Result<()> {
        let saved_n = self.n;
        let saved_view = self.view.replace(groups);
        self.n = saved_n / self.view.as_ref().map_or(1, |v| v.len() as i64);
        let r = self.dispatch(b, id, own, params);
        self.n = saved_n;
        self.view = saved_view;
        r
    }

    /// A collective written inside a partially manual region: kept as written when each of
    /// its groups combines devices holding the same local piece in different manual groups
    /// (a psum over the manual axis); the operand is brought to the result's tiling first.
    pub(super) fn manual_collective_in_view(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
    ) -> Result<()> {
        let i = b.module().instr(id).clone();
        let view = self.view.clone().unwrap_or_default();
        let mut local_of = HashMap::new();
        for (k, real) in view.iter().enumerate() {
            for (l, &d) in real.iter().enumerate() {
                local_of.insert(d, (k, l));
            }
        }
        let groups = match i.attrs.replica_groups.as_ref().map(|g| g.groups()) {
            Some(Ok(g)) => g,
            Some(Err(e)) => return Err(fail(format!("%{}: {e}", i.name()))),
            None => Vec::new(),
        };
        if groups.is_empty() {
            return Err(fail(format!(
                "%{}: a collective in a partially manual region needs explicit replica groups",
                i.name()
            )));
        }
        for g in &groups {
            let ls: Vec<_> = g.iter().filter_map(|d| local_of.get(d)).collect();
            let same_piece = ls.len() == g.len() && ls.iter().all(|(_, l)| *l == ls[0].1);
            let ks: HashSet<usize> = ls.iter().map(|(k, _)| *k).collect();
            if !same_piece || ks.len() != g.len() {
                return Err(fail(format!(
                    "%{}: a collective in a partially manual region must combine devices that \
                     hold the same piece in different manual subgroups; group {g:?} does not",
                    i.name()
                )));
            }
        }
        let mut ops = Vec::with_capacity(i.operands().len());
        for k in 0..i.operands().len() {
            ops.push(self.operand(b, id, k, &own)?);
        }
        let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }
}
