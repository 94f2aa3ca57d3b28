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
    if let ShardingKind::Named(named) = &s.kind {
        // Shardy's mesh form: read as its tiled equivalent.
        return read(&named.to_tiled(Some(rank))?, rank, n);
    }
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
    // Asked of every instruction: answered without building a tree when no leaf has a manual
    // subgroup (a replicated leaf on 512 devices lists 512 of them).
    fn may_be_partial(s: &Sharding) -> bool {
        match &s.kind {
            ShardingKind::Tuple(l) => l.iter().any(may_be_partial),
            ShardingKind::Named(_) => true,
            _ => s.is_manual_subgroup(),
        }
    }
    if !may_be_partial(s) {
        return Ok(None);
    }
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

/// The real device of local id `l` in a manual group of devices `real`.
fn local(real: &[i64], l: i64) -> Result<i64> {
    usize::try_from(l)
        .ok()
        .and_then(|k| real.get(k).copied())
        .ok_or_else(|| {
            fail(format!(
                "a collective inside a partially manual region names device {l} of a manual \
                 group of {} devices: an operand partitioned over all the devices is used \
                 inside the region; a value enters a partially manual region through a \
                 custom-call to SPMDFullToShardShape",
                real.len()
            ))
        })
}

impl Engine<'_> {
    /// `groups` of local device ids as groups of real ones: one copy per manual group. Refused
    /// when a group names a local id past the view's devices: a value from outside the region
    /// (partitioned over all devices) used by an instruction inside it, other than through
    /// `SPMDFullToShardShape`.
    pub(super) fn real_groups<'g>(
        &self,
        groups: &'g [Vec<i64>],
    ) -> Result<std::borrow::Cow<'g, [Vec<i64>]>> {
        match &self.view {
            // Outside a region the groups are the real ones (not copied: on 512 devices each
            // group list names every device).
            None => Ok(std::borrow::Cow::Borrowed(groups)),
            Some(v) => v
                .iter()
                .flat_map(|real| {
                    groups
                        .iter()
                        .map(move |g| g.iter().map(|&l| local(real, l)).collect())
                })
                .collect::<Result<Vec<Vec<i64>>>>()
                .map(Into::into),
        }
    }

    /// Source-target pairs of local ids as pairs of real ones, in every manual group (refused
    /// as [`Engine::real_groups`] says).
    pub(super) fn real_pairs(&self, pairs: &[(i64, i64)]) -> Result<Vec<(i64, i64)>> {
        match &self.view {
            None => Ok(pairs.to_vec()),
            Some(v) => v
                .iter()
                .flat_map(|real| {
                    pairs
                        .iter()
                        .map(move |&(s, t)| Ok((local(real, s)?, local(real, t)?)))
                })
                .collect(),
        }
    }

    /// The one door through which the engine emits a collective: `groups` hold local device
    /// ids, translated to real ones in a partially manual region ([`Engine::real_groups`]),
    /// then built by the [`CollectiveOps`]. Every handler calls these, so none can hand the
    /// creator a view's local ids (XLA wraps its creator per manual group for the same reason).
    pub(super) fn all_reduce(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        reducer: CompId,
        groups: &[Vec<i64>],
    ) -> Result<InstrId> {
        let groups = self.real_groups(groups)?;
        self.creator.all_reduce(b, x, reducer, &groups)
    }

    /// An all-gather through the door ([`Engine::all_reduce`]).
    pub(super) fn all_gather(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dimension: i64,
        groups: &[Vec<i64>],
    ) -> Result<InstrId> {
        let groups = self.real_groups(groups)?;
        self.creator.all_gather(b, x, dimension, &groups)
    }

    /// An all-to-all through the door ([`Engine::all_reduce`]).
    pub(super) fn all_to_all(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dimension: i64,
        groups: &[Vec<i64>],
    ) -> Result<InstrId> {
        let groups = self.real_groups(groups)?;
        self.creator.all_to_all(b, x, dimension, &groups)
    }

    /// A reduce-scatter through the door ([`Engine::all_reduce`]).
    pub(super) fn reduce_scatter(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dimension: i64,
        op: Opcode,
        groups: &[Vec<i64>],
    ) -> Result<InstrId> {
        let groups = self.real_groups(groups)?;
        self.creator.reduce_scatter(b, x, dimension, op, &groups)
    }

    /// A collective-permute through the door ([`Engine::all_reduce`]): `pairs` of local ids.
    pub(super) fn collective_permute(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        pairs: &[(i64, i64)],
    ) -> Result<InstrId> {
        let pairs = self.real_pairs(pairs)?;
        self.creator.collective_permute(b, x, &pairs)
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
        let name = b.module().instr(id).name().to_string();
        self.in_groups(groups, |e| e.dispatch(b, id, own, params))
            .map_err(|e| match e {
                PassError::Failed(m) if !m.starts_with('%') => {
                    PassError::Failed(format!("%{name}: {m}"))
                }
                e => e,
            })
    }

    /// Runs `f` in the view of the manual subgroups `groups`.
    pub(super) fn in_groups<T>(
        &mut self,
        groups: Groups,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let saved_n = self.n;
        let real = self.real_device_count();
        let m = groups.len().max(1) as i64;
        let saved_view = self.view.replace(groups);
        self.n = real / m;
        let r = f(self);
        self.n = saved_n;
        self.view = saved_view;
        r
    }

    /// A collective written inside a partially manual region (jax's psum, all_gather,
    /// psum_scatter, all_to_all, ppermute over the manual axes): kept as written. Each of its
    /// groups (or permute pairs) must join devices that hold the same local piece in
    /// different manual subgroups; then the collective acts on the pieces as it acts on the
    /// subgroups' values, provided the dimensions it gathers, scatters or exchanges are whole
    /// in the piece. So the operands take the result's tiling with those dimensions
    /// unsplit, the collective is cloned on them, and its result is resharded to its own
    /// sharding.
    pub(super) fn collective_in_view(
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
        let bad = |what: String| {
            fail(format!(
                "%{}: a collective in a partially manual region must combine devices that hold \
                 the same piece in different manual subgroups; {what} does not",
                i.name()
            ))
        };
        if i.opcode() == Opcode::CollectivePermute {
            let pairs = i.attrs.source_target_pairs.clone().unwrap_or_default();
            for &(s, t) in &pairs {
                match (local_of.get(&s), local_of.get(&t)) {
                    (Some(a), Some(c)) if a.1 == c.1 => {}
                    _ => return Err(bad(format!("the pair {{{s},{t}}}"))),
                }
            }
        } else {
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
                    return Err(bad(format!("group {g:?}")));
                }
            }
        }
        // The dimensions the collective moves data along must be whole in each piece.
        let moved: Vec<usize> = match i.opcode() {
            Opcode::AllGather | Opcode::ReduceScatter | Opcode::AllToAll => i
                .attrs
                .dimensions
                .iter()
                .flatten()
                .map(|&d| d as usize)
                .collect(),
            _ => Vec::new(),
        };
        let whole = |t: &Tree| -> Tree {
            match t {
                Tree::Leaf(Spec::Tiled(tl))
                    if moved.iter().any(|&d| tl.tiles.get(d) > Some(&1)) =>
                {
                    Tree::Leaf(Spec::Tiled(tl.replicate_dims(&moved)))
                }
                other => other.clone(),
            }
        };
        let work = whole(&own);
        let nops = i.operands().len();
        let mut ops = Vec::with_capacity(nops);
        for k in 0..nops {
            // A variadic collective: operand k takes element k of the result's tree.
            let target = match &work {
                Tree::Tuple(e) if nops > 1 && e.len() == nops => e[k].clone(),
                t => t.clone(),
            };
            ops.push(self.operand(b, id, k, &target)?);
        }
        let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &work))?;
        if work == own {
            self.set(id, out, own);
            return Ok(());
        }
        let v = Value {
            local: out,
            tree: work,
        };
        let local = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, local, own);
        Ok(())
    }

    /// The real devices of the module, whatever the view.
    pub(super) fn real_device_count(&self) -> i64 {
        match &self.view {
            None => self.n,
            Some(v) => v.iter().map(|g| g.len() as i64).sum(),
        }
    }

    /// Checks that `full` (a tiling of the whole array of `full_dims` over every device) puts
    /// on each device the piece that `part` (a tiling of one manual subgroup's array of
    /// `part_dims` over the subgroup's local devices, `groups`) gives it, with each
    /// subgroup's array one block of the whole: the placement, not only the shapes, of
    /// `SPMDFullToShardShape` and `SPMDShardToFullShape` into and out of a partially manual
    /// region. `Err` says which device holds what.
    pub(super) fn check_placement(
        full: &Spec,
        full_dims: &[i64],
        part: &Spec,
        part_dims: &[i64],
        groups: &Groups,
    ) -> std::result::Result<(), String> {
        let (Spec::Tiled(f), Spec::Tiled(p)) = (full, part) else {
            return Ok(());
        };
        if f.rank() != full_dims.len() || p.rank() != part_dims.len() || f.rank() != p.rank() {
            return Err("ranks differ".to_string());
        }
        let fshard = f.shard_dims(full_dims);
        let pshard = p.shard_dims(part_dims);
        if fshard != pshard {
            return Err(format!("pieces of {fshard:?} and {pshard:?}"));
        }
        let fstarts = f.starts(full_dims);
        let pstarts = p.starts(part_dims);
        for (k, real) in groups.iter().enumerate() {
            let mut offset: Option<Vec<i64>> = None;
            for (l, &d) in real.iter().enumerate() {
                let (Some(fs), Some(ps)) = (fstarts.get(d as usize), pstarts.get(l)) else {
                    return Err(format!("device {d} is not one of the tiling's devices"));
                };
                let o: Vec<i64> = fs.iter().zip(ps).map(|(a, c)| a - c).collect();
                let block = o
                    .iter()
                    .zip(part_dims)
                    .all(|(&x, &s)| x >= 0 && (s == 0 || x % s == 0));
                if !block {
                    return Err(format!(
                        "device {d} holds the piece at {fs:?} of the whole array, which is not \
                         the piece at {ps:?} of a block of manual subgroup {k}"
                    ));
                }
                match &offset {
                    None => offset = Some(o),
                    Some(prev) if *prev == o => {}
                    Some(prev) => {
                        return Err(format!(
                            "manual subgroup {k}'s devices hold pieces of different blocks \
                             ({prev:?} and {o:?}); device {d} is at {fs:?}"
                        ))
                    }
                }
            }
        }
        Ok(())
    }
}
