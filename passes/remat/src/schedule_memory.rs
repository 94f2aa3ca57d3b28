//! Memory accounting along a schedule, as XLA's rematerialization pass counts it.
//!
//! This is the accounting of `HloRematerialization::ComputePeakMemory` (its
//! `MemoryUsageTracker`), so that the schedulers, the rematerialization pass and `tessera memory`
//! agree on one number:
//!
//! - Buffers are the logical buffers of [`TuplePointsTo`]. A buffer is allocated when its
//!   defining instruction starts and freed when the last of its users (every instruction that
//!   reads it through any alias, see [`TuplePointsTo::buffer_uses`]) finishes. The memory *at* an
//!   instruction is measured between the two: its operands and its results are live together.
//!   A buffer nobody uses is freed right after its definition.
//! - A `while` defines no memory of its own: its buffers are its operand's buffers, which stay
//!   live until the while's users are done (XLA's tracker does the same).
//! - Parameters and live-out buffers (reachable from the root) are owned by the caller and count
//!   0 bytes inside the computation. The module's peak is the entry computation's peak plus the
//!   bytes of the entry's result shape (every buffer of it), as `HloRematerialization::Run`
//!   reports it; the entry's parameters are not counted ([`ModuleMemory::parameter_bytes`]
//!   reports them beside).
//! - At a call site in control-flow context (`call`, `while`, `conditional`, async ops) the
//!   peaks of the called computations are added to the caller's memory at that position (summed
//!   over the callees as XLA does, or the largest one with [`CalleeAccounting::Max`]). Embedded
//!   computations (fusion bodies, reduce/map/sort computations) add nothing: their values are not
//!   materialized as buffers.
//!
//! See docs/schedulers.md for how this differs from XLA's heap simulator.

use std::collections::HashMap;

use tessera_hlo::analysis::call_graph::instruction_call_context;
use tessera_hlo::analysis::{
    buffer_size::total_shape_size, computation_post_order, BufferId, CallContext, CallGraph,
    ShapeIndex, TuplePointsTo,
};
use tessera_hlo::{CompId, InstrId, Module, Opcode, Schedule, Shape};

use crate::schedule::{xla_post_order, ScheduleError, SizeFn};

/// How the peaks of a call site's computations combine at the call site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CalleeAccounting {
    /// The sum over all called computations (a while's condition and body both), as XLA's
    /// rematerialization pass counts them.
    #[default]
    Sum,
    /// The largest called computation (they never run at the same time), as XLA's list
    /// scheduler counts them.
    Max,
}

/// Options of the accounting. The default is XLA's rematerialization accounting;
/// [`MemoryOptions::heap_simulator`] is the measure the schedulers compare sequences by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryOptions {
    pub callees: CalleeAccounting,
    /// Let an elementwise instruction write its result into an operand buffer of the same size
    /// that dies there (XLA's heap simulator shares such buffers; the rematerialization tracker
    /// does not).
    pub reuse_operand_buffers: bool,
}

impl MemoryOptions {
    /// Closer to XLA's `HeapSimulator::MinimumMemoryForComputation`, which XLA's default
    /// scheduler compares its candidates by: dead operand buffers reused in place, the largest
    /// callee counted at a call site.
    pub fn heap_simulator() -> MemoryOptions {
        MemoryOptions {
            callees: CalleeAccounting::Max,
            reuse_operand_buffers: true,
        }
    }
}

/// A buffer as the accounting tracks it: one logical buffer, or several merged when a `while`
/// reuses its operand's buffers.
#[derive(Clone, Debug, PartialEq)]
pub struct TrackedBuffer {
    /// The logical buffer of the defining instruction.
    pub buffer: BufferId,
    /// Logical buffers of `while` instructions that are this same buffer.
    pub merged: Vec<BufferId>,
    /// The instruction that allocates it.
    pub defining: InstrId,
    pub index: ShapeIndex,
    pub shape: Shape,
    /// Bytes of the buffer by the size function.
    pub bytes: i64,
    /// Bytes it counts here: 0 for parameters and live-out buffers, `bytes` otherwise.
    pub allocated: i64,
    pub live_out: bool,
    pub is_parameter: bool,
    /// Distinct instructions that read it (the users of its merged buffers included).
    pub users: Vec<InstrId>,
    /// First and last positions where it is live (inclusive).
    pub start: usize,
    pub end: usize,
}

/// Memory of one computation along one sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputationMemory {
    pub comp: CompId,
    pub sequence: Vec<InstrId>,
    /// Bytes at each position: live buffers plus `callee_bytes` there.
    pub bytes: Vec<i64>,
    /// Bytes of the called computations at each position (0 where nothing is called).
    pub callee_bytes: Vec<i64>,
    /// The largest of `bytes` (0 for an empty sequence).
    pub peak_bytes: i64,
    /// First position where `peak_bytes` is reached.
    pub peak_position: Option<usize>,
    pub buffers: Vec<TrackedBuffer>,
}

impl ComputationMemory {
    /// Each instruction's position in `sequence`.
    pub fn positions(&self) -> HashMap<InstrId, usize> {
        self.sequence
            .iter()
            .enumerate()
            .map(|(k, &i)| (i, k))
            .collect()
    }

    /// Buffers that count bytes at position `p`, largest first (ties by position of definition,
    /// then index).
    pub fn live_at(&self, p: usize) -> Vec<&TrackedBuffer> {
        let mut v: Vec<&TrackedBuffer> = self
            .buffers
            .iter()
            .filter(|b| b.start <= p && p <= b.end && b.allocated > 0)
            .collect();
        v.sort_by(|a, b| {
            b.allocated
                .cmp(&a.allocated)
                .then(a.start.cmp(&b.start))
                .then(a.index.cmp(&b.index))
        });
        v
    }

    /// Buffers live at the peak, largest first.
    pub fn live_at_peak(&self) -> Vec<&TrackedBuffer> {
        self.peak_position
            .map(|p| self.live_at(p))
            .unwrap_or_default()
    }

    /// The instruction at the peak.
    pub fn peak_instruction(&self) -> Option<InstrId> {
        self.peak_position.map(|p| self.sequence[p])
    }
}

/// Memory of a whole module: one [`ComputationMemory`] per computation called in control-flow
/// context (callees first, the entry last).
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleMemory {
    pub entry: CompId,
    pub computations: Vec<ComputationMemory>,
    /// Bytes of every buffer of the entry's result shape.
    pub output_bytes: i64,
    /// Bytes of every buffer of the entry's parameters (not part of `peak_bytes`).
    pub parameter_bytes: i64,
    /// The entry computation's peak plus `output_bytes`.
    pub peak_bytes: i64,
    /// Computations that had no sequence in the schedule and were measured along XLA's
    /// post-order instead.
    pub unscheduled: Vec<CompId>,
}

impl ModuleMemory {
    pub fn computation(&self, comp: CompId) -> Option<&ComputationMemory> {
        self.computations.iter().find(|c| c.comp == comp)
    }

    pub fn entry_memory(&self) -> &ComputationMemory {
        self.computation(self.entry)
            .expect("the entry is always measured")
    }

    /// Peak of a measured computation (0 for one that is not measured).
    pub fn computation_peak(&self, comp: CompId) -> i64 {
        self.computation(comp).map_or(0, |c| c.peak_bytes)
    }
}

/// Bytes the called computations of `id` add at its position, from the peaks known so far
/// (`peaks[comp]`, dense by computation id; a missing peak counts 0).
pub fn callee_bytes(
    module: &Module,
    id: InstrId,
    peaks: &[Option<i64>],
    options: MemoryOptions,
) -> i64 {
    let ins = module.instr(id);
    if ins.called.is_empty() || instruction_call_context(ins.opcode()) != CallContext::ControlFlow {
        return 0;
    }
    let each = ins
        .called
        .iter()
        .map(|c| peaks.get(c.index()).copied().flatten().unwrap_or(0));
    match options.callees {
        CalleeAccounting::Sum => each.sum(),
        CalleeAccounting::Max => each.max().unwrap_or(0),
    }
}

/// Checks that `sequence` lists every instruction of `comp` once, each after its operands and
/// control predecessors.
pub fn check_sequence(
    module: &Module,
    comp: CompId,
    sequence: &[InstrId],
) -> Result<(), ScheduleError> {
    let c = module.comp(comp);
    let mut pos: HashMap<InstrId, usize> = HashMap::with_capacity(sequence.len());
    for (k, &id) in sequence.iter().enumerate() {
        match module.try_instr(id) {
            Some(i) if i.parent() == comp => {}
            _ => {
                return Err(ScheduleError::BadSequence {
                    computation: c.name().to_string(),
                    message: format!("position {k} is not an instruction of the computation"),
                })
            }
        }
        if pos.insert(id, k).is_some() {
            return Err(ScheduleError::BadSequence {
                computation: c.name().to_string(),
                message: format!("%{} appears twice", module.instr(id).name()),
            });
        }
    }
    for &id in c.instructions() {
        let Some(&p) = pos.get(&id) else {
            return Err(ScheduleError::BadSequence {
                computation: c.name().to_string(),
                message: format!("%{} is missing", module.instr(id).name()),
            });
        };
        let ins = module.instr(id);
        for &o in ins.operands().iter().chain(ins.control_predecessors()) {
            if pos.get(&o).is_some_and(|&q| q >= p) {
                return Err(ScheduleError::BadSequence {
                    computation: c.name().to_string(),
                    message: format!(
                        "%{} comes before its operand or control predecessor %{}",
                        ins.name(),
                        module.instr(o).name()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Memory of computation `comp` along `sequence` (which must be valid, see [`check_sequence`]),
/// with the peaks of called computations taken from `peaks` (dense by computation id).
pub fn computation_memory(
    module: &Module,
    points_to: &TuplePointsTo,
    comp: CompId,
    sequence: &[InstrId],
    size: SizeFn,
    peaks: &[Option<i64>],
    options: MemoryOptions,
) -> ComputationMemory {
    let n = sequence.len();
    let root = module.comp(comp).root();
    let live_out_set: Vec<BufferId> = root
        .map(|r| points_to.points_to(r).flattened())
        .unwrap_or_default();
    let is_live_out = |b: BufferId| live_out_set.binary_search(&b).is_ok();
    let mut pos_of: HashMap<InstrId, usize> = HashMap::with_capacity(n);
    for (k, &id) in sequence.iter().enumerate() {
        pos_of.insert(id, k);
    }
    let mut tracked: Vec<TrackedBuffer> = Vec::new();
    // Tracked buffer of each logical buffer met so far.
    let mut of_logical: HashMap<BufferId, usize> = HashMap::new();
    // Tracked buffers each position defines (allocates).
    let mut defined_at: Vec<Vec<usize>> = vec![Vec::new(); n];
    let unique_users = |b: BufferId| -> Vec<InstrId> {
        let mut u: Vec<InstrId> = points_to
            .buffer_uses(module, b)
            .into_iter()
            .map(|(user, _)| user)
            .collect();
        u.dedup();
        u
    };
    for (p, &id) in sequence.iter().enumerate() {
        let ins = module.instr(id);
        for &b in points_to.defined_buffers(id) {
            let lb = points_to.buffer(b);
            if ins.opcode() == Opcode::While {
                let source = ins
                    .operands()
                    .first()
                    .map(|&op| points_to.points_to(op).buffers(&lb.index))
                    .and_then(|s| match s {
                        [one] => of_logical.get(one).copied(),
                        _ => None,
                    });
                if let Some(t) = source {
                    let tb = &mut tracked[t];
                    tb.merged.push(b);
                    tb.live_out |= is_live_out(b);
                    for u in unique_users(b) {
                        if !tb.users.contains(&u) {
                            tb.users.push(u);
                        }
                    }
                    of_logical.insert(b, t);
                    continue;
                }
            }
            let bytes = size(&lb.shape);
            let is_parameter = ins.opcode() == Opcode::Parameter;
            of_logical.insert(b, tracked.len());
            defined_at[p].push(tracked.len());
            tracked.push(TrackedBuffer {
                buffer: b,
                merged: Vec::new(),
                defining: id,
                index: lb.index.clone(),
                shape: lb.shape.clone(),
                bytes,
                allocated: 0,
                live_out: is_live_out(b),
                is_parameter,
                users: unique_users(b),
                start: p,
                end: p,
            });
        }
    }
    // Users of each position, and the unfinished user counts.
    let mut used_at: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut unfinished: Vec<usize> = Vec::with_capacity(tracked.len());
    for (t, tb) in tracked.iter_mut().enumerate() {
        tb.allocated = if tb.live_out || tb.is_parameter {
            0
        } else {
            tb.bytes
        };
        let mut count = 0;
        for u in &tb.users {
            if let Some(&q) = pos_of.get(u) {
                used_at[q].push(t);
                count += 1;
            }
        }
        unfinished.push(count);
    }
    let mut freed = vec![false; tracked.len()];
    let mut bytes = Vec::with_capacity(n);
    let mut callee = Vec::with_capacity(n);
    let mut usage: i64 = 0;
    for (p, &id) in sequence.iter().enumerate() {
        let elementwise =
            options.reuse_operand_buffers && module.instr(id).opcode().is_elementwise();
        for &t in &defined_at[p] {
            if elementwise && tracked[t].allocated > 0 {
                // An operand buffer of the same size whose last use is here takes the result.
                let shared = used_at[p].iter().copied().find(|&o| {
                    !freed[o] && unfinished[o] == 1 && tracked[o].allocated == tracked[t].allocated
                });
                if let Some(o) = shared {
                    freed[o] = true;
                    tracked[o].end = p;
                    continue;
                }
            }
            usage += tracked[t].allocated;
        }
        let cb = callee_bytes(module, id, peaks, options);
        callee.push(cb);
        bytes.push(usage + cb);
        for &t in &used_at[p] {
            unfinished[t] -= 1;
            if unfinished[t] == 0 && !freed[t] {
                freed[t] = true;
                usage -= tracked[t].allocated;
                tracked[t].end = p;
            }
        }
        for &t in &defined_at[p] {
            if unfinished[t] == 0 && !freed[t] {
                freed[t] = true;
                usage -= tracked[t].allocated;
                tracked[t].end = p;
            }
        }
    }
    for (t, tb) in tracked.iter_mut().enumerate() {
        if !freed[t] {
            tb.end = n.saturating_sub(1);
        }
    }
    let peak_bytes = bytes.iter().copied().max().unwrap_or(0).max(0);
    let peak_position = bytes.iter().position(|&b| b == peak_bytes);
    ComputationMemory {
        comp,
        sequence: sequence.to_vec(),
        bytes,
        callee_bytes: callee,
        peak_bytes,
        peak_position,
        buffers: tracked,
    }
}

/// True for computations whose memory adds at their call sites (control-flow context) and the
/// entry.
pub fn is_measured(call_graph: &CallGraph, comp: CompId) -> bool {
    matches!(
        call_graph.context(comp),
        CallContext::ControlFlow | CallContext::Both
    )
}

/// Memory of `module` along `schedule` (or the module's own schedule when `None`): every
/// computation called in control-flow context, callees first. A computation without a sequence
/// is measured along XLA's post-order (listed in [`ModuleMemory::unscheduled`]).
pub fn module_memory(
    module: &Module,
    schedule: Option<&Schedule>,
    size: SizeFn,
    options: MemoryOptions,
) -> Result<ModuleMemory, ScheduleError> {
    let entry = module.entry().ok_or(ScheduleError::NoEntry)?;
    let points_to = TuplePointsTo::new(module);
    let call_graph = CallGraph::new(module);
    let schedule = schedule.or(module.schedule.as_ref());
    let mut peaks: Vec<Option<i64>> = vec![None; module.comp_capacity()];
    let mut computations = Vec::new();
    let mut unscheduled = Vec::new();
    for c in computation_post_order(module, false) {
        if c != entry && !is_measured(&call_graph, c) {
            continue;
        }
        let seq = match schedule.and_then(|s| s.sequences.get(&c)) {
            Some(s) => {
                check_sequence(module, c, s)?;
                s.clone()
            }
            None => {
                unscheduled.push(c);
                xla_post_order(module, c)
            }
        };
        let cm = computation_memory(module, &points_to, c, &seq, size, &peaks, options);
        peaks[c.index()] = Some(cm.peak_bytes);
        computations.push(cm);
    }
    let entry_comp = module.comp(entry);
    let output_bytes = entry_comp
        .root()
        .map_or(0, |r| total_shape_size(&module.instr(r).shape, size));
    let parameter_bytes = entry_comp
        .parameters()
        .map(|p| total_shape_size(&module.instr(p).shape, size))
        .sum();
    let entry_peak = peaks[entry.index()].unwrap_or(0);
    Ok(ModuleMemory {
        entry,
        computations,
        output_bytes,
        parameter_bytes,
        peak_bytes: entry_peak + output_bytes,
        unscheduled,
    })
}

/// The module's peak memory along `schedule` (XLA's rematerialization accounting, see the
/// module docs): a shorthand for [`module_memory`] with the default options.
pub fn peak_memory(
    module: &Module,
    schedule: &Schedule,
    size: SizeFn,
) -> Result<ModuleMemory, ScheduleError> {
    module_memory(module, Some(schedule), size, MemoryOptions::default())
}
