//! The candidate partitionings of a dot-like op and their costs (pure: no IR).
//!
//! A dot's work is an *iteration space* with one axis per batch, contracting, lhs-free and
//! rhs-free dimension (spatial dimensions are never split here). A candidate is one tiling of
//! that space over the devices: from it follow the tiling each operand must hold (the space
//! projected on its dimensions), the piece of the result each device computes, and, when a
//! contracting axis is split, how the partial sums are combined (an all-reduce over the
//! devices that hold different contracting pieces, or a reduce-scatter that also splits one
//! result dimension among them).
//!
//! Every strategy of XLA's dot handler is such a tiling: batch-partitioned operands (batch
//! axes split), one side's free dimensions split with the other operand replicated or
//! resharded (free axes split), contracting split on both sides (contracting axes split, then
//! all-reduce or reduce-scatter), several dimensions of each class, and the partial matches in
//! which the devices form groups along one operand's split and each group splits further by
//! another's (a mixed tiling: some axes taken from the lhs, some from the rhs or the result).
//! Candidates are built axis by axis: each axis takes its split from the lhs, the rhs or the
//! result sharding (whichever has one on it) or stays whole; a combination is kept when the
//! per-device tile indices it gives form a tiling (every tile held by equally many devices).
//!
//! The cost of a candidate is the bytes each device receives (ORACLE.md's formulas, the
//! resharding planner's figures): both operands resharded to what the candidate needs, the
//! combine, and the result resharded to its own sharding; ties go to the smaller peak (the
//! local operands and result), then to the first enumerated. Decisions are remembered per
//! (shardings, dimensions, shapes): a model repeats the same few dots many times.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use hashbrown::HashTable;
use tessera_hlo::fxhash::FxHashMap as FxMap;

use super::super::super::plan;
use super::super::super::spec::{fx, ravel, DeviceTable, Memo, MemoTable, Spec, Tiling};
use super::{DimTriple, DimsMapping, Side};

/// How the local results are combined.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(in crate::partition::engine) enum Combine {
    /// No contracting axis is split: the local results are the result's pieces.
    Nothing,
    /// All-reduce of the partial sums over the devices with different contracting pieces.
    AllReduce,
    /// Reduce-scatter of the partial sums along result dimension `dim` (padded with zeros to
    /// `padded` first when the piece does not divide).
    ReduceScatter { dim: usize, padded: i64 },
    /// No combine: a windowed-einsum loop (engine/windowed_dot.rs) computes the result,
    /// already as the dot's own sharding.
    Windowed(Box<Windowed>),
}

/// A windowed-einsum loop, decided before anything is built (see engine/windowed_dot.rs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(in crate::partition::engine) enum Windowed {
    /// The result is split like operand `mine`; the other operand, split along its free
    /// dimension `d` (result dimension `o`) over rings of `ring` devices, is passed around.
    Gather {
        mine: Side,
        mine_t: Tiling,
        /// The other operand's windowed tiling: split along `d` into `ring` pieces.
        other_t: Tiling,
        d: usize,
        o: usize,
        ring: i64,
        /// Bytes sent per step when the piece travels as the smaller values it is made of
        /// (code motion), instead of the piece itself.
        sent: Option<i64>,
    },
    /// Operand `mine` is split along one contracting dimension over rings of `ring` devices
    /// that also split the result along `o`; partial sums of result windows are passed
    /// around.
    Accumulate {
        mine: Side,
        mine_t: Tiling,
        other_t: Tiling,
        /// The contracting dimension on each side.
        c: (usize, usize),
        /// The side holding the result's split dimension `o`, and that dimension there.
        holder: Side,
        hd: usize,
        o: usize,
        ring: i64,
    },
}

/// One way to partition a dot-like op.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(in crate::partition::engine) struct Candidate {
    /// The tiling of the iteration space (axes as in [`Space`]).
    pub iter: Tiling,
    pub lhs: Tiling,
    pub rhs: Tiling,
    /// The tiling of the local results before they are combined (contracting axes folded
    /// into the replication).
    pub partial: Tiling,
    pub combine: Combine,
    /// The axes along which partial sums are combined.
    pub contracting: Vec<usize>,
    /// The result's tiling after the combine.
    pub result: Tiling,
    /// Where each split axis took its split from, for the report.
    pub what: String,
    /// Bytes each device receives for the whole candidate, and its peak local bytes.
    pub bytes: i64,
    pub peak: i64,
}

/// A chosen candidate, how many were costed and the runner-up's cost.
#[derive(Clone, Debug)]
pub(in crate::partition::engine) struct Choice {
    pub best: Candidate,
    pub considered: usize,
    pub runner_up: Option<(i64, i64, String)>,
}

/// The iteration space of a dot-like op.
#[derive(Clone, Debug)]
pub(in crate::partition::engine) struct Space {
    /// Axis `k`'s dimension on each side (batch, contracting, lhs-free, rhs-free in order).
    pub axes: Vec<DimTriple>,
    /// Class of each axis: 0 batch, 1 contracting, 2 lhs-free, 3 rhs-free.
    pub class: Vec<u8>,
    /// Lhs dimension -> axis (`None`: spatial, never split).
    pub lhs_map: Vec<Option<usize>>,
    pub rhs_map: Vec<Option<usize>>,
    pub out_map: Vec<Option<usize>>,
}

impl Space {
    pub fn new(dims: &DimsMapping, lrank: usize, rrank: usize, orank: usize) -> Space {
        let mut axes = Vec::new();
        let mut class = Vec::new();
        for (c, v) in [
            &dims.batch,
            &dims.contracting,
            &dims.lhs_non_contracting,
            &dims.rhs_non_contracting,
        ]
        .into_iter()
        .enumerate()
        {
            for t in v {
                axes.push(*t);
                class.push(c as u8);
            }
        }
        let mut lhs_map = vec![None; lrank];
        let mut rhs_map = vec![None; rrank];
        let mut out_map = vec![None; orank];
        for (k, t) in axes.iter().enumerate() {
            if let Some(d) = t.lhs.filter(|&d| d < lrank) {
                lhs_map[d] = Some(k);
            }
            if let Some(d) = t.rhs.filter(|&d| d < rrank) {
                rhs_map[d] = Some(k);
            }
            if let Some(d) = t.out.filter(|&d| d < orank) {
                out_map[d] = Some(k);
            }
        }
        Space {
            axes,
            class,
            lhs_map,
            rhs_map,
            out_map,
        }
    }

    fn axis_name(&self, k: usize) -> String {
        let c = ["batch", "contracting", "lhs-free", "rhs-free"][self.class[k] as usize];
        let nth = self.class[..k]
            .iter()
            .filter(|&&x| x == self.class[k])
            .count();
        format!("{c}{nth}")
    }
}

/// The shapes and element sizes of a dot-like op.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(in crate::partition::engine) struct Shapes {
    pub lhs: Vec<i64>,
    pub rhs: Vec<i64>,
    pub out: Vec<i64>,
    /// Bytes per element of lhs, rhs and result.
    pub elem: [i64; 3],
}

/// Bytes each device receives to move an array of `dims` from `src` to `dst`.
pub(in crate::partition::engine) fn move_bytes(
    src: &Spec,
    dst: &Spec,
    dims: &[i64],
    elem: i64,
    n: i64,
) -> i64 {
    if src == dst {
        return 0;
    }
    plan::plan(src, dst, dims, n).map_or(i64::MAX / 4, |p| p.bytes(dims, elem))
}

/// A sharding an axis may take its split from: the lhs, the rhs or the result.
struct Source<'a> {
    name: &'static str,
    tiling: &'a Tiling,
    /// Axis -> the source's dimension.
    map: Vec<Option<usize>>,
    /// Each device's tile index in the source.
    idx: DeviceTable,
}

/// The devices grouped by the tile they hold in every source.
struct Classes {
    /// Device -> its class.
    of: Vec<usize>,
    /// Each class's first device and its number of devices.
    first: Vec<usize>,
    size: Vec<i64>,
}

impl Classes {
    fn of(sources: &[Source], n: usize) -> Classes {
        // Each device's key: its tile (row-major position) in every source, mixed-radix.
        let mut key = vec![0u128; n];
        for src in sources {
            let t = src.tiling;
            let repl = t.repl.max(1) as usize;
            for (p, &d) in t.devices.iter().enumerate() {
                key[d as usize] = key[d as usize] * t.num_tiles() as u128 + (p / repl) as u128;
            }
        }
        let mut index: FxMap<u128, usize> = FxMap::default();
        let mut classes = Classes {
            of: Vec::with_capacity(n),
            first: Vec::new(),
            size: Vec::new(),
        };
        for (d, k) in key.into_iter().enumerate() {
            let c = *index.entry(k).or_insert_with(|| {
                classes.first.push(d);
                classes.size.push(0);
                classes.first.len() - 1
            });
            classes.size[c] += 1;
            classes.of.push(c);
        }
        classes
    }
}

/// Above this many axis combinations only whole-source candidates are tried.
const MAX_COMBINATIONS: usize = 512;

/// The cheapest candidate for a dot with operands held as `lhs` and `rhs` and a result wanted
/// as `own`, on `n` devices; `None` when no tiling of the iteration space exists.
pub(in crate::partition::engine) fn choose(
    dims: &DimsMapping,
    shapes: &Shapes,
    lhs: &Spec,
    rhs: &Spec,
    own: &Spec,
    n: i64,
) -> Option<Arc<Choice>> {
    type Key = (DimsMapping, Shapes, Spec, Spec, Spec, i64);
    thread_local! {
        static CHOICES: RefCell<MemoTable<Key, Option<Arc<Choice>>>> =
            const { RefCell::new(HashTable::new()) };
    }
    let key = (dims, shapes, lhs, rhs, own, n);
    let h = fx(&key);
    let known = CHOICES.with(|c| {
        c.borrow()
            .find(h, |e| {
                (&e.key.0, &e.key.1, &e.key.2, &e.key.3, &e.key.4, e.key.5) == key
            })
            .map(|e| e.value.clone())
    });
    if let Some(c) = known {
        return c;
    }
    let out = choose_uncached(dims, shapes, lhs, rhs, own, n).map(Arc::new);
    CHOICES.with(|c| {
        Memo::insert(
            &mut c.borrow_mut(),
            h,
            (
                dims.clone(),
                shapes.clone(),
                lhs.clone(),
                rhs.clone(),
                own.clone(),
                n,
            ),
            out.clone(),
        )
    });
    out
}

/// Every candidate, costed, in enumeration order.
#[cfg(test)]
pub(in crate::partition::engine) fn candidates(
    dims: &DimsMapping,
    shapes: &Shapes,
    lhs: &Spec,
    rhs: &Spec,
    own: &Spec,
    n: i64,
) -> Vec<Candidate> {
    let mut all = enumerate(dims, shapes, lhs, rhs, own, n);
    for c in &mut all {
        let moves: i64 = (0..MOVES)
            .map(|m| move_cost(c, m, shapes, lhs, rhs, own, n))
            .sum();
        c.bytes += moves;
    }
    all
}

/// The resharding moves in a candidate's cost besides its combine: the lhs (0) and the rhs
/// (1) to the tilings it needs, and its result (2) to the result's own sharding.
const MOVES: usize = 3;

/// Bytes of move `m` (see [`MOVES`]) of candidate `c`.
fn move_cost(
    c: &Candidate,
    m: usize,
    shapes: &Shapes,
    lhs: &Spec,
    rhs: &Spec,
    own: &Spec,
    n: i64,
) -> i64 {
    let [el, er, eo] = shapes.elem;
    match m {
        0 => move_bytes(lhs, &Spec::Tiled(c.lhs.clone()), &shapes.lhs, el, n),
        1 => move_bytes(rhs, &Spec::Tiled(c.rhs.clone()), &shapes.rhs, er, n),
        _ => move_bytes(&Spec::Tiled(c.result.clone()), own, &shapes.out, eo, n),
    }
}

/// Every candidate in enumeration order, its `bytes` those of its combine alone (the moves
/// are planned by the caller: [`choose`] plans only those that can be first or second, the
/// tests' `candidates` all of them).
fn enumerate(
    dims: &DimsMapping,
    shapes: &Shapes,
    lhs: &Spec,
    rhs: &Spec,
    own: &Spec,
    n: i64,
) -> Vec<Candidate> {
    let space = Space::new(dims, shapes.lhs.len(), shapes.rhs.len(), shapes.out.len());
    let axes = space.axes.len();
    let mut sources: Vec<Source> = Vec::new();
    for (name, spec, side) in [("lhs", lhs, 0), ("rhs", rhs, 1), ("out", own, 2)] {
        let Spec::Tiled(t) = spec else { continue };
        if t.num_devices() != n || t.is_replicated() {
            continue;
        }
        let map: Vec<Option<usize>> = space
            .axes
            .iter()
            .map(|a| match side {
                0 => a.lhs,
                1 => a.rhs,
                _ => a.out,
            })
            .map(|d| d.filter(|&d| d < t.rank()))
            .collect();
        sources.push(Source {
            name,
            tiling: t,
            map,
            idx: t.tile_index_table(),
        });
    }
    // Per axis: the splits it may take (source index, tiles), then whole.
    let mut options: Vec<Vec<Option<(usize, i64)>>> = Vec::with_capacity(axes);
    for k in 0..axes {
        let mut o: Vec<Option<(usize, i64)>> = Vec::new();
        for (s, src) in sources.iter().enumerate() {
            if let Some(d) = src.map[k] {
                if src.tiling.tiles[d] > 1 {
                    o.push(Some((s, src.tiling.tiles[d])));
                }
            }
        }
        o.push(None);
        options.push(o);
    }
    let total = options
        .iter()
        .try_fold(1usize, |acc, o| acc.checked_mul(o.len()))
        .unwrap_or(usize::MAX);
    let mut assignments: Vec<Vec<Option<(usize, i64)>>> = Vec::new();
    if total <= MAX_COMBINATIONS {
        let mut idx = vec![0usize; axes];
        'next: loop {
            assignments.push((0..axes).map(|k| options[k][idx[k]]).collect());
            for k in (0..axes).rev() {
                idx[k] += 1;
                if idx[k] < options[k].len() {
                    continue 'next;
                }
                idx[k] = 0;
            }
            break;
        }
    } else {
        for s in 0..sources.len() {
            assignments.push(
                (0..axes)
                    .map(|k| {
                        options[k]
                            .iter()
                            .copied()
                            .find(|o| o.is_some_and(|(x, _)| x == s))
                            .flatten()
                    })
                    .collect(),
            );
        }
        assignments.push(vec![None; axes]);
    }
    // Devices that hold the same tile of every source get the same tile of every candidate:
    // the combinations are checked on these classes (a handful on a large mesh whose tiles
    // are each held by many devices), and a device list is built only for a tiling kept.
    let classes = Classes::of(&sources, n as usize);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for a in assignments {
        let tiles: Vec<i64> = a.iter().map(|o| o.map_or(1, |(_, t)| t)).collect();
        let num: i64 = tiles.iter().product();
        if num == 0 || n % num != 0 {
            continue;
        }
        let mut rows = vec![0i64; classes.size.len() * axes];
        for (c, row) in rows.chunks_exact_mut(axes.max(1)).enumerate() {
            for (k, o) in a.iter().enumerate() {
                if let Some((s, _)) = o {
                    let src = &sources[*s];
                    let held = &src.idx[classes.first[c]];
                    row[k] = held[src.map[k].expect("a split axis has a dimension")];
                }
            }
        }
        let repl = n / num;
        let mut count = vec![0i64; num as usize];
        for (c, &size) in classes.size.iter().enumerate() {
            count[ravel(&rows[c * axes..(c + 1) * axes], &tiles) as usize] += size;
        }
        if count.iter().any(|&c| c != repl) {
            continue;
        }
        // The same class rows give the same tiling, and different ones a different tiling.
        if !seen.insert((tiles.clone(), rows.clone())) {
            continue;
        }
        let mut idx = DeviceTable::zeros(n as usize, axes);
        for (dev, &c) in classes.of.iter().enumerate() {
            idx.row_mut(dev)
                .copy_from_slice(&rows[c * axes..(c + 1) * axes]);
        }
        let iter = Tiling::from_tile_index_table(tiles, repl, &idx);
        let what: Vec<String> = a
            .iter()
            .enumerate()
            .filter_map(|(k, o)| {
                o.map(|(s, t)| {
                    format!(
                        "{} {t} ways from the {}",
                        space.axis_name(k),
                        sources[s].name
                    )
                })
            })
            .collect();
        let what = if what.is_empty() {
            "nothing split (every device computes the whole dot)".to_string()
        } else {
            what.join(", ")
        };
        out.extend(combines(&space, shapes, iter, &what));
    }
    out
}

/// The candidates of iteration tiling `iter`: one per way of combining its partial sums,
/// costed by their combine alone.
fn combines(space: &Space, shapes: &Shapes, iter: Tiling, what: &str) -> Vec<Candidate> {
    let l = iter.project(&space.lhs_map);
    let r = iter.project(&space.rhs_map);
    let partial = iter.project(&space.out_map);
    let contracting: Vec<usize> = (0..space.axes.len())
        .filter(|&k| space.class[k] == 1 && iter.tiles[k] > 1)
        .collect();
    let [el, er, eo] = shapes.elem;
    let local = |t: &Tiling, dims: &[i64]| t.shard_dims(dims).iter().product::<i64>();
    let partial_elems = local(&partial, &shapes.out);
    let peak = local(&l, &shapes.lhs) * el + local(&r, &shapes.rhs) * er + partial_elems * eo;
    let make = |combine: Combine, result: Tiling, combine_bytes: i64, how: &str| Candidate {
        iter: iter.clone(),
        lhs: l.clone(),
        rhs: r.clone(),
        partial: partial.clone(),
        combine,
        contracting: contracting.clone(),
        bytes: combine_bytes,
        result,
        what: format!("{what}{how}"),
        peak,
    };
    if contracting.is_empty() {
        return vec![make(Combine::Nothing, partial.clone(), 0, "")];
    }
    let g: i64 = contracting.iter().map(|&k| iter.tiles[k]).product();
    let mut out = vec![make(
        Combine::AllReduce,
        partial.clone(),
        2 * partial_elems * eo * (g - 1) / g,
        "; partial sums all-reduced",
    )];
    // Reduce-scatter along result dimension `o`: member j of a contracting group keeps the
    // j-th piece of its local result along `o`, which is the global piece i*g+j when the
    // local piece (size s1) is exactly g global pieces (or `o` was whole).
    let ti = iter.tile_index_table();
    for o in 0..shapes.out.len() {
        let d = shapes.out[o];
        let t = partial.tiles[o];
        let s1 = partial.shard_dims(&shapes.out)[o];
        let s2 = (d + t * g - 1) / (t * g);
        if d < t * g || (t > 1 && s1 != g * s2) {
            continue;
        }
        let ctiles: Vec<i64> = contracting.iter().map(|&k| iter.tiles[k]).collect();
        let mut tiles = partial.tiles.clone();
        tiles[o] *= g;
        let mut idx = DeviceTable::zeros(ti.len(), shapes.out.len());
        let mut c = vec![0i64; contracting.len()];
        for (dev, it) in ti.iter().enumerate() {
            for (x, &k) in c.iter_mut().zip(&contracting) {
                *x = it[k];
            }
            let j = ravel(&c, &ctiles);
            let v = idx.row_mut(dev);
            for (x, a) in v.iter_mut().zip(&space.out_map) {
                *x = a.map_or(0, |k| it[k]);
            }
            v[o] = v[o] * g + j;
        }
        let result = Tiling::from_tile_index_table(tiles, iter.repl, &idx);
        let rs_bytes = local(&result, &shapes.out) * eo * (g - 1);
        out.push(make(
            Combine::ReduceScatter {
                dim: o,
                padded: g * s2,
            },
            result,
            rs_bytes,
            &format!("; partial sums reduce-scattered along result dimension {o}"),
        ));
    }
    out
}

/// The candidate of windowed loop `w` for a dot with operands held as `lhs` and `rhs`, whose
/// loop leaves the result as `result` and whose result is wanted as `own`. Its bytes: both
/// operands resharded to what the loop needs, `ring - 1` permutes of one piece (the other
/// operand's piece for a gathering loop, one window of the result for an accumulating one),
/// and the result resharded to `own`. Its peak: the local operands, the piece in flight and
/// the accumulator.
pub(in crate::partition::engine) fn windowed(
    w: Windowed,
    shapes: &Shapes,
    lhs: &Spec,
    rhs: &Spec,
    result: &Tiling,
    own: &Spec,
    n: i64,
) -> Candidate {
    let [el, er, eo] = shapes.elem;
    let local = |t: &Tiling, dims: &[i64]| t.shard_dims(dims).iter().product::<i64>();
    let (mine, mine_t, other_t, ring) = match &w {
        Windowed::Gather {
            mine,
            mine_t,
            other_t,
            ring,
            ..
        }
        | Windowed::Accumulate {
            mine,
            mine_t,
            other_t,
            ring,
            ..
        } => (*mine, mine_t, other_t, *ring),
    };
    let (lt, rt) = match mine {
        Side::Lhs => (mine_t, other_t),
        Side::Rhs => (other_t, mine_t),
    };
    let operands = move_bytes(lhs, &Spec::Tiled(lt.clone()), &shapes.lhs, el, n)
        + move_bytes(rhs, &Spec::Tiled(rt.clone()), &shapes.rhs, er, n);
    let (lb, rb) = (local(lt, &shapes.lhs) * el, local(rt, &shapes.rhs) * er);
    let window = local(result, &shapes.out) * eo;
    let finish = move_bytes(&Spec::Tiled(result.clone()), own, &shapes.out, eo, n);
    let (moved, peak, what) = match &w {
        Windowed::Gather { d, sent, .. } => {
            let (piece, name) = match mine {
                Side::Lhs => (rb, "rhs"),
                Side::Rhs => (lb, "lhs"),
            };
            (
                sent.unwrap_or(piece),
                lb + rb + piece + window,
                format!(
                    "windowed einsum: {name} pieces (its dimension {d}) passed {} steps around rings of {ring}",
                    ring - 1
                ),
            )
        }
        Windowed::Accumulate { o, .. } => (
            window,
            lb + rb + 2 * window,
            format!(
                "windowed einsum: partial sums of result dimension {o} passed {} steps around rings of {ring}",
                ring - 1
            ),
        ),
    };
    Candidate {
        iter: result.clone(),
        lhs: lt.clone(),
        rhs: rt.clone(),
        partial: result.clone(),
        combine: Combine::Windowed(Box::new(w)),
        contracting: Vec::new(),
        result: result.clone(),
        what,
        bytes: operands + (ring - 1) * moved + finish,
        peak,
    }
}

/// `choice` with `extra` candidates (the windowed loops) costed beside it, in the same order:
/// bytes, then peak; on a tie the extra ones first, in their order (a loop overlaps its
/// permutes with its partial dots, what the threshold option asks for), then the
/// enumerated ones.
pub(in crate::partition::engine) fn with_extra(choice: &Choice, extra: Vec<Candidate>) -> Choice {
    if extra.is_empty() {
        return choice.clone();
    }
    let considered = choice.considered + extra.len();
    let mut all: Vec<(i64, i64, String, Option<Candidate>)> = extra
        .into_iter()
        .map(|c| (c.bytes, c.peak, c.what.clone(), Some(c)))
        .collect();
    let b = &choice.best;
    all.push((b.bytes, b.peak, b.what.clone(), None));
    if let Some((bytes, peak, what)) = &choice.runner_up {
        all.push((*bytes, *peak, what.clone(), None));
    }
    let mut order: Vec<usize> = (0..all.len()).collect();
    order.sort_by_key(|&k| (all[k].0, all[k].1, k));
    let runner_up = order
        .get(1)
        .map(|&k| (all[k].0, all[k].1, all[k].2.clone()));
    let best = all
        .swap_remove(order[0])
        .3
        .unwrap_or_else(|| choice.best.clone());
    Choice {
        best,
        considered,
        runner_up,
    }
}

fn choose_uncached(
    dims: &DimsMapping,
    shapes: &Shapes,
    lhs: &Spec,
    rhs: &Spec,
    own: &Spec,
    n: i64,
) -> Option<Choice> {
    // The first two by (bytes, peak, enumeration order), planning only what can decide
    // them: each candidate waits in a queue keyed by its bytes so far (its combine, then
    // each move added as it is planned); the queue's least entry gets its next move planned,
    // and a least entry with every move planned is the next in the order, since moves never
    // cost less than nothing and every other entry's key can only grow. Candidates that
    // cannot be among the first two are never planned (on a large mesh each plan walks every
    // device).
    let mut all = enumerate(dims, shapes, lhs, rhs, own, n);
    let considered = all.len();
    let mut queue: BinaryHeap<Reverse<(i64, i64, usize, usize)>> = all
        .iter()
        .enumerate()
        .map(|(k, c)| Reverse((c.bytes, c.peak, k, 0)))
        .collect();
    let mut first = Vec::with_capacity(2);
    while let Some(Reverse((bytes, peak, k, planned))) = queue.pop() {
        if planned == MOVES {
            all[k].bytes = bytes;
            first.push(k);
            if first.len() == 2 {
                break;
            }
            continue;
        }
        let more = move_cost(&all[k], planned, shapes, lhs, rhs, own, n);
        queue.push(Reverse((bytes + more, peak, k, planned + 1)));
    }
    let runner_up = first
        .get(1)
        .map(|&k| (all[k].bytes, all[k].peak, all[k].what.clone()));
    let best = all.swap_remove(*first.first()?);
    Some(Choice {
        best,
        considered,
        runner_up,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::attrs::DotDimensionNumbers;

    fn matmul() -> DimsMapping {
        let dn = DotDimensionNumbers {
            lhs_batch_dimensions: vec![],
            rhs_batch_dimensions: vec![],
            lhs_contracting_dimensions: vec![1],
            rhs_contracting_dimensions: vec![0],
        };
        DimsMapping::of_dot(&dn, 2, 2)
    }

    fn shapes(m: i64, k: i64, n: i64) -> Shapes {
        Shapes {
            lhs: vec![m, k],
            rhs: vec![k, n],
            out: vec![m, n],
            elem: [4, 4, 4],
        }
    }

    fn tiled(tiles: Vec<i64>, repl: i64) -> Spec {
        let n = tiles.iter().product::<i64>() * repl;
        Spec::Tiled(Tiling::new(tiles, repl, (0..n).collect::<Vec<_>>()))
    }

    #[test]
    fn contracting_split_with_split_result_reduce_scatters() {
        // [m, k] x [k, n] with k split 4 ways on both sides, result rows split 4 ways: the
        // reduce-scatter moves half what the all-reduce and slice would.
        let c = choose(
            &matmul(),
            &shapes(16, 32, 8),
            &tiled(vec![1, 4], 1),
            &tiled(vec![4, 1], 1),
            &tiled(vec![4, 1], 1),
            4,
        )
        .unwrap();
        assert!(matches!(
            c.best.combine,
            Combine::ReduceScatter { dim: 0, .. }
        ));
        assert_eq!(c.best.bytes, 16 * 8 * 4 / 4 * 3);
    }

    #[test]
    fn aligned_splits_move_nothing() {
        // Rows of the lhs and columns of the rhs on a 2x2 mesh, the result split the same.
        let c = choose(
            &matmul(),
            &shapes(8, 8, 8),
            &tiled(vec![2, 1], 2),
            &Spec::Tiled(Tiling::new(vec![1, 2], 2, vec![0, 2, 1, 3])),
            &tiled(vec![2, 2], 1),
            4,
        )
        .unwrap();
        assert_eq!(c.best.bytes, 0);
        assert_eq!(c.best.combine, Combine::Nothing);
    }

    #[test]
    fn planning_only_what_can_win_chooses_as_costing_everything() {
        // Random (batch) matmuls, uneven shapes, random operand and result specs on 2-16
        // devices: the first two of the queue are the first two of every candidate costed
        // and sorted, with the same bytes, peak and description.
        use crate::partition::plan::tests::{random_spec, Gen};
        let mut g = Gen::new(23);
        for _ in 0..400 {
            let n = [2i64, 4, 8, 16][g.next(4) as usize];
            let b = g.next(2) as usize;
            let dn = DotDimensionNumbers {
                lhs_batch_dimensions: (0..b as i64).collect(),
                rhs_batch_dimensions: (0..b as i64).collect(),
                lhs_contracting_dimensions: vec![b as i64 + 1],
                rhs_contracting_dimensions: vec![b as i64],
            };
            let dims = DimsMapping::of_dot(&dn, b + 2, b + 2);
            let mut d = || 1 + g.next(9) as i64;
            let (bb, m, k, nn) = (d(), d(), d(), d());
            let lead: Vec<i64> = vec![bb; b];
            let cat = |x: &[i64]| [lead.as_slice(), x].concat();
            let shapes = Shapes {
                lhs: cat(&[m, k]),
                rhs: cat(&[k, nn]),
                out: cat(&[m, nn]),
                elem: [[1, 2, 4][g.next(3) as usize], 4, 4],
            };
            let lhs = random_spec(&mut g, b + 2, n);
            let rhs = random_spec(&mut g, b + 2, n);
            let own = random_spec(&mut g, b + 2, n);
            let all = candidates(&dims, &shapes, &lhs, &rhs, &own, n);
            let mut order: Vec<usize> = (0..all.len()).collect();
            order.sort_by_key(|&k| (all[k].bytes, all[k].peak, k));
            let Some(c) = choose_uncached(&dims, &shapes, &lhs, &rhs, &own, n) else {
                assert!(all.is_empty());
                continue;
            };
            let want = &all[order[0]];
            let case = format!("{lhs:?} x {rhs:?} -> {own:?} on {shapes:?}");
            assert_eq!(c.best, *want, "{case}");
            assert_eq!(c.considered, all.len(), "{case}");
            assert_eq!(
                c.runner_up,
                order
                    .get(1)
                    .map(|&k| (all[k].bytes, all[k].peak, all[k].what.clone())),
                "{case}"
            );
        }
    }

    #[test]
    fn windowed_loops_compete_by_bytes_then_peak_and_win_ties() {
        // [8, 8] x [8, 8]^T on 4 devices, both operands and the result split on rows: the
        // tilings gather one operand (192 bytes); a loop passing rhs pieces around the ring
        // moves the same bytes with a smaller peak, so it wins.
        let dn = DotDimensionNumbers {
            lhs_batch_dimensions: vec![],
            rhs_batch_dimensions: vec![],
            lhs_contracting_dimensions: vec![1],
            rhs_contracting_dimensions: vec![1],
        };
        let dims = DimsMapping::of_dot(&dn, 2, 2);
        let s = shapes(8, 8, 8);
        let rows = tiled(vec![4, 1], 1);
        let Spec::Tiled(t) = &rows else {
            unreachable!()
        };
        let choice = choose(&dims, &s, &rows, &rows, &rows, 4).unwrap();
        assert_eq!(choice.best.bytes, 192);
        let lp = |sent: Option<i64>| {
            windowed(
                Windowed::Gather {
                    mine: Side::Lhs,
                    mine_t: t.clone(),
                    other_t: t.clone(),
                    d: 0,
                    o: 1,
                    ring: 4,
                    sent,
                },
                &s,
                &rows,
                &rows,
                t,
                &rows,
                4,
            )
        };
        let plain = lp(None);
        assert_eq!((plain.bytes, plain.peak), (192, 256));
        let c = with_extra(&choice, vec![plain]);
        assert!(matches!(c.best.combine, Combine::Windowed(_)));
        assert_eq!(c.runner_up.as_ref().map(|r| r.0), Some(192));
        assert_eq!(c.considered, choice.considered + 1);
        // Sending a smaller source (code motion) makes it cheaper still.
        assert_eq!(lp(Some(8)).bytes, 24);
        // A loop that moves more loses to the tiling.
        let costly = Candidate {
            bytes: 1000,
            ..lp(None)
        };
        let c = with_extra(&choice, vec![costly]);
        assert!(!matches!(c.best.combine, Combine::Windowed(_)));
    }

    #[test]
    fn mixed_tilings_need_equal_groups() {
        // Lhs rows split 2 (replicated in pairs), result columns split 4: taking rows from the
        // lhs and columns from the result is not a tiling of 4 devices (8 tiles).
        let all = candidates(
            &matmul(),
            &shapes(8, 8, 8),
            &tiled(vec![2, 1], 2),
            &Spec::replicated(2, 4),
            &tiled(vec![1, 4], 1),
            4,
        );
        assert!(all.iter().all(|c| c.iter.num_tiles() <= 4));
        assert!(all.iter().any(|c| c.iter.tiles == vec![1, 2, 1]));
    }
}
