//! Resharding plans: which collectives take an array from one [`Spec`] to another.
//!
//! Planning is pure (no IR): a plan is a list of [`Step`]s, each naming its collective, its
//! device groups and the tiling it leaves behind, so that it can be tested, costed and
//! explained without building anything. `reshard.rs` turns a plan into instructions.
//!
//! The order in which routes are tried, cheapest first:
//! 1. nothing, when both specs place the same data on the same devices;
//! 2. a local slice, when every device's new piece lies inside the piece it holds (from
//!    replicated, or to a finer tiling: partial-replication changes included);
//! 3. one collective-permute, when the tiles are the same and only the device order differs;
//! 4. one all-to-all, when one dimension's split moves to another dimension;
//! 5. one all-gather over the dimensions whose split differs (grouped, several dimensions in
//!    one collective), then a local slice or a permute if still needed;
//! 6. the last resort: gather everything, then slice. Each use is counted in the report.

use std::cell::RefCell;
use std::sync::Arc;

use hashbrown::HashTable;

use super::spec::{
    ceil_div, fx, ravel, unravel_into, DeviceTable, Groups, Memo, MemoTable, Spec, Tiling,
};

/// One step of a plan. `to` is the tiling after the step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Every device takes its new piece out of the one it holds: a dynamic-slice of `sizes` at
    /// `offsets[device]` after padding the high end of each dimension by `pad_high`.
    Slice {
        to: Tiling,
        sizes: Vec<i64>,
        offsets: DeviceTable,
        pad_high: Vec<i64>,
    },
    /// One all-gather over the data dimensions `dims` in `groups` (each ordered row-major over
    /// the tile indices along `dims`).
    AllGather {
        to: Tiling,
        dims: Vec<usize>,
        /// Tiles along each of `dims` before the gather (the product is the group size).
        tiles: Vec<i64>,
        groups: Groups,
    },
    /// One all-to-all over `groups`, for several dimensions at once: each `(d, g)` in `split`
    /// cuts dimension `d`'s piece into `g` more pieces, each `(d, f)` in `concat` gathers `f`
    /// neighbouring pieces of dimension `d` (the minor part of its split moves). The products
    /// of the `g`s and of the `f`s are the group size; a member's place in its group is its
    /// row-major index over the `concat` minor parts, and the sub-piece it keeps is the one at
    /// that same index over the `split` parts.
    AllToAll {
        to: Tiling,
        split: Vec<(usize, i64)>,
        concat: Vec<(usize, i64)>,
        groups: Groups,
    },
    /// One collective-permute with `(source, target)` pairs (identity pairs included, so
    /// every device receives).
    Permute { to: Tiling, pairs: Vec<(i64, i64)> },
    /// The value of device `device` sent to every device (an all-reduce of the value masked
    /// to zero elsewhere).
    FromMaximal { device: i64, rank: usize, n: i64 },
}

impl Step {
    pub fn name(&self) -> &'static str {
        match self {
            Step::Slice { .. } => "slice",
            Step::AllGather { .. } => "all-gather",
            Step::AllToAll { .. } => "all-to-all",
            Step::Permute { .. } => "collective-permute",
            Step::FromMaximal { .. } => "all-reduce",
        }
    }

    pub fn to(&self) -> Spec {
        match self {
            Step::Slice { to, .. }
            | Step::AllGather { to, .. }
            | Step::AllToAll { to, .. }
            | Step::Permute { to, .. } => Spec::Tiled(to.clone()),
            Step::FromMaximal { rank, n, .. } => Spec::replicated(*rank, *n),
        }
    }

    /// Bytes each device receives (ORACLE.md's formulas), for an array of `dims` whose
    /// elements take `elem` bytes.
    pub fn bytes(&self, dims: &[i64], elem: i64) -> i64 {
        let out = |t: &Tiling| t.shard_dims(dims).iter().product::<i64>() * elem;
        match self {
            Step::Slice { .. } => 0,
            Step::AllGather { to, groups, .. } | Step::AllToAll { to, groups, .. } => {
                let g = groups.first().map_or(1, |g| g.len() as i64);
                out(to) * (g - 1) / g
            }
            Step::Permute { to, pairs } => {
                if pairs.iter().all(|(s, t)| s == t) {
                    0
                } else {
                    out(to)
                }
            }
            Step::FromMaximal { n, .. } => {
                2 * dims.iter().product::<i64>() * elem * (n - 1) / n.max(&1)
            }
        }
    }
}

/// A resharding plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// The plan gathers the whole array although the target is not replicated.
    pub last_resort: bool,
}

impl Plan {
    pub fn bytes(&self, dims: &[i64], elem: i64) -> i64 {
        self.steps.iter().map(|s| s.bytes(dims, elem)).sum()
    }
}

/// Why no plan exists.
pub type PlanError = String;

/// Plans the move of an array of `dims` from `src` to `dst` on `n` devices. Shared: a plan
/// holds per-device offsets and groups, and the same few are asked for again and again.
pub fn plan(src: &Spec, dst: &Spec, dims: &[i64], n: i64) -> Result<Arc<Plan>, PlanError> {
    type Key = (Spec, Spec, Vec<i64>, i64);
    thread_local! {
        // Plans are pure: a module reshards the same few pairs of specs on the same shapes
        // again and again, and a plan costs walks over every device (see `spec::Memo`).
        static PLANS: RefCell<MemoTable<Key, Arc<Plan>>> = const { RefCell::new(HashTable::new()) };
    }
    let key = (src, dst, dims, n);
    let h = fx(&key);
    let known = PLANS.with(|p| {
        p.borrow()
            .find(h, |e| {
                (&e.key.0, &e.key.1, e.key.2.as_slice(), e.key.3) == key
            })
            .map(|e| e.value.clone())
    });
    if let Some(p) = known {
        return Ok(p);
    }
    let p = Arc::new(plan_uncached(src, dst, dims, n)?);
    PLANS.with(|t| {
        Memo::insert(
            &mut t.borrow_mut(),
            h,
            (src.clone(), dst.clone(), dims.to_vec(), n),
            p.clone(),
        )
    });
    Ok(p)
}

fn plan_uncached(src: &Spec, dst: &Spec, dims: &[i64], n: i64) -> Result<Plan, PlanError> {
    match (src, dst) {
        (Spec::Manual, Spec::Manual) => Ok(Plan::default()),
        (Spec::Manual, _) | (_, Spec::Manual) => Err(format!(
            "cannot reshard between a manual value and {}",
            if src == &Spec::Manual {
                "a non-manual sharding"
            } else {
                "a manual sharding"
            }
        )),
        (Spec::Maximal(a), Spec::Maximal(b)) if a == b => Ok(Plan::default()),
        (Spec::Maximal(d), _) => {
            let first = Step::FromMaximal {
                device: *d,
                rank: dims.len(),
                n,
            };
            let mut p = match dst {
                Spec::Tiled(t) => plan_tiled(&Tiling::replicated(dims.len(), n), t, dims),
                // Maximal to another device: the replicated value is on it.
                _ => Plan::default(),
            };
            p.steps.insert(0, first);
            Ok(p)
        }
        (Spec::Tiled(s), Spec::Maximal(_)) => {
            // Every device computes the whole value; the chosen one keeps it.
            Ok(plan_tiled(
                s,
                &Tiling::replicated(dims.len(), s.num_devices()),
                dims,
            ))
        }
        (Spec::Tiled(s), Spec::Tiled(t)) => {
            if s.rank() != dims.len() || t.rank() != dims.len() {
                return Err(format!(
                    "tilings of rank {} and {} for an array of rank {}",
                    s.rank(),
                    t.rank(),
                    dims.len()
                ));
            }
            if s.num_devices() != t.num_devices() {
                return Err(format!(
                    "tilings over {} and {} devices",
                    s.num_devices(),
                    t.num_devices()
                ));
            }
            Ok(plan_tiled(s, t, dims))
        }
    }
}

fn plan_tiled(src: &Tiling, dst: &Tiling, dims: &[i64]) -> Plan {
    let base = plan_tiled_direct(src, dst, dims);
    if src.repl == dst.repl || base.steps.iter().all(|s| matches!(s, Step::Slice { .. })) {
        return base;
    }
    // The replication changes: an all-to-all can still do most of the moving, after a local
    // slice (less replication) or before a grouped all-gather (more). Taken only when it
    // moves fewer bytes than the direct routes (compared at 840 bytes per element, as below).
    let better = regroup_then_all_to_all(src, dst, dims)
        .into_iter()
        .chain(all_to_all_then_regroup(src, dst, dims))
        .filter(|p| p.bytes(dims, 840) < base.bytes(dims, 840))
        .min_by_key(|p| p.bytes(dims, 840));
    // Chosen against the direct routes as gather-then-permute; emitted with the permute first
    // where that moves less (the same collectives, so it is a pure win, while a route with
    // more collectives than the direct one must save its bytes in the first place).
    better.map_or(base, |p| permute_before_gather(p, dst, dims))
}

/// Less replication after the move (`src.repl = r * dst.repl`): each replication group of
/// `src` first splits one dimension `r` more ways by a local slice (no data moves), then one
/// all-to-all (and a permute into `dst`'s order, if needed) moves the splits where `dst` wants
/// them. XLA's ComplexReshardFromPartialReplicate. One candidate per dimension and per way of
/// numbering the new sub-pieces.
fn regroup_then_all_to_all(src: &Tiling, dst: &Tiling, dims: &[i64]) -> Vec<Plan> {
    let mut out = Vec::new();
    if src.repl <= dst.repl || src.repl % dst.repl != 0 {
        return out;
    }
    let r = src.repl / dst.repl;
    let idx = src.tile_index_table();
    let mut place = vec![0i64; src.devices.len()];
    for (p, &dev) in src.devices.iter().enumerate() {
        place[dev as usize] = p as i64 % src.repl;
    }
    for d in 0..src.rank() {
        if dst.tiles[d] <= src.tiles[d] {
            continue;
        }
        let mut tiles = src.tiles.clone();
        tiles[d] *= r;
        for major in [true, false] {
            let mut new_idx = idx.clone();
            for (dev, &q) in place.iter().enumerate() {
                let sub = if major { q / dst.repl } else { q % r };
                let i = new_idx.row_mut(dev);
                i[d] = i[d] * r + sub;
            }
            let mid = Tiling::from_tile_index_table(tiles.clone(), dst.repl, &new_idx);
            let Some(slice) = slice_step(src, &mid, dims) else {
                continue;
            };
            let Some(rest) = all_to_all_then_permute(&mid, dst, dims) else {
                continue;
            };
            let mut steps = vec![slice];
            steps.extend(rest.steps);
            out.push(Plan {
                steps,
                last_resort: false,
            });
        }
    }
    out
}

/// More replication after the move (`dst.repl = r * src.repl`): one all-to-all to `dst`'s
/// tiles with one dimension split `r` times finer, then an all-gather of groups of `r`
/// neighbouring pieces along it (and a permute into `dst`'s order, if needed). XLA's
/// ComplexReshardToPartialReplicate. One candidate per dimension.
fn all_to_all_then_regroup(src: &Tiling, dst: &Tiling, dims: &[i64]) -> Vec<Plan> {
    let mut out = Vec::new();
    if dst.repl <= src.repl || dst.repl % src.repl != 0 {
        return out;
    }
    let r = dst.repl / src.repl;
    for d in 0..dst.rank() {
        let t = dst.tiles[d];
        // The gathered groups of r pieces must be dst's pieces.
        if t > 1 && ceil_div(dims[d], t) != r * ceil_div(dims[d], t * r) {
            continue;
        }
        let mut tiles = dst.tiles.clone();
        tiles[d] *= r;
        let shape = src.retiled(tiles);
        let Some((a2a, mid)) = all_to_all_parts(src, &shape, dims) else {
            continue;
        };
        let gathered = partial_gather_step(&mid, &[d], &[r]);
        let after = match &gathered {
            Step::AllGather { to, .. } => to.clone(),
            _ => unreachable!(),
        };
        let mut steps = vec![a2a, gathered];
        if after != *dst {
            match permute_step(&after, dst) {
                Some(p) => steps.push(p),
                None => continue,
            }
        }
        out.push(Plan {
            steps,
            last_resort: false,
        });
    }
    out
}

/// A plan that gathers and then permutes the gathered pieces (`all_to_all_then_regroup`'s),
/// with the permute moved before the gather where that works: the pieces it moves are `r`
/// times smaller, for as many collectives. Otherwise the plan as it is.
fn permute_before_gather(plan: Plan, dst: &Tiling, dims: &[i64]) -> Plan {
    let [Step::AllToAll { to: mid, .. }, Step::AllGather { to: after, .. }, Step::Permute { .. }] =
        plan.steps.as_slice()
    else {
        return plan;
    };
    let Some(d) = (0..mid.rank()).find(|&d| mid.tiles[d] != after.tiles[d]) else {
        return plan;
    };
    if after.tiles[d] == 0 || mid.tiles[d] % after.tiles[d] != 0 {
        return plan;
    }
    let r = mid.tiles[d] / after.tiles[d];
    match permute_then_gather(mid, after, dst, d, r) {
        Some(steps) => {
            let mut all = vec![plan.steps[0].clone()];
            all.extend(steps);
            let moved = Plan {
                steps: all,
                last_resort: plan.last_resort,
            };
            if moved.bytes(dims, 840) < plan.bytes(dims, 840) {
                moved
            } else {
                plan
            }
        }
        None => plan,
    }
}

/// `mid`'s pieces moved so that gathering groups of `r` along `d` leaves `dst`, where the
/// gather from `mid` leaves `after` (`dst`'s tiles and replication in another device order):
/// each device takes the place in `mid` of the device whose place in `after` it has in `dst`.
/// The permute and the gather, or `None` where that relabelling does not gather into `dst`.
fn permute_then_gather(
    mid: &Tiling,
    after: &Tiling,
    dst: &Tiling,
    d: usize,
    r: i64,
) -> Option<Vec<Step>> {
    if after.tiles != dst.tiles || after.repl != dst.repl {
        return None;
    }
    let n = mid.num_devices() as usize;
    let mut to = vec![-1i64; n];
    for (&a, &b) in after.devices.iter().zip(dst.devices.iter()) {
        *to.get_mut(usize::try_from(a).ok()?)? = b;
    }
    if to.contains(&-1) {
        return None;
    }
    let moved: Vec<i64> = mid.devices.iter().map(|&x| to[x as usize]).collect();
    let pre = Tiling::new(mid.tiles.clone(), mid.repl, moved);
    let gathered = partial_gather_step(&pre, &[d], &[r]);
    if gathered.to() != Spec::Tiled(dst.clone()) {
        return None;
    }
    Some(vec![permute_step(mid, &pre)?, gathered])
}

/// The direct routes, or a local slice and one permute where that moves fewer bytes.
fn plan_tiled_direct(src: &Tiling, dst: &Tiling, dims: &[i64]) -> Plan {
    let p = plan_tiled_routes(src, dst, dims);
    // The permute receives one piece of `dst`: no better where `p` receives no more.
    let piece = dst.shard_dims(dims).iter().product::<i64>() * 840;
    if p.bytes(dims, 840) <= piece {
        return p;
    }
    match slice_then_permute(src, dst, dims) {
        Some(q) if q.bytes(dims, 840) < p.bytes(dims, 840) => q,
        _ => p,
    }
}

/// `dst` splits every dimension a multiple of the times `src` does, the pieces lining up, so
/// each of `dst`'s pieces lies inside one of `src`'s (`{-, data}` to `{-, model}` on a 2x4
/// mesh: each 8-row piece holds two of the 4-row pieces). The `n / src tiles` holders of a
/// piece of `src` and the devices that want a piece of `dst` inside it are equally many, so
/// each holder slices out one such piece (its own where it wants one there) and one
/// collective-permute delivers them: one piece of `dst` received per device, where gathering
/// first receives a piece of the gathered size. `None` where the pieces do not nest, or where
/// every device keeps its own piece (a plain slice, planned before).
fn slice_then_permute(src: &Tiling, dst: &Tiling, dims: &[i64]) -> Option<Plan> {
    let rank = dims.len();
    if src.rank() != rank || dst.rank() != rank || src.num_devices() != dst.num_devices() {
        return None;
    }
    let mut ratio = vec![1i64; rank];
    for d in 0..rank {
        let (s, t) = (src.tiles[d], dst.tiles[d]);
        if s < 1 || t % s != 0 || (t > s && ceil_div(dims[d], s) != (t / s) * ceil_div(dims[d], t))
        {
            return None;
        }
        ratio[d] = t / s;
    }
    let n = dst.num_devices() as usize;
    let held = src.tile_index_table();
    let wanted = dst.tile_index_table();
    // The piece of `src` (row-major over its tiles) that holds a piece of `dst`.
    let outer = |w: &[i64]| {
        w.iter()
            .zip(&ratio)
            .zip(&src.tiles)
            .fold(0i64, |acc, ((&t, &r), &k)| acc * k + t / r) as usize
    };
    let src_tile = |h: &[i64]| ravel(h, &src.tiles) as usize;
    // The pieces of `dst` each piece of `src` still gives out, each once per device wanting it.
    let mut left: Vec<Vec<usize>> = vec![Vec::new(); src.num_tiles() as usize];
    for (dev, w) in wanted.iter().enumerate() {
        left[outer(w)].push(dev);
    }
    // mid[dev]: the device whose wanted piece `dev` slices out.
    let mut mid = vec![usize::MAX; n];
    for (dev, (h, w)) in held.iter().zip(wanted.iter()).enumerate() {
        let pieces = &mut left[src_tile(h)];
        if outer(w) == src_tile(h) {
            if let Some(p) = pieces.iter().position(|&x| x == dev) {
                mid[dev] = pieces.swap_remove(p);
            }
        }
    }
    if mid.iter().enumerate().all(|(d, &m)| m == d) {
        return None;
    }
    for (dev, h) in held.iter().enumerate() {
        if mid[dev] == usize::MAX {
            mid[dev] = left[src_tile(h)].pop()?;
        }
    }
    let rows = wanted.to_rows();
    let idx: Vec<Vec<i64>> = mid.iter().map(|&m| rows[m].clone()).collect();
    let mid = Tiling::from_tile_indices(dst.tiles.clone(), dst.repl, &idx);
    let slice = slice_step(src, &mid, dims)?;
    let permute = permute_step(&mid, dst)?;
    Some(Plan {
        steps: vec![slice, permute],
        last_resort: false,
    })
}

fn plan_tiled_routes(src: &Tiling, dst: &Tiling, dims: &[i64]) -> Plan {
    let one = |s: Step| Plan {
        steps: vec![s],
        last_resort: false,
    };
    if src == dst {
        return Plan::default();
    }
    if let Some(s) = slice_step(src, dst, dims) {
        return one(s);
    }
    // The last resort is built only if it is the answer; the others are compared with its
    // bytes, which follow from the tile counts.
    let fallback_bytes = |elem: i64| gather_all_bytes(src, dims, elem);
    // A permute or all-to-all of padded pieces can move more than gathering the real data.
    let parts = all_to_all_parts(src, dst, dims);
    let direct = permute_step(src, dst).or_else(|| {
        parts
            .as_ref()
            .filter(|(_, to)| to == dst)
            .map(|(s, _)| s.clone())
    });
    if let Some(s) = direct {
        if s.bytes(dims, 1) <= fallback_bytes(1) {
            return one(s);
        }
    }
    // An all-to-all into another device order, then a permute: kept if the gathers below
    // do no better.
    // (Compared at 840 bytes per element, which every group size up to 8 divides, so that
    // the formulas' rounding does not decide.)
    let a2a = parts
        .and_then(|(a2a, mid)| then_permute(a2a, mid, dst))
        .filter(|p| p.bytes(dims, 840) <= fallback_bytes(840));
    // Gather the dimensions whose split differs, then finish locally; taken only when it
    // moves fewer bytes than the last resort (a permute after a partial gather can cost more).
    let differ: Vec<usize> = (0..dims.len())
        .filter(|&d| src.tiles[d] > 1 && src.tiles[d] != dst.tiles[d])
        .collect();
    if !differ.is_empty() {
        // Where the target still splits a dimension k times less and the pieces line up,
        // only groups of k are gathered (XLA's partial-replication all-gather).
        let factors: Vec<i64> = differ
            .iter()
            .map(|&d| {
                let (s, t) = (src.tiles[d], dst.tiles[d]);
                if t > 1 && s % t == 0 && ceil_div(dims[d], t) == (s / t) * ceil_div(dims[d], s) {
                    s / t
                } else {
                    s
                }
            })
            .collect();
        let gathered = partial_gather_step(src, &differ, &factors);
        let mid = match &gathered {
            Step::AllGather { to, .. } => to.clone(),
            _ => unreachable!(),
        };
        let mut steps = vec![gathered];
        if mid != *dst {
            if let Some(s) = slice_step(&mid, dst, dims).or_else(|| permute_step(&mid, dst)) {
                steps.push(s);
            }
        }
        if steps.last().map(Step::to).as_ref() == Some(&Spec::Tiled(dst.clone())) {
            let p = Plan {
                steps,
                last_resort: mid.is_replicated() && !dst.is_replicated(),
            };
            // Bytes per element do not change the comparison.
            if p.bytes(dims, 1) <= fallback_bytes(1)
                && a2a
                    .as_ref()
                    .is_none_or(|a| p.bytes(dims, 840) < a.bytes(dims, 840))
            {
                return p;
            }
        }
    }
    a2a.unwrap_or_else(|| replicate_then_slice(src, dst, dims))
}

/// The bytes of [`replicate_then_slice`]'s gather without building it: one all-gather of
/// every split dimension, in groups of all the tiles, leaving the whole array.
fn gather_all_bytes(src: &Tiling, dims: &[i64], elem: i64) -> i64 {
    let g = src.num_tiles();
    if g <= 1 {
        return 0;
    }
    dims.iter().product::<i64>() * elem * (g - 1) / g
}

/// Everything gathered, then sliced.
fn replicate_then_slice(src: &Tiling, dst: &Tiling, dims: &[i64]) -> Plan {
    let all: Vec<usize> = (0..dims.len()).filter(|&d| src.tiles[d] > 1).collect();
    let mut steps = Vec::new();
    let mut cur = src.clone();
    if !all.is_empty() {
        let g = gather_step(src, &all);
        cur = match &g {
            Step::AllGather { to, .. } => to.clone(),
            _ => unreachable!(),
        };
        steps.push(g);
    }
    if cur != *dst {
        steps.push(slice_step(&cur, dst, dims).expect("a replicated value slices to anything"));
    }
    Plan {
        steps,
        last_resort: !dst.is_replicated(),
    }
}

/// A grouped all-gather of `src` along `along`.
fn gather_step(src: &Tiling, along: &[usize]) -> Step {
    Step::AllGather {
        to: src.replicate_dims(along),
        dims: along.to_vec(),
        tiles: along.iter().map(|&d| src.tiles[d]).collect(),
        groups: src.groups(along, false),
    }
}

/// An all-gather of groups of `factors[j]` neighbouring pieces along each dimension
/// `along[j]` (a factor equal to the dimension's tiles gathers it whole): the tile dimension
/// is viewed as `[tiles / k, k]` and the minor part is gathered.
fn partial_gather_step(src: &Tiling, along: &[usize], factors: &[i64]) -> Step {
    if along.iter().zip(factors).all(|(&d, &k)| src.tiles[d] == k) {
        return gather_step(src, along);
    }
    let r = src.rank();
    let mut tiles = Vec::with_capacity(r + along.len());
    let mut inner = Vec::new();
    for d in 0..r {
        match along.iter().position(|&a| a == d) {
            Some(j) => {
                tiles.push(src.tiles[d] / factors[j]);
                inner.push(tiles.len());
                tiles.push(factors[j]);
            }
            None => tiles.push(src.tiles[d]),
        }
    }
    let expanded = Tiling {
        tiles,
        repl: src.repl,
        devices: src.devices.clone(),
    };
    let gathered = expanded.replicate_dims(&inner);
    // Drop the gathered (now size-1) minor parts; the device list is unchanged by that.
    let tiles: Vec<i64> = gathered
        .tiles
        .iter()
        .enumerate()
        .filter(|(i, _)| !inner.contains(i))
        .map(|(_, &t)| t)
        .collect();
    Step::AllGather {
        to: gathered.retiled(tiles),
        dims: along.to_vec(),
        tiles: factors.to_vec(),
        groups: expanded.groups(&inner, false),
    }
}

/// Every device's new piece inside the piece it holds: a local dynamic-slice.
fn slice_step(src: &Tiling, dst: &Tiling, dims: &[i64]) -> Option<Step> {
    let n = src.num_devices() as usize;
    let rank = dims.len();
    let s_shard = src.shard_dims(dims);
    let d_shard = dst.shard_dims(dims);
    // Refused without a walk over the devices where it cannot work: the device holding
    // `dst`'s first piece along a dimension needs its whole real part inside one of `src`'s.
    if (0..rank).any(|i| d_shard[i].min(dims[i]) > s_shard[i]) {
        return None;
    }
    let s_start = src.start_table(dims);
    let d_start = dst.start_table(dims);
    let mut offsets = DeviceTable::zeros(n, rank);
    let mut pad_high = vec![0i64; rank];
    for dev in 0..n {
        let (held, want) = (&s_start[dev], &d_start[dev]);
        let off = offsets.row_mut(dev);
        for i in 0..rank {
            let real_lo = want[i].min(dims[i]);
            let real_hi = (want[i] + d_shard[i]).min(dims[i]);
            if real_hi <= real_lo {
                // An empty (all padding) piece: any offset will do.
                continue;
            }
            let held_lo = held[i];
            let held_hi = (held_lo + s_shard[i]).min(dims[i]);
            if real_lo < held_lo || real_hi > held_hi {
                return None;
            }
            off[i] = real_lo - held_lo;
            pad_high[i] = pad_high[i].max(off[i] + d_shard[i] - s_shard[i]);
        }
    }
    Some(Step::Slice {
        to: dst.clone(),
        sizes: d_shard,
        offsets,
        pad_high,
    })
}

/// Same tiles, other devices: each device receives its new piece from a holder of it.
fn permute_step(src: &Tiling, dst: &Tiling) -> Option<Step> {
    if src.tiles != dst.tiles || src.repl != dst.repl {
        return None;
    }
    let n = src.num_devices() as usize;
    // The tiles are the same: a device's tile is its row-major position over the tiles.
    let repl = src.repl.max(1) as usize;
    let tile_of = |t: &Tiling| {
        let mut tile = vec![usize::MAX; n];
        for (p, &d) in t.devices.iter().enumerate() {
            tile[d as usize] = p / repl;
        }
        tile
    };
    let (src_tile, dst_tile) = (tile_of(src), tile_of(dst));
    // Holders of each tile under src, in device order: src's row-major list grouped by tile.
    let mut by_tile = src.devices.to_vec();
    for g in by_tile.chunks_mut(repl) {
        g.sort_unstable();
    }
    let holders = |t: usize| &by_tile[t * repl..(t + 1) * repl];
    let mut next = vec![0usize; n / repl];
    let mut used = vec![false; n];
    let mut source = vec![-1i64; n];
    // Devices that already hold their new piece keep it.
    for d in 0..n {
        if src_tile[d] == dst_tile[d] {
            source[d] = d as i64;
            used[d] = true;
        }
    }
    for (d, from) in source.iter_mut().enumerate() {
        if *from >= 0 {
            continue;
        }
        // The first holder not yet used (`used` only grows, so a cursor per tile will do).
        let t = *dst_tile.get(d).filter(|&&t| t < next.len())?;
        let h = holders(t);
        while next[t] < h.len() && used[h[next[t]] as usize] {
            next[t] += 1;
        }
        let s = *h.get(next[t])?;
        used[s as usize] = true;
        *from = s;
    }
    Some(Step::Permute {
        to: dst.clone(),
        pairs: (0..n).map(|d| (source[d], d as i64)).collect(),
    })
}

/// Splits move between dimensions in one all-to-all: every dimension either keeps its split,
/// gives up a minor factor of it (`src = dst * f`), or gains one (`dst = src * g`), the `f`s
/// and `g`s multiplying to the same group size. One dimension's split moving to an unsplit one
/// is the simplest case; `[1,4,1,2] -> [1,8,1,1]` (the 2-way split of the last dimension moves
/// under the first's) or `[2,2,1] -> [1,1,4]` (two dimensions into one) are others. Only
/// where the pieces line up (no halo). Returns the all-to-all that gives `src` the tile counts
/// of `dst` and the tiling it leaves, whose device order follows from `src`'s: a plan takes
/// the step alone where that is `dst`'s order and follows it with a permute otherwise
/// (`then_permute`).
fn all_to_all_parts(src: &Tiling, dst: &Tiling, dims: &[i64]) -> Option<(Step, Tiling)> {
    if src.repl != dst.repl || src.rank() != dst.rank() {
        return None;
    }
    let r = src.rank();
    let mut split = Vec::new();
    let mut concat = Vec::new();
    for (d, &n) in dims.iter().enumerate() {
        let (s, t) = (src.tiles[d], dst.tiles[d]);
        if s == t {
            continue;
        }
        let (cs, ct) = (ceil_div(n, s), ceil_div(n, t));
        if t > s && t % s == 0 {
            let g = t / s;
            // The cut pieces must be the target's pieces: from an unsplit dimension any cut
            // lines up (padding only at the end); otherwise the piece must be g whole ones.
            if s > 1 && cs != g * ct {
                return None;
            }
            split.push((d, g));
        } else if s > t && s % t == 0 {
            let f = s / t;
            if ct != f * cs && t > 1 {
                return None;
            }
            concat.push((d, f));
        } else {
            return None;
        }
    }
    let g: i64 = split.iter().map(|&(_, g)| g).product();
    let f: i64 = concat.iter().map(|&(_, f)| f).product();
    if split.is_empty() || concat.is_empty() || g != f {
        return None;
    }
    // The source tile dimensions with each concat dimension viewed as [major, minor].
    let mut tiles = Vec::with_capacity(r + concat.len());
    let mut inner = Vec::new();
    for d in 0..r {
        match concat.iter().find(|&&(c, _)| c == d) {
            Some(&(_, f)) => {
                tiles.push(src.tiles[d] / f);
                inner.push(tiles.len());
                tiles.push(f);
            }
            None => tiles.push(src.tiles[d]),
        }
    }
    let expanded = Tiling {
        tiles,
        repl: src.repl,
        devices: src.devices.clone(),
    };
    let groups = expanded.groups(&inner, false);
    // Where every device ends up: the member at place p keeps sub-piece p of the split dims.
    let mut new_idx = src.tile_index_table();
    let g_dims: Vec<i64> = split.iter().map(|&(_, g)| g).collect();
    let mut q = vec![0i64; g_dims.len()];
    for grp in groups.iter() {
        for (p, &dev) in grp.iter().enumerate() {
            unravel_into(p as i64, &g_dims, &mut q);
            let idx = new_idx.row_mut(dev as usize);
            for (j, &(d, g)) in split.iter().enumerate() {
                idx[d] = idx[d] * g + q[j];
            }
            for &(d, f) in &concat {
                idx[d] /= f;
            }
        }
    }
    let to = Tiling::from_tile_index_table(dst.tiles.clone(), src.repl, &new_idx);
    Some((
        Step::AllToAll {
            to: to.clone(),
            split,
            concat,
            groups,
        },
        to,
    ))
}

/// An all-to-all to `dst`'s tile counts, then a collective-permute into `dst`'s device order.
fn all_to_all_then_permute(src: &Tiling, dst: &Tiling, dims: &[i64]) -> Option<Plan> {
    let (a2a, mid) = all_to_all_parts(src, dst, dims)?;
    then_permute(a2a, mid, dst)
}

/// All-to-all `a2a` (which leaves `mid`), then a collective-permute into `dst`'s order.
fn then_permute(a2a: Step, mid: Tiling, dst: &Tiling) -> Option<Plan> {
    let mut steps = vec![a2a];
    if mid != *dst {
        steps.push(permute_step(&mid, dst)?);
    }
    Some(Plan {
        steps,
        last_resort: false,
    })
}

/// The bytes each device receives when the whole array is gathered and then sliced: the
/// yardstick every plan must stay under.
pub fn replicate_then_slice_bytes(src: &Spec, dims: &[i64], elem: i64) -> i64 {
    match src {
        Spec::Tiled(t) if !t.is_replicated() => gather_all_bytes(t, dims, elem),
        Spec::Maximal(_) => {
            let n = 2; // at least
            2 * dims.iter().product::<i64>() * elem * (n - 1) / n
        }
        _ => 0,
    }
}

/// The padded extent of dimension `d` once gathered: every piece is `ceil(dims / tiles)`.
pub fn gathered_extent(t: &Tiling, dims: &[i64], d: usize) -> i64 {
    ceil_div(dims[d], t.tiles[d]) * t.tiles[d]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::spec::{ravel, unravel};
    use super::*;

    /// One device's local array: its shape and, per element, the global linear index it holds
    /// (`None` for padding).
    #[derive(Clone, Debug)]
    pub(crate) struct Local {
        dims: Vec<i64>,
        vals: Vec<Option<i64>>,
    }

    impl Local {
        fn at(&self, idx: &[i64]) -> Option<i64> {
            if idx.iter().zip(&self.dims).any(|(&i, &d)| i >= d) {
                return None;
            }
            self.vals[ravel(idx, &self.dims) as usize]
        }

        fn build(dims: Vec<i64>, f: impl Fn(&[i64]) -> Option<i64>) -> Local {
            let n: i64 = dims.iter().product();
            let vals = (0..n).map(|l| f(&unravel(l, &dims))).collect();
            Local { dims, vals }
        }
    }

    /// What device `dev` should hold under `spec`.
    pub(crate) fn expected(spec: &Spec, dims: &[i64], dev: i64) -> Local {
        let (shard, start) = match spec {
            Spec::Tiled(t) => (t.shard_dims(dims), t.starts(dims)[dev as usize].clone()),
            _ => (dims.to_vec(), vec![0; dims.len()]),
        };
        Local::build(shard, |idx| {
            let g: Vec<i64> = idx.iter().zip(&start).map(|(i, s)| i + s).collect();
            if g.iter().zip(dims).any(|(&x, &d)| x >= d) {
                None
            } else {
                Some(ravel(&g, dims))
            }
        })
    }

    /// Applies one step the way `reshard.rs` emits it.
    pub(crate) fn apply(step: &Step, locals: &[Local], dims: &[i64]) -> Vec<Local> {
        let n = locals.len();
        match step {
            Step::Slice {
                sizes,
                offsets,
                pad_high,
                ..
            } => (0..n)
                .map(|d| {
                    let l = &locals[d];
                    for i in 0..dims.len() {
                        assert!(offsets[d][i] >= 0);
                        assert!(offsets[d][i] + sizes[i] <= l.dims[i] + pad_high[i]);
                    }
                    Local::build(sizes.clone(), |idx| {
                        let src: Vec<i64> =
                            idx.iter().zip(&offsets[d]).map(|(i, o)| i + o).collect();
                        l.at(&src)
                    })
                })
                .collect(),
            Step::AllGather {
                to,
                dims: along,
                tiles,
                groups,
            } => {
                let mut out = vec![None; n];
                for g in groups.iter() {
                    let shard = locals[g[0] as usize].dims.clone();
                    let gathered = Local::build(to.shard_dims(dims), |idx| {
                        let mut k_idx = Vec::new();
                        let mut local = idx.to_vec();
                        for &a in along {
                            k_idx.push(idx[a] / shard[a]);
                            local[a] = idx[a] % shard[a];
                        }
                        let k = ravel(&k_idx, tiles);
                        locals[g[k as usize] as usize].at(&local)
                    });
                    for &d in g {
                        out[d as usize] = Some(gathered.clone());
                    }
                }
                out.into_iter().map(Option::unwrap).collect()
            }
            Step::AllToAll {
                to,
                split,
                concat,
                groups,
            } => {
                let mut out = vec![None; n];
                let new_dims = to.shard_dims(dims);
                let f_dims: Vec<i64> = concat.iter().map(|&(_, f)| f).collect();
                let g_dims: Vec<i64> = split.iter().map(|&(_, g)| g).collect();
                for g in groups.iter() {
                    let held = locals[g[0] as usize].dims.clone();
                    for (p, &d) in g.iter().enumerate() {
                        let q = unravel(p as i64, &g_dims);
                        out[d as usize] = Some(Local::build(new_dims.clone(), |idx| {
                            // The sender: its place over the concat minor parts.
                            let m: Vec<i64> =
                                concat.iter().map(|&(c, _)| idx[c] / held[c]).collect();
                            if m.iter().zip(&f_dims).any(|(&m, &f)| m >= f) {
                                return None;
                            }
                            let mut src = idx.to_vec();
                            for &(c, _) in concat.iter() {
                                src[c] = idx[c] % held[c];
                            }
                            for (j, &(sd, _)) in split.iter().enumerate() {
                                src[sd] = q[j] * new_dims[sd] + idx[sd];
                            }
                            locals[g[ravel(&m, &f_dims) as usize] as usize].at(&src)
                        }));
                    }
                }
                out.into_iter().map(Option::unwrap).collect()
            }
            Step::Permute { pairs, .. } => {
                let mut out: Vec<Option<Local>> = vec![None; n];
                for &(s, t) in pairs {
                    assert!(out[t as usize].is_none(), "two sources for {t}");
                    out[t as usize] = Some(locals[s as usize].clone());
                }
                out.into_iter()
                    .map(|l| l.expect("a device received nothing"))
                    .collect()
            }
            Step::FromMaximal { device, .. } => vec![locals[*device as usize].clone(); n],
        }
    }

    /// Runs `plan` on the simulated devices and checks every real element lands right.
    pub(crate) fn check_plan(src: &Spec, dst: &Spec, dims: &[i64], n: i64) -> Arc<Plan> {
        let p = plan(src, dst, dims, n).unwrap();
        let mut locals: Vec<Local> = (0..n).map(|d| expected(src, dims, d)).collect();
        for s in &p.steps {
            locals = apply(s, &locals, dims);
        }
        for d in 0..n {
            if matches!(dst, Spec::Maximal(m) if *m != d) {
                continue;
            }
            let want = expected(dst, dims, d);
            assert_eq!(
                want.dims, locals[d as usize].dims,
                "{src:?} -> {dst:?} on {dims:?}: {p:?}"
            );
            for (i, w) in want.vals.iter().enumerate() {
                if w.is_some() {
                    assert_eq!(
                        *w, locals[d as usize].vals[i],
                        "device {d} element {i}: {src:?} -> {dst:?} on {dims:?}: {p:?}"
                    );
                }
            }
        }
        p
    }

    /// The harness's deterministic generator, drawing below a bound.
    pub(crate) struct Gen(tessera_runtime::harness::Rng);
    impl Gen {
        pub(crate) fn new(seed: u64) -> Gen {
            Gen(tessera_runtime::harness::Rng::new(seed))
        }
        pub(crate) fn next(&mut self, below: u64) -> u64 {
            self.0.next_u64() % below
        }
    }

    /// A random spec of `rank` over `n` devices: a random split of `n` into tiles and
    /// replication, devices in iota, reversed-mesh or shuffled order; now and then maximal.
    pub(crate) fn random_spec(g: &mut Gen, rank: usize, n: i64) -> Spec {
        if g.next(12) == 0 {
            return Spec::Maximal(g.next(n as u64) as i64);
        }
        let mut tiles = vec![1i64; rank];
        let mut repl = 1;
        let mut left = n;
        while left > 1 {
            let slot = g.next(rank as u64 + 1) as usize;
            if slot == rank {
                repl *= 2;
            } else {
                tiles[slot] *= 2;
            }
            left /= 2;
        }
        let mut devices: Vec<i64> = (0..n).collect();
        match g.next(3) {
            0 => {}
            1 => devices.reverse(),
            _ => {
                for i in (1..devices.len()).rev() {
                    let j = g.next(i as u64 + 1) as usize;
                    devices.swap(i, j);
                }
            }
        }
        Spec::Tiled(Tiling::new(tiles, repl, devices))
    }

    #[test]
    fn plans_move_every_element_where_it_belongs() {
        let mut g = Gen::new(7);
        let mut last_resorts = 0;
        let cases = 3000;
        for _ in 0..cases {
            let n = [2i64, 4, 8][g.next(3) as usize];
            let rank = 1 + g.next(3) as usize;
            let dims: Vec<i64> = (0..rank).map(|_| 1 + g.next(9) as i64).collect();
            let src = random_spec(&mut g, rank, n);
            let dst = random_spec(&mut g, rank, n);
            let p = check_plan(&src, &dst, &dims, n);
            if p.last_resort {
                last_resorts += 1;
            }
            let replicate_then_slice = replicate_then_slice_bytes(&src, &dims, 4);
            if !matches!(src, Spec::Maximal(_)) {
                assert!(
                    p.bytes(&dims, 4) <= replicate_then_slice,
                    "{src:?} -> {dst:?} on {dims:?}: {p:?}"
                );
            }
        }
        assert!(last_resorts < cases / 2, "{last_resorts} last resorts");
    }

    #[test]
    fn routes_are_the_expected_collectives() {
        let t = |tiles: &[i64], repl: i64, devices: &[i64]| {
            Spec::Tiled(Tiling::new(tiles.to_vec(), repl, devices.to_vec()))
        };
        let iota = |tiles: &[i64], repl: i64| {
            let n = tiles.iter().product::<i64>() * repl;
            t(tiles, repl, &(0..n).collect::<Vec<_>>())
        };
        let names = |p: &Plan| p.steps.iter().map(Step::name).collect::<Vec<_>>();
        // Replicated to tiled: a slice.
        let p = check_plan(&iota(&[1, 1], 4), &iota(&[2, 2], 1), &[5, 6], 4);
        assert_eq!(names(&p), ["slice"]);
        // Tiled on both dims to replicated: one all-gather.
        let p = check_plan(&iota(&[2, 2], 1), &iota(&[1, 1], 4), &[5, 7], 4);
        assert_eq!(names(&p), ["all-gather"]);
        // Moving the split from dim 0 to dim 1: one all-to-all.
        let p = check_plan(&iota(&[4, 1], 1), &iota(&[1, 4], 1), &[8, 6], 4);
        assert_eq!(names(&p), ["all-to-all"]);
        // Same tiles, other order: one permute.
        let p = check_plan(&iota(&[4], 1), &t(&[4], 1, &[1, 0, 3, 2]), &[8], 4);
        assert_eq!(names(&p), ["collective-permute"]);
        // Partial replication to finer tiling: a slice.
        let p = check_plan(&iota(&[2, 1], 2), &iota(&[2, 2], 1), &[4, 4], 4);
        assert_eq!(names(&p), ["slice"]);
        // Finer to coarser: a grouped all-gather.
        let p = check_plan(&iota(&[2, 2], 1), &iota(&[2, 1], 2), &[4, 4], 4);
        assert_eq!(names(&p), ["all-gather"]);
        assert!(!p.last_resort);
        // Maximal to tiled.
        let p = check_plan(&Spec::Maximal(2), &iota(&[2], 2), &[3], 4);
        assert_eq!(names(&p), ["all-reduce", "slice"]);
        // XLA's ComplexReshardToPartialReplicate / FromPartialReplicate: the replication
        // changes (1 <-> 4) while splits move between dimensions; an all-to-all does the
        // moving, with a grouped all-gather after it or a local slice before it.
        let partial = t(&[1, 1, 1, 2], 4, &[0, 2, 4, 6, 1, 3, 5, 7]);
        let dims = [4, 15, 4, 16];
        let gathers = check_plan(&iota(&[1, 4, 2, 1], 1), &iota(&[1, 1, 1, 1], 8), &dims, 8);
        let p = check_plan(&iota(&[1, 4, 2, 1], 1), &partial, &dims, 8);
        assert_eq!(names(&p)[..2], ["all-to-all", "all-gather"]);
        assert!(p.bytes(&dims, 4) < gathers.bytes(&dims, 4), "{p:?}");
        let p = check_plan(&partial, &iota(&[1, 8, 1, 1], 1), &dims, 8);
        assert_eq!(names(&p)[..2], ["slice", "all-to-all"]);
        // {-, data} to {-, model} on a 2x4 mesh (issue 34's reshape chain): each 4-row piece
        // lies in one of the 8-row pieces, so each device slices one out and a permute
        // delivers it: one 4-row piece received, where the gather received a whole 8-row one
        // (and was the last resort).
        let data = t(&[1, 2, 1], 4, &[0, 1, 2, 3, 4, 5, 6, 7]);
        let model = t(&[1, 4, 1], 2, &[0, 4, 1, 5, 2, 6, 3, 7]);
        let dims = [8, 16, 32];
        let p = check_plan(&data, &model, &dims, 8);
        assert_eq!(names(&p), ["slice", "collective-permute"]);
        assert_eq!(p.bytes(&dims, 4), 8 * 4 * 32 * 4);
        assert!(!p.last_resort);
    }
}
