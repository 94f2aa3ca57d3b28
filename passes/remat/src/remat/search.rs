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
use std::collections::BinaryHeap;

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

/// Per-instruction cache of [`is_rematerializable`].
#[derive(Default)]
pub struct RematerializableCache {
    known: Vec<Option<bool>>,
}

impl RematerializableCache {
    pub fn get(&mut self, module: &Module, id: InstrId) -> bool {
        if self.known.len() <= id.index() {
            self.known.resize(id.index() + 1, None);
        }
        *self.known[id.index()].get_or_insert_with(|| is_rematerializable(module, id))
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
    if i.opcode == Opcode::Copy {
        // Copies that keep the layout were added on purpose (copy insertion).
        if let Some(&op) = i.operands().first() {
            if layout_of(&i.shape) == layout_of(&module.instr(op).shape) {
                return false;
            }
        }
    }
    if is_collective(i.opcode) {
        return !i.attrs.constrain_layout;
    }
    use Opcode::*;
    match i.opcode {
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
) -> Pick {
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
                        let compact_shape = compact(it.instr);
                        let reduced =
                            tracker.memory_reduced_if_compressed(module, item, &compact_shape);
                        let size = tracker.size_of(shape);
                        let reduced_size = tracker.size_of(&compact_shape);
                        best.effort += 1;
                        // Both forms are live while compressing: only worth it if that fits
                        // under the computation's peak.
                        if reduced > 0 && size + reduced_size < peak_memory {
                            let cost = memory_limit / reduced;
                            if best.items.is_empty() || cost < best_cost {
                                best.items = block.clone();
                                best.strategy = Strategy::Compress(Box::new(compact_shape));
                                best_cost = cost;
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
    item: ItemId,
    generation: u32,
}

/// The priority queue of single-item recompute candidates of one computation.
pub struct FastQueue {
    heap: BinaryHeap<Reverse<Entry>>,
    memory_limit: i64,
    renumberings: u64,
    /// How many candidates the scan would evaluate now (finished express items that are not
    /// denylisted, can be rematerialized and have no placed control successor): reported as
    /// the pick's effort, so the block phase gets the same budget with either search.
    scan_effort: i64,
    /// Entries popped, summed over all picks.
    pub pops: i64,
}

impl FastQueue {
    pub fn new(memory_limit: i64) -> FastQueue {
        FastQueue {
            heap: BinaryHeap::new(),
            memory_limit,
            renumberings: 0,
            scan_effort: 0,
            pops: 0,
        }
    }

    /// Accounting when `item` starts: its control predecessors can no longer be cloned.
    pub fn on_begin(&mut self, tracker: &mut Tracker, module: &Module, item: ItemId) {
        let preds = module
            .instr(tracker.list.item(item).instr)
            .control_predecessors()
            .to_vec();
        for p in preds {
            let pi = tracker.list.get(p);
            if pi != NIL && tracker.list.item(pi).scan_counted {
                tracker.list.item_mut(pi).scan_counted = false;
                self.scan_effort -= 1;
            }
        }
    }

    /// Accounting and queueing when `item` is finished.
    pub fn on_end(
        &mut self,
        tracker: &mut Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
        item: ItemId,
    ) {
        let it = tracker.list.item(item);
        if it.is_skip_node
            && !it.denylisted
            && cache.get(module, it.instr)
            && !control_successor_placed(tracker, module, item)
        {
            tracker.list.item_mut(item).scan_counted = true;
            self.scan_effort += 1;
        }
        self.push(tracker, module, cache, item);
    }

    /// The cost the item would have now if the current instruction did not use it; `None` if
    /// it is not a candidate (and cannot become one unless one of its buffers revives).
    fn key(
        &self,
        tracker: &Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
        item: ItemId,
    ) -> Option<(i64, u64)> {
        let it = tracker.list.item(item);
        if !it.placed
            || item == tracker.in_progress()
            || !it.is_skip_node
            || it.denylisted
            || !cache.get(module, it.instr)
            || control_successor_placed(tracker, module, item)
        {
            return None;
        }
        let mut reduced = 0;
        for &b in &it.buffers_defined {
            let buf = &tracker.buffers[b as usize];
            if buf.has_indirect_uses || buf.live_out || buf.index.len() > 1 {
                return None;
            }
            if tracker.is_currently_live(b) {
                reduced += tracker.allocated_size(b);
            }
        }
        for &b in &it.buffers_used {
            if !tracker.is_currently_live(b) {
                reduced -= tracker.allocated_size(b);
            }
        }
        if reduced <= 0 {
            return None;
        }
        let cost = remat_cost(tracker, module, &[item], reduced, self.memory_limit);
        Some((cost, it.position))
    }

    /// Queues `item` with its current key (replacing any older entry).
    pub fn push(
        &mut self,
        tracker: &mut Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
        item: ItemId,
    ) {
        let key = self.key(tracker, module, cache, item);
        let it = tracker.list.item_mut(item);
        it.generation = it.generation.wrapping_add(1);
        if let Some((cost, position)) = key {
            self.heap.push(Reverse(Entry {
                cost,
                position,
                item,
                generation: it.generation,
            }));
        }
    }

    /// Re-queues the items whose keys may have improved: the definers and placed users of
    /// buffers that came back to life.
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
                    self.push(tracker, module, cache, it);
                }
            }
        }
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
        self.renumberings = tracker.list.renumberings;
        self.heap.clear();
        let mut it = tracker.list.first();
        while it != NIL {
            if tracker.list.item(it).placed {
                self.push(tracker, module, cache, it);
            }
            it = tracker.list.next(it);
        }
    }

    /// The best single item to recompute now, as [`pick_faithful`] with blocks of one would
    /// choose it.
    pub fn pick(
        &mut self,
        tracker: &mut Tracker,
        module: &Module,
        cache: &mut RematerializableCache,
    ) -> Pick {
        self.absorb_revivals(tracker, module, cache);
        self.rebuild_if_renumbered(tracker, module, cache);
        let mut best: Option<(i64, u64, ItemId)> = None;
        let mut keep: Vec<Entry> = Vec::new();
        while let Some(&Reverse(top)) = self.heap.peek() {
            if let Some((c, p, _)) = best {
                if (top.cost, top.position) > (c, p) {
                    break;
                }
            }
            self.heap.pop();
            if tracker.list.item(top.item).generation != top.generation {
                continue;
            }
            self.pops += 1;
            let Some(key) = self.key(tracker, module, cache, top.item) else {
                let it = tracker.list.item_mut(top.item);
                it.generation = it.generation.wrapping_add(1);
                continue;
            };
            if key > (top.cost, top.position) {
                self.push(tracker, module, cache, top.item);
                continue;
            }
            keep.push(top);
            // The key ignores whether the current instruction uses the item's buffers.
            let reduced = tracker.memory_reduced_if_rematerialized(&[top.item]);
            if reduced > 0 {
                let cost = remat_cost(tracker, module, &[top.item], reduced, self.memory_limit);
                let cand = (cost, top.position, top.item);
                if best.is_none_or(|b| (cand.0, cand.1) < (b.0, b.1)) {
                    best = Some(cand);
                }
            }
        }
        for e in keep {
            self.heap.push(Reverse(e));
        }
        Pick {
            items: best.map(|b| vec![b.2]).unwrap_or_default(),
            strategy: Strategy::Recompute,
            effort: self.scan_effort,
        }
    }
}
