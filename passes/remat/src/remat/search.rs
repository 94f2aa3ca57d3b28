//! Choosing what to rematerialize at the current program point.
//!
//! Both searches choose among the placed, finished items of the express lane that are not
//! denylisted, can be rematerialized and have no placed control successor, the candidate (a
//! block of consecutive items, or one item to compress) of least cost, the earliest in the list
//! on ties. The cost of saving `m > 0` bytes is `memory_limit / m`, or 0 when no user of the
//! block is placed yet (the rematerialization is then just a move).
//!
//! - [`pick_faithful`] is the seed's scan: every express item, and blocks growing from it,
//!   each time (quadratic over a computation).
//! - [`FastQueue`] keeps single-item recompute candidates in a priority queue keyed by their
//!   cost and position. Entries are optimistic: an item's true key only gets worse over time
//!   except when one of the buffers it defines or uses comes back to life (a rematerialization
//!   extends it), and then the item is queued again. A pop re-checks the key and re-queues the
//!   item if it got worse, so the first entry whose key holds is exactly the scan's choice.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use smallvec::SmallVec;

use tessera_hlo::fxhash::FxHashMap;
use tessera_hlo::{InstrId, Module, Opcode, Shape};

use super::list::{ItemId, NIL};
use super::tracker::Tracker;
use super::RematMode;

/// What to do with the chosen items.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    Recompute,
    Compress(Box<Shape>),
}

#[derive(Clone, Debug)]
pub struct Pick {
    pub items: Vec<ItemId>,
    pub strategy: Strategy,
    /// Candidates evaluated.
    pub effort: i64,
}

/// Per-instruction cache of [`is_rematerializable`], one per computation walked. A map, not a
/// vector indexed by the module-wide id: with a call chain of 50,000 computations open at
/// once, a module-sized vector each took memory quadratic in the module.
#[derive(Default)]
pub struct RematerializableCache {
    known: FxHashMap<InstrId, bool>,
}

impl RematerializableCache {
    pub fn get(&mut self, module: &Module, id: InstrId) -> bool {
        *self
            .known
            .entry(id)
            .or_insert_with(|| is_rematerializable(module, id))
    }
}

fn layout_of(shape: &Shape) -> Option<tessera_hlo::shape::Layout> {
    shape.as_array().map(|a| {
        a.layout
            .clone()
            .unwrap_or_else(|| tessera_hlo::shape::Layout::descending(a.rank()))
    })
}

/// Collectives whose rematerialization is decided by their layout constraint alone (XLA's
/// `HloCollectiveInstruction`). The asynchronous starts are left out here (see
/// docs/rematerialization.md).
fn is_collective(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        AllReduce | AllGather | AllToAll | ReduceScatter | RaggedAllToAll | CollectiveBroadcast
    )
}

/// True if the instruction may be cloned and recomputed later.
pub fn is_rematerializable(module: &Module, id: InstrId) -> bool {
    let i = module.instr(id);
    if i.opcode() == Opcode::Copy {
        // Copies that keep the layout were added on purpose (copy insertion).
        if let Some(&op) = i.operands().first() {
            if layout_of(&i.shape) == layout_of(&module.instr(op).shape) {
                return false;
            }
        }
    }
    if is_collective(i.opcode()) {
        return !i.attrs.constrain_layout;
    }
    use Opcode::*;
    match i.opcode() {
        Call | Constant | Conditional | CustomCall | Parameter | While => false,
        // Async pairs must stay one start to one done.
        AsyncStart
        | AsyncUpdate
        | AsyncDone
        | AllReduceStart
        | AllReduceDone
        | AllGatherStart
        | AllGatherDone
        | CollectivePermuteStart
        | CollectivePermuteDone
        | CopyStart
        | CopyDone
        | Send
        | SendDone
        | Recv
        | RecvDone => false,
        _ => !i.has_side_effect(),
    }
}

/// `memory_limit / reduced`, or 0 if no user of any item of the block is placed (a move).
pub fn remat_cost(
    tracker: &Tracker,
    module: &Module,
    items: &[ItemId],
    reduced: i64,
    memory_limit: i64,
) -> i64 {
    let any_user_placed = items.iter().any(|&it| {
        module
            .users(tracker.list.item(it).instr)
            .iter()
            .any(|&u| tracker.is_placed(u))
    });
    if !any_user_placed {
        return 0;
    }
    memory_limit / reduced
}

fn any_denylisted_or_not_rematerializable(
    tracker: &Tracker,
    module: &Module,
    cache: &mut RematerializableCache,
    block: &[ItemId],
) -> bool {
    block.iter().any(|&it| {
        let item = tracker.list.item(it);
        item.denylisted || !cache.get(module, item.instr)
    })
}

fn control_successor_placed(tracker: &Tracker, module: &Module, item: ItemId) -> bool {
    module
        .instr(tracker.list.item(item).instr)
        .control_successors()
        .iter()
        .any(|&s| tracker.is_placed(s))
}

/// The seed's search: scan the express lane for the best block of `min_block..=max_block`
/// items (and, for single items in a compressing mode, the best compression).
///
/// `guard` (compressing modes, `peak_guard`): a function giving the bytes after each walked
/// item ([`Tracker::bytes_after_walked_items`], linear in the list: called at most once, and
/// only when a compression would otherwise become the best pick) and the bytes at the
/// current point; a compression whose compact copy would bring some walked point to at least
/// the current point's bytes is not a candidate.
#[allow(clippy::too_many_arguments)]
pub fn pick_faithful(
    tracker: &Tracker,
    module: &Module,
    cache: &mut RematerializableCache,
    compact: &mut dyn FnMut(InstrId) -> Shape,
    memory_limit: i64,
    min_block: usize,
    max_block: usize,
    peak_memory: i64,
    guard: Option<(&dyn Fn() -> Vec<i64>, i64)>,
) -> Pick {
    let mut after: Option<Vec<i64>> = None;
    let list = &tracker.list;
    let mut best = Pick {
        items: Vec::new(),
        strategy: Strategy::Recompute,
        effort: 0,
    };
    let mut best_cost = 0i64;
    let in_progress = tracker.in_progress();
    let mut start = list.first_skip_node();
    while start != NIL {
        // The initial block: up to min_block placed, finished items from `start`.
        let mut block: Vec<ItemId> = Vec::with_capacity(max_block.min(64));
        let mut cur = start;
        while block.len() < min_block {
            if cur == NIL || !list.item(cur).placed || cur == in_progress {
                break;
            }
            block.push(cur);
            cur = list.next(cur);
        }
        if block.len() < min_block {
            break;
        }
        if any_denylisted_or_not_rematerializable(tracker, module, cache, &block) {
            start = list.next_skip_node(start);
            continue;
        }
        while block.len() <= max_block {
            if block.len() == 1 && tracker.mode != RematMode::Recompute {
                let item = block[0];
                let it = list.item(item);
                if it.buffers_output.len() == 1 {
                    let out = &tracker.buffers[it.buffers_output[0] as usize];
                    let shape = &module.instr(it.instr).shape;
                    if it.placed && item != in_progress && !out.live_out && shape.is_array() {
                        best.effort += 1;
                        // Only a live value not read here can be compressed: that is checked
                        // before its compact shape is made.
                        if tracker.can_compress_now(module, item) {
                            let compact_shape = compact(it.instr);
                            let reduced =
                                tracker.memory_reduced_if_compressed(module, item, &compact_shape);
                            let size = tracker.size_of(shape);
                            let reduced_size = tracker.size_of(&compact_shape);
                            let cost = (reduced > 0).then(|| memory_limit / reduced);
                            // Both forms are live while compressing: only worth it if that
                            // fits under the computation's peak.
                            if let Some(cost) = cost.filter(|&c| {
                                size + reduced_size < peak_memory
                                    && (best.items.is_empty() || c < best_cost)
                            }) {
                                // Tessera: the compact copy goes right after the original and
                                // is live at every walked point since; refuse it when that
                                // makes one of them as high as the point it relieves.
                                let raises = guard.is_some_and(|(bytes_after, now)| {
                                    after
                                        .get_or_insert_with(bytes_after)
                                        .get(item as usize)
                                        .is_some_and(|&a| a.saturating_add(reduced_size) >= now)
                                });
                                if !raises {
                                    best.items = block.clone();
                                    best.strategy = Strategy::Compress(Box::new(compact_shape));
                                    best_cost = cost;
                                }
                            }
                        }
                    }
                }
            }
            if tracker.mode == RematMode::Compress {
                break;
            }
            if block
                .iter()
                .any(|&it| control_successor_placed(tracker, module, it))
            {
                break;
            }
            let reduced = tracker.memory_reduced_if_rematerialized(&block);
            best.effort += 1;
            if reduced > 0 {
                let cost = remat_cost(tracker, module, &block, reduced, memory_limit);
                if best.items.is_empty() || cost < best_cost {
                    best.items = block.clone();
                    best.strategy = Strategy::Recompute;
                    best_cost = cost;
                }
            }
            let next = list.next(*block.last().unwrap());
            if next == NIL
                || list.item(next).denylisted
                || !list.item(next).placed
                || next == in_progress
                || !cache.get(module, list.item(next).instr)
            {
                break;
            }
            block.push(next);
        }
        start = list.next_skip_node(start);
    }
    best
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    cost: i64,
    position: u64,
    /// The block's first item.
    start: ItemId,
    generation: u32,
}

/// The priority queues of recompute candidates of one computation: one heap per block size
/// `1..=max_block`, each holding blocks by their first item.
///
/// An item is *good* when the scan may put it in a block: finished, not denylisted,
/// rematerializable, no control successor placed. The scan's candidates at a block size `b`
/// are the express items whose run of consecutive good items (along the list, from the item
/// on) is at least `b` long. The queue keeps that run length per item (capped at
/// `max_block`) and how many express items have each length, which gives the number of
/// candidates the scan evaluates in a phase without scanning. Only the most recently finished
/// items change runs: finishing an item extends the runs that ended just before it (at most
/// `max_block - 1` items back), and a placed control successor shortens the runs through its
/// predecessor.
pub struct FastQueue {
    heaps: Vec<BinaryHeap<Reverse<Entry>>>,
    /// Current generation of each (block size, first item); older entries are stale.
    generations: Vec<Vec<u32>>,
    /// Per item: length of its run of good items, capped at `max_block`.
    runs: Vec<u32>,
    /// Per run length: express items with that run (grown on demand, as are the heaps: the
    /// block size limit is user input and may be far above any run).
    run_counts: Vec<i64>,
    max_block: usize,
    memory_limit: i64,
    renumberings: u64,
    /// Entries popped, summed over all picks.
    pub pops: i64,
}

impl FastQueue {
    pub fn new(memory_limit: i64, max_block: usize) -> FastQueue {
        let max_block = max_block.max(1);
        FastQueue {
            heaps: Vec::new(),
            generations: Vec::new(),
            runs: Vec::new(),
            run_counts: vec![0; 2],
            max_block,
            memory_limit,
            renumberings: 0,
            pops: 0,
        }
    }

    fn run(&self, item: ItemId) -> usize {
        self.runs.get(item as usize).copied().unwrap_or(0) as usize
    }

    fn set_run(&mut self, tracker: &Tracker, item: ItemId, run: usize) {
        if self.runs.len() <= item as usize {
            self.runs
                .resize(tracker.list.len().max(item as usize + 1), 0);
        }
        let old = self.runs[item as usize] as usize;
        if self.run_counts.len() <= run {
            self.run_counts.resize(run + 1, 0);
        }
        if tracker.list.item(item).is_skip_node {
            self.run_counts[old] -= 1;
            self.run_counts[run] += 1;
        }
        self.runs[item as usize] = run as u32;
    }

    /// True if the scan may put a finished `item` in a block.
    fn good(
        tracker: &Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
        item: ItemId,
    ) -> bool {
        let it = tracker.list.item(item);
        it.placed
            && item != tracker.in_progress()
            && !it.denylisted
            && cache.get(module, it.instr)
            && !control_successor_placed(tracker, module, item)
    }

    /// Candidates the scan evaluates for blocks of `min..=max` items: every express item with
    /// a run of `b` good items counts once for each `b` in range.
    pub fn effort(&self, min: usize, max: usize) -> i64 {
        let max = max.min(self.max_block);
        (1..self.run_counts.len())
            .map(|r| {
                let sizes = (r + 1)
                    .saturating_sub(min)
                    .min((max + 1).saturating_sub(min));
                self.run_counts[r] * sizes as i64
            })
            .sum()
    }

    /// Accounting when `item` starts: its control predecessors can no longer be cloned, which
    /// ends every run through them.
    pub fn on_begin(&mut self, tracker: &mut Tracker, module: &Module, item: ItemId) {
        let preds = module
            .instr(tracker.list.item(item).instr)
            .control_predecessors()
            .to_vec();
        for p in preds {
            let pi = tracker.list.get(p);
            if pi == NIL || self.run(pi) == 0 {
                continue;
            }
            self.set_run(tracker, pi, 0);
            let mut y = tracker.list.prev(pi);
            let mut d = 1;
            while y != NIL && d < self.max_block && self.run(y) > d {
                self.set_run(tracker, y, d);
                y = tracker.list.prev(y);
                d += 1;
            }
        }
    }

    /// Accounting and queueing when `item` is finished: the runs that ended just before it
    /// grow by one, and the blocks ending at it are queued.
    pub fn on_end(
        &mut self,
        tracker: &mut Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
        item: ItemId,
    ) {
        if !Self::good(tracker, module, cache, item) {
            // A not-good item can still be a single-item entry that never qualifies; nothing
            // to queue.
            return;
        }
        self.set_run(tracker, item, 1);
        let mut y = tracker.list.prev(item);
        let mut d = 1;
        while y != NIL && d < self.max_block && self.run(y) == d {
            self.set_run(tracker, y, d + 1);
            y = tracker.list.prev(y);
            d += 1;
        }
        // Blocks ending at `item`: sizes 1..=max_block, each starting b - 1 items back.
        let mut s = item;
        for b in 1..=self.max_block {
            if s == NIL || self.run(s) < b {
                break;
            }
            if tracker.list.item(s).is_skip_node {
                self.push(tracker, module, cache, s, b);
            }
            s = tracker.list.prev(s);
        }
    }

    /// The items of the block of `size` starting at `start` (fewer if the list ends).
    fn block(tracker: &Tracker, start: ItemId, size: usize) -> SmallVec<[ItemId; 8]> {
        let mut out = SmallVec::new();
        let mut it = start;
        while out.len() < size && it != NIL {
            out.push(it);
            it = tracker.list.next(it);
        }
        out
    }

    /// The block's cost and position as if the current instruction used none of its
    /// buffers; `None` if it is not a candidate (and cannot become one unless one of its
    /// buffers revives).
    fn key(
        &self,
        tracker: &Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
        start: ItemId,
        size: usize,
    ) -> Option<(i64, u64)> {
        let first = tracker.list.item(start);
        if !first.is_skip_node {
            return None;
        }
        let block = Self::block(tracker, start, size);
        if block.len() < size {
            return None;
        }
        for &it in &block {
            if !Self::good(tracker, module, cache, it) {
                return None;
            }
        }
        let reduced = tracker.memory_reduced(&block, false);
        if reduced <= 0 {
            return None;
        }
        let cost = remat_cost(tracker, module, &block, reduced, self.memory_limit);
        Some((cost, first.position))
    }

    /// Queues the block with its current key (replacing any older entry).
    fn push(
        &mut self,
        tracker: &Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
        start: ItemId,
        size: usize,
    ) {
        let key = self.key(tracker, module, cache, start, size);
        if self.heaps.len() < size {
            self.heaps.resize_with(size, BinaryHeap::new);
            self.generations.resize_with(size, Vec::new);
        }
        let gens = &mut self.generations[size - 1];
        if gens.len() <= start as usize {
            gens.resize(tracker.list.len().max(start as usize + 1), 0);
        }
        gens[start as usize] = gens[start as usize].wrapping_add(1);
        if let Some((cost, position)) = key {
            self.heaps[size - 1].push(Reverse(Entry {
                cost,
                position,
                start,
                generation: gens[start as usize],
            }));
        }
    }

    fn generation(&self, size: usize, start: ItemId) -> u32 {
        self.generations
            .get(size - 1)
            .and_then(|g| g.get(start as usize))
            .copied()
            .unwrap_or(0)
    }

    /// Queues again every block that contains `item` (its key may have improved).
    fn push_blocks_containing(
        &mut self,
        tracker: &Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
        item: ItemId,
    ) {
        let mut s = item;
        for back in 0..self.max_block {
            if s == NIL || self.run(s) <= back {
                break;
            }
            if tracker.list.item(s).is_skip_node {
                for b in back + 1..=self.run(s) {
                    self.push(tracker, module, cache, s, b);
                }
            }
            s = tracker.list.prev(s);
        }
    }

    /// Re-queues the blocks whose keys may have improved: those holding the definers and
    /// placed users of buffers that came back to life.
    pub fn absorb_revivals(
        &mut self,
        tracker: &mut Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
    ) {
        let revived = std::mem::take(&mut tracker.revived);
        for b in revived {
            let buf = &tracker.buffers[b as usize];
            let mut items: Vec<ItemId> = vec![buf.defining];
            items.extend(buf.users.iter().map(|u| u.user));
            items.sort_unstable();
            items.dedup();
            for it in items {
                if tracker.list.item(it).placed && it != tracker.in_progress() {
                    self.push_blocks_containing(tracker, module, cache, it);
                }
            }
        }
    }

    /// Recomputes every run from scratch and queues every block again: after a compression
    /// put its compact copy (placed) into the walked part of the list, which the incremental
    /// accounting of `on_end` does not cover.
    pub fn rebuild(
        &mut self,
        tracker: &mut Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
    ) {
        let mut order = Vec::with_capacity(tracker.list.len());
        let mut it = tracker.list.first();
        while it != NIL {
            order.push(it);
            it = tracker.list.next(it);
        }
        let mut next_run = 0usize;
        for &it in order.iter().rev() {
            let run = if Self::good(tracker, module, cache, it) {
                (next_run + 1).min(self.max_block)
            } else {
                0
            };
            self.set_run(tracker, it, run);
            next_run = run;
        }
        self.requeue(tracker, module, cache);
    }

    fn rebuild_if_renumbered(
        &mut self,
        tracker: &mut Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
    ) {
        if tracker.list.renumberings == self.renumberings {
            return;
        }
        self.requeue(tracker, module, cache);
    }

    /// Queues every block of the current runs again (keys and positions recomputed).
    fn requeue(
        &mut self,
        tracker: &mut Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
    ) {
        self.renumberings = tracker.list.renumberings;
        for h in &mut self.heaps {
            h.clear();
        }
        let mut it = tracker.list.first();
        while it != NIL {
            if tracker.list.item(it).is_skip_node {
                for b in 1..=self.run(it) {
                    self.push(tracker, module, cache, it, b);
                }
            }
            it = tracker.list.next(it);
        }
    }

    /// The best block of `min..=max` items to recompute now, as [`pick_faithful`] would
    /// choose it: least cost, then earliest first item, then fewest items.
    pub fn pick(
        &mut self,
        tracker: &mut Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
        min: usize,
        max: usize,
    ) -> Pick {
        self.absorb_revivals(tracker, module, cache);
        self.rebuild_if_renumbered(tracker, module, cache);
        // Sizes without a heap never had a candidate.
        let max = max.min(self.max_block).min(self.heaps.len());
        let mut best: Option<(i64, u64, usize, ItemId)> = None;
        for size in min.max(1)..=max {
            let mut keep: Vec<Entry> = Vec::new();
            while let Some(&Reverse(top)) = self.heaps[size - 1].peek() {
                if let Some((c, p, b, _)) = best {
                    if (top.cost, top.position, size) > (c, p, b) {
                        break;
                    }
                }
                self.heaps[size - 1].pop();
                if self.generation(size, top.start) != top.generation {
                    continue;
                }
                self.pops += 1;
                let Some(key) = self.key(tracker, module, cache, top.start, size) else {
                    let g = &mut self.generations[size - 1][top.start as usize];
                    *g = g.wrapping_add(1);
                    continue;
                };
                if key > (top.cost, top.position) {
                    self.push(tracker, module, cache, top.start, size);
                    continue;
                }
                keep.push(top);
                // The key ignores whether the current instruction uses the block's buffers.
                let block = Self::block(tracker, top.start, size);
                let reduced = tracker.memory_reduced_if_rematerialized(&block);
                if reduced > 0 {
                    let cost = remat_cost(tracker, module, &block, reduced, self.memory_limit);
                    let cand = (cost, top.position, size, top.start);
                    if best.is_none_or(|b| (cand.0, cand.1, cand.2) < (b.0, b.1, b.2)) {
                        best = Some(cand);
                    }
                }
            }
            for e in keep {
                self.heaps[size - 1].push(Reverse(e));
            }
        }
        Pick {
            items: best
                .map(|b| Self::block(tracker, b.3, b.2).to_vec())
                .unwrap_or_default(),
            strategy: Strategy::Recompute,
            effort: self.effort(min, max),
        }
    }

    /// Checks the run lengths and their counts against a direct computation (slow; for
    /// `check_invariants` runs).
    pub fn check(
        &self,
        tracker: &Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
    ) -> Result<(), String> {
        let mut counts = vec![0i64; self.run_counts.len().max(2)];
        let mut it = tracker.list.first();
        while it != NIL {
            let mut run = 0;
            let mut x = it;
            while x != NIL && run < self.max_block && Self::good(tracker, module, cache, x) {
                run += 1;
                x = tracker.list.next(x);
            }
            if run != self.run(it) {
                return Err(format!(
                    "item {it}: run of {run} good items, the queue has {}",
                    self.run(it)
                ));
            }
            if tracker.list.item(it).is_skip_node {
                if counts.len() <= run {
                    counts.resize(run + 1, 0);
                }
                counts[run] += 1;
            }
            it = tracker.list.next(it);
        }
        // Items never finished count as run 0 in both; compare the lengths that matter.
        counts.resize(self.run_counts.len().max(counts.len()), 0);
        let mut have = self.run_counts.clone();
        have.resize(counts.len(), 0);
        if counts[1..] != have[1..] {
            return Err(format!(
                "run counts {:?}, the queue has {:?}",
                &counts[1..],
                &have[1..]
            ));
        }
        Ok(())
    }
}

/// The compression candidates of one computation, for the fast search in the compressing
/// modes: the finished express items whose compression saves bytes and fits under the
/// computation's peak with both forms live, ordered as the scan prefers them (least cost
/// `memory_limit / saved bytes`, then earliest). Both are fixed once an item is finished, so
/// a pick only checks, best first, what changes with the program point: the value still live
/// and not read by the current instruction, and the peak guard. Items whose value died are
/// taken out until it revives.
pub struct CompressIndex {
    memory_limit: i64,
    peak_memory: i64,
    /// (cost, position, item).
    set: BTreeSet<(i64, u64, ItemId)>,
    /// Per queued or dead item: (cost, compact bytes).
    keys: HashMap<ItemId, (i64, i64)>,
    /// Items taken out because their output buffer died, by buffer.
    dead: HashMap<u32, Vec<ItemId>>,
    renumberings: u64,
    /// Finished express items the scan evaluates as compressions: its effort on single items.
    pub candidates: i64,
}

impl CompressIndex {
    pub fn new(memory_limit: i64, peak_memory: i64) -> CompressIndex {
        CompressIndex {
            memory_limit,
            peak_memory,
            set: BTreeSet::new(),
            keys: HashMap::new(),
            dead: HashMap::new(),
            renumberings: 0,
            candidates: 0,
        }
    }

    /// Accounting when `item` is finished (or, for a compact copy, placed finished):
    /// `compact_size` gives the bytes of an instruction's compact form.
    pub fn on_finished(
        &mut self,
        tracker: &Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
        item: ItemId,
        compact_size: &mut dyn FnMut(InstrId) -> i64,
    ) {
        let it = tracker.list.item(item);
        let shape = &module.instr(it.instr).shape;
        if !(it.is_skip_node
            && !it.denylisted
            && cache.get(module, it.instr)
            && it.buffers_output.len() == 1
            && !tracker.buffers[it.buffers_output[0] as usize].live_out
            && shape.is_array())
        {
            return;
        }
        self.candidates += 1;
        let reduced_size = compact_size(it.instr);
        let saved = tracker.buffers[it.buffers_output[0] as usize].size - reduced_size;
        if saved > 0 && tracker.size_of(shape) + reduced_size < self.peak_memory {
            let cost = self.memory_limit / saved;
            self.keys.insert(item, (cost, reduced_size));
            self.set.insert((cost, it.position, item));
        }
    }

    /// Puts back the items whose output buffers came back to life (`Tracker::revived`, read
    /// before the recompute queue takes it).
    pub fn absorb_revivals(&mut self, tracker: &Tracker) {
        for b in &tracker.revived {
            for item in self.dead.remove(b).unwrap_or_default() {
                if let Some(&(cost, _)) = self.keys.get(&item) {
                    self.set
                        .insert((cost, tracker.list.item(item).position, item));
                }
            }
        }
    }

    fn rebuild_if_renumbered(&mut self, tracker: &Tracker) {
        if tracker.list.renumberings == self.renumberings {
            return;
        }
        self.renumberings = tracker.list.renumberings;
        let items: Vec<ItemId> = self.set.iter().map(|&(_, _, it)| it).collect();
        self.set = items
            .into_iter()
            .map(|it| (self.keys[&it].0, tracker.list.item(it).position, it))
            .collect();
    }

    /// The compression the scan would prefer to everything up to `bound` (the best
    /// recompute block's cost and position; the compression wins ties, as the scan
    /// evaluates it first at each item), with its cost. `guard` as in [`pick_faithful`].
    pub fn pick(
        &mut self,
        tracker: &Tracker,
        module: &Module,
        bound: Option<(i64, u64)>,
        guard: Option<(&dyn Fn() -> Vec<i64>, i64)>,
    ) -> Option<ItemId> {
        self.rebuild_if_renumbered(tracker);
        let mut after: Option<Vec<i64>> = None;
        let mut died = Vec::new();
        let mut found = None;
        for &(cost, position, item) in &self.set {
            if bound.is_some_and(|b| (cost, position) > b) {
                break;
            }
            let b = tracker.list.item(item).buffers_output[0];
            if !tracker.is_currently_live(b) {
                died.push((cost, position, item, b));
                continue;
            }
            if !tracker.can_compress_now(module, item) {
                continue;
            }
            let reduced_size = self.keys[&item].1;
            let raises = guard.is_some_and(|(bytes_after, now)| {
                after
                    .get_or_insert_with(bytes_after)
                    .get(item as usize)
                    .is_some_and(|&a| a.saturating_add(reduced_size) >= now)
            });
            if !raises {
                found = Some(item);
                break;
            }
        }
        for (cost, position, item, b) in died {
            self.set.remove(&(cost, position, item));
            self.dead.entry(b).or_default().push(item);
        }
        found
    }
}
