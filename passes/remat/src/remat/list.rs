//! The instruction list of one computation: a doubly linked list of items in schedule order
//! with a second, sparser "express lane" over it (a two-lane skip list, as in the seed).
//!
//! Every item is on the slow lane. Items whose allocated size is at least `min_remat_size` are
//! promoted to the express lane once at the start, and every item inserted later is put on it,
//! so candidate searches walk only the express lane. Each item carries a position that grows
//! strictly along the list: "insert before the earliest of these items" is then a minimum over
//! positions, with no scan. Inserting between two items takes the midpoint of their positions;
//! when two neighbours have no gap left, the whole list is renumbered (rare: the initial gap
//! allows 32 halvings at one spot).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use smallvec::SmallVec;
use tessera_hlo::fxhash::FxHashMap;
use tessera_hlo::{InstrId, Module};

/// An item of the list, dense from 0.
pub type ItemId = u32;
/// No item.
pub const NIL: ItemId = u32::MAX;

/// Buffer ids of the memory tracker.
pub type BufferList = SmallVec<[u32; 3]>;

/// One use of a buffer by an item, as the item keeps it (the buffer keeps the same use, with
/// the item, in its `users`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    pub buffer: u32,
    pub operand_number: u32,
    /// The tuple index of the buffer when it is an element at depth one (`{k}`).
    pub index: Option<usize>,
}

pub type ReadList = SmallVec<[Read; 2]>;

const GAP: u64 = 1 << 32;

/// One instruction and its per-instruction state.
#[derive(Clone, Debug)]
pub struct Item {
    pub instr: InstrId,
    /// Set by `begin_instruction` and never cleared.
    pub placed: bool,
    /// Never rematerialize this item again (remat-of-remat moves, compress copies, the bitcasts
    /// and get-tuple-elements a rematerialization creates).
    pub denylisted: bool,
    /// Buffers this instruction defines.
    pub buffers_defined: BufferList,
    /// Buffers this instruction's value is (a get-tuple-element or bitcast outputs the buffer
    /// of its operand without defining one).
    pub buffers_output: BufferList,
    /// Buffers this instruction reads.
    pub buffers_used: BufferList,
    /// Every use this instruction makes of a buffer, in the order the buffer's `users` list
    /// has them: a clone copies its original's uses from here, where finding them in the
    /// users of a buffer read throughout the computation cost a scan of thousands per clone.
    pub reads: ReadList,
    pub is_skip_node: bool,
    pub(crate) next: ItemId,
    pub(crate) prev: ItemId,
    pub(crate) next_skip: ItemId,
    pub(crate) prev_skip: ItemId,
    /// Strictly increasing along the list (only for items in the list).
    pub position: u64,
}

impl Item {
    fn new(instr: InstrId) -> Item {
        Item {
            instr,
            placed: false,
            denylisted: false,
            buffers_defined: BufferList::new(),
            buffers_output: BufferList::new(),
            buffers_used: BufferList::new(),
            reads: ReadList::new(),
            is_skip_node: false,
            next: NIL,
            prev: NIL,
            next_skip: NIL,
            prev_skip: NIL,
            position: 0,
        }
    }

    /// Makes this item's uses of buffer `old` uses of `new`.
    pub fn rename_read(&mut self, old: u32, new: u32) {
        for b in self.buffers_used.iter_mut() {
            if *b == old {
                *b = new;
            }
        }
        for r in self.reads.iter_mut() {
            if r.buffer == old {
                r.buffer = new;
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct InstructionList {
    items: Vec<Item>,
    first: ItemId,
    first_skip: ItemId,
    last_skip: ItemId,
    /// Item of each instruction, by `InstrId::index() - base`, over the range of the initial
    /// order's ids (a module-sized vector per computation was quadratic memory on deep call
    /// chains, where every computation of the chain has a list at once).
    item_of: Vec<ItemId>,
    base: usize,
    /// Items of instructions outside that range (clones).
    item_of_new: FxHashMap<InstrId, ItemId>,
    /// How many times positions were renumbered (the fast search rebuilds its queue then).
    pub(crate) renumberings: u64,
}

impl InstructionList {
    /// A list holding `order`, positions in order, nothing on the express lane yet.
    pub fn new(order: &[InstrId]) -> InstructionList {
        let mut l = InstructionList {
            items: Vec::with_capacity(order.len() + order.len() / 8 + 4),
            first: NIL,
            first_skip: NIL,
            last_skip: NIL,
            item_of: Vec::new(),
            base: 0,
            item_of_new: FxHashMap::default(),
            renumberings: 0,
        };
        // The ids of a computation's instructions are close together: a vector over their
        // range, and a map for ids outside it (clones made later).
        if let (Some(lo), Some(hi)) = (
            order.iter().map(|i| i.index()).min(),
            order.iter().map(|i| i.index()).max(),
        ) {
            l.base = lo;
            l.item_of = vec![NIL; hi - lo + 1];
        }
        let mut last = NIL;
        for (k, &instr) in order.iter().enumerate() {
            let id = l.create_item(instr);
            let it = &mut l.items[id as usize];
            it.prev = last;
            it.position = (k as u64 + 1) * GAP;
            if last == NIL {
                l.first = id;
            } else {
                l.items[last as usize].next = id;
            }
            last = id;
        }
        l
    }

    /// Number of items, including created items not yet inserted.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn first(&self) -> ItemId {
        self.first
    }

    pub fn next(&self, id: ItemId) -> ItemId {
        self.items[id as usize].next
    }

    pub fn prev(&self, id: ItemId) -> ItemId {
        self.items[id as usize].prev
    }

    pub fn first_skip_node(&self) -> ItemId {
        self.first_skip
    }

    pub fn next_skip_node(&self, id: ItemId) -> ItemId {
        self.items[id as usize].next_skip
    }

    pub fn item(&self, id: ItemId) -> &Item {
        &self.items[id as usize]
    }

    pub fn item_mut(&mut self, id: ItemId) -> &mut Item {
        &mut self.items[id as usize]
    }

    /// The item of `instr`; `NIL` for an instruction the list does not know.
    pub fn get(&self, instr: InstrId) -> ItemId {
        match instr.index().checked_sub(self.base) {
            Some(k) if k < self.item_of.len() => self.item_of[k],
            _ => self.item_of_new.get(&instr).copied().unwrap_or(NIL),
        }
    }

    pub fn contains(&self, instr: InstrId) -> bool {
        self.get(instr) != NIL
    }

    /// Creates the item of a new instruction, not yet linked into the list (insert it with
    /// [`InstructionList::insert_before_instructions`]).
    pub fn create_item(&mut self, instr: InstrId) -> ItemId {
        let id = self.items.len() as ItemId;
        self.items.push(Item::new(instr));
        debug_assert_eq!(self.get(instr), NIL, "instruction added twice");
        match instr.index().checked_sub(self.base) {
            Some(k) if k < self.item_of.len() => self.item_of[k] = id,
            _ => {
                self.item_of_new.insert(instr, id);
            }
        }
        id
    }

    /// Instructions in list order.
    pub fn order(&self) -> Vec<InstrId> {
        let mut out = Vec::with_capacity(self.items.len());
        let mut i = self.first;
        while i != NIL {
            out.push(self.items[i as usize].instr);
            i = self.items[i as usize].next;
        }
        out
    }

    /// Marks every item unplaced again.
    pub fn reset_placement(&mut self) {
        for it in &mut self.items {
            it.placed = false;
        }
    }

    /// Puts every item for which `promote` holds on the express lane, in list order.
    pub fn promote_nodes_to_skip(&mut self, mut promote: impl FnMut(&Item) -> bool) -> usize {
        let mut count = 0;
        let mut i = self.first;
        while i != NIL {
            if promote(&self.items[i as usize]) {
                count += 1;
                if self.first_skip == NIL {
                    self.first_skip = i;
                }
                let last = self.last_skip;
                let it = &mut self.items[i as usize];
                it.is_skip_node = true;
                it.prev_skip = last;
                if last != NIL {
                    self.items[last as usize].next_skip = i;
                }
                self.last_skip = i;
            }
            i = self.items[i as usize].next;
        }
        count
    }

    /// Inserts `to_insert` right before the earliest (lowest position) of `before`.
    pub fn insert_before_instructions(&mut self, to_insert: ItemId, before: &[ItemId]) {
        assert!(!before.is_empty(), "insert before an empty set of items");
        let min = before
            .iter()
            .copied()
            .min_by_key(|&b| self.items[b as usize].position)
            .unwrap();
        self.insert_before(to_insert, min);
    }

    /// Inserts `to_insert` right after the latest of `after`; that item must not be the last.
    pub fn insert_after_instructions(&mut self, to_insert: ItemId, after: &[ItemId]) -> bool {
        assert!(!after.is_empty(), "insert after an empty set of items");
        let max = after
            .iter()
            .copied()
            .max_by_key(|&b| self.items[b as usize].position)
            .unwrap();
        let next = self.items[max as usize].next;
        if next == NIL {
            return false;
        }
        self.insert_before(to_insert, next);
        true
    }

    pub fn denylist(&mut self, instr: InstrId) {
        let id = self.get(instr);
        if id != NIL {
            self.items[id as usize].denylisted = true;
        }
    }

    fn insert_before(&mut self, item: ItemId, before: ItemId) {
        // New items always go on the express lane: find the next express node at or after
        // `before` and link in front of it.
        let mut cursor = before;
        while cursor != NIL && !self.items[cursor as usize].is_skip_node {
            cursor = self.items[cursor as usize].next;
        }
        self.items[item as usize].is_skip_node = true;
        if cursor == NIL {
            // After the last express node. (The seed leaves the old last express node's forward
            // link unset here, so the new node is never visited from the lane; we link it.)
            let last = self.last_skip;
            self.items[item as usize].prev_skip = last;
            self.items[item as usize].next_skip = NIL;
            if last != NIL {
                self.items[last as usize].next_skip = item;
            }
            self.last_skip = item;
        } else {
            let prev_skip = self.items[cursor as usize].prev_skip;
            self.items[item as usize].prev_skip = prev_skip;
            if prev_skip != NIL {
                self.items[prev_skip as usize].next_skip = item;
            }
            self.items[item as usize].next_skip = cursor;
            self.items[cursor as usize].prev_skip = item;
        }
        if self.first_skip == cursor {
            self.first_skip = item;
        }
        let prev = self.items[before as usize].prev;
        self.items[item as usize].prev = prev;
        self.items[item as usize].next = before;
        self.items[before as usize].prev = item;
        if prev != NIL {
            self.items[prev as usize].next = item;
        } else {
            self.first = item;
        }
        let hi = self.items[before as usize].position;
        let lo = if prev == NIL {
            0
        } else {
            self.items[prev as usize].position
        };
        if hi - lo >= 2 {
            self.items[item as usize].position = lo + (hi - lo) / 2;
        } else {
            self.renumber();
        }
    }

    fn renumber(&mut self) {
        self.renumberings += 1;
        let mut i = self.first;
        let mut k = 1u64;
        while i != NIL {
            self.items[i as usize].position = k * GAP;
            k += 1;
            i = self.items[i as usize].next;
        }
    }

    /// Checks the links of both lanes and the order of positions (tests and debug runs).
    pub fn check(&self) -> Result<(), String> {
        let mut i = self.first;
        let mut prev = NIL;
        let mut last_pos = 0u64;
        let mut skips = Vec::new();
        while i != NIL {
            let it = &self.items[i as usize];
            if it.prev != prev {
                return Err(format!("item {i}: broken back link"));
            }
            if it.position <= last_pos {
                return Err(format!("item {i}: position does not increase"));
            }
            last_pos = it.position;
            if it.is_skip_node {
                skips.push(i);
            }
            prev = i;
            i = it.next;
        }
        let mut lane = Vec::new();
        let mut s = self.first_skip;
        let mut prev = NIL;
        while s != NIL {
            if self.items[s as usize].prev_skip != prev {
                return Err(format!("express item {s}: broken back link"));
            }
            lane.push(s);
            prev = s;
            s = self.items[s as usize].next_skip;
        }
        if lane != skips {
            return Err(format!(
                "express lane {lane:?} differs from the skip nodes in list order {skips:?}"
            ));
        }
        Ok(())
    }
}

/// The earliest unplaced user of an instruction, asked once per operand of every clone (the
/// clone goes before it, so the operand's live range does not grow).
///
/// Scanning all users at each question was quadratic when an operand is read throughout the
/// computation (a parameter every block reads) and many clones read it. Past `SCAN_LIMIT`
/// users, an instruction's unplaced users are kept in a min-heap by position, built at the
/// first question. That stays exact because, during one walk:
/// - an item's position changes only when the list is renumbered, and then every heap is
///   dropped (order is kept by inserts, so the heap order holds between renumberings);
/// - placement only grows, and a user that stops reading the instruction (its operand was
///   rewired to a clone) never reads it again: both kinds are popped when they reach the top;
/// - the only users an instruction gains are clones that read it, which the caller reports
///   with [`EarliestUsers::add_user`] once they are in the list.
#[derive(Debug, Default)]
pub struct EarliestUsers {
    heaps: FxHashMap<InstrId, BinaryHeap<Reverse<(u64, ItemId)>>>,
    renumberings: u64,
}

impl EarliestUsers {
    /// Up to this many users, a scan is cheaper than a heap.
    const SCAN_LIMIT: usize = 32;

    /// The unplaced user of `op` (other than `except`) that comes first in `list`.
    pub fn earliest_unplaced(
        &mut self,
        list: &InstructionList,
        module: &Module,
        op: InstrId,
        except: InstrId,
    ) -> Option<ItemId> {
        if list.renumberings != self.renumberings {
            self.heaps.clear();
            self.renumberings = list.renumberings;
        }
        let users = module.users(op);
        let unplaced = |u: InstrId| -> Option<ItemId> {
            let it = list.get(u);
            (u != except && it != NIL && !list.item(it).placed).then_some(it)
        };
        let found = if !self.heaps.contains_key(&op) && users.len() <= Self::SCAN_LIMIT {
            users
                .iter()
                .filter_map(|&u| unplaced(u))
                .min_by_key(|&it| list.item(it).position)
        } else {
            let heap = self.heaps.entry(op).or_insert_with(|| {
                users
                    .iter()
                    .filter_map(|&u| unplaced(u))
                    .map(|it| Reverse((list.item(it).position, it)))
                    .collect()
            });
            loop {
                let Some(&Reverse((_, top))) = heap.peek() else {
                    break None;
                };
                let it = list.item(top);
                if !it.placed && module.operands(it.instr).contains(&op) {
                    break Some(top);
                }
                heap.pop();
            }
        };
        debug_assert_eq!(
            found,
            users
                .iter()
                .filter_map(|&u| unplaced(u))
                .min_by_key(|&it| list.item(it).position),
            "the earliest unplaced user of %{}",
            module.instr(op).name()
        );
        found
    }

    /// Records that `user` (an item in `list`) now reads `op`.
    pub fn add_user(&mut self, list: &InstructionList, op: InstrId, user: ItemId) {
        if list.renumberings != self.renumberings {
            self.heaps.clear();
            self.renumberings = list.renumberings;
        } else if let Some(heap) = self.heaps.get_mut(&op) {
            heap.push(Reverse((list.item(user).position, user)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<InstrId> {
        (0..n).map(InstrId::new).collect()
    }

    #[test]
    fn inserts_keep_order_lanes_and_positions() {
        let mut l = InstructionList::new(&ids(4));
        // Express lane: items 1 and 3.
        assert_eq!(l.promote_nodes_to_skip(|it| it.instr.index() % 2 == 1), 2);
        l.check().unwrap();
        let a = l.create_item(InstrId::new(10));
        l.insert_before_instructions(a, &[3, 2]);
        let names =
            |l: &InstructionList| -> Vec<usize> { l.order().iter().map(|i| i.index()).collect() };
        assert_eq!(names(&l), [0, 1, 10, 2, 3]);
        l.check().unwrap();
        let b = l.create_item(InstrId::new(11));
        assert!(l.insert_after_instructions(b, &[0, 1]));
        assert_eq!(names(&l), [0, 1, 11, 10, 2, 3]);
        l.check().unwrap();
        // Inserting before the first item makes the new one first on both lanes.
        let c = l.create_item(InstrId::new(12));
        l.insert_before_instructions(c, &[0]);
        assert_eq!(l.first(), c);
        assert_eq!(l.first_skip_node(), c);
        l.check().unwrap();
        // After the last item there is nothing to insert before.
        let d = l.create_item(InstrId::new(13));
        assert!(!l.insert_after_instructions(d, &[3]));
    }

    #[test]
    fn renumbers_when_positions_run_out() {
        let mut l = InstructionList::new(&ids(2));
        l.promote_nodes_to_skip(|_| true);
        // Always insert right before item 1: the gap halves each time.
        for k in 0..40 {
            let x = l.create_item(InstrId::new(100 + k));
            l.insert_before_instructions(x, &[1]);
            l.check().unwrap();
        }
        assert!(l.renumberings > 0);
        let order = l.order();
        assert_eq!(order.first(), Some(&InstrId::new(0)));
        assert_eq!(order.last(), Some(&InstrId::new(1)));
        assert_eq!(order.len(), 42);
    }

    #[test]
    fn node_after_the_last_express_node_is_reachable() {
        let mut l = InstructionList::new(&ids(3));
        l.promote_nodes_to_skip(|it| it.instr.index() == 0);
        let x = l.create_item(InstrId::new(5));
        l.insert_before_instructions(x, &[2]);
        l.check().unwrap();
        assert_eq!(l.next_skip_node(0), x);
    }
}
