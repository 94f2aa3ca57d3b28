//! The memory usage tracker of one computation: which buffers are live as the instructions
//! are placed one by one along the list, and what a rematerialization or a compression of an
//! item would save at the current program point.
//!
//! A *buffer* is a logical buffer of the tuple points-to analysis (or one made by a
//! rematerialization), with its defining item, size, whether it is live out of the computation,
//! whether it has indirect uses (an alias other than a bitcast or get-tuple-element reads it),
//! and its uses (user item, operand number, tuple index). A buffer is live from the placement of
//! its defining item until its last unfinished user is finished. Placement is two steps:
//! `begin_instruction` allocates the item's defined buffers, `end_instruction` frees operands
//! that just died and defined buffers nobody uses. Parameters and live-out buffers are owned by
//! the caller and count zero bytes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use smallvec::SmallVec;
use tessera_hlo::analysis::{BufferId as LogicalId, ShapeIndex, TuplePointsTo};
use tessera_hlo::{CompId, InstrId, Module, Opcode, Shape};

use super::list::{BufferList, InstructionList, ItemId, Read, ReadList, NIL};
use super::{RematError, RematMode};

/// One use of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ItemUse {
    pub user: ItemId,
    pub operand_number: u32,
    /// The tuple index of the buffer when it is an element at depth one (`{k}`).
    pub index: Option<usize>,
}

impl ItemUse {
    /// The use as its user keeps it.
    fn read(&self, buffer: u32) -> Read {
        Read {
            buffer,
            operand_number: self.operand_number,
            index: self.index,
        }
    }
}

pub type UsesList = SmallVec<[ItemUse; 3]>;

/// How many different items `uses` names (past a few, by sorting: a buffer read by every
/// block of a large computation has tens of thousands).
fn distinct_users(uses: &[ItemUse]) -> i64 {
    if uses.len() <= 32 {
        let mut distinct: SmallVec<[ItemId; 32]> = SmallVec::new();
        for u in uses {
            if !distinct.contains(&u.user) {
                distinct.push(u.user);
            }
        }
        distinct.len() as i64
    } else {
        let mut all: Vec<ItemId> = uses.iter().map(|u| u.user).collect();
        all.sort_unstable();
        all.dedup();
        all.len() as i64
    }
}

#[derive(Clone, Debug)]
pub struct Buffer {
    pub id: u32,
    pub defining: ItemId,
    pub size: i64,
    pub shape: Shape,
    pub live_out: bool,
    pub has_indirect_uses: bool,
    pub index: ShapeIndex,
    pub users: UsesList,
    pub unfinished_user_count: i64,
    /// Defined by a parameter: owned by the caller, zero bytes here.
    pub defined_by_parameter: bool,
}

/// A hasher for dense integer ids (a multiply and a rotate; SipHash costs more than the
/// tracker's own work on long computations).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// True for instructions that pass the buffers they use on to their users and that
/// rematerialization knows how to recreate.
pub fn is_supported_indirect_user(opcode: Opcode) -> bool {
    matches!(opcode, Opcode::Bitcast | Opcode::GetTupleElement)
}

pub struct Tracker<'f> {
    pub comp: CompId,
    pub list: InstructionList,
    size_fn: &'f dyn Fn(&Shape) -> i64,
    memory_usage: i64,
    in_progress: ItemId,
    pub mode: RematMode,
    pub buffers: Vec<Buffer>,
    /// Buffers that went from dead to live again (the fast search re-queues their items).
    pub revived: Vec<u32>,
}

impl<'f> Tracker<'f> {
    /// Builds the buffers of `comp` from the points-to analysis, for the items of `list`.
    pub fn new(
        module: &Module,
        points_to: &TuplePointsTo,
        comp: CompId,
        list: InstructionList,
        size_fn: &'f dyn Fn(&Shape) -> i64,
        mode: RematMode,
    ) -> Result<Tracker<'f>, RematError> {
        let mut t = Tracker {
            comp,
            list,
            size_fn,
            memory_usage: 0,
            in_progress: NIL,
            mode,
            buffers: Vec::new(),
            revived: Vec::new(),
        };
        let c = module.comp(comp);
        let root = c.root().ok_or_else(|| {
            RematError::Malformed(format!("computation {} has no root", c.name()))
        })?;
        let mut live_out = points_to.points_to(root).flattened();
        live_out.sort();
        let mut to_id: HashMap<LogicalId, u32, BuildHasherDefault<IdHasher>> = HashMap::default();
        let mut item = t.list.first();
        while item != NIL {
            let instr = t.list.item(item).instr;
            let ins = module.instr(instr);
            for &lb in points_to.defined_buffers(instr) {
                let logical = points_to.buffer(lb);
                let is_live_out = live_out.binary_search(&lb).is_ok();
                let id = if ins.opcode() == Opcode::While {
                    // A while defines no new memory: it reuses its operand's buffers.
                    let op = *ins.operands().first().ok_or_else(|| {
                        RematError::Malformed(format!("%{}: while without an operand", ins.name()))
                    })?;
                    let src = match points_to.points_to(op).buffers(&logical.index) {
                        [b] => *b,
                        other => {
                            return Err(RematError::Malformed(format!(
                                "%{}: the while operand at index {:?} is {} buffers, expected one",
                                ins.name(),
                                logical.index,
                                other.len()
                            )))
                        }
                    };
                    let id = *to_id.get(&src).ok_or_else(|| {
                        RematError::Malformed(format!(
                            "%{}: the while operand's buffer is not defined before it",
                            ins.name()
                        ))
                    })?;
                    let (uses, _) = get_users(&t.list, module, points_to, lb);
                    let b = &mut t.buffers[id as usize];
                    b.has_indirect_uses = true;
                    b.live_out |= is_live_out;
                    for u in uses {
                        if !t.buffers[id as usize]
                            .users
                            .iter()
                            .any(|x| x.user == u.user)
                        {
                            t.buffers[id as usize].unfinished_user_count += 1;
                            t.buffers[id as usize].users.push(u);
                            let user = t.list.item_mut(u.user);
                            user.buffers_used.push(id);
                            user.reads.push(u.read(id));
                        }
                    }
                    id
                } else {
                    let (uses, indirect) = get_users(&t.list, module, points_to, lb);
                    let id = t.new_buffer(
                        item,
                        logical.shape.clone(),
                        logical.index.clone(),
                        uses.clone(),
                        is_live_out,
                        indirect,
                        ins.opcode() == Opcode::Parameter,
                    );
                    t.list.item_mut(item).buffers_defined.push(id);
                    for u in uses {
                        let user = t.list.item_mut(u.user);
                        if !user.buffers_used.contains(&id) {
                            user.buffers_used.push(id);
                        }
                        user.reads.push(u.read(id));
                    }
                    id
                };
                to_id.insert(lb, id);
            }
            for lb in points_to.points_to(instr).flattened() {
                if let Some(&id) = to_id.get(&lb) {
                    t.list.item_mut(item).buffers_output.push(id);
                }
            }
            item = t.list.next(item);
        }
        Ok(t)
    }

    #[allow(clippy::too_many_arguments)]
    fn new_buffer(
        &mut self,
        defining: ItemId,
        shape: Shape,
        index: ShapeIndex,
        users: UsesList,
        live_out: bool,
        has_indirect_uses: bool,
        defined_by_parameter: bool,
    ) -> u32 {
        let id = self.buffers.len() as u32;
        let unfinished_user_count = distinct_users(&users);
        self.buffers.push(Buffer {
            id,
            defining,
            size: (self.size_fn)(&shape),
            shape,
            live_out,
            has_indirect_uses,
            index,
            users,
            unfinished_user_count,
            defined_by_parameter,
        });
        id
    }

    /// Back to the state `new` left: nothing placed, every buffer waiting for all its users.
    /// Only valid while the list holds the items `new` made (no insertions).
    pub fn reset(&mut self) {
        self.memory_usage = 0;
        self.in_progress = NIL;
        self.revived.clear();
        self.list.reset_placement();
        for b in &mut self.buffers {
            b.unfinished_user_count = distinct_users(&b.users);
        }
    }

    pub fn size_of(&self, shape: &Shape) -> i64 {
        (self.size_fn)(shape)
    }

    pub fn memory_usage(&self) -> i64 {
        self.memory_usage
    }

    pub fn in_progress(&self) -> ItemId {
        self.in_progress
    }

    /// Bytes a buffer takes in this computation (0 for parameters and live-out buffers).
    pub fn allocated_size(&self, b: u32) -> i64 {
        let b = &self.buffers[b as usize];
        if b.live_out || b.defined_by_parameter {
            0
        } else {
            b.size
        }
    }

    pub fn item_allocated_size(&self, item: ItemId) -> i64 {
        self.list
            .item(item)
            .buffers_defined
            .iter()
            .map(|&b| self.allocated_size(b))
            .sum()
    }

    pub fn is_placed(&self, instr: InstrId) -> bool {
        let i = self.list.get(instr);
        i != NIL && self.list.item(i).placed
    }

    fn is_finished(&self, item: ItemId) -> bool {
        self.list.item(item).placed && item != self.in_progress
    }

    pub fn is_in_use(&self, b: u32) -> bool {
        self.in_progress != NIL && self.list.item(self.in_progress).buffers_used.contains(&b)
    }

    pub fn is_currently_live(&self, b: u32) -> bool {
        let buf = &self.buffers[b as usize];
        self.list.item(buf.defining).placed && buf.unfinished_user_count > 0
    }

    /// Placed, with a user that is not placed yet.
    fn is_instruction_currently_live(&self, module: &Module, item: ItemId) -> bool {
        let it = self.list.item(item);
        it.placed && module.users(it.instr).iter().any(|&u| !self.is_placed(u))
    }

    /// Starts placing `item`: its defined buffers become live.
    pub fn begin_instruction(&mut self, item: ItemId) -> Result<(), RematError> {
        if self.in_progress != NIL {
            return Err(RematError::Internal(
                "begin_instruction while another instruction is in progress".into(),
            ));
        }
        self.in_progress = item;
        self.list.item_mut(item).placed = true;
        self.memory_usage += self.item_allocated_size(item);
        Ok(())
    }

    /// Finishes placing the current item: operands whose last user it was and defined
    /// buffers nobody uses are freed.
    pub fn end_instruction(&mut self) -> Result<(), RematError> {
        let item = self.in_progress;
        if item == NIL {
            return Err(RematError::Internal(
                "end_instruction without an instruction in progress".into(),
            ));
        }
        let used = self.list.item(item).buffers_used.clone();
        for b in used {
            let buf = &mut self.buffers[b as usize];
            buf.unfinished_user_count -= 1;
            if buf.unfinished_user_count < 0 {
                return Err(RematError::Internal(format!(
                    "buffer {b} has a negative unfinished user count"
                )));
            }
            if buf.unfinished_user_count == 0 {
                self.memory_usage -= self.allocated_size(b);
            }
        }
        let defined = self.list.item(item).buffers_defined.clone();
        for b in defined {
            if self.buffers[b as usize].unfinished_user_count == 0 {
                self.memory_usage -= self.allocated_size(b);
            }
        }
        self.in_progress = NIL;
        Ok(())
    }

    /// Bytes saved at this point by keeping `item`'s only output in `compact` form until its
    /// next use.
    pub fn memory_reduced_if_compressed(
        &self,
        module: &Module,
        item: ItemId,
        compact: &Shape,
    ) -> i64 {
        if self.can_compress_now(module, item) {
            let b = self.list.item(item).buffers_output[0];
            self.buffers[b as usize].size - (self.size_fn)(compact)
        } else {
            0
        }
    }

    /// True if compressing `item`'s only output could save bytes at this point: it is placed
    /// and finished, its output is live, and the current instruction does not read it.
    pub fn can_compress_now(&self, module: &Module, item: ItemId) -> bool {
        let it = self.list.item(item);
        if !it.placed || item == self.in_progress || it.buffers_output.len() != 1 {
            return false;
        }
        let b = it.buffers_output[0];
        self.is_currently_live(b)
            && !self.is_in_use(b)
            && self.is_instruction_currently_live(module, item)
    }

    /// Bytes saved at this point by recomputing the block `items` later: their live defined
    /// buffers are freed; dead operands they need (other than ones the block defines) become
    /// live across this point again.
    pub fn memory_reduced_if_rematerialized(&self, items: &[ItemId]) -> i64 {
        self.memory_reduced(items, true)
    }

    /// [`Tracker::memory_reduced_if_rematerialized`]; with `check_in_use` false, as if the
    /// current instruction used none of the block's buffers (the fast search's keys).
    pub fn memory_reduced(&self, items: &[ItemId], check_in_use: bool) -> i64 {
        let mut reduced = 0;
        for (k, &item) in items.iter().enumerate() {
            let it = self.list.item(item);
            if !it.placed || item == self.in_progress {
                return 0;
            }
            for &b in &it.buffers_defined {
                let buf = &self.buffers[b as usize];
                if buf.has_indirect_uses || buf.live_out || buf.index.len() > 1 {
                    return 0;
                }
                if check_in_use && self.is_in_use(b) {
                    return 0;
                }
                if self.is_currently_live(b) {
                    reduced += self.allocated_size(b);
                }
            }
            for &b in &it.buffers_used {
                if !self.is_currently_live(b) {
                    let def = self.buffers[b as usize].defining;
                    if !items[..k].contains(&def) {
                        reduced -= self.allocated_size(b);
                    }
                }
            }
        }
        reduced
    }

    /// True if some use of a buffer `item` defines is not placed yet.
    pub fn has_unplaced_users(&self, item: ItemId) -> bool {
        self.list.item(item).buffers_defined.iter().any(|&b| {
            self.buffers[b as usize]
                .users
                .iter()
                .any(|u| !self.list.item(u.user).placed)
        })
    }

    /// Every use of every buffer `item` defines.
    pub fn item_uses(&self, item: ItemId) -> UsesList {
        let mut out = UsesList::new();
        for &b in &self.list.item(item).buffers_defined {
            out.extend(self.buffers[b as usize].users.iter().copied());
        }
        out
    }

    /// Accounts for compressing `original`'s output into `compressed` (placed now) and
    /// uncompressing it in `uncompressed` for the remaining users.
    pub fn add_compress_instructions(
        &mut self,
        module: &Module,
        original: ItemId,
        compressed: ItemId,
        uncompressed: ItemId,
    ) -> Result<(), RematError> {
        let orig_shape = &module.instr(self.list.item(original).instr).shape;
        let comp_shape = module.instr(self.list.item(compressed).instr).shape.clone();
        let uncomp_shape = module
            .instr(self.list.item(uncompressed).instr)
            .shape
            .clone();
        self.memory_usage -= (self.size_fn)(orig_shape);
        self.memory_usage += (self.size_fn)(&comp_shape);
        let outputs = self.list.item(original).buffers_output.clone();
        if outputs.len() != 1 {
            return Err(RematError::Internal(
                "compressing an instruction with more than one output buffer".into(),
            ));
        }
        let ob = outputs[0];
        let mut placed = UsesList::new();
        let mut unplaced = UsesList::new();
        for u in self.buffers[ob as usize].users.clone() {
            if self.list.item(u.user).placed {
                if !self.is_finished(u.user) {
                    return Err(RematError::Internal(
                        "compressing a buffer the current instruction uses".into(),
                    ));
                }
                placed.push(u);
            } else {
                unplaced.push(u);
            }
        }
        placed.push(ItemUse {
            user: compressed,
            operand_number: 0,
            index: None,
        });
        let index = self.buffers[ob as usize].index.clone();
        self.buffers[ob as usize].users = placed;
        self.buffers[ob as usize].unfinished_user_count = 0;
        let cb = self.new_buffer(
            compressed,
            comp_shape,
            index.clone(),
            SmallVec::from_elem(
                ItemUse {
                    user: uncompressed,
                    operand_number: 0,
                    index: None,
                },
                1,
            ),
            false,
            false,
            false,
        );
        {
            let c = self.list.item_mut(compressed);
            c.reads = smallvec::smallvec![Read {
                buffer: ob,
                operand_number: 0,
                index: None,
            }];
            c.buffers_used = outputs.clone();
            c.buffers_output = BufferList::from_elem(cb, 1);
            c.buffers_defined.push(cb);
        }
        let ub = self.new_buffer(
            uncompressed,
            uncomp_shape,
            index,
            unplaced,
            false,
            false,
            false,
        );
        {
            let u = self.list.item_mut(uncompressed);
            u.reads = smallvec::smallvec![Read {
                buffer: cb,
                operand_number: 0,
                index: None,
            }];
            u.buffers_used = BufferList::from_elem(cb, 1);
            u.buffers_output = BufferList::from_elem(ub, 1);
            u.buffers_defined = BufferList::from_elem(ub, 1);
        }
        for u in self.buffers[ub as usize].users.clone() {
            self.list.item_mut(u.user).rename_read(ob, ub);
        }
        Ok(())
    }

    /// Accounts for `remat` recomputing `original` for all its unplaced uses (the graph is
    /// already rewired). `indirect_users` are the bitcasts and get-tuple-elements made for it.
    pub fn add_rematerialized_instruction(
        &mut self,
        module: &Module,
        original: ItemId,
        remat: ItemId,
        indirect_users: &[ItemId],
    ) -> Result<(), RematError> {
        if self.in_progress == NIL
            || !self.list.item(original).placed
            || self.list.item(remat).placed
        {
            return Err(RematError::Internal(
                "rematerialization bookkeeping out of order".into(),
            ));
        }
        let used = self.list.item(original).buffers_used.clone();
        let reads = self.list.item(original).reads.clone();
        self.list.item_mut(remat).buffers_used = used.clone();
        self.list.item_mut(remat).reads = reads.clone();
        for &b in &used {
            if self.buffers[b as usize].unfinished_user_count == 0 {
                self.memory_usage += self.allocated_size(b);
                self.revived.push(b);
            }
            let buf = &mut self.buffers[b as usize];
            buf.unfinished_user_count += 1;
            buf.users
                .extend(reads.iter().filter(|r| r.buffer == b).map(|r| ItemUse {
                    user: remat,
                    operand_number: r.operand_number,
                    index: r.index,
                }));
        }
        let defined = self.list.item(original).buffers_defined.clone();
        for old in defined {
            let mut placed = UsesList::new();
            let mut unplaced = UsesList::new();
            for u in self.buffers[old as usize].users.clone() {
                let ui = self.list.item(u.user);
                if ui.placed {
                    placed.push(u);
                } else if !is_supported_indirect_user(module.instr(ui.instr).opcode())
                    || indirect_users.contains(&u.user)
                {
                    unplaced.push(u);
                } else {
                    // An old bitcast / get-tuple-element whose users now read the new ones: it
                    // is dead and uses nothing any more.
                    let ui = self.list.item_mut(u.user);
                    if !ui.buffers_defined.is_empty() {
                        return Err(RematError::Internal(
                            "a pass-through instruction defines buffers".into(),
                        ));
                    }
                    ui.buffers_output.clear();
                    ui.buffers_used.clear();
                    ui.reads.clear();
                }
            }
            let ob = &mut self.buffers[old as usize];
            ob.users = placed;
            ob.unfinished_user_count = 0;
            let (shape, index) = (ob.shape.clone(), ob.index.clone());
            if ob.has_indirect_uses || ob.live_out {
                return Err(RematError::Internal(
                    "rematerializing a buffer with indirect uses or live out".into(),
                ));
            }
            self.memory_usage -= self.allocated_size(old);
            let nb = self.new_buffer(remat, shape, index, unplaced, false, false, false);
            self.list.item_mut(remat).buffers_defined.push(nb);
            for u in self.buffers[nb as usize].users.clone() {
                let ui = self.list.item_mut(u.user);
                ui.rename_read(old, nb);
                for x in ui.buffers_output.iter_mut() {
                    if *x == old {
                        *x = nb;
                    }
                }
            }
        }
        for &iu in indirect_users {
            let instr = module.instr(self.list.item(iu).instr);
            let src = self.list.get(instr.operand(0));
            let src_item = self.list.item(src).clone();
            let (used, output): (BufferList, BufferList) = match instr.opcode() {
                Opcode::Bitcast => {
                    if is_supported_indirect_user(module.instr(src_item.instr).opcode()) {
                        (
                            src_item.buffers_output.clone(),
                            src_item.buffers_output.clone(),
                        )
                    } else {
                        (
                            src_item.buffers_defined.clone(),
                            src_item.buffers_defined.clone(),
                        )
                    }
                }
                Opcode::GetTupleElement => {
                    let k = instr.attrs.tuple_index as usize;
                    let mut used = BufferList::new();
                    let mut output = BufferList::new();
                    for &b in &src_item.buffers_defined {
                        let idx = &self.buffers[b as usize].index;
                        if idx.len() == 1 && idx[0] == k {
                            output.push(b);
                        }
                        if idx.is_empty() {
                            used.push(b);
                        }
                    }
                    (used, output)
                }
                other => {
                    return Err(RematError::Internal(format!(
                        "unsupported pass-through instruction {}",
                        other.name()
                    )))
                }
            };
            let mut reads = ReadList::new();
            for &b in &used {
                let buf = &mut self.buffers[b as usize];
                buf.unfinished_user_count += 1;
                let u = ItemUse {
                    user: iu,
                    operand_number: 0,
                    index: None,
                };
                buf.users.push(u);
                reads.push(u.read(b));
            }
            let it = self.list.item_mut(iu);
            it.reads = reads;
            it.buffers_used = used;
            it.buffers_output = output;
        }
        Ok(())
    }

    /// Measures the list as it stands from scratch: the peak bytes over its program points
    /// (plus `callee(instr)` at each) and the first instruction where it is reached. Items whose
    /// instruction `gone` says was removed afterwards are left out, and so are their uses.
    ///
    /// This is not the running maximum of the walk: when a clone reads a buffer whose users
    /// were all finished earlier, the buffer is live again from its definition to the clone,
    /// i.e. also at program points the walk had already counted without it. Each buffer here
    /// is live from its definer to its last remaining user, at every point between.
    pub fn measure(
        &self,
        gone: impl Fn(InstrId) -> bool,
        callee: impl Fn(InstrId) -> i64,
    ) -> (i64, Option<InstrId>) {
        let LiveRanges { order, ranges, .. } =
            self.live_ranges(|it| gone(self.list.item(it).instr));
        let mut delta = vec![0i64; order.len() + 1];
        for &(start, end, size) in &ranges {
            delta[start] += size;
            delta[end + 1] -= size;
        }
        let mut live = 0i64;
        let mut peak = 0i64;
        let mut peak_at = None;
        for (k, &it) in order.iter().enumerate() {
            live += delta[k];
            let instr = self.list.item(it).instr;
            let now = live + callee(instr);
            if peak_at.is_none() || now > peak {
                peak = now;
                peak_at = Some(instr);
            }
        }
        (peak, peak_at)
    }

    /// For every item placed before the current one, the most bytes at any program point a
    /// copy placed right after it would be live at, were it kept live up to the current item:
    /// the point of the copy itself (what is live once the item has finished) and every placed
    /// point after the item, measured from scratch as [`Tracker::measure`] does (with
    /// `callee(instr)` added at each instruction; moved originals still count). Indexed by
    /// item id; `i64::MIN` for the current item and the items after it. Linear in the list.
    pub fn bytes_after_walked_items(&self, callee: impl Fn(InstrId) -> i64) -> Vec<i64> {
        let LiveRanges { order, ranges, pos } = self.live_ranges(|_| false);
        let capacity = pos.len();
        let at = |it: ItemId| pos.get(it as usize).copied().unwrap_or(u32::MAX);
        // Bytes allocated at point k, and bytes freed once point k has finished.
        let mut alloc = vec![0i64; order.len()];
        let mut free = vec![0i64; order.len()];
        for &(start, end, size) in &ranges {
            alloc[start] += size;
            free[end] += size;
        }
        let current = match at(self.in_progress) {
            u32::MAX => order.len(),
            p => p as usize,
        };
        // live_at[k]: bytes at point k; between[k]: bytes once point k has finished.
        let mut live_at = vec![0i64; current];
        let mut between = vec![0i64; current];
        let mut live = 0i64;
        for k in 0..current {
            live += alloc[k];
            live_at[k] = live + callee(self.list.item(order[k]).instr);
            live -= free[k];
            between[k] = live;
        }
        let mut out = vec![i64::MIN; capacity];
        let mut later = i64::MIN;
        for k in (0..current).rev() {
            out[order[k] as usize] = between[k].max(later);
            later = later.max(live_at[k]);
        }
        out
    }

    /// The placed items' program points and every buffer's live range on them (see
    /// [`LiveRanges`]). Shared by [`Tracker::measure`] and [`Tracker::bytes_after_walked_items`].
    fn live_ranges(&self, skip: impl Fn(ItemId) -> bool) -> LiveRanges {
        let mut order: Vec<ItemId> = Vec::with_capacity(self.list.len());
        let mut item = self.list.first();
        let mut capacity = 0usize;
        while item != NIL {
            if !skip(item) {
                order.push(item);
            }
            capacity = capacity.max(item as usize + 1);
            item = self.list.next(item);
        }
        let mut pos = vec![u32::MAX; capacity];
        for (k, &it) in order.iter().enumerate() {
            pos[it as usize] = k as u32;
        }
        let at = |it: ItemId| pos.get(it as usize).copied().unwrap_or(u32::MAX);
        let mut ranges = Vec::with_capacity(self.buffers.len());
        for (b, buf) in self.buffers.iter().enumerate() {
            let size = self.allocated_size(b as u32);
            let start = at(buf.defining);
            if size == 0 || start == u32::MAX {
                continue;
            }
            let end = buf
                .users
                .iter()
                .map(|u| at(u.user))
                .filter(|&p| p != u32::MAX)
                .fold(start, u32::max);
            ranges.push((start as usize, end as usize, size));
        }
        LiveRanges { order, ranges, pos }
    }

    /// Checks the tracker's invariants (expensive: tests and `check_invariants` runs).
    pub fn check(&self, module: &Module) -> Result<(), RematError> {
        let bad = |m: String| Err(RematError::Internal(format!("tracker invariant: {m}")));
        let name = |item: ItemId| module.instr(self.list.item(item).instr).name().to_string();
        let unique = |v: &BufferList| {
            let mut s = v.to_vec();
            s.sort();
            s.dedup();
            s.len() == v.len()
        };
        let mut item = self.list.first();
        while item != NIL {
            let it = self.list.item(item);
            if !unique(&it.buffers_defined) {
                return bad(format!("%{} defines a buffer twice", name(item)));
            }
            if !unique(&it.buffers_used) {
                return bad(format!("%{} uses a buffer twice", name(item)));
            }
            item = self.list.next(item);
        }
        for b in &self.buffers {
            if !self.list.item(b.defining).buffers_defined.contains(&b.id) {
                return bad(format!(
                    "%{} does not list buffer {} it defines",
                    name(b.defining),
                    b.id
                ));
            }
            let mut counted: SmallVec<[ItemId; 4]> = SmallVec::new();
            for u in &b.users {
                if !self.list.item(u.user).buffers_used.contains(&b.id) {
                    return bad(format!(
                        "%{} is a user of buffer {} but does not list it",
                        name(u.user),
                        b.id
                    ));
                }
                if !self.is_finished(u.user) && !counted.contains(&u.user) {
                    counted.push(u.user);
                }
            }
            if counted.len() as i64 != b.unfinished_user_count {
                return bad(format!(
                    "buffer {} (defined by %{}) counts {} unfinished users, has {}",
                    b.id,
                    name(b.defining),
                    b.unfinished_user_count,
                    counted.len()
                ));
            }
        }
        // Each item's reads are its uses in the buffers' users lists, in the same order, and
        // name exactly the buffers it lists as used.
        for item in 0..self.list.len() as ItemId {
            let it = self.list.item(item);
            let mut read: Vec<u32> = it.reads.iter().map(|r| r.buffer).collect();
            read.sort_unstable();
            read.dedup();
            let mut used = it.buffers_used.to_vec();
            used.sort_unstable();
            if read != used {
                return bad(format!(
                    "%{} reads buffers {read:?} but lists {used:?} as used",
                    name(item)
                ));
            }
        }
        let mut from_buffers: Vec<(ItemId, Read)> = Vec::new();
        for b in &self.buffers {
            from_buffers.extend(b.users.iter().map(|u| (u.user, u.read(b.id))));
        }
        let mut from_items: Vec<(ItemId, Read)> = Vec::new();
        for item in 0..self.list.len() as ItemId {
            from_items.extend(self.list.item(item).reads.iter().map(|&r| (item, r)));
        }
        from_buffers.sort_by_key(|&(item, r)| (item, r.buffer));
        from_items.sort_by_key(|&(item, r)| (item, r.buffer));
        if let Some(k) = (0..from_buffers.len().max(from_items.len()))
            .find(|&k| from_buffers.get(k) != from_items.get(k))
        {
            let item = from_buffers
                .get(k)
                .or(from_items.get(k))
                .map_or(NIL, |x| x.0);
            return bad(format!(
                "the reads of %{} differ from the buffers' users",
                name(item)
            ));
        }
        Ok(())
    }
}

/// The uses of a logical buffer through all its aliases, and whether any is indirect (through
/// an alias that is neither the definition nor a bitcast / get-tuple-element).
fn get_users(
    list: &InstructionList,
    module: &Module,
    points_to: &TuplePointsTo,
    lb: LogicalId,
) -> (UsesList, bool) {
    let logical = points_to.buffer(lb);
    let mut users = UsesList::new();
    // Past a few uses, repeats are found in a set: a buffer used by every block of a large
    // computation (a parameter read throughout) made the scan of `users` quadratic.
    let mut seen: Option<std::collections::HashSet<ItemUse>> = None;
    let mut indirect = false;
    let index = if logical.index.len() == 1 {
        Some(logical.index[0])
    } else {
        None
    };
    for alias in points_to.aliases(lb) {
        for &user in module.users(alias.instruction) {
            if TuplePointsTo::does_not_use_operand_buffer(
                module,
                alias.instruction,
                &alias.index,
                user,
            ) {
                continue;
            }
            if alias.instruction != logical.instruction
                && !is_supported_indirect_user(module.instr(alias.instruction).opcode())
            {
                indirect = true;
            }
            let ui = list.get(user);
            if ui == NIL {
                continue;
            }
            for (k, &op) in module.operands(user).iter().enumerate() {
                if op == alias.instruction {
                    let u = ItemUse {
                        user: ui,
                        operand_number: k as u32,
                        index,
                    };
                    let new = match &mut seen {
                        Some(set) => set.insert(u),
                        None => !users.contains(&u),
                    };
                    if new {
                        users.push(u);
                        if seen.is_none() && users.len() > 32 {
                            seen = Some(users.iter().copied().collect());
                        }
                    }
                }
            }
        }
    }
    (users, indirect)
}

/// Program points of the placed items and the buffers' live ranges over them.
struct LiveRanges {
    /// The placed items in list order (without the skipped ones): point k is `order[k]`.
    order: Vec<ItemId>,
    /// Every buffer of non-zero size as `(first point, last point, bytes)`: live from its
    /// definer to its last remaining user.
    ranges: Vec<(usize, usize, i64)>,
    /// Each item's point, indexed by item id; `u32::MAX` when skipped.
    pos: Vec<u32>,
}
